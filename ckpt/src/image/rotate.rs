//! A directory of images: listing complete ones, picking the newest, keeping the newest N,
//! and cleaning what crashed writers left.
//!
//! Complete images are directories named `ckpt-<utc>-<pid>-<seq>` holding an `inventory`
//! (the writer renames into that name only after everything is fsynced). Names sort
//! chronologically; ties break on sequence number. `.tmp-*` directories are writes in
//! progress or leftovers of failed or killed writers; they are never read. One is removed
//! when its `lock` file can be `flock`ed: its writer (whatever its pid, in whatever process)
//! holds that lock for as long as it lives. A `.tmp-*` directory without a lock file (written
//! by an older crum) and a `.new-*` one (a writer that died before taking its lock) are
//! removed once the pid in their name is gone. Removal first renames a directory to
//! `.del-*`, so a half-removed image never looks complete.

use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use super::{ImageError, IMAGE_PREFIX, NEW_PREFIX, TEMP_PREFIX};

const DELETE_PREFIX: &str = ".del-";

/// A complete image found in a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageEntry {
    pub path: PathBuf,
    /// `YYYYMMDDTHHMMSS.mmmZ` from the name.
    pub stamp: String,
    pub pid: u32,
    pub seq: u64,
}

/// Parses `ckpt-<stamp>-<pid>-<seq>`.
fn parse_name(name: &str) -> Option<(String, u32, u64)> {
    let rest = name.strip_prefix(IMAGE_PREFIX)?;
    let mut parts = rest.rsplitn(3, '-');
    let seq = parts.next()?.parse().ok()?;
    let pid = parts.next()?.parse().ok()?;
    let stamp = parts.next()?;
    if stamp.is_empty() {
        return None;
    }
    Some((stamp.to_string(), pid, seq))
}

/// The pid in a `.tmp-ckpt-<stamp>-<pid>-<seq>` (or `.new-…`) name.
fn temp_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(TEMP_PREFIX).or_else(|| name.strip_prefix(NEW_PREFIX))?;
    parse_name(rest).map(|(_, pid, _)| pid)
}

fn pid_alive(pid: u32) -> bool {
    let Ok(p) = i32::try_from(pid) else {
        return false;
    };
    if p <= 0 {
        return false;
    }
    // EPERM means it exists (another user's); only ESRCH means gone.
    !matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// Complete images in `parent`, oldest first. A missing directory has none.
pub fn list_images(parent: &Path) -> Result<Vec<ImageEntry>, ImageError> {
    let rd = match std::fs::read_dir(parent) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(ImageError::io(parent, e)),
    };
    let mut out = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|e| ImageError::io(parent, e))?;
        let name = ent.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some((stamp, pid, seq)) = parse_name(name) else {
            continue;
        };
        let path = ent.path();
        if path.join("inventory").is_file() || crate::job::is_job_image(&path) {
            out.push(ImageEntry {
                path,
                stamp,
                pid,
                seq,
            });
        }
    }
    out.sort_by(|a, b| (&a.stamp, a.seq, a.pid).cmp(&(&b.stamp, b.seq, b.pid)));
    Ok(out)
}

/// The newest complete image in `parent`, if any (what `crum restart` uses for a directory
/// of images).
pub fn latest_image(parent: &Path) -> Result<Option<PathBuf>, ImageError> {
    Ok(list_images(parent)?.pop().map(|e| e.path))
}

fn remove(parent: &Path, name: &str) -> Result<(), ImageError> {
    let from = parent.join(name);
    let to = parent.join(format!("{DELETE_PREFIX}{name}"));
    std::fs::rename(&from, &to).map_err(|e| ImageError::io(&from, e))?;
    // The log of files written after it (`crate::writes`) goes with it.
    let _ = std::fs::remove_file(parent.join(format!("{}{name}", crate::writes::PREFIX)));
    std::fs::remove_dir_all(&to).map_err(|e| ImageError::io(&to, e))
}

/// Removes a directory of images (a leftover or a partial image) by renaming it to
/// `.del-<name>` first. `NotFound` when `path` is not there (or another process removes it).
pub(super) fn remove_dir(path: &Path) -> io::Result<()> {
    let name = path.file_name().ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut del = std::ffi::OsString::from(DELETE_PREFIX);
    del.push(name);
    let to = path.with_file_name(del);
    std::fs::rename(path, &to)?;
    match std::fs::remove_dir_all(&to) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// What holds a temporary directory.
enum Writer {
    /// Its writer lives (or it is not ours to judge: another user's).
    Alive,
    /// Its writer is gone; the lock (if it had one) is held until it is removed.
    Gone(Option<Flock<File>>),
}

fn temp_writer(path: &Path, name: &str) -> Writer {
    let by_pid = || {
        if temp_pid(name).is_some_and(|p| !pid_alive(p)) {
            Writer::Gone(None)
        } else {
            Writer::Alive
        }
    };
    if name.starts_with(NEW_PREFIX) {
        return by_pid();
    }
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path.join("lock"));
    match lock {
        Ok(f) => match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
            Ok(held) => Writer::Gone(Some(held)),
            Err(_) => Writer::Alive,
        },
        // An older crum's directory, or one whose writer is renaming it into place.
        Err(e) if e.kind() == io::ErrorKind::NotFound => by_pid(),
        Err(_) => Writer::Alive,
    }
}

/// Removes leftovers: `.tmp-*` directories whose writer is gone (their lock can be taken, or
/// without a lock file the pid in their name is gone), `.new-*` directories whose pid is
/// gone, and `.del-*` directories of interrupted removals. Returns how many were removed.
/// Safe to run from any process at any time: a live writer's directory is never removed.
pub fn clean_leftovers(parent: &Path) -> Result<usize, ImageError> {
    let rd = match std::fs::read_dir(parent) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(ImageError::io(parent, e)),
    };
    let mut n = 0;
    for ent in rd {
        let ent = ent.map_err(|e| ImageError::io(parent, e))?;
        let name = ent.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = ent.path();
        let r = if name.starts_with(DELETE_PREFIX) {
            std::fs::remove_dir_all(&path)
        } else if name.starts_with(TEMP_PREFIX) || name.starts_with(NEW_PREFIX) {
            match temp_writer(&path, name) {
                Writer::Alive => continue,
                // The lock stays held until the directory is gone.
                Writer::Gone(_lock) => remove_dir(&path),
            }
        } else {
            continue;
        };
        match r {
            Ok(()) => n += 1,
            // Someone else (another cleaner, the writer renaming it) was quicker.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(ImageError::io(&path, e)),
        }
    }
    Ok(n)
}

/// Keeps the newest `n` (at least 1) complete images in `parent` and removes older ones and
/// leftovers of crashed writes. Only complete images count, so an older image is removed
/// only once a newer one is complete. Returns how many images were removed.
pub fn keep_newest(parent: &Path, n: usize) -> Result<usize, ImageError> {
    keep_newest_of(parent, n, |_| true).map(|v| v.len())
}

/// [`keep_newest`] among the images whose directory name `ours` accepts (a program's own
/// line, `crate::lineage`): the others are neither counted nor removed. An image that a
/// remaining image keeps memory in (its chain, `super::chain`) is not removed either, so an
/// incremental image always restarts. Returns the names of the images removed.
pub fn keep_newest_of(parent: &Path, n: usize, ours: impl Fn(&str) -> bool) -> Result<Vec<String>, ImageError> {
    let n = n.max(1);
    clean_leftovers(parent)?;
    let all: Vec<String> = list_images(parent)?
        .into_iter()
        .filter_map(|e| e.path.file_name().and_then(|s| s.to_str()).map(str::to_owned))
        .collect();
    let images: Vec<&String> = all.iter().filter(|name| ours(name)).collect();
    let excess = images.len().saturating_sub(n);
    let doomed: Vec<&String> = images[..excess].to_vec();
    // Every image that stays names all it depends on (a chain lists its ancestors' chains).
    let mut needed: Vec<String> = Vec::new();
    for name in all.iter().filter(|a| !doomed.contains(a)) {
        // An image whose inventory or chain cannot be read cannot be restarted either: it
        // needs nothing (keeping everything for it would stop rotation for good).
        if let Ok(chain) = super::read_chain(&parent.join(name)) {
            needed.extend(chain.into_iter().map(|e| e.name));
        }
    }
    let mut removed = Vec::new();
    for name in doomed.into_iter().filter(|d| !needed.contains(d)) {
        remove(parent, name)?;
        removed.push(name.clone());
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_name_reads_stamp_pid_and_seq() {
        assert_eq!(
            parse_name("ckpt-20261122T223722.123Z-4242-7"),
            Some(("20261122T223722.123Z".to_string(), 4242, 7))
        );
        assert_eq!(parse_name("ckpt-x-1"), None);
        assert_eq!(parse_name("other"), None);
        assert_eq!(temp_pid(".tmp-ckpt-20261122T223722.123Z-99-1"), Some(99));
    }

    #[test]
    fn keep_newest_of_counts_and_removes_only_the_accepted_images() {
        let t = std::env::temp_dir().join(format!("crum-rotate-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        let names = [
            "ckpt-20260101T000001.000Z-5-1",
            "ckpt-20260101T000002.000Z-5-2",
            "ckpt-20260101T000003.000Z-5-3",
            "ckpt-20260101T000004.000Z-9-4",
            "ckpt-20260101T000005.000Z-9-5",
        ];
        for n in names {
            std::fs::create_dir_all(t.join(n)).unwrap();
            std::fs::write(t.join(n).join("inventory"), b"").unwrap();
        }
        // A program restarted from image 2 wrote 4 and 5: its line is 1, 2, 4, 5; 3 is newer
        // than its restart point and stays whatever --keep says.
        let ours = |n: &str| n != names[2];
        let removed = keep_newest_of(&t, 2, ours).unwrap();
        assert_eq!(removed, vec![names[0].to_string(), names[1].to_string()]);
        let left: Vec<_> = list_images(&t).unwrap().into_iter().map(|e| e.path).collect();
        assert_eq!(left, vec![t.join(names[2]), t.join(names[3]), t.join(names[4])]);
        std::fs::remove_dir_all(&t).unwrap();
    }
}
