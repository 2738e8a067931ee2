//! The application's memory as the proxy reaches it: cross-memory attach
//! ([`process_vm_readv(2)`](https://man7.org/linux/man-pages/man2/process_vm_readv.2.html)),
//! one copy straight between the application's buffer and the device memory mapped here.
//!
//! # Safety
//! The local side of every transfer is a Rust slice borrowed for the duration of the call,
//! so the kernel writes only into memory we own; the remote side is the application's
//! address, which the kernel validates (EFAULT), so a bad address is an error, never a fault
//! in this process.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

/// The application process.
#[derive(Debug)]
pub struct AppMemory {
    pid: libc::pid_t,
}

/// Largest single transfer the kernel is asked for (it may do less; we loop).
const CHUNK: usize = 1 << 30;
/// Transfers at least this large are split over several threads: cross-memory attach pins
/// and copies page by page in the calling thread, and one thread reaches only about half of
/// `memcpy` bandwidth; the application thread is idle meanwhile, so its core is free.
const PARALLEL_MIN: usize = 8 << 20;

fn workers() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4)
}

/// Split `len` bytes into `n` page-aligned pieces: (offset, length).
fn pieces(len: usize, n: usize) -> Vec<(usize, usize)> {
    let per = len.div_ceil(n).next_multiple_of(4096);
    (0..len)
        .step_by(per.max(1))
        .map(|o| (o, per.min(len - o)))
        .collect()
}

impl AppMemory {
    pub fn new(pid: u32) -> AppMemory {
        AppMemory {
            pid: pid as libc::pid_t,
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Read `buf.len()` bytes at `addr` in the application.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        let n = workers();
        if buf.len() < PARALLEL_MIN || n == 1 {
            return self.read_one(addr, buf);
        }
        let mut rest = &mut buf[..];
        let mut parts = Vec::new();
        for (off, len) in pieces(rest.len(), n) {
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(len);
            parts.push((addr + off as u64, head));
            rest = tail;
        }
        std::thread::scope(|s| {
            let handles: Vec<_> = parts
                .into_iter()
                .map(|(a, b)| s.spawn(move || self.read_one(a, b)))
                .collect();
            handles.into_iter().try_for_each(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("copy thread panicked")))
            })
        })
    }

    /// Write `data` at `addr` in the application.
    pub fn write(&self, addr: u64, data: &[u8]) -> io::Result<()> {
        let n = workers();
        if data.len() < PARALLEL_MIN || n == 1 {
            return self.write_one(addr, data);
        }
        std::thread::scope(|s| {
            let handles: Vec<_> = pieces(data.len(), n)
                .into_iter()
                .map(|(off, len)| {
                    s.spawn(move || self.write_one(addr + off as u64, &data[off..off + len]))
                })
                .collect();
            handles.into_iter().try_for_each(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("copy thread panicked")))
            })
        })
    }

    fn read_one(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let n = (buf.len() - done).min(CHUNK);
            let local = libc::iovec {
                iov_base: buf[done..].as_mut_ptr().cast(),
                iov_len: n,
            };
            let remote = libc::iovec {
                iov_base: (addr + done as u64) as *mut libc::c_void,
                iov_len: n,
            };
            // SAFETY: `local` describes `n` writable bytes of `buf`; see module docs.
            let r = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
            if r <= 0 {
                return Err(if r == 0 {
                    io::Error::from(io::ErrorKind::UnexpectedEof)
                } else {
                    io::Error::last_os_error()
                });
            }
            done += r as usize;
        }
        Ok(())
    }

    fn write_one(&self, addr: u64, data: &[u8]) -> io::Result<()> {
        let mut done = 0;
        while done < data.len() {
            let n = (data.len() - done).min(CHUNK);
            let local = libc::iovec {
                iov_base: data[done..].as_ptr() as *mut libc::c_void,
                iov_len: n,
            };
            let remote = libc::iovec {
                iov_base: (addr + done as u64) as *mut libc::c_void,
                iov_len: n,
            };
            // SAFETY: `local` describes `n` readable bytes of `data`; see module docs.
            let r = unsafe { libc::process_vm_writev(self.pid, &local, 1, &remote, 1, 0) };
            if r <= 0 {
                return Err(if r == 0 {
                    io::Error::from(io::ErrorKind::UnexpectedEof)
                } else {
                    io::Error::last_os_error()
                });
            }
            done += r as usize;
        }
        Ok(())
    }
}

/// Forks a copy-on-write snapshot of this process's memory (device memory of the emulated
/// device lives here at its device addresses): the child keeps memory as it is at the cut
/// while this process serves the program again, and the program's image writer reads device
/// memory from it by cross-memory attach. The child names the program as its tracer (Yama:
/// the writer is the program's child), closes every descriptor but its hold pipe (so nothing
/// waiting for another descriptor's end waits for it), and exits when the pipe's last writer
/// is gone: the program's image writer when done, or the program (or its writer) dying.
/// Returns the child's pid; a thread reaps it.
pub fn snapshot_holder(app_pid: u32, hold_fd: i32) -> std::result::Result<i32, String> {
    let path = format!("/proc/{app_pid}/fd/{hold_fd}");
    let hold = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| format!("cannot open the program's hold pipe {path}: {e}"))?;
    let fd = hold.as_raw_fd();
    // SAFETY: the child makes raw system calls only (prctl, close_range, read, _exit), which
    // are async-signal-safe, so the other threads' locks do not matter to it.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: as above; our own descriptors, a stack buffer.
        unsafe {
            libc::prctl(libc::PR_SET_PTRACER, app_pid as libc::c_ulong, 0, 0, 0);
            if fd > 0 {
                libc::syscall(libc::SYS_close_range, 0u32, (fd - 1) as u32, 0u32);
            }
            libc::syscall(libc::SYS_close_range, (fd + 1) as u32, u32::MAX, 0u32);
            let mut b = [0u8; 64];
            loop {
                let n = libc::read(fd, b.as_mut_ptr().cast(), b.len());
                if n == 0 || (n < 0 && *libc::__errno_location() != libc::EINTR) {
                    break;
                }
            }
            libc::_exit(0);
        }
    }
    drop(hold);
    std::thread::Builder::new()
        .name("crum-snapshot-reaper".into())
        .spawn(move || {
            let mut status = 0;
            // SAFETY: waits for our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
        })
        .map_err(|e| format!("cannot start the snapshot's reaper thread: {e}"))?;
    Ok(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_own_memory_by_address() {
        let app = AppMemory::new(std::process::id());
        let src = vec![5u8; 10000];
        let mut dst = vec![0u8; 10000];
        app.read(src.as_ptr() as u64, &mut dst).unwrap();
        assert_eq!(dst, src);
        let mut out = vec![0u8; 16];
        app.write(out.as_mut_ptr() as u64, &[9u8; 16]).unwrap();
        assert_eq!(std::hint::black_box(&out)[..], [9u8; 16]);
    }

    #[test]
    fn large_transfers_split_over_threads_arrive_intact() {
        let app = AppMemory::new(std::process::id());
        let src: Vec<u8> = (0..(PARALLEL_MIN * 2 + 12345))
            .map(|i| (i % 251) as u8)
            .collect();
        let mut dst = vec![0u8; src.len()];
        app.read(src.as_ptr() as u64, &mut dst).unwrap();
        assert!(dst == src);
        let mut back = vec![0u8; src.len()];
        app.write(back.as_mut_ptr() as u64, &src).unwrap();
        assert!(std::hint::black_box(&back)[..] == src[..]);
    }

    #[test]
    fn pieces_cover_the_range_exactly() {
        let p = pieces(10 * 4096 + 5, 3);
        assert_eq!(p.first().unwrap().0, 0);
        assert_eq!(p.iter().map(|x| x.1).sum::<usize>(), 10 * 4096 + 5);
        assert!(p.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0));
    }

    #[test]
    fn bad_remote_address_is_an_error_not_a_crash() {
        let app = AppMemory::new(std::process::id());
        let mut dst = vec![0u8; 64];
        assert!(app.read(8, &mut dst).is_err());
    }
}

