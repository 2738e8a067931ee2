//! Bad images: each is refused with a one-line error naming the problem.

mod common;
use common::noise;
use std::path::{Path, PathBuf};

use crum_ckpt::image::{
    clean_leftovers, keep_newest, latest_image, list_images, ImageError, ImageReader, ImageWriter,
    RegionMeta, WriterOptions, FORMAT_MAJOR, FORMAT_MINOR,
};


/// An image with one region of two 64 KiB chunks (raw noise, then compressible) and
/// sections `process` (required) and `extra` (optional).
fn make_image(parent: &Path, seq: u64, extra_required: Option<&str>) -> PathBuf {
    let mut data = noise(64 * 1024, 3);
    data.extend((0..64 * 1024).map(|i| (i / 50) as u8));
    let opts = WriterOptions {
        chunk_size: 64 * 1024,
        seq,
        ..Default::default()
    };
    let mut w = ImageWriter::prepare(parent, &opts).unwrap();
    w.add_section("process", true, b"process state").unwrap();
    w.add_section("extra", false, b"optional").unwrap();
    if let Some(name) = extra_required {
        w.add_section(name, true, b"future").unwrap();
    }
    let meta = RegionMeta {
        start: 0x4000_0000,
        len: data.len() as u64,
        prot: 3,
        flags: 0,
        offset: 0,
        name: b"[heap]",
    };
    w.add_region(&meta, &data).unwrap();
    w.commit().unwrap();
    w.final_path().to_path_buf()
}

fn open_err(p: &Path) -> ImageError {
    match ImageReader::open(p) {
        Ok(_) => panic!("image {} opened but should not", p.display()),
        Err(e) => {
            assert!(!e.to_string().contains('\n'), "multi-line error: {e}");
            e
        }
    }
}

/// Rewrites the inventory with `f` applied, keeping its checksum valid.
fn patch_inventory(img: &Path, f: impl FnOnce(&mut [u8])) {
    let p = img.join("inventory");
    let mut b = std::fs::read(&p).unwrap();
    let n = b.len();
    f(&mut b[..n - 4]);
    let crc = crc32fast::hash(&b[..n - 4]);
    b[n - 4..].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&p, b).unwrap();
}

#[test]
fn flipped_byte_in_chunk_is_a_checksum_error_naming_the_chunk() {
    let tmp = tempfile::tempdir().unwrap();
    let img = make_image(tmp.path(), 0, None);
    let r = ImageReader::open(&img).unwrap();
    let c1 = r.regions()[0].chunks[1].clone();
    drop(r);
    let pages = img.join("pages");
    let mut b = std::fs::read(&pages).unwrap();
    b[c1.offset as usize + 5] ^= 0x40;
    std::fs::write(&pages, b).unwrap();

    let mut r = ImageReader::open(&img).unwrap();
    let e = r.read_region(0).unwrap_err();
    assert!(
        matches!(
            e,
            ImageError::ChunkChecksum {
                region: 0,
                chunk: 1,
                addr: 0x4001_0000
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("chunk 1 of region 0"), "{e}");
    assert!(r.verify().is_err());
}

#[test]
fn flipped_byte_in_raw_chunk_is_a_checksum_error() {
    let tmp = tempfile::tempdir().unwrap();
    let img = make_image(tmp.path(), 0, None);
    let pages = img.join("pages");
    let mut b = std::fs::read(&pages).unwrap();
    b[10] ^= 1;
    std::fs::write(&pages, b).unwrap();
    let e = ImageReader::open(&img).unwrap().read_region(0).unwrap_err();
    assert!(
        matches!(
            e,
            ImageError::ChunkChecksum {
                region: 0,
                chunk: 0,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn truncated_pages_file_is_refused_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    let img = make_image(tmp.path(), 0, None);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(img.join("pages"))
        .unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len - 100).unwrap();
    let e = open_err(&img);
    assert!(matches!(e, ImageError::Truncated { .. }), "{e}");
    assert!(e.to_string().contains("pages is truncated"), "{e}");
}

#[test]
fn truncated_inventory_and_regions_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let img = make_image(tmp.path(), 0, None);
    let regions = img.join("regions");
    let b = std::fs::read(&regions).unwrap();
    std::fs::write(&regions, &b[..b.len() - 20]).unwrap();
    assert!(matches!(open_err(&img), ImageError::Truncated { .. }));

    let img = make_image(tmp.path(), 1, None);
    let inv = img.join("inventory");
    let b = std::fs::read(&inv).unwrap();
    std::fs::write(&inv, &b[..200]).unwrap();
    assert!(matches!(open_err(&img), ImageError::Truncated { .. }));
}

#[test]
fn wrong_magic_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let img = make_image(tmp.path(), 0, None);
    patch_inventory(&img, |b| b[0] = b'X');
    let e = open_err(&img);
    assert!(matches!(e, ImageError::BadMagic { .. }), "{e}");
}

#[test]
fn next_major_version_is_refused_and_older_minor_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let img = make_image(tmp.path(), 0, None);
    patch_inventory(&img, |b| {
        b[8..10].copy_from_slice(&(FORMAT_MAJOR + 1).to_le_bytes())
    });
    let e = open_err(&img);
    assert!(matches!(e, ImageError::Version { .. }), "{e}");
    assert!(
        e.to_string()
            .contains(&format!("format {}.", FORMAT_MAJOR + 1)),
        "{e}"
    );

    let img = make_image(tmp.path(), 1, None);
    patch_inventory(&img, |b| {
        b[10..12].copy_from_slice(&(FORMAT_MINOR + 1).to_le_bytes())
    });
    assert!(matches!(open_err(&img), ImageError::Version { .. }));
}

#[test]
fn other_architecture_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let img = make_image(tmp.path(), 0, None);
    let other: &[u8] = if std::env::consts::ARCH == "riscv64" {
        b"x86_64"
    } else {
        b"riscv64"
    };
    patch_inventory(&img, |b| {
        b[64..80].fill(0);
        b[64..64 + other.len()].copy_from_slice(other);
    });
    let e = open_err(&img);
    assert!(matches!(e, ImageError::Architecture { .. }), "{e}");
}

#[test]
fn bad_inventory_checksum_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let img = make_image(tmp.path(), 0, None);
    let inv = img.join("inventory");
    let mut b = std::fs::read(&inv).unwrap();
    b[40] ^= 1;
    std::fs::write(&inv, b).unwrap();
    assert!(matches!(open_err(&img), ImageError::Checksum { .. }));
}

#[test]
fn corrupt_region_table_and_section_are_checksum_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let img = make_image(tmp.path(), 0, None);
    let regions = img.join("regions");
    let mut b = std::fs::read(&regions).unwrap();
    b[40] ^= 1;
    std::fs::write(&regions, b).unwrap();
    assert!(matches!(open_err(&img), ImageError::Checksum { .. }));

    let img = make_image(tmp.path(), 1, None);
    std::fs::write(img.join("s-0"), b"process statX").unwrap();
    let r = ImageReader::open(&img).unwrap();
    let e = r.section("process").unwrap_err();
    assert!(e.to_string().contains("section `process`"), "{e}");
}

#[test]
fn unknown_required_section_is_refused_for_restore_and_optional_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let img = make_image(tmp.path(), 0, Some("future.device"));
    // Inspection lists it; restoring without understanding it is refused.
    assert!(ImageReader::open(&img).is_ok());
    let e = ImageReader::open_for_restore(&img, &["process"])
        .err()
        .expect("refused");
    assert!(
        matches!(&e, ImageError::UnknownRequiredSection { name } if name == "future.device"),
        "{e}"
    );
    // `extra` is optional and unknown: skipped.
    assert!(ImageReader::open_for_restore(&img, &["process", "future.device"]).is_ok());
    let plain = make_image(tmp.path(), 1, None);
    assert!(ImageReader::open_for_restore(&plain, &["process"]).is_ok());
}

#[test]
fn missing_directory_and_non_image_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let e = open_err(&tmp.path().join("nope"));
    assert!(matches!(e, ImageError::Missing { .. }));
    assert!(e.to_string().contains("does not exist"));
    let e = open_err(tmp.path());
    assert!(matches!(e, ImageError::NotAnImage { .. }));
}

#[test]
fn keep_newest_removes_only_older_complete_images() {
    let tmp = tempfile::tempdir().unwrap();
    let imgs: Vec<PathBuf> = (0..4).map(|s| make_image(tmp.path(), s, None)).collect();
    assert_eq!(list_images(tmp.path()).unwrap().len(), 4);
    assert_eq!(keep_newest(tmp.path(), 2).unwrap(), 2);
    let left: Vec<PathBuf> = list_images(tmp.path())
        .unwrap()
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(left, imgs[2..].to_vec());
    assert_eq!(latest_image(tmp.path()).unwrap(), Some(imgs[3].clone()));
    assert_eq!(keep_newest(tmp.path(), 0).unwrap(), 1, "n = 0 keeps one");
    assert!(imgs[3].exists());
}

/// Writes part of an image in a forked child that ends without committing (as a writer that
/// dies mid-write); returns the temporary directory's name.
fn die_mid_write(parent: &std::path::Path, opts: &WriterOptions) -> String {
    let mut w = ImageWriter::prepare(parent, opts).unwrap();
    let data = noise(200_000, 9);
    let meta = RegionMeta {
        start: 0x1000,
        len: data.len() as u64,
        prot: 3,
        flags: 0,
        offset: 0,
        name: b"",
    };
    // SAFETY: the child only uses the prepared writer (no allocation) and ends with _exit,
    // without cleaning up: what a killed writer leaves.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let ok = w.add_region(&meta, &data).is_ok();
        // SAFETY: ends the child without destructors.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child status {status:#x}");
    drop(w); // the parent only prepared: dropping its copy removes nothing
    let leftovers: Vec<String> = std::fs::read_dir(parent)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(".tmp-"))
        .collect();
    assert_eq!(leftovers.len(), 1, "{leftovers:?}");
    leftovers[0].clone()
}

#[test]
fn crash_mid_write_leaves_only_an_ignored_temporary() {
    let tmp = tempfile::tempdir().unwrap();
    let good = make_image(tmp.path(), 0, None);
    // A child starts a newer image and dies before commit. The pid in the name is this
    // (live) process's, as for a forked writer of a program that runs on: the leftover is
    // stale all the same, because nothing holds its lock.
    let opts = WriterOptions {
        chunk_size: 64 * 1024,
        seq: 1,
        pid: std::process::id(),
        ..Default::default()
    };
    let leftover = die_mid_write(tmp.path(), &opts);

    assert_eq!(latest_image(tmp.path()).unwrap(), Some(good.clone()));
    assert_eq!(
        keep_newest(tmp.path(), 1).unwrap(),
        0,
        "the complete image stays"
    );
    assert!(good.exists());
    assert!(
        !tmp.path().join(&leftover).exists(),
        "leftover of a dead writer is cleaned"
    );
    assert_eq!(clean_leftovers(tmp.path()).unwrap(), 0);
    let names: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 1, "only the complete image remains: {names:?}");
}

#[test]
fn temporary_of_a_writer_holding_its_lock_is_kept_whatever_its_pid() {
    let tmp = tempfile::tempdir().unwrap();
    // The pid in the name is long gone, but the writer (here, in this process) still writes.
    let opts = WriterOptions {
        chunk_size: 64 * 1024,
        seq: 1,
        pid: 999_999_999,
        ..Default::default()
    };
    let mut w = ImageWriter::prepare(tmp.path(), &opts).unwrap();
    w.add_section("note", false, b"in progress").unwrap();
    let temp = w.temp_path();
    assert!(temp.join("lock").is_file(), "a writer holds a lock file in its directory");
    assert_eq!(clean_leftovers(tmp.path()).unwrap(), 0);
    assert!(temp.exists(), "a live writer's directory is never removed");
    w.commit().unwrap();
    let img = w.final_path().to_path_buf();
    assert!(!img.join("lock").exists(), "a complete image has no lock file");
    ImageReader::open(&img).unwrap().verify().unwrap();
    assert_eq!(latest_image(tmp.path()).unwrap(), Some(img));
}

#[test]
fn remove_partial_removes_a_dead_writers_image_and_never_a_complete_one() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = WriterOptions { seq: 3, ..Default::default() };
    let w = ImageWriter::prepare(tmp.path(), &opts).unwrap();
    let data = noise(200_000, 5);
    let meta = RegionMeta { start: 0x1000, len: data.len() as u64, prot: 3, flags: 0, offset: 0, name: b"" };
    // SAFETY: as in die_mid_write.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let mut w = w;
        let ok = w.add_region(&meta, &data).is_ok();
        std::mem::forget(w);
        // SAFETY: ends the child without destructors.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(w.temp_path().exists());
    assert!(w.remove_partial().unwrap(), "the partial image was there");
    assert!(!w.temp_path().exists());
    assert!(!w.remove_partial().unwrap(), "nothing left the second time");

    let mut done = ImageWriter::prepare(tmp.path(), &WriterOptions { seq: 4, ..Default::default() }).unwrap();
    done.add_region(&meta, &data).unwrap();
    done.commit().unwrap();
    assert!(!done.remove_partial().unwrap());
    ImageReader::open(done.final_path()).unwrap().verify().unwrap();
}

#[test]
fn temporary_of_a_live_writer_is_kept_and_symlinked_file_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join(format!(
        ".tmp-ckpt-20261122T223722.123Z-{}-9",
        std::process::id()
    ));
    std::fs::create_dir(&live).unwrap();
    make_image(tmp.path(), 0, None);
    keep_newest(tmp.path(), 1).unwrap();
    assert!(
        live.exists(),
        "a write in progress (live pid) is not removed"
    );

    let img = make_image(tmp.path(), 1, None);
    std::fs::remove_file(img.join("pages")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", img.join("pages")).unwrap();
    let e = open_err(&img);
    assert!(
        matches!(e, ImageError::Io { .. } | ImageError::Corrupt { .. }),
        "{e}"
    );
}

#[test]
fn failed_commit_leaves_no_image_and_no_temporary() {
    let tmp = tempfile::tempdir().unwrap();
    let mut w = ImageWriter::prepare(
        tmp.path(),
        &WriterOptions {
            seq: 5,
            ..Default::default()
        },
    )
    .unwrap();
    w.add_section("a", false, b"x").unwrap();
    // Someone creates the final name first: the rename must not replace it.
    std::fs::create_dir(w.final_path()).unwrap();
    std::fs::write(w.final_path().join("keep"), b"k").unwrap();
    assert!(w.commit().is_err());
    assert!(w.final_path().join("keep").exists());
    let names: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

#[test]
fn images_are_private_to_the_owner() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let img = make_image(tmp.path(), 0, None);
    assert_eq!(
        std::fs::metadata(&img).unwrap().permissions().mode() & 0o777,
        0o700
    );
    for f in ["inventory", "regions", "pages", "s-0"] {
        assert_eq!(
            std::fs::metadata(img.join(f)).unwrap().permissions().mode() & 0o777,
            0o600,
            "{f}"
        );
    }
}

mod fuzz {
    //! Random damage to the files of an image: the reader may refuse it, but never panics,
    //! and whatever it accepts reads back either correctly or with an error.
    use super::*;
    use proptest::prelude::*;

    fn damage(img: &Path, file: &str, edits: &[(usize, u8)], fix_inventory_crc: bool) {
        let p = img.join(file);
        let mut b = std::fs::read(&p).unwrap();
        if b.is_empty() {
            return;
        }
        for &(at, v) in edits {
            let i = at % b.len();
            b[i] = v;
        }
        if fix_inventory_crc && file == "inventory" {
            let n = b.len();
            let crc = crc32fast::hash(&b[..n - 4]);
            b[n - 4..].copy_from_slice(&crc.to_le_bytes());
        }
        std::fs::write(&p, b).unwrap();
    }

    /// One image written once (writing fsyncs, which is slow); each case damages a copy.
    fn template() -> &'static (tempfile::TempDir, PathBuf, Vec<u8>) {
        static T: std::sync::OnceLock<(tempfile::TempDir, PathBuf, Vec<u8>)> =
            std::sync::OnceLock::new();
        T.get_or_init(|| {
            let tmp = tempfile::tempdir().unwrap();
            let img = make_image(tmp.path(), 0, None);
            let data = ImageReader::open(&img).unwrap().read_region(0).unwrap();
            (tmp, img, data)
        })
    }

    fn copy_image(from: &Path, to: &Path) -> PathBuf {
        let dst = to.join(from.file_name().unwrap());
        std::fs::create_dir(&dst).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
        }
        dst
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
        #[test]
        fn damaged_image_never_panics_the_reader(
            file in prop::sample::select(vec!["inventory", "regions", "pages", "s-0"]),
            edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..6),
            fix in any::<bool>(),
        ) {
            let (_keep, template_img, original) = template();
            let tmp = tempfile::tempdir().unwrap();
            let img = copy_image(template_img, tmp.path());
            damage(&img, file, &edits, fix);
            if let Ok(mut r) = ImageReader::open(&img) {
                let _ = r.section("process");
                let _ = r.verify();
                if r.regions().len() == 1 {
                    if let Ok(d) = r.read_region(0) {
                        // Accepted data is the original: checksums catch the rest.
                        prop_assert!(&d == original, "damaged {} read back different data", file);
                    }
                }
            }
        }
    }
}

#[test]
fn write_failure_mid_image_keeps_previous_image_and_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let previous = make_image(tmp.path(), 0, None);
    let data = noise(4 << 20, 77);
    let opts = WriterOptions {
        seq: 1,
        ..Default::default()
    };
    let mut w = ImageWriter::prepare(tmp.path(), &opts).unwrap();
    let meta = RegionMeta {
        start: 0x1000,
        len: data.len() as u64,
        prot: 3,
        flags: 0,
        offset: 0,
        name: b"",
    };
    // A child whose files may not exceed 1 MiB: its writes fail with EFBIG as on a full
    // disk. The child only uses the writer (no allocation) and raw system calls.
    // SAFETY: see above; the child ends with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let lim = libc::rlimit {
            rlim_cur: 1 << 20,
            rlim_max: 1 << 20,
        };
        // SAFETY: plain system calls in the child.
        unsafe {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
        }
        let failed_as_expected = match w.add_region(&meta, &data) {
            Err(e) => e.parts_no_alloc().0 == "write pages file" && w.commit().is_err(),
            Ok(()) => false,
        };
        // SAFETY: ends the child without destructors.
        unsafe { libc::_exit(if failed_as_expected { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status:#x}"
    );
    drop(w); // the parent only prepared: dropping its copy removes nothing
    assert_eq!(latest_image(tmp.path()).unwrap(), Some(previous.clone()));
    ImageReader::open(&previous).unwrap().verify().unwrap();
    let names: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 1, "only the previous image remains: {names:?}");
}
