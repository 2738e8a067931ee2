//! Starts the checkpoint agent from the library's constructor, for every program run under
//! `crum run` (`CRUM_RUN=1`) — CUDA or not. Device state plugs into checkpoints through
//! `crum_ckpt::agent::set_hooks`.
//!
//! The constructor also takes over the proxy channel `crum run` passed in `CRUM_CHANNEL`:
//! moved above the program's fd range and close-on-exec (`crum_ckpt::highfd`), excluded from
//! images, and the variable removed, so that programs this one executes neither inherit the
//! descriptor nor see a number that names nothing in them.
//!
//! A program that executes another program in its own process (`exec` without `fork`: a
//! launcher, a shell's `exec`) stays under `crum run`: `libcrum_libc.so`'s exec wrappers
//! clear close-on-exec on the channel for the call ([`crum_exec_channel`]) when the caller
//! is the process that holds it, and the new image's constructor finds it again by its
//! memfd name (the variable is gone by then).
//!
//! # Safety
//! The constructor is a plain `extern "C" fn` placed in `.init_array`; it runs once, on the
//! main thread, after libc is initialised and before `main`.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicI32, Ordering::SeqCst};

/// The channel descriptor taken over from `CRUM_CHANNEL` (-1: none).
static CHANNEL_FD: AtomicI32 = AtomicI32::new(-1);
/// The process that holds [`CHANNEL_FD`] (a forked child does not: it must not keep it
/// across its own exec).
static CHANNEL_PID: AtomicI32 = AtomicI32::new(0);
/// The name `Channel::create` gives the memfd, as `/proc/self/fd` shows it.
const CHANNEL_LINK: &str = "/memfd:crum-channel";

/// The proxy channel `crum run` handed to this process, if any.
pub fn channel_fd() -> Option<i32> {
    let fd = CHANNEL_FD.load(SeqCst);
    (fd >= 0).then_some(fd)
}

/// Makes `fd` the channel this process holds (taken over at start, or a restart's new one).
pub fn set_channel_fd(fd: i32) {
    CHANNEL_FD.store(fd, SeqCst);
    CHANNEL_PID.store(crum_ckpt::threads::real_pid(), SeqCst);
}

/// The channel descriptor if this process holds one and is the process that took it over
/// (not a forked child), else -1. `libcrum_libc.so`'s exec wrappers keep it open across an
/// exec of this very process. Async-signal-safe (atomics and getpid only).
#[no_mangle]
pub extern "C" fn crum_exec_channel() -> libc::c_int {
    let fd = CHANNEL_FD.load(SeqCst);
    if fd >= 0 && CHANNEL_PID.load(SeqCst) == crum_ckpt::threads::real_pid() {
        fd
    } else {
        -1
    }
}

/// The channel an exec of this process kept open (see [`crum_exec_channel`]): the memfd
/// named like `Channel::create`'s among the open descriptors. Only under `crum run`.
fn inherited_channel() -> Option<i32> {
    if std::env::var_os("CRUM_RUN").is_none_or(|v| v != "1") {
        return None;
    }
    std::fs::read_dir("/proc/self/fd").ok()?.flatten().find_map(|e| {
        let fd = e.file_name().to_str()?.parse::<i32>().ok()?;
        let target = std::fs::read_link(e.path()).ok()?;
        target.to_str()?.starts_with(CHANNEL_LINK).then_some(fd)
    })
}

fn adopt_channel() {
    let fd = match std::env::var_os(crum_wire::ENV_CHANNEL) {
        Some(v) => {
            // Before main, on the only thread: nothing reads the environment concurrently.
            std::env::remove_var(crum_wire::ENV_CHANNEL);
            let Some(fd) = v.to_str().and_then(|s| s.parse::<i32>().ok()) else { return };
            fd
        }
        None => match inherited_channel() {
            Some(fd) => fd,
            None => return,
        },
    };
    // SAFETY: F_GETFD on any number is harmless.
    if fd < 0 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return;
    }
    let fd = crum_ckpt::highfd::move_high_raw(fd);
    set_channel_fd(fd);
    // The interposer's restore hook builds a new channel: never save or restore this one.
    crum_ckpt::agent::exclude_fd(fd);
}

extern "C" fn crum_agent_ctor() {
    // A panic must not unwind into the dynamic loader.
    let _ = std::panic::catch_unwind(|| {
        adopt_channel();
        crate::own_proxy::capture();
        crate::ckpt::install();
        crum_ckpt::agent::start_from_env();
    });
}

#[used]
#[link_section = ".init_array"]
static AGENT_CTOR: extern "C" fn() = crum_agent_ctor;

/// Ends crum's threads so that the program is single-threaded again if it was before crum
/// (`unshare`/`setns` of a user or mount namespace need that); called by `libcrum_libc.so`'s
/// wrappers of those functions. Returns 1 if threads were ended (then call
/// [`crum_threads_resume`] after the system call), 0 if there were none.
#[no_mangle]
pub extern "C" fn crum_threads_suspend() -> libc::c_int {
    std::panic::catch_unwind(crum_ckpt::agent::suspend_threads).unwrap_or(false) as libc::c_int
}

/// Called by `libcrum_libc.so`'s `fork` before the C library's: after a lazy restart,
/// waits until every page of the image is in (`crum_ckpt::lazy::complete`), since the child
/// would not inherit the userfaultfd's registrations. 0: go on; -1: the page server ended
/// early (the fork fails with EAGAIN). Keeps `errno` otherwise.
#[no_mangle]
pub extern "C" fn crum_lazy_complete() -> libc::c_int {
    if !crum_ckpt::lazy::pending() {
        return 0;
    }
    // SAFETY: errno is thread-local.
    let e = unsafe { *libc::__errno_location() };
    let r = match std::panic::catch_unwind(crum_ckpt::lazy::complete) {
        Ok(Ok(())) => 0,
        Ok(Err(msg)) => {
            tracing::error!("fork refused: {msg}");
            -1
        }
        Err(_) => -1,
    };
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e };
    r
}

/// Starts crum's threads again after [`crum_threads_suspend`].
#[no_mangle]
pub extern "C" fn crum_threads_resume() {
    let _ = std::panic::catch_unwind(crum_ckpt::agent::resume_threads);
}

/// libcrum's allocator: the system's, except for the checkpoint agent while the program's
/// threads are stopped (see `crum_ckpt::alloc`: a stopped thread may hold a malloc lock).
#[global_allocator]
static CRUM_ALLOC: crum_ckpt::alloc::CrumAlloc = crum_ckpt::alloc::CrumAlloc;

/// Called by `libcrum_libc.so`'s `inotify_add_watch` wrapper after the program added watch
/// `wd` on `path` to inotify instance `fd` (`crum_ckpt::inotify`). Keeps `errno`.
///
/// # Safety
/// `path` is NUL-terminated (the path the call just used).
#[no_mangle]
pub unsafe extern "C" fn crum_note_watch(fd: libc::c_int, wd: libc::c_int, path: *const libc::c_char) {
    if path.is_null() {
        return;
    }
    // SAFETY: errno is thread-local.
    let e = unsafe { *libc::__errno_location() };
    // SAFETY: the caller passes a NUL-terminated path.
    crum_ckpt::inotify::note_watch(fd, wd, unsafe { std::ffi::CStr::from_ptr(path) });
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e };
}

/// Called by `libcrum_libc.so`'s `open`/`fopen` wrappers before an open that may create a
/// file that does not exist yet (`crum_ckpt::writes::note_create`). Allocates nothing, takes
/// no lock and keeps `errno`.
#[no_mangle]
pub extern "C" fn crum_note_create(dirfd: libc::c_int, path: *const libc::c_char) {
    if path.is_null() {
        return;
    }
    // SAFETY: errno is thread-local.
    let e = unsafe { *libc::__errno_location() };
    // SAFETY: the caller passes a NUL-terminated path.
    crum_ckpt::writes::note_create(dirfd, unsafe { std::ffi::CStr::from_ptr(path) });
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e };
}

/// Called by `libcrum_libc.so`'s `open`/`fopen` wrappers after the program opened `fd` for
/// writing (`created`: that open created the file), so that a restart rolls back what the
/// program writes after a checkpoint (`crum_ckpt::writes`). Allocates nothing, takes no lock
/// and keeps `errno`.
#[no_mangle]
pub extern "C" fn crum_note_open(fd: libc::c_int, created: libc::c_int) {
    // SAFETY: errno is thread-local.
    let e = unsafe { *libc::__errno_location() };
    crum_ckpt::writes::note_open(fd, created != 0);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e };
}
