//! Jobs (issue 17): a process and the descendants it started under crum are checkpointed as
//! one image (a manifest and one part per process) and restarted as the same tree; the pids
//! the programs know keep naming the same processes (`waitpid` of a worker by the pid fork
//! gave, `kill`, `/proc/<pid>`, `getppid`).
mod proc_common;
use proc_common::*;

#[test]
fn a_tree_of_exec_children_comes_back_as_one_job() {
    scenario("job_tree", &["40", "40"]);
}
