//! The end of a program whose last thread leaves with a raw `exit` system call (not
//! `exit_group`): CRIU's zdtm `seccomp_strict`, whose only thread may make no other call
//! under `SECCOMP_MODE_STRICT`, or a program whose threads all end by themselves. Without
//! crum the process ends with its last thread, and its status is the code that thread gave;
//! crum's own threads (agent, control) would keep it alive for ever. The agent looks
//! ([`WATCH`]) whether the main thread has ended; once no thread of the program is left it
//! ends the process with the status the kernel would have given ([`status`]).
//!
//! # Safety
//! Raw system calls on live locals; a function pointer looked up with `dlsym` at start and
//! called with the signature `libcrum_libc.so` gives it.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

/// How often the agent looks whether the program's main thread has ended.
pub const WATCH: Duration = Duration::from_millis(200);

/// `libcrum_libc.so`'s `crum_last_exit_code` (0: not loaded).
static LAST_EXIT: AtomicUsize = AtomicUsize::new(0);

/// Looks up what [`status`] needs (at start: `dlsym` takes the dynamic linker's lock).
pub fn resolve() {
    // SAFETY: dlsym in the global scope with a NUL-terminated name (null where absent).
    LAST_EXIT.store(unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"crum_last_exit_code".as_ptr()) } as usize, Relaxed);
}

/// The fields after the command name of a /proc stat text.
fn stat_fields(text: &str) -> Vec<&str> {
    text.rfind(')').map(|b| text[b + 1..].split_whitespace().collect()).unwrap_or_default()
}

/// Whether no thread of the program is left: its main thread has ended (a zombie: the
/// process lives on through other threads) and every thread still running is crum's (named
/// `crum-…`: the agent's, the control thread, the interposer's).
pub fn program_gone() -> bool {
    let me = crate::threads::real_pid();
    let leader = std::fs::read_to_string(format!("/proc/self/task/{me}/stat")).unwrap_or_default();
    if stat_fields(&leader).first() != Some(&"Z") {
        return false;
    }
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return false };
    for t in tasks.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if tid == me {
            continue;
        }
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.starts_with("crum-") {
            continue;
        }
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        if !matches!(stat_fields(&stat).first(), Some(&"Z") | Some(&"X") | None) {
            return false;
        }
    }
    true
}

/// The wait status the kernel would give the process had the program's last thread been
/// its last: that of the program's last `syscall(SYS_exit, code)` (recorded by
/// `libcrum_libc.so`), else the main thread's (`/proc/self/task/<pid>/stat`, field 52: its
/// exit code, or the signal that ended it alone — `SIGKILL` for a call that
/// `SECCOMP_MODE_STRICT` forbids).
pub fn status() -> i32 {
    let f = LAST_EXIT.load(Relaxed);
    if f != 0 {
        // SAFETY: `crum_last_exit_code` of `libcrum_libc.so`: no arguments, returns an int.
        let v = unsafe { std::mem::transmute::<usize, extern "C" fn() -> i32>(f)() };
        if v & 0x100 != 0 {
            return (v & 0xff) << 8;
        }
    }
    let me = crate::threads::real_pid();
    let leader = std::fs::read_to_string(format!("/proc/self/task/{me}/stat")).unwrap_or_default();
    // Field 52 is the 50th after the command name.
    stat_fields(&leader).get(49).and_then(|v| v.parse::<i32>().ok()).unwrap_or(0)
}

/// Ends the process with the wait status `status`, as the kernel would have: its exit code,
/// or killed by its signal (default action, unblocked).
pub fn end(status: i32) -> ! {
    let sig = status & 0x7f;
    if sig != 0 {
        // SAFETY: the signal's default action for this process, unblocked in this thread, then
        // the signal to this process: it ends by it (the raw calls: no wrapper of the program's).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::syscall(libc::SYS_kill, crate::threads::real_pid(), sig);
        }
    }
    // SAFETY: exit_group ends every thread of the process; it does not return.
    unsafe { libc::syscall(libc::SYS_exit_group, (status >> 8) & 0xff) };
    unreachable!("exit_group returned")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_start_after_the_command_name() {
        let f = stat_fields("12 (a b) c) Z 1 2 3");
        assert_eq!(f, vec!["Z", "1", "2", "3"]);
    }

    #[test]
    fn a_running_program_is_not_gone() {
        assert!(!program_gone());
    }
}
