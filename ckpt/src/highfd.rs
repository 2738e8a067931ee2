//! crum's own file descriptors live above the program's range: the program opens fd 3
//! first, as it would without crum. Every descriptor crum creates or inherits for itself
//! (the proxy channel, the control socket, the checkpoint-signal pipe) is moved to the
//! lowest free number at or above [`base`], close-on-exec, so that programs the program
//! executes do not inherit it.
//!
//! # Safety
//! `fcntl(F_DUPFD_CLOEXEC)` on a descriptor the caller owns; the new descriptor is owned
//! by the returned value and the old one closed exactly once.
#![allow(unsafe_code)]

use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd, RawFd};

/// The most crum keeps open at once above the base (channel, listener, signal pipe, a
/// connection, a checkpoint's writer pipe and pidfd, with room to spare).
const ROOM: u64 = 32;
/// The preferred base: below `FD_SETSIZE` (1024), so `select` on a crum fd would still work.
const PREFERRED: u64 = 1000;

/// Where crum's descriptors start: 1000, or lower when the soft `RLIMIT_NOFILE` limit leaves
/// no room there (never below 3).
pub fn base() -> i32 {
    // SAFETY: getrlimit writes into a live local.
    let mut rl: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } == 0 { rl.rlim_cur } else { 1024 };
    soft.saturating_sub(ROOM).clamp(3, PREFERRED) as i32
}

/// Moves the descriptor `fd` (owned by the caller) to a free number at or above [`base`],
/// close-on-exec, and closes `fd`. When that is impossible (descriptor limit reached) `fd`
/// stays where it is, marked close-on-exec. Returns the descriptor now in use.
pub fn move_high_raw(fd: RawFd) -> RawFd {
    if fd < 0 {
        return fd;
    }
    let base = base();
    if fd >= base {
        // SAFETY: F_SETFD on the caller's descriptor.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        return fd;
    }
    // SAFETY: duplicates the caller's descriptor; the duplicate is ours.
    let hi = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, base) };
    if hi < 0 {
        // SAFETY: as above.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        return fd;
    }
    // SAFETY: the original is the caller's, closed once here; `hi` replaces it.
    unsafe { libc::close(fd) };
    hi
}

/// A close-on-exec pipe, both ends moved above the program's range ([`move_high_raw`]):
/// (read end, write end), owned by the caller. Raw system calls only.
pub fn pipe_high() -> std::io::Result<(RawFd, RawFd)> {
    let mut p = [-1; 2];
    // SAFETY: pipe2 writes two descriptors into the live array.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((move_high_raw(p[0]), move_high_raw(p[1])))
}

/// Waits until `fd` is readable (a listening socket: a connection is waiting). Used instead of
/// blocking in `accept`, which reserves the lowest free descriptor number while it waits.
pub fn wait_readable(fd: &impl std::os::fd::AsRawFd) {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: poll on one live pollfd; EINTR and errors just return (the caller's accept
    // then blocks or fails as before).
    unsafe { libc::poll(&mut p, 1, -1) };
}

/// [`move_high_raw`] for an owned descriptor type (`UnixListener`, `UnixStream`, `File`, ...).
pub fn move_high<T: From<OwnedFd> + Into<OwnedFd>>(t: T) -> T {
    let fd: OwnedFd = t.into();
    let hi = move_high_raw(fd.into_raw_fd());
    // SAFETY: `hi` is the only descriptor of the object given to us (moved or kept).
    T::from(unsafe { OwnedFd::from_raw_fd(hi) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn moves_above_the_base_with_close_on_exec() {
        let f = std::fs::File::open("/dev/null").unwrap();
        let low = f.as_raw_fd();
        let f = move_high(f);
        let fd = f.as_raw_fd();
        assert!(fd >= base(), "fd {fd} below base {}", base());
        // SAFETY: F_GETFD on our own descriptor.
        assert_ne!(unsafe { libc::fcntl(fd, libc::F_GETFD) } & libc::FD_CLOEXEC, 0);
        // The low number is free again (unless a parallel test took it meanwhile).
        // SAFETY: F_GETFD on any number is harmless.
        let low_open = unsafe { libc::fcntl(low, libc::F_GETFD) } >= 0;
        assert!(!low_open || low != fd);
    }

    #[test]
    fn base_stays_below_the_descriptor_limit() {
        let b = base();
        // SAFETY: getrlimit into a live local.
        let mut rl: libc::rlimit = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) }, 0);
        assert!(b >= 3 && (b as u64) <= 1000 && (b as u64) < rl.rlim_cur.max(4), "base {b}");
    }
}
