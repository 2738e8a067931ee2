//! Image benchmark (ignored in the test suite; run by `scripts/bench-image.sh`): for random,
//! compressible and sparse memory of the sizes in `BENCH_SIZES_MIB` (default 256,1024),
//! writes an image into `BENCH_DIR` and prints one line per case: image size against memory,
//! write throughput against a plain `write`+`fsync` of the same bytes to the same disk, and
//! restore throughput (decompressing into fresh anonymous memory, as restart does) against
//! reading the image files into a reused buffer and into fresh anonymous memory (restart has
//! to create the process's memory; on virtual machines first-touch page faults can cost more
//! than the disk). With `BENCH_DROP_CACHES=1` (root) reads start cold; `BENCH_THREADS`
//! restores with that many threads (default 1).
#![allow(unsafe_code)]

use std::io::{Read, Write};
use std::path::Path;
use std::time::Instant;

use crum_ckpt::image::{ImageReader, ImageWriter, RegionMeta, WriterOptions};

/// Anonymous private mapping of `len` bytes (zero until touched, like process memory).
struct Mem {
    ptr: *mut u8,
    len: usize,
}

impl Mem {
    fn new(len: usize) -> Mem {
        // SAFETY: anonymous mapping; checked for failure below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        Mem { ptr: p.cast(), len }
    }
    fn slice(&self) -> &[u8] {
        // SAFETY: the mapping is `len` bytes, readable, alive while `self` is.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    fn slice_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, writable, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping created in `new`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

fn fill(kind: &str, m: &mut [u8]) {
    let mut x = 0x2545F4914F6CDD1Du64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    match kind {
        "random" => {
            for w in m.chunks_exact_mut(8) {
                w.copy_from_slice(&next().to_le_bytes());
            }
        }
        // Numeric arrays as programs hold them: slowly varying f32 values with noisy low bits.
        "compressible" => {
            for (i, w) in m.chunks_exact_mut(4).enumerate() {
                let v = ((i / 64) as f32 * 0.25) + (next() % 4) as f32 * 0.001;
                w.copy_from_slice(&v.to_le_bytes());
            }
        }
        // 1 page in 8 touched with random data, the rest never touched (zero).
        "sparse" => {
            for page in m.chunks_exact_mut(4096).step_by(8) {
                for w in page.chunks_exact_mut(8) {
                    w.copy_from_slice(&next().to_le_bytes());
                }
            }
        }
        _ => panic!("unknown kind {kind}"),
    }
}

fn drop_caches() -> bool {
    std::env::var("BENCH_DROP_CACHES").is_ok_and(|v| !v.is_empty()) && {
        // SAFETY: plain system call.
        unsafe { libc::sync() };
        std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
    }
}

fn dir_size(p: &Path) -> u64 {
    std::fs::read_dir(p)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

fn mbps(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / secs / 1e6
}

#[test]
#[ignore = "benchmark; run scripts/bench-image.sh"]
fn bench_image() {
    let dir = std::path::PathBuf::from(
        std::env::var("BENCH_DIR").unwrap_or_else(|_| "target/bench-image".into()),
    );
    let sizes: Vec<usize> = std::env::var("BENCH_SIZES_MIB")
        .unwrap_or_else(|_| "256,1024".into())
        .split(',')
        .map(|s| s.trim().parse().unwrap())
        .collect();
    let threads: usize = std::env::var("BENCH_THREADS")
        .ok()
        .map(|s| s.parse().unwrap())
        .unwrap_or(1);
    let level: i32 = std::env::var("BENCH_LEVEL")
        .ok()
        .map(|s| s.parse().unwrap())
        .unwrap_or(1);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    println!(
        "{:<13} {:>5} {:>9} {:>7} {:>10} {:>10} {:>6} {:>12} {:>10} {:>6} {:>10} {:>6} {:>5}",
        "data",
        "MiB",
        "image_MB",
        "ratio",
        "write_MB/s",
        "plain_MB/s",
        "w/pl",
        "restore_MB/s",
        "readf_MB/s",
        "r/rf",
        "readm_MB/s",
        "r/rm",
        "cold"
    );
    let reps: usize = std::env::var("BENCH_REPS")
        .ok()
        .map(|s| s.parse().unwrap())
        .unwrap_or(2);
    for &mib in &sizes {
        for kind in ["random", "compressible", "sparse"] {
            let len = mib << 20;
            let mut mem = Mem::new(len);
            fill(kind, mem.slice_mut());
            // Alternate baseline and image `reps` times and keep the best of each: the disk
            // of a virtual machine varies a lot from one write to the next.
            let (mut plain_s, mut write_s, mut readf_s, mut restore_s) =
                (f64::MAX, f64::MAX, f64::MAX, f64::MAX);
            let mut readm_s = f64::MAX;
            let mut img_bytes = 0;
            let mut cold = false;
            for rep in 0..reps {
                // Baseline: the same bytes written plainly to the same disk, fsynced.
                let plain = dir.join("plain.bin");
                let t = Instant::now();
                {
                    let mut f = std::fs::File::create(&plain).unwrap();
                    for c in mem.slice().chunks(4 << 20) {
                        f.write_all(c).unwrap();
                    }
                    f.sync_all().unwrap();
                }
                plain_s = plain_s.min(t.elapsed().as_secs_f64());
                std::fs::remove_file(&plain).unwrap();

                // The image, timed from prepare to the fsynced rename.
                let t = Instant::now();
                let opts = WriterOptions {
                    level,
                    seq: (mib * 100 + rep) as u64,
                    ..Default::default()
                };
                let mut w = ImageWriter::prepare(&dir, &opts).unwrap();
                let meta = RegionMeta {
                    start: 0x7f00_0000_0000,
                    len: len as u64,
                    prot: 3,
                    flags: 0,
                    offset: 0,
                    name: b"bench",
                };
                w.add_region(&meta, mem.slice()).unwrap();
                w.commit().unwrap();
                write_s = write_s.min(t.elapsed().as_secs_f64());
                let img = w.final_path().to_path_buf();
                drop(w);
                img_bytes = dir_size(&img);

                // Baseline: reading the image's files.
                cold = drop_caches();
                let t = Instant::now();
                let mut buf = vec![0u8; 4 << 20];
                for e in std::fs::read_dir(&img).unwrap() {
                    let mut f = std::fs::File::open(e.unwrap().path()).unwrap();
                    while f.read(&mut buf).unwrap() > 0 {}
                }
                readf_s = readf_s.min(t.elapsed().as_secs_f64());

                // Baseline: reading the image's files into fresh anonymous memory.
                drop_caches();
                let t = Instant::now();
                let mut into = Mem::new(img_bytes.next_multiple_of(4 << 20) as usize);
                let mut at = 0;
                for e in std::fs::read_dir(&img).unwrap() {
                    let mut f = std::fs::File::open(e.unwrap().path()).unwrap();
                    loop {
                        let part = &mut into.slice_mut()[at..at + (4 << 20)];
                        // SAFETY: `part` is a live, page-aligned 4 MiB range of our mapping.
                        unsafe {
                            libc::madvise(
                                part.as_mut_ptr().cast(),
                                part.len(),
                                libc::MADV_POPULATE_WRITE,
                            )
                        };
                        let n = f.read(part).unwrap();
                        if n == 0 {
                            break;
                        }
                        at += n.next_multiple_of(4096);
                        if at + (4 << 20) > into.len {
                            at = 0;
                        }
                    }
                }
                drop(into);
                readm_s = readm_s.min(t.elapsed().as_secs_f64());

                // Restore: into fresh anonymous memory, as restart fills the address space.
                drop_caches();
                let t = Instant::now();
                let mut r = ImageReader::open(&img).unwrap();
                let mut dst = Mem::new(len);
                r.read_region_into_zeroed_parallel(0, dst.slice_mut(), threads)
                    .unwrap();
                restore_s = restore_s.min(t.elapsed().as_secs_f64());
                assert!(
                    dst.slice() == mem.slice(),
                    "{kind}: restored memory differs"
                );
                std::fs::remove_dir_all(&img).unwrap();
            }

            println!(
                "{:<13} {:>5} {:>9.1} {:>7.2} {:>10.0} {:>10.0} {:>6.2} {:>12.0} {:>10.0} {:>6.2} {:>10.0} {:>6.2} {:>5}",
                kind,
                mib,
                img_bytes as f64 / 1e6,
                len as f64 / img_bytes.max(1) as f64,
                mbps(len as u64, write_s),
                mbps(len as u64, plain_s),
                plain_s / write_s,
                mbps(len as u64, restore_s),
                mbps(img_bytes, readf_s),
                readf_s / restore_s,
                mbps(img_bytes, readm_s),
                readm_s / restore_s,
                if cold { "yes" } else { "no" }
            );
        }
    }
}
