//! Signal handlers, alternate signal stacks, blocked and ignored signals, and interval
//! timers are restored.
mod proc_common;
use proc_common::scenario;

#[test]
fn signal_handlers_masks_and_altstack_survive_restart() {
    scenario("signals", &["40", "100"]);
}

#[test]
fn interval_timer_keeps_ticking_after_restart() {
    scenario("itimer", &["40", "100"]);
}

#[test]
fn signals_waiting_in_the_queue_come_back_in_order_with_their_values() {
    scenario("pending_signals", &["40", "100"]);
}

#[test]
fn posix_timers_come_back_with_their_ids_clocks_values_and_time_left() {
    scenario("posix_timers", &["40", "100"]);
}
