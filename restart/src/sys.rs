//! Thin wrappers over the system calls the restorer needs, each returning a `RestartError`
//! naming what failed.
//!
//! # Safety
//! Every call gets NUL-terminated strings, live buffers and fds this process owns. The last
//! steps ([`unregister_rseq`], [`set_sigactions`], [`enter`]) hand the thread over to the
//! restored program: signals are blocked first, so no program handler runs on restorer state.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::path::Path;

use crum_ckpt::agent::{RestartInfo, RESTART_MAGIC};
use crum_ckpt::state::{EpollWatch, FdKind, FileLock, InotifyWatch, LockKind, PosixTimer, SigAction, SockOpt, SocketRole, SocketState};

use crate::{sys_err, RestartError};

fn cstr(s: &str) -> Result<CString, RestartError> {
    CString::new(s).map_err(|_| RestartError::Invalid(format!("path {s:?} contains NUL")))
}

pub fn open(path: &str, flags: i32) -> Result<i32, RestartError> {
    let c = cstr(path)?;
    // SAFETY: NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(sys_err(format!("reopening {path}")));
    }
    Ok(fd)
}

/// Opens the named pipe `path` with access mode `acc` without waiting for its other end
/// (non-blocking; the caller sets the program's flags after). A write end whose reader is
/// not there (yet) is opened through a reader of our own, closed at once: it is then a
/// write end without a reader, as before the checkpoint when the reader had gone, until a
/// reader opens it.
pub fn open_fifo(path: &str, acc: i32) -> Result<i32, RestartError> {
    let c = cstr(path)?;
    let open = |flags: i32| {
        // SAFETY: NUL-terminated path.
        unsafe { libc::open(c.as_ptr(), flags | libc::O_NONBLOCK | libc::O_CLOEXEC) }
    };
    let fd = open(acc);
    if fd >= 0 {
        return Ok(fd);
    }
    if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO) && acc == libc::O_WRONLY {
        let helper = open(libc::O_RDWR);
        let fd = open(acc);
        if helper >= 0 {
            close(helper);
        }
        if fd >= 0 {
            return Ok(fd);
        }
    }
    Err(sys_err(format!("opening named pipe {path}")))
}

/// Creates `path` (it must not exist; mode 0666 less the umask) and opens it with `flags`.
pub fn create(path: &str, flags: i32) -> Result<i32, RestartError> {
    let c = cstr(path)?;
    // SAFETY: NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC, 0o666) };
    if fd < 0 {
        return Err(sys_err(format!("making {path} again")));
    }
    Ok(fd)
}

/// Writes all of `data` into `fd` from offset 0.
pub fn pwrite_all(fd: i32, data: &[u8], path: &str) -> Result<(), RestartError> {
    let mut at = 0usize;
    while at < data.len() {
        // SAFETY: pwrite from the live slice's tail.
        let n = unsafe { libc::pwrite(fd, data[at..].as_ptr() as *const libc::c_void, data.len() - at, at as libc::off_t) };
        if n <= 0 {
            return Err(sys_err(format!("writing {path} back as it was at the checkpoint")));
        }
        at += n as usize;
    }
    Ok(())
}

pub fn ftruncate(fd: i32, len: u64, path: &str) -> Result<(), RestartError> {
    // SAFETY: our fd.
    if unsafe { libc::ftruncate(fd, len as i64) } != 0 {
        return Err(sys_err(format!("cutting {path} back to its checkpoint size")));
    }
    Ok(())
}

pub fn lseek(fd: i32, pos: u64, path: &str) -> Result<(), RestartError> {
    // SAFETY: our fd.
    if unsafe { libc::lseek(fd, pos as i64, libc::SEEK_SET) } < 0 {
        return Err(sys_err(format!("seeking in {path}")));
    }
    Ok(())
}

/// A terminal fd: the restarting process's stdin if it is a terminal, else /dev/tty.
pub fn tty_fd(flags: i32) -> Result<i32, RestartError> {
    // SAFETY: isatty/dup on fd 0.
    unsafe {
        if libc::isatty(0) == 1 {
            let fd = libc::dup(0);
            if fd >= 0 {
                return Ok(fd);
            }
        }
    }
    open("/dev/tty", (flags & libc::O_ACCMODE) | libc::O_NOCTTY)
}

/// A pipe whose ends are at fds >= base.
pub fn pipe_high(base: i32) -> Result<(i32, i32), RestartError> {
    let mut p = [0i32; 2];
    // SAFETY: pipe2 writes two fds into the live array.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(sys_err("creating a pipe"));
    }
    Ok((move_high(p[0], base)?, move_high(p[1], base)?))
}

/// A pipe whose ends are at numbers >= base, not close-on-exec (a job's restorers inherit it).
pub fn inherited_pipe(base: i32) -> Result<(i32, i32), RestartError> {
    let (r, w) = pipe_high(base)?;
    // SAFETY: our own descriptors.
    unsafe {
        libc::fcntl(r, libc::F_SETFD, 0);
        libc::fcntl(w, libc::F_SETFD, 0);
    }
    Ok((r, w))
}

/// Moves `fd` to a number >= base (closing the original).
pub fn move_high(fd: i32, base: i32) -> Result<i32, RestartError> {
    // SAFETY: our fd.
    let hi = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, base) };
    if hi < 0 {
        return Err(sys_err("duplicating an fd"));
    }
    close(fd);
    Ok(hi)
}

pub fn dup_to(from: i32, to: i32, cloexec: bool) -> Result<(), RestartError> {
    if from == to {
        return Ok(());
    }
    // SAFETY: both fds are ours (to is free or a placeholder of ours).
    if unsafe { libc::dup3(from, to, if cloexec { libc::O_CLOEXEC } else { 0 }) } < 0 {
        return Err(sys_err(format!("placing fd {to}")));
    }
    Ok(())
}

fn fd_or_err(fd: i32, what: impl Into<String>) -> Result<i32, RestartError> {
    if fd < 0 {
        return Err(sys_err(what));
    }
    Ok(fd)
}

/// A file deleted while the program had it open (or a memfd), made again with its contents:
/// an unnamed file (`O_TMPFILE`) in the directory it was in, or in the temporary directory
/// if that is gone; a memfd with its name and seals. Opened with access mode `acc`.
/// `extents` (offset, length): where it had data, the rest left a hole; None: all of it.
pub fn deleted_file(path: &str, memfd: bool, data: &[u8], extents: Option<&[(u64, u64)]>, seals: u32, acc: i32) -> Result<i32, RestartError> {
    let fd = if memfd {
        let name = cstr(path)?;
        let flags = if seals != 0 { libc::MFD_ALLOW_SEALING } else { 0 };
        // SAFETY: NUL-terminated name; creates a descriptor.
        fd_or_err(unsafe { libc::memfd_create(name.as_ptr(), flags) }, format!("creating memfd {path}"))?
    } else {
        let dir = Path::new(path).parent().filter(|d| d.is_dir()).map(Path::to_path_buf).unwrap_or_else(std::env::temp_dir);
        let c = cstr(&dir.to_string_lossy())?;
        // SAFETY: NUL-terminated path; creates a descriptor.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC, 0o600) };
        fd_or_err(fd, format!("creating an unnamed file in {} for deleted file {path}", dir.display()))?
    };
    match extents {
        // Only where it had data: the rest stays a hole, as it was (`SEEK_HOLE` finds it).
        Some(extents) => {
            // SAFETY: ftruncate of our own new descriptor.
            if unsafe { libc::ftruncate(fd, data.len() as libc::off_t) } != 0 {
                return Err(sys_err(format!("sizing deleted file {path}")));
            }
            for &(off, len) in extents {
                let bytes = usize::try_from(off)
                    .ok()
                    .zip(usize::try_from(off.saturating_add(len)).ok())
                    .and_then(|(a, b)| data.get(a..b))
                    .ok_or_else(|| RestartError::Invalid(format!("deleted file {path}: extent {off}+{len} beyond its {} bytes", data.len())))?;
                pwrite_at(fd, bytes, off, path)?;
            }
        }
        None => write_all(fd, data)?,
    }
    if seals != 0 {
        // SAFETY: fcntl with an integer argument on our own descriptor.
        if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals as libc::c_int) } != 0 {
            return Err(sys_err(format!("sealing memfd {path}")));
        }
    }
    if acc == libc::O_RDWR {
        return Ok(fd);
    }
    // Another open file description of the same file, with the program's access mode.
    let again = open(&format!("/proc/self/fd/{fd}"), acc);
    close(fd);
    again
}

/// Writes all of `bytes` at `off` of `fd` (the descriptor's offset stays).
fn pwrite_at(fd: i32, mut bytes: &[u8], mut off: u64, path: &str) -> Result<(), RestartError> {
    while !bytes.is_empty() {
        // SAFETY: pwrite from the live slice.
        let n = unsafe { libc::pwrite(fd, bytes.as_ptr().cast(), bytes.len(), off as libc::off_t) };
        if n <= 0 {
            return Err(sys_err(format!("writing deleted file {path} back")));
        }
        bytes = &bytes[n as usize..];
        off += n as u64;
    }
    Ok(())
}

/// Gives the file open at `fd` (made anew: a deleted file, a memfd) its owner, permission
/// bits and access and modification times as they were. An owner this user cannot give
/// (not root) is a warning naming the file.
pub fn set_file_attrs(fd: i32, mode: u32, times: Option<[(i64, i64); 2]>, owner: (u32, u32), path: &str) -> Result<(), RestartError> {
    // SAFETY: fstat into a live local; fchown of our own descriptor.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) == 0 && (st.st_uid, st.st_gid) != owner && libc::fchown(fd, owner.0, owner.1) != 0 {
            eprintln!(
                "crum: warning: deleted file {path} comes back owned by {}:{}, not {}:{} ({})",
                st.st_uid,
                st.st_gid,
                owner.0,
                owner.1,
                std::io::Error::last_os_error()
            );
        }
    }
    // SAFETY: fchmod of our own descriptor.
    if unsafe { libc::fchmod(fd, mode as libc::mode_t) } != 0 {
        return Err(sys_err(format!("giving deleted file {path} its mode {mode:o} back")));
    }
    if let Some(t) = times {
        let ts = t.map(|(s, ns)| libc::timespec { tv_sec: s as libc::time_t, tv_nsec: ns as libc::c_long });
        // SAFETY: futimens reads the two live timespecs.
        if unsafe { libc::futimens(fd, ts.as_ptr()) } != 0 {
            return Err(sys_err(format!("giving deleted file {path} its times back")));
        }
    }
    Ok(())
}

/// Gives the socket file of a Unix socket bound to a path (bound again by this restart, with
/// the umask's mode and this user's ids) its owner (where this user may) and permission bits
/// as they were.
pub fn chmod_socket_file(s: &SocketState, cwd: &str, mode: u32, owner: (u32, u32)) {
    let path: Vec<u8> = s.local.get(2..).unwrap_or(&[]).split(|&c| c == 0).next().unwrap_or(&[]).to_vec();
    let Ok(c) = CString::new(path) else { return };
    in_cwd_for(&s.local, cwd, || {
        // SAFETY: stat and chmod of a NUL-terminated path; stat into a live local.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::lstat(c.as_ptr(), &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFSOCK {
                if (st.st_uid, st.st_gid) != owner {
                    libc::lchown(c.as_ptr(), owner.0, owner.1);
                }
                libc::chmod(c.as_ptr(), mode as libc::mode_t);
            }
        }
    });
}

/// A new eventfd holding `count`.
pub fn eventfd(count: u64, semaphore: bool) -> Result<i32, RestartError> {
    let flags = if semaphore { libc::EFD_SEMAPHORE } else { 0 };
    // SAFETY: creates a descriptor; no memory is passed.
    let fd = fd_or_err(unsafe { libc::eventfd(0, flags) }, "creating an eventfd")?;
    if count > 0 {
        // The counter is 64-bit; eventfd's initial value only 32.
        write_all(fd, &count.to_ne_bytes())?;
    }
    Ok(fd)
}

/// A new inotify instance with `watches` added again by path, each with its watch
/// descriptor: the kernel numbers the watches of an instance upward from 1 without reusing
/// a number, so a gap (watches the program removed) is passed over by adding and removing a
/// watch on a file none of them watches. A watched file replaced since the checkpoint (same
/// path, another inode) is watched as it is now, with a warning.
///
/// Made in two steps: [`inotify`] when the descriptor's turn comes, [`inotify_watch`] once
/// every descriptor is back (files cut back to their size at the checkpoint must not give
/// the program an IN_MODIFY of crum's).
pub fn inotify() -> Result<i32, RestartError> {
    // SAFETY: creates a descriptor; no memory is passed.
    fd_or_err(unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) }, "creating an inotify instance")
}

/// Adds `watches` to the instance [`inotify`] made, now at `fd` (the program's number, with
/// the program's flags: non-blocking for the drain only).
pub fn inotify_watch(fd: i32, watches: &[InotifyWatch]) -> Result<(), RestartError> {
    let add = |path: &str, mask: u32| -> Result<i32, RestartError> {
        let c = cstr(path)?;
        // SAFETY: a live NUL-terminated path.
        Ok(unsafe { libc::inotify_add_watch(fd, c.as_ptr(), mask) })
    };
    let mut ws: Vec<&InotifyWatch> = watches.iter().collect();
    ws.sort_by_key(|w| w.wd);
    let watched: Vec<(u64, u64)> = ws.iter().map(|w| (w.dev, w.ino)).collect();
    let spare = ["/", "/dev", "/etc", "/proc", "/sys"]
        .into_iter()
        .find(|p| crum_ckpt::inotify::identity(p, true).is_some_and(|id| !watched.contains(&id)));
    let mut next = 1;
    for w in ws {
        while next < w.wd {
            let Some(spare) = spare else {
                return Err(RestartError::Invalid(format!("inotify watch {} on {}: no spare file to step over the numbers before it", w.wd, w.path)));
            };
            let d = add(spare, libc::IN_ATTRIB)?;
            if d < 0 || d >= w.wd {
                return Err(sys_err(format!("stepping inotify watch numbers up to {} ({} on {spare})", w.wd, d)));
            }
            // SAFETY: removes the watch made just above.
            unsafe { libc::inotify_rm_watch(fd, d) };
            next = d + 1;
        }
        let mask = w.mask | if w.dont_follow { libc::IN_DONT_FOLLOW } else { 0 };
        let got = add(&w.path, mask)?;
        if got < 0 {
            return Err(sys_err(format!("adding inotify watch {} on {} again", w.wd, w.path)));
        }
        if got != w.wd {
            return Err(RestartError::Invalid(format!(
                "inotify watch {} on {} came back as watch {got} (the kernel numbered it otherwise)",
                w.wd, w.path
            )));
        }
        if crum_ckpt::inotify::identity(&w.path, !w.dont_follow) != Some((w.dev, w.ino)) {
            eprintln!(
                "crum: warning: inotify watch {} on {}: the file was replaced since the checkpoint; the watch is on the one there now",
                w.wd, w.path
            );
        }
        next = got + 1;
    }
    // The removals above queued IN_IGNORED events the program must not see. (An event of a
    // watched file in these moments is one of the time between checkpoint and restart,
    // which no restart brings back either.) The descriptor's own flags are set later.
    let mut buf = [0u8; 4096];
    // SAFETY: fcntl on our descriptor; reads into a live local buffer without blocking.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        while libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) > 0 {}
        libc::fcntl(fd, libc::F_SETFL, fl);
    }
    Ok(())
}

/// A pidfd of this process (the restarted program), or of its main thread (`thread`:
/// `PIDFD_THREAD`, which is `O_EXCL`).
pub fn pidfd(thread: bool) -> Result<i32, RestartError> {
    // SAFETY: raw system calls with integer arguments.
    let fd = unsafe {
        let pid = libc::syscall(libc::SYS_getpid);
        libc::syscall(libc::SYS_pidfd_open, pid, if thread { libc::O_EXCL } else { 0 }) as i32
    };
    fd_or_err(fd, if thread { "opening a pidfd of the main thread" } else { "opening a pidfd of the process" })
}

/// A pidfd of process `pid` (the kernel's), or of its main thread (`thread`).
pub fn pidfd_of(pid: i32, thread: bool) -> Result<i32, RestartError> {
    // SAFETY: a raw system call with integer arguments.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, if thread { libc::O_EXCL } else { 0 }) as i32 };
    fd_or_err(fd, "opening a pidfd of another process of the job")
}

/// Attaches System V shared memory segment `a.id` again at `a.start`, over the shared memory
/// restored there with its bytes at the checkpoint, which are written into the segment first
/// (its bytes now may be from after the checkpoint); the attachment gets protection `prot`.
/// A segment removed before the checkpoint is a new private segment, removed again once
/// attached. One that no longer exists as it was (key, size) fails the restart, named.
pub fn sysv_attach(a: &crum_ckpt::state::SysvShm, prot: i32) -> Result<(), RestartError> {
    let what = || format!("SysV shared memory segment {} (key {:#x}, {} bytes) at {:#x}", a.id, a.key, a.size, a.start);
    let id = if a.removed {
        // SAFETY: a system call with integer arguments.
        let id = unsafe { libc::shmget(libc::IPC_PRIVATE, a.size as usize, libc::IPC_CREAT | a.mode as i32) };
        if id < 0 {
            return Err(sys_err(format!("making {} again", what())));
        }
        id
    } else {
        // SAFETY: shmid_ds is plain data; IPC_STAT writes one into the live local.
        let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let r = unsafe { libc::shmctl(a.id, libc::IPC_STAT, &mut ds) };
        if r != 0 || ds.shm_perm.__key != a.key || ds.shm_segsz as u64 != a.size {
            return Err(RestartError::Invalid(format!(
                "{} no longer exists as it was (removed, or the system restarted): it cannot be attached again, and the program holds its id",
                what()
            )));
        }
        a.id
    };
    let len = a.size.next_multiple_of(4096) as usize;
    // SAFETY: attaches at an address the kernel picks; the bytes restored at `a.start` (made
    // readable for the copy) are copied in; the temporary attachment is detached.
    unsafe {
        let tmp = libc::shmat(id, std::ptr::null(), 0);
        if tmp as isize == -1 {
            return Err(sys_err(format!("attaching {}", what())));
        }
        libc::mprotect(a.start as *mut libc::c_void, len, libc::PROT_READ);
        std::ptr::copy_nonoverlapping(a.start as *const u8, tmp as *mut u8, a.size as usize);
        libc::shmdt(tmp);
        // SHM_REMAP replaces the restored copy at the program's address.
        let at = libc::shmat(id, a.start as *const libc::c_void, libc::SHM_REMAP);
        if at as u64 != a.start {
            return Err(sys_err(format!("attaching {} at its address", what())));
        }
        libc::mprotect(a.start as *mut libc::c_void, len, prot);
        if a.removed {
            libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut());
        }
    }
    Ok(())
}

/// `_IOW('T', 0, u64)`: sets a timerfd's count of unread expirations.
const TFD_IOC_SET_TICKS: u64 = (1 << 30) | (8 << 16) | ((b'T' as u64) << 8);

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec { tv_sec: (ns / 1_000_000_000) as libc::time_t, tv_nsec: (ns % 1_000_000_000) as libc::c_long }
}

/// A new timerfd armed as a [`FdKind::TimerFd`] describes, with its unread expirations.
pub fn timerfd(k: &FdKind) -> Result<i32, RestartError> {
    let FdKind::TimerFd { clock, realtime_deadline, cancel_on_set, value_ns, interval_ns, ticks, deadline_ns } = *k else {
        return Err(RestartError::Invalid("not a timerfd".into()));
    };
    // SAFETY: creates a descriptor; no memory is passed.
    let fd = fd_or_err(unsafe { libc::timerfd_create(clock, 0) }, format!("creating a timerfd on clock {clock}"))?;
    let mut flags = 0;
    let value = if realtime_deadline && value_ns != 0 {
        flags |= libc::TFD_TIMER_ABSTIME;
        if cancel_on_set {
            flags |= libc::TFD_TIMER_CANCEL_ON_SET;
        }
        timespec(deadline_ns)
    } else {
        timespec(value_ns)
    };
    let its = libc::itimerspec { it_interval: timespec(interval_ns), it_value: value };
    // SAFETY: the itimerspec is live; the old value is not asked for.
    if unsafe { libc::timerfd_settime(fd, flags, &its, std::ptr::null_mut()) } != 0 {
        return Err(sys_err("arming a timerfd"));
    }
    if ticks > 0 {
        // SAFETY: the ioctl reads one u64 from the live local.
        if unsafe { libc::ioctl(fd, TFD_IOC_SET_TICKS as _, &ticks as *const u64) } != 0 {
            return Err(sys_err(format!("giving a timerfd back its {ticks} unread expirations (TFD_IOC_SET_TICKS)")));
        }
    }
    Ok(fd)
}

/// A new signalfd for the signals of `mask` (bit n-1: signal n).
pub fn signalfd(mask: u64) -> Result<i32, RestartError> {
    // SAFETY: a sigset_t is plain data; sigaddset writes into the live local.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    for sig in 1..=64 {
        if mask & (1 << (sig - 1)) != 0 {
            // SAFETY: as above.
            unsafe { libc::sigaddset(&mut set, sig) };
        }
    }
    // SAFETY: the set is live; -1 creates a new descriptor.
    fd_or_err(unsafe { libc::signalfd(-1, &set, 0) }, "creating a signalfd")
}

/// A new, empty epoll instance.
pub fn epoll() -> Result<i32, RestartError> {
    // SAFETY: creates a descriptor.
    fd_or_err(unsafe { libc::epoll_create1(0) }, "creating an epoll instance")
}

/// Adds one watch of the program's interest list to the epoll instance at `ep`.
pub fn epoll_add(ep: i32, w: &EpollWatch) -> Result<(), RestartError> {
    // EPOLLERR and EPOLLHUP are always reported; the kernel adds them itself.
    let mut ev = libc::epoll_event { events: w.events, u64: w.data };
    // SAFETY: the event is live; both are the program's descriptors.
    if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, w.fd, &mut ev) } != 0 {
        return Err(sys_err(format!("adding fd {} to the interest list of epoll fd {ep}", w.fd)));
    }
    Ok(())
}

/// Sets a pipe's capacity (`F_SETPIPE_SZ`).
pub fn set_pipe_size(fd: i32, size: u32) -> Result<(), RestartError> {
    // SAFETY: fcntl with an integer argument on our own descriptor.
    if unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, size as libc::c_int) } < 0 {
        return Err(sys_err(format!("setting a pipe's capacity to {size} bytes")));
    }
    Ok(())
}

/// Takes a lock the program held again, without waiting: one held by someone else by now is
/// an error naming it.
pub fn take_lock(l: &FileLock) -> Result<(), RestartError> {
    let what = || {
        let file = std::fs::read_link(format!("/proc/self/fd/{}", l.fd)).map(|p| p.display().to_string()).unwrap_or_default();
        let range = match l.end {
            Some(e) => format!("bytes {}-{e}", l.start),
            None => format!("bytes {}-end", l.start),
        };
        let mode = if l.write { "write" } else { "read" };
        match l.kind {
            LockKind::Flock => format!("taking the program's {mode} flock on fd {} ({file}) again", l.fd),
            LockKind::Posix => format!("taking the program's POSIX {mode} lock on fd {} ({file}, {range}) again", l.fd),
            LockKind::Ofd => format!("taking the program's OFD {mode} lock on fd {} ({file}, {range}) again", l.fd),
            LockKind::Lease => format!("taking the program's {mode} lease on fd {} ({file}) again", l.fd),
        }
    };
    // SAFETY: lock operations on the program's descriptor with a live, fully initialised
    // struct flock.
    let r = unsafe {
        match l.kind {
            LockKind::Flock => libc::flock(l.fd, if l.write { libc::LOCK_EX } else { libc::LOCK_SH } | libc::LOCK_NB),
            LockKind::Posix | LockKind::Ofd => {
                let mut fl: libc::flock = std::mem::zeroed();
                fl.l_type = if l.write { libc::F_WRLCK } else { libc::F_RDLCK } as i16;
                fl.l_whence = libc::SEEK_SET as i16;
                fl.l_start = l.start as libc::off_t;
                fl.l_len = l.end.map_or(0, |e| (e + 1).saturating_sub(l.start)) as libc::off_t;
                let cmd = if l.kind == LockKind::Posix { libc::F_SETLK } else { libc::F_OFD_SETLK };
                libc::fcntl(l.fd, cmd, &fl)
            }
            LockKind::Lease => libc::fcntl(l.fd, libc::F_SETLEASE, if l.write { libc::F_WRLCK } else { libc::F_RDLCK }),
        }
    };
    if r != 0 {
        let err = std::io::Error::last_os_error();
        let held = matches!(err.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES));
        let what = if held { format!("{} (another process holds it now)", what()) } else { what() };
        return Err(RestartError::Sys { what, source: err });
    }
    Ok(())
}

/// Aims the I/O signals of `fd` at this process again (the restorer becomes the program):
/// `owner` the `F_GETOWN_EX` type it had (-1: none), `sig` its `F_SETSIG` signal (0: SIGIO).
pub fn set_fd_owner(fd: i32, owner: i32, sig: i32) -> Result<(), RestartError> {
    // The kernel's pid (this process's own: the program's after the jump).
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::syscall(libc::SYS_getpid) } as i32;
    if owner >= 0 {
        // struct f_owner_ex { int type; pid_t pid; }; F_SETOWN_EX = 15.
        let own = [owner, me];
        // SAFETY: F_SETOWN_EX reads one struct f_owner_ex from the live local.
        if unsafe { libc::fcntl(fd, 15, own.as_ptr()) } != 0 {
            return Err(sys_err(format!("aiming the I/O signals of fd {fd} at the program again (F_SETOWN)")));
        }
    }
    // SAFETY: F_SETSIG (10) takes an integer.
    if sig > 0 && unsafe { libc::fcntl(fd, 10, sig) } != 0 {
        return Err(sys_err(format!("giving fd {fd} its I/O signal {sig} again (F_SETSIG)")));
    }
    Ok(())
}

pub fn set_status_flags(fd: i32, flags: i32) {
    // SAFETY: our fd.
    unsafe { libc::fcntl(fd, libc::F_SETFL, flags) };
}

pub fn close(fd: i32) {
    // SAFETY: our fd, closed once.
    unsafe { libc::close(fd) };
}

/// Closes every fd from `first` up (the restorer's own).
/// Whether `fd` is open in this process.
pub fn is_open(fd: i32) -> bool {
    // SAFETY: F_GETFD on any number is harmless.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

pub fn set_cloexec(fd: i32, on: bool) {
    // SAFETY: F_SETFD on our fd.
    unsafe { libc::fcntl(fd, libc::F_SETFD, if on { libc::FD_CLOEXEC } else { 0 }) };
}

/// Closes every fd from `first` on except those in `keep`.
/// Makes this process the leader of a new session (and of a process group).
pub fn setsid() -> std::io::Result<()> {
    // SAFETY: setsid takes no arguments.
    if unsafe { libc::setsid() } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Puts process `pid` (0: this one) into process group `pgid` (0: its own).
pub fn setpgid(pid: i32, pgid: i32) -> std::io::Result<()> {
    // SAFETY: setpgid with integer arguments.
    if unsafe { libc::setpgid(pid, pgid) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// This process's session id.
pub fn getsid() -> i32 {
    // SAFETY: getsid of this process.
    unsafe { libc::getsid(0) }
}

/// This process's process group id.
pub fn getpgrp() -> i32 {
    // SAFETY: getpgrp takes no arguments.
    unsafe { libc::getpgrp() }
}

/// Forks a child that executes `exe` with `argv` (this process's environment); its pid.
pub fn fork_exec(exe: &std::ffi::CStr, argv: &[CString]) -> Result<i32, ()> {
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // SAFETY: fork of the single-threaded restorer; the child only executes (or exits).
    match unsafe { libc::fork() } {
        0 => {
            // SAFETY: NUL-terminated argv built above; environ is the process's.
            unsafe {
                libc::execv(exe.as_ptr(), ptrs.as_ptr());
                libc::_exit(127)
            }
        }
        -1 => Err(()),
        pid => Ok(pid),
    }
}

/// Forks a child that ends at once with wait status `status` (an exit code, or death by a
/// signal); its pid.
pub fn fork_ended(status: i32) -> Result<i32, ()> {
    // SAFETY: fork of the single-threaded restorer; the child only ends.
    match unsafe { libc::fork() } {
        0 => {
            // SAFETY: the child ends here, by its signal (default action) or its exit code.
            unsafe {
                let sig = status & 0x7f;
                if sig != 0 {
                    let mut set: libc::sigset_t = std::mem::zeroed();
                    libc::sigemptyset(&mut set);
                    libc::sigaddset(&mut set, sig);
                    libc::signal(sig, libc::SIG_DFL);
                    libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
                    libc::raise(sig);
                }
                libc::_exit((status >> 8) & 0xff)
            }
        }
        -1 => Err(()),
        pid => Ok(pid),
    }
}

/// Moves `fd` to the lowest free number from `min` (not close-on-exec); returns it.
pub fn move_fd_above(fd: i32, min: i32) -> Result<i32, RestartError> {
    if fd >= min {
        return Ok(fd);
    }
    // SAFETY: duplicates our own descriptor, then closes the old number.
    let n = unsafe { libc::fcntl(fd, libc::F_DUPFD, min) };
    if n < 0 {
        return Err(sys_err("moving a descriptor of crum above the program's"));
    }
    close(fd);
    Ok(n)
}

pub fn close_from_except(first: i32, keep: &[i32]) {
    let mut keep: Vec<i32> = keep.iter().copied().filter(|&k| k >= first).collect();
    keep.sort_unstable();
    keep.dedup();
    let mut from = first;
    for k in keep {
        if k > from {
            close_range(from, k - 1);
        }
        from = k + 1;
    }
    close_from(from);
}

fn close_range(first: i32, last: i32) {
    // SAFETY: close_range only closes fds of this process.
    let r = unsafe { libc::syscall(libc::SYS_close_range, first as u32, last as u32, 0) };
    if r != 0 {
        for fd in first..=last.min(4095) {
            close(fd);
        }
    }
}

pub fn close_from(first: i32) {
    // SAFETY: close_range(first, ~0, 0) only closes fds of this process.
    let r = unsafe { libc::syscall(libc::SYS_close_range, first as u32, u32::MAX, 0) };
    if r != 0 {
        for fd in first..4096 {
            close(fd);
        }
    }
}

pub fn write_all(fd: i32, mut data: &[u8]) -> Result<(), RestartError> {
    while !data.is_empty() {
        // SAFETY: live slice.
        let n = unsafe { libc::write(fd, data.as_ptr() as *const libc::c_void, data.len()) };
        if n <= 0 {
            return Err(sys_err("refilling a pipe"));
        }
        data = &data[n as usize..];
    }
    Ok(())
}

/// Starts `exe args` as a process that is not a child of this one (the program it becomes):
/// a double fork — an intermediate child forks the process and exits at once, so it is handed
/// to the reaper (init or the nearest subreaper). The program never meets it: no SIGCHLD when
/// it ends, never returned by the program's `wait`/`waitpid(-1)` (whatever flags), never
/// counted as a child. (A single fork with exit signal 0 would not do: `execve` resets the
/// exit signal to SIGCHLD.) It runs in its own process group with stdin on /dev/null and no
/// signal blocked. An exec failure comes back through a close-on-exec pipe, whose end closes
/// when the exec succeeds.
pub fn spawn_detached(exe: &Path, args: &[String]) -> Result<(), RestartError> {
    use std::os::unix::ffi::OsStrExt;
    extern "C" {
        static environ: *const *const libc::c_char;
    }
    let what = || format!("starting {}", exe.display());
    let path = CString::new(exe.as_os_str().as_bytes()).map_err(|_| RestartError::Invalid(format!("{} contains NUL", exe.display())))?;
    let mut owned = vec![path.clone()];
    for a in args {
        owned.push(cstr(a)?);
    }
    let mut argv: Vec<*const libc::c_char> = owned.iter().map(|c| c.as_ptr()).collect();
    argv.push(std::ptr::null());
    let null = open("/dev/null", libc::O_RDONLY)?;
    let mut p = [0i32; 2];
    // SAFETY: pipe2 writes two fds into the live array.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        close(null);
        return Err(sys_err(what()));
    }
    // SAFETY: a raw fork (no atfork handlers). The intermediate and the grandchild call only
    // async-signal-safe functions on memory prepared above (strings, argv, fds) and end in
    // execve or _exit.
    let mid = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD as usize, 0usize, 0usize, 0usize, 0usize) };
    if mid == 0 {
        // SAFETY: see above; only the new processes' own state changes.
        unsafe {
            let pid = libc::syscall(libc::SYS_clone, libc::SIGCHLD as usize, 0usize, 0usize, 0usize, 0usize);
            if pid == 0 {
                libc::setpgid(0, 0);
                libc::dup2(null, 0);
                let mut empty: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut empty);
                libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
                libc::execve(path.as_ptr(), argv.as_ptr(), environ);
            }
            let e: i32 = if pid < 0 { *libc::__errno_location() } else { 0 };
            if pid <= 0 {
                libc::write(p[1], (&e as *const i32).cast(), 4);
            }
            libc::_exit(if pid < 0 { 1 } else { 0 });
        }
    }
    let clone_err = std::io::Error::last_os_error();
    close(p[1]);
    close(null);
    if mid < 0 {
        close(p[0]);
        return Err(RestartError::Sys { what: what(), source: clone_err });
    }
    let mut st = 0;
    // SAFETY: reaps our own intermediate child, which exits at once.
    while unsafe { libc::waitpid(mid as i32, &mut st, 0) } < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {}
    let mut e = [0u8; 4];
    let n = loop {
        // SAFETY: reads into the live buffer from our pipe (EOF once the exec succeeded).
        let n = unsafe { libc::read(p[0], e.as_mut_ptr().cast(), 4) };
        if n >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break n;
        }
    };
    close(p[0]);
    if n == 4 {
        return Err(RestartError::Sys { what: what(), source: std::io::Error::from_raw_os_error(i32::from_ne_bytes(e)) });
    }
    Ok(())
}

/// The agent's control socket under this (the restarted process's) pid.
pub fn control_listener() -> Result<i32, RestartError> {
    use std::os::fd::IntoRawFd;
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let dir = crum_ckpt::control::socket_dir();
    let _ = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir);
    let path = crum_ckpt::control::socket_path_in(&dir, std::process::id());
    let _ = std::fs::remove_file(&path);
    let l = std::os::unix::net::UnixListener::bind(&path)
        .map_err(|e| RestartError::Sys { what: format!("binding the control socket {}", path.display()), source: e })?;
    let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
    Ok(l.into_raw_fd())
}

pub fn chdir(dir: &str) -> Result<(), RestartError> {
    std::env::set_current_dir(dir).map_err(|e| RestartError::Sys { what: format!("changing to {dir}"), source: e })
}

pub fn set_umask(m: u32) {
    // SAFETY: umask cannot fail.
    unsafe { libc::umask(m as libc::mode_t) };
}

pub fn set_rlimits(l: &[(u64, u64)]) {
    for (r, &(cur, max)) in l.iter().enumerate() {
        let v = libc::rlimit { rlim_cur: cur, rlim_max: max };
        // SAFETY: live struct. Raising a hard limit needs privilege: best effort.
        unsafe { libc::setrlimit(r as _, &v) };
    }
}

/// Points the kernel's heap at the program's: its break and where it starts, so that the
/// restored program's `brk` grows and shrinks its own heap. `PR_SET_MM_MAP` needs no privilege
/// (kernels built with CONFIG_CHECKPOINT_RESTORE, as distributions' are); the single-field
/// `PR_SET_MM_*` forms need CAP_SYS_RESOURCE. Returns whether the kernel took it; if not, the
/// restored agent reconciles glibc with the kernel's break (`agent::fix_curbrk`). Called last
/// before entering the program: this process's own allocator must not grow its heap after.
/// `CRUM_TEST_KEEP_BRK` (tests only) leaves the kernel's break alone, as such a kernel would.
pub fn set_brk(start: u64, brk: u64) -> bool {
    if start == 0 || brk < start || std::env::var_os("CRUM_TEST_KEEP_BRK").is_some() {
        return false;
    }
    if let Some(mut fields) = crum_ckpt::capture::mm_layout() {
        fields[4] = start;
        fields[5] = brk;
        // No auxiliary vector, no exe: the restored agent gives the program's back once the
        // restorer's mappings are gone (`crum_ckpt::agent`, after a restart).
        if crum_ckpt::capture::set_mm_map(fields, &[], -1).is_ok() {
            return true;
        }
    }
    // SAFETY: prctl(PR_SET_MM, ...) only changes mm bookkeeping; failure is harmless.
    unsafe {
        libc::prctl(libc::PR_SET_MM, libc::PR_SET_MM_BRK, brk, 0, 0);
        libc::prctl(libc::PR_SET_MM, libc::PR_SET_MM_START_BRK, start, 0, 0);
        libc::prctl(libc::PR_SET_MM, libc::PR_SET_MM_BRK, brk, 0, 0) == 0
    }
}

/// Tells the restored agent where it came from.
/// Fills the agent's restart block: the image path, and after it (NUL-separated, within the
/// same buffer: the block's layout stays that of every image) the directory for new images
/// that `crum restart --dir` names.
/// `lazy`: the lazy restart's done pipe and userfaultfd (`crate::lazy::Handles`), or -1s.
pub fn write_restart_info(addr: u64, old_pid: i32, dir: &Path, fds: [i64; 2], lazy: [i64; 2], new_dir: Option<&Path>) {
    let [channel_fd, job_table_fd] = fds;
    let bytes = dir.as_os_str().as_encoded_bytes();
    let n = bytes.len().min(4096);
    let mut buf = [0u8; 4096];
    buf[..n].copy_from_slice(&bytes[..n]);
    if let Some(d) = new_dir {
        let d = d.as_os_str().as_encoded_bytes();
        if n + 1 + d.len() < buf.len() {
            buf[n + 1..n + 1 + d.len()].copy_from_slice(d);
        }
    }
    // SAFETY: `addr` is the agent's RESTART_INFO inside a region just restored writable
    // (checked by validate: it lies in an image region); it is a plain repr(C) struct.
    unsafe {
        let info = addr as *mut RestartInfo;
        (*info).old_pid = old_pid as i64;
        (*info).path_len = n as u64;
        (*info).channel_fd = channel_fd;
        (*info).job_table_fd = job_table_fd;
        // Only for a lazy restart: the fields are new, and an eager restart of an image
        // whose agent predates them writes nothing past the block it knows.
        if lazy[0] >= 0 {
            (*info).lazy_done_fd = lazy[0];
            (*info).lazy_uffd = lazy[1];
        }
        std::ptr::copy_nonoverlapping(buf.as_ptr(), std::ptr::addr_of_mut!((*info).path) as *mut u8, buf.len());
        (*info).magic = RESTART_MAGIC;
    }
}

pub fn block_signals() {
    // SAFETY: live local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Unregisters the restorer's rseq area (the program registers its own; our TLS goes away).
pub fn unregister_rseq() {
    // SAFETY: reads glibc's exported rseq description and unregisters this thread's area.
    unsafe {
        let o = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr()) as *const isize;
        let s = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr()) as *const u32;
        if o.is_null() || s.is_null() || *s == 0 {
            return;
        }
        let mut fs: u64 = 0;
        libc::syscall(libc::SYS_arch_prctl, 0x1003, &mut fs as *mut u64);
        let area = (fs as i64 + *o as i64) as u64;
        libc::syscall(libc::SYS_rseq, area, (*s).max(32), 1 /* RSEQ_FLAG_UNREGISTER */, 0x5305_3053u32);
    }
}

pub fn set_sigactions(acts: &[SigAction]) -> Result<(), RestartError> {
    for a in acts {
        let k = [a.handler, a.flags, a.restorer, a.mask];
        // SAFETY: kernel sigaction layout; handlers point into the restored program.
        let r = unsafe { libc::syscall(libc::SYS_rt_sigaction, a.sig, k.as_ptr(), std::ptr::null_mut::<u8>(), 8) };
        if r != 0 && a.sig != 32 && a.sig != 33 {
            return Err(sys_err(format!("restoring the handler of signal {}", a.sig)));
        }
    }
    Ok(())
}

/// Re-executes this program (same arguments) with the attempt counter set, and with
/// address-space randomisation on. Returns only on failure.
pub fn reexec(attempt: u32) -> RestartError {
    // SAFETY: personality(0xffffffff) reads the persona; clearing ADDR_NO_RANDOMIZE is
    // what makes a new layout possible.
    unsafe {
        let p = libc::personality(0xffff_ffff);
        if p >= 0 && p & libc::ADDR_NO_RANDOMIZE != 0 {
            libc::personality((p & !libc::ADDR_NO_RANDOMIZE) as libc::c_ulong);
        }
    }
    let args: Vec<CString> = std::env::args_os().filter_map(|a| CString::new(a.as_encoded_bytes()).ok()).collect();
    std::env::set_var(crate::ATTEMPT_VAR, attempt.to_string());
    let exe = c"/proc/self/exe";
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    // SAFETY: NUL-terminated argv; environ is the process's (set_var above updated it).
    unsafe { libc::execv(exe.as_ptr(), argv.as_ptr()) };
    sys_err("re-executing the restorer")
}

/// Switches to the program: main-thread TLS, restart stack, restored-side entry. No return.
pub fn enter(fs: u64, stack: u64, entry: u64, arg: u64) -> ! {
    // SAFETY: fs/stack/entry come from the validated image and point into regions just
    // restored; signals are blocked; the restorer's state is never used again.
    unsafe {
        let f: extern "C" fn(u64) = std::mem::transmute::<u64, extern "C" fn(u64)>(entry);
        crum_ckpt::arch::crum_enter(fs, stack & !15, f, arg)
    }
}

/// `sockaddr` bytes as the kernel takes them.
fn sockaddr_of(b: &[u8]) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain bytes.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let n = b.len().min(std::mem::size_of::<libc::sockaddr_storage>());
    // SAFETY: n bytes fit in the storage; the regions do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), &mut ss as *mut _ as *mut u8, n) };
    (ss, n as libc::socklen_t)
}

fn new_socket(domain: i32, ty: i32, protocol: i32) -> Result<i32, RestartError> {
    // SAFETY: creates a descriptor.
    fd_or_err(unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, protocol) }, "creating a socket")
}

/// Sets each saved option that differs on the new socket (the kernel doubles the buffer
/// sizes it is given, so those are set at half).
pub fn set_socket_options(fd: i32, opts: &[SockOpt]) {
    for o in opts {
        if o.level == libc::SOL_SOCKET && o.name == libc::SO_ATTACH_FILTER {
            // A classic BPF filter: its instructions, attached again.
            let prog = libc::sock_fprog { len: (o.value.len() / 8) as u16, filter: o.value.as_ptr() as *mut libc::sock_filter };
            // SAFETY: the program points at the live instructions for the call.
            unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_ATTACH_FILTER,
                    &prog as *const libc::sock_fprog as *const libc::c_void,
                    std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
                )
            };
            continue;
        }
        if crum_ckpt::sockets::opt_bytes(fd, o.level, o.name).as_deref() == Some(&o.value[..]) {
            continue;
        }
        let mut v = o.value.clone();
        if o.level == libc::SOL_SOCKET && matches!(o.name, libc::SO_RCVBUF | libc::SO_SNDBUF) && v.len() == 4 {
            let n = i32::from_ne_bytes([v[0], v[1], v[2], v[3]]) / 2;
            v = n.to_ne_bytes().to_vec();
        }
        // SAFETY: setsockopt reads `len` bytes of the live buffer.
        unsafe { libc::setsockopt(fd, o.level, o.name, v.as_ptr() as *const libc::c_void, v.len() as libc::socklen_t) };
    }
}

/// Runs `f` in the program's working directory when `addr` is a relative Unix path (bound
/// or connected to relative to it), else where we are.
fn in_cwd_for<T>(addr: &[u8], cwd: &str, f: impl FnOnce() -> T) -> T {
    let relative = addr.len() > 2
        && u16::from_ne_bytes([addr[0], addr[1]]) as i32 == libc::AF_UNIX
        && addr[2] != 0
        && addr[2] != b'/';
    if !relative {
        return f();
    }
    // SAFETY: opens the current directory to come back to it; chdir/fchdir on live strings
    // and our own descriptor.
    unsafe {
        let here = libc::open(c".".as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC);
        let Ok(c) = CString::new(cwd) else { return f() };
        libc::chdir(c.as_ptr());
        let r = f();
        if here >= 0 {
            libc::fchdir(here);
            libc::close(here);
        }
        r
    }
}

/// Binds `fd` to `addr`. A Unix path left by the checkpointed program (its socket file
/// outlives it) is removed first when nobody answers on it.
fn bind_socket(fd: i32, s: &SocketState, cwd: &str) -> Result<(), RestartError> {
    let what = || format!("binding a {} again", s.describe());
    in_cwd_for(&s.local, cwd, || {
        let (ss, len) = sockaddr_of(&s.local);
        let p = &ss as *const libc::sockaddr_storage as *const libc::sockaddr;
        // SAFETY: bind reads `len` bytes of the live storage.
        if unsafe { libc::bind(fd, p, len) } == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        let path_socket = s.domain == libc::AF_UNIX && s.local.len() > 2 && s.local[2] != 0;
        if err.raw_os_error() != Some(libc::EADDRINUSE) || !path_socket {
            return Err(RestartError::Sys { what: what(), source: err });
        }
        // Stale (nobody listening or receiving): connect is refused.
        let probe = new_socket(libc::AF_UNIX, s.ty, 0)?;
        // SAFETY: connect reads `len` bytes of the live storage.
        let alive = unsafe { libc::connect(probe, p, len) } == 0
            || std::io::Error::last_os_error().raw_os_error() != Some(libc::ECONNREFUSED);
        close(probe);
        if alive {
            return Err(RestartError::Sys {
                what: format!("{} (another process uses that address now)", what()),
                source: err,
            });
        }
        let path: Vec<u8> = s.local[2..].split(|&c| c == 0).next().unwrap_or(&[]).to_vec();
        let c = CString::new(path).map_err(|_| RestartError::Invalid("socket path contains NUL".into()))?;
        // SAFETY: unlink of a NUL-terminated path; bind as above.
        if unsafe { libc::unlink(c.as_ptr()) } != 0 || unsafe { libc::bind(fd, p, len) } != 0 {
            return Err(sys_err(what()));
        }
        Ok(())
    })
}

/// A socket made again as `s` describes, except pairs ([`socketpair`]): bound, listening,
/// or closed with the bytes that had arrived. A connected datagram socket is connected
/// later by [`connect_socket`] (its peer may be a socket of the program not made yet).
pub fn socket(s: &SocketState, cwd: &str) -> Result<i32, RestartError> {
    if let SocketRole::Closed { queued } = &s.role {
        let (a, b) = socketpair(s.ty)?;
        if !queued.is_empty() {
            // A TCP connection's queue can be larger than a Unix socket's default.
            let size = (queued.len() + (64 << 10)).min(i32::MAX as usize) as libc::c_int;
            // SAFETY: setsockopt reads one int (SO_SNDBUFFORCE: past the system's maximum,
            // where permitted).
            unsafe {
                let p = &size as *const libc::c_int as *const libc::c_void;
                if libc::setsockopt(b, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, p, 4) != 0 {
                    libc::setsockopt(b, libc::SOL_SOCKET, libc::SO_SNDBUF, p, 4);
                }
            }
            send_messages(b, std::slice::from_ref(queued))?;
        }
        close(b);
        return Ok(a);
    }
    let fd = new_socket(s.domain, s.ty, s.protocol)?;
    set_socket_options(fd, &s.options);
    if !s.local.is_empty() {
        let listening = matches!(s.role, SocketRole::Listening { .. });
        let reuse = crum_ckpt::sockets::opt_bytes(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR);
        let one: libc::c_int = 1;
        if listening && s.domain != libc::AF_UNIX {
            // Connections of the checkpointed program may still hold the port (TIME_WAIT).
            // SAFETY: setsockopt reads one int.
            unsafe {
                libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, &one as *const _ as *const libc::c_void, 4)
            };
        }
        bind_socket(fd, s, cwd)?;
        if let Some(v) = reuse.filter(|_| listening && s.domain != libc::AF_UNIX) {
            // SAFETY: as above, the program's own value back.
            unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, v.as_ptr() as *const libc::c_void, v.len() as u32) };
        }
    }
    if let SocketRole::Listening { backlog } = s.role {
        // SAFETY: our socket.
        if unsafe { libc::listen(fd, backlog.min(i32::MAX as u32) as i32) } != 0 {
            return Err(sys_err(format!("listening again on a {}", s.describe())));
        }
    }
    Ok(fd)
}

/// Connects a datagram socket to its peer again, then shuts it down as it was; a refusal is
/// a warning (it stays unconnected: the program's sends fail as if the peer had gone).
/// `patience`: how long a Unix peer that is not there yet (`ENOENT`, `ECONNREFUSED`) is
/// waited for — in a job, another process's restorer may not have bound it yet.
pub fn connect_socket(fd: i32, s: &SocketState, cwd: &str, patience: std::time::Duration) {
    in_cwd_for(&s.peer, cwd, || {
        let (ss, len) = sockaddr_of(&s.peer);
        let t0 = std::time::Instant::now();
        loop {
            // SAFETY: connect reads `len` bytes of the live storage.
            if unsafe { libc::connect(fd, &ss as *const libc::sockaddr_storage as *const libc::sockaddr, len) } == 0 {
                shutdown(fd, s.shutdown);
                return;
            }
            let e = std::io::Error::last_os_error().raw_os_error();
            if s.domain != libc::AF_UNIX || !matches!(e, Some(libc::ENOENT | libc::ECONNREFUSED)) || t0.elapsed() >= patience {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        {
            eprintln!(
                "crum: warning: fd {fd} ({}) could not be connected again ({}): it is not connected now",
                s.describe(),
                std::io::Error::last_os_error()
            );
        }
    })
}

/// Sends the datagrams that waited in the socket at `fd` (described by `to`, bound to its
/// name) to it again, in order, each from a socket with its sender's name: the program's own
/// socket of that name (`named`: name, fd), a socket bound to the abstract name for the
/// moment, or an unnamed one.
pub fn send_datagrams(fd: i32, to: &SocketState, cwd: &str, queued: &[(Vec<u8>, Vec<u8>)], named: &[(Vec<u8>, i32)]) -> Result<(), RestartError> {
    let what = || format!("putting a datagram that waited in fd {fd} ({}) back", to.describe());
    for (from, data) in queued {
        let own = named.iter().find(|(n, _)| crum_ckpt::sockets::sun_eq(n, from)).map(|&(_, f)| f);
        let sender = match own {
            Some(f) => f,
            None => {
                let t = new_socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0)?;
                if from.len() > 2 {
                    let (ss, len) = sockaddr_of(from);
                    // SAFETY: bind reads `len` bytes of the live storage.
                    if unsafe { libc::bind(t, &ss as *const libc::sockaddr_storage as *const libc::sockaddr, len) } != 0 {
                        let e = std::io::Error::last_os_error();
                        close(t);
                        return Err(RestartError::Sys { what: format!("{} (binding its sender's name again)", what()), source: e });
                    }
                }
                t
            }
        };
        let r = in_cwd_for(&to.local, cwd, || {
            let (ss, len) = sockaddr_of(&to.local);
            // SAFETY: sendto reads the live buffer and `len` bytes of the live storage.
            unsafe {
                libc::sendto(
                    sender,
                    data.as_ptr() as *const libc::c_void,
                    data.len(),
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                    &ss as *const libc::sockaddr_storage as *const libc::sockaddr,
                    len,
                )
            }
        });
        let e = std::io::Error::last_os_error();
        if own.is_none() {
            close(sender);
        }
        if r != data.len() as isize {
            return Err(RestartError::Sys { what: what(), source: e });
        }
    }
    Ok(())
}

/// A connected pair of Unix sockets of type `ty`.
pub fn socketpair(ty: i32) -> Result<(i32, i32), RestartError> {
    let mut p = [0i32; 2];
    // SAFETY: socketpair writes two fds into the live array.
    if unsafe { libc::socketpair(libc::AF_UNIX, ty | libc::SOCK_CLOEXEC, 0, p.as_mut_ptr()) } != 0 {
        return Err(sys_err("creating a socket pair"));
    }
    Ok((p[0], p[1]))
}

/// Sends each message through `fd` (a socket pair's other end) without waiting.
pub fn send_messages(fd: i32, msgs: &[Vec<u8>]) -> Result<(), RestartError> {
    for m in msgs {
        // SAFETY: send from a live buffer.
        let n = unsafe { libc::send(fd, m.as_ptr() as *const libc::c_void, m.len(), libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
        if n != m.len() as isize {
            return Err(sys_err("putting the data that waited in a socket back"));
        }
    }
    Ok(())
}

/// Shuts a socket down as it was (bit 0: receiving, bit 1: sending).
pub fn shutdown(fd: i32, bits: u8) {
    let how = match bits & 3 {
        1 => libc::SHUT_RD,
        2 => libc::SHUT_WR,
        3 => libc::SHUT_RDWR,
        _ => return,
    };
    // SAFETY: our socket.
    unsafe { libc::shutdown(fd, how) };
}

/// `prctl(PR_TIMER_CREATE_RESTORE_IDS, …)` (Linux 6.17): `timer_create` takes the id it is
/// given.
const PR_TIMER_CREATE_RESTORE_IDS: i32 = 77;

/// Makes the program's POSIX timers again with their ids (given where the kernel takes them,
/// else reached by creating timers in order, as the kernel hands ids out one after another,
/// and deleting the ones in between), clocks, notifications and the time that was left.
pub fn posix_timers(timers: &[PosixTimer]) -> Result<(), RestartError> {
    if timers.is_empty() {
        return Ok(());
    }
    // SAFETY: prctl with integer arguments.
    let by_id = unsafe { libc::prctl(PR_TIMER_CREATE_RESTORE_IDS, 1, 0, 0, 0) } == 0;
    let tid = crum_ckpt::threads::gettid();
    for t in timers {
        // SAFETY: sigevent is plain data.
        let mut ev: libc::sigevent = unsafe { std::mem::zeroed() };
        ev.sigev_notify = t.notify;
        ev.sigev_signo = t.signo;
        ev.sigev_value = libc::sigval { sival_ptr: t.value as usize as *mut libc::c_void };
        if t.notify & libc::SIGEV_THREAD_ID != 0 {
            // The main thread: this one.
            ev.sigev_notify_thread_id = tid;
        }
        let create = |id: &mut i32| {
            // SAFETY: the kernel reads the live sigevent and writes the id.
            unsafe { libc::syscall(libc::SYS_timer_create, t.clock, &ev as *const libc::sigevent, id as *mut i32) == 0 }
        };
        let what = || format!("making POSIX timer {} again", t.id);
        let mut id = t.id;
        if by_id {
            if !create(&mut id) || id != t.id {
                return Err(sys_err(what()));
            }
        } else {
            let mut extra = Vec::new();
            loop {
                if !create(&mut id) {
                    return Err(sys_err(what()));
                }
                if id == t.id {
                    break;
                }
                extra.push(id);
                if id > t.id || extra.len() > 1 << 16 {
                    return Err(RestartError::Invalid(format!(
                        "{}: this kernel hands out timer ids this crum cannot steer (got {id})",
                        what()
                    )));
                }
            }
            for e in extra {
                // SAFETY: deletes a timer made just above.
                unsafe { libc::syscall(libc::SYS_timer_delete, e) };
            }
        }
        let ts = |ns: u64| libc::timespec { tv_sec: (ns / 1_000_000_000) as i64, tv_nsec: (ns % 1_000_000_000) as i64 };
        // A zero value leaves it disarmed (with its interval, as the kernel keeps it).
        let spec = libc::itimerspec { it_interval: ts(t.interval_ns), it_value: ts(t.value_ns) };
        // SAFETY: the kernel reads the live itimerspec.
        if unsafe { libc::syscall(libc::SYS_timer_settime, t.id, 0, &spec as *const libc::itimerspec, std::ptr::null_mut::<libc::itimerspec>()) } != 0 {
            return Err(sys_err(format!("arming POSIX timer {} again", t.id)));
        }
    }
    if by_id {
        // SAFETY: as above.
        unsafe { libc::prctl(PR_TIMER_CREATE_RESTORE_IDS, 0, 0, 0, 0) };
    }
    Ok(())
}

/// Gives the restored memory its advice and locks again (`madvise`, `mlock`; after the
/// program's resource limits are back, for `RLIMIT_MEMLOCK`). Advice the kernel does not
/// take (KSM or THP not built in) changes nothing the program can see but its flags; a lock
/// refused is a warning: the memory is there, only not locked.
/// Installs the program's guard regions again (`MADV_GUARD_INSTALL`; the image has no bytes
/// for them, the restorer mapped zeros). A kernel without guard regions (before 6.13) is a
/// warning naming each: reading or writing there no longer faults.
pub fn install_guards(guards: &[(u64, u64)]) {
    for &(start, end) in guards {
        // SAFETY: a range of the program's memory mapped by this restorer, whose bytes the
        // program could not read or write anyway.
        if unsafe { libc::madvise(start as *mut libc::c_void, (end - start) as usize, crum_ckpt::agent::MADV_GUARD_INSTALL) } != 0 {
            eprintln!(
                "crum: warning: guard region {start:#x}-{end:#x} could not be installed again ({}): accesses there no longer fault",
                std::io::Error::last_os_error()
            );
        }
    }
}

pub fn apply_advice(advice: &[(u64, u64, u32)]) {
    for &(start, end, bits) in advice {
        for (i, (name, how)) in crum_ckpt::state::ADVICE.iter().enumerate() {
            // (MAP_NORESERVE was given when the region was mapped.)
            if bits & (1 << i) == 0 || matches!(*how, crum_ckpt::state::ADVICE_NORESERVE | crum_ckpt::state::ADVICE_DROPPABLE) {
                continue;
            }
            let (p, len) = (start as *mut libc::c_void, (end - start) as usize);
            // SAFETY: a range of the program's memory mapped by this restorer; advice and
            // locks change no bytes.
            let r = unsafe {
                match *how {
                    -1 => libc::mlock(p, len),
                    -2 => libc::syscall(libc::SYS_mlock2, p, len, libc::MLOCK_ONFAULT) as i32,
                    h => libc::madvise(p, len, h),
                }
            };
            if r != 0 && *how < 0 {
                eprintln!(
                    "crum: warning: memory {start:#x}-{end:#x} was locked ({name}) and could not be locked again ({}): it may be swapped out",
                    std::io::Error::last_os_error()
                );
            }
        }
    }
}

/// Moves `fd` to a number >= base, not close-on-exec (a job's restorers inherit it).
pub fn inherited_high(fd: i32, base: i32) -> Result<i32, RestartError> {
    let hi = move_high(fd, base)?;
    // SAFETY: our own descriptor.
    unsafe { libc::fcntl(hi, libc::F_SETFD, 0) };
    Ok(hi)
}

/// The two ends of a connection between processes of a job, made again: `a` and `b` as
/// they were (each with the directory its process was in, for relative Unix paths). A TCP
/// connection, or a Unix stream or seqpacket connection whose ends had a name, goes through
/// a listener bound to `a`'s address, from a socket bound to `b`'s (if it had one), so
/// that both ends have their addresses again; other Unix ones are a socket pair.
pub fn job_connection(a: &SocketState, a_cwd: &str, b: &SocketState, b_cwd: &str) -> Result<(i32, i32), RestartError> {
    let unix = a.domain == libc::AF_UNIX;
    let named = |s: &SocketState| crum_ckpt::sockets::is_named(s.domain, &s.local);
    if unix && (a.ty == libc::SOCK_DGRAM || (!named(a) && !named(b))) {
        return socketpair(a.ty);
    }
    // The end with a name listens (a Unix client's end usually has none).
    let (server, s_cwd, client, c_cwd, swapped) =
        if unix && !named(a) { (b, b_cwd, a, a_cwd, true) } else { (a, a_cwd, b, b_cwd, false) };
    let what = || format!("connecting a {} again", server.describe());
    let one: libc::c_int = 1;
    let reuse = |fd: i32| {
        // SAFETY: setsockopt reads one int.
        unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, &one as *const _ as *const libc::c_void, 4) };
    };
    let listener = new_socket(server.domain, server.ty, server.protocol)?;
    reuse(listener);
    let r = (|| {
        let bare = |s: &SocketState| SocketState { role: SocketRole::Unconnected, options: Vec::new(), ..s.clone() };
        bind_socket(listener, &bare(server), s_cwd)?;
        // SAFETY: our socket.
        if unsafe { libc::listen(listener, 1) } != 0 {
            return Err(sys_err(what()));
        }
        let client_fd = new_socket(client.domain, client.ty, client.protocol)?;
        let conn = (|| {
            if named(client) {
                reuse(client_fd);
                match bind_socket(client_fd, &bare(client), c_cwd) {
                    Err(RestartError::Sys { source, .. })
                        if !unix && source.raw_os_error() == Some(libc::EADDRINUSE) =>
                    {
                        // The dead job's end of this connection still holds the port
                        // (TIME_WAIT) and did not allow reuse: another port, said.
                        eprintln!(
                            "crum: warning: the {} of the job comes back from another local port: its port is \
                             still held by the checkpointed job's connection (TIME_WAIT)",
                            client.describe()
                        );
                    }
                    r => r?,
                }
            }
            let ok = in_cwd_for(&server.local, s_cwd, || {
                let (ss, len) = sockaddr_of(&server.local);
                // SAFETY: connect reads `len` bytes of the live storage.
                unsafe { libc::connect(client_fd, &ss as *const libc::sockaddr_storage as *const libc::sockaddr, len) == 0 }
            });
            if !ok {
                return Err(sys_err(format!("{} from {}", what(), client.describe())));
            }
            // SAFETY: accept on our listening socket; the peer's address is not asked for.
            let acc = unsafe { libc::accept4(listener, std::ptr::null_mut(), std::ptr::null_mut(), libc::SOCK_CLOEXEC) };
            fd_or_err(acc, "accepting a connection of the job again")
        })();
        match conn {
            Ok(acc) => Ok((acc, client_fd)),
            Err(e) => {
                close(client_fd);
                Err(e)
            }
        }
    })();
    close(listener);
    let (s_end, c_end) = r?;
    Ok(if swapped { (c_end, s_end) } else { (s_end, c_end) })
}

/// Puts a stream's bytes back through `fd` (the other end of the connection they waited
/// at): its send buffer is made large enough for them first.
pub fn send_stream(fd: i32, data: &[u8]) -> Result<(), RestartError> {
    if data.is_empty() {
        return Ok(());
    }
    let size = (data.len() + (64 << 10)).min(i32::MAX as usize) as libc::c_int;
    // SAFETY: setsockopt reads one int (SO_SNDBUFFORCE: past the system's maximum, where
    // permitted).
    unsafe {
        let p = &size as *const libc::c_int as *const libc::c_void;
        if libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, p, 4) != 0 {
            libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, p, 4);
        }
    }
    let mut off = 0;
    while off < data.len() {
        // SAFETY: send from a live buffer.
        let n = unsafe {
            libc::send(fd, data[off..].as_ptr() as *const libc::c_void, data.len() - off, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
        };
        if n <= 0 {
            return Err(sys_err(format!("putting the {} bytes that waited in a socket back ({off} fit)", data.len())));
        }
        off += n as usize;
    }
    Ok(())
}

/// A memfd named `name` of `size` bytes (close-on-exec).
pub fn memfd(name: &str, size: u64) -> Result<i32, RestartError> {
    let c = cstr(name)?;
    // SAFETY: NUL-terminated name.
    let fd = fd_or_err(unsafe { libc::memfd_create(c.as_ptr(), libc::MFD_CLOEXEC) }, "creating shared memory")?;
    // SAFETY: our descriptor.
    if unsafe { libc::ftruncate(fd, size as libc::off_t) } != 0 {
        close(fd);
        return Err(sys_err(format!("sizing shared memory of {size} bytes")));
    }
    Ok(fd)
}

/// Maps `size` bytes of `fd` shared and writable, anywhere, for `f`, then unmaps them.
pub fn with_shared_map(
    fd: i32,
    size: u64,
    f: impl FnOnce(&mut [u8]) -> Result<(), RestartError>,
) -> Result<(), RestartError> {
    // SAFETY: a new mapping at an address the kernel picks.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), size as usize, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
    };
    if p == libc::MAP_FAILED {
        return Err(sys_err(format!("mapping shared memory of {size} bytes")));
    }
    // SAFETY: the mapping just made: `size` bytes, ours alone until unmapped below.
    let r = f(unsafe { std::slice::from_raw_parts_mut(p as *mut u8, size as usize) });
    // SAFETY: our own mapping, unmapped once.
    unsafe { libc::munmap(p, size as usize) };
    r
}
