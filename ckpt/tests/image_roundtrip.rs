//! Image round trips: what the writer stores, the reader gives back byte for byte.

mod common;
use common::noise;
use crum_ckpt::image::{
    latest_image, Encoding, ImageReader, ImageWriter, RegionMeta, WriterOptions,
};
use proptest::prelude::*;

const PAGE: usize = 4096;

fn opts(chunk: u32) -> WriterOptions {
    WriterOptions {
        chunk_size: chunk,
        ..Default::default()
    }
}

/// Deterministic pseudo-random bytes (xorshift), incompressible.

#[test]
fn mixed_region_round_trips_and_skips_zero_pages() {
    let tmp = tempfile::tempdir().unwrap();
    let mut data = vec![0u8; 64 * PAGE + 100];
    data[5 * PAGE..6 * PAGE].copy_from_slice(&noise(PAGE, 1));
    data[20 * PAGE..30 * PAGE].fill(0xab);
    *data.last_mut().unwrap() = 7;
    let mut w = ImageWriter::prepare(tmp.path(), &opts(64 * 1024)).unwrap();
    w.add_section("process", true, b"hello").unwrap();
    let meta = RegionMeta {
        start: 0x7000_0000,
        len: data.len() as u64,
        prot: 3,
        flags: 9,
        offset: 0,
        name: b"[heap]",
    };
    w.add_region(&meta, &data).unwrap();
    w.add_region(
        &RegionMeta {
            start: 0x1000,
            len: 4096,
            prot: 0,
            flags: 0,
            offset: 0,
            name: b"[vvar]",
        },
        &[],
    )
    .unwrap();
    w.commit().unwrap();
    let path = w.final_path().to_path_buf();
    drop(w);

    assert_eq!(latest_image(tmp.path()).unwrap(), Some(path.clone()));
    let mut r = ImageReader::open(&path).unwrap();
    assert_eq!(
        r.section("process").unwrap().as_deref(),
        Some(&b"hello"[..])
    );
    assert_eq!(r.section("absent").unwrap(), None);
    let reg = r.regions()[0].clone();
    assert_eq!(
        (reg.start, reg.prot, reg.flags, reg.name.as_slice()),
        (0x7000_0000, 3, 9, &b"[heap]"[..])
    );
    // 1 noise page + 10 pages of 0xab + the partial last page: zero pages are not stored.
    assert_eq!(reg.nonzero_bytes(), (11 * PAGE + 100) as u64);
    assert!(reg.chunks.iter().any(|c| c.encoding == Encoding::Zero));
    assert_eq!(r.read_region(0).unwrap(), data);
    let mut dst = vec![0x55u8; data.len()];
    r.read_region_into(0, &mut dst).unwrap();
    assert_eq!(dst, data);
    assert!(!r.regions()[1].has_data);
    r.verify().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn random_regions_round_trip(regions in prop::collection::vec(
        (1usize..40, prop::collection::vec(0u8..4, 1..40), any::<u64>(), 0usize..PAGE), 1..5))
    {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = ImageWriter::prepare(tmp.path(), &opts(64 * 1024)).unwrap();
        let mut expect = Vec::new();
        for (i, (pages, kinds, seed, tail)) in regions.iter().enumerate() {
            let mut d = Vec::new();
            for p in 0..*pages {
                match kinds[p % kinds.len()] {
                    0 => d.extend(std::iter::repeat_n(0u8, PAGE)),
                    1 => d.extend(noise(PAGE, seed.wrapping_add(p as u64))),
                    2 => d.extend((0..PAGE).map(|b| (b / 64) as u8)),
                    _ => d.extend(std::iter::repeat_n(p as u8, PAGE)),
                }
            }
            d.extend(noise(*tail, *seed));
            let meta = RegionMeta { start: (i as u64 + 1) << 32, len: d.len() as u64, prot: 1, flags: 0, offset: 0, name: b"r" };
            w.add_region(&meta, &d).unwrap();
            expect.push(d);
        }
        w.commit().unwrap();
        let mut r = ImageReader::open(w.final_path()).unwrap();
        prop_assert_eq!(r.regions().len(), expect.len());
        for (i, d) in expect.iter().enumerate() {
            prop_assert_eq!(&r.read_region(i).unwrap(), d);
        }
    }
}

#[test]
fn empty_image_round_trips() {
    let tmp = tempfile::tempdir().unwrap();
    let mut w = ImageWriter::prepare(tmp.path(), &WriterOptions::default()).unwrap();
    w.commit().unwrap();
    let mut r = ImageReader::open(w.final_path()).unwrap();
    assert!(r.regions().is_empty());
    // regions, pages and the (empty) chunk hashes.
    assert_eq!(r.inventory().sections.len(), 3);
    r.verify().unwrap();
}

#[test]
fn writer_refuses_bad_input_with_clear_errors() {
    use crum_ckpt::image::ImageError;
    let tmp = tempfile::tempdir().unwrap();
    let opts = WriterOptions {
        max_sections: 1,
        ..Default::default()
    };
    let mut w = ImageWriter::prepare(tmp.path(), &opts).unwrap();
    assert!(matches!(
        w.add_section("regions", true, b""),
        Err(ImageError::Invalid(_))
    ));
    assert!(matches!(
        w.add_section(&"x".repeat(48), true, b""),
        Err(ImageError::Invalid(_))
    ));
    w.add_section("a", true, b"1").unwrap();
    assert!(matches!(
        w.add_section("a", true, b"2"),
        Err(ImageError::Invalid(_))
    ));
    assert!(matches!(
        w.add_section("b", true, b"2"),
        Err(ImageError::Capacity(_))
    ));
    let meta = RegionMeta {
        start: 0,
        len: 8192,
        prot: 0,
        flags: 0,
        offset: 0,
        name: b"",
    };
    assert!(matches!(
        w.add_region(&meta, &[1u8; 4096]),
        Err(ImageError::Invalid(_))
    ));
    let wrap = RegionMeta {
        start: u64::MAX - 10,
        len: 100,
        ..meta
    };
    assert!(matches!(
        w.add_region(&wrap, &[]),
        Err(ImageError::Invalid(_))
    ));
    // Validation errors leave the writer usable.
    w.add_region(&meta, &[2u8; 8192]).unwrap();
    w.commit().unwrap();
    assert!(w.commit().is_err(), "a second commit is refused");
    let mut r = ImageReader::open(w.final_path()).unwrap();
    assert_eq!(r.read_region(0).unwrap(), vec![2u8; 8192]);
    assert!(matches!(
        r.read_region_into(0, &mut [0u8; 10]),
        Err(ImageError::DestinationSize { .. })
    ));
    assert!(matches!(
        r.read_region(5),
        Err(ImageError::NoSuchRegion { .. })
    ));

    for (chunk, level) in [(1000, 1), (32 * 1024, 1), (4 << 20, 42)] {
        let o = WriterOptions {
            chunk_size: chunk,
            level,
            ..Default::default()
        };
        assert!(matches!(
            ImageWriter::prepare(tmp.path(), &o),
            Err(ImageError::Invalid(_))
        ));
    }
}

#[test]
fn level_zero_stores_raw_chunks_that_read_back() {
    let tmp = tempfile::tempdir().unwrap();
    let o = WriterOptions {
        level: 0,
        chunk_size: 64 * 1024,
        ..Default::default()
    };
    let mut w = ImageWriter::prepare(tmp.path(), &o).unwrap();
    let d: Vec<u8> = (0..200_000u32).map(|i| (i / 3) as u8).collect();
    w.add_region(
        &RegionMeta {
            start: 0x1000,
            len: d.len() as u64,
            prot: 0,
            flags: 0,
            offset: 0,
            name: b"",
        },
        &d,
    )
    .unwrap();
    w.commit().unwrap();
    let mut r = ImageReader::open(w.final_path()).unwrap();
    assert!(r.regions()[0]
        .chunks
        .iter()
        .all(|c| c.encoding == Encoding::Raw));
    assert_eq!(r.read_region(0).unwrap(), d);
}

#[test]
fn full_raw_chunks_are_mappable_at_their_offset() {
    use std::os::unix::fs::FileExt;
    let tmp = tempfile::tempdir().unwrap();
    let mut d = noise(128 * 1024, 5);
    d[70_000..80_000].fill(0); // chunk 1 has zero pages: not mappable
    d[64 * 1024 + 4096 * 3..64 * 1024 + 4096 * 4].fill(0);
    let mut w = ImageWriter::prepare(tmp.path(), &opts(64 * 1024)).unwrap();
    w.add_region(
        &RegionMeta {
            start: 0x1000,
            len: d.len() as u64,
            prot: 0,
            flags: 0,
            offset: 0,
            name: b"",
        },
        &d,
    )
    .unwrap();
    w.commit().unwrap();
    let r = ImageReader::open(w.final_path()).unwrap();
    let off = r.mappable_chunk(0, 0).expect("chunk 0 is raw and full");
    let mut buf = vec![0u8; 64 * 1024];
    r.pages_file().read_exact_at(&mut buf, off).unwrap();
    assert_eq!(buf, d[..64 * 1024]);
    assert_eq!(r.mappable_chunk(0, 1), None);
    assert_eq!(r.mappable_chunk(0, 2), None);
}

#[test]
fn parallel_read_matches_serial_read() {
    let tmp = tempfile::tempdir().unwrap();
    let mut d = noise(40 * PAGE, 11);
    d[3 * PAGE..9 * PAGE].fill(0);
    d[20 * PAGE..35 * PAGE]
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = (i / 99) as u8);
    let mut w = ImageWriter::prepare(tmp.path(), &opts(64 * 1024)).unwrap();
    w.add_region(
        &RegionMeta {
            start: 0x1000,
            len: d.len() as u64,
            prot: 0,
            flags: 0,
            offset: 0,
            name: b"",
        },
        &d,
    )
    .unwrap();
    w.commit().unwrap();
    let mut r = ImageReader::open(w.final_path()).unwrap();
    for threads in [1, 2, 3, 16] {
        let mut dst = vec![0u8; d.len()];
        r.read_region_into_zeroed_parallel(0, &mut dst, threads)
            .unwrap();
        assert!(dst == d, "{threads} threads");
    }
}
