//! Golden image: a small image committed under `tests/golden/` as a change detector. The
//! reader must keep reading it, and the writer must keep producing the same bytes from the
//! same input. An intended format change bumps the version and regenerates it with
//! `CRUM_REGENERATE_GOLDEN=1 cargo test -p crum-ckpt --test image_golden`; the images of
//! earlier versions stay, and must still be read (`image-1.0`: before the `chunks` section).

use std::path::{Path, PathBuf};

use crum_ckpt::image::{
    Encoding, ImageReader, ImageWriter, RegionMeta, WriterOptions, FORMAT_MAJOR, FORMAT_MINOR,
};

const NAME: &str = "image-1.1";
/// The golden image of format 1.0 (no `chunks` section), read by every later reader.
const NAME_1_0: &str = "image-1.0";
const CREATED: u64 = 1_795_387_042_123;

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn regions() -> Vec<(RegionMeta<'static>, Vec<u8>)> {
    let mut x = 0x9e3779b97f4a7c15u64;
    let mut a: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    a.extend(std::iter::repeat_n(0u8, 4096));
    a.extend((0..4096).map(|i| (i % 7) as u8));
    let b: Vec<u8> = (0..80 * 1024).map(|i| (i / 1000) as u8).collect();
    vec![
        (
            RegionMeta {
                start: 0x5555_0000_0000,
                len: a.len() as u64,
                prot: 3,
                flags: 1,
                offset: 0,
                name: b"[heap]",
            },
            a,
        ),
        (
            RegionMeta {
                start: 0x7f00_0000_0000,
                len: b.len() as u64,
                prot: 1,
                flags: 2,
                offset: 0x2000,
                name: b"/usr/lib/libx.so",
            },
            b,
        ),
        (
            RegionMeta {
                start: 0x7fff_0000_0000,
                len: 8192,
                prot: 1,
                flags: 4,
                offset: 0,
                name: b"[vvar]",
            },
            Vec::new(),
        ),
    ]
}

fn write_golden(parent: &Path) -> PathBuf {
    let opts = WriterOptions {
        pid: 4242,
        seq: 1,
        chunk_size: 64 * 1024,
        level: 3,
        dir_name: Some(NAME.into()),
        created_unix_ms: Some(CREATED),
        kernel_release: Some("6.0.0-golden".into()),
        ..Default::default()
    };
    let mut w = ImageWriter::prepare(parent, &opts).unwrap();
    w.add_section("process", true, b"golden process state")
        .unwrap();
    w.add_section("note", false, b"optional note").unwrap();
    for (m, d) in regions() {
        w.add_region(&m, &d).unwrap();
    }
    w.commit().unwrap();
    w.final_path().to_path_buf()
}

fn applicable() -> bool {
    // The golden image is x86_64 with 4 KiB pages.
    std::env::consts::ARCH == "x86_64"
        && nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            == Some(4096)
}

#[test]
fn golden_image_reads_back_its_known_contents() {
    if std::env::var_os("CRUM_REGENERATE_GOLDEN").is_some() {
        let _ = std::fs::remove_dir_all(golden_dir().join(NAME));
        write_golden(&golden_dir());
    }
    if !applicable() {
        return;
    }
    let r = check_golden(NAME, (FORMAT_MAJOR, FORMAT_MINOR), &["regions", "pages", "chunks", "process", "note"]);
    assert_eq!(r.chunk_hashes().unwrap().map(|h| h.len()), Some(3));
}

#[test]
fn golden_image_of_format_1_0_still_reads() {
    if !applicable() {
        return;
    }
    let r = check_golden(NAME_1_0, (1, 0), &["regions", "pages", "process", "note"]);
    assert_eq!(r.chunk_hashes().unwrap(), None);
}

fn check_golden(name: &str, version: (u16, u16), sections: &[&str]) -> ImageReader {
    let mut r = ImageReader::open(&golden_dir().join(name)).unwrap();
    let inv = r.inventory().clone();
    assert_eq!((inv.major, inv.minor), version);
    assert_eq!(inv.arch, "x86_64");
    assert_eq!(inv.kernel_release, "6.0.0-golden");
    assert_eq!(inv.page_size, 4096);
    assert_eq!(inv.created_unix_ms, CREATED);
    assert!(inv.producer.starts_with("crum "));
    let names: Vec<&str> = inv.sections.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, sections);
    assert_eq!(
        r.section("process").unwrap().unwrap(),
        b"golden process state"
    );
    assert_eq!(r.section("note").unwrap().unwrap(), b"optional note");
    let expect = regions();
    assert_eq!(r.regions().len(), 3);
    for (i, (m, d)) in expect.iter().enumerate() {
        let g = r.regions()[i].clone();
        assert_eq!(
            (g.start, g.len, g.prot, g.flags, g.file_offset),
            (m.start, m.len, m.prot, m.flags, m.offset)
        );
        assert_eq!(g.name, m.name);
        assert_eq!(g.has_data, !d.is_empty());
        if g.has_data {
            assert_eq!(&r.read_region(i).unwrap(), d);
        }
    }
    let enc: Vec<Encoding> = r.regions()[..2]
        .iter()
        .flat_map(|g| g.chunks.iter().map(|c| c.encoding))
        .collect();
    assert_eq!(enc, [Encoding::Zstd, Encoding::Zstd, Encoding::Zstd]);
    assert_eq!(
        r.regions()[0].nonzero_bytes(),
        8192,
        "the zero page is not stored"
    );
    r.verify().unwrap();
    r
}

#[test]
fn writer_reproduces_golden_image_byte_for_byte() {
    if !applicable() || std::env::var_os("CRUM_REGENERATE_GOLDEN").is_some() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let fresh = write_golden(tmp.path());
    let golden = golden_dir().join(NAME);
    for f in ["regions", "pages", "chunks", "s-0", "s-1"] {
        assert_eq!(
            std::fs::read(fresh.join(f)).unwrap(),
            std::fs::read(golden.join(f)).unwrap(),
            "file {f} changed"
        );
    }
    // The inventory differs only in the producer version string (bytes 32..64).
    let (a, b) = (
        std::fs::read(fresh.join("inventory")).unwrap(),
        std::fs::read(golden.join("inventory")).unwrap(),
    );
    assert_eq!(a.len(), b.len());
    let n = a.len() - 4;
    assert_eq!(
        (&a[..32], &a[64..n]),
        (&b[..32], &b[64..n]),
        "inventory layout changed"
    );
}
