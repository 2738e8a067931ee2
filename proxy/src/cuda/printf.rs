//! Device `printf` output of the real GPU, brought back to the application in order.
//!
//! The CUDA driver prints a kernel's `printf` output to the process's standard output at
//! synchronization points. In the proxy that would be the wrong process: the application's
//! own stdout may be buffered or redirected elsewhere, and the output would come out of
//! order. [`Capture`] replaces a descriptor (fd 1 in the proxy) with a pipe; a thread keeps the
//! pipe drained into memory (the driver must never block on a full pipe), and [`Capture::take`]
//! flushes C stdio, drains what is left and hands the bytes out, so the server can return them
//! with the reply of the synchronizing call, as the emulated device does.
//!
//! # Safety
//! The raw calls (`pipe2`, `dup2`, `fcntl`, `read`, `poll`, `fflush`) take descriptors this
//! module created and owns, or the target descriptor the caller hands over, and local buffers
//! with their true lengths.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

struct Inner {
    read_end: OwnedFd,
    buf: Mutex<Vec<u8>>,
}

impl Inner {
    /// Move what the pipe holds into the buffer (under its lock, so a caller that drained
    /// finds everything written so far).
    fn drain(&self) {
        let mut out = self.buf.lock().unwrap();
        let mut chunk = [0u8; 16 << 10];
        loop {
            // SAFETY: reading into a local buffer of its own length from our descriptor.
            let n = unsafe { libc::read(self.read_end.as_raw_fd(), chunk.as_mut_ptr().cast(), chunk.len()) };
            if n <= 0 {
                return;
            }
            out.extend_from_slice(&chunk[..n as usize]);
        }
    }
}

/// Output written to a captured descriptor.
pub struct Capture {
    inner: Arc<Inner>,
}

impl Capture {
    /// Replace descriptor `target` with the write end of a new pipe and start draining it.
    pub fn start(target: i32) -> io::Result<Capture> {
        let mut fds = [0i32; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 returns.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors are new and owned here; OwnedFd closes them once.
        let (read_end, write_end) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: dup2 atomically makes `target` refer to the pipe (whatever wrote to it now
        // writes into the pipe); the original write-end number is closed when `write_end` drops.
        if unsafe { libc::dup2(write_end.as_raw_fd(), target) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // Only the read end is non-blocking: the driver's writes must wait, never fail.
        // SAFETY: F_SETFL on our own descriptor.
        unsafe { libc::fcntl(read_end.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
        let inner = Arc::new(Inner { read_end, buf: Mutex::default() });
        let weak = Arc::downgrade(&inner);
        let fd = inner.read_end.as_raw_fd();
        std::thread::Builder::new().name("crum-printf".into()).spawn(move || loop {
            let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd; the descriptor stays open while `Inner` lives, and the
            // loop ends once it is gone.
            let _ = unsafe { libc::poll(&mut pfd, 1, 100) };
            match weak.upgrade() {
                Some(inner) => inner.drain(),
                None => return,
            }
        })?;
        Ok(Capture { inner })
    }

    /// A copy of everything written so far and not taken (a checkpoint saves it: the program
    /// still gets it from [`Capture::take`]).
    pub fn peek(&self) -> Vec<u8> {
        // SAFETY: as in `take`.
        unsafe { libc::fflush(std::ptr::null_mut()) };
        self.inner.drain();
        self.inner.buf.lock().unwrap().clone()
    }

    /// Everything written so far (at most `max` bytes; the rest stays queued).
    pub fn take(&self, max: usize) -> Vec<u8> {
        // The driver may print through C stdio: flush it into the pipe first.
        // SAFETY: fflush(NULL) flushes every open output stream; no pointer is passed.
        unsafe { libc::fflush(std::ptr::null_mut()) };
        self.inner.drain();
        let mut g = self.inner.buf.lock().unwrap();
        if g.len() <= max {
            std::mem::take(&mut *g)
        } else {
            let rest = g.split_off(max);
            std::mem::replace(&mut *g, rest)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devnull() -> OwnedFd {
        std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap().into()
    }

    fn write_all(fd: i32, data: &[u8]) {
        // SAFETY: writing a borrowed buffer of its own length.
        let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        assert_eq!(n, data.len() as isize);
    }

    #[test]
    fn output_written_to_the_captured_descriptor_is_taken_in_order() {
        let target = devnull();
        let c = Capture::start(target.as_raw_fd()).unwrap();
        write_all(target.as_raw_fd(), b"hello ");
        write_all(target.as_raw_fd(), b"world\n");
        assert_eq!(c.peek(), b"hello world\n");
        assert_eq!(c.take(1 << 20), b"hello world\n");
        assert_eq!(c.peek(), b"");
        assert_eq!(c.take(1 << 20), b"");
    }

    #[test]
    fn more_than_a_pipe_holds_does_not_block_the_writer() {
        let target = devnull();
        let c = Capture::start(target.as_raw_fd()).unwrap();
        let data: Vec<u8> = (0..(1usize << 20)).map(|i| (i % 251) as u8).collect();
        for chunk in data.chunks(64 << 10) {
            write_all(target.as_raw_fd(), chunk);
        }
        let mut got = c.take(300_000);
        assert_eq!(got.len(), 300_000);
        got.extend(c.take(usize::MAX));
        assert!(got == data);
    }
}
