//! `libcrum_libc.so`: the C library entry points crum must see, preloaded by `crum run` in
//! front of `libcrum.so` (why a library of its own: `Cargo.toml`).
//!
//! - I/O calls (`read`, `write`, their vector, positional, socket and stdio forms): with
//!   managed memory tracked by page protection, the kernel answers a system call whose buffer
//!   lies on a protected shadow page with EFAULT instead of a fault crum could handle. Each
//!   wrapper first asks libcrum to make its buffers ready (`crum_prepare_range`: fetched, and
//!   writable and dirty where the kernel writes), then calls the C library's own function.
//! - `sigaction` and `signal` for the signals libcrum's fault handler owns: the program's
//!   handler is recorded and chained to (`crum_sigaction`, `crum_signal`), not installed.
//!
//! - `unshare` and `setns` of a user or mount namespace (or any of `setns`'s kinds): the
//!   kernel refuses them (EINVAL) in a multithreaded process, and crum's own threads would
//!   make every program one. libcrum ends its threads around the call
//!   (`crum_threads_suspend`/`crum_threads_resume`) so a program that is single-threaded
//!   without crum stays so for the call.
//!
//! - The `exec` family: a program that executes another program in its own process stays
//!   under `crum run`. When the caller is the process holding crum's proxy channel
//!   (`crum_exec_channel`), the channel's close-on-exec flag is cleared for the call (and set
//!   again if it fails); the new image's libcrum finds it by name. Every other descriptor
//!   of crum's stays close-on-exec, and a forked child's exec keeps nothing. The variadic
//!   `execl`, `execlp` and `execle` (not definable in stable Rust) are `src/exec.c`, reached
//!   through naked entry points here, and call the wrappers of `execv`, `execvp`, `execve`.
//!
//! - Opens for writing (`open`, `openat`, `creat` and their 64-bit and fortified forms,
//!   `fopen`, `freopen`): after the C library's call succeeds, libcrum is told
//!   (`crum_note_open`: descriptor, and whether the call created the file), so that a restart
//!   can roll back what the program wrote after a checkpoint into files it opened since.
//!   Before an open that may create a file that does not exist yet, libcrum is told the path
//!   (`crum_note_create`): a program killed between the two still has its new file removed.
//!   `open`'s optional mode is taken as a third argument (the x86-64 calling convention
//!   passes it the same way either way) and passed on as such.
//!
//! - `inotify_add_watch`: libcrum is told the path of every watch (`crum_note_watch`); the
//!   kernel keeps only the inode, and a restart adds the watch again by path.
//!
//! - The process's ids (`getpid`, `gettid`, `getppid`, `getpgrp`, `getpgid`, `getsid`,
//!   `kill`, `tgkill`, `sigqueue`): after a restart the program keeps the pid it started
//!   with (`pid`).
//!
//! Everything is resolved once, in the library constructor: libcrum's functions by name
//! (absent without libcrum: the wrappers then only forward), the C library's from
//! `libc.so.6` itself. The wrappers allocate nothing, take no locks and keep `errno` as the
//! C library sets it, so they stay async-signal-safe (but for `inotify_add_watch`, which is
//! not async-signal-safe itself: libcrum keeps its path, under a lock).
#![allow(unsafe_code)]

mod pid;

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

type Prepare = unsafe extern "C" fn(u64, u64, c_int);
type CrumSigaction = unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
type CrumSignal = unsafe extern "C" fn(c_int, libc::sighandler_t, *mut libc::sighandler_t) -> c_int;
/// What `crum_sigaction`/`crum_signal` answer for a signal libcrum does not own.
const NOT_OURS: c_int = -2;

static PREPARE: AtomicUsize = AtomicUsize::new(0);
static CRUM_SIGACTION: AtomicUsize = AtomicUsize::new(0);
static CRUM_SIGNAL: AtomicUsize = AtomicUsize::new(0);
static CRUM_SUSPEND: AtomicUsize = AtomicUsize::new(0);
static CRUM_RESUME: AtomicUsize = AtomicUsize::new(0);
static CRUM_EXEC_CHANNEL: AtomicUsize = AtomicUsize::new(0);
static CRUM_NOTE_OPEN: AtomicUsize = AtomicUsize::new(0);
static CRUM_NOTE_CREATE: AtomicUsize = AtomicUsize::new(0);
static CRUM_NOTE_WATCH: AtomicUsize = AtomicUsize::new(0);
static INOTIFY_ADD_WATCH: AtomicUsize = AtomicUsize::new(0);
static FORK: AtomicUsize = AtomicUsize::new(0);
static CRUM_LAZY_COMPLETE: AtomicUsize = AtomicUsize::new(0);

/// The program's `fork`: the C library's, made again after a restart when the child's pid
/// is one the program knows as another process's (`pid::fork_with`).
#[no_mangle]
pub extern "C" fn fork() -> libc::pid_t {
    let f = real(c"fork", &FORK);
    if f == 0 {
        // SAFETY: sets the calling thread's errno.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        return -1;
    }
    // After a lazy restart every page of the image is in before the child is made: it
    // would not inherit the page server's registrations (`crum_ckpt::lazy`).
    let lazy = CRUM_LAZY_COMPLETE.load(Relaxed);
    if lazy != 0 {
        // SAFETY: libcrum's `crum_lazy_complete`, looked up at load, with this signature.
        if unsafe { std::mem::transmute::<usize, extern "C" fn() -> libc::c_int>(lazy)() } != 0 {
            // SAFETY: sets the calling thread's errno.
            unsafe { *libc::__errno_location() = libc::EAGAIN };
            return -1;
        }
    }
    // SAFETY: the C library's fork, which has this signature.
    let real_fork = unsafe { std::mem::transmute::<usize, extern "C" fn() -> libc::pid_t>(f) };
    pid::fork_with(real_fork)
}

/// The C library's `vfork`, looked up at load (a constructor), for [`vfork`].
static REAL_VFORK: AtomicUsize = AtomicUsize::new(0);

#[used]
#[link_section = ".init_array"]
static FIND_VFORK: extern "C" fn() = {
    extern "C" fn find() {
        REAL_VFORK.store(real(c"vfork", &REAL_VFORK), Relaxed);
    }
    find
};

/// The program's `vfork`: the C library's, entered by a jump so that nothing of ours sits
/// on the stack it shares with the child; after a restart, [`pid::vfork_remade`] (children
/// whose pid the program knows as another process's are made again, as by `fork`).
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub extern "C" fn vfork() -> libc::pid_t {
    core::arch::naked_asm!(
        "mov rax, qword ptr [rip + {restarted}]",
        "test rax, rax",
        "jnz {remade}",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz {remade}",
        "jmp rax",
        restarted = sym pid::RESTARTED,
        real = sym REAL_VFORK,
        remade = sym pid::vfork_remade,
    )
}

fn libc_handle() -> *mut c_void {
    static H: AtomicUsize = AtomicUsize::new(0);
    let mut h = H.load(Relaxed);
    if h == 0 {
        // SAFETY: NUL-terminated name; RTLD_NOLOAD only returns the already loaded libc.
        h = unsafe { libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) } as usize;
        H.store(h, Relaxed);
    }
    h as *mut c_void
}

/// The C library's own `name` (cached in `cache`).
fn real(name: &CStr, cache: &AtomicUsize) -> usize {
    let mut f = cache.load(Relaxed);
    if f == 0 {
        let h = libc_handle();
        // SAFETY: dlsym on libc's handle (RTLD_NEXT as a fallback) with a NUL-terminated name.
        f = unsafe { libc::dlsym(if h.is_null() { libc::RTLD_NEXT } else { h }, name.as_ptr()) } as usize;
        cache.store(f, Relaxed);
    }
    f
}

fn crum(name: &CStr, cache: &AtomicUsize) {
    // SAFETY: dlsym in the global scope with a NUL-terminated name.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) } as usize;
    cache.store(f, Relaxed);
}

extern "C" fn init() {
    crum(c"crum_prepare_range", &PREPARE);
    crum(c"crum_sigaction", &CRUM_SIGACTION);
    crum(c"crum_signal", &CRUM_SIGNAL);
    crum(c"crum_threads_suspend", &CRUM_SUSPEND);
    crum(c"crum_threads_resume", &CRUM_RESUME);
    crum(c"crum_lazy_complete", &CRUM_LAZY_COMPLETE);
    crum(c"crum_exec_channel", &CRUM_EXEC_CHANNEL);
    crum(c"crum_note_open", &CRUM_NOTE_OPEN);
    crum(c"crum_note_create", &CRUM_NOTE_CREATE);
    crum(c"crum_note_watch", &CRUM_NOTE_WATCH);
    real(c"inotify_add_watch", &INOTIFY_ADD_WATCH);
    resolve_opens();
    real(c"fcntl", &REAL_FCNTL);
    real(c"fcntl64", &REAL_FCNTL64);
    resolve_fopens();
    resolve_paths();
    real(c"unshare", &UNSHARE);
    real(c"setns", &SETNS);
    resolve_all();
    real(c"sigaction", &SIGACTION);
    real(c"signal", &SIGNAL);
}

static SIGACTION: AtomicUsize = AtomicUsize::new(0);
static SIGNAL: AtomicUsize = AtomicUsize::new(0);

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

/// Make `[addr, addr+len)` ready for the kernel to read (`write == false`) or write.
fn prepare(addr: *const c_void, len: usize, write: bool) {
    let f = PREPARE.load(Relaxed);
    if f == 0 || addr.is_null() || len == 0 {
        return;
    }
    // SAFETY: errno is thread-local; libcrum's function takes plain integers.
    unsafe {
        let e = *libc::__errno_location();
        std::mem::transmute::<usize, Prepare>(f)(addr as u64, len as u64, write as c_int);
        *libc::__errno_location() = e;
    }
}

/// A read of `n` bytes from `fd` at `off` (`None`: the file position) into managed memory
/// need not prepare (fetch and dirty) more than the rest of a regular file.
fn read_len(fd: c_int, n: usize, off: Option<Off>) -> usize {
    if n <= 1 << 20 || PREPARE.load(Relaxed) == 0 {
        return n;
    }
    // SAFETY: fstat/lseek into locals; failures leave `n` as it is.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return n;
        }
        let e = *libc::__errno_location();
        let pos = off.unwrap_or_else(|| libc::lseek(fd, 0, libc::SEEK_CUR));
        *libc::__errno_location() = e;
        if pos < 0 {
            return n;
        }
        n.min((st.st_size - pos).max(0) as usize)
    }
}

/// Every buffer of an iovec array.
fn prepare_iov(iov: *const libc::iovec, n: c_int, write: bool) {
    if PREPARE.load(Relaxed) == 0 || iov.is_null() {
        return;
    }
    for i in 0..n.clamp(0, libc::UIO_MAXIOV) as usize {
        // SAFETY: the caller passes `n` iovecs (the kernel rejects the call otherwise; we only
        // read them).
        let v = unsafe { *iov.add(i) };
        prepare(v.iov_base, v.iov_len, write);
    }
}

fn prepare_msg(msg: *const libc::msghdr, write: bool) {
    if PREPARE.load(Relaxed) == 0 || msg.is_null() {
        return;
    }
    // SAFETY: the caller passes a msghdr.
    let m = unsafe { &*msg };
    prepare_iov(m.msg_iov, m.msg_iovlen as c_int, write);
    prepare(m.msg_name, m.msg_namelen as usize, write);
    prepare(m.msg_control, m.msg_controllen, write);
}

/// recvfrom's buffers: the data, the sender's address and its length.
fn prepare_from(buf: *mut c_void, n: usize, addr: *mut libc::sockaddr, alen: *mut libc::socklen_t) {
    prepare(buf, n, true);
    if !alen.is_null() {
        prepare(alen.cast(), std::mem::size_of::<libc::socklen_t>(), true);
        // SAFETY: the caller passes a readable length with a non-null address.
        let len = if addr.is_null() { 0 } else { (unsafe { *alen }) as usize };
        prepare(addr.cast(), len, true);
    }
}

/// `size * nmemb` of fread/fwrite, or 0 on overflow (the C library reports that itself).
fn items(size: usize, n: usize) -> usize {
    size.checked_mul(n).unwrap_or(0)
}

/// Define the wrapper `$name` with the C library's signature: run `$prep`, then call the C
/// library's `$name` (its address kept in `$name::F`, a module beside the function, filled by
/// `resolve_all` from the constructor).
macro_rules! wrap {
    ($( $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty => $prep:expr; )*) => {
        $(
            #[allow(non_snake_case)]
            mod $name {
                pub static F: super::AtomicUsize = super::AtomicUsize::new(0);
                pub const NAME: &std::ffi::CStr = match std::ffi::CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                    Ok(n) => n,
                    Err(_) => panic!("bad name"),
                };
            }

            /// Prepares the buffers for libcrum's managed memory, then the C library's own call.
            ///
            /// # Safety
            /// As the C library's function of the same name.
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                $prep;
                let f = real($name::NAME, &$name::F);
                // SAFETY: `f` is the C library's function with this very signature.
                unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($ty),*) -> $ret>(f)($($arg),*) }
            }
        )*

        /// Look every wrapped function up now (not in a signal handler's first call).
        fn resolve_all() {
            $( real($name::NAME, &$name::F); )*
        }
    };
}

type Ssize = libc::ssize_t;
type Off = libc::off_t;
type File = *mut libc::FILE;

wrap! {
    read(fd: c_int, buf: *mut c_void, n: usize) -> Ssize => prepare(buf, read_len(fd, n, None), true);
    pread(fd: c_int, buf: *mut c_void, n: usize, off: Off) -> Ssize => prepare(buf, read_len(fd, n, Some(off)), true);
    pread64(fd: c_int, buf: *mut c_void, n: usize, off: Off) -> Ssize => prepare(buf, read_len(fd, n, Some(off)), true);
    readv(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> Ssize => prepare_iov(iov, cnt, true);
    preadv(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: Off) -> Ssize => prepare_iov(iov, cnt, true);
    preadv64(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: Off) -> Ssize => prepare_iov(iov, cnt, true);
    recv(fd: c_int, buf: *mut c_void, n: usize, flags: c_int) -> Ssize => prepare(buf, n, true);
    recvfrom(fd: c_int, buf: *mut c_void, n: usize, flags: c_int, addr: *mut libc::sockaddr, alen: *mut libc::socklen_t) -> Ssize => prepare_from(buf, n, addr, alen);
    recvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> Ssize => prepare_msg(msg, true);
    write(fd: c_int, buf: *const c_void, n: usize) -> Ssize => prepare(buf, n, false);
    pwrite(fd: c_int, buf: *const c_void, n: usize, off: Off) -> Ssize => prepare(buf, n, false);
    pwrite64(fd: c_int, buf: *const c_void, n: usize, off: Off) -> Ssize => prepare(buf, n, false);
    writev(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> Ssize => prepare_iov(iov, cnt, false);
    pwritev(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: Off) -> Ssize => prepare_iov(iov, cnt, false);
    pwritev64(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: Off) -> Ssize => prepare_iov(iov, cnt, false);
    send(fd: c_int, buf: *const c_void, n: usize, flags: c_int) -> Ssize => prepare(buf, n, false);
    sendto(fd: c_int, buf: *const c_void, n: usize, flags: c_int, addr: *const libc::sockaddr, alen: libc::socklen_t) -> Ssize => prepare(buf, n, false);
    sendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> Ssize => prepare_msg(msg, false);
    fread(buf: *mut c_void, size: usize, n: usize, f: File) -> usize => prepare(buf, items(size, n), true);
    fread_unlocked(buf: *mut c_void, size: usize, n: usize, f: File) -> usize => prepare(buf, items(size, n), true);
    fwrite(buf: *const c_void, size: usize, n: usize, f: File) -> usize => prepare(buf, items(size, n), false);
    fwrite_unlocked(buf: *const c_void, size: usize, n: usize, f: File) -> usize => prepare(buf, items(size, n), false);
    __read_chk(fd: c_int, buf: *mut c_void, n: usize, buflen: usize) -> Ssize => prepare(buf, read_len(fd, n, None), true);
    __pread_chk(fd: c_int, buf: *mut c_void, n: usize, off: Off, buflen: usize) -> Ssize => prepare(buf, read_len(fd, n, Some(off)), true);
    __pread64_chk(fd: c_int, buf: *mut c_void, n: usize, off: Off, buflen: usize) -> Ssize => prepare(buf, read_len(fd, n, Some(off)), true);
    __recv_chk(fd: c_int, buf: *mut c_void, n: usize, buflen: usize, flags: c_int) -> Ssize => prepare(buf, n, true);
    __recvfrom_chk(fd: c_int, buf: *mut c_void, n: usize, buflen: usize, flags: c_int, addr: *mut libc::sockaddr, alen: *mut libc::socklen_t) -> Ssize => prepare_from(buf, n, addr, alen);
    __fread_chk(buf: *mut c_void, buflen: usize, size: usize, n: usize, f: File) -> usize => prepare(buf, items(size, n), true);
    __fread_unlocked_chk(buf: *mut c_void, buflen: usize, size: usize, n: usize, f: File) -> usize => prepare(buf, items(size, n), true);
}

/// The program's `sigaction`: libcrum records (and chains to) handlers of the signals its
/// fault handler owns; every other signal goes to the C library.
///
/// # Safety
/// As the C library's `sigaction`.
#[no_mangle]
pub unsafe extern "C" fn sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    let c = CRUM_SIGACTION.load(Relaxed);
    if c != 0 {
        // SAFETY: libcrum's function with this signature; pointers passed through.
        let r = unsafe { std::mem::transmute::<usize, CrumSigaction>(c)(sig, act, old) };
        if r != NOT_OURS {
            return r;
        }
    }
    let f = real(c"sigaction", &SIGACTION);
    // SAFETY: the C library's sigaction.
    unsafe { std::mem::transmute::<usize, CrumSigaction>(f)(sig, act, old) }
}

/// The program's `signal`, as [`sigaction`].
///
/// # Safety
/// As the C library's `signal`.
#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    let c = CRUM_SIGNAL.load(Relaxed);
    if c != 0 {
        let mut old = libc::SIG_ERR;
        // SAFETY: libcrum's function with this signature.
        if unsafe { std::mem::transmute::<usize, CrumSignal>(c)(sig, handler, &mut old) } != NOT_OURS {
            return old;
        }
    }
    let f = real(c"signal", &SIGNAL);
    // SAFETY: the C library's signal.
    unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t>(f)(sig, handler) }
}

static UNSHARE: AtomicUsize = AtomicUsize::new(0);
static SETNS: AtomicUsize = AtomicUsize::new(0);

/// `unshare` flags the kernel allows only in a single-threaded process (a new user
/// namespace implies `CLONE_THREAD`, a new mount namespace `CLONE_FS`).
const SINGLE_THREADED_UNSHARE: c_int =
    libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_FS | libc::CLONE_VM | libc::CLONE_SIGHAND | libc::CLONE_THREAD;

/// Runs `call` with crum's threads ended, if `needed` and libcrum is there; keeps the
/// call's errno.
fn single_threaded(needed: bool, call: impl FnOnce() -> c_int) -> c_int {
    let (s, r) = (CRUM_SUSPEND.load(Relaxed), CRUM_RESUME.load(Relaxed));
    if !needed || s == 0 || r == 0 {
        return call();
    }
    // SAFETY: libcrum's functions without arguments.
    let suspended = unsafe { std::mem::transmute::<usize, unsafe extern "C" fn() -> c_int>(s)() } != 0;
    let ret = call();
    if suspended {
        // SAFETY: as above; errno is the call's again afterwards.
        unsafe {
            let e = *libc::__errno_location();
            std::mem::transmute::<usize, unsafe extern "C" fn()>(r)();
            *libc::__errno_location() = e;
        }
    }
    ret
}

/// The program's `unshare`: with crum's threads ended for the flags that need a
/// single-threaded process.
///
/// # Safety
/// As the C library's `unshare`.
#[no_mangle]
pub unsafe extern "C" fn unshare(flags: c_int) -> c_int {
    let f = real(c"unshare", &UNSHARE);
    single_threaded(flags & SINGLE_THREADED_UNSHARE != 0, || {
        // SAFETY: the C library's unshare.
        unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(c_int) -> c_int>(f)(flags) }
    })
}

/// The program's `inotify_add_watch`: libcrum is told the path of each watch it adds
/// (`crum_note_watch`: descriptor, watch descriptor, path), which the kernel does not keep,
/// so that a restart can add the watch again. Keeps the call's errno.
///
/// # Safety
/// As the C library's `inotify_add_watch`.
#[no_mangle]
pub unsafe extern "C" fn inotify_add_watch(fd: c_int, path: *const libc::c_char, mask: u32) -> c_int {
    let f = real(c"inotify_add_watch", &INOTIFY_ADD_WATCH);
    // SAFETY: the C library's inotify_add_watch.
    let wd = unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(c_int, *const libc::c_char, u32) -> c_int>(f)(fd, path, mask) };
    let note = CRUM_NOTE_WATCH.load(Relaxed);
    if wd >= 0 && note != 0 {
        // SAFETY: libcrum's `crum_note_watch(int, int, const char *)`, which keeps errno and
        // only reads the path the call just used.
        unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(c_int, c_int, *const libc::c_char)>(note)(fd, wd, path) };
    }
    wd
}

/// The program's `setns`: with crum's threads ended for a user or mount namespace, or a
/// kind the descriptor decides (0, or a pidfd's set of kinds).
///
/// # Safety
/// As the C library's `setns`.
#[no_mangle]
pub unsafe extern "C" fn setns(fd: c_int, nstype: c_int) -> c_int {
    let f = real(c"setns", &SETNS);
    let needed = nstype == 0 || nstype & (libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0;
    single_threaded(needed, || {
        // SAFETY: the C library's setns.
        unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(c_int, c_int) -> c_int>(f)(fd, nstype) }
    })
}

/// Runs an exec call with crum's proxy channel open across it when this process holds the
/// channel (libcrum says so: same process, not a forked child); close-on-exec again if the
/// call returns (it failed). Keeps the call's errno.
fn keeping_channel(call: impl FnOnce() -> c_int) -> c_int {
    let f = CRUM_EXEC_CHANNEL.load(Relaxed);
    // SAFETY: libcrum's function without arguments (atomics and getpid only).
    let fd = if f == 0 { -1 } else { unsafe { std::mem::transmute::<usize, unsafe extern "C" fn() -> c_int>(f)() } };
    if fd >= 0 {
        // SAFETY: F_SETFD on libcrum's own descriptor.
        unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
    }
    let ret = call();
    if fd >= 0 {
        // SAFETY: as above; errno is the call's again afterwards.
        unsafe {
            let e = *libc::__errno_location();
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            *libc::__errno_location() = e;
        }
    }
    ret
}

type Argv = *const *const libc::c_char;
type Path = *const libc::c_char;

/// Define the exec wrapper `$name`: the C library's `$name` through [`keeping_channel`].
macro_rules! wrap_exec {
    ($( $name:ident ( $($arg:ident : $ty:ty),* ); )*) => {
        $(
            /// The C library's function of the same name, with crum's proxy channel kept
            /// open across it for the process holding it.
            ///
            /// # Safety
            /// As the C library's function of the same name.
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
                static F: AtomicUsize = AtomicUsize::new(0);
                // SAFETY: NUL-terminated literal.
                let name = unsafe { CStr::from_bytes_with_nul_unchecked(concat!(stringify!($name), "\0").as_bytes()) };
                let f = real(name, &F);
                keeping_channel(|| {
                    // SAFETY: `f` is the C library's function with this very signature.
                    unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($ty),*) -> c_int>(f)($($arg),*) }
                })
            }
        )*
    };
}

wrap_exec! {
    execve(path: Path, argv: Argv, envp: Argv);
    execv(path: Path, argv: Argv);
    execvp(file: Path, argv: Argv);
    execvpe(file: Path, argv: Argv, envp: Argv);
    fexecve(fd: c_int, argv: Argv, envp: Argv);
    execveat(dirfd: c_int, path: Path, argv: Argv, envp: Argv, flags: c_int);
}

/// Exported entry points of the variadic exec functions: a jump to their C definitions
/// (`src/exec.c`, hidden), which gather the arguments and call the wrappers above.
macro_rules! naked_exec {
    ($( $name:ident => $target:ident; )*) => {
        unsafe extern "C" {
            $( fn $target(); )*
        }
        $(
            /// The variadic C library function of the same name (see `src/exec.c`).
            ///
            /// # Safety
            /// As the C library's function of the same name.
            #[unsafe(naked)]
            #[no_mangle]
            pub unsafe extern "C" fn $name() {
                #[cfg(target_arch = "x86_64")]
                core::arch::naked_asm!("jmp {}", sym $target);
                #[cfg(target_arch = "aarch64")]
                core::arch::naked_asm!("b {}", sym $target);
            }
        )*
    };
}

naked_exec! {
    execl => crum_execl;
    execlp => crum_execlp;
    execle => crum_execle;
    syscall => crum_syscall;
}

unsafe extern "C" {
    fn crum_last_exit_value() -> c_int;
}

/// The code of the program's last `syscall(SYS_exit, code)`, `| 0x100` once there was one
/// (`src/syscall.c`): libcrum.so's agent ends the process with it when no thread of the
/// program is left (`ckpt::program_end`).
#[no_mangle]
pub extern "C" fn crum_last_exit_code() -> c_int {
    // SAFETY: reads an int of src/syscall.c; no arguments.
    unsafe { crum_last_exit_value() }
}

// --- the static CUDA runtime: `src/static_runtime.c` ----------------------------------

unsafe extern "C" {
    fn crum_static_runtime_linked();
}

/// Makes the linker take `src/static_runtime.c`'s object, whose constructor redirects a
/// static CUDA runtime in the executable to libcrum.so (nothing calls it).
#[used]
static STATIC_RUNTIME: unsafe extern "C" fn() = crum_static_runtime_linked;

// --- fcntl: pids in lock and owner answers -------------------------------------------

static REAL_FCNTL: AtomicUsize = AtomicUsize::new(0);
static REAL_FCNTL64: AtomicUsize = AtomicUsize::new(0);
const F_SETOWN_EX: c_int = 15;
const F_GETOWN_EX: c_int = 16;

/// `fcntl` with the pids the program knows after a restart: `F_SETOWN`/`F_SETOWN_EX` take
/// them and `F_GETOWN`/`F_GETOWN_EX` give them, and `F_GETLK` names a conflicting lock's
/// owner by them (a lock a restart took again is held under the kernel's new pid). The
/// optional third argument is taken as one (the calling convention passes a variadic
/// `int` or pointer the same way) and passed on as such.
///
/// # Safety
/// As the C library's `fcntl`.
unsafe fn fcntl_with(cache: &AtomicUsize, name: &CStr, fd: c_int, cmd: c_int, mut arg: usize) -> c_int {
    let f = real(name, cache);
    if f == 0 {
        // SAFETY: sets the calling thread's errno.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        return -1;
    }
    // SAFETY: the C library's fcntl, its variadic argument passed as a register-sized one.
    let call = |arg: usize| unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(c_int, c_int, usize) -> c_int>(f)(fd, cmd, arg) };
    if !pid::virtualised() {
        return call(arg);
    }
    // struct f_owner_ex { int type; pid_t pid; } (the libc crate has neither it nor the
    // commands F_SETOWN_EX, F_GETOWN_EX).
    let own: [c_int; 2];
    match cmd {
        libc::F_SETOWN => arg = pid::owner_to_kernel(arg as c_int) as usize,
        F_SETOWN_EX if arg != 0 => {
            // SAFETY: the caller's struct f_owner_ex, read into a copy of ours.
            let mut o = unsafe { std::ptr::read_unaligned(arg as *const [c_int; 2]) };
            o[1] = pid::owner_to_kernel(o[1]);
            own = o;
            arg = own.as_ptr() as usize;
        }
        _ => {}
    }
    let r = call(arg);
    match cmd {
        libc::F_GETOWN => pid::owner_to_program(r),
        F_GETOWN_EX if r == 0 && arg != 0 => {
            // SAFETY: the caller's struct f_owner_ex, which the kernel just filled.
            unsafe { (*(arg as *mut [c_int; 2]))[1] = pid::owner_to_program((*(arg as *mut [c_int; 2]))[1]) };
            r
        }
        libc::F_GETLK | libc::F_OFD_GETLK if r == 0 && arg != 0 => {
            // SAFETY: the caller's struct flock, which the kernel just filled.
            unsafe { (*(arg as *mut libc::flock)).l_pid = pid::lock_pid_to_program((*(arg as *mut libc::flock)).l_pid) };
            r
        }
        _ => r,
    }
}

/// The program's `fcntl` ([`fcntl_with`]).
///
/// # Safety
/// As the C library's `fcntl`.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: the caller's arguments, as for the C library's.
    unsafe { fcntl_with(&REAL_FCNTL, c"fcntl", fd, cmd, arg) }
}

/// The program's `fcntl64` ([`fcntl_with`]).
///
/// # Safety
/// As the C library's `fcntl64`.
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: the caller's arguments, as for the C library's.
    unsafe { fcntl_with(&REAL_FCNTL64, c"fcntl64", fd, cmd, arg) }
}

// --- opens for writing -----------------------------------------------------------------

type Mode = libc::c_uint;

/// Whether an open with `flags` may change the file.
fn writes(flags: c_int) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0
}

/// Whether an `fopen` mode writes (`w`, `a`, `+`).
fn mode_writes(mode: *const libc::c_char) -> bool {
    if mode.is_null() {
        return false;
    }
    // SAFETY: the caller's NUL-terminated mode string.
    unsafe { CStr::from_ptr(mode) }.to_bytes().iter().any(|c| matches!(c, b'w' | b'a' | b'+'))
}

/// Whether `path` (relative to `dirfd`) exists now, when libcrum wants to know (errno kept).
fn exists(dirfd: c_int, path: Path) -> bool {
    if CRUM_NOTE_OPEN.load(Relaxed) == 0 || path.is_null() {
        return true;
    }
    // SAFETY: the caller's path; errno is thread-local.
    unsafe {
        let e = *libc::__errno_location();
        let r = libc::faccessat(dirfd, path, libc::F_OK, 0) == 0;
        *libc::__errno_location() = e;
        r
    }
}

/// `path`, or after a restart, where it names the program's own `/proc` entry by the pid
/// the program knows, the same entry by the kernel's pid (written into `buf`).
fn proc_path(path: Path, buf: &mut [u8; 4096]) -> Path {
    if path.is_null() || !pid::virtualised() {
        return path;
    }
    // SAFETY: the caller's NUL-terminated path.
    let b = unsafe { CStr::from_ptr(path) }.to_bytes();
    match pid::proc_path(b, buf) {
        Some(_) => buf.as_ptr().cast(),
        None => path,
    }
}

/// After a restart, a read-only open of a file that names lock owners by pid (`/proc/locks`,
/// an fdinfo file: [`pid::lists_lock_owners`]): a memfd holding its text with each owner
/// in the program's ids (the locks a restart took again are the restorer's, under the
/// kernel's new pid), close-on-exec if `flags` say so. None to open the file itself (not
/// such a file, or anything failed). Allocates nothing.
fn lock_owner_file(path: Path, flags: c_int) -> Option<c_int> {
    if path.is_null() || !pid::virtualised() || flags & libc::O_ACCMODE != libc::O_RDONLY {
        return None;
    }
    // SAFETY: the caller's NUL-terminated path.
    let name = unsafe { CStr::from_ptr(path) };
    if !pid::lists_lock_owners(name.to_bytes()) {
        return None;
    }
    // SAFETY: system calls on a NUL-terminated path, our new descriptors and live buffers;
    // errno is put back as it was.
    unsafe {
        let e = *libc::__errno_location();
        let src = libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path, libc::O_RDONLY | libc::O_CLOEXEC) as c_int;
        if src < 0 {
            *libc::__errno_location() = e;
            return None;
        }
        let mfd_flags = if flags & libc::O_CLOEXEC != 0 { libc::MFD_CLOEXEC } else { 0 };
        let dst = libc::syscall(libc::SYS_memfd_create, c"crum-proc".as_ptr(), mfd_flags) as c_int;
        let ok = dst >= 0 && {
            let (mut chunk, mut line, mut out) = ([0u8; 4096], [0u8; 512], [0u8; 600]);
            let mut len = 0usize;
            let mut ok = true;
            let put = |b: &[u8]| libc::write(dst, b.as_ptr().cast(), b.len()) == b.len() as isize;
            'read: loop {
                let n = libc::read(src, chunk.as_mut_ptr().cast(), chunk.len());
                if n < 0 {
                    ok = false;
                    break;
                }
                if n == 0 {
                    break;
                }
                for &c in &chunk[..n as usize] {
                    line[len] = c;
                    len += 1;
                    if c == b'\n' || len == line.len() {
                        let m = pid::lock_line_to_program(&line[..len], &mut out);
                        if !put(&out[..m]) {
                            ok = false;
                            break 'read;
                        }
                        len = 0;
                    }
                }
            }
            ok && (len == 0 || {
                let m = pid::lock_line_to_program(&line[..len], &mut out);
                put(&out[..m])
            }) && libc::lseek(dst, 0, libc::SEEK_SET) == 0
        };
        libc::close(src);
        *libc::__errno_location() = e;
        if !ok {
            if dst >= 0 {
                libc::close(dst);
            }
            return None;
        }
        Some(dst)
    }
}

/// Tells libcrum that the program is about to create `path` (relative to `dirfd`), which
/// does not exist yet.
fn note_create(dirfd: c_int, path: Path) {
    let f = CRUM_NOTE_CREATE.load(Relaxed);
    if f != 0 && !path.is_null() {
        // SAFETY: libcrum's `crum_note_create(int, const char *)`, which keeps errno.
        unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(c_int, Path)>(f)(dirfd, path) };
    }
}

/// Tells libcrum that the program opened `fd` for writing.
fn note_open(fd: c_int, created: bool) {
    let f = CRUM_NOTE_OPEN.load(Relaxed);
    if f != 0 && fd >= 0 {
        // SAFETY: libcrum's `crum_note_open(int, int)`, which keeps errno.
        unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(c_int, c_int)>(f)(fd, created as c_int) };
    }
}

/// `name` as a C string, at compile time.
macro_rules! cname {
    ($name:ident) => {
        match CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
            Ok(n) => n,
            Err(_) => panic!("bad name"),
        }
    };
}

macro_rules! wrap_open {
    ($( $name:ident / $real:ident ($($arg:ident: $ty:ty),*) at $dirfd:expr, $path:ident, $flags:expr ; )*) => {
        $(
            static $real: AtomicUsize = AtomicUsize::new(0);

            /// The C library's call, then libcrum told of an open for writing.
            ///
            /// # Safety
            /// As the C library's function of the same name.
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
                let mut pbuf = [0u8; 4096];
                let $path = proc_path($path, &mut pbuf);
                let flags: c_int = $flags;
                if let Some(fd) = lock_owner_file($path, flags) {
                    return fd;
                }
                let may_create = flags & libc::O_CREAT != 0;
                let existed = !may_create || exists($dirfd, $path);
                if !existed {
                    note_create($dirfd, $path);
                }
                let f = real(cname!($name), &$real);
                // SAFETY: the C library's function, variadic after its fixed arguments; the
                // mode goes where a variadic caller puts it.
                let fd = unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($ty),*) -> c_int>(f)($($arg),*) };
                if fd >= 0 && writes(flags) {
                    note_open(fd, !existed);
                }
                fd
            }
        )*

        fn resolve_opens() {
            $( real(cname!($name), &$real); )*
        }
    };
}

wrap_open! {
    open / REAL_OPEN (path: Path, flags: c_int, mode: Mode) at libc::AT_FDCWD, path, flags;
    open64 / REAL_OPEN64 (path: Path, flags: c_int, mode: Mode) at libc::AT_FDCWD, path, flags;
    openat / REAL_OPENAT (dirfd: c_int, path: Path, flags: c_int, mode: Mode) at dirfd, path, flags;
    openat64 / REAL_OPENAT64 (dirfd: c_int, path: Path, flags: c_int, mode: Mode) at dirfd, path, flags;
    __open_2 / REAL_OPEN_2 (path: Path, flags: c_int) at libc::AT_FDCWD, path, flags;
    __open64_2 / REAL_OPEN64_2 (path: Path, flags: c_int) at libc::AT_FDCWD, path, flags;
    __openat_2 / REAL_OPENAT_2 (dirfd: c_int, path: Path, flags: c_int) at dirfd, path, flags;
    __openat64_2 / REAL_OPENAT64_2 (dirfd: c_int, path: Path, flags: c_int) at dirfd, path, flags;
    creat / REAL_CREAT (path: Path, mode: Mode) at libc::AT_FDCWD, path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
    creat64 / REAL_CREAT64 (path: Path, mode: Mode) at libc::AT_FDCWD, path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
}

macro_rules! wrap_fopen {
    ($( $name:ident / $real:ident ($($arg:ident: $ty:ty),*) path $path:ident, mode $mode:ident ; )*) => {
        $(
            static $real: AtomicUsize = AtomicUsize::new(0);

            /// The C library's call, then libcrum told of an open for writing.
            ///
            /// # Safety
            /// As the C library's function of the same name.
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> File {
                let mut pbuf = [0u8; 4096];
                let $path = proc_path($path, &mut pbuf);
                let w = mode_writes($mode) && !$path.is_null();
                // (Not `freopen`, which must keep its stream.)
                if !w && stringify!($name).starts_with("fopen") {
                    // SAFETY: the caller's NUL-terminated mode string (checked non-null).
                    let cloexec = !$mode.is_null() && unsafe { CStr::from_ptr($mode) }.to_bytes().contains(&b'e');
                    if let Some(fd) = lock_owner_file($path, libc::O_RDONLY | if cloexec { libc::O_CLOEXEC } else { 0 }) {
                        // SAFETY: our new descriptor, given to a stream of the C library.
                        let fp = unsafe { libc::fdopen(fd, $mode) };
                        if !fp.is_null() {
                            return fp;
                        }
                        // SAFETY: ours, closed once.
                        unsafe { libc::close(fd) };
                    }
                }
                let existed = !w || exists(libc::AT_FDCWD, $path);
                if !existed {
                    note_create(libc::AT_FDCWD, $path);
                }
                let f = real(cname!($name), &$real);
                // SAFETY: the C library's function with this very signature.
                let fp = unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($ty),*) -> File>(f)($($arg),*) };
                if w && !fp.is_null() {
                    // SAFETY: a stream the C library just opened.
                    note_open(unsafe { libc::fileno(fp) }, !existed);
                }
                fp
            }
        )*

        fn resolve_fopens() {
            $( real(cname!($name), &$real); )*
        }
    };
}

wrap_fopen! {
    fopen / REAL_FOPEN (path: Path, mode: Path) path path, mode mode;
    fopen64 / REAL_FOPEN64 (path: Path, mode: Path) path path, mode mode;
    freopen / REAL_FREOPEN (path: Path, mode: Path, stream: File) path path, mode mode;
    freopen64 / REAL_FREOPEN64 (path: Path, mode: Path, stream: File) path path, mode mode;
}

macro_rules! wrap_path {
    ($( $name:ident / $real:ident ($($arg:ident: $ty:ty),*) -> $ret:ty, path $path:ident ; )*) => {
        $(
            static $real: AtomicUsize = AtomicUsize::new(0);

            /// The C library's call, with the program's own `/proc` entry named by the
            /// kernel's pid after a restart ([`proc_path`]).
            ///
            /// # Safety
            /// As the C library's function of the same name.
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                let mut pbuf = [0u8; 4096];
                let $path = proc_path($path, &mut pbuf);
                let f = real(cname!($name), &$real);
                // SAFETY: the C library's function with this very signature.
                unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($ty),*) -> $ret>(f)($($arg),*) }
            }
        )*

        fn resolve_paths() {
            $( real(cname!($name), &$real); )*
        }
    };
}

type Stat = *mut libc::stat;

wrap_path! {
    opendir / REAL_OPENDIR (path: Path) -> *mut libc::DIR, path path;
    access / REAL_ACCESS (path: Path, mode: c_int) -> c_int, path path;
    faccessat / REAL_FACCESSAT (dirfd: c_int, path: Path, mode: c_int, flags: c_int) -> c_int, path path;
    readlink / REAL_READLINK (path: Path, buf: *mut libc::c_char, size: libc::size_t) -> libc::ssize_t, path path;
    readlinkat / REAL_READLINKAT (dirfd: c_int, path: Path, buf: *mut libc::c_char, size: libc::size_t) -> libc::ssize_t, path path;
    stat / REAL_STAT (path: Path, st: Stat) -> c_int, path path;
    stat64 / REAL_STAT64 (path: Path, st: Stat) -> c_int, path path;
    lstat / REAL_LSTAT (path: Path, st: Stat) -> c_int, path path;
    lstat64 / REAL_LSTAT64 (path: Path, st: Stat) -> c_int, path path;
    fstatat / REAL_FSTATAT (dirfd: c_int, path: Path, st: Stat, flags: c_int) -> c_int, path path;
    fstatat64 / REAL_FSTATAT64 (dirfd: c_int, path: Path, st: Stat, flags: c_int) -> c_int, path path;
    statx / REAL_STATX (dirfd: c_int, path: Path, flags: c_int, mask: libc::c_uint, st: *mut libc::statx) -> c_int, path path;
    chdir / REAL_CHDIR (path: Path) -> c_int, path path;
}
