//! A directory of images: listing complete ones, picking the newest, keeping the newest N,
//! and cleaning what crashed writers left.
//!
//! Complete images are directories named `ckpt-<utc>-<pid>-<seq>` holding an `inventory`
//! (the writer renames into that name only after everything is fsynced). Names sort
//! chronologically; ties break on sequence number. `.tmp-*` directories are writes in
//! progress or leftovers of crashed writers; they are never read, and removed once the pid
//! in their name is gone. Removal first renames an image to `.del-*`, so a half-removed
//! image never looks complete.

use std::path::{Path, PathBuf};

use super::{ImageError, IMAGE_PREFIX, TEMP_PREFIX};

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

/// The pid in a `.tmp-ckpt-<stamp>-<pid>-<seq>` name.
fn temp_pid(name: &str) -> Option<u32> {
    parse_name(name.strip_prefix(TEMP_PREFIX)?).map(|(_, pid, _)| pid)
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
        if path.join("inventory").is_file() {
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
    std::fs::remove_dir_all(&to).map_err(|e| ImageError::io(&to, e))
}

/// Removes leftovers: `.tmp-*` directories whose writer's pid is gone and `.del-*`
/// directories of interrupted removals. Returns how many were removed.
pub fn clean_leftovers(parent: &Path) -> Result<usize, ImageError> {
    let rd = match std::fs::read_dir(parent) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(ImageError::io(parent, e)),
    };
    let mut n = 0;
    for ent in rd {
        let ent = ent.map_err(|e| ImageError::io(parent, e))?;
        let name = ent.file_name();
        let Some(name) = name.to_str() else { continue };
        let stale = name.starts_with(DELETE_PREFIX)
            || (name.starts_with(TEMP_PREFIX) && temp_pid(name).is_some_and(|p| !pid_alive(p)));
        if stale {
            let path = ent.path();
            std::fs::remove_dir_all(&path).map_err(|e| ImageError::io(&path, e))?;
            n += 1;
        }
    }
    Ok(n)
}

/// Keeps the newest `n` (at least 1) complete images in `parent` and removes older ones and
/// leftovers of crashed writes. Only complete images count, so an older image is removed
/// only once a newer one is complete. Returns how many images were removed.
pub fn keep_newest(parent: &Path, n: usize) -> Result<usize, ImageError> {
    let n = n.max(1);
    clean_leftovers(parent)?;
    let images = list_images(parent)?;
    let excess = images.len().saturating_sub(n);
    for e in &images[..excess] {
        let name = e
            .path
            .file_name()
            .and_then(|s| s.to_str())
            .expect("listed names are UTF-8");
        remove(parent, name)?;
    }
    Ok(excess)
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
}
