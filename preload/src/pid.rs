//! The process's ids as the program knows them. A restarted process gets a new pid from the
//! kernel; the program keeps comparing against the one it started with (Python's asyncio
//! finds "no running event loop" when `getpid()` changed, fork detectors reseed or reset,
//! `kill(getpid(), …)` and `getpid() == gettid()` checks break). After a restart the agent
//! calls [`crum_set_pid_identity`] with the pid the program started with (`virt`) and the
//! one it has now (`real`); from then on:
//! - `getpid`, `gettid` (the main thread's), `getppid` (a child's view of its restarted
//!   parent), `getpgrp`, `getpgid`, `getsid` answer `virt` where the kernel says `real`;
//! - `kill`, `tgkill`, `sigqueue`, `getpgid`, `getsid` given `virt` (or `-virt`, a process
//!   group) act on `real`.
//!
//! A child the restarted process forks has its own pid (the kernel's) and sees its parent as
//! `virt`. What the kernel shows directly (`/proc/<pid>`, `/proc/self/status`, siginfo's
//! sender, `syscall(SYS_getpid)`) stays the real pid. Before any restart every call is the C
//! library's.
use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, Ordering::Relaxed};

static VIRT: AtomicI32 = AtomicI32::new(0);
static REAL: AtomicI32 = AtomicI32::new(0);

/// Set by the agent after a restart (not after one of a child: `real` is checked).
#[no_mangle]
pub extern "C" fn crum_set_pid_identity(virt: c_int, real: c_int) {
    REAL.store(real, Relaxed);
    VIRT.store(if virt == real { 0 } else { virt }, Relaxed);
}

/// The program's id for one the kernel gave.
fn to_program(id: c_int) -> c_int {
    let v = VIRT.load(Relaxed);
    if v != 0 && id == REAL.load(Relaxed) {
        v
    } else {
        id
    }
}

/// The kernel's id for one the program gave (`-id`: a process group).
fn to_kernel(id: c_int) -> c_int {
    let v = VIRT.load(Relaxed);
    if v == 0 {
        id
    } else if id == v {
        REAL.load(Relaxed)
    } else if id == -v {
        -REAL.load(Relaxed)
    } else {
        id
    }
}

fn raw(nr: libc::c_long) -> c_int {
    // SAFETY: getpid/gettid/getppid/getpgrp take no arguments and cannot fail.
    unsafe { libc::syscall(nr) as c_int }
}

/// The program's `getpid`.
#[no_mangle]
pub extern "C" fn getpid() -> libc::pid_t {
    to_program(raw(libc::SYS_getpid))
}

/// The program's `gettid` (the main thread's tid is the pid).
#[no_mangle]
pub extern "C" fn gettid() -> libc::pid_t {
    to_program(raw(libc::SYS_gettid))
}

/// The program's `getppid`.
#[no_mangle]
pub extern "C" fn getppid() -> libc::pid_t {
    to_program(raw(libc::SYS_getppid))
}

/// The program's `getpgrp`.
#[no_mangle]
pub extern "C" fn getpgrp() -> libc::pid_t {
    to_program(raw(libc::SYS_getpgrp))
}

// The calls below are system calls made here (no lookup of the C library's, so they stay
// async-signal-safe from the first call on): `kill` in a signal handler is common.

/// The program's `getpgid`.
#[no_mangle]
pub extern "C" fn getpgid(pid: libc::pid_t) -> libc::pid_t {
    // SAFETY: a system call with an integer argument.
    let r = unsafe { libc::syscall(libc::SYS_getpgid, to_kernel(pid)) } as c_int;
    if r < 0 {
        r
    } else {
        to_program(r)
    }
}

/// The program's `getsid`.
#[no_mangle]
pub extern "C" fn getsid(pid: libc::pid_t) -> libc::pid_t {
    // SAFETY: a system call with an integer argument.
    let r = unsafe { libc::syscall(libc::SYS_getsid, to_kernel(pid)) } as c_int;
    if r < 0 {
        r
    } else {
        to_program(r)
    }
}

/// The program's `kill`.
#[no_mangle]
pub extern "C" fn kill(pid: libc::pid_t, sig: c_int) -> c_int {
    // SAFETY: a system call with integer arguments.
    unsafe { libc::syscall(libc::SYS_kill, to_kernel(pid), sig) as c_int }
}

/// The program's `tgkill`.
#[no_mangle]
pub extern "C" fn tgkill(tgid: libc::pid_t, tid: libc::pid_t, sig: c_int) -> c_int {
    // SAFETY: a system call with integer arguments.
    unsafe { libc::syscall(libc::SYS_tgkill, to_kernel(tgid), to_kernel(tid), sig) as c_int }
}

/// The program's `sigqueue`: the `siginfo_t` the C library builds (`SI_QUEUE`, the sender's
/// pid and uid, the value), queued to the kernel's pid.
#[no_mangle]
pub extern "C" fn sigqueue(pid: libc::pid_t, sig: c_int, value: libc::sigval) -> c_int {
    // Layout of siginfo_t for SI_QUEUE on x86-64: signo, errno, code, pad, pid, uid, value.
    let mut info = [0u8; 128];
    let put = |info: &mut [u8; 128], at: usize, b: &[u8]| info[at..at + b.len()].copy_from_slice(b);
    put(&mut info, 0, &sig.to_ne_bytes());
    put(&mut info, 8, &libc::SI_QUEUE.to_ne_bytes());
    put(&mut info, 16, &raw(libc::SYS_getpid).to_ne_bytes());
    // SAFETY: getuid cannot fail.
    put(&mut info, 20, &unsafe { libc::getuid() }.to_ne_bytes());
    put(&mut info, 24, &(value.sival_ptr as usize).to_ne_bytes());
    // SAFETY: the kernel reads 128 bytes of the live siginfo.
    unsafe { libc::syscall(libc::SYS_rt_sigqueueinfo, to_kernel(pid), sig, info.as_ptr()) as c_int }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_map_both_ways_only_after_a_restart() {
        assert_eq!((to_program(500), to_kernel(500)), (500, 500));
        crum_set_pid_identity(100, 500);
        assert_eq!(to_program(500), 100);
        assert_eq!(to_program(501), 501);
        assert_eq!(to_kernel(100), 500);
        assert_eq!(to_kernel(-100), -500);
        assert_eq!(to_kernel(0), 0);
        assert_eq!(to_kernel(-1), -1);
        crum_set_pid_identity(500, 500);
        assert_eq!((to_program(500), to_kernel(500)), (500, 500));
    }
}
