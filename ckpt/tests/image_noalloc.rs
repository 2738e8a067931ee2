//! The image writer must not allocate after `prepare`: it runs in the forked child of a
//! multi-threaded process, where malloc's lock may be held forever by a thread that does not
//! exist in the child. A counting global allocator proves it, and a real fork writes an image
//! with every allocation in the child turned into a failure exit.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crum_ckpt::image::{ImageReader, ImageWriter, RegionMeta, WriterOptions};

struct Counting;

static COUNT: AtomicUsize = AtomicUsize::new(0);
/// Set in a forked child: any allocation there ends the child with status 99.
static FORBID: AtomicBool = AtomicBool::new(false);
thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
}

fn note() {
    if FORBID.load(Ordering::Relaxed) {
        // SAFETY: _exit is async-signal-safe and never returns.
        unsafe { libc::_exit(99) };
    }
    if ARMED.with(|a| a.get()) {
        COUNT.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note();
        // SAFETY: same contract as ours.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        note();
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note();
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        note();
        // SAFETY: same contract as ours.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn test_data() -> Vec<u8> {
    let mut d = vec![0u8; 3 << 20];
    let mut x = 88172645463325252u64;
    for (i, b) in d.iter_mut().enumerate() {
        if (i / 4096) % 3 == 0 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8; // incompressible pages
        } else if (i / 4096) % 3 == 1 {
            *b = (i / 100) as u8; // compressible pages
        } // else zero pages
    }
    d
}

#[test]
fn add_section_add_region_and_commit_do_not_allocate() {
    let tmp = tempfile::tempdir().unwrap();
    let data = test_data();
    let opts = WriterOptions {
        chunk_size: 1 << 20,
        ..Default::default()
    };
    let mut w = ImageWriter::prepare(tmp.path(), &opts).unwrap();
    let meta = RegionMeta {
        start: 0x10000,
        len: data.len() as u64,
        prot: 3,
        flags: 0,
        offset: 0,
        name: b"/some/file",
    };

    COUNT.store(0, Ordering::SeqCst);
    ARMED.with(|a| a.set(true));
    let r1 = w.add_section("threads", true, b"thread state");
    let r2 = w.add_region(&meta, &data);
    let r3 = w.add_region(
        &RegionMeta {
            start: 0x1000,
            len: 4096,
            ..meta
        },
        &[],
    );
    let r4 = w.commit();
    ARMED.with(|a| a.set(false));
    let allocations = COUNT.load(Ordering::SeqCst);

    r1.unwrap();
    r2.unwrap();
    r3.unwrap();
    r4.unwrap();
    assert_eq!(
        allocations, 0,
        "the writer allocated in add_section/add_region/commit"
    );
    let mut r = ImageReader::open(w.final_path()).unwrap();
    assert_eq!(r.read_region(0).unwrap(), data);
}

#[test]
fn forked_child_writes_image_without_allocating() {
    let tmp = tempfile::tempdir().unwrap();
    let data = test_data();
    // Another thread is busy allocating while we fork, as in a real application.
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let churn = std::thread::spawn(move || {
        while !s2.load(Ordering::Relaxed) {
            std::hint::black_box(vec![0u8; 1000]);
        }
    });
    let mut w = ImageWriter::prepare(tmp.path(), &WriterOptions::default()).unwrap();
    let meta = RegionMeta {
        start: 0x10000,
        len: data.len() as u64,
        prot: 3,
        flags: 0,
        offset: 0,
        name: b"[heap]",
    };

    // SAFETY: the child only calls the writer (no allocation: enforced by FORBID) and _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        FORBID.store(true, Ordering::SeqCst);
        let ok = w.add_section("threads", true, b"t").is_ok()
            && w.add_region(&meta, &data).is_ok()
            && w.commit().is_ok();
        // SAFETY: ends the child without running destructors (which would free memory).
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    stop.store(true, Ordering::Relaxed);
    churn.join().unwrap();
    assert!(libc::WIFEXITED(status), "child died: {status:#x}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "child failed (99 = it allocated)"
    );
    let mut r = ImageReader::open(w.final_path()).unwrap();
    assert_eq!(r.read_region(0).unwrap(), data);
    assert_eq!(r.section("threads").unwrap().unwrap(), b"t");
}
