//! Who may supply an image to `crum restart` (docs/image-format.md, "Who may supply an
//! image"). An image is code: restarting it runs whatever it holds with the restarting user's
//! rights. So, as ssh does with `StrictModes`, `crum restart` accepts an image only if
//!
//! - the image directory, every file in it, and the directory of images it was picked from
//!   are owned by the restarting user (effective uid) and not writable by group or others,
//!   and no file in the image is a symbolic link;
//! - every directory above, from `/` down, is owned by that user or by root and not
//!   writable by group or others — except a sticky directory writable by all (`/tmp`): there
//!   nobody can rename or remove another's entries, so it is accepted as an ancestor, but
//!   then every directory below it must be owned by the restarting user (not root).
//!
//! The checks run on the canonical path (symbolic links resolved), so a link planted in a
//! shared directory leads to a path that fails them. `crum restart --trust IMAGE` skips them
//! for one image named explicitly.

use std::fmt;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Why a path may not supply an image.
#[derive(Debug)]
pub enum TrustError {
    /// `path` is owned by `owner`, not by the restarting user `ours` (nor by root where root
    /// is accepted).
    Owner { path: PathBuf, owner: u32, ours: u32 },
    /// `path` is writable by users other than its owner.
    Writable { path: PathBuf, mode: u32 },
    /// A file of the image is a symbolic link.
    Symlink { path: PathBuf },
    /// A file of the image is neither a regular file nor a directory.
    Special { path: PathBuf },
    /// `path` could not be examined.
    Io { path: PathBuf, source: io::Error },
}

impl fmt::Display for TrustError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrustError::Owner { path, owner, ours } => {
                write!(f, "{} is owned by uid {owner}, not by you (uid {ours})", path.display())
            }
            TrustError::Writable { path, mode } => {
                let who = if mode & 0o002 != 0 { "other users" } else { "its group" };
                write!(f, "{} is writable by {who} (mode {:o})", path.display(), mode & 0o7777)
            }
            TrustError::Symlink { path } => write!(f, "{} is a symbolic link", path.display()),
            TrustError::Special { path } => write!(f, "{} is not a regular file", path.display()),
            TrustError::Io { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for TrustError {}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> TrustError + '_ {
    move |source| TrustError::Io { path: path.to_path_buf(), source }
}

/// The restarting user: the effective uid.
pub fn our_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// `path` (a directory or file that must be the user's own): owned by `ours`, not writable
/// by group or others.
fn own(path: &Path, md: &std::fs::Metadata, ours: u32) -> Result<(), TrustError> {
    if md.uid() != ours {
        return Err(TrustError::Owner { path: path.to_path_buf(), owner: md.uid(), ours });
    }
    if md.mode() & 0o022 != 0 {
        return Err(TrustError::Writable { path: path.to_path_buf(), mode: md.mode() });
    }
    Ok(())
}

/// Checks every directory strictly above `canonical` (an absolute path without links), from
/// `/` down (see the module documentation).
fn ancestors(canonical: &Path, ours: u32) -> Result<(), TrustError> {
    let mut chain: Vec<&Path> = canonical.ancestors().skip(1).collect();
    chain.reverse();
    let mut below_shared = false;
    for dir in chain {
        let md = std::fs::symlink_metadata(dir).map_err(io_err(dir))?;
        let owner_ok = md.uid() == ours || (md.uid() == 0 && !below_shared);
        if !owner_ok {
            return Err(TrustError::Owner { path: dir.to_path_buf(), owner: md.uid(), ours });
        }
        let mode = md.mode();
        if mode & 0o022 != 0 {
            // A sticky directory writable by all (`/tmp`): others cannot replace our entries.
            if mode & 0o1002 == 0o1002 {
                below_shared = true;
                continue;
            }
            return Err(TrustError::Writable { path: dir.to_path_buf(), mode });
        }
    }
    // The target itself follows the ancestors: below a shared directory it must be ours
    // (checked by the callers, which require the owner to be `ours` anyway).
    Ok(())
}

fn canonical(path: &Path) -> Result<PathBuf, TrustError> {
    path.canonicalize().map_err(io_err(path))
}

/// A directory of images `crum restart` is to pick the newest image from: its ancestors and
/// itself (ours, private to us).
pub fn check_images_dir(dir: &Path) -> Result<(), TrustError> {
    let ours = our_uid();
    let dir = canonical(dir)?;
    ancestors(&dir, ours)?;
    let md = std::fs::symlink_metadata(&dir).map_err(io_err(&dir))?;
    own(&dir, &md, ours)
}

/// An image directory: its ancestors, itself and every file in it; and for an incremental
/// image, the earlier images it keeps memory in (beside it in the same directory).
pub fn check_image(image: &Path) -> Result<(), TrustError> {
    let ours = our_uid();
    let image = canonical(image)?;
    ancestors(&image, ours)?;
    let md = std::fs::symlink_metadata(&image).map_err(io_err(&image))?;
    own(&image, &md, ours)?;
    check_contents(&image, ours)?;
    // Read only now that the image is trusted. One whose chain cannot be read is refused by
    // the reader, which names what is wrong with it.
    let chain = crum_ckpt::image::read_chain(&image).unwrap_or_default();
    let parent = image.parent().unwrap_or(Path::new("/"));
    for e in chain {
        let earlier = parent.join(&e.name);
        let md = match std::fs::symlink_metadata(&earlier) {
            Ok(md) => md,
            // Named by the reader (the image is refused with the missing image's name).
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(err) => return Err(io_err(&earlier)(err)),
        };
        if md.file_type().is_symlink() {
            return Err(TrustError::Symlink { path: earlier });
        }
        own(&earlier, &md, ours)?;
        check_contents(&earlier, ours)?;
    }
    Ok(())
}

fn check_contents(dir: &Path, ours: u32) -> Result<(), TrustError> {
    for ent in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let ent = ent.map_err(io_err(dir))?;
        let path = ent.path();
        let md = std::fs::symlink_metadata(&path).map_err(io_err(&path))?;
        let ft = md.file_type();
        if ft.is_symlink() {
            return Err(TrustError::Symlink { path });
        }
        if !ft.is_file() && !ft.is_dir() {
            return Err(TrustError::Special { path });
        }
        own(&path, &md, ours)?;
        if ft.is_dir() {
            check_contents(&path, ours)?;
        }
    }
    Ok(())
}

/// Why images written into `dir` (which may not exist yet: crum creates it private) would
/// be refused by `crum restart`, for the warning of `crum run --dir` and `crum checkpoint
/// --dir`; None when they would be accepted.
pub fn image_dir_problem(dir: &Path) -> Option<TrustError> {
    let ours = our_uid();
    let abs = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir().ok()?.join(dir)
    };
    // The nearest existing directory: what is below it will be created by crum (0700).
    let mut existing = abs.as_path();
    let mut exists_itself = true;
    while !existing.exists() {
        existing = existing.parent()?;
        exists_itself = false;
    }
    let c = existing.canonicalize().ok()?;
    if exists_itself {
        ancestors(&c, ours).err().or_else(|| {
            let md = std::fs::symlink_metadata(&c).ok()?;
            own(&c, &md, ours).err()
        })
    } else {
        // `c` becomes an ancestor of the image directory: a shared sticky one is accepted.
        ancestors(&c.join("x"), ours).err()
    }
}

/// Warns on stderr when `--dir` names a directory `crum restart` will refuse images from.
pub fn warn_about_dir(dir: &Path) {
    if let Some(problem) = image_dir_problem(dir) {
        eprintln!(
            "crum: warning: --dir {}: {problem}; `crum restart` will refuse images there \
             (use a directory only you can write)",
            dir.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A fresh private directory under the system temp dir (a sticky `/tmp`).
    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("crum-trust-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        chmod(&d, 0o700);
        d
    }

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// A minimal image-like directory: `inventory` and `pages` files, private.
    fn fake_image(parent: &Path, name: &str) -> PathBuf {
        let img = parent.join(name);
        std::fs::create_dir(&img).unwrap();
        chmod(&img, 0o700);
        for f in ["inventory", "pages"] {
            std::fs::write(img.join(f), b"x").unwrap();
            chmod(&img.join(f), 0o600);
        }
        img
    }

    /// Gives `p` to another uid; false (with a note) when we may not (not root).
    fn give_away(p: &Path) -> bool {
        match std::os::unix::fs::chown(p, Some(our_uid() + 4242), None) {
            Ok(()) => true,
            Err(e) => {
                eprintln!("note: cannot chown {} ({e}); skipping the other-user part (run as root)", p.display());
                false
            }
        }
    }

    #[test]
    fn own_private_image_below_a_sticky_tmp_is_accepted() {
        let t = scratch("ok");
        let imgs = t.join("images");
        std::fs::create_dir(&imgs).unwrap();
        chmod(&imgs, 0o755);
        let img = fake_image(&imgs, "ckpt-1");
        check_images_dir(&imgs).unwrap();
        check_image(&img).unwrap();
        assert!(image_dir_problem(&imgs).is_none());
        assert!(image_dir_problem(&imgs.join("not-yet")).is_none());
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn world_writable_image_directory_is_refused_naming_it() {
        let t = scratch("ww");
        let imgs = t.join("images");
        std::fs::create_dir(&imgs).unwrap();
        let img = fake_image(&imgs, "ckpt-1");
        chmod(&imgs, 0o1777);
        let e = check_images_dir(&imgs).unwrap_err();
        assert!(matches!(e, TrustError::Writable { .. }), "{e}");
        assert!(e.to_string().contains("images is writable by other users"), "{e}");
        // `crum run --dir` warns about it.
        assert!(image_dir_problem(&imgs).is_some());
        // An image of ours named explicitly in a shared sticky directory is safe as in /tmp
        // (nobody else can rename or remove it); without the sticky bit it is not.
        check_image(&img).unwrap();
        chmod(&imgs, 0o777);
        let e = check_image(&img).unwrap_err();
        assert!(e.to_string().contains("images is writable by other users"), "{e}");
        chmod(&imgs, 0o775);
        let e = check_image(&img).unwrap_err();
        assert!(e.to_string().contains("writable by its group"), "{e}");
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn the_earlier_images_of_an_incremental_image_are_checked_too() {
        use crum_ckpt::image::{Base, ImageWriter, RegionMeta, WriterOptions};
        let t = scratch("chain");
        let write = |seq: u64, base: Option<&Path>| {
            let base = base.map(|b| std::sync::Arc::new(Base::from_image(b, 8).unwrap().unwrap()));
            let mut w = ImageWriter::prepare(&t, &WriterOptions { seq, base, ..Default::default() }).unwrap();
            let data: Vec<u8> = (0..1u32 << 16).map(|i| (i * 7 + i / 251) as u8).collect();
            let meta = RegionMeta { start: 0x10000, len: data.len() as u64, prot: 3, flags: 0, offset: 0, name: b"[heap]" };
            w.add_region(&meta, &data).unwrap();
            w.commit().unwrap();
            w.final_path().to_path_buf()
        };
        let a = write(1, None);
        let b = write(2, Some(&a));
        check_image(&b).unwrap();
        chmod(&a.join("pages"), 0o620);
        let e = check_image(&b).unwrap_err();
        assert!(e.to_string().contains(&format!("{}/pages is writable by its group", a.display())), "{e}");
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn group_writable_image_file_and_symlinks_in_an_image_are_refused() {
        let t = scratch("files");
        let img = fake_image(&t, "ckpt-1");
        chmod(&img.join("pages"), 0o620);
        let e = check_image(&img).unwrap_err();
        assert!(e.to_string().contains("pages is writable by its group"), "{e}");
        chmod(&img.join("pages"), 0o600);
        std::os::unix::fs::symlink("/etc/passwd", img.join("extra")).unwrap();
        let e = check_image(&img).unwrap_err();
        assert!(matches!(e, TrustError::Symlink { .. }), "{e}");
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn image_owned_by_another_user_is_refused() {
        let t = scratch("owner");
        let img = fake_image(&t, "ckpt-1");
        if !give_away(&img) {
            return;
        }
        let e = check_image(&img).unwrap_err();
        let TrustError::Owner { owner, ours, .. } = e else { panic!("{e}") };
        assert_eq!((owner, ours), (our_uid() + 4242, our_uid()));
        // A file of it owned by another user, in a directory of ours.
        std::os::unix::fs::chown(&img, Some(our_uid()), None).unwrap();
        assert!(give_away(&img.join("inventory")));
        let e = check_image(&img).unwrap_err();
        assert!(e.to_string().contains("inventory is owned by uid"), "{e}");
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn directory_below_a_sticky_tmp_owned_by_another_user_is_refused() {
        let t = scratch("below");
        let imgs = t.join("images");
        std::fs::create_dir(&imgs).unwrap();
        let img = fake_image(&imgs, "ckpt-1");
        // `t` sits in the sticky /tmp: another user's directory there could hold anything.
        if !give_away(&t) {
            return;
        }
        let e = check_image(&img).unwrap_err();
        assert!(matches!(&e, TrustError::Owner { path, .. } if *path == t.canonicalize().unwrap()), "{e}");
        assert!(check_images_dir(&imgs).is_err());
        std::os::unix::fs::chown(&t, Some(our_uid()), None).unwrap();
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn a_missing_path_reports_the_system_error() {
        let e = check_image(Path::new("/nonexistent-crum-dir/ckpt-1")).unwrap_err();
        assert!(e.to_string().contains("No such file or directory"), "{e}");
    }
}
