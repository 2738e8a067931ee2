//! Threads with mutexes, condition variables and joins; threads blocked in system calls
//! (read on a pipe, nanosleep, futex waits) at checkpoint time resume correctly.
mod proc_common;
use proc_common::scenario;

#[test]
fn threads_with_mutex_condvar_and_join_finish_after_restart() {
    scenario("threads_mutex", &["40", "100"]);
}

#[test]
fn thread_blocked_in_pipe_read_resumes_after_restart() {
    scenario("pipe_read", &["40", "100"]);
}

#[test]
fn thread_in_nanosleep_completes_without_eintr_after_restart() {
    scenario("nanosleep", &["40", "100"]);
}

#[test]
fn threads_in_futex_waits_wake_after_restart() {
    scenario("futex_wait", &["40", "100"]);
}
