//! A program's lineage: the images one run of a program writes. `crum run` starts a lineage;
//! a restarted program starts a new one whose parent is the lineage of the image it was
//! restarted from. Each image records its lineage in the optional section `crum.lineage`
//! (shown by `crum inspect`); `crum ps` shows the running program's.
//!
//! Rotation (`--keep N`) removes only images of the program's own line: the images its lineage
//! wrote and, after a restart, the images its ancestors had written before the image it was
//! restarted from, and that image itself. Images the parent lineage wrote after it (newer ones,
//! perhaps still being used) and images of other programs are never removed. The list of
//! those names lives in the program's memory, so a restarted program inherits its parent's
//! list as it was when the image was taken.
//!
//! Section format: UTF-8 text, one `key=value` per line: `id` (always), `parent` and
//! `restarted_from` (the image's directory name) after a restart. Unknown keys are ignored.

use std::path::Path;
use std::sync::Mutex;

/// Name of the optional image section holding the lineage.
pub const SECTION_LINEAGE: &str = "crum.lineage";
/// Largest lineage section accepted.
const MAX_SECTION: usize = 4096;

/// The lineage an image belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lineage {
    /// `<utc>-<pid>`: when and in which process the lineage began.
    pub id: String,
    /// The lineage of the image this one's program was restarted from.
    pub parent: Option<String>,
    /// The name of that image (its directory name).
    pub restarted_from: Option<String>,
}

impl Lineage {
    /// A new lineage beginning now in process `pid`.
    pub fn begin(pid: u32) -> Lineage {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Lineage { id: format!("{}-{pid}", crate::image::utc_stamp(ms)), parent: None, restarted_from: None }
    }

    /// The section bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut s = format!("id={}\n", self.id);
        if let Some(p) = &self.parent {
            s.push_str(&format!("parent={p}\n"));
        }
        if let Some(r) = &self.restarted_from {
            s.push_str(&format!("restarted_from={r}\n"));
        }
        s.into_bytes()
    }

    /// Decodes section bytes (untrusted: bounded, UTF-8, printable values).
    pub fn decode(b: &[u8]) -> Result<Lineage, String> {
        if b.len() > MAX_SECTION {
            return Err(format!("lineage section is {} bytes (at most {MAX_SECTION})", b.len()));
        }
        let text = std::str::from_utf8(b).map_err(|_| "lineage section is not UTF-8".to_string())?;
        let mut l = Lineage::default();
        for line in text.lines() {
            let (k, v) = line.split_once('=').ok_or_else(|| format!("lineage line without `=`: {line:?}"))?;
            if v.is_empty() || v.chars().any(|c| c.is_control()) {
                return Err(format!("lineage value of `{k}` is empty or not printable"));
            }
            match k {
                "id" => l.id = v.to_string(),
                "parent" => l.parent = Some(v.to_string()),
                "restarted_from" => l.restarted_from = Some(v.to_string()),
                _ => {}
            }
        }
        if l.id.is_empty() {
            return Err("lineage section has no id".into());
        }
        Ok(l)
    }

    /// One line for people: `<id>` or `<id> (restarted from <image> of lineage <parent>)`.
    pub fn describe(&self) -> String {
        match (&self.restarted_from, &self.parent) {
            (Some(r), Some(p)) => format!("{} (restarted from {r} of lineage {p})", self.id),
            (Some(r), None) => format!("{} (restarted from {r})", self.id),
            _ => self.id.clone(),
        }
    }
}

struct Current {
    lineage: Lineage,
    /// Names of the images rotation may remove (see the module documentation).
    own: Vec<String>,
    /// The program's newest image: the last one written, or the one it was restarted from
    /// (the base of an incremental image, `crate::image::Base`).
    last: Option<std::path::PathBuf>,
}

static CURRENT: Mutex<Option<Current>> = Mutex::new(None);

/// In a child just forked: whether the lineage's lock is free (a thread of the parent may
/// have held it at the fork, and then it never is in the child).
pub(crate) fn unlocked() -> bool {
    !matches!(CURRENT.try_lock(), Err(std::sync::TryLockError::WouldBlock))
}

fn with<R>(f: impl FnOnce(&mut Current) -> R) -> R {
    let mut g = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = g.get_or_insert_with(|| Current {
        lineage: Lineage::begin(crate::threads::real_pid() as u32),
        own: Vec::new(),
        last: None,
    });
    f(c)
}

/// This process's lineage (begun at the first call in a program that was not restarted).
/// Call it outside the agent's bump-allocation phase the first time (it allocates what stays).
pub fn current() -> Lineage {
    with(|c| c.lineage.clone())
}

/// In a restarted process, once its threads run: a new lineage, child of the one restored
/// from the image `image`; rotation may remove the restored list of own images and `image`.
pub fn begin_restarted(image: &Path) {
    let name = image.file_name().map(|n| n.to_string_lossy().into_owned());
    with(|c| {
        let parent = c.lineage.id.clone();
        let mut new = Lineage { restarted_from: name.clone(), parent: Some(parent.clone()), ..Lineage::begin(crate::threads::real_pid() as u32) };
        // Same millisecond and pid (a reused pid, or a test restarting in process): still new.
        if new.id == parent {
            new.id.push_str(".1");
        }
        c.lineage = new;
        c.last = Some(image.to_path_buf());
        if let Some(n) = name {
            if !c.own.contains(&n) {
                c.own.push(n);
            }
        }
    });
}

/// Records that this lineage wrote the image `image` (rotation may remove it).
pub fn written(image: &Path) {
    if let Some(n) = image.file_name() {
        let n = n.to_string_lossy().into_owned();
        with(|c| {
            c.own.push(n);
            c.last = Some(image.to_path_buf());
        });
    }
}

/// The program's newest image (see `Current::last`).
pub fn last_image() -> Option<std::path::PathBuf> {
    with(|c| c.last.clone())
}

/// Whether rotation may remove the image named `name`.
pub fn may_remove(name: &str) -> bool {
    with(|c| c.own.iter().any(|n| n == name))
}

/// Forgets images that rotation removed.
pub fn removed(names: &[String]) {
    with(|c| c.own.retain(|n| !names.contains(n)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lineage_section_round_trips_and_describes_its_parent() {
        let l = Lineage {
            id: "20260101T000000.000Z-7".into(),
            parent: Some("20251231T000000.000Z-5".into()),
            restarted_from: Some("ckpt-20251231T000001.000Z-5-2".into()),
        };
        assert_eq!(Lineage::decode(&l.encode()).unwrap(), l);
        assert_eq!(
            l.describe(),
            "20260101T000000.000Z-7 (restarted from ckpt-20251231T000001.000Z-5-2 of lineage 20251231T000000.000Z-5)"
        );
        let fresh = Lineage::begin(42);
        assert!(fresh.id.ends_with("Z-42"), "{}", fresh.id);
        assert_eq!(Lineage::decode(&fresh.encode()).unwrap().describe(), fresh.id);
    }

    #[test]
    fn malformed_lineage_sections_are_refused() {
        assert!(Lineage::decode(b"parent=x\n").is_err());
        assert!(Lineage::decode(b"id\n").is_err());
        assert!(Lineage::decode(b"id=a\x01b\n").is_err());
        assert!(Lineage::decode(&[0xff, 0xfe]).is_err());
        assert!(Lineage::decode(&vec![b'a'; MAX_SECTION + 1]).is_err());
        // Unknown keys are skipped (a later crum may add some).
        assert_eq!(Lineage::decode(b"id=a\nnew=b\n").unwrap().id, "a");
    }

    #[test]
    fn a_restart_starts_a_child_lineage_that_may_rotate_only_its_line() {
        written(Path::new("/d/ckpt-1"));
        written(Path::new("/d/ckpt-2"));
        let first = current();
        // The image ckpt-2 was taken with ckpt-1 in the list; ckpt-3 was written after it.
        begin_restarted(Path::new("/d/ckpt-2"));
        let second = current();
        assert_ne!(second.id, first.id);
        assert_eq!(second.parent.as_deref(), Some(first.id.as_str()));
        assert_eq!(second.restarted_from.as_deref(), Some("ckpt-2"));
        assert!(may_remove("ckpt-1") && may_remove("ckpt-2"));
        assert!(!may_remove("ckpt-3"));
        removed(&["ckpt-1".to_string()]);
        assert!(!may_remove("ckpt-1"));
    }
}
