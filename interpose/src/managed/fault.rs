//! The SIGSEGV/SIGBUS handler of the mprotect and verify modes, the program's own handlers
//! chained behind it, and (verify mode) the SIGTRAP handler that closes a page again after
//! the one instruction that touched it.
//!
//! The program keeps seeing its own handlers: `sigaction` and `signal` are interposed for
//! the signals we handle (by `libcrum_libc.so`, `preload/`, which calls [`crum_sigaction`]
//! and [`crum_signal`]), so a handler the program installs (before or after us) is stored
//! here and called for every fault outside managed memory. With no handler of its own, a
//! genuine fault prints one line naming the address and the process dies by the signal, as
//! it would without crum (core dump included).
#![allow(unsafe_code)]

use std::cell::{Cell, UnsafeCell};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::*};

use super::{handle, Access};

/// Signals whose handlers we own: SIGSEGV, SIGBUS, SIGTRAP (verify mode only).
const OURS: [c_int; 3] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGTRAP];

static INSTALLED: AtomicBool = AtomicBool::new(false);
static VERIFY: AtomicBool = AtomicBool::new(false);

/// The program's view of the handlers of `OURS` (what it installed, or what was there when we
/// took over). Written under `PREV_LOCK`; the fault handler reads it without the lock.
struct Prev(UnsafeCell<[libc::sigaction; 3]>);
// SAFETY: writes are serialized by PREV_LOCK; a reader racing a program's own sigaction call
// for the same signal is as undefined as it is without crum.
unsafe impl Sync for Prev {}
// SAFETY: all-zero is SIG_DFL with an empty mask.
static PREV: Prev = Prev(UnsafeCell::new(unsafe { std::mem::zeroed() }));
static PREV_LOCK: AtomicBool = AtomicBool::new(false);

fn slot(sig: c_int) -> Option<usize> {
    let i = OURS.iter().position(|&s| s == sig)?;
    // SIGTRAP is ours only in verify mode.
    (i < 2 || VERIFY.load(Relaxed)).then_some(i)
}

fn prev(i: usize) -> libc::sigaction {
    // SAFETY: see `Prev`.
    unsafe { (*PREV.0.get())[i] }
}

fn set_prev(i: usize, a: libc::sigaction) {
    while PREV_LOCK.compare_exchange_weak(false, true, Acquire, Relaxed).is_err() {
        std::hint::spin_loop();
    }
    // SAFETY: see `Prev`; serialized by the lock.
    unsafe { (*PREV.0.get())[i] = a };
    PREV_LOCK.store(false, Release);
}

type SigactionFn = unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;

/// The C library's own `name` (not libcrum_libc.so's wrapper).
fn libc_symbol(name: &std::ffi::CStr, cache: &AtomicUsize) -> usize {
    let mut f = cache.load(Relaxed);
    if f == 0 {
        // SAFETY: NUL-terminated names; RTLD_NOLOAD returns the libc already loaded.
        f = unsafe {
            let h = libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
            libc::dlsym(if h.is_null() { libc::RTLD_NEXT } else { h }, name.as_ptr())
        } as usize;
        cache.store(f, Relaxed);
    }
    f
}

/// libc's sigaction.
fn real_sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    static F: AtomicUsize = AtomicUsize::new(0);
    let f = libc_symbol(c"sigaction", &F);
    if f == 0 {
        // SAFETY: the kernel call behind sigaction (without glibc's restorer; only reached
        // if dlsym failed, which it does not in a dynamically linked program).
        return unsafe { libc::syscall(libc::SYS_rt_sigaction, sig, act, old, 8) as c_int };
    }
    // SAFETY: `f` is libc's sigaction.
    unsafe { std::mem::transmute::<usize, SigactionFn>(f)(sig, act, old) }
}

/// Whether verify mode can work here (it single-steps with the x86 trap flag).
pub fn can_verify() -> bool {
    cfg!(target_arch = "x86_64")
}

/// Install our handlers (once): SIGSEGV and SIGBUS, and SIGTRAP with `verify`.
pub fn install(verify: bool) {
    if INSTALLED.swap(true, AcqRel) {
        return;
    }
    VERIFY.store(verify, Relaxed);
    for (i, &sig) in OURS.iter().enumerate() {
        if i == 2 && !verify {
            continue;
        }
        // SAFETY: plain-old-data out-parameter.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        real_sigaction(sig, std::ptr::null(), &mut old);
        set_prev(i, old);
        set_ours(sig);
    }
}

fn set_ours(sig: c_int) {
    // SAFETY: plain-old-data. Every other signal is blocked while the handler runs (the
    // checkpoint agent's stop signal included: a stopped thread never holds a region lock);
    // faults are not, so a program handler we chain to may touch managed memory itself.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART | libc::SA_NODEFER;
        libc::sigfillset(&mut sa.sa_mask);
        for s in OURS {
            libc::sigdelset(&mut sa.sa_mask, s);
        }
        real_sigaction(sig, &sa, std::ptr::null_mut());
    }
}

/// After a restart: our handlers are restored with the process; make sure of it.
pub fn reinstall() {
    if !INSTALLED.load(Acquire) {
        return;
    }
    for (i, &sig) in OURS.iter().enumerate() {
        if i < 2 || VERIFY.load(Relaxed) {
            set_ours(sig);
        }
    }
}

thread_local! {
    /// Verify mode: the dirty page this thread may touch for one instruction.
    static OPEN: Cell<u64> = const { Cell::new(0) };
}

#[cfg(target_arch = "x86_64")]
fn access_of(ctx: *mut c_void) -> Access {
    // SAFETY: the kernel passes a ucontext_t to an SA_SIGINFO handler.
    let err = unsafe { (*(ctx as *const libc::ucontext_t)).uc_mcontext.gregs[libc::REG_ERR as usize] };
    if err & 2 != 0 {
        Access::Write
    } else {
        Access::Read
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn access_of(_ctx: *mut c_void) -> Access {
    Access::Unknown
}

#[cfg(target_arch = "x86_64")]
fn set_trap_flag(ctx: *mut c_void, on: bool) {
    // SAFETY: as in `access_of`; the kernel restores EFLAGS from here at sigreturn.
    unsafe {
        let g = &mut (*(ctx as *mut libc::ucontext_t)).uc_mcontext.gregs[libc::REG_EFL as usize];
        if on {
            *g |= 0x100;
        } else {
            *g &= !0x100;
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn set_trap_flag(_ctx: *mut c_void, _on: bool) {}

extern "C" fn on_signal(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: errno is thread-local; the handler must not change it for the program.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo_t.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as u64) };
    let mut done = false;
    if sig == libc::SIGTRAP {
        let open = OPEN.try_with(|o| o.replace(0)).unwrap_or(0);
        if open != 0 {
            super::verify_close(open);
            set_trap_flag(ctx, false);
            done = true;
        }
    } else if code > 0 {
        // A fault the kernel raised (not kill(2)).
        if VERIFY.load(Relaxed) {
            let open = OPEN.try_with(|o| o.replace(0)).unwrap_or(0);
            if open != 0 {
                super::verify_close(open);
            }
            match super::verify_access(addr, access_of(ctx)) {
                super::Verified::NotManaged => {}
                super::Verified::Done => done = true,
                super::Verified::Opened(page) => {
                    let _ = OPEN.try_with(|o| o.set(page));
                    set_trap_flag(ctx, true);
                    done = true;
                }
            }
        } else {
            done = handle(addr, access_of(ctx));
        }
    }
    if !done {
        chain(sig, info, ctx, addr, code);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// A signal that is not about managed memory: the program's handler, or the default action.
fn chain(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void, addr: u64, code: c_int) {
    let Some(i) = OURS.iter().position(|&s| s == sig) else { return };
    let p = prev(i);
    if p.sa_sigaction == libc::SIG_DFL || p.sa_sigaction == libc::SIG_IGN {
        if code > 0 && sig != libc::SIGTRAP {
            say_fault(sig, addr);
        }
        // The default action: the faulting instruction runs again and the kernel ends the
        // process with this signal (a raised one is raised again).
        // SAFETY: plain-old-data.
        let mut dfl: libc::sigaction = unsafe { std::mem::zeroed() };
        dfl.sa_sigaction = libc::SIG_DFL;
        real_sigaction(sig, &dfl, std::ptr::null_mut());
        if code <= 0 {
            // SAFETY: re-raise a signal sent with kill(2) now that the default is back.
            unsafe { libc::raise(sig) };
        }
        return;
    }
    if p.sa_flags & libc::SA_RESETHAND != 0 {
        // SAFETY: plain-old-data.
        set_prev(i, unsafe { std::mem::zeroed() });
    }
    // SAFETY: the program's own handler, called as the kernel would have called it.
    unsafe {
        if p.sa_flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) = std::mem::transmute(p.sa_sigaction);
            f(sig, info, ctx);
        } else {
            let f: extern "C" fn(c_int) = std::mem::transmute(p.sa_sigaction);
            f(sig);
        }
    }
}

/// One line on stderr before a genuine fault kills the program (async-signal-safe).
fn say_fault(sig: c_int, addr: u64) {
    let mut buf = [0u8; 128];
    let mut n = 0;
    let mut put = |b: &[u8]| {
        let k = b.len().min(buf.len() - n);
        buf[n..n + k].copy_from_slice(&b[..k]);
        n += k;
    };
    put(b"crum: ");
    put(if sig == libc::SIGBUS { b"SIGBUS" } else { b"SIGSEGV" });
    put(b" at address ");
    put(&hex(addr));
    put(b" (not managed memory); the program crashed\n");
    write_stderr(&buf[..n]);
}

pub(super) fn hex(v: u64) -> [u8; 18] {
    let mut out = *b"0x0000000000000000";
    for i in 0..16 {
        let d = ((v >> ((15 - i) * 4)) & 0xf) as u8;
        out[2 + i] = if d < 10 { b'0' + d } else { b'a' + d - 10 };
    }
    out
}

pub(super) fn write_stderr(b: &[u8]) {
    // SAFETY: raw write(2) of a live buffer (not the interposed `write`).
    unsafe { libc::syscall(libc::SYS_write, 2, b.as_ptr(), b.len()) };
}

/// Lines printed by verify mode (at most `REPORT_LIMIT`).
pub(super) static REPORTED: AtomicU32 = AtomicU32::new(0);
pub(super) const REPORT_LIMIT: u32 = 20;

/// For `libcrum_libc.so`'s `sigaction` (the program's): once our handler is in place, the
/// program's handler of SIGSEGV/SIGBUS (and SIGTRAP in verify mode) is recorded, to be
/// chained to, and reported back as the current one. `-2`: not ours, the C library's
/// sigaction does it.
///
/// # Safety
/// As libc's `sigaction`.
#[no_mangle]
pub unsafe extern "C" fn crum_sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    if !act.is_null() {
        crum_ckpt::agent::program_sets_handler(sig);
    }
    match slot(sig) {
        Some(i) if INSTALLED.load(Acquire) => {
            // SAFETY: the caller passes valid (or null) sigaction pointers.
            unsafe {
                if !old.is_null() {
                    *old = prev(i);
                }
                if !act.is_null() {
                    set_prev(i, *act);
                }
            }
            0
        }
        _ => -2,
    }
}

/// For `libcrum_libc.so`'s `signal`, as [`crum_sigaction`] (BSD semantics, as glibc's
/// `signal`); the previous handler goes to `*old`.
///
/// # Safety
/// `old` must be writable.
#[no_mangle]
pub unsafe extern "C" fn crum_signal(sig: c_int, handler: libc::sighandler_t, old: *mut libc::sighandler_t) -> c_int {
    crum_ckpt::agent::program_sets_handler(sig);
    match slot(sig) {
        Some(i) if INSTALLED.load(Acquire) => {
            // SAFETY: plain-old-data; `old` is writable (caller).
            unsafe {
                *old = prev(i).sa_sigaction;
                let mut a: libc::sigaction = std::mem::zeroed();
                a.sa_sigaction = handler;
                a.sa_flags = libc::SA_RESTART;
                set_prev(i, a);
            }
            0
        }
        _ => -2,
    }
}
