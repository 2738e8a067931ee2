//! The process's ids as the program knows them. A restarted process gets a new pid from the
//! kernel; the program keeps comparing against the one it started with (Python's asyncio
//! finds "no running event loop" when `getpid()` changed, fork detectors reseed or reset,
//! `kill(getpid(), …)` and `getpid() == gettid()` checks break). After a restart the agent
//! calls [`crum_set_pid_identity`] with the pid the program started with (`virt`) and the
//! one it has now (`real`); from then on:
//! - `getpid`, `gettid` (the main thread's), `getppid` (a child's view of its restarted
//!   parent), `getpgrp`, `getpgid`, `getsid` answer `virt` where the kernel says `real`;
//! - `kill`, `killpg`, `tgkill`, `sigqueue`, `getpgid`, `getsid`, `setpgid`, `tcsetpgrp`
//!   given `virt` (or `-virt`, a process group) act on `real`; `setsid` and `tcgetpgrp`
//!   answer `virt`.
//!
//! A child the restarted process forks has its own pid (the kernel's) and sees its parent as
//! `virt`. What the kernel shows directly (`/proc/<pid>`, `/proc/self/status`, siginfo's
//! sender, `syscall(SYS_getpid)`) stays the real pid. Before any restart every call is the C
//! library's.
use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering::{Acquire, Relaxed}};

static VIRT: AtomicI32 = AtomicI32::new(0);
static REAL: AtomicI32 = AtomicI32::new(0);

/// The other members of the job after a restart (issue 17): (the pid the program knows, the
/// kernel's now) for each process of the job the image held. Filled once by the agent
/// before the program's threads run again; read with atomics only (async-signal-safe).
const MAX_MEMBERS: usize = 1024;
static MEMBERS: [(AtomicI32, AtomicI32); MAX_MEMBERS] = [const { (AtomicI32::new(0), AtomicI32::new(0)) }; MAX_MEMBERS];
static N_MEMBERS: AtomicI32 = AtomicI32::new(0);

/// Set by the agent after a restart (not after one of a child: `real` is checked).
#[no_mangle]
pub extern "C" fn crum_set_pid_identity(virt: c_int, real: c_int) {
    GENERATION.fetch_add(1, Relaxed);
    REAL.store(real, Relaxed);
    VIRT.store(if virt == real { 0 } else { virt }, Relaxed);
    if virt != real {
        RESTARTED.store(1, Relaxed);
    }
}

/// Counts the restarts that changed the translation (each call of [`crum_set_pid_identity`],
/// [`crum_set_pid_table`] or [`crum_set_thread_ids`]): a wait that began before one, with the kernel's pid of that
/// time in its registers, is made again with the pid the kernel gives the process now.
static GENERATION: AtomicUsize = AtomicUsize::new(0);

/// Non-zero once the process was restarted with pids to translate: `vfork` then makes its
/// children as `fork` does (see [`vfork_remade`]).
pub static RESTARTED: AtomicUsize = AtomicUsize::new(0);

/// Set by the agent of a job member after a restart: `pairs` holds `n` pairs (the pid the
/// program knows, the kernel's now), one per process of the job (its own included). Pairs
/// past [`MAX_MEMBERS`] are dropped.
///
/// # Safety
/// `pairs` points at `2 * n` readable ints.
#[no_mangle]
pub unsafe extern "C" fn crum_set_pid_table(pairs: *const c_int, n: c_int) {
    let n = (n.max(0) as usize).min(MAX_MEMBERS);
    GENERATION.fetch_add(1, Relaxed);
    N_MEMBERS.store(0, Relaxed);
    let mut k = 0;
    for i in 0..n {
        // SAFETY: the caller's 2 * n ints.
        let (v, r) = unsafe { (*pairs.add(2 * i), *pairs.add(2 * i + 1)) };
        if v > 0 && r > 0 && v != r {
            MEMBERS[k].0.store(v, Relaxed);
            MEMBERS[k].1.store(r, Relaxed);
            k += 1;
        }
    }
    N_MEMBERS.store(k as i32, Relaxed);
    if k > 0 {
        RESTARTED.store(1, Relaxed);
    }
}

/// The process's threads other than the main one after a restart: (the tid the program
/// knows, the kernel's now). Filled by the restored main thread before any program thread
/// runs ([`crum_set_thread_ids`]); read with atomics only. The kernel gives restored threads
/// new tids; a program that kept one (`gettid()` stored, then `kcmp`, `tgkill`,
/// `sched_setaffinity` of it: CRIU's clone_fs) named no thread after a restart.
const MAX_THREADS: usize = 1024;
static THREADS: [(AtomicI32, AtomicI32); MAX_THREADS] = [const { (AtomicI32::new(0), AtomicI32::new(0)) }; MAX_THREADS];
static N_THREADS: AtomicI32 = AtomicI32::new(0);

/// Set by the restored main thread: `pairs` holds `n` pairs (the kernel's tid of a thread when
/// the image was cut, its tid now). A tid the program knows by another number from an earlier
/// restart keeps that number (the table of the image's time is in the image). Raw atomics
/// only: called before the program's threads run, possibly while one holds malloc's lock.
///
/// # Safety
/// `pairs` points at `2 * n` readable ints.
#[no_mangle]
pub unsafe extern "C" fn crum_set_thread_ids(pairs: *const c_int, n: c_int) {
    let n = (n.max(0) as usize).min(MAX_THREADS);
    let old = (N_THREADS.load(Relaxed).max(0) as usize).min(MAX_THREADS);
    // The new table is built after the old one's entries (in place would lose them), then
    // moved down.
    let mut virts = [0 as c_int; MAX_THREADS];
    let mut reals = [0 as c_int; MAX_THREADS];
    let mut k = 0;
    for i in 0..n {
        // SAFETY: the caller's 2 * n ints.
        let (was, now) = unsafe { (*pairs.add(2 * i), *pairs.add(2 * i + 1)) };
        if was <= 0 || now <= 0 {
            continue;
        }
        let virt = THREADS[..old].iter().find(|(_, r)| r.load(Relaxed) == was).map_or(was, |(v, _)| v.load(Relaxed));
        if virt != now {
            virts[k] = virt;
            reals[k] = now;
            k += 1;
        }
    }
    N_THREADS.store(0, Relaxed);
    for i in 0..k {
        THREADS[i].0.store(virts[i], Relaxed);
        THREADS[i].1.store(reals[i], Relaxed);
    }
    N_THREADS.store(k as i32, Relaxed);
    if k > 0 {
        RESTARTED.store(1, Relaxed);
    }
    GENERATION.fetch_add(1, Relaxed);
}

fn thread_by_real(id: c_int) -> Option<c_int> {
    let n = N_THREADS.load(Relaxed) as usize;
    THREADS[..n].iter().find(|(_, r)| r.load(Relaxed) == id).map(|(v, _)| v.load(Relaxed))
}

fn thread_by_virt(id: c_int) -> Option<c_int> {
    let n = N_THREADS.load(Relaxed) as usize;
    THREADS[..n].iter().find(|(v, _)| v.load(Relaxed) == id).map(|(_, r)| r.load(Relaxed))
}

fn member_by_real(id: c_int) -> Option<c_int> {
    let n = N_MEMBERS.load(Relaxed) as usize;
    MEMBERS[..n].iter().find(|(_, r)| r.load(Relaxed) == id).map(|(v, _)| v.load(Relaxed))
}

fn member_by_virt(id: c_int) -> Option<c_int> {
    let n = N_MEMBERS.load(Relaxed) as usize;
    MEMBERS[..n].iter().find(|(v, _)| v.load(Relaxed) == id).map(|(_, r)| r.load(Relaxed))
}

/// The program's id for one the kernel gave.
fn to_program(id: c_int) -> c_int {
    let v = VIRT.load(Relaxed);
    if v != 0 && id == REAL.load(Relaxed) {
        v
    } else if id > 0 {
        member_by_real(id).or_else(|| thread_by_real(id)).unwrap_or(id)
    } else {
        id
    }
}

/// The kernel's id for one the program gave (`-id`: a process group).
fn to_kernel(id: c_int) -> c_int {
    let v = VIRT.load(Relaxed);
    if v != 0 && id == v {
        REAL.load(Relaxed)
    } else if v != 0 && id == -v {
        -REAL.load(Relaxed)
    } else if id > 0 {
        member_by_virt(id).or_else(|| thread_by_virt(id)).unwrap_or(id)
    } else if id < -1 {
        member_by_virt(-id).map_or(id, |r| -r)
    } else {
        id
    }
}

fn raw(nr: libc::c_long) -> c_int {
    // SAFETY: getpid/gettid/getppid/getpgrp/setsid take no arguments.
    unsafe { libc::syscall(nr) as c_int }
}

/// One of the process's own ids (`nr`: a system call without arguments), as the program knows
/// it. A checkpoint may stop the thread between the system call and the translation; after
/// a restart the kernel's id it got is the one of the process the image was taken of, which
/// the new tables no longer name (a worker's `gettid()` gave its tid of the first restart
/// after a restart of a restart). Such an answer is asked for again.
fn own_id(nr: libc::c_long) -> c_int {
    loop {
        let g = GENERATION.load(Acquire);
        let v = to_program(raw(nr));
        if GENERATION.load(Acquire) == g {
            return v;
        }
    }
}

/// The count of translation changes, for `syscall.c`'s own [`own_id`] loop
/// (`syscall(SYS_gettid)` and the like; it makes the system call itself, as this library's
/// `raw` goes through it).
#[no_mangle]
pub extern "C" fn crum_pid_generation() -> libc::c_ulong {
    GENERATION.load(Acquire) as libc::c_ulong
}

/// The program's `getpid`.
#[no_mangle]
pub extern "C" fn getpid() -> libc::pid_t {
    own_id(libc::SYS_getpid)
}

/// The program's `gettid` (the main thread's tid is the pid).
#[no_mangle]
pub extern "C" fn gettid() -> libc::pid_t {
    own_id(libc::SYS_gettid)
}

/// The program's `getppid`.
#[no_mangle]
pub extern "C" fn getppid() -> libc::pid_t {
    own_id(libc::SYS_getppid)
}

/// The program's `getpgrp`.
#[no_mangle]
pub extern "C" fn getpgrp() -> libc::pid_t {
    own_id(libc::SYS_getpgrp)
}

// The calls below are system calls made here (no lookup of the C library's, so they stay
// async-signal-safe from the first call on): `kill` in a signal handler is common.

/// The program's `getsockopt`: `SO_PEERCRED` names the peer by the program's pid (a socket
/// pair a restart made again names the restarted process, whose pid the program knows as
/// the one it started with). The system call itself: nothing else changes.
///
/// # Safety
/// As `getsockopt(2)`: `optval` and `optlen` are what the caller passes to the kernel.
#[no_mangle]
pub unsafe extern "C" fn getsockopt(fd: c_int, level: c_int, name: c_int, optval: *mut libc::c_void, optlen: *mut libc::socklen_t) -> c_int {
    // SAFETY: the caller's pointers, given to the kernel, which checks them.
    let r = unsafe { libc::syscall(libc::SYS_getsockopt, fd, level, name, optval, optlen) } as c_int;
    if r == 0
        && level == libc::SOL_SOCKET
        && name == libc::SO_PEERCRED
        && !optval.is_null()
        && !optlen.is_null()
        // SAFETY: the kernel wrote the length the option has.
        && unsafe { *optlen } as usize >= std::mem::size_of::<libc::ucred>()
    {
        let cred = optval as *mut libc::ucred;
        // SAFETY: the kernel wrote a whole `struct ucred` there.
        unsafe { (*cred).pid = to_program((*cred).pid) };
    }
    r
}

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

/// The program's `killpg` (the C library's calls its own `kill`, not this library's).
#[no_mangle]
pub extern "C" fn killpg(pgrp: libc::pid_t, sig: c_int) -> c_int {
    if pgrp < 0 {
        // SAFETY: errno of this thread.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return -1;
    }
    kill(-pgrp, sig)
}

/// The program's `setpgid`: process and group given by the program's ids (0: itself, its
/// own).
#[no_mangle]
pub extern "C" fn setpgid(pid: libc::pid_t, pgid: libc::pid_t) -> c_int {
    let k = |id: libc::pid_t| if id > 0 { to_kernel(id) } else { id };
    // SAFETY: a system call with integer arguments.
    unsafe { libc::syscall(libc::SYS_setpgid, k(pid), k(pgid)) as c_int }
}

/// The program's `setsid`: the new session's id as the program knows its own pid.
#[no_mangle]
pub extern "C" fn setsid() -> libc::pid_t {
    let r = raw(libc::SYS_setsid);
    if r < 0 {
        r
    } else {
        to_program(r)
    }
}

/// The program's `tcgetpgrp`: the terminal's foreground group as the program knows it.
#[no_mangle]
pub extern "C" fn tcgetpgrp(fd: c_int) -> libc::pid_t {
    let mut pg: libc::pid_t = 0;
    // SAFETY: TIOCGPGRP writes one pid_t into the live variable.
    if unsafe { libc::ioctl(fd, libc::TIOCGPGRP, &mut pg) } < 0 {
        return -1;
    }
    to_program(pg)
}

/// The program's `tcsetpgrp`.
#[no_mangle]
pub extern "C" fn tcsetpgrp(fd: c_int, pgrp: libc::pid_t) -> c_int {
    let pg: libc::pid_t = if pgrp > 0 { to_kernel(pgrp) } else { pgrp };
    // SAFETY: TIOCSPGRP reads one pid_t from the live variable.
    unsafe { libc::ioctl(fd, libc::TIOCSPGRP, &pg) }
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

/// The program's `getpriority`: a process or process group given by the program's id.
#[no_mangle]
pub extern "C" fn getpriority(which: c_int, who: libc::id_t) -> c_int {
    let who = by_id(which, who);
    // SAFETY: a system call with integer arguments.
    let r = unsafe { libc::syscall(libc::SYS_getpriority, which, who) } as c_int;
    // The kernel answers 20 - nice (never negative), as the C library undoes.
    if r >= 0 {
        20 - r
    } else {
        r
    }
}

/// The program's `setpriority`.
#[no_mangle]
pub extern "C" fn setpriority(which: c_int, who: libc::id_t, prio: c_int) -> c_int {
    let who = by_id(which, who);
    // SAFETY: a system call with integer arguments.
    unsafe { libc::syscall(libc::SYS_setpriority, which, who, prio) as c_int }
}

/// `who` of a priority call as the kernel knows it (a user id stays as it is).
fn by_id(which: c_int, who: libc::id_t) -> libc::id_t {
    if which == libc::PRIO_PROCESS as c_int || which == libc::PRIO_PGRP as c_int {
        to_kernel(who as c_int) as libc::id_t
    } else {
        who
    }
}

/// The program's `sched_setscheduler`.
#[no_mangle]
pub extern "C" fn sched_setscheduler(pid: libc::pid_t, policy: c_int, param: *const libc::sched_param) -> c_int {
    // SAFETY: the kernel reads the caller's parameter.
    unsafe { libc::syscall(libc::SYS_sched_setscheduler, to_kernel(pid), policy, param) as c_int }
}

/// The program's `sched_getscheduler`.
#[no_mangle]
pub extern "C" fn sched_getscheduler(pid: libc::pid_t) -> c_int {
    // SAFETY: a system call with an integer argument.
    unsafe { libc::syscall(libc::SYS_sched_getscheduler, to_kernel(pid)) as c_int }
}

/// The program's `sched_setparam`.
#[no_mangle]
pub extern "C" fn sched_setparam(pid: libc::pid_t, param: *const libc::sched_param) -> c_int {
    // SAFETY: the kernel reads the caller's parameter.
    unsafe { libc::syscall(libc::SYS_sched_setparam, to_kernel(pid), param) as c_int }
}

/// The program's `sched_getparam`.
#[no_mangle]
pub extern "C" fn sched_getparam(pid: libc::pid_t, param: *mut libc::sched_param) -> c_int {
    // SAFETY: the kernel writes the caller's parameter.
    unsafe { libc::syscall(libc::SYS_sched_getparam, to_kernel(pid), param) as c_int }
}

/// The program's `sched_setaffinity`.
#[no_mangle]
pub extern "C" fn sched_setaffinity(pid: libc::pid_t, size: libc::size_t, mask: *const libc::cpu_set_t) -> c_int {
    // SAFETY: the kernel reads `size` bytes of the caller's mask.
    unsafe { libc::syscall(libc::SYS_sched_setaffinity, to_kernel(pid), size, mask) as c_int }
}

/// The program's `sched_getaffinity`: as the C library, the bytes past what the kernel
/// wrote are cleared and success is 0.
#[no_mangle]
pub extern "C" fn sched_getaffinity(pid: libc::pid_t, size: libc::size_t, mask: *mut libc::cpu_set_t) -> c_int {
    // SAFETY: the kernel writes at most `size` bytes of the caller's mask.
    let r = unsafe { libc::syscall(libc::SYS_sched_getaffinity, to_kernel(pid), size, mask) };
    if r < 0 {
        return -1;
    }
    let r = (r as usize).min(size);
    // SAFETY: the rest of the caller's `size` bytes.
    unsafe { std::ptr::write_bytes((mask as *mut u8).add(r), 0, size - r) };
    0
}

/// The program's `prlimit` (and `prlimit64`, the same call on x86-64).
#[no_mangle]
pub extern "C" fn prlimit(pid: libc::pid_t, resource: c_int, new: *const libc::rlimit, old: *mut libc::rlimit) -> c_int {
    // SAFETY: the kernel reads and writes the caller's limits.
    unsafe { libc::syscall(libc::SYS_prlimit64, to_kernel(pid), resource, new, old) as c_int }
}

/// See [`prlimit`].
#[no_mangle]
pub extern "C" fn prlimit64(pid: libc::pid_t, resource: c_int, new: *const libc::rlimit, old: *mut libc::rlimit) -> c_int {
    prlimit(pid, resource, new, old)
}

/// Whether a new process with kernel pid `real` would be mistaken for another: after a
/// restart, the kernel may give a new child a pid that the program knows as one of the job's
/// processes (their pids before the restart), as its own, or as one of its threads.
fn taken(real: c_int) -> bool {
    let v = VIRT.load(Relaxed);
    (v != 0 && real == v)
        || member_by_virt(real).is_some_and(|r| r != real)
        // A thread's tid of before the restart (crum's threads' too): `waitpid` of the child
        // would be translated to that thread (seen as a child reaped with status 0 under
        // load, when pids wrap: `vfork_loop`, restart of a restart).
        || thread_by_virt(real).is_some_and(|r| r != real)
}

/// The program's `fork` (the C library's, through `real_fork`): after a restart, a child
/// whose pid the program already knows as another process's is ended at once (before it
/// runs anything of the program's) and reaped, and the fork is made again, so that the pid
/// fork returns names the child and no other process.
pub fn fork_with(real_fork: extern "C" fn() -> libc::pid_t) -> libc::pid_t {
    for _ in 0..64 {
        let r = real_fork();
        if r == 0 {
            if taken(raw(libc::SYS_getpid)) {
                // SAFETY: ends this child at once.
                unsafe { libc::_exit(0) };
            }
            return 0;
        }
        if r > 0 && taken(r) {
            // SAFETY: reaps the child just made (it ends at once), into no status.
            unsafe { libc::syscall(libc::SYS_wait4, r, std::ptr::null_mut::<c_int>(), libc::__WALL, std::ptr::null_mut::<libc::rusage>()) };
            continue;
        }
        return r;
    }
    // SAFETY: sets the calling thread's errno.
    unsafe { *libc::__errno_location() = libc::EAGAIN };
    -1
}

/// The program's `vfork` after a restart: a child made by a clone that does not share the
/// parent's memory (so this function may return in both) and suspends the calling thread
/// until the child executes a program or ends (`CLONE_VFORK`), like `vfork`; one whose pid
/// the program knows as another process's is ended at once and made again, as by
/// [`fork_with`]. (`vfork` shares memory and stack with the child: a function around it
/// cannot return in both, and python3's `subprocess` makes every child with it.)
pub extern "C" fn vfork_remade() -> libc::pid_t {
    for _ in 0..64 {
        // SAFETY: clone without CLONE_VM: the child runs on its own copy of this stack and
        // returns here with 0.
        let r = unsafe { libc::syscall(libc::SYS_clone, (libc::CLONE_VFORK | libc::SIGCHLD) as libc::c_ulong, 0usize, 0usize, 0usize, 0usize) };
        if r == 0 {
            if taken(raw(libc::SYS_getpid)) {
                // SAFETY: ends this child at once.
                unsafe { libc::_exit(0) };
            }
            return 0;
        }
        if r > 0 && taken(r as c_int) {
            // SAFETY: reaps the child just made (it has ended), into no status.
            unsafe { libc::syscall(libc::SYS_wait4, r, std::ptr::null_mut::<c_int>(), libc::__WALL, std::ptr::null_mut::<libc::rusage>()) };
            continue;
        }
        return if r < 0 { -1 } else { r as libc::pid_t };
    }
    // SAFETY: sets the calling thread's errno.
    unsafe { *libc::__errno_location() = libc::EAGAIN };
    -1
}

fn errno() -> c_int {
    // SAFETY: this thread's errno.
    unsafe { *libc::__errno_location() }
}

/// The program's `wait4`: the child it names (or the group `-pgid`) is the kernel's; the
/// pid returned is the program's.
#[no_mangle]
pub extern "C" fn wait4(pid: libc::pid_t, status: *mut c_int, options: c_int, usage: *mut libc::rusage) -> libc::pid_t {
    let r = loop {
        let generation = GENERATION.load(Relaxed);
        // SAFETY: the kernel writes the caller's status and usage (either may be null). A
        // cancellation point in the C library: a thread blocked here is not cancelled by crum.
        let r = unsafe { libc::syscall(libc::SYS_wait4, to_kernel(pid), status, options, usage) };
        // Waiting when the image was cut, then restarted: the system call came back with
        // the kernel pid of before (no such child now); made again with today's.
        if r < 0 && pid != -1 && pid != 0 && errno() == libc::ECHILD && GENERATION.load(Relaxed) != generation {
            continue;
        }
        break r;
    };
    // (`syscall` returns -1 and sets errno on failure.)
    if r < 0 {
        -1
    } else {
        to_program(r as c_int)
    }
}

/// The program's `waitpid`.
#[no_mangle]
pub extern "C" fn waitpid(pid: libc::pid_t, status: *mut c_int, options: c_int) -> libc::pid_t {
    wait4(pid, status, options, std::ptr::null_mut())
}

/// The program's `wait`.
#[no_mangle]
pub extern "C" fn wait(status: *mut c_int) -> libc::pid_t {
    wait4(-1, status, 0, std::ptr::null_mut())
}

/// The program's `waitid`: `P_PID`/`P_PGID` ids are the kernel's, the pid the kernel reports
/// in `info` is the program's.
#[no_mangle]
pub extern "C" fn waitid(idtype: libc::idtype_t, id: libc::id_t, info: *mut libc::siginfo_t, options: c_int) -> c_int {
    let by_id = idtype == libc::P_PID || idtype == libc::P_PGID;
    let r = loop {
        let generation = GENERATION.load(Relaxed);
        let kid = if by_id { to_kernel(id as c_int) as libc::id_t } else { id };
        // SAFETY: the kernel writes the caller's siginfo; no rusage.
        let r = unsafe { libc::syscall(libc::SYS_waitid, idtype, kid, info, options, std::ptr::null_mut::<libc::rusage>()) };
        // As in `wait4`: a wait the restart caught is made again with today's pid.
        if r < 0 && by_id && errno() == libc::ECHILD && GENERATION.load(Relaxed) != generation {
            continue;
        }
        break r;
    };
    if r < 0 {
        return -1;
    }
    if !info.is_null() {
        // SAFETY: the caller's siginfo, just written by the kernel (si_pid at offset 16).
        unsafe {
            let p = (info as *mut u8).add(16) as *mut c_int;
            if *p > 0 {
                *p = to_program(*p);
            }
        }
    }
    0
}


/// The program's `pidfd_open`.
#[no_mangle]
pub extern "C" fn pidfd_open(pid: libc::pid_t, flags: libc::c_uint) -> c_int {
    // SAFETY: a system call with integer arguments.
    unsafe { libc::syscall(libc::SYS_pidfd_open, to_kernel(pid), flags) as c_int }
}

/// Whether the program's ids differ from the kernel's (after a restart).
pub fn virtualised() -> bool {
    VIRT.load(Relaxed) != 0 || N_MEMBERS.load(Relaxed) != 0
}

/// `/proc/<pid>…` and `/proc/self/task/<tid>…` where `<pid>` (or the main thread's `<tid>`)
/// is the program's own id after a restart: the same path with the kernel's id, written into
/// `buf` (NUL-terminated); None for any other path (used as it is). Allocates nothing.
pub fn proc_path(path: &[u8], buf: &mut [u8; 4096]) -> Option<usize> {
    if !virtualised() {
        return None;
    }
    let v = VIRT.load(Relaxed);
    let rest = path.strip_prefix(b"/proc/")?;
    let digits = |b: &[u8]| b.iter().take_while(|c| c.is_ascii_digit()).count();
    let parse = |b: &[u8]| std::str::from_utf8(b).ok().and_then(|t| t.parse::<i32>().ok());
    let is_virt = |b: &[u8]| v != 0 && parse(b) == Some(v);
    let real = REAL.load(Relaxed);
    let mut w = std::io::Cursor::new(&mut buf[..]);
    use std::io::Write as _;
    // "/proc/<the program's id of a process of the job>" then optionally "/task/<virt>".
    let (first, mut tail) = {
        let n = digits(rest);
        let kernel = (n > 0).then(|| parse(&rest[..n])).flatten().map(|p| (p, to_kernel(p)));
        match kernel {
            Some((p, k)) if k != p && matches!(rest.get(n), None | Some(b'/')) => (Some(k), &rest[n..]),
            _ => match rest.strip_prefix(b"self") {
                Some(t) => (None, t),
                None => return None,
            },
        }
    };
    let mut changed = first.is_some();
    match first {
        Some(k) => write!(w, "/proc/{k}").ok()?,
        None => w.write_all(b"/proc/self").ok()?,
    }
    if let Some(t) = tail.strip_prefix(b"/task/") {
        let n = digits(t);
        if n > 0 && is_virt(&t[..n]) && matches!(t.get(n), None | Some(b'/')) {
            write!(w, "/task/{real}").ok()?;
            tail = &t[n..];
            changed = true;
        }
    }
    if !changed {
        return None;
    }
    w.write_all(tail).ok()?;
    w.write_all(b"\0").ok()?;
    Some(w.position() as usize)
}

/// The program's id for one the kernel gave, for `src/syscall.c` (`syscall(SYS_getpid)`,
/// `SYS_gettid`, `SYS_getppid`).
#[no_mangle]
pub extern "C" fn crum_pid_to_program(id: c_int) -> c_int {
    to_program(id)
}

/// The kernel's id for one the program gave, for `src/syscall.c` (`syscall(SYS_kill, …)`…).
#[no_mangle]
pub extern "C" fn crum_pid_to_kernel(id: c_int) -> c_int {
    to_kernel(id)
}

/// The program's pid for a pid the kernel gives in `fcntl`'s answers (`F_GETOWN`: a
/// negative value is a process group).
pub fn owner_to_program(id: c_int) -> c_int {
    if id < -1 {
        -to_program(-id)
    } else {
        to_program(id)
    }
}

/// The kernel's pid for one the program gives to `fcntl` (`F_SETOWN`).
pub fn owner_to_kernel(id: c_int) -> c_int {
    to_kernel(id)
}

/// A `struct flock`'s `l_pid` as `F_GETLK` fills it, in the program's ids.
pub fn lock_pid_to_program(id: c_int) -> c_int {
    if id > 0 {
        to_program(id)
    } else {
        id
    }
}

/// Whether `path` (as the kernel will see it) is a file whose lines name lock owners by pid:
/// `/proc/locks`, or `/proc/<pid>/fdinfo/<fd>` (`self`, `thread-self` too).
pub fn lists_lock_owners(path: &[u8]) -> bool {
    if path == b"/proc/locks" {
        return true;
    }
    let Some(rest) = path.strip_prefix(b"/proc/") else {
        return false;
    };
    let Some(slash) = rest.iter().position(|&c| c == b'/') else {
        return false;
    };
    let (who, tail) = rest.split_at(slash);
    let who_ok = who == b"self"
        || who == b"thread-self"
        || (!who.is_empty() && who.iter().all(u8::is_ascii_digit));
    who_ok
        && tail
            .strip_prefix(b"/fdinfo/")
            .is_some_and(|n| !n.is_empty() && n.iter().all(u8::is_ascii_digit))
}

/// One line of `/proc/locks` (`1: POSIX  ADVISORY  WRITE 1234 fe:00:5678 0 EOF`, a waiter
/// `1: -> POSIX …`) or of an fdinfo file (the same after `lock:\t`; a pidfd's `Pid:\t1234`),
/// with the owner's pid in the program's ids, written into `out`; its length. Any other line
/// is copied as it is.
/// Allocates nothing.
pub fn lock_line_to_program(line: &[u8], out: &mut [u8]) -> usize {
    let copy = |out: &mut [u8]| {
        let n = line.len().min(out.len());
        out[..n].copy_from_slice(&line[..n]);
        n
    };
    // A pidfd's fdinfo: `Pid:\t<pid>` names the process it refers to.
    if let Some(rest) = line.strip_prefix(b"Pid:") {
        let ws = rest.iter().take_while(|c| matches!(c, b' ' | b'\t')).count();
        let digits = rest[ws..].iter().take_while(|c| c.is_ascii_digit()).count();
        let Some(pid) = std::str::from_utf8(&rest[ws..ws + digits]).ok().and_then(|t| t.parse::<c_int>().ok()) else {
            return copy(out);
        };
        let mut w = std::io::Cursor::new(&mut out[..]);
        use std::io::Write as _;
        let tail = &rest[ws + digits..];
        if w.write_all(&line[..4 + ws]).and_then(|_| write!(w, "{}", lock_pid_to_program(pid))).and_then(|_| w.write_all(tail)).is_err() {
            return copy(out);
        }
        return w.position() as usize;
    }
    let body_at = if line.starts_with(b"lock:") { 5 } else { 0 };
    // Fields after "N:" (and "->"): kind, ADVISORY/MANDATORY, mode, pid.
    let mut i = body_at;
    let skip_ws = |i: &mut usize| {
        while *i < line.len() && (line[*i] == b' ' || line[*i] == b'\t') {
            *i += 1;
        }
    };
    let word = |i: &mut usize| {
        let s = *i;
        while *i < line.len() && !matches!(line[*i], b' ' | b'\t' | b'\n') {
            *i += 1;
        }
        s
    };
    skip_ws(&mut i);
    let s = word(&mut i);
    if !line[s..i].ends_with(b":") || s == i {
        return copy(out);
    }
    skip_ws(&mut i);
    let mut s = word(&mut i);
    if &line[s..i] == b"->" {
        skip_ws(&mut i);
        s = word(&mut i);
    }
    let _ = s;
    for _ in 0..2 {
        skip_ws(&mut i);
        word(&mut i);
    }
    skip_ws(&mut i);
    let (ps, pe) = (i, {
        let mut j = i;
        word(&mut j);
        j
    });
    let Some(pid) = std::str::from_utf8(&line[ps..pe])
        .ok()
        .and_then(|t| t.parse::<c_int>().ok())
    else {
        return copy(out);
    };
    let pid = lock_pid_to_program(pid);
    let mut w = std::io::Cursor::new(&mut out[..]);
    use std::io::Write as _;
    if w.write_all(&line[..ps])
        .and_then(|_| write!(w, "{pid}"))
        .and_then(|_| w.write_all(&line[pe..]))
        .is_err()
    {
        return copy(out);
    }
    w.position() as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_lines_name_the_programs_pid_after_a_restart() {
        let _one = IDS.lock().unwrap_or_else(|e| e.into_inner());
        crum_set_pid_identity(100, 5000);
        let t = |l: &str| {
            let mut buf = [0u8; 512];
            let n = lock_line_to_program(l.as_bytes(), &mut buf);
            String::from_utf8(buf[..n].to_vec()).unwrap()
        };
        assert_eq!(
            t("1: POSIX  ADVISORY  WRITE 5000 fe:00:5678 0 EOF\n"),
            "1: POSIX  ADVISORY  WRITE 100 fe:00:5678 0 EOF\n"
        );
        assert_eq!(
            t("lock:\t1: FLOCK  ADVISORY  READ 5000 08:01:12 0 EOF\n"),
            "lock:\t1: FLOCK  ADVISORY  READ 100 08:01:12 0 EOF\n"
        );
        assert_eq!(
            t("2: -> POSIX  ADVISORY  WRITE 5000 fe:00:1 0 EOF\n"),
            "2: -> POSIX  ADVISORY  WRITE 100 fe:00:1 0 EOF\n"
        );
        assert_eq!(
            t("3: OFDLCK ADVISORY  WRITE -1 fe:00:1 0 EOF\n"),
            "3: OFDLCK ADVISORY  WRITE -1 fe:00:1 0 EOF\n"
        );
        assert_eq!(
            t("1: POSIX  ADVISORY  WRITE 4321 fe:00:5678 0 EOF\n"),
            "1: POSIX  ADVISORY  WRITE 4321 fe:00:5678 0 EOF\n"
        );
        assert_eq!(t("pos:\t0\n"), "pos:\t0\n");
        assert_eq!(t("Pid:\t5000\n"), "Pid:\t100\n");
        assert_eq!(t("Pid:\t-1\n"), "Pid:\t-1\n");
        assert_eq!(owner_to_program(5000), 100);
        assert_eq!(owner_to_program(-5000), -100);
        assert_eq!(owner_to_kernel(100), 5000);
        crum_set_pid_identity(500, 500);
        assert!(lists_lock_owners(b"/proc/locks"));
        assert!(lists_lock_owners(b"/proc/self/fdinfo/3"));
        assert!(lists_lock_owners(b"/proc/5000/fdinfo/12"));
        assert!(!lists_lock_owners(b"/proc/self/fdinfo/"));
        assert!(!lists_lock_owners(b"/proc/self/fd/3"));
        assert!(!lists_lock_owners(b"/proc/lockss"));
    }

    /// The ids are process-wide: one test at a time.
    static IDS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn ids_map_both_ways_only_after_a_restart() {
        let _one = IDS.lock().unwrap_or_else(|e| e.into_inner());
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

    #[test]
    fn job_members_map_both_ways() {
        let _one = IDS.lock().unwrap_or_else(|e| e.into_inner());
        let pairs = [100, 200, 200, 300, 7, 7];
        // SAFETY: three pairs.
        unsafe { crum_set_pid_table(pairs.as_ptr(), 3) };
        assert_eq!(to_kernel(100), 200);
        assert_eq!(to_kernel(200), 300);
        assert_eq!(to_kernel(-100), -200);
        assert_eq!((to_kernel(7), to_kernel(-1), to_kernel(0)), (7, -1, 0));
        assert_eq!(to_program(200), 100);
        assert_eq!(to_program(300), 200);
        assert_eq!(to_program(7), 7);
        let mut buf = [0u8; 4096];
        let n = proc_path(b"/proc/100/stat", &mut buf).unwrap();
        assert_eq!(&buf[..n - 1], b"/proc/200/stat");
        assert_eq!(proc_path(b"/proc/7/stat", &mut buf), None);
        // SAFETY: no pairs.
        unsafe { crum_set_pid_table(pairs.as_ptr(), 0) };
        assert_eq!(to_kernel(100), 100);
    }

    #[test]
    fn thread_ids_map_both_ways_and_keep_the_first_number_across_restarts() {
        let _one = IDS.lock().unwrap_or_else(|e| e.into_inner());
        let first = [4001, 5001, 4002, 5002];
        // SAFETY: two pairs.
        unsafe { crum_set_thread_ids(first.as_ptr(), 2) };
        assert_eq!((to_program(5001), to_kernel(4001)), (4001, 5001));
        assert_eq!((to_program(5002), to_kernel(4002)), (4002, 5002));
        // A restart of the restart: the image's kernel tids were 5001 and 5002.
        let second = [5001, 6001, 5002, 6002];
        // SAFETY: two pairs.
        unsafe { crum_set_thread_ids(second.as_ptr(), 2) };
        assert_eq!((to_program(6001), to_kernel(4001)), (4001, 6001));
        assert_eq!((to_program(6002), to_kernel(4002)), (4002, 6002));
        assert_eq!(to_kernel(5001), 5001, "the first restart's tids mean nothing now");
        // SAFETY: no pairs.
        unsafe { crum_set_thread_ids(first.as_ptr(), 0) };
        assert_eq!(to_kernel(4001), 4001);
    }

    #[test]
    fn proc_paths_of_the_programs_own_id_name_the_kernels() {
        let _one = IDS.lock().unwrap_or_else(|e| e.into_inner());
        let mut buf = [0u8; 4096];
        let mut t = |p: &str| proc_path(p.as_bytes(), &mut buf).map(|n| String::from_utf8_lossy(&buf[..n - 1]).into_owned());
        crum_set_pid_identity(1234, 1234);
        assert_eq!(t("/proc/1234/maps"), None);
        crum_set_pid_identity(100, 5000);
        assert_eq!(t("/proc/100/maps").as_deref(), Some("/proc/5000/maps"));
        assert_eq!(t("/proc/100").as_deref(), Some("/proc/5000"));
        assert_eq!(t("/proc/100/task/100/stat").as_deref(), Some("/proc/5000/task/5000/stat"));
        assert_eq!(t("/proc/self/task/100/comm").as_deref(), Some("/proc/self/task/5000/comm"));
        assert_eq!(t("/proc/1000/maps"), None);
        assert_eq!(t("/proc/10/maps"), None);
        assert_eq!(t("/proc/self/maps"), None);
        assert_eq!(t("/proc/100x"), None);
        assert_eq!(t("/tmp/100"), None);
        crum_set_pid_identity(500, 500);
    }
}
