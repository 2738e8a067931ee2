//! Stopping every thread of the process at a resumable point, and bringing threads back —
//! in the same process after a checkpoint, or in a restored one.
//!
//! The agent gives each thread a slot, reads what system call it is blocked in
//! (`/proc/self/task/<tid>/syscall`) and sends it [`stop_signal`]. The thread's handler
//! records its kernel-side state (TLS base, robust futex list, clear-child-tid address),
//! repairs an interrupted sleep or wait (`nanosleep`, `poll`, `epoll_wait`, `sigsuspend`…) so
//! it resumes instead of returning `EINTR`, saves a
//! resumable point with [`crum_call_saved`] and waits on a futex. Its registers at the
//! interruption are in the kernel's signal frame on its own stack; when the handler returns,
//! `rt_sigreturn` restores them, the signal mask and the alternate stack, and a system call
//! interrupted with `SA_RESTART` semantics is re-executed.
//!
//! In a restored process, [`restored_main`] (entered by the restorer on the main thread's
//! TLS) re-creates the other threads with raw `clone`, each on its slot's restart stack with
//! its saved TLS; every thread patches the tid glibc caches in its descriptor, re-registers
//! its rseq area and robust list, and jumps back to its saved point, where it waits for the
//! agent to release it — exactly as after an ordinary checkpoint.
//!
//! # Safety
//! The slot table and flags are atomics in static memory; a slot is written by the agent
//! before the thread is signalled and by the thread inside its handler, never concurrently.
//! Raw system calls receive pointers to live statics or locals. [`restored_main`] and
//! [`restored_thread`] run with no C library state of their own: they only use raw
//! system calls and atomics, on the restart stack the agent reserved for them.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::time::{Duration, Instant};

use crate::arch::{crum_call_saved, crum_clone_thread, crum_resume_at};

/// Most threads a checkpointed process may have.
pub const MAX_THREADS: usize = 1024;
/// Bytes of restart stack per thread.
pub const RESTART_STACK: usize = 64 * 1024;

const FREE: u32 = 0;
const SIGNALLED: u32 = 1;
const STOPPED: u32 = 2;

/// Per-thread record, in static memory so that it is part of every image.
pub struct Slot {
    pub tid: AtomicI32,
    state: AtomicU32,
    stop_gen: AtomicU32,
    /// Saved stack pointer of the resumable point.
    pub rsp: AtomicU64,
    pub fs_base: AtomicU64,
    robust_head: AtomicU64,
    robust_len: AtomicU64,
    ctid: AtomicU64,
    /// System call the thread was blocked in when signalled (-1: none) and its pc.
    sys_nr: AtomicI64,
    sys_pc: AtomicU64,
    /// Remaining time of an interrupted relative sleep (a `struct timespec`).
    sleep_buf: [AtomicI64; 2],
    restart_stack_top: AtomicU64,
    pub is_agent: AtomicBool,
    /// The thread's rseq registration when it stopped: [`RSEQ_GLIBC`] (or unknown),
    /// [`RSEQ_NONE`] or [`RSEQ_OTHER`].
    rseq: AtomicU32,
    /// The thread's name (`/proc/self/task/<tid>/comm`, NUL-padded), restored by prctl.
    name: [AtomicU64; 2],
    /// Scheduling policy (with `SCHED_RESET_ON_FORK`; -1: unknown), real-time priority and
    /// nice value, restored by `sched_setscheduler` and `setpriority`.
    policy: AtomicI32,
    rt_prio: AtomicI32,
    nice: AtomicI32,
    /// Timer slack in nanoseconds (0: unknown), restored with `PR_SET_TIMERSLACK`.
    timerslack: AtomicU64,
    /// The parent-death signal (`PR_SET_PDEATHSIG`; 0: none). This and the timer slack are
    /// read by the thread itself when it stops (the kernel tells them only to it).
    pdeathsig: AtomicI32,
}

#[allow(clippy::declare_interior_mutable_const)]
const SLOT_INIT: Slot = Slot {
    tid: AtomicI32::new(0),
    state: AtomicU32::new(FREE),
    stop_gen: AtomicU32::new(0),
    rsp: AtomicU64::new(0),
    fs_base: AtomicU64::new(0),
    robust_head: AtomicU64::new(0),
    robust_len: AtomicU64::new(0),
    ctid: AtomicU64::new(0),
    sys_nr: AtomicI64::new(-1),
    sys_pc: AtomicU64::new(0),
    sleep_buf: [AtomicI64::new(0), AtomicI64::new(0)],
    restart_stack_top: AtomicU64::new(0),
    is_agent: AtomicBool::new(false),
    rseq: AtomicU32::new(RSEQ_GLIBC),
    name: [AtomicU64::new(0), AtomicU64::new(0)],
    policy: AtomicI32::new(-1),
    rt_prio: AtomicI32::new(0),
    nice: AtomicI32::new(0),
    timerslack: AtomicU64::new(0),
    pdeathsig: AtomicI32::new(0),
};

pub static SLOTS: [Slot; MAX_THREADS] = [SLOT_INIT; MAX_THREADS];
/// Number of slots in use by the current checkpoint.
pub static NSLOTS: AtomicUsize = AtomicUsize::new(0);
/// Bumped to release stopped threads.
static RELEASE_GEN: AtomicU32 = AtomicU32::new(0);
/// Offset of the tid field in glibc's thread descriptor (`struct pthread`), 0 = unknown.
pub static TID_OFFSET: AtomicUsize = AtomicUsize::new(0);
static RSEQ_OFFSET: AtomicI64 = AtomicI64::new(0);
static RSEQ_SIZE: AtomicU32 = AtomicU32::new(0);
static STOP_SIG: AtomicI32 = AtomicI32::new(0);
static RESTART_STACKS: AtomicU64 = AtomicU64::new(0);
static RESTART_STACKS_LEN: AtomicUsize = AtomicUsize::new(0);

const RSEQ_SIG: u32 = 0x5305_3053;
/// A thread's rseq registration ([`Slot::rseq`]): glibc's area (what a restart registers), or
/// not known; none (glibc's disabled: `glibc.pthread.rseq=0`); another area, length or
/// signature (a program registering its own after unregistering glibc's: CRIU's `rseq00`).
const RSEQ_GLIBC: u32 = 0;
const RSEQ_NONE: u32 = 1;
const RSEQ_OTHER: u32 = 2;
const RSEQ_FLAG_UNREGISTER: i32 = 1;
const ARCH_GET_FS: i32 = 0x1003;
const PR_GET_TID_ADDRESS: i32 = 40;

/// The real-time signal used to stop threads (SIGRTMAX - 1).
pub fn stop_signal() -> i32 {
    let s = STOP_SIG.load(Relaxed);
    if s != 0 {
        return s;
    }
    let s = libc::SIGRTMAX() - 1;
    STOP_SIG.store(s, Relaxed);
    s
}

/// This process's pid as the kernel knows it. The C library's `getpid` is the program's view
/// (`libcrum_libc.so` answers the pid the program started with, after a restart): crum's own
/// code asks the kernel.
pub fn real_pid() -> i32 {
    // SAFETY: getpid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_getpid) as i32 }
}

pub fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

fn futex_wait(word: &AtomicU32, val: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|d| libc::timespec { tv_sec: d.as_secs() as i64, tv_nsec: d.subsec_nanos() as i64 });
    let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live atomic; the timeout pointer is null or a live local.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, val, tsp, 0, 0);
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a live atomic.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, i32::MAX, 0, 0, 0);
    }
}

/// Learns what the restorer-side code needs about the C library: the offset of the tid in
/// the thread descriptor and glibc's rseq area. Call on any thread before the first
/// checkpoint; returns an error if the tid is not found or the threads disagree.
pub fn probe_libc() -> Result<(), String> {
    let off = tid_offset()?;
    let prev = TID_OFFSET.swap(off, Relaxed);
    if prev != 0 && prev != off {
        return Err(format!("tid offset in the thread descriptor differs between threads ({prev} vs {off})"));
    }
    // SAFETY: dlsym with a NUL-terminated name; the results are read only if non-null and
    // point at glibc's exported `__rseq_offset` (ptrdiff_t) and `__rseq_size` (unsigned int).
    unsafe {
        let o = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr()) as *const isize;
        let s = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr()) as *const u32;
        if !o.is_null() && !s.is_null() {
            RSEQ_OFFSET.store(*o as i64, Relaxed);
            RSEQ_SIZE.store(*s, Relaxed);
        }
    }
    Ok(())
}

/// Bytes of the thread descriptor searched for the tid (glibc's is far larger: it embeds the
/// TCB, lists, and the rseq area past it).
const DESCRIPTOR_SCAN: usize = 2048;

/// Offset of the tid field in the calling thread's `struct pthread`. glibc hands the kernel
/// that field's address as the thread's clear-child-tid address, which the kernel tells
/// (`PR_GET_TID_ADDRESS`, where it is built with checkpoint support). Otherwise the field is
/// found by its value — which a pointer's upper half can equal by chance (a heap address's
/// is about 0x55xx, a plausible tid), so an offset holding the tid in this thread is
/// confirmed in a second thread.
fn tid_offset() -> Result<usize, String> {
    let here = tid_candidates();
    let mut ctid: u64 = 0;
    // SAFETY: prctl writes the address into the live local.
    if unsafe { libc::prctl(PR_GET_TID_ADDRESS, &mut ctid as *mut u64) } == 0 {
        // SAFETY: pthread_self cannot fail.
        let off = ctid.wrapping_sub(unsafe { libc::pthread_self() } as u64) as usize;
        if here.contains(&off) {
            return Ok(off);
        }
    }
    let known = TID_OFFSET.load(Relaxed);
    let common: Vec<usize> = if known != 0 {
        // A thread's value at an offset another thread confirmed is confirmation enough.
        here.into_iter().filter(|&o| o == known).collect()
    } else if here.len() <= 1 {
        here
    } else {
        let other = std::thread::Builder::new()
            .name("crum-probe".into())
            .spawn(tid_candidates)
            .and_then(|t| t.join().map_err(|_| std::io::Error::other("panicked")))
            .map_err(|e| format!("cannot start a thread to find the thread id's offset: {e}"))?;
        here.into_iter().filter(|o| other.contains(o)).collect()
    };
    match common[..] {
        [off] => Ok(off),
        [] => Err("cannot find the thread id in the C library's thread descriptor".into()),
        _ => Err(format!("the thread id's offset in the C library's thread descriptor is ambiguous ({common:?})")),
    }
}

/// Offsets in the calling thread's descriptor that hold its tid.
fn tid_candidates() -> Vec<usize> {
    let tid = gettid();
    // SAFETY: pthread_self returns the descriptor address, valid for DESCRIPTOR_SCAN bytes.
    let base = unsafe { libc::pthread_self() } as *const i32;
    // SAFETY: within the descriptor, see above.
    (0..DESCRIPTOR_SCAN / 4).filter(|&i| unsafe { base.add(i).read_volatile() } == tid).map(|i| i * 4).collect()
}

/// Installs the stop-signal handler (idempotent).
pub fn install_handler() -> Result<(), String> {
    // SAFETY: sigaction with a fully initialised struct; the handler is async-signal-safe
    // (atomics and raw system calls only).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = stop_handler as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigfillset(&mut sa.sa_mask);
        if libc::sigaction(stop_signal(), &sa, std::ptr::null_mut()) != 0 {
            return Err(format!("cannot install the stop signal handler: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

fn find_slot(tid: i32) -> Option<usize> {
    let n = NSLOTS.load(Acquire);
    (0..n).find(|&i| SLOTS[i].tid.load(Acquire) == tid)
}

fn record_kernel_state(slot: &Slot) {
    let mut fs: u64 = 0;
    let mut head: u64 = 0;
    let mut len: u64 = 0;
    let mut ctid: u64 = 0;
    let mut pdeath: libc::c_int = 0;
    let slack;
    // SAFETY: each call writes into the live locals passed (the timer slack query returns
    // the value: the calling thread's, like the parent-death signal's).
    unsafe {
        if libc::prctl(libc::PR_GET_PDEATHSIG, &mut pdeath as *mut libc::c_int) != 0 {
            pdeath = 0;
        }
        slack = libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0).max(0) as u64;
        libc::syscall(libc::SYS_arch_prctl, ARCH_GET_FS, &mut fs as *mut u64);
        libc::syscall(libc::SYS_get_robust_list, 0, &mut head as *mut u64, &mut len as *mut u64);
        if libc::prctl(PR_GET_TID_ADDRESS, &mut ctid as *mut u64) != 0 {
            ctid = 0;
        }
    }
    if ctid == 0 {
        let off = TID_OFFSET.load(Relaxed);
        if off != 0 {
            ctid = fs + off as u64;
        }
    }
    slot.fs_base.store(fs, Relaxed);
    slot.robust_head.store(head, Relaxed);
    slot.robust_len.store(len, Relaxed);
    slot.ctid.store(ctid, Relaxed);
    slot.pdeathsig.store(pdeath, Relaxed);
    slot.timerslack.store(slack, Relaxed);
    slot.rseq.store(rseq_registration(fs), Relaxed);
}

/// Which rseq area the calling thread has registered (the kernel tells it only through
/// ptrace): registering glibc's again answers `EBUSY` when it is the one, `EINVAL` or `EPERM`
/// when another area, length or signature is, and succeeds when none is (undone at once).
fn rseq_registration(fs: u64) -> u32 {
    let size = RSEQ_SIZE.load(Relaxed);
    if size == 0 || fs == 0 {
        return RSEQ_GLIBC;
    }
    let area = (fs as i64 + RSEQ_OFFSET.load(Relaxed)) as u64;
    // SAFETY: rseq with glibc's own area of this thread (the one glibc registers), its length
    // and signature; a registration made here is undone at once.
    unsafe {
        let r = libc::syscall(libc::SYS_rseq, area, size.max(32), 0, RSEQ_SIG);
        if r == 0 {
            libc::syscall(libc::SYS_rseq, area, size.max(32), RSEQ_FLAG_UNREGISTER, RSEQ_SIG);
            return RSEQ_NONE;
        }
        match *libc::__errno_location() {
            libc::EBUSY => RSEQ_GLIBC,
            libc::EINVAL | libc::EPERM => RSEQ_OTHER,
            _ => RSEQ_GLIBC,
        }
    }
}

/// The program's threads of the current checkpoint that registered an rseq area of their
/// own: a restart registers glibc's (the kernel tells the area only to a tracer), so the
/// program's would be silently replaced.
pub fn rseq_refusals() -> Vec<String> {
    let n = NSLOTS.load(Acquire);
    (0..n)
        .filter(|&i| SLOTS[i].tid.load(Relaxed) > 0 && !SLOTS[i].is_agent.load(Relaxed) && SLOTS[i].rseq.load(Relaxed) == RSEQ_OTHER)
        .map(|i| {
            let tid = SLOTS[i].tid.load(Relaxed);
            format!(
                "thread {tid} ({}) registered an rseq area other than the C library's: a restart would register the C library's instead",
                thread_name(tid)
            )
        })
        .collect()
}

// ucontext_t general registers (glibc's REG_* indices).
const REG_R10: usize = 2;
const REG_RDI: usize = 8;
const REG_RSI: usize = 9;
const REG_RDX: usize = 12;
const REG_RAX: usize = 13;
const REG_RIP: usize = 16;
const TIMER_ABSTIME: i64 = 1;

/// System calls that a handled signal ends with `EINTR` whatever `SA_RESTART` says
/// (signal(7)), besides the sleeps: interrupted by crum's stop signal, which the program must
/// not notice, they are issued again. Waits with a timeout in a register (`poll`,
/// `epoll_wait`) wait their full timeout again; `select`, `ppoll` and `pselect6` have had
/// the time left written back by the kernel.
const REISSUED: [i64; 15] = [
    libc::SYS_poll,
    libc::SYS_select,
    libc::SYS_pause,
    libc::SYS_rt_sigtimedwait,
    libc::SYS_rt_sigsuspend,
    libc::SYS_epoll_wait,
    libc::SYS_pselect6,
    libc::SYS_ppoll,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_pwait2,
    libc::SYS_msgrcv,
    libc::SYS_msgsnd,
    libc::SYS_semop,
    libc::SYS_semtimedop,
    libc::SYS_io_getevents,
];

/// A relative `nanosleep`/`clock_nanosleep` interrupted by a handled signal returns
/// `EINTR` whatever `SA_RESTART` says. Rewrite the frame so the sleep is re-issued for the
/// remaining time (known when the caller passed `rem`; otherwise the full request) — absolute
/// sleeps simply restart. The waits of [`REISSUED`] are re-issued as they were.
fn fix_interrupted_call(slot: &Slot, uc: *mut libc::ucontext_t) {
    let nr = slot.sys_nr.load(Relaxed);
    let sleep = nr == libc::SYS_nanosleep || nr == libc::SYS_clock_nanosleep;
    if !sleep && !REISSUED.contains(&nr) {
        return;
    }
    // SAFETY: `uc` is the kernel's ucontext for this handler invocation, live on our stack.
    let g = unsafe { &mut (*uc).uc_mcontext.gregs };
    if g[REG_RIP] as u64 != slot.sys_pc.load(Relaxed) || g[REG_RAX] != -(libc::EINTR as i64) {
        return;
    }
    if !sleep {
        g[REG_RAX] = nr;
        g[REG_RIP] -= 2;
        return;
    }
    let (req_reg, rem_reg, absolute) = if nr == libc::SYS_nanosleep {
        (REG_RDI, REG_RSI, false)
    } else {
        (REG_RDX, REG_R10, g[REG_RSI] & TIMER_ABSTIME != 0)
    };
    if !absolute {
        let src = if g[rem_reg] != 0 { g[rem_reg] } else { g[req_reg] } as *const i64;
        // SAFETY: the program passed these timespec pointers to the kernel, which read (req)
        // or wrote (rem) them; they are valid user memory of this thread.
        let (s, ns) = unsafe { (src.read_volatile(), src.add(1).read_volatile()) };
        slot.sleep_buf[0].store(s, Relaxed);
        slot.sleep_buf[1].store(ns, Relaxed);
        g[req_reg] = slot.sleep_buf.as_ptr() as i64;
    }
    g[REG_RAX] = nr;
    g[REG_RIP] -= 2;
}

/// Most process-directed signals one checkpoint takes from the queue (real-time ones queue).
pub const MAX_PENDING: usize = 256;
const INFO_WORDS: usize = 16; // sizeof(siginfo_t) / 8
/// The queued signals of the process at the last stop, taken and put back by the main thread
/// ([`take_pending_signals`]): numbers and `siginfo_t` words. Program memory, so a restored
/// process has them too ([`requeue_pending_signals`]).
static PENDING_SIGS: [AtomicI32; MAX_PENDING] = [const { AtomicI32::new(0) }; MAX_PENDING];
static PENDING_INFO: [AtomicU64; MAX_PENDING * INFO_WORDS] = [const { AtomicU64::new(0) }; MAX_PENDING * INFO_WORDS];
static PENDING_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Signals that could not be queued again (more than [`MAX_PENDING`], or refused).
static PENDING_LOST: AtomicUsize = AtomicUsize::new(0);

/// A hexadecimal mask line (`key` followed by the value) of a status text.
fn mask_line(text: &[u8], key: &[u8]) -> u64 {
    let Some(at) = text.windows(key.len()).position(|w| w == key) else { return 0 };
    let mut v = 0u64;
    for &c in text[at + key.len()..].iter().skip_while(|c| c.is_ascii_whitespace()) {
        let Some(d) = (c as char).to_digit(16) else { break };
        v = (v << 4) | d as u64;
    }
    v
}

/// On the main thread (in its stop handler): takes every process-directed signal waiting in
/// the queue with its `siginfo_t` and puts it back at once in the same order. Only the main
/// thread may queue a signal with the original sender's code to its own process
/// (`rt_sigqueueinfo` checks the caller's tid against the pid). Raw system calls only.
fn take_pending_signals() {
    let mut buf = [0u8; 4096];
    // SAFETY: open/read/close of our own descriptor into the live stack buffer.
    let n = unsafe {
        let fd = libc::open(c"/proc/self/status".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            0
        } else {
            let n = libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len());
            libc::close(fd);
            n.max(0) as usize
        }
    };
    let text = &buf[..n];
    // Signals also waiting for the main thread alone are left alone (sigtimedwait would take
    // those first); they are named by the agent like every thread's.
    let shared = mask_line(text, b"ShdPnd:") & !mask_line(text, b"SigPnd:");
    let mut count = 0;
    let mut lost = 0;
    for sig in 1..=64i32 {
        if shared & (1 << (sig - 1)) == 0 {
            continue;
        }
        loop {
            let mut set = [0u64; 1];
            set[0] = 1 << (sig - 1);
            let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            let mut info = [0u64; INFO_WORDS];
            // SAFETY: rt_sigtimedwait with a zero timeout takes a pending signal of `set`
            // into the live buffer (8: the kernel's sigset size).
            let r = unsafe { libc::syscall(libc::SYS_rt_sigtimedwait, set.as_ptr(), info.as_mut_ptr(), &zero, 8) };
            if r != sig as i64 {
                break;
            }
            if count == MAX_PENDING {
                // No room to remember it: put it back, and say the restart loses it.
                // SAFETY: the signal's siginfo is in the live buffer; queued to ourselves.
                unsafe { libc::syscall(libc::SYS_rt_sigqueueinfo, libc::syscall(libc::SYS_getpid), sig, info.as_ptr()) };
                lost += 1;
                break;
            }
            PENDING_SIGS[count].store(sig, Relaxed);
            for (w, v) in info.iter().enumerate() {
                PENDING_INFO[count * INFO_WORDS + w].store(*v, Relaxed);
            }
            count += 1;
        }
    }
    PENDING_COUNT.store(count, Relaxed);
    PENDING_LOST.store(lost, Relaxed);
    requeue(count);
}

/// Queues the remembered signals again (raw; on the main thread).
fn requeue(count: usize) {
    // SAFETY: getpid cannot fail.
    let pid = unsafe { libc::syscall(libc::SYS_getpid) };
    for i in 0..count {
        let mut info = [0u64; INFO_WORDS];
        for (w, v) in info.iter_mut().enumerate() {
            *v = PENDING_INFO[i * INFO_WORDS + w].load(Relaxed);
        }
        // SAFETY: a siginfo_t image in a live buffer, queued to our own process.
        if unsafe { libc::syscall(libc::SYS_rt_sigqueueinfo, pid, PENDING_SIGS[i].load(Relaxed), info.as_ptr()) } != 0 {
            PENDING_LOST.fetch_add(1, Relaxed);
        }
    }
}

/// In a restored process, on the main thread before any other thread exists: the signals
/// that were waiting at the checkpoint wait again.
fn requeue_pending_signals() {
    requeue(PENDING_COUNT.load(Relaxed).min(MAX_PENDING));
}

/// The signals waiting at the last stop, as (number, `siginfo_t` bytes), and how many could
/// not be kept.
pub fn pending_signals() -> (Vec<(i32, Vec<u8>)>, usize) {
    let n = PENDING_COUNT.load(Relaxed).min(MAX_PENDING);
    let out = (0..n)
        .map(|i| {
            let bytes = (0..INFO_WORDS).flat_map(|w| PENDING_INFO[i * INFO_WORDS + w].load(Relaxed).to_ne_bytes()).collect();
            (PENDING_SIGS[i].load(Relaxed), bytes)
        })
        .collect();
    (out, PENDING_LOST.load(Relaxed))
}

/// The value a job's root queues crum's stop signal with (`SI_QUEUE`) to each thread of a
/// stopped member before it continues it ([`hold`]).
pub const HOLD_MAGIC: u64 = 0x6372_756d_686f_6c64; // "crumhold"
/// How long a held thread waits for its agent to take it into a stop before it goes on.
const HOLD_LIMIT: Duration = Duration::from_secs(30);
/// Bumped (and woken) when a slot is signalled, so that held threads look again.
static HOLD_WORD: AtomicU32 = AtomicU32::new(0);
/// What held threads were blocked in before they were stopped by the kernel (tid, system
/// call, pc: read by the job's root while the process was stopped), for [`stop_all`]: by
/// the time the agent looks, they wait in their handler.
static HELD: [[AtomicI64; 3]; MAX_THREADS] = [const { [AtomicI64::new(0), AtomicI64::new(0), AtomicI64::new(0)] }; MAX_THREADS];
static NHELD: AtomicUsize = AtomicUsize::new(0);

/// Records what the held threads of this process were blocked in ([`HELD`]); used and
/// forgotten by the next [`stop_all`].
pub fn set_held(held: &[(i32, i64, u64)]) {
    let n = held.len().min(MAX_THREADS);
    for (i, &(tid, nr, pc)) in held.iter().take(n).enumerate() {
        HELD[i][0].store(tid as i64, Relaxed);
        HELD[i][1].store(nr, Relaxed);
        HELD[i][2].store(pc as i64, Relaxed);
    }
    NHELD.store(n, Release);
}

fn held_syscall(tid: i32) -> Option<(i64, u64)> {
    let n = NHELD.load(Acquire);
    HELD.iter().take(n).find(|h| h[0].load(Relaxed) == tid as i64).map(|h| (h[1].load(Relaxed), h[2].load(Relaxed) as u64))
}

/// A thread of a stopped process that its job's root continues for a checkpoint enters
/// crum's handler before any instruction of the program (the signal was queued before the
/// `SIGCONT`) and waits here until its agent's [`stop_all`] takes it (its slot signalled),
/// or [`HOLD_LIMIT`] has passed (the checkpoint was given up before the agent was asked).
/// Returns the slot to stop in.
fn hold(tid: i32) -> Option<usize> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime into a live local.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let deadline = ts.tv_sec + HOLD_LIMIT.as_secs() as i64;
    loop {
        let seen = HOLD_WORD.load(Acquire);
        if let Some(idx) = find_slot(tid) {
            if SLOTS[idx].state.load(Acquire) == SIGNALLED {
                return Some(idx);
            }
        }
        // SAFETY: as above.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        if ts.tv_sec >= deadline {
            return None;
        }
        futex_wait(&HOLD_WORD, seen, Some(Duration::from_millis(10)));
    }
}

extern "C" fn stop_handler(_sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: __errno_location returns this thread's errno; restored before returning so the
    // interrupted code never sees our system calls' errors.
    let errno = unsafe { *libc::__errno_location() };
    let tid = gettid();
    // SAFETY: the kernel's siginfo for this delivery (SA_SIGINFO); si_value is meaningful for
    // SI_QUEUE, the only code read.
    let held = !info.is_null()
        && unsafe { (*info).si_code == libc::SI_QUEUE && (*info).si_value().sival_ptr as u64 == HOLD_MAGIC }
        && !crate::writes::is_crum_thread();
    let idx = match find_slot(tid) {
        Some(i) if SLOTS[i].state.load(Acquire) == SIGNALLED => Some(i),
        _ if held => hold(tid),
        _ => None,
    };
    if let Some(idx) = idx {
        let slot = &SLOTS[idx];
        if slot.state.load(Acquire) == SIGNALLED {
            // SAFETY: getpid cannot fail.
            if tid as i64 == unsafe { libc::syscall(libc::SYS_getpid) } {
                take_pending_signals();
            }
            record_kernel_state(slot);
            fix_interrupted_call(slot, uc as *mut libc::ucontext_t);
            // SAFETY: `park` runs on this stack; the saved point stays valid while it waits,
            // which is when images are taken.
            unsafe { crum_call_saved(park, idx as u64, slot.rsp.as_ptr()) };
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

extern "C" fn park(idx: u64) -> u64 {
    let slot = &SLOTS[idx as usize];
    // The generation the agent signalled the thread in: a handler that runs only after the
    // agent gave up and released the others (the signal was blocked, or the thread was in
    // `vfork`) finds it past and returns at once instead of waiting for ever.
    let gen = slot.stop_gen.load(Relaxed);
    slot.state.store(STOPPED, Release);
    futex_wake(&slot.state);
    wait_release(gen);
    0
}

fn wait_release(gen: u32) {
    while RELEASE_GEN.load(Acquire) == gen {
        futex_wait(&RELEASE_GEN, gen, None);
    }
}

fn read_syscall(tid: i32) -> (i64, u64) {
    let Ok(s) = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")) else {
        return (-1, 0);
    };
    let f: Vec<&str> = s.split_whitespace().collect();
    if f.len() < 9 {
        return (-1, 0);
    }
    let nr = f[0].parse::<i64>().unwrap_or(-1);
    let pc = u64::from_str_radix(f[f.len() - 1].trim_start_matches("0x"), 16).unwrap_or(0);
    (nr, pc)
}

fn list_tasks() -> Vec<i32> {
    crate::capture::numeric_entries(c"/proc/self/task")
}

fn thread_name(tid: i32) -> String {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// Records the thread's name and scheduling attributes in its slot.
fn save_task(slot: &Slot, tid: i32) {
    save_name(slot, tid);
    // SAFETY: queries about a thread of this process; the param is a live local.
    unsafe {
        let mut param: libc::sched_param = std::mem::zeroed();
        let policy = libc::sched_getscheduler(tid);
        let ok = policy >= 0 && libc::sched_getparam(tid, &mut param) == 0;
        slot.policy.store(if ok { policy } else { -1 }, Relaxed);
        slot.rt_prio.store(param.sched_priority, Relaxed);
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
        slot.nice.store(if *libc::__errno_location() == 0 { nice } else { i32::MIN }, Relaxed);
    }
}

fn save_name(slot: &Slot, tid: i32) {
    let mut b = [0u8; 16];
    let n = thread_name(tid);
    let len = n.len().min(15);
    b[..len].copy_from_slice(&n.as_bytes()[..len]);
    slot.name[0].store(u64::from_ne_bytes(b[..8].try_into().unwrap_or_default()), Relaxed);
    slot.name[1].store(u64::from_ne_bytes(b[8..].try_into().unwrap_or_default()), Relaxed);
}

/// How long a thread may block the stop signal before a checkpoint gives up on it.
const BLOCKED_GRACE: Duration = Duration::from_millis(300);

/// `SIGRTMAX-1`, the stop signal's name.
pub fn stop_signal_name() -> String {
    let off = libc::SIGRTMAX() - stop_signal();
    if off == 0 {
        "SIGRTMAX".into()
    } else {
        format!("SIGRTMAX-{off}")
    }
}

/// Whether thread `tid` of this process blocks the stop signal (`SigBlk` in its status).
fn blocks_stop_signal(tid: i32) -> bool {
    let Ok(s) = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")) else { return false };
    mask_blocks(&s, stop_signal())
}

/// Whether thread `tid` of this process runs under `SECCOMP_MODE_STRICT` (`Seccomp: 1`).
fn strict_seccomp(tid: i32) -> bool {
    let Ok(s) = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")) else { return false };
    s.lines().any(|l| l.strip_prefix("Seccomp:").is_some_and(|v| v.trim() == "1"))
}

/// Whether the `SigBlk:` line of a /proc status text has signal `sig` set.
fn mask_blocks(status: &str, sig: i32) -> bool {
    let Some(line) = status.lines().find_map(|l| l.strip_prefix("SigBlk:")) else { return false };
    let Ok(mask) = u64::from_str_radix(line.trim(), 16) else { return false };
    (1..=64).contains(&sig) && mask & (1u64 << (sig - 1)) != 0
}

fn blocked_message(tid: i32, name: &str) -> String {
    format!(
        "thread {tid} ({name}) blocks signal {} (crum's stop signal), so crum cannot stop it for a checkpoint; \
         the program must leave that signal unblocked in every thread",
        stop_signal_name()
    )
}

/// Stops every thread but the caller (the agent). On error all threads stopped so far are
/// released again. Returns the number of slots used (the caller's slot included).
pub fn stop_all(timeout: Duration) -> Result<usize, String> {
    for s in SLOTS.iter() {
        s.tid.store(0, Relaxed);
        s.state.store(FREE, Relaxed);
        s.is_agent.store(false, Relaxed);
        s.sys_nr.store(-1, Relaxed);
    }
    let me = gettid();
    // The main thread takes the waiting signals when it stops; if it is the one stopping the
    // others (a checkpoint asked for from the program's main thread), it takes them here.
    PENDING_COUNT.store(0, Relaxed);
    PENDING_LOST.store(0, Relaxed);
    // SAFETY: getpid cannot fail.
    if me as i64 == unsafe { libc::syscall(libc::SYS_getpid) } {
        take_pending_signals();
    }
    SLOTS[0].tid.store(me, Relaxed);
    SLOTS[0].is_agent.store(true, Relaxed);
    SLOTS[0].state.store(STOPPED, Relaxed);
    record_kernel_state(&SLOTS[0]);
    save_task(&SLOTS[0], me);
    NSLOTS.store(1, Release);
    let pid = real_pid();
    let deadline = Instant::now() + timeout;
    loop {
        let mut new = 0;
        for tid in list_tasks() {
            if tid == me || find_slot(tid).is_some() {
                continue;
            }
            let n = NSLOTS.load(Relaxed);
            if n >= MAX_THREADS {
                abandon();
                return Err(format!("more than {MAX_THREADS} threads"));
            }
            // A thread under SECCOMP_MODE_STRICT may make no system call but read, write and
            // exit: the handler's would end it (SIGKILL), and the program with it.
            if strict_seccomp(tid) {
                let name = thread_name(tid);
                abandon();
                return Err(format!(
                    "thread {tid} ({name}) runs under SECCOMP_MODE_STRICT, where crum's stop handler could make no system call: it cannot be checkpointed"
                ));
            }
            let slot = &SLOTS[n];
            save_task(slot, tid);
            let (nr, pc) = held_syscall(tid).unwrap_or_else(|| read_syscall(tid));
            slot.sys_nr.store(nr, Relaxed);
            slot.sys_pc.store(pc, Relaxed);
            slot.stop_gen.store(RELEASE_GEN.load(Acquire), Relaxed);
            slot.state.store(SIGNALLED, Relaxed);
            slot.tid.store(tid, Release);
            NSLOTS.store(n + 1, Release);
            // SAFETY: tgkill on a thread of our own process.
            let r = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, stop_signal()) };
            // A thread held in its handler ([`hold`]) looks again.
            HOLD_WORD.fetch_add(1, Release);
            futex_wake(&HOLD_WORD);
            if r != 0 {
                // It exited meanwhile: leave the slot marked so it is skipped.
                slot.state.store(FREE, Relaxed);
                slot.tid.store(-1, Release);
                continue;
            }
            new += 1;
        }
        // Wait for every signalled thread.
        let n = NSLOTS.load(Acquire);
        for slot in SLOTS.iter().take(n).skip(1) {
            // Since when the thread has been seen blocking the stop signal.
            let mut blocked_since: Option<Instant> = None;
            while slot.state.load(Acquire) == SIGNALLED {
                let tid = slot.tid.load(Relaxed);
                if !std::path::Path::new(&format!("/proc/self/task/{tid}")).exists() {
                    slot.state.store(FREE, Relaxed);
                    slot.tid.store(-1, Release);
                    break;
                }
                // A thread that blocks the stop signal would never stop: say so at once
                // (after a grace period for the moments in which the C library blocks every
                // signal, e.g. inside pthread_create or posix_spawn).
                let vfork = in_vfork(tid);
                if vfork || blocks_stop_signal(tid) {
                    let since = *blocked_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= BLOCKED_GRACE {
                        let name = thread_name(tid);
                        abandon();
                        return Err(if vfork { vfork_message(tid, &name) } else { blocked_message(tid, &name) });
                    }
                } else {
                    blocked_since = None;
                }
                if Instant::now() > deadline {
                    let name = thread_name(tid);
                    abandon();
                    return Err(format!(
                        "thread {tid} ({name}) did not stop within {timeout:?} (it neither ran its handler for {}, crum's stop signal, nor blocked it)",
                        stop_signal_name()
                    ));
                }
                futex_wait(&slot.state, SIGNALLED, Some(Duration::from_millis(10)));
            }
        }
        if new == 0 {
            break;
        }
    }
    NHELD.store(0, Release);
    Ok(NSLOTS.load(Acquire))
}

/// Gives up a stop in progress: threads signalled but not stopped yet (their handler will
/// run whenever they unblock the signal or their `vfork` child lets them go) are let off, so
/// that late handler returns at once, and the stopped ones continue.
fn abandon() {
    NHELD.store(0, Release);
    for slot in SLOTS.iter().take(NSLOTS.load(Acquire)) {
        let _ = slot.state.compare_exchange(SIGNALLED, FREE, AcqRel, Relaxed);
    }
    release_all();
}

/// Whether thread `tid` waits in `vfork` (or a `clone` with `CLONE_VFORK`, as `posix_spawn`
/// makes) for its child to execute a program or exit: the kernel runs no signal handler of
/// the thread until then, so it cannot be stopped.
fn in_vfork(tid: i32) -> bool {
    let Ok(s) = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")) else { return false };
    let f: Vec<&str> = s.split_whitespace().collect();
    let nr = f.first().and_then(|v| v.parse::<i64>().ok()).unwrap_or(-1);
    let arg0 = f.get(1).and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok()).unwrap_or(0);
    nr == libc::SYS_vfork || (nr == libc::SYS_clone && arg0 & libc::CLONE_VFORK as u64 != 0)
}

fn vfork_message(tid: i32, name: &str) -> String {
    format!(
        "thread {tid} ({name}) is in vfork(), waiting for its child to execute a program or exit; \
         it runs no signal handler until then, so crum cannot stop it for a checkpoint (try again once the child has)"
    )
}

/// Lets every stopped thread continue.
pub fn release_all() {
    RELEASE_GEN.fetch_add(1, Release);
    futex_wake(&RELEASE_GEN);
}

/// Slots of live threads in the current checkpoint: (index, tid, fs_base, is_agent).
pub fn live_slots() -> Vec<(usize, i32, u64, bool)> {
    let n = NSLOTS.load(Acquire);
    (0..n)
        .filter(|&i| SLOTS[i].tid.load(Relaxed) > 0)
        .map(|i| (i, SLOTS[i].tid.load(Relaxed), SLOTS[i].fs_base.load(Relaxed), SLOTS[i].is_agent.load(Relaxed)))
        .collect()
}

/// Reserves a restart stack for every slot in use (kept and reused across checkpoints).
pub fn prepare_restart_stacks() -> Result<(), String> {
    let n = NSLOTS.load(Acquire);
    let need = n * RESTART_STACK;
    let have = RESTART_STACKS_LEN.load(Relaxed);
    if have < need {
        let len = need.next_power_of_two().max(4 * RESTART_STACK);
        // A fresh anonymous mapping in crum's range (`highmem`: not next to the program's
        // mappings); the old one (if any) is no longer referenced by any slot once replaced
        // below.
        let p = crate::highmem::map(len, libc::MAP_NORESERVE).ok_or("cannot reserve restart stacks")?;
        let old = RESTART_STACKS.swap(p as u64, Relaxed);
        if old != 0 {
            // SAFETY: the previous reservation, unused now.
            unsafe { libc::munmap(old as *mut libc::c_void, have) };
        }
        RESTART_STACKS_LEN.store(len, Relaxed);
    }
    let base = RESTART_STACKS.load(Relaxed);
    for (i, s) in SLOTS.iter().enumerate().take(n) {
        s.restart_stack_top.store(base + ((i + 1) * RESTART_STACK) as u64 - 64, Relaxed);
    }
    Ok(())
}

/// Saves the agent's own resumable point around `f(arg)`: returns `f`'s result, or 1 when the
/// process was restored from an image taken while `f` ran.
pub fn agent_call_saved(f: extern "C" fn(u64) -> u64, arg: u64) -> u64 {
    // SAFETY: slot 0 is the agent's for the current checkpoint; its point stays valid while
    // `f` runs (the image is taken inside `f`).
    unsafe { crum_call_saved(f, arg, SLOTS[0].rsp.as_ptr()) }
}

/// Stack top for the main thread's restart (the restorer switches to it).
pub fn restart_stack_top(slot: usize) -> u64 {
    SLOTS[slot].restart_stack_top.load(Relaxed)
}

fn raw_fail(msg: &[u8]) -> ! {
    // SAFETY: write to stderr and exit; no library state involved.
    unsafe {
        libc::syscall(libc::SYS_write, 2, msg.as_ptr(), msg.len());
        libc::syscall(libc::SYS_exit_group, 125);
    }
    unreachable!()
}

/// Kernel-side per-thread state of a restored thread: cached tid, robust list, name,
/// scheduling, nice value, timer slack, rseq.
fn setup_restored_thread(slot: &Slot, set_ctid: bool) {
    let tid = gettid();
    slot.tid.store(tid, Relaxed);
    let fs = slot.fs_base.load(Relaxed);
    let off = TID_OFFSET.load(Relaxed);
    // SAFETY: fs + off is this thread's descriptor's tid field (probed at agent start);
    // the other calls take addresses that were registered for this thread before.
    unsafe {
        if off != 0 {
            ((fs + off as u64) as *mut i32).write_volatile(tid);
        }
        if set_ctid {
            libc::syscall(libc::SYS_set_tid_address, slot.ctid.load(Relaxed));
        }
        let head = slot.robust_head.load(Relaxed);
        if head != 0 {
            libc::syscall(libc::SYS_set_robust_list, head, slot.robust_len.load(Relaxed));
        }
        let name = [slot.name[0].load(Relaxed), slot.name[1].load(Relaxed)];
        if name[0] != 0 {
            libc::prctl(libc::PR_SET_NAME, name.as_ptr());
        }
        let policy = slot.policy.load(Relaxed);
        if policy >= 0 {
            let param = libc::sched_param { sched_priority: slot.rt_prio.load(Relaxed) };
            let cur = libc::sched_getscheduler(0);
            let mut cur_param: libc::sched_param = std::mem::zeroed();
            libc::sched_getparam(0, &mut cur_param);
            if (cur != policy || cur_param.sched_priority != param.sched_priority) && libc::sched_setscheduler(0, policy, &param) != 0 {
                crate::attrs::note_thread_refused(1);
            }
        }
        let nice = slot.nice.load(Relaxed);
        if nice != i32::MIN && libc::setpriority(libc::PRIO_PROCESS, 0, nice) != 0 {
            crate::attrs::note_thread_refused(2);
        }
        let pdeath = slot.pdeathsig.load(Relaxed);
        if pdeath != 0 {
            // The parent is the restarting process's now: its death is what is watched.
            libc::prctl(libc::PR_SET_PDEATHSIG, pdeath as libc::c_ulong, 0, 0, 0);
        }
        let slack = slot.timerslack.load(Relaxed);
        if slack != 0 && libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) as u64 != slack
            && libc::prctl(libc::PR_SET_TIMERSLACK, slack as libc::c_ulong, 0, 0, 0) != 0
        {
            crate::attrs::note_thread_refused(4);
        }
        let size = RSEQ_SIZE.load(Relaxed);
        if size != 0 && slot.rseq.load(Relaxed) != RSEQ_NONE {
            let area = (fs as i64 + RSEQ_OFFSET.load(Relaxed)) as u64;
            // struct rseq must be registered with at least 32 bytes (the ABI size).
            libc::syscall(libc::SYS_rseq, area, size.max(32), 0, RSEQ_SIG);
        }
    }
}

/// Entry of a restored process, called by the restorer on the main thread's TLS and restart
/// stack with the main thread's slot index. Never returns.
pub extern "C" fn restored_main(main_slot: u64) {
    let main = main_slot as usize;
    // Process attributes first: the threads created below inherit some of them.
    crate::attrs::apply();
    requeue_pending_signals();
    setup_restored_thread(&SLOTS[main], true);
    let flags = (libc::CLONE_VM | libc::CLONE_FS | libc::CLONE_FILES | libc::CLONE_SIGHAND | libc::CLONE_THREAD
        | libc::CLONE_SYSVSEM | libc::CLONE_SETTLS | libc::CLONE_PARENT_SETTID | libc::CLONE_CHILD_CLEARTID) as u64;
    let n = NSLOTS.load(Acquire);
    let off = TID_OFFSET.load(Relaxed) as u64;
    // (the kernel's tid when the image was cut, the one it gives now) of each program thread
    // but the main one (its id is the process's: `agent::set_pid_identity`), for
    // `libcrum_libc.so`'s `gettid`, `tgkill`, `kcmp`… On this stack: nothing is allocated here.
    let mut ids = [0i32; 2 * MAX_THREADS];
    let mut k = 0;
    for (i, s) in SLOTS.iter().enumerate().take(n) {
        if i == main || s.tid.load(Relaxed) <= 0 {
            continue;
        }
        let was = s.tid.load(Relaxed);
        let fs = s.fs_base.load(Relaxed);
        // SAFETY: the new thread gets its own restart stack and its saved TLS; ptid/ctid
        // are its descriptor's tid field and its saved clear-child-tid address.
        let r = unsafe {
            crum_clone_thread(flags, s.restart_stack_top.load(Relaxed), fs + off, s.ctid.load(Relaxed), fs,
                restored_thread, i as u64)
        };
        if r < 0 {
            raw_fail(b"crum: restart failed: cannot re-create a thread (clone)\n");
        }
        if !s.is_agent.load(Relaxed) {
            ids[2 * k] = was;
            ids[2 * k + 1] = r as i32;
            k += 1;
        }
    }
    crate::agent::set_thread_ids(&ids[..2 * k]);
    resume_restored(main)
}

extern "C" fn restored_thread(idx: u64) {
    setup_restored_thread(&SLOTS[idx as usize], false);
    resume_restored(idx as usize)
}

fn resume_restored(idx: usize) -> ! {
    let s = &SLOTS[idx];
    if !s.is_agent.load(Relaxed) {
        wait_release(s.stop_gen.load(Relaxed));
    }
    // SAFETY: the slot's point was saved by crum_call_saved in a frame that is live in the
    // restored memory, on this thread's (restored) TLS.
    unsafe { crum_resume_at(s.rsp.load(Relaxed), 1) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigblk_is_read_from_the_status_text() {
        let status = "Name:\tx\nSigPnd:\t0000000000000000\nSigBlk:\t4000000000000001\nSigIgn:\t0\n";
        assert!(mask_blocks(status, 63));
        assert!(mask_blocks(status, 1));
        assert!(!mask_blocks(status, 64));
        assert!(!mask_blocks(status, 10));
        assert!(!mask_blocks("Name:\tx\n", 63));
        let m = blocked_message(42, "worker");
        assert!(m.contains("thread 42 (worker) blocks signal SIGRTMAX-1 (crum's stop signal)"), "{m}");
    }

    #[test]
    fn tid_offset_names_the_field_holding_each_threads_own_tid() {
        let off = tid_offset().unwrap();
        assert!(tid_candidates().contains(&off));
        let other = std::thread::spawn(|| (tid_offset(), tid_candidates())).join().unwrap();
        assert_eq!(other.0.unwrap(), off, "threads disagree on the tid's offset");
        assert!(other.1.contains(&off));
    }
}
