//! The restarted program's side of a lazy restart (`crum_restart::lazy` has the design):
//! the socket to the page server (`C` asks it for every page now, `D` says they are in) and this process's copy of the userfaultfd, kept above the
//! program's descriptors and never saved in an image.
//!
//! [`complete`] waits until every page of the image is in: a checkpoint calls it before
//! anything else (the forked writer's copy of memory would not have the registrations, and
//! pages not yet served would be written as zeros), and so does `libcrum_libc.so`'s `fork`
//! (through `crum_lazy_complete`: the child would see missing pages as zeros). While it
//! waits the program runs on and the server keeps serving its faults; a server that dies
//! meanwhile makes its watchdog kill the program, and an end without the done byte is an
//! error here.
//!
//! # Safety
//! `send`/`read` of one byte and `close` of the two descriptors this module owns.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicI32, Ordering::*};
use std::sync::Mutex;

static DONE_FD: AtomicI32 = AtomicI32::new(-1);
static UFFD: AtomicI32 = AtomicI32::new(-1);
/// One waiter reads the pipe; the others wait for it here.
static WAIT: Mutex<()> = Mutex::new(());

/// Takes the descriptors the restorer left (restart information): moved into crum's range,
/// close-on-exec, excluded from images.
pub fn adopt(done_fd: i32, uffd: i32) {
    let (d, u) = (crate::highfd::move_high_raw(done_fd), crate::highfd::move_high_raw(uffd));
    crate::agent::exclude_fd(d);
    crate::agent::exclude_fd(u);
    UFFD.store(u, SeqCst);
    DONE_FD.store(d, SeqCst);
}

/// Whether pages of the image may still be missing.
pub fn pending() -> bool {
    DONE_FD.load(SeqCst) >= 0
}

/// Waits until the page server has put every page of the image in place, then lets go of
/// the lazy restart's descriptors. Ok at once when the restart was eager or is complete.
pub fn complete() -> Result<(), String> {
    if !pending() {
        return Ok(());
    }
    let _g = WAIT.lock().unwrap_or_else(|e| e.into_inner());
    let fd = DONE_FD.load(SeqCst);
    if fd < 0 {
        return Ok(());
    }
    let t = std::time::Instant::now();
    // Everything now (a server holding off prefetching starts; harmless otherwise).
    // SAFETY: sends one byte from a static to our socket.
    unsafe { libc::send(fd, b"C".as_ptr().cast(), 1, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
    let mut b = 0u8;
    let res = loop {
        // SAFETY: reads one byte into a live local from our pipe.
        let n = unsafe { libc::read(fd, (&mut b as *mut u8).cast(), 1) };
        if n == 1 && b == b'D' {
            break Ok(());
        }
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        break Err("the lazy restart's page server ended before every page of the image was read".to_string());
    };
    if res.is_ok() {
        tracing::info!(waited_ms = t.elapsed().as_millis() as u64, "lazy restart complete");
        let u = UFFD.swap(-1, SeqCst);
        DONE_FD.store(-1, SeqCst);
        for f in [fd, u] {
            // SAFETY: our descriptors, closed once (swapped out above).
            unsafe { libc::close(f) };
            crate::agent::include_fd(f);
        }
    }
    res
}
