//! Incremental images (issue 15): an image written against a base keeps unchanged chunks
//! in the earlier image that stores them, reads back byte for byte through its chain, and
//! is refused, naming the earlier image, when that image is gone or not the one it was
//! written against. Rotation keeps what a kept image needs.

mod common;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::noise;
use crum_ckpt::image::{
    keep_newest, read_chain, Base, Encoding, ImageError, ImageReader, ImageWriter, RegionMeta, WriterOptions,
};

const CHUNK: usize = 64 * 1024;

/// Writes one image of a heap region holding `heap` and a hook-section-like blob region
/// (start 0, named) holding `blob`, on `base`; returns its path.
fn write(dir: &Path, seq: u64, heap: &[u8], blob: &[u8], base: Option<&Path>) -> PathBuf {
    let base = base.map(|b| Arc::new(Base::from_image(b, 8).unwrap().expect("a base")));
    let opts = WriterOptions { chunk_size: CHUNK as u32, seq, base, ..Default::default() };
    let mut w = ImageWriter::prepare(dir, &opts).unwrap();
    w.add_section("process", true, b"state").unwrap();
    let heap_meta = RegionMeta { start: 0x5000_0000, len: heap.len() as u64, prot: 3, flags: 0, offset: 0, name: b"[heap]" };
    w.add_region(&heap_meta, heap).unwrap();
    let blob_meta = RegionMeta { start: 0, len: blob.len() as u64, prot: 0, flags: 8, offset: 0, name: b"crum.device.data" };
    w.add_region(&blob_meta, blob).unwrap();
    w.commit().unwrap();
    w.final_path().to_path_buf()
}

fn stored(r: &ImageReader) -> u64 {
    r.regions().iter().map(|g| g.stored_bytes()).sum()
}

fn read_all(p: &Path) -> (Vec<u8>, Vec<u8>) {
    let mut r = ImageReader::open(p).unwrap();
    r.verify().unwrap();
    (r.read_region(0).unwrap(), r.read_region(1).unwrap())
}

#[test]
fn a_chain_of_images_stores_only_changed_chunks_and_reads_back_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let mut heap = noise(16 * CHUNK, 1);
    let mut blob = noise(4 * CHUNK, 2);
    let a = write(tmp.path(), 1, &heap, &blob, None);
    let ra = ImageReader::open(&a).unwrap();
    assert!(ra.chain().is_empty());
    let full = stored(&ra);

    // One chunk of the heap changes, one page of it drops to zeros (MADV_DONTNEED), a
    // chunk of the blob changes.
    heap[3 * CHUNK + 5] ^= 0xff;
    heap[9 * CHUNK..9 * CHUNK + 4096].fill(0);
    blob[CHUNK..2 * CHUNK].copy_from_slice(&noise(CHUNK, 3));
    let b = write(tmp.path(), 2, &heap, &blob, Some(&a));
    let rb = ImageReader::open(&b).unwrap();
    assert_eq!(rb.chain().len(), 1);
    assert_eq!(rb.chain()[0].name, a.file_name().unwrap().to_str().unwrap());
    let enc: Vec<Encoding> = rb.regions()[0].chunks.iter().map(|c| c.encoding).collect();
    let own: Vec<usize> = (0..16).filter(|&i| rb.regions()[0].chunks[i].file == 0).collect();
    assert_eq!(own, [3, 9], "{enc:?}");
    assert!(stored(&rb) * 5 < full, "{} of {full} bytes", stored(&rb));
    assert_eq!(read_all(&b), (heap.clone(), blob.clone()));

    // A third image: unchanged chunks point straight at the image storing them.
    heap[15 * CHUNK] ^= 1;
    let c = write(tmp.path(), 3, &heap, &blob, Some(&b));
    let rc = ImageReader::open(&c).unwrap();
    assert_eq!(rc.chain().len(), 2);
    let files: Vec<u8> = rc.regions()[0].chunks.iter().map(|c| c.file).collect();
    assert_eq!(files[0], 1, "stored in the first image");
    assert_eq!(files[3], 2, "stored in the second image");
    assert_eq!(files[15], 0, "stored here");
    assert_eq!(read_all(&c), (heap.clone(), blob.clone()));
    // The middle image is still whole on its own.
    assert_eq!(read_chain(&c).unwrap().len(), 2);
    assert_eq!(read_all(&b).0[15 * CHUNK], heap[15 * CHUNK] ^ 1);
}

#[test]
fn an_image_whose_earlier_image_is_gone_or_replaced_is_refused_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let heap = noise(4 * CHUNK, 4);
    let blob = noise(CHUNK, 5);
    let a = write(tmp.path(), 1, &heap, &blob, None);
    let b = write(tmp.path(), 2, &heap, &blob, Some(&a));
    assert_eq!(read_all(&b), (heap.clone(), blob.clone()));

    // Replaced by another image of the same name: refused (inventory checksum).
    let other = tempfile::tempdir().unwrap();
    let a2 = write(other.path(), 1, &noise(4 * CHUNK, 6), &blob, None);
    let aside = tmp.path().join("aside");
    std::fs::rename(&a, &aside).unwrap();
    std::fs::rename(&a2, &a).unwrap();
    let e = ImageReader::open(&b).err().expect("refused");
    assert!(matches!(e, ImageError::Chain { .. }), "{e}");
    assert!(e.to_string().contains(a.file_name().unwrap().to_str().unwrap()), "{e}");

    // Gone: refused, naming it.
    std::fs::remove_dir_all(&a).unwrap();
    let e = ImageReader::open(&b).err().expect("refused");
    assert!(e.to_string().contains("cannot be opened"), "{e}");
    std::fs::rename(&aside, &a).unwrap();
    assert_eq!(read_all(&b), (heap, blob));
}

#[test]
fn a_base_of_another_chunk_size_gives_a_full_image() {
    let tmp = tempfile::tempdir().unwrap();
    let heap = noise(8 * CHUNK, 11);
    let blob = noise(CHUNK, 12);
    let a = write(tmp.path(), 1, &heap, &blob, None);
    let base = Arc::new(Base::from_image(&a, 8).unwrap().unwrap());
    let opts = WriterOptions { chunk_size: (2 * CHUNK) as u32, seq: 2, base: Some(base), ..Default::default() };
    let mut w = ImageWriter::prepare(tmp.path(), &opts).unwrap();
    let meta = RegionMeta { start: 0x5000_0000, len: heap.len() as u64, prot: 3, flags: 0, offset: 0, name: b"[heap]" };
    w.add_region(&meta, &heap).unwrap();
    w.commit().unwrap();
    let mut r = ImageReader::open(w.final_path()).unwrap();
    assert!(r.chain().is_empty());
    assert_eq!(r.read_region(0).unwrap(), heap);
}

#[test]
fn rotation_keeps_the_images_a_kept_image_needs() {
    let tmp = tempfile::tempdir().unwrap();
    let heap = noise(4 * CHUNK, 7);
    let blob = noise(CHUNK, 8);
    let a = write(tmp.path(), 1, &heap, &blob, None);
    // Distinct creation stamps: names sort by time.
    std::thread::sleep(std::time::Duration::from_millis(5));
    let b = write(tmp.path(), 2, &heap, &blob, Some(&a));
    std::thread::sleep(std::time::Duration::from_millis(5));
    let c = write(tmp.path(), 3, &noise(4 * CHUNK, 9), &noise(CHUNK, 10), None);
    // Keep 1: c is full, so a and b go; keep 2 before that: b needs a, which stays.
    assert_eq!(keep_newest(tmp.path(), 2).unwrap(), 0);
    assert!(a.exists() && b.exists() && c.exists());
    assert_eq!(read_all(&b), (heap, blob));
    assert_eq!(keep_newest(tmp.path(), 1).unwrap(), 2);
    assert!(!a.exists() && !b.exists() && c.exists());
}
