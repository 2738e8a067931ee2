//! Kernel objects of event loops: epoll (its interest list with each watch's events and
//! data, edge-triggered and one-shot entries), eventfd (counter, semaphore mode), timerfd
//! (armed, periodic) and signalfd (its mask). The program checks all of them from inside at
//! every step; checkpointed, killed, restarted, and restarted again from a checkpoint of the
//! restarted process.
mod proc_common;
use proc_common::*;

#[test]
fn an_epoll_event_loop_with_eventfd_timerfd_and_signalfd_survives_restart() {
    scenario("event_loop", &["40", "100"]);
}

/// inotify: watches on a directory, a file and a link itself (IN_DONT_FOLLOW) with a gap in
/// their numbers come back with the same watch descriptors and masks, found again by the
/// paths the program added them by; the instance keeps O_NONBLOCK.
#[test]
fn inotify_watches_come_back_with_their_numbers_and_deliver_events() {
    scenario("inotify", &["40", "100"]);
}

/// What crum cannot carry is named when the image is written: events not read yet (a
/// warning; `--strict` writes no image), and a watch whose path crum never saw (added by
/// the raw system call: the image is written, the restart refuses naming it).
#[test]
fn inotify_events_waiting_and_watches_of_unknown_path_are_named_at_checkpoint() {
    let sb = Sandbox::new();
    let prog = build_c("inotify");
    let mut p = run_under_crum(&sb, &prog, &["4000", "10", "queue"], &[], "run.out");
    p.wait_lines(3);
    let c = checkpoint_output_with(&sb, p.pid(), &[]);
    let err = String::from_utf8_lossy(&c.stderr);
    assert!(c.status.success(), "{err}");
    assert!(err.contains("bytes of inotify events not read yet"), "queued events not named: {err}");
    let c = checkpoint_output_with(&sb, p.pid(), &["--strict"]);
    assert!(!c.status.success(), "--strict wrote an image: {}", String::from_utf8_lossy(&c.stderr));
    assert_eq!(sb.list_images().len(), 1);
    // The image restarts (without the event that was waiting: the program, which expects it,
    // says so).
    let img = sb.list_images().remove(0);
    p.kill9();
    let mut r = restart(&sb, &img, "restart.out");
    r.wait_exit();
    assert!(r.output().contains("FAIL: step") && r.output().contains("not wd 4 mask 0x4"), "{}", r.output());

    let sb = Sandbox::new();
    let mut p = run_under_crum(&sb, &prog, &["4000", "10", "raw"], &[], "run.out");
    p.wait_lines(3);
    let c = checkpoint_output_with(&sb, p.pid(), &[]);
    let err = String::from_utf8_lossy(&c.stderr);
    assert!(err.contains("anon_inode:inotify") && err.contains("by a path crum does not know"), "raw watch not named: {err}");
    let img = sb.list_images().remove(0);
    p.kill9();
    let mut r = restart(&sb, &img, "restart.out");
    assert_eq!(r.wait_exit(), 1);
    assert!(r.stderr().contains("by a path crum does not know"), "{}", r.stderr());
    assert!(r.output().is_empty());
}

/// pidfds of the process itself (and of its main thread, `PIDFD_THREAD`) are opened again on
/// the restarted process: signals sent through them arrive, they poll as a live process's,
/// their fdinfo names the process's own pid, and `PIDFD_NONBLOCK` stays.
#[test]
fn pidfds_of_the_process_itself_name_the_restarted_process() {
    scenario("pidfd_self", &["40", "100"]);
}
