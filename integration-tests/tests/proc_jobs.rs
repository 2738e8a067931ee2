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

/// The children of `pid`, as the kernel lists them.
fn children_of(pid: u32) -> Vec<u32> {
    let t = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    t.split_whitespace().filter_map(|w| w.parse().ok()).collect()
}

#[test]
fn checkpointing_a_member_checkpoints_its_job_and_killing_it_all_loses_nothing() {
    let sb = Sandbox::new();
    let prog = build_c("job_tree");
    let expected = expected_output(&sb, &prog, &["30", "40"]);
    let mut p = run_under_crum(&sb, &prog, &["30", "40"], &[], "run.out");
    p.wait_lines(3);
    let workers = children_of(p.pid());
    assert_eq!(workers.len(), 2, "{workers:?}");
    let out = checkpoint_output(&sb, workers[1]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains(&format!("process {} belongs to the job of process {}", workers[1], p.pid())), "{err}");
    let image = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let manifest = read(&image.join("job.json"));
    for w in &workers {
        assert!(manifest.contains(&format!("\"p-{w}\"")), "worker {w} missing from {manifest}");
    }
    p.kill9();
    for w in workers {
        // SAFETY: kill of a test's own process.
        unsafe { libc::kill(w as i32, libc::SIGKILL) };
    }
    let before = p.output();
    let mut r = restart(&sb, &image, "restart.out");
    assert_eq!(r.wait_exit(), 0, "{}", r.stderr());
    assert_continues(&expected, 0, &before, &r.output(), true, "job restarted from a member's checkpoint");
}

#[test]
fn pipes_between_the_processes_of_a_job_keep_their_bytes_in_flight() {
    scenario("job_pipeline", &["40", "40"]);
}

#[test]
fn a_child_forked_without_exec_is_a_member_of_its_job() {
    scenario("job_pipeline", &["40", "40", "fork"]);
}
