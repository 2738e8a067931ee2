//! The precise mode: userfaultfd. Shadows are private anonymous memory registered for
//! missing-page and write-protect faults. An INVALID page is absent (a read or write of it is
//! a missing fault that tells which), a CLEAN page is present and write-protected (a write is
//! a write-protect fault), a DIRTY page is present and writable. A thread of ours reads the
//! fault messages and resolves them with [`super::handle`]: `UFFDIO_COPY` from the alias
//! fills pages atomically (no window where another thread sees a half-filled page) and
//! `UFFDIO_WRITEPROTECT` opens them for writing. System calls that touch an absent page wait
//! for the handler instead of failing with EFAULT (unless the kernel only allows user-mode
//! faults, where the interposed I/O calls prepare their buffers as in mprotect mode).
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering::*};

use super::{Access, PAGE};

const UFFD_API: u64 = 0xAA;
const UFFDIO_API: libc::c_ulong = 0xC018_AA3F;
const UFFDIO_REGISTER: libc::c_ulong = 0xC020_AA00;
const UFFDIO_WAKE: libc::c_ulong = 0x8010_AA02;
const UFFDIO_COPY: libc::c_ulong = 0xC028_AA03;
const UFFDIO_WRITEPROTECT: libc::c_ulong = 0xC018_AA06;
const REGISTER_MODE_MISSING: u64 = 1;
const REGISTER_MODE_WP: u64 = 2;
const COPY_MODE_WP: u64 = 2;
const WRITEPROTECT_MODE_WP: u64 = 1;
const FEATURE_PAGEFAULT_FLAG_WP: u64 = 1;
const EVENT_PAGEFAULT: u8 = 0x12;
const PAGEFAULT_FLAG_WRITE: u64 = 1;
const PAGEFAULT_FLAG_WP: u64 = 2;
const USER_MODE_ONLY: i32 = 1;
/// `_UFFDIO_COPY` and `_UFFDIO_WRITEPROTECT` bits of the ioctls a registration allows.
const NEEDED_IOCTLS: u64 = (1 << 3) | (1 << 6);

#[repr(C)]
struct Api {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Range {
    start: u64,
    len: u64,
}

#[repr(C)]
struct Register {
    range: Range,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct Copy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}

#[repr(C)]
struct WriteProtect {
    range: Range,
    mode: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Msg {
    event: u8,
    _r1: u8,
    _r2: u16,
    _r3: u32,
    flags: u64,
    address: u64,
    _feat: u64,
}

/// The userfaultfd (its number changes at a restart; the handler thread re-reads it).
static UFFD: AtomicI32 = AtomicI32::new(-1);
/// Kernel-mode faults are not ours (UFFD_USER_MODE_ONLY): system calls need the wrappers.
pub static USER_ONLY: AtomicBool = AtomicBool::new(false);

fn ioctl<T>(req: libc::c_ulong, arg: &mut T) -> Result<(), i32> {
    // SAFETY: `arg` is the struct this ioctl expects (layouts from linux/userfaultfd.h).
    let r = unsafe { libc::ioctl(UFFD.load(Relaxed), req, arg as *mut T) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

/// A new userfaultfd with the write-protect feature.
fn open() -> Result<(i32, bool), String> {
    let flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
    // SAFETY: plain system call.
    let mut fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) } as i32;
    let mut user_only = false;
    if fd < 0 {
        // Unprivileged processes may still handle their own user-mode faults.
        // SAFETY: as above.
        fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags | USER_MODE_ONLY) } as i32;
        user_only = true;
    }
    if fd < 0 {
        return Err(format!("userfaultfd: {}", std::io::Error::last_os_error()));
    }
    let mut api = Api { api: UFFD_API, features: FEATURE_PAGEFAULT_FLAG_WP, ioctls: 0 };
    // SAFETY: as in `ioctl`, on the new descriptor.
    if unsafe { libc::ioctl(fd, UFFDIO_API, &mut api as *mut Api) } != 0 || api.features & FEATURE_PAGEFAULT_FLAG_WP == 0 {
        // SAFETY: our descriptor.
        unsafe { libc::close(fd) };
        return Err("the kernel's userfaultfd has no write-protect mode".into());
    }
    Ok((fd, user_only))
}

/// Open the userfaultfd, check that anonymous memory can be registered for missing and
/// write-protect faults, and start the handler thread.
pub fn start() -> Result<(), String> {
    let (fd, user_only) = open()?;
    UFFD.store(fd, Relaxed);
    USER_ONLY.store(user_only, Relaxed);
    // A scratch page tells whether anonymous memory supports both modes.
    // SAFETY: a fresh private mapping.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), PAGE as usize, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    let ok = p != libc::MAP_FAILED && register(p as u64, PAGE);
    if p != libc::MAP_FAILED {
        // SAFETY: the scratch mapping.
        unsafe { libc::munmap(p, PAGE as usize) };
    }
    if !ok {
        // SAFETY: our descriptor.
        unsafe { libc::close(fd) };
        UFFD.store(-1, Relaxed);
        return Err("anonymous memory cannot be registered for missing and write-protect faults".into());
    }
    crum_ckpt::agent::exclude_fd(fd);
    std::thread::Builder::new()
        .name("crum-uffd".into())
        .spawn(serve)
        .map_err(|e| format!("cannot start the fault thread: {e}"))?;
    Ok(())
}

/// After a restart: the descriptor was not in the image; open a new one (the restored
/// handler thread picks it up).
pub fn restart() -> Result<(), String> {
    let (fd, user_only) = open()?;
    UFFD.store(fd, Release);
    USER_ONLY.store(user_only, Relaxed);
    crum_ckpt::agent::exclude_fd(fd);
    Ok(())
}

/// Register a shadow for missing and write-protect faults.
pub fn register(addr: u64, len: u64) -> bool {
    let mut r = Register { range: Range { start: addr, len }, mode: REGISTER_MODE_MISSING | REGISTER_MODE_WP, ioctls: 0 };
    ioctl(UFFDIO_REGISTER, &mut r).is_ok() && r.ioctls & NEEDED_IOCTLS == NEEDED_IOCTLS
}

/// Fill absent shadow pages `[dst, dst+len)` from `src` (the alias): write-protected (CLEAN)
/// unless `write`. Pages another thread filled meanwhile are skipped.
pub fn fill(dst: u64, src: u64, len: u64, write: bool) -> bool {
    let mode = if write { 0 } else { COPY_MODE_WP };
    let mut c = Copy { dst, src, len, mode, copy: 0 };
    match ioctl(UFFDIO_COPY, &mut c) {
        Ok(()) => true,
        Err(libc::EEXIST) | Err(libc::EAGAIN) => {
            // Some page is present: page by page, skipping those.
            let mut off = 0;
            while off < len {
                let mut c = Copy { dst: dst + off, src: src + off, len: PAGE, mode, copy: 0 };
                match ioctl(UFFDIO_COPY, &mut c) {
                    Ok(()) | Err(libc::EEXIST) => {}
                    Err(_) => return false,
                }
                off += PAGE;
            }
            true
        }
        Err(_) => false,
    }
}

fn writeprotect(addr: u64, len: u64, on: bool) -> bool {
    let mut w = WriteProtect { range: Range { start: addr, len }, mode: if on { WRITEPROTECT_MODE_WP } else { 0 } };
    ioctl(UFFDIO_WRITEPROTECT, &mut w).is_ok()
}

/// Let present pages be written (and wake threads waiting on them).
pub fn unprotect(addr: u64, len: u64) -> bool {
    writeprotect(addr, len, false)
}

/// Write-protect a whole shadow (before its dirty pages are copied out).
pub fn protect_all(addr: u64, len: u64) {
    writeprotect(addr, len, true);
}

/// Make every page of a shadow absent (INVALID).
pub fn drop_pages(addr: u64, len: u64) {
    // SAFETY: a shadow mapping of ours; its dirty pages were just copied to the proxy.
    unsafe { libc::madvise(addr as *mut libc::c_void, len as usize, libc::MADV_DONTNEED) };
}

fn wake(addr: u64, len: u64) {
    let mut r = Range { start: addr, len };
    let _ = ioctl(UFFDIO_WAKE, &mut r);
}

/// Held by whoever reads and resolves fault messages: the fault thread, or [`drain`].
static SERVING: AtomicBool = AtomicBool::new(false);

/// Takes [`SERVING`] (with signals blocked, as a region lock: a handler that touched managed
/// memory on this thread would wait for messages nobody could read).
fn serving() -> impl Drop {
    struct Held(#[allow(dead_code)] super::Masked);
    impl Drop for Held {
        fn drop(&mut self) {
            SERVING.store(false, Release);
        }
    }
    let mask = super::Masked::new();
    let mut spins = 0u32;
    while SERVING.compare_exchange_weak(false, true, Acquire, Relaxed).is_err() {
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            // SAFETY: plain system call.
            unsafe { libc::sched_yield() };
        }
    }
    Held(mask)
}

/// Reads the fault messages waiting on `fd` (without waiting) and resolves them; false when
/// there were none.
fn serve_once(fd: i32, msgs: &mut [Msg; 16]) -> bool {
    // SAFETY: reads whole messages into the caller's array.
    let got = unsafe { libc::read(fd, msgs.as_mut_ptr().cast(), std::mem::size_of_val(msgs)) };
    if got <= 0 {
        return false;
    }
    let count = got as usize / std::mem::size_of::<Msg>();
    for m in &msgs[..count] {
        if m.event != EVENT_PAGEFAULT {
            continue;
        }
        let page = m.address & !(PAGE - 1);
        let access = if m.flags & (PAGEFAULT_FLAG_WP | PAGEFAULT_FLAG_WRITE) != 0 { Access::Write } else { Access::Read };
        super::handle(page, access);
        // Resolved above, by another thread, or the region is gone: either way the
        // faulting thread may retry.
        wake(page, PAGE);
    }
    true
}

/// Before pages are invalidated (a device call, or after a synchronization): resolves every
/// fault message already queued. A thread woken by another thread's fill of its page goes
/// on while its own message stays queued; taken after the invalidation, that message would
/// fetch the page while the device runs, and a write message would make it DIRTY with
/// those stale bytes, sent back over the device's results at the next flush. Resolved now,
/// in the state they were raised in, such messages change nothing.
pub fn drain() {
    let fd = UFFD.load(Acquire);
    if fd < 0 {
        return;
    }
    let _held = serving();
    let mut msgs = [Msg { event: 0, _r1: 0, _r2: 0, _r3: 0, flags: 0, address: 0, _feat: 0 }; 16];
    while serve_once(fd, &mut msgs) {}
}

/// The fault thread: read fault messages, resolve each, wake the thread that waits.
fn serve() {
    let mut msgs = [Msg { event: 0, _r1: 0, _r2: 0, _r3: 0, flags: 0, address: 0, _feat: 0 }; 16];
    loop {
        let fd = UFFD.load(Acquire);
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd; a timeout so a new descriptor (restart) is picked up.
        let n = unsafe { libc::poll(&mut pfd, 1, 200) };
        if n <= 0 {
            continue;
        }
        let _held = serving();
        serve_once(fd, &mut msgs);
    }
}
