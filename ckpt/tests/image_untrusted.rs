//! Crafted images (checksums recomputed, so that only the reader's deeper checks can refuse
//! them): unknown section flags, misplaced chunk flags, lengths that would make the reader
//! allocate far more than the image holds. Each gives a one-line error, never an abort.

use std::path::{Path, PathBuf};

use crum_ckpt::image::{ImageReader, ImageWriter, RegionMeta, WriterOptions};

const ENTRY: usize = 112;
const HEADER: usize = 144;

/// An image with sections `process` and `note` and one small region of data, plus the
/// regions given.
fn image(parent: &Path, extra: &[RegionMeta]) -> PathBuf {
    let opts = WriterOptions { chunk_size: 64 * 1024, dir_name: Some("img".into()), ..Default::default() };
    let mut w = ImageWriter::prepare(parent, &opts).unwrap();
    w.add_section("process", true, b"process state").unwrap();
    w.add_section("note", false, b"a note").unwrap();
    let data = vec![7u8; 8192];
    let meta = RegionMeta { start: 0x4000_0000, len: 8192, prot: 3, flags: 0, offset: 0, name: b"[heap]" };
    w.add_region(&meta, &data).unwrap();
    for m in extra {
        w.add_region(m, &[]).unwrap();
    }
    w.commit().unwrap();
    w.final_path().to_path_buf()
}

/// Index of section `name` in the inventory.
fn entry_of(inv: &[u8], name: &str) -> usize {
    let n = u32::from_le_bytes(inv[12..16].try_into().unwrap()) as usize;
    (0..n)
        .find(|&i| {
            let f = &inv[HEADER + i * ENTRY..HEADER + i * ENTRY + 48];
            &f[..name.len()] == name.as_bytes() && f[name.len()] == 0
        })
        .unwrap_or_else(|| panic!("no section {name}"))
}

/// Rewrites the inventory through `edit` (given the bytes and the entry of `name`) and
/// recomputes its checksum.
fn edit_inventory(img: &Path, name: &str, edit: impl FnOnce(&mut [u8], usize)) {
    let p = img.join("inventory");
    let mut inv = std::fs::read(&p).unwrap();
    let at = HEADER + entry_of(&inv, name) * ENTRY;
    edit(&mut inv, at);
    let end = inv.len() - 4;
    let crc = crc32fast::hash(&inv[..end]);
    inv[end..].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&p, &inv).unwrap();
}

fn set_flags(img: &Path, name: &str, f: impl FnOnce(u32) -> u32) {
    edit_inventory(img, name, |inv, at| {
        let old = u32::from_le_bytes(inv[at + 48..at + 52].try_into().unwrap());
        inv[at + 48..at + 52].copy_from_slice(&f(old).to_le_bytes());
    });
}

fn open_err(img: &Path) -> String {
    match ImageReader::open(img) {
        Ok(_) => panic!("a crafted image opened"),
        Err(e) => {
            let e = e.to_string();
            assert!(!e.contains('\n'), "{e}");
            e
        }
    }
}

#[test]
fn unknown_section_flag_bits_are_refused() {
    for bit in [4u32, 1 << 31] {
        let tmp = tempfile::tempdir().unwrap();
        let img = image(tmp.path(), &[]);
        ImageReader::open(&img).unwrap();
        set_flags(&img, "note", |f| f | bit);
        let e = open_err(&img);
        assert!(e.contains("`note` has unknown flags"), "{e}");
    }
}

#[test]
fn the_chunked_flag_belongs_to_pages_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path(), &[]);
    set_flags(&img, "note", |f| f | 2);
    assert!(open_err(&img).contains("`note` is wrongly marked as chunked"));

    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path(), &[]);
    set_flags(&img, "pages", |f| f & !2);
    assert!(open_err(&img).contains("`pages` is wrongly marked as chunked"));
}

#[test]
fn a_metadata_section_larger_than_the_limit_is_refused_unread() {
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path(), &[]);
    // A sparse 2 GiB file under the note's name, its size in the inventory to match.
    let size = 2u64 << 30;
    let file = {
        let inv = std::fs::read(img.join("inventory")).unwrap();
        let at = HEADER + entry_of(&inv, "note") * ENTRY + 64;
        let f = &inv[at..at + 48];
        String::from_utf8(f[..f.iter().position(|&b| b == 0).unwrap()].to_vec()).unwrap()
    };
    std::fs::OpenOptions::new().write(true).open(img.join(&file)).unwrap().set_len(size).unwrap();
    edit_inventory(&img, "note", |inv, at| inv[at + 56..at + 64].copy_from_slice(&size.to_le_bytes()));
    let r = ImageReader::open(&img).unwrap();
    let e = r.section("note").unwrap_err().to_string();
    assert!(e.contains("more than the limit"), "{e}");
}

#[test]
fn a_region_longer_than_memory_reads_as_an_error_not_an_abort() {
    // A region of 2^62 bytes stored without data: its length costs the image nothing, and
    // `read_region` must not abort on the allocation (it did: `vec![0; len]`).
    let tmp = tempfile::tempdir().unwrap();
    let huge = RegionMeta { start: 0, len: 1 << 62, prot: 0, flags: 8, offset: 0, name: b"crum.device.data" };
    let img = image(tmp.path(), &[huge]);
    let mut r = ImageReader::open(&img).unwrap();
    let idx = r.regions().iter().position(|g| g.len == 1 << 62).unwrap();
    let e = r.read_region(idx).unwrap_err().to_string();
    assert!(e.contains("more than this process can allocate"), "{e}");
    // The small region still reads.
    assert_eq!(r.read_region(0).unwrap(), vec![7u8; 8192]);
}

#[test]
fn a_section_name_or_file_with_a_control_character_is_refused_in_one_line() {
    // Found by the fuzzer (restart/tests/image_fuzz.rs): the error printed the name as it
    // was, newline included.
    for (field, at) in [("name", 1usize), ("file", 64 + 1)] {
        let tmp = tempfile::tempdir().unwrap();
        let img = image(tmp.path(), &[]);
        edit_inventory(&img, "note", |inv, entry| inv[entry + at] = b'\n');
        let e = open_err(&img);
        assert!(e.contains("invalid name or file name") && e.contains("\\n"), "{field}: {e}");
    }
}
