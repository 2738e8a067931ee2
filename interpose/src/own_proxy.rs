//! The device proxy a process of a job starts for itself (issue 17): a CUDA program that a
//! script, a launcher or python's `subprocess` started as a child under `crum run` has no
//! channel (only the process `crum run` started gets one, and the programs it executes in
//! its own process), so on its first CUDA call the interposer starts `crum proxy` for it, as
//! `crum run` and the restorer do.
//!
//! - What to start is read at constructor time ([`capture`]), before the program can change
//!   its environment: `crum run` names its binary (`CRUM_EXE`) and its `--device`
//!   (`CRUM_DEVICE`); the proxy gets the program's environment of that time without crum's
//!   preloaded libraries, audit library and driver directory (so it loads the real driver,
//!   and no agent of crum's runs in it), and without crum's own variables.
//! - Only the process whose image the constructor ran in (one that executed a program, or
//!   that program after a restart) starts a proxy: a child forked without exec has no CUDA
//!   context (`cudaErrorInitializationError` when its parent had one, `cudaErrorNoDevice`
//!   otherwise, named in the log).
//! - The proxy is started detached ([`spawn`]): a clone without exit signal, so no `SIGCHLD`
//!   reaches the program and no `waitpid(-1)` of its can take the intermediate process,
//!   which forks the proxy and ends at once; the proxy is then nobody's child in the job
//!   (reparented), serves until this process ends (`--watch-pid`), and is in a process group
//!   of its own. The channel is above the program's descriptors, close-on-exec, like the one
//!   `crum run` hands over; every other descriptor of the program is closed in the proxy.
//! - The first connection is made once (`client::conn`'s `OnceLock`): threads that make
//!   their first CUDA calls at once wait for the one that starts the proxy.
//!
//! The agent's device hooks are installed by the library's constructor in every process that
//! runs crum's agent, so such a process's device state is cut with its job and restored on a
//! proxy of its own (`docs/checkpoint.md` § Jobs).
//!
//! # Safety
//! Between the clones and `execve`/`_exit`, the new processes call only raw system calls on
//! memory prepared before the first clone (C strings, pointer arrays, descriptor numbers):
//! nothing that allocates, takes a lock or runs the C library's fork handlers, since a
//! program thread may have held any lock at the clone.
#![allow(unsafe_code)]

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::atomic::{AtomicI32, Ordering::SeqCst};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crum_wire::{cuda, Channel, PeerWatch, ENV_DEVICE, ENV_EXE};

use crate::errors::CudaResult;

/// Longest wait for a proxy to serve (the device may take long to open under load).
const START_LIMIT: Duration = Duration::from_secs(120);

/// What [`start`] runs, read by [`capture`].
struct Plan {
    exe: CString,
    device: String,
    /// `NAME=value` of the proxy's environment.
    env: Vec<CString>,
}

static PLAN: OnceLock<Plan> = OnceLock::new();
/// The process [`capture`] ran in (its kernel pid; a restart's new pid once restored): a
/// child forked without exec has another.
static OWNER: AtomicI32 = AtomicI32::new(0);

/// From the restore hook of a restarted process: it is the process [`capture`] ran in, under
/// a new pid. (A restarted child forked without exec has no device hooks, so no restore
/// hook: it stays a forked child.)
pub fn restarted() {
    if OWNER.load(SeqCst) != 0 {
        OWNER.store(crum_ckpt::threads::real_pid(), SeqCst);
    }
}

/// From the library's constructor, under `crum run` (`CRUM_RUN=1`): remembers how to start a
/// proxy for this process should it need one.
pub fn capture() {
    if std::env::var_os("CRUM_RUN").is_none_or(|v| v != "1") {
        return;
    }
    OWNER.store(crum_ckpt::threads::real_pid(), SeqCst);
    let (Some(exe), Some(device)) = (std::env::var_os(ENV_EXE), std::env::var(ENV_DEVICE).ok()) else {
        return;
    };
    let Ok(exe) = CString::new(exe.into_vec()) else { return };
    let env = proxy_env(std::env::vars_os());
    let _ = PLAN.set(Plan { exe, device, env });
}

/// The entries of a `:`-separated list that `keep` keeps (None: none is left).
fn without_files(list: &OsStr, keep: impl Fn(&std::path::Path) -> bool) -> Option<OsString> {
    let kept: Vec<&[u8]> = list.as_bytes().split(|&b| b == b':').filter(|e| !e.is_empty() && keep(std::path::Path::new(OsStr::from_bytes(e)))).collect();
    (!kept.is_empty()).then(|| OsString::from_vec(kept.join(&b':')))
}

/// Whether `dir` is one of `crum run`'s driver directories: its `libcuda.so.1` is crum's
/// library (`cli/src/run.rs`, `driver_dir`).
fn is_driver_dir(dir: &std::path::Path) -> bool {
    std::fs::read_link(dir.join("libcuda.so.1"))
        .ok()
        .and_then(|t| t.file_name().map(|n| n == "libcrum.so"))
        .unwrap_or(false)
        || dir.join("libcrum_audit.so").is_file()
}

/// The proxy's environment: `vars` without crum's preloaded libraries, its audit library,
/// its driver directory on the library path, and the variables that tell a process it runs
/// under `crum run` (the proxy must not run crum's agent, nor load crum's `libcuda.so.1`).
fn proxy_env(vars: impl Iterator<Item = (OsString, OsString)>) -> Vec<CString> {
    const DROP: [&str; 8] = [
        "CRUM_RUN",
        crum_wire::ENV_CHANNEL,
        "CRUM_STATIC_RUNTIME",
        "CRUM_CUDART_FINGERPRINTS",
        "CRUM_MANAGED",
        "CRUM_STRICT",
        ENV_EXE,
        ENV_DEVICE,
    ];
    let mut out = Vec::new();
    for (k, v) in vars {
        let name = k.to_string_lossy();
        if DROP.contains(&name.as_ref()) || name.starts_with("CRUM_CKPT_") {
            continue;
        }
        let v = match name.as_ref() {
            "LD_PRELOAD" => without_files(&v, |p| {
                !matches!(p.file_name().and_then(OsStr::to_str), Some("libcrum.so" | "libcrum_libc.so"))
            }),
            "LD_AUDIT" => without_files(&v, |p| p.file_name().and_then(OsStr::to_str) != Some("libcrum_audit.so")),
            "LD_LIBRARY_PATH" => without_files(&v, |p| !is_driver_dir(p)),
            _ => Some(v),
        };
        let Some(v) = v else { continue };
        let mut e = k.into_vec();
        e.push(b'=');
        e.extend(v.into_vec());
        if let Ok(c) = CString::new(e) {
            out.push(c);
        }
    }
    out
}

/// Starts this process's own device proxy and returns the channel descriptor (above the
/// program's range, close-on-exec), once the proxy serves. `cudaErrorNoDevice` when this
/// process may not have one (not under `crum run`, or a child forked without exec), with the
/// reason in the log.
pub fn start() -> CudaResult<i32> {
    let Some(plan) = PLAN.get() else {
        tracing::error!(
            "not running under `crum run` (no {} nor {ENV_EXE}): no CUDA device",
            crum_wire::ENV_CHANNEL
        );
        return Err(cuda::ERROR_NO_DEVICE);
    };
    if OWNER.load(SeqCst) != crum_ckpt::threads::real_pid() {
        tracing::error!(
            "a child forked without exec gets no CUDA device of its own under crum (execute the CUDA program instead)"
        );
        return Err(cuda::ERROR_NO_DEVICE);
    }
    let exe = std::path::Path::new(OsStr::from_bytes(plan.exe.as_bytes())).to_path_buf();
    let ch = Channel::create().map_err(|e| {
        tracing::error!("cannot create a channel for a device proxy: {e}");
        cuda::ERROR_INITIALIZATION
    })?;
    // The program's copy: above its descriptors, close-on-exec; `ch` keeps (and closes) the
    // original. The proxy is handed this one.
    // SAFETY: duplicates the channel's own descriptor; the duplicate is ours.
    let fd = unsafe { libc::fcntl(ch.raw_fd(), libc::F_DUPFD_CLOEXEC, crum_ckpt::highfd::base()) };
    if fd < 0 {
        tracing::error!("cannot duplicate the channel descriptor: {}", std::io::Error::last_os_error());
        return Err(cuda::ERROR_INITIALIZATION);
    }
    let fail = |what: String| {
        tracing::error!("{what}");
        // SAFETY: our duplicate, not handed to anyone.
        unsafe { libc::close(fd) };
        cuda::ERROR_DEVICES_UNAVAILABLE
    };
    let me = crum_ckpt::threads::real_pid();
    let args = ["proxy", "--channel-fd", &fd.to_string(), "--device", &plan.device, "--watch-pid", &me.to_string()];
    let started = match spawn(&plan.exe, &args, &plan.env, fd) {
        Ok(s) => s,
        Err(e) => return Err(fail(format!("cannot start the device proxy {}: {e}", exe.display()))),
    };
    let watch = PeerWatch::open(started.pid).ok();
    let t0 = Instant::now();
    loop {
        if ch.wait_ready(Duration::from_millis(20)).is_ok() {
            break;
        }
        if let Some(errno) = started.exec_error() {
            return Err(fail(format!(
                "cannot start the device proxy {}: {}",
                exe.display(),
                std::io::Error::from_raw_os_error(errno)
            )));
        }
        if watch.as_ref().is_none_or(PeerWatch::exited) {
            return Err(fail(format!("the device proxy {} (--device {}) ended during startup", exe.display(), plan.device)));
        }
        if t0.elapsed() > START_LIMIT {
            // SAFETY: a signal to the proxy started here, watched by pidfd (still alive).
            unsafe { libc::kill(started.pid, libc::SIGKILL) };
            return Err(fail(format!("the device proxy did not start within {} s", START_LIMIT.as_secs())));
        }
    }
    tracing::info!(proxy = started.pid, device = %plan.device, "started a device proxy of this process's own");
    Ok(fd)
}

/// A started proxy: its pid, and the pipe on which its `execve` failure would come.
struct Started {
    pid: i32,
    /// Read end (non-blocking); its write end is closed by the proxy's `execve`.
    report: std::os::fd::OwnedFd,
}

impl Started {
    /// The proxy's `execve` failed with this errno.
    fn exec_error(&self) -> Option<i32> {
        use std::os::fd::AsRawFd;
        let mut b = [0u8; 4];
        // SAFETY: reads into the live buffer from our own non-blocking pipe.
        let n = unsafe { libc::read(self.report.as_raw_fd(), b.as_mut_ptr().cast(), 4) };
        (n == 4).then(|| -i32::from_ne_bytes(b))
    }
}

/// Runs `exe args` with environment `env`, detached (see the module's documentation), with
/// `keep_fd` open in it and stdin/stdout on /dev/null (stderr is the program's). Returns once
/// the intermediate process has ended: the proxy's pid.
fn spawn(exe: &CString, args: &[&str], env: &[CString], keep_fd: i32) -> std::io::Result<Started> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut owned = vec![exe.clone()];
    for a in args {
        owned.push(CString::new(*a).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?);
    }
    let mut argv: Vec<*const libc::c_char> = owned.iter().map(|c| c.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = env.iter().map(|c| c.as_ptr()).collect();
    envp.push(std::ptr::null());
    // SAFETY: opens a path literal; the descriptor is ours.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if null < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: ours, closed once when dropped.
    let null = unsafe { OwnedFd::from_raw_fd(null) };
    let mut p = [-1i32; 2];
    // SAFETY: pipe2 writes two descriptors into the live array.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both ends are ours, each closed once when dropped.
    let (report, tell) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
    use std::os::fd::AsRawFd;
    let (null_fd, tell_fd) = (null.as_raw_fd(), tell.as_raw_fd());
    // SAFETY: a raw clone without exit signal (flags 0): no `SIGCHLD` to the program, and only
    // a wait with `__WCLONE` takes it. The intermediate and the proxy run raw system calls
    // only (see the module's # Safety).
    let mid = unsafe { libc::syscall(libc::SYS_clone, 0usize, 0usize, 0usize, 0usize, 0usize) };
    if mid == 0 {
        // SAFETY: in the intermediate process; see above.
        unsafe { intermediate(argv.as_ptr(), envp.as_ptr(), null_fd, tell_fd, keep_fd) };
    }
    if mid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    drop(tell);
    let mut st = 0i32;
    loop {
        // SAFETY: reaps our own clone child (raw wait4: the C library's may be wrapped).
        let r = unsafe { libc::syscall(libc::SYS_wait4, mid as i32, &mut st as *mut i32, libc::__WCLONE, 0usize) };
        if r >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
    }
    let mut b = [0u8; 4];
    // SAFETY: reads into the live buffer; the intermediate wrote before it ended.
    let n = unsafe { libc::read(report.as_raw_fd(), b.as_mut_ptr().cast(), 4) };
    let pid = if n == 4 { i32::from_ne_bytes(b) } else { -libc::EIO };
    if pid <= 0 {
        return Err(std::io::Error::from_raw_os_error(-pid));
    }
    Ok(Started { pid, report })
}

/// The intermediate process: forks the proxy, says its pid (or `-errno`) on `tell`, ends.
///
/// # Safety
/// Only in a process just cloned by [`spawn`], with its arguments.
unsafe fn intermediate(
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    null: i32,
    tell: i32,
    keep: i32,
) -> ! {
    // SAFETY: raw system calls on prepared memory (the caller's contract).
    unsafe {
        let pid = libc::syscall(libc::SYS_clone, libc::SIGCHLD as usize, 0usize, 0usize, 0usize, 0usize);
        if pid == 0 {
            proxy_side(argv, envp, null, tell, keep);
        }
        let v: i32 = if pid < 0 { -*libc::__errno_location() } else { pid as i32 };
        libc::syscall(libc::SYS_write, tell, (&v as *const i32).cast::<libc::c_void>(), 4usize);
        libc::syscall(libc::SYS_exit_group, 0);
        unreachable_exit()
    }
}

/// The proxy's side before `execve`: own process group, stdin and stdout on /dev/null,
/// every signal unblocked and at its default action, no descriptor of the program's but
/// `keep` (and stderr).
///
/// # Safety
/// As [`intermediate`].
unsafe fn proxy_side(argv: *const *const libc::c_char, envp: *const *const libc::c_char, null: i32, tell: i32, keep: i32) -> ! {
    // SAFETY: raw system calls on prepared memory (the caller's contract).
    unsafe {
        libc::syscall(libc::SYS_setpgid, 0, 0);
        libc::syscall(libc::SYS_dup3, null, 0, 0);
        libc::syscall(libc::SYS_dup3, null, 1, 0);
        // Every other descriptor closes at the exec (the report pipe's write end included),
        // the channel stays.
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC);
        libc::syscall(libc::SYS_fcntl, keep, libc::F_SETFD, 0);
        let empty = [0u64; 1];
        libc::syscall(libc::SYS_rt_sigprocmask, libc::SIG_SETMASK, empty.as_ptr(), std::ptr::null_mut::<u64>(), 8usize);
        // The kernel's `struct sigaction`: handler, flags, restorer, mask.
        let dfl = [0u64; 4];
        for sig in 1..=64usize {
            if sig != libc::SIGKILL as usize && sig != libc::SIGSTOP as usize {
                libc::syscall(libc::SYS_rt_sigaction, sig, dfl.as_ptr(), std::ptr::null_mut::<u64>(), 8usize);
            }
        }
        libc::syscall(libc::SYS_execve, *argv, argv, envp);
        let v: i32 = -*libc::__errno_location();
        libc::syscall(libc::SYS_write, tell, (&v as *const i32).cast::<libc::c_void>(), 4usize);
        libc::syscall(libc::SYS_exit_group, 127);
        unreachable_exit()
    }
}

/// After `exit_group`, which does not return.
fn unreachable_exit() -> ! {
    loop {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(vars: &[(&str, &str)]) -> Vec<String> {
        proxy_env(vars.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))))
            .into_iter()
            .map(|c| c.into_string().unwrap())
            .collect()
    }

    #[test]
    fn proxy_environment_drops_crums_libraries_and_variables_and_keeps_the_rest() {
        let dir = tempfile_dir();
        std::os::unix::fs::symlink("/x/target/debug/libcrum.so", dir.join("libcuda.so.1")).unwrap();
        let d = dir.display().to_string();
        let env = env_of(&[
            ("LD_PRELOAD", "/x/libcrum_libc.so:/x/libcrum.so:/opt/prof.so"),
            ("LD_AUDIT", &format!("{d}/libcrum_audit.so")),
            ("LD_LIBRARY_PATH", &format!("{d}:/opt/cuda/lib64")),
            ("CRUM_RUN", "1"),
            ("CRUM_CHANNEL", "1000"),
            ("CRUM_CKPT_DIR", "/imgs"),
            ("CRUM_EXE", "/x/crum"),
            ("CRUM_LIBCUDA", "/x/emu.so"),
            ("CRUM_STRICT_MEMORY", "1"),
            ("HOME", "/home/u"),
        ]);
        assert_eq!(
            env,
            [
                "LD_PRELOAD=/opt/prof.so",
                "LD_LIBRARY_PATH=/opt/cuda/lib64",
                "CRUM_LIBCUDA=/x/emu.so",
                "CRUM_STRICT_MEMORY=1",
                "HOME=/home/u"
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("crum-own-proxy-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
