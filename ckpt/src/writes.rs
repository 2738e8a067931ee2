//! Files the program opens for writing after a checkpoint, so that a restart from that image
//! rolls them back: a program that does `fopen("a")`, writes and `fclose`s at every step
//! would otherwise find the lines it wrote after the checkpoint twice in its file after a
//! restart. (Files it holds open at the checkpoint are in the image, with their sizes, and
//! are cut back by the restorer anyway.)
//!
//! `libcrum_libc.so`'s `open`/`openat`/`creat`/`fopen`/`freopen` wrappers call
//! [`note_open`] (through libcrum's `crum_note_open`) after every successful open for
//! writing. The first open of a regular file after a checkpoint appends one line to the log
//! of that image, `<dir>/.writes-<image name>` next to it: device, inode, size at that open
//! (its size at the checkpoint: the program had it closed since) and whether that open
//! created it, then the path. A restart ([`roll_back`]) cuts each file still there with the
//! same identity back to the smallest size logged, and removes the files the program created
//! after the checkpoint. Opens by crum's own threads and by other processes (a forked child,
//! the image writer) are not logged.
//!
//! From the moment an image is cut (its writer forked, the program's threads still stopped)
//! until it is complete, opens go to both the previous image's log and the new one's
//! ([`begin_pending`]): a failed image ([`abort`]) leaves the previous one's log complete.
//!
//! Not rolled back (named in docs/checkpoint.md): files replaced by rename, files written
//! through shared mappings only, content an `O_TRUNC` open after the checkpoint destroyed
//! (the file is cut to what the program wrote before; a program that truncates a file
//! writes it again), and writes of other programs.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::ffi::CString;
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering::SeqCst};

/// Name prefix of the logs, in the image's parent directory.
pub const PREFIX: &str = ".writes-";

/// The log of the image the program's state comes from (-1: none).
static LOG: AtomicI32 = AtomicI32::new(-1);
/// The log of the image being written (-1: none).
static PENDING: AtomicI32 = AtomicI32::new(-1);
/// The process whose opens are logged (a forked child or the image writer is another).
static OWNER: AtomicI32 = AtomicI32::new(0);
/// Files already logged since the logs last changed (hash of device and inode; 0: free).
static SEEN: [AtomicU64; 1024] = [const { AtomicU64::new(0) }; 1024];

thread_local! {
    /// Set on crum's own threads: their opens are crum's (images, logs, locks).
    static CRUM_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as one of crum's.
pub fn mark_crum_thread() {
    CRUM_THREAD.with(|c| c.set(true));
}

/// Whether the calling thread is one of crum's (plain thread-local read: callable from a
/// signal handler).
pub fn is_crum_thread() -> bool {
    CRUM_THREAD.try_with(|c| c.get()).unwrap_or(false)
}

/// While it lives, the calling thread's opens are crum's ([`crate::agent::checkpoint_now`]
/// called from a program's thread).
pub struct CrumScope(bool);

impl CrumScope {
    pub fn enter() -> CrumScope {
        CrumScope(CRUM_THREAD.with(|c| c.replace(true)))
    }
}

impl Drop for CrumScope {
    fn drop(&mut self) {
        let was = self.0;
        let _ = CRUM_THREAD.try_with(|c| c.set(was));
    }
}

/// The log next to `image`.
pub fn log_path(image: &Path) -> PathBuf {
    let name = image.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    image.with_file_name(format!("{PREFIX}{name}"))
}

fn open_log(image: &Path) -> Result<i32, std::io::Error> {
    let p = CString::new(log_path(image).as_os_str().as_bytes()).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // The system call itself: the C library's `open` is the program's, logged (`note_open`).
    // SAFETY: a NUL-terminated path; the descriptor is ours.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            p.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC,
            0o600,
        )
    } as i32;
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(crate::highfd::move_high_raw(fd))
}

/// The logs' descriptors, which a checkpoint neither saves nor restores. (Not through
/// `agent::exclude_fd`: the logs change while the agent allocates from its arena.)
pub fn own_fds() -> [i32; 2] {
    [LOG.load(SeqCst), PENDING.load(SeqCst)]
}

fn close_log(fd: i32) {
    if fd >= 0 {
        // SAFETY: our own descriptor, closed once (swapped out of its atomic).
        unsafe { libc::close(fd) };
    }
}

fn forget_seen() {
    for s in &SEEN {
        s.store(0, SeqCst);
    }
}

fn set_owner() {
    OWNER.store(crate::threads::real_pid(), SeqCst);
}

/// The image `image` is being written (its writer forked; the program's threads are still
/// stopped): opens from now on are logged for it too. An error (to report once the threads
/// run) means that files written after this image cannot be rolled back.
pub fn begin_pending(image: &Path) -> Result<(), String> {
    set_owner();
    forget_seen();
    match open_log(image) {
        Ok(fd) => {
            close_log(PENDING.swap(fd, SeqCst));
            Ok(())
        }
        Err(e) => Err(format!(
            "cannot open {} ({e}): files the program writes after this checkpoint are not rolled back by a restart",
            log_path(image).display()
        )),
    }
}

/// The image being written is complete: its log is the one from now on.
pub fn commit() {
    let p = PENDING.swap(-1, SeqCst);
    if p >= 0 {
        close_log(LOG.swap(p, SeqCst));
    }
}

/// The image being written failed: its log goes with it.
pub fn abort(image: &Path) {
    close_log(PENDING.swap(-1, SeqCst));
    let _ = std::fs::remove_file(log_path(image));
}

/// In a process restarted from `image` (its threads still stopped): files written from now
/// on are logged for `image`. An error (to report once the threads run) means that writes
/// after this restart cannot be rolled back by another restart from `image`.
pub fn restarted(image: &Path) -> Result<(), String> {
    set_owner();
    forget_seen();
    // The numbers are the imaged process's: not open here (crum's descriptors are not
    // saved), perhaps reused by now. Forgotten, not closed.
    LOG.store(-1, SeqCst);
    PENDING.store(-1, SeqCst);
    match open_log(image) {
        Ok(fd) => {
            LOG.store(fd, SeqCst);
            Ok(())
        }
        Err(e) => {
            Err(format!(
                "cannot open {} ({e}): files the program writes from now on are not rolled back by another restart \
                 from this image",
                log_path(image).display()
            ))
        }
    }
}

/// After a successful open of `fd` for writing by the program; `created`: the open created
/// the file. Allocates nothing and takes no lock (the wrappers may run in signal handlers);
/// `errno` is the caller's to keep.
pub fn note_open(fd: i32, created: bool) {
    let (log, pending) = (LOG.load(SeqCst), PENDING.load(SeqCst));
    if log < 0 && pending < 0 {
        return;
    }
    if OWNER.load(SeqCst) != crate::threads::real_pid() || CRUM_THREAD.try_with(|c| c.get()).unwrap_or(true) {
        return;
    }
    // SAFETY: a plain C struct, all zeroes valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into a live local.
    if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return;
    }
    let mut path = [0u8; 4096];
    let mut name = [0u8; 32];
    let n = {
        let mut w = &mut name[..];
        let _ = write!(w, "/proc/self/fd/{fd}\0");
        32 - w.len()
    };
    // SAFETY: a NUL-terminated name in `name[..n]`, a live output buffer.
    let len = unsafe { libc::readlink(name[..n].as_ptr().cast(), path.as_mut_ptr().cast(), path.len()) };
    if len <= 0 || len as usize >= path.len() || path[0] != b'/' {
        return;
    }
    let path = &path[..len as usize];
    if path.ends_with(b" (deleted)") {
        return;
    }
    // Logged once per file and path. Inode numbers are reused: a file created and removed
    // after the checkpoint and the next file created may have the same one, and the second
    // must be logged too (or a restart would not remove it). An open that created the file is
    // always logged.
    let mut key = st.st_dev.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ st.st_ino;
    for &b in path {
        key = (key ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    let key = key.max(1);
    let start = (key as usize) % SEEN.len();
    let mut fresh = true;
    for i in 0..16 {
        let slot = &SEEN[(start + i) % SEEN.len()];
        match slot.compare_exchange(0, key, SeqCst, SeqCst) {
            Ok(_) => break,
            Err(k) if k == key => {
                fresh = false;
                break;
            }
            Err(_) => {}
        }
    }
    if !fresh && !created {
        return;
    }
    let mut line = [0u8; 4096 + 128];
    let total = line.len();
    let used = {
        let mut w = &mut line[..];
        if write!(w, "{} {} {} {} {} ", st.st_dev, st.st_ino, st.st_size, created as u8, path.len()).is_err()
            || w.write_all(path).is_err()
            || w.write_all(b"\n").is_err()
        {
            return;
        }
        total - w.len()
    };
    for fd in [log, pending] {
        if fd >= 0 {
            // SAFETY: one write of a live buffer to our own O_APPEND log.
            unsafe { libc::write(fd, line.as_ptr().cast(), used) };
        }
    }
}

/// Before an open that may create a file that does not exist (`dirfd` and `path` as the
/// program gave them): the log says, ahead of the open, that the program is creating that
/// path, and when. A program killed between the open and [`note_open`] leaves a file that
/// no confirmed entry names; a restart removes it if it was born after that moment
/// ([`roll_back`]). Allocates nothing and takes no lock; `errno` is the caller's to keep.
pub fn note_create(dirfd: i32, path: &std::ffi::CStr) {
    let (log, pending) = (LOG.load(SeqCst), PENDING.load(SeqCst));
    if log < 0 && pending < 0 {
        return;
    }
    if OWNER.load(SeqCst) != crate::threads::real_pid() || CRUM_THREAD.try_with(|c| c.get()).unwrap_or(true) {
        return;
    }
    let rel = path.to_bytes();
    if rel.is_empty() {
        return;
    }
    // The absolute path: the program's own, or the directory's (cwd or `dirfd`) joined to it.
    let mut abs = [0u8; 4096];
    let len = if rel[0] == b'/' {
        if rel.len() >= abs.len() {
            return;
        }
        abs[..rel.len()].copy_from_slice(rel);
        rel.len()
    } else {
        let mut name = [0u8; 32];
        let n = {
            let mut w = &mut name[..];
            let _ = if dirfd == libc::AT_FDCWD { write!(w, "/proc/self/cwd\0") } else { write!(w, "/proc/self/fd/{dirfd}\0") };
            32 - w.len()
        };
        // SAFETY: a NUL-terminated name in `name[..n]`, a live output buffer.
        let d = unsafe { libc::readlink(name[..n].as_ptr().cast(), abs.as_mut_ptr().cast(), abs.len()) };
        if d <= 0 || abs[0] != b'/' {
            return;
        }
        let d = d as usize;
        if d + 1 + rel.len() >= abs.len() {
            return;
        }
        abs[d] = b'/';
        abs[d + 1..d + 1 + rel.len()].copy_from_slice(rel);
        d + 1 + rel.len()
    };
    // The coarse clock: file times are taken from it (or later), so a file the open creates
    // is born at or after this moment.
    // SAFETY: a plain C struct, all zeroes valid.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime into a live local.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut t) } != 0 {
        return;
    }
    let mut line = [0u8; 4096 + 96];
    let total = line.len();
    let used = {
        let mut w = &mut line[..];
        if write!(w, "c {} {} {} ", t.tv_sec, t.tv_nsec, len).is_err()
            || w.write_all(&abs[..len]).is_err()
            || w.write_all(b"\n").is_err()
        {
            return;
        }
        total - w.len()
    };
    for fd in [log, pending] {
        if fd >= 0 {
            // SAFETY: one write of a live buffer to our own O_APPEND log.
            unsafe { libc::write(fd, line.as_ptr().cast(), used) };
        }
    }
}

/// One line of a log.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub created: bool,
    pub path: PathBuf,
}

/// A path the program was about to create ([`note_create`]), and when (Unix seconds and
/// nanoseconds).
#[derive(Debug, Clone, PartialEq)]
pub struct Creating {
    pub at: (i64, i64),
    pub path: PathBuf,
}

/// One line of a log.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    Opened(Entry),
    Creating(Creating),
}

/// Reads a log. Lines that do not parse (a torn last line) are skipped; the log is not
/// trusted beyond its syntax (the restorer checks each file's identity, or birth time).
pub fn parse(bytes: &[u8]) -> Vec<Line> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let Some(e) = parse_one(&mut rest) else {
            // Skip to the next line.
            match rest.iter().position(|&b| b == b'\n') {
                Some(i) => rest = &rest[i + 1..],
                None => break,
            }
            continue;
        };
        out.push(e);
    }
    out
}

fn parse_one(rest: &mut &[u8]) -> Option<Line> {
    if let Some(mut s) = rest.strip_prefix(b"c ") {
        let mut nums = [0i64; 3];
        for n in nums.iter_mut() {
            let i = s.iter().position(|&b| b == b' ')?;
            if i == 0 || i > 20 {
                return None;
            }
            *n = std::str::from_utf8(&s[..i]).ok()?.parse().ok()?;
            s = &s[i + 1..];
        }
        let len = usize::try_from(nums[2]).ok()?;
        if len == 0 || len > 4096 || s.len() < len + 1 || s[len] != b'\n' || s[0] != b'/' {
            return None;
        }
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(&s[..len]));
        *rest = &s[len + 1..];
        return Some(Line::Creating(Creating { at: (nums[0], nums[1]), path }));
    }
    let mut nums = [0u64; 5];
    let mut s = *rest;
    for n in nums.iter_mut() {
        let i = s.iter().position(|&b| b == b' ')?;
        if i == 0 || i > 20 {
            return None;
        }
        *n = std::str::from_utf8(&s[..i]).ok()?.parse().ok()?;
        s = &s[i + 1..];
    }
    let len = nums[4] as usize;
    if len == 0 || len > 4096 || s.len() < len + 1 || s[len] != b'\n' || nums[3] > 1 {
        return None;
    }
    let path = PathBuf::from(std::ffi::OsStr::from_bytes(&s[..len]));
    *rest = &s[len + 1..];
    Some(Line::Opened(Entry { dev: nums[0], ino: nums[1], size: nums[2], created: nums[3] == 1, path }))
}

/// What a restart from an image does to the files the program wrote after it.
#[derive(Debug, Clone, PartialEq)]
pub enum Rollback {
    /// Cut back to `to` bytes (from `from`).
    Cut { path: PathBuf, from: u64, to: u64 },
    /// Created after the checkpoint: removed.
    Removed { path: PathBuf },
    /// The program was creating it when it was stopped, and this filesystem does not say
    /// when the file there was born: left as it is (the restart warns).
    Unsure { path: PathBuf },
}

/// Rolls back the files the program wrote after `image` (see the module): each file still at
/// its logged path with its logged identity is cut back to the smallest size logged, or
/// removed if the program created it after the checkpoint. Returns what was done; a file
/// that cannot be changed is an error naming it.
pub fn roll_back(image: &Path) -> Result<Vec<Rollback>, String> {
    let log = log_path(image);
    let bytes = match std::fs::read(&log) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", log.display())),
    };
    // Per file and path (inode numbers are reused: two files created one after the other
    // may have the same): its first entry (was it created after the checkpoint?) and the
    // smallest size.
    let mut files: Vec<Entry> = Vec::new();
    // Per path, the first moment the program was about to create it.
    let mut creating: Vec<Creating> = Vec::new();
    for line in parse(&bytes) {
        let e = match line {
            Line::Opened(e) => e,
            Line::Creating(c) => {
                if !creating.iter().any(|k| k.path == c.path) {
                    creating.push(c);
                }
                continue;
            }
        };
        match files.iter_mut().find(|f| (f.dev, f.ino, &f.path) == (e.dev, e.ino, &e.path)) {
            Some(f) => f.size = f.size.min(e.size),
            None => files.push(e),
        }
    }
    let mut done = Vec::new();
    for f in files {
        let Ok(m) = std::fs::symlink_metadata(&f.path) else { continue };
        use std::os::unix::fs::MetadataExt;
        if !m.file_type().is_file() || (m.dev(), m.ino()) != (f.dev, f.ino) {
            continue;
        }
        if f.created {
            std::fs::remove_file(&f.path).map_err(|e| format!("cannot remove {} (created after the checkpoint): {e}", f.path.display()))?;
            done.push(Rollback::Removed { path: f.path });
        } else if m.len() > f.size {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&f.path)
                .map_err(|e| format!("cannot cut back {} (written after the checkpoint): {e}", f.path.display()))?;
            file.set_len(f.size).map_err(|e| format!("cannot cut back {}: {e}", f.path.display()))?;
            done.push(Rollback::Cut { path: f.path, from: m.len(), to: f.size });
        }
    }
    // Paths the program was creating: a file there born since is the program's (its open
    // may have been its last act, before any entry named the file).
    for c in creating {
        let Some(born) = birth(&c.path) else { continue };
        match born {
            Some(t) if t >= c.at => {
                std::fs::remove_file(&c.path)
                    .map_err(|e| format!("cannot remove {} (created after the checkpoint): {e}", c.path.display()))?;
                done.push(Rollback::Removed { path: c.path });
            }
            Some(_) => {}
            None => done.push(Rollback::Unsure { path: c.path }),
        }
    }
    Ok(done)
}

/// The birth time of the regular file at `path` (a final link not followed): None when
/// there is no regular file there, Some(None) when the filesystem does not keep it.
fn birth(path: &Path) -> Option<Option<(i64, i64)>> {
    let p = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: a plain C struct, all zeroes valid.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path, a live output struct.
    let r = unsafe {
        libc::statx(libc::AT_FDCWD, p.as_ptr(), libc::AT_SYMLINK_NOFOLLOW, libc::STATX_TYPE | libc::STATX_BTIME, &mut st)
    };
    if r != 0 || u32::from(st.stx_mode) & libc::S_IFMT != libc::S_IFREG {
        return None;
    }
    if st.stx_mask & libc::STATX_BTIME == 0 {
        return Some(None);
    }
    Some(Some((st.stx_btime.tv_sec, i64::from(st.stx_btime.tv_nsec))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_reads_entries_and_skips_torn_or_hostile_lines() {
        let mut b = b"1 2 30 0 10 /tmp/a b\nc\n".to_vec();
        b.extend_from_slice(b"x y z\n");
        b.extend_from_slice(b"5 6 0 1 6 /tmp/c\n");
        b.extend_from_slice(b"5 6 0 1 99999 /tmp/c\n");
        b.extend_from_slice(b"7 8 9 2 2 /x\n");
        b.extend_from_slice(b"c 17 250 4 /t/x\n");
        b.extend_from_slice(b"c 17 x 4 /t/x\n");
        b.extend_from_slice(b"c 17 3 3 rel\n");
        b.extend_from_slice(b"7 8 9 0 8 /tmp/tor");
        let e = parse(&b);
        assert_eq!(
            e,
            vec![
                Line::Opened(Entry { dev: 1, ino: 2, size: 30, created: false, path: "/tmp/a b\nc".into() }),
                Line::Opened(Entry { dev: 5, ino: 6, size: 0, created: true, path: "/tmp/c".into() }),
                Line::Creating(Creating { at: (17, 250), path: "/t/x".into() }),
            ]
        );
    }

    #[test]
    fn roll_back_cuts_to_the_smallest_size_removes_created_files_and_skips_replaced_ones() {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let image = d.path().join("ckpt-1");
        let grown = d.path().join("grown");
        let created = d.path().join("created");
        let replaced = d.path().join("replaced");
        std::fs::write(&grown, b"0123456789").unwrap();
        std::fs::write(&created, b"new").unwrap();
        std::fs::write(&replaced, b"old old old").unwrap();
        let id = |p: &Path| {
            let m = std::fs::metadata(p).unwrap();
            (m.dev(), m.ino())
        };
        let line = |p: &Path, size: u64, created: bool| {
            let (d, i) = id(p);
            let s = p.to_str().unwrap();
            format!("{d} {i} {size} {} {} {s}\n", created as u8, s.len())
        };
        let (rd, ri) = id(&replaced);
        let log = line(&grown, 6, false) + &line(&grown, 4, false) + &line(&created, 0, true) + &line(&replaced, 1, false);
        std::fs::write(log_path(&image), log).unwrap();
        std::fs::remove_file(&replaced).unwrap();
        std::fs::write(d.path().join("spacer"), b"x").unwrap();
        std::fs::write(&replaced, b"someone else's").unwrap();
        let done = roll_back(&image).unwrap();
        assert_eq!(std::fs::read(&grown).unwrap(), b"0123");
        assert!(!created.exists());
        if id(&replaced) != (rd, ri) {
            assert_eq!(std::fs::read(&replaced).unwrap(), b"someone else's");
        }
        assert!(done.contains(&Rollback::Cut { path: grown.clone(), from: 10, to: 4 }));
        assert!(done.contains(&Rollback::Removed { path: created }));
        // No log: nothing to do.
        assert_eq!(roll_back(&d.path().join("ckpt-2")).unwrap(), vec![]);

        // Inode numbers are reused: a file created and removed after the checkpoint, then the
        // next one created with the same number. The second is removed too.
        let image = d.path().join("ckpt-3");
        let first = d.path().join("s1");
        let second = d.path().join("s2");
        std::fs::write(&second, b"").unwrap();
        let (sd, si) = id(&second);
        let entry = |p: &Path| {
            let s = p.to_str().unwrap();
            format!("{sd} {si} 0 1 {} {s}\n", s.len())
        };
        std::fs::write(log_path(&image), entry(&first) + &entry(&second)).unwrap();
        assert_eq!(roll_back(&image).unwrap(), vec![Rollback::Removed { path: second.clone() }]);
        assert!(!second.exists());
    }

    /// A program stopped between creating a file and logging the open: the line written
    /// ahead of the open names the path, and the file born since is removed; a file there
    /// born before the program began creating it is left (where the filesystem keeps birth
    /// times; where it does not, the restart is told it cannot know).
    #[test]
    fn roll_back_removes_a_file_created_before_its_open_was_logged() {
        let d = tempfile::tempdir().unwrap();
        let image = d.path().join("ckpt-1");
        let old = d.path().join("old");
        let new = d.path().join("new");
        std::fs::write(&old, b"before").unwrap();
        let Some(Some(old_born)) = birth(&old) else {
            eprintln!("no birth times on this filesystem: skipped");
            return;
        };
        // Wait for the coarse clock to pass the old file's birth.
        let now = || {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
            (t.as_secs() as i64, i64::from(t.subsec_nanos()))
        };
        while now() <= old_born {
            std::thread::yield_now();
        }
        let at = now();
        let line = |p: &Path| {
            let s = p.to_str().unwrap();
            format!("c {} {} {} {s}\n", at.0, at.1, s.len())
        };
        // Birth times come from the coarse clock: wait until it has passed `at` too.
        loop {
            let probe = d.path().join("probe");
            std::fs::write(&probe, b"").unwrap();
            let born = birth(&probe).unwrap().unwrap();
            std::fs::remove_file(&probe).unwrap();
            if born >= at {
                break;
            }
            std::thread::yield_now();
        }
        std::fs::write(&new, b"after").unwrap();
        std::fs::write(log_path(&image), line(&old) + &line(&new) + &line(&d.path().join("never"))).unwrap();
        assert_eq!(roll_back(&image).unwrap(), vec![Rollback::Removed { path: new.clone() }]);
        assert!(!new.exists());
        assert_eq!(std::fs::read(&old).unwrap(), b"before");
    }
}
