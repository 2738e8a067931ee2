//! inotify instances. The kernel keeps a watch's inode, not the path it was added by, and a
//! restart can add a watch only by path: `libcrum_libc.so`'s `inotify_add_watch` wrapper
//! tells libcrum the path of every watch the program adds ([`note_watch`], made absolute
//! with the working directory of that moment). When an image is cut, [`capture`] takes the
//! live watches from `/proc/self/fdinfo` (watch descriptor, inode, device, mask) and gives
//! each the path noted for it, checked to still name that inode (or, added with
//! `IN_DONT_FOLLOW`, the link itself). A restart adds them again in the order of their watch
//! descriptors, so each gets its number again (`crum_restart::sys::inotify`).
//!
//! Named when the image is written: a watch whose path crum does not know (added before
//! libcrum was loaded, through the raw system call, or renamed or removed since) makes the
//! descriptor unrestorable; events waiting to be read cannot be given back to a new
//! instance: the cut waits a little for the program to read them ([`events_waiting`],
//! `agent::SETTLE`), and those still there are a loss (a warning; `--strict` refuses). Events of what changed between
//! the checkpoint and the restart are not made up (docs/checkpoint.md).

#![allow(unsafe_code)]

use crate::state::{FdKind, InotifyWatch};
use std::ffi::CStr;
use std::sync::{Mutex, TryLockError};

struct Noted {
    fd: i32,
    wd: i32,
    path: String,
}

/// The watches noted, newest last (this is program memory: it comes back with the image).
static NOTED: Mutex<Vec<Noted>> = Mutex::new(Vec::new());
/// A program adding and dropping watches forever forgets its oldest paths past this.
const MAX_NOTED: usize = 1 << 16;

/// In a child just forked: whether the lock of the noted watches is free.
pub(crate) fn unlocked() -> bool {
    !matches!(NOTED.try_lock(), Err(std::sync::TryLockError::WouldBlock))
}

/// The program added watch `wd` for `path` to the inotify instance `fd`.
pub fn note_watch(fd: i32, wd: i32, path: &CStr) {
    // A path that is not UTF-8 is not noted: the watch is then named at checkpoint.
    let Ok(p) = path.to_str() else { return };
    let path = if p.starts_with('/') {
        p.to_string()
    } else {
        match std::env::current_dir() {
            Ok(d) => d.join(p).to_string_lossy().into_owned(),
            Err(_) => return,
        }
    };
    // Not `lock`: a child forked while another thread held the lock would wait forever. A
    // watch whose path is not kept is named at checkpoint, never restored wrongly.
    let mut v = None;
    for _ in 0..10_000 {
        match NOTED.try_lock() {
            Ok(g) => v = Some(g),
            Err(TryLockError::Poisoned(e)) => v = Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => {
                std::thread::yield_now();
                continue;
            }
        }
        break;
    }
    let Some(mut v) = v else { return };
    v.retain(|n| n.fd != fd || n.wd != wd);
    if v.len() >= MAX_NOTED {
        v.drain(..MAX_NOTED / 4);
    }
    v.push(Noted { fd, wd, path });
}

/// Whether an inotify instance the program added watches to has events it has not read
/// yet. Called with the program's threads stopped: allocates nothing and waits for no lock
/// (a thread stopped while noting a watch: false, nothing to wait for).
pub fn events_waiting() -> bool {
    let Ok(noted) = NOTED.try_lock() else { return false };
    let mut seen = [-1i32; 64];
    let mut n_seen = 0;
    for n in noted.iter() {
        if seen[..n_seen].contains(&n.fd) {
            continue;
        }
        if n_seen < seen.len() {
            seen[n_seen] = n.fd;
            n_seen += 1;
        }
        let mut name = [0u8; 32];
        let len = {
            let mut w = &mut name[..];
            let _ = std::io::Write::write_fmt(&mut w, format_args!("/proc/self/fd/{}\0", n.fd));
            32 - w.len()
        };
        let mut link = [0u8; 32];
        // SAFETY: a NUL-terminated name in `name[..len]`, a live output buffer.
        let l = unsafe { libc::readlink(name[..len].as_ptr().cast(), link.as_mut_ptr().cast(), link.len()) };
        if l <= 0 || &link[..l as usize] != b"anon_inode:inotify" {
            continue;
        }
        let mut queued: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int into the live local.
        if unsafe { libc::ioctl(n.fd, libc::FIONREAD, &mut queued) } == 0 && queued > 0 {
            return true;
        }
    }
    false
}

/// One `inotify wd:… ino:… sdev:… mask:…` line of fdinfo: (wd, inode, device as
/// `st_dev`, mask). The kernel prints them in hexadecimal and the device as its own
/// `major << 20 | minor`.
pub fn parse_watch(line: &str) -> Option<(i32, u64, u64, u32)> {
    let rest = line.strip_prefix("inotify ")?;
    let field = |k: &str| rest.split_whitespace().find_map(|w| w.strip_prefix(k)).and_then(|v| u64::from_str_radix(v, 16).ok());
    let (wd, ino, sdev, mask) = (field("wd:")?, field("ino:")?, field("sdev:")?, field("mask:")?);
    let dev = libc::makedev((sdev >> 20) as u32, (sdev & 0xf_ffff) as u32);
    Some((wd as i32, ino, dev, mask as u32))
}

/// (device, inode) of `path`, following a final link or not.
pub fn identity(path: &str, follow: bool) -> Option<(u64, u64)> {
    let m = if follow { std::fs::metadata(path) } else { std::fs::symlink_metadata(path) };
    m.ok().map(|m| {
        use std::os::unix::fs::MetadataExt;
        (m.dev(), m.ino())
    })
}

/// The inotify instance at `fd` (`link`: its /proc/self/fd link) as a restart makes it again.
pub fn capture(fd: i32, link: &str) -> FdKind {
    let text = crate::capture::read_raw(&format!("/proc/self/fdinfo/{fd}")).unwrap_or_default();
    let noted = match NOTED.try_lock() {
        Ok(g) => g,
        Err(TryLockError::Poisoned(e)) => e.into_inner(),
        // A thread was stopped while noting a watch.
        Err(TryLockError::WouldBlock) => {
            return FdKind::Unsupported { what: format!("{link} (a watch was being added at the moment of the checkpoint)") }
        }
    };
    let mut watches = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("inotify ")) {
        let Some((wd, ino, dev, mask)) = parse_watch(line) else {
            return FdKind::Unsupported { what: format!("{link} with a watch the kernel describes as '{line}'") };
        };
        let found = noted.iter().rev().find(|n| n.fd == fd && n.wd == wd).and_then(|n| {
            let dont_follow = if identity(&n.path, true) == Some((dev, ino)) {
                false
            } else if identity(&n.path, false) == Some((dev, ino)) {
                true
            } else {
                return None;
            };
            Some(InotifyWatch { wd, mask, path: n.path.clone(), dev, ino, dont_follow })
        });
        match found {
            Some(w) => watches.push(w),
            None => {
                return FdKind::Unsupported {
                    what: format!(
                        "{link} watching inode {ino} of device {}:{} (watch {wd}) by a path crum does not know (added \
                         before crum's library was loaded or by the raw system call, or renamed or removed since)",
                        libc::major(dev),
                        libc::minor(dev)
                    ),
                }
            }
        }
    }
    watches.sort_by_key(|w| w.wd);
    let mut queued: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int into the live local.
    if unsafe { libc::ioctl(fd, libc::FIONREAD, &mut queued) } != 0 {
        queued = 0;
    }
    let lost = if queued > 0 {
        format!("{queued} bytes of inotify events not read yet: a restart cannot give them back, the restarted program does not see them")
    } else {
        String::new()
    };
    FdKind::Inotify { watches, lost }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_lines_are_read_in_hexadecimal_with_the_kernels_device_numbers() {
        let l = "inotify wd:1a ino:2f sdev:800001 mask:fce ignored_mask:0 fhandle-bytes:8 fhandle-type:1 f_handle:2f00";
        let (wd, ino, dev, mask) = parse_watch(l).unwrap();
        assert_eq!((wd, ino, mask), (26, 47, 0xfce));
        assert_eq!((libc::major(dev), libc::minor(dev)), (8, 1));
        assert!(parse_watch("pos:\t0").is_none());
    }

    #[test]
    fn watches_come_with_the_path_they_were_added_by() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_str().unwrap().to_string();
        // SAFETY: a new inotify instance of this test's own.
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
        assert!(fd >= 0);
        let c = std::ffi::CString::new(path.clone()).unwrap();
        // SAFETY: as above; a live NUL-terminated path.
        let wd = unsafe { libc::inotify_add_watch(fd, c.as_ptr(), libc::IN_CREATE | libc::IN_ONESHOT) };
        assert!(wd > 0);
        let link = "anon_inode:inotify";
        // Not noted: named.
        assert!(matches!(capture(fd, link), FdKind::Unsupported { ref what } if what.contains(&format!("(watch {wd})"))));
        note_watch(fd, wd, &c);
        let FdKind::Inotify { watches, lost } = capture(fd, link) else { panic!("not restorable: {:?}", capture(fd, link)) };
        assert_eq!(watches.len(), 1);
        assert_eq!((watches[0].wd, watches[0].path.as_str(), watches[0].dont_follow), (wd, path.as_str(), false));
        assert_eq!(watches[0].mask, libc::IN_CREATE | libc::IN_ONESHOT);
        assert!(lost.is_empty());
        std::fs::write(dir.path().join("x"), b"").unwrap();
        let FdKind::Inotify { lost, .. } = capture(fd, link) else { panic!() };
        assert!(lost.contains("bytes of inotify events"), "{lost}");
        // SAFETY: ours.
        unsafe { libc::close(fd) };
    }
}
