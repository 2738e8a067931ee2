//! Checkpoint → SIGKILL → restart of single- and multi-threaded C programs: memory (stack,
//! heap growing after restart, anonymous/shared/file mappings) and thread-local storage.
mod proc_common;
use proc_common::scenario;

#[test]
fn single_thread_counter_restarts_with_identical_output() {
    scenario("counter", &["40", "15"]);
}

#[test]
fn heap_keeps_growing_after_restart() {
    scenario("heap_grow", &["40", "15"]);
}

/// Shrinking the heap after a restart whose kernel break is not the program's (it is the
/// restorer's, without CAP_SYS_RESOURCE) must not corrupt it.
#[test]
fn heap_shrinks_and_grows_again_after_restart() {
    for _ in 0..3 {
        scenario("heap_trim", &["40", "10"]);
    }
}

#[test]
fn anonymous_shared_and_file_mappings_survive_restart() {
    scenario("mappings", &["40", "15"]);
}

#[test]
fn thread_local_storage_of_every_thread_survives_restart() {
    scenario("tls", &["40", "15"]);
}
