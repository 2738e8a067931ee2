//! Kernel objects of event loops: epoll (its interest list with each watch's events and
//! data, edge-triggered and one-shot entries), eventfd (counter, semaphore mode), timerfd
//! (armed, periodic) and signalfd (its mask). The program checks all of them from inside at
//! every step; checkpointed, killed, restarted, and restarted again from a checkpoint of the
//! restarted process.
mod proc_common;
use proc_common::*;

#[test]
fn an_epoll_event_loop_with_eventfd_timerfd_and_signalfd_survives_restart() {
    scenario("event_loop", &["40", "15"]);
}
