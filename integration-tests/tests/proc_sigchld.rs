//! Programs that handle their children themselves keep crum's image writer out of reach
//! (issue 17): one reaps any child from its SIGCHLD handler (`waitpid(-1, WNOHANG)` in a
//! loop, as shells and mpirun do), one sets SIGCHLD to SIG_IGN (the kernel then reaps its
//! children). Both are checkpointed (the checkpoint must succeed), killed and restarted, and
//! restarted again from a checkpoint of the restarted process; each checks its own state.
mod proc_common;
use proc_common::scenario;

#[test]
fn program_reaping_any_child_in_its_sigchld_handler_is_checkpointed() {
    scenario("sigchld_reap", &["40", "100"]);
}

#[test]
fn program_ignoring_sigchld_is_checkpointed() {
    scenario("sigchld_ignore", &["40", "100"]);
}
