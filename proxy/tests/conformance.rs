//! Backend conformance suite: the same tests, instantiated for every backend by
//! `conformance!`: the emulated device (runs everywhere) and the real GPU (`cuda`: skipped,
//! with the reason printed, where no usable GPU is present).
//!
//! Complements the in-crate suite (`crum_proxy::backend_conformance_tests!`, copies, memsets,
//! events): this one covers copies in every direction (including pinned memory and copies
//! larger than one staging buffer), launches with every kind of parameter, module variables,
//! host functions, errors, and device state save/restore. Kernels come from
//! `tests/data/kernels.cu`, compiled by nvcc into the committed `kernels.fatbin`.
//!
//! A case whose feature a backend does not have yet (it answers `Unsupported`) is skipped with
//! a printed reason rather than failing; any other error fails.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crum_proxy::backend::*;
use crum_proxy::hostmem::AppMemory;
use crum_wire::{cuda, AccessPolicy, AllocKind, FuncInfo, StreamAttr, TexDesc, TexLevel, TexMip};

const FATBIN: &[u8] = include_bytes!("data/kernels.fatbin");
const WINDOW: u64 = 1 << 34;

/// A distinct device window per backend instance (tests run in parallel in one process).
fn next_window() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    0x3000_0000_0000 + NEXT.fetch_add(1, Ordering::Relaxed) * (1 << 36)
}

fn attach(b: &dyn Backend) {
    b.attach_app(Arc::new(AppMemory::new(std::process::id())));
}

/// A window as large as the product's (1 TiB: it holds the VMM range), for the VMM cases.
const BIG_WINDOW: u64 = 1 << 40;

/// A distinct 1 TiB window per call, away from [`next_window`]'s.
fn next_big_window() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    0x5000_0000_0000 + NEXT.fetch_add(1, Ordering::Relaxed) * (2 * BIG_WINDOW)
}

fn make_emu(base: u64) -> Option<Box<dyn Backend>> {
    make_emu_sized(base, WINDOW)
}

fn make_emu_sized(base: u64, size: u64) -> Option<Box<dyn Backend>> {
    let b = crum_proxy::emu::Emu::with_window(base, size).expect("emulated device window");
    attach(&b);
    Some(Box::new(b))
}

fn make_cuda(base: u64) -> Option<Box<dyn Backend>> {
    make_cuda_sized(base, WINDOW)
}

fn make_cuda_sized(base: u64, size: u64) -> Option<Box<dyn Backend>> {
    match crum_proxy::cuda::Cuda::with_window(base, size) {
        Ok(b) => {
            attach(&b);
            Some(Box::new(b))
        }
        Err(e) => {
            eprintln!("skipped (gpu): {e}");
            None
        }
    }
}

/// Unwrap a backend result; an `Unsupported` answer skips the test with its reason.
macro_rules! need {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(BackendError::Unsupported { backend, op }) => {
                eprintln!("skipped: {op} is not supported by the {backend} backend yet");
                return;
            }
            Err(e) => panic!("{} failed: {e} ({})", stringify!($e), e.code()),
        }
    };
}

fn copy(dst: u64, src: u64, len: u64) -> CopyOp {
    CopyOp { dst, dpitch: len, src: Endpoint::Addr(src), spitch: len, width: len, height: 1 }
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32).map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed) >> 13) as u8).collect()
}

/// Pack parameter values at the offsets the backend reported.
fn pack(info: &FuncInfo, vals: &[&[u8]]) -> Vec<u8> {
    assert_eq!(info.params.len(), vals.len(), "parameter count");
    let mut block = vec![0u8; info.param_bytes as usize];
    for (&(off, size), v) in info.params.iter().zip(vals) {
        assert_eq!(size as usize, v.len(), "parameter size at offset {off}");
        block[off as usize..off as usize + v.len()].copy_from_slice(v);
    }
    block
}

fn dims(grid: u32, block: u32, shared: u32) -> LaunchDims {
    LaunchDims { grid: [grid, 1, 1], block: [block, 1, 1], shared, cooperative: false }
}

fn read_back(b: &dyn Backend, addr: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    b.memcpy(LEGACY_STREAM, copy(out.as_mut_ptr() as u64, addr, len as u64)).unwrap();
    b.stream_sync(LEGACY_STREAM).unwrap();
    out
}

/// Bytes a snapshot handed out: (region address, offset in it, bytes).
type Saved = Vec<(u64, u64, Vec<u8>)>;

/// Snapshot `a`: the regions and the bytes saved of each.
fn save(a: &dyn Backend) -> Result<(Vec<SavedRegion>, Saved)> {
    let mut saved: Saved = Vec::new();
    let regions = a.snapshot(&mut |r: &SavedRegion, off: u64, bytes: &[u8]| {
        saved.push((r.addr, off, bytes.to_vec()));
        Ok(())
    })?;
    Ok((regions, saved))
}

/// Load `FATBIN` into `b` with the saved regions' module variables at their addresses, name
/// it in the regions, and restore the regions from `saved`: the module and the allocations.
fn restore_all(b: &dyn Backend, regions: &mut [SavedRegion], saved: &Saved) -> Result<(ModuleId, Vec<Allocation>)> {
    let vars: Vec<(String, u64, AllocKind)> =
        regions.iter().filter_map(|r| r.symbol.as_ref().map(|s| (s.1.clone(), r.addr, r.kind))).collect();
    let m = b.restore_module(FATBIN, &vars)?;
    for r in regions.iter_mut() {
        if let Some(sym) = r.symbol.as_mut() {
            sym.0 = m;
        }
    }
    let allocs = restore_from(b, regions, saved)?;
    Ok((m, allocs))
}

/// Restore `regions` into `b` from the bytes of [`save`].
fn restore_from(b: &dyn Backend, regions: &[SavedRegion], saved: &Saved) -> Result<Vec<Allocation>> {
    b.restore(regions, &mut |r: &SavedRegion, off: u64, buf: &mut [u8]| {
        let (_, _, bytes) = saved.iter().find(|(a, o, _)| *a == r.addr && *o == off).expect("saved piece");
        buf.copy_from_slice(&bytes[..buf.len()]);
        Ok(())
    })
}

fn copies_in_every_direction(b: &dyn Backend) {
    // Larger than one staging buffer and not a multiple of anything.
    let n = (20 << 20) + 4093;
    let src = pattern(n, 1);
    let d1 = need!(b.malloc(n as u64, AllocKind::Device)).addr;
    let d2 = need!(b.malloc(n as u64, AllocKind::Device)).addr;
    need!(b.memcpy(LEGACY_STREAM, copy(d1, src.as_ptr() as u64, n as u64)));
    need!(b.memcpy(LEGACY_STREAM, copy(d2, d1, n as u64)));
    assert!(read_back(b, d2, n) == src, "host → device → device → host");

    // Staged bytes (an async copy from pageable memory) land like any other.
    let staged = pattern(5000, 2);
    let op = CopyOp { dst: d1 + 100, dpitch: 5000, src: Endpoint::Staged(Arc::new(staged.clone())), spitch: 5000, width: 5000, height: 1 };
    need!(b.memcpy(LEGACY_STREAM, op));
    assert_eq!(read_back(b, d1 + 100, 5000), staged);

    // 2-D: 7 rows of 33 bytes from a 40-byte pitch into a 64-byte pitch, and back.
    let host2d = pattern(40 * 7, 3);
    let op = CopyOp { dst: d1, dpitch: 64, src: Endpoint::Addr(host2d.as_ptr() as u64), spitch: 40, width: 33, height: 7 };
    need!(b.memcpy(LEGACY_STREAM, op));
    let mut out2d = vec![0u8; 50 * 7];
    let op = CopyOp { dst: out2d.as_mut_ptr() as u64, dpitch: 50, src: Endpoint::Addr(d1), spitch: 64, width: 33, height: 7 };
    need!(b.memcpy(LEGACY_STREAM, op));
    need!(b.stream_sync(LEGACY_STREAM));
    for r in 0..7 {
        assert_eq!(out2d[r * 50..r * 50 + 33], host2d[r * 40..r * 40 + 33], "row {r}");
    }

    // Pinned host memory is mapped in the proxy (this process) at its address.
    let p = need!(b.malloc(1 << 20, AllocKind::PinnedHost)).addr;
    // SAFETY: the backend mapped 1 MiB of shared memory at `p` in this process; it stays
    // mapped until freed at the end of this test, and nothing else aliases it.
    let pinned = unsafe { std::slice::from_raw_parts_mut(p as *mut u8, 1 << 20) };
    pinned.copy_from_slice(&pattern(1 << 20, 4));
    need!(b.memcpy(LEGACY_STREAM, copy(d2, p, 1 << 20)));
    need!(b.memset(LEGACY_STREAM, d2 + 10, 1, 0xab, 5, 1));
    need!(b.memcpy(LEGACY_STREAM, copy(p, d2, 1 << 20)));
    need!(b.stream_sync(LEGACY_STREAM));
    let mut want = pattern(1 << 20, 4);
    want[10..15].fill(0xab);
    assert!(pinned[..] == want[..], "pinned → device → pinned");
    need!(b.memset(LEGACY_STREAM, p + 20, 8, 0xcd, 4, 3));
    need!(b.stream_sync(LEGACY_STREAM));
    for (i, &x) in pinned[16..48].iter().enumerate() {
        let set = (4..28).contains(&i) && (i - 4) % 8 < 4;
        assert_eq!(x, if set { 0xcd } else { want[16 + i] }, "pinned byte {}", 16 + i);
    }
    need!(b.free(p));
    need!(b.free(d1));
    need!(b.free(d2));
}

/// Managed memory is host memory behind a memfd, mapped in the proxy (this process) at its
/// address (the application aliases the memfd behind its shadow pages); the device reads and
/// writes it in stream order, copies and memsets included.
fn managed_memory_is_shared_host_memory(b: &dyn Backend) {
    let n = (3 << 20) + 100;
    let m = need!(b.malloc(n as u64, AllocKind::Managed));
    assert!(m.memfd.is_some(), "managed memory comes with a memfd the application can alias");
    // SAFETY: the backend mapped `n` bytes of shared memory at `m.addr` in this process; they
    // stay mapped until freed at the end of this test, and nothing else aliases them here.
    let host = unsafe { std::slice::from_raw_parts_mut(m.addr as *mut u8, n) };
    host.copy_from_slice(&pattern(n, 7));
    let d = need!(b.malloc(n as u64, AllocKind::Device)).addr;
    need!(b.memcpy(LEGACY_STREAM, copy(d, m.addr, n as u64)));
    need!(b.memset(LEGACY_STREAM, m.addr + 5, 1, 0x5a, 3, 1));
    need!(b.stream_sync(LEGACY_STREAM));
    assert!(read_back(b, d, n) == pattern(n, 7), "managed → device");
    assert_eq!(host[4..9], [pattern(n, 7)[4], 0x5a, 0x5a, 0x5a, pattern(n, 7)[8]], "memset of managed memory");
    need!(b.memcpy(LEGACY_STREAM, copy(m.addr, d, 4096)));
    need!(b.stream_sync(LEGACY_STREAM));
    assert!(host[..4096] == pattern(n, 7)[..4096], "device → managed");
    need!(b.free(m.addr));
    need!(b.free(d));
}

fn allocations_are_distinct_and_tracked(b: &dyn Backend) {
    let sizes = [1u64, 255, 256, 4096, 3 << 20, 100];
    let mut got = Vec::new();
    for &s in &sizes {
        let a = need!(b.malloc(s, AllocKind::Device)).addr;
        assert_eq!(a % 256, 0, "cudaMalloc alignment");
        assert_eq!(b.owns(a, s), Some(AllocKind::Device));
        got.push((a, s));
    }
    let mut sorted = got.clone();
    sorted.sort();
    for w in sorted.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "{:x?} overlaps {:x?}", w[0], w[1]);
    }
    let (a, s) = got[4];
    need!(b.free(a));
    assert_eq!(b.owns(a, s), None);
    assert_eq!(b.free(a), Err(BackendError::Cuda(cuda::ERROR_INVALID_VALUE)));
}

fn launches_with_every_parameter_kind(b: &dyn Backend) {
    let m = need!(b.load_module(FATBIN));
    let f = need!(b.function(m, "kinds"));
    // char at 8, short at 10, int at 12, long long at 16, float 24, double 32,
    // struct {char; double; int} (align 8, 24 bytes) at 40, float4 (align 16) at 64.
    assert_eq!(f.params, vec![(0, 8), (8, 1), (10, 2), (12, 4), (16, 8), (24, 4), (32, 8), (40, 24), (64, 16)]);
    assert_eq!(f.param_bytes, 80);
    let out = need!(b.malloc(80, AllocKind::Device)).addr;
    let mut mixed = [0u8; 24];
    mixed[0] = (-5i8) as u8;
    mixed[8..16].copy_from_slice(&2.75f64.to_le_bytes());
    mixed[16..20].copy_from_slice(&(-77i32).to_le_bytes());
    let mut v4 = [0u8; 16];
    v4[0..4].copy_from_slice(&1.5f32.to_le_bytes());
    v4[12..16].copy_from_slice(&(-8.0f32).to_le_bytes());
    let block = pack(
        &f,
        &[&out.to_le_bytes(), &[(-3i8) as u8], &(-1234i16).to_le_bytes(), &123456789i32.to_le_bytes(), &(-9_876_543_210i64).to_le_bytes(), &0.25f32.to_le_bytes(), &(-1e300f64).to_le_bytes(), &mixed, &v4],
    );
    need!(b.launch(LEGACY_STREAM, FuncId(f.handle), dims(1, 1, 0), block));
    let words: Vec<u64> = read_back(b, out, 80).chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(words[0] as i64, -3);
    assert_eq!(words[1] as i64, -1234);
    assert_eq!(words[2] as i64, 123456789);
    assert_eq!(words[3] as i64, -9_876_543_210);
    assert_eq!(words[4] as u32, 0.25f32.to_bits());
    assert_eq!(words[5], (-1e300f64).to_bits());
    assert_eq!(words[6] as i64, -5);
    assert_eq!(words[7], 2.75f64.to_bits());
    assert_eq!(words[8] as i64, -77);
    assert_eq!(words[9], 1.5f32.to_bits() as u64 | ((-8.0f32).to_bits() as u64) << 32);
}

fn launch_geometry_and_dynamic_shared_memory(b: &dyn Backend) {
    let m = need!(b.load_module(FATBIN));
    let fill = need!(b.function(m, "fill"));
    let n = 1000i32;
    let p = need!(b.malloc(4 * 1024, AllocKind::Device)).addr;
    need!(b.memset(LEGACY_STREAM, p, 4096, 0, 4096, 1));
    let block = pack(&fill, &[&p.to_le_bytes(), &n.to_le_bytes(), &10.0f32.to_le_bytes()]);
    need!(b.launch(LEGACY_STREAM, FuncId(fill.handle), dims(8, 128, 0), block));
    let got = read_back(b, p, 4096);
    for i in 0..1024usize {
        let v = f32::from_le_bytes(got[i * 4..i * 4 + 4].try_into().unwrap());
        assert_eq!(v, if (i as i32) < n { 10.0 + i as f32 } else { 0.0 }, "element {i}");
    }
    let rev = need!(b.function(m, "reverse_shared"));
    let block = pack(&rev, &[&p.to_le_bytes()]);
    need!(b.launch(LEGACY_STREAM, FuncId(rev.handle), dims(1, 256, 256 * 4), block));
    let got = read_back(b, p, 256 * 4);
    for i in 0..256usize {
        assert_eq!(i32::from_le_bytes(got[i * 4..i * 4 + 4].try_into().unwrap()), 255 - i as i32);
    }
}

fn module_variables_are_device_memory(b: &dyn Backend) {
    let m = need!(b.load_module(FATBIN));
    let (table, len) = need!(b.symbol(m, "table"));
    assert_eq!(len, 16);
    let init: Vec<f32> = read_back(b, table, 16).chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(init, vec![1.0, 2.0, 3.0, 4.0]);
    let scale = need!(b.function(m, "scale_table"));
    need!(b.launch(LEGACY_STREAM, FuncId(scale.handle), dims(1, 4, 0), pack(&scale, &[&2.0f32.to_le_bytes()])));
    let got: Vec<f32> = read_back(b, table, 16).chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(got, vec![2.0, 4.0, 6.0, 8.0]);

    let (counter, _) = need!(b.symbol(m, "counter"));
    let five = 5i32.to_le_bytes();
    need!(b.memcpy(LEGACY_STREAM, copy(counter, five.as_ptr() as u64, 4)));
    let bump = need!(b.function(m, "bump"));
    need!(b.launch(LEGACY_STREAM, FuncId(bump.handle), dims(2, 32, 0), Vec::new()));
    assert_eq!(read_back(b, counter, 4), 69i32.to_le_bytes());

    assert_eq!(b.symbol(m, "no_such_variable"), Err(BackendError::Cuda(cuda::ERROR_INVALID_SYMBOL)));
    assert_eq!(b.function(m, "no_such_kernel").err(), Some(BackendError::Cuda(cuda::ERROR_INVALID_DEVICE_FUNCTION)));
}

/// `cudaLibraryEnumerateKernels`: every kernel of the module, once.
fn module_kernels_are_listed(b: &dyn Backend) {
    let m = need!(b.load_module(FATBIN));
    let mut names = need!(b.module_kernels(m));
    names.sort();
    let mut want = ["kinds", "fill", "reverse_shared", "bump", "bump_managed", "scale_table", "incr", "heap_keep"];
    want.sort();
    assert_eq!(names, want);
    assert_eq!(b.module_kernels(ModuleId(0xdead)).err(), Some(BackendError::Cuda(cuda::ERROR_INVALID_RESOURCE_HANDLE)));
}

fn host_functions_run_in_stream_order(b: &dyn Backend) {
    let m = need!(b.load_module(FATBIN));
    let incr = need!(b.function(m, "incr"));
    let s = need!(b.stream_create(1, -1));
    let n = 4096usize;
    let d = need!(b.malloc((n * 4) as u64, AllocKind::Device)).addr;
    need!(b.memset(s, d, 0, 0, (n * 4) as u64, 1));
    let seen = Arc::new(Mutex::new(Vec::new()));
    for round in 0..3 {
        need!(b.launch(s, FuncId(incr.handle), dims(n.div_ceil(256) as u32, 256, 0), pack(&incr, &[&d.to_le_bytes(), &(n as i32).to_le_bytes()])));
        let seen2 = seen.clone();
        need!(b.host_func(s, Box::new(move || seen2.lock().unwrap().push(round))));
    }
    need!(b.stream_sync(s));
    assert_eq!(*seen.lock().unwrap(), vec![0, 1, 2]);
    let got = read_back(b, d, n * 4);
    assert!(got.chunks(4).all(|c| i32::from_le_bytes(c.try_into().unwrap()) == 3));
    need!(b.stream_destroy(s));
}

fn events_order_work_between_streams(b: &dyn Backend) {
    let m = need!(b.load_module(FATBIN));
    let incr = need!(b.function(m, "incr"));
    let (s1, s2) = (need!(b.stream_create(1, 0)), need!(b.stream_create(1, 0)));
    let e = need!(b.event_create(0));
    let n = 1 << 16;
    let d = need!(b.malloc(4 * n as u64, AllocKind::Device)).addr;
    let ones = vec![1u8; 4 * n];
    need!(b.memset(s1, d, 0, 0, 4 * n as u64, 1));
    need!(b.memcpy(s1, copy(d, ones.as_ptr() as u64, 4 * n as u64)));
    need!(b.event_record(e, s1));
    need!(b.stream_wait_event(s2, e));
    need!(b.launch(s2, FuncId(incr.handle), dims((n / 256) as u32, 256, 0), pack(&incr, &[&d.to_le_bytes(), &(n as i32).to_le_bytes()])));
    need!(b.stream_sync(s2));
    assert!(need!(b.event_query(e)));
    let got = read_back(b, d, 4 * n);
    assert!(got.chunks(4).all(|c| u32::from_le_bytes(c.try_into().unwrap()) == 0x0101_0102));
}

/// A module variable that only a kernel touched (the program never named it through the
/// runtime) is saved by a checkpoint with what the kernel wrote.
fn module_variables_the_program_never_named_are_saved(b: &dyn Backend) {
    let m = need!(b.load_module(FATBIN));
    let bump = need!(b.function(m, "bump"));
    need!(b.launch(LEGACY_STREAM, FuncId(bump.handle), dims(2, 32, 0), vec![]));
    need!(b.device_sync());
    let mut counter = None;
    let regions = need!(b.snapshot(&mut |r: &SavedRegion, _off: u64, bytes: &[u8]| {
        if r.symbol.as_ref().is_some_and(|s| s.1 == "counter") {
            counter = Some(i32::from_le_bytes(bytes[..4].try_into().unwrap()));
        }
        Ok(())
    }));
    assert!(regions.iter().any(|r| r.symbol.as_ref().is_some_and(|s| s.1 == "table")), "every variable of the module is saved");
    assert_eq!(counter, Some(64), "the kernel's count is in the image");
}

/// A `__managed__` variable is host memory shared with the program, holding its initial
/// value; kernels see what the host wrote and the host sees what kernels wrote after a
/// synchronization, also with kernels on two streams adding to it at once.
fn managed_variables_are_shared_with_the_host(b: &dyn Backend) {
    let m = need!(b.load_module(FATBIN));
    let a = need!(b.managed_var(m, "mcount"));
    assert!(a.memfd.is_some(), "the program maps it: it is shared memory");
    let p = a.addr as *mut i32;
    // SAFETY: the backend mapped the variable's managed memory in this process at `p`.
    assert_eq!(unsafe { p.read_volatile() }, 5, "initial value");
    // SAFETY: as above.
    unsafe { p.write_volatile(10) };
    assert_eq!(need!(b.symbol(m, "mcount")), (a.addr, 4), "the variable is where the program sees it");
    let f = need!(b.function(m, "bump_managed"));
    let (s1, s2) = (need!(b.stream_create(1, 0)), need!(b.stream_create(1, 0)));
    need!(b.launch(s1, FuncId(f.handle), dims(1, 3, 0), vec![]));
    need!(b.launch(s2, FuncId(f.handle), dims(2, 4, 0), vec![]));
    need!(b.launch(LEGACY_STREAM, FuncId(f.handle), dims(1, 1, 0), vec![]));
    need!(b.device_sync());
    // SAFETY: as above.
    assert_eq!(unsafe { p.read_volatile() }, 10 + 3 + 8 + 1);
    // A kernel that writes the variable through a pointer to it (the program passes `&var`):
    // its write stays, and the next kernel sees it.
    let fill = need!(b.function(m, "fill"));
    let args = pack(&fill, &[&a.addr.to_le_bytes(), &1i32.to_le_bytes(), &7.0f32.to_le_bytes()]);
    need!(b.launch(LEGACY_STREAM, FuncId(fill.handle), dims(1, 1, 0), args));
    need!(b.device_sync());
    // SAFETY: as above.
    assert_eq!(unsafe { p.read_volatile() }, 7.0f32.to_bits() as i32, "the kernel's write through the pointer stays");
    need!(b.launch(LEGACY_STREAM, FuncId(f.handle), dims(1, 1, 0), vec![]));
    need!(b.device_sync());
    // SAFETY: as above.
    assert_eq!(unsafe { p.read_volatile() }, 7.0f32.to_bits() as i32 + 1);
}

/// A `__managed__` variable comes back at its address with its value, and kernels use it.
fn managed_variables_survive_save_and_restore(base: u64, make: fn(u64) -> Option<Box<dyn Backend>>) {
    let Some(a) = make(base) else { return };
    let m = need!(a.load_module(FATBIN));
    let v = need!(a.managed_var(m, "mcount")).addr;
    let p = v as *mut i32;
    // SAFETY: mapped in this process at `v` by the backend.
    unsafe { p.write_volatile(40) };
    let f = need!(a.function(m, "bump_managed"));
    need!(a.launch(LEGACY_STREAM, FuncId(f.handle), dims(1, 2, 0), vec![]));
    need!(a.device_sync());
    // SAFETY: as above.
    assert_eq!(unsafe { p.read_volatile() }, 42);
    let (mut regions, saved) = need!(save(&*a));
    let r = regions.iter().find(|r| r.symbol.as_ref().is_some_and(|s| s.1 == "mcount")).expect("the variable is saved");
    assert_eq!((r.addr, r.len, r.kind), (v, 4, AllocKind::Managed));
    drop(a);

    let b = make(base).expect("the backend opened once already");
    let (m2, allocs) = need!(restore_all(&*b, &mut regions, &saved));
    assert!(allocs.iter().any(|x| x.addr == v && x.memfd.is_some()), "the variable's memory is shared again");
    // SAFETY: the restore mapped the variable at `v` in this process again.
    assert_eq!(unsafe { p.read_volatile() }, 42);
    let f = need!(b.function(m2, "bump_managed"));
    need!(b.launch(LEGACY_STREAM, FuncId(f.handle), dims(1, 1, 0), vec![]));
    need!(b.device_sync());
    // SAFETY: as above.
    assert_eq!(unsafe { p.read_volatile() }, 43);
}

/// `cuMemMap`'s side of the backend (`map_at`): device memory placed exactly at an address of
/// the window's VMM range, usable by copies and kernels, saved with its address and placed
/// there again by a restore; refused outside the range, over another mapping, and in a
/// window too small to hold the range.
fn vmm_mappings_are_placed_saved_and_restored(base: u64, make: fn(u64, u64) -> Option<Box<dyn Backend>>) {
    let Some(small) = make(base, WINDOW) else { return };
    assert!(small.map_at(base + crum_wire::VMM_VA_OFFSET, 2 << 20).is_err(), "a window without the VMM range");
    drop(small);
    let Some(a) = make(base, BIG_WINDOW) else { return };
    let mib = 1u64 << 20;
    let v = base + crum_wire::VMM_VA_OFFSET + 8 * mib;
    let got = need!(a.map_at(v, 4 * mib));
    assert_eq!(got.addr, v);
    assert!(a.map_at(v + 2 * mib, 2 * mib).is_err(), "over another mapping");
    assert!(a.map_at(base + 64 * mib, 2 * mib).is_err(), "outside the VMM range");
    let w = need!(a.map_at(v + 4 * mib, 2 * mib)).addr;
    assert_eq!(w, v + 4 * mib, "side by side with the first");
    let n = (4 * mib / 4) as usize;
    let m = need!(a.load_module(FATBIN));
    let fill = need!(a.function(m, "fill"));
    need!(a.launch(LEGACY_STREAM, FuncId(fill.handle), dims((n / 256) as u32, 256, 0), pack(&fill, &[&v.to_le_bytes(), &(n as i32).to_le_bytes(), &0.5f32.to_le_bytes()])));
    let tail = pattern(4096, 9);
    need!(a.memcpy(LEGACY_STREAM, copy(w, tail.as_ptr() as u64, tail.len() as u64)));
    need!(a.device_sync());
    let at = |b: &dyn Backend, i: usize| f32::from_le_bytes(read_back(b, v + 4 * i as u64, 4).try_into().unwrap());
    assert_eq!((at(&*a, 0), at(&*a, n - 1)), (0.5, 0.5 + (n - 1) as f32));
    let (mut regions, saved) = need!(save(&*a));
    assert!(regions.iter().any(|r| r.addr == v && r.len == 4 * mib && r.kind == AllocKind::Device), "the mapping is saved");
    drop(a);

    let b = make(base, BIG_WINDOW).expect("the backend opened once already");
    let (_, allocs) = need!(restore_all(&*b, &mut regions, &saved));
    assert!(allocs.iter().any(|x| x.addr == v), "the mapping is placed at its address again");
    assert_eq!((at(&*b, 0), at(&*b, n - 1)), (0.5, 0.5 + (n - 1) as f32));
    assert_eq!(read_back(&*b, w, tail.len()), tail);
    need!(b.free(v));
    assert_eq!(need!(b.map_at(v, 2 * mib)).addr, v, "mapped again once unmapped");
}

/// A block a kernel took from the device heap (device-side `malloc`) and the program still
/// holds is saved with the device state (the emulated device: the heap is an allocation), or
/// named as not saved (`unsaved_state`; the cuda backend: the driver keeps the heap) — never
/// silently lost. Kernels that cannot reach `malloc` name nothing; a reset forgets the heap.
fn device_heap_blocks_are_saved_or_named(base: u64, make: fn(u64) -> Option<Box<dyn Backend>>) {
    let Some(a) = make(base) else { return };
    let m = need!(a.load_module(FATBIN));
    let out = need!(a.malloc(8, AllocKind::Device)).addr;
    let incr = need!(a.function(m, "incr"));
    need!(a.launch(LEGACY_STREAM, FuncId(incr.handle), dims(1, 2, 0), pack(&incr, &[&out.to_le_bytes(), &0i32.to_le_bytes()])));
    need!(a.device_sync());
    assert_eq!(a.unsaved_state(), Vec::<String>::new(), "a kernel without malloc");
    let keep = need!(a.function(m, "heap_keep"));
    need!(a.launch(LEGACY_STREAM, FuncId(keep.handle), dims(1, 1, 0), pack(&keep, &[&out.to_le_bytes(), &4242i32.to_le_bytes()])));
    need!(a.device_sync());
    let block = u64::from_le_bytes(read_back(&*a, out, 8).try_into().unwrap());
    assert_ne!(block, 0, "device malloc gave no block");
    let unsaved = a.unsaved_state();
    if a.name() == "cuda" {
        assert_eq!(unsaved.len(), 1, "{unsaved:?}");
        assert!(unsaved[0].contains("device heap") && unsaved[0].contains("heap_keep"), "{unsaved:?}");
        assert!(!unsaved[0].contains("incr"), "{unsaved:?}");
        need!(a.device_reset());
        assert_eq!(a.unsaved_state(), Vec::<String>::new(), "after a reset");
        return;
    }
    assert_eq!(unsaved, Vec::<String>::new(), "the {} backend saves its heap", a.name());
    let (mut regions, saved) = need!(save(&*a));
    assert!(regions.iter().any(|r| r.addr <= block && block + 4 <= r.addr + r.len), "no saved region holds the block");
    drop(a);
    let b = make(base).expect("the backend opened once already");
    need!(restore_all(&*b, &mut regions, &saved));
    assert_eq!(read_back(&*b, block, 4), 4242i32.to_le_bytes(), "the block after a restore");
}

/// Events recorded before a checkpoint come back recorded at a restart, with the times
/// between them (and their ages) as at the checkpoint; an unrecorded one stays unrecorded.
fn event_times_survive_save_and_restore(base: u64, make: fn(u64) -> Option<Box<dyn Backend>>) {
    let Some(a) = make(base) else { return };
    let n = (12 << 20) + 5;
    let src = pattern(n, 3);
    let d = need!(a.malloc(n as u64, AllocKind::Device)).addr;
    let (e0, e1, idle) = (need!(a.event_create(0)), need!(a.event_create(0)), need!(a.event_create(0)));
    need!(a.event_record(e0, LEGACY_STREAM));
    // Work between the two, so that they are apart.
    need!(a.memcpy(LEGACY_STREAM, copy(d, src.as_ptr() as u64, n as u64)));
    need!(a.event_record(e1, LEGACY_STREAM));
    need!(a.device_sync());
    let between = need!(a.event_elapsed(e0, e1));
    assert!(between > 0.0, "{between}");
    let ago0 = need!(a.event_completed_ago(e0)).expect("e0 was recorded");
    let ago1 = need!(a.event_completed_ago(e1)).expect("e1 was recorded");
    assert!(ago0 >= ago1, "{ago0} {ago1}");
    assert_eq!(need!(a.event_completed_ago(idle)), None);
    drop(a);

    let b = make(base).expect("the backend opened once already");
    need!(b.set_next_handle(e0.0));
    let r0 = need!(b.event_create(0));
    need!(b.set_next_handle(e1.0));
    let r1 = need!(b.event_create(0));
    need!(b.event_restore(r0, ago0));
    need!(b.event_restore(r1, ago1));
    assert!(need!(b.event_query(r0)) && need!(b.event_query(r1)));
    let again = need!(b.event_elapsed(r0, r1));
    assert!((again - between).abs() <= 0.5 + between * 0.01, "between the events {between} ms at the checkpoint, {again} ms after the restart");
    // A new event after the restart is later than both, by at least their age.
    let later = need!(b.event_create(0));
    need!(b.event_record(later, LEGACY_STREAM));
    need!(b.device_sync());
    let since = need!(b.event_elapsed(r0, later));
    assert!(since as f64 >= ago0 as f64 / 1e6 - 0.5, "{since} ms since e0, which was {ago0} ns old at the checkpoint");
    // Recorded again, an event is an ordinary one.
    need!(b.event_record(r0, LEGACY_STREAM));
    need!(b.device_sync());
    assert!(need!(b.event_elapsed(r0, later)) <= 0.5);
}

fn streams_events_and_host_functions_keep_order(b: &dyn Backend) {
    let (hi, lo) = (need!(b.stream_create(1, -1)), need!(b.stream_create(0, 0)));
    let n = (12 << 20) + 5; // more than one staging buffer
    let src = pattern(n, 9);
    let d = need!(b.malloc(n as u64, AllocKind::Device)).addr;
    let (e0, e1) = (need!(b.event_create(0)), need!(b.event_create(0)));
    need!(b.event_record(e0, hi));
    need!(b.memcpy(hi, copy(d, src.as_ptr() as u64, n as u64)));
    need!(b.event_record(e1, hi));
    need!(b.stream_wait_event(lo, e1));
    let mut back = vec![0u8; n];
    let back_addr = back.as_mut_ptr() as u64;
    let staged = Arc::new(src[..4096].to_vec());
    need!(b.memcpy(lo, CopyOp { dst: d, dpitch: 4096, src: Endpoint::Staged(staged), spitch: 4096, width: 4096, height: 1 }));
    need!(b.memcpy(lo, copy(back_addr, d, n as u64)));
    let order = Arc::new(Mutex::new(Vec::new()));
    for tag in ["a", "b"] {
        let o = order.clone();
        need!(b.host_func(lo, Box::new(move || o.lock().unwrap().push(tag))));
    }
    need!(b.stream_sync(lo));
    assert!(need!(b.stream_query(lo)) && need!(b.event_query(e1)));
    need!(b.event_sync(e1));
    assert!(need!(b.event_elapsed(e0, e1)) >= 0.0);
    assert_eq!(*order.lock().unwrap(), vec!["a", "b"]);
    assert!(back == src, "copies ordered across streams by the event");
    need!(b.event_destroy(e0));
    need!(b.stream_destroy(hi));
    assert_eq!(b.stream_destroy(hi), Err(BackendError::Cuda(cuda::ERROR_INVALID_RESOURCE_HANDLE)));
    need!(b.free(d));
}

/// Copies from and to registered (page-locked) application memory happen when the stream
/// reaches them: a host function queued before a copy changes what it copies, and one queued
/// after it sees what it wrote.
fn registered_memory_is_copied_in_stream_order(b: &dyn Backend) {
    let s = need!(b.stream_create(1, 0));
    let n = (9 << 20) + 3; // more than one staging buffer
    let mut host = vec![1u8; n];
    let addr = host.as_mut_ptr() as u64;
    need!(b.host_register(addr, n as u64));
    assert!(b.is_registered(addr + 10, 100));
    assert_eq!(b.host_register(addr + 4096, 10), Err(BackendError::Cuda(cuda::ERROR_HOST_MEMORY_ALREADY_REGISTERED)));
    let d = need!(b.malloc(n as u64, AllocKind::Device)).addr;
    need!(b.host_func(s, Box::new(move || {
        // SAFETY: `host` outlives the stream synchronization below and nothing else touches
        // it until then; this runs on the stream before the copy that reads it.
        unsafe { std::ptr::write_bytes(addr as *mut u8, 2, n) }
    })));
    need!(b.memcpy(s, copy(d, addr, n as u64)));
    need!(b.memset(s, d, 0, 3, 1000, 1));
    need!(b.memcpy(s, copy(addr, d, n as u64)));
    let seen = Arc::new(Mutex::new((0u8, 0u8)));
    let seen2 = seen.clone();
    need!(b.host_func(s, Box::new(move || {
        // SAFETY: as above; this runs after the copy back has completed.
        let v = unsafe { std::slice::from_raw_parts(addr as *const u8, n) };
        *seen2.lock().unwrap() = (v[0], v[n - 1]);
    })));
    need!(b.stream_sync(s));
    assert_eq!(*seen.lock().unwrap(), (3, 2));
    assert!(host[..1000].iter().all(|&x| x == 3) && host[1000..].iter().all(|&x| x == 2));
    // The same with a copy smaller than one staging buffer.
    need!(b.host_func(s, Box::new(move || {
        // SAFETY: as above.
        unsafe { std::ptr::write_bytes(addr as *mut u8, 9, 64) }
    })));
    need!(b.memcpy(s, copy(d + 4096, addr, 64)));
    need!(b.memcpy(s, copy(addr + 64, d + 4096, 64)));
    need!(b.stream_sync(s));
    assert!(host[..128].iter().all(|&x| x == 9));
    need!(b.host_unregister(addr));
    assert_eq!(b.host_unregister(addr), Err(BackendError::Cuda(cuda::ERROR_HOST_MEMORY_NOT_REGISTERED)));
}

/// Several application threads (lanes) allocating, copying and freeing at once.
fn concurrent_lanes_do_not_interfere(b: &dyn Backend) {
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for t in 0..4u32 {
            let failures = &failures;
            scope.spawn(move || {
                let s = match b.stream_create(1, 0) {
                    Ok(s) => s,
                    Err(e) => return failures.lock().unwrap().push(format!("stream: {e}")),
                };
                for round in 0..12u32 {
                    let n = 1000 + (t as usize * 7919 + round as usize * 104_729) % (3 << 20);
                    let data = pattern(n, t * 100 + round);
                    let mut back = vec![0u8; n];
                    let r = (|| -> std::result::Result<(), BackendError> {
                        let d = b.malloc(n as u64, AllocKind::Device)?.addr;
                        b.memcpy(s, copy(d, data.as_ptr() as u64, n as u64))?;
                        b.memcpy(s, copy(back.as_mut_ptr() as u64, d, n as u64))?;
                        b.stream_sync(s)?;
                        b.free(d)
                    })();
                    match r {
                        Ok(()) if back == data => {}
                        Ok(()) => failures.lock().unwrap().push(format!("thread {t} round {round}: data differs")),
                        Err(BackendError::Unsupported { .. }) => return,
                        Err(e) => failures.lock().unwrap().push(format!("thread {t} round {round}: {e}")),
                    }
                }
                let _ = b.stream_destroy(s);
            });
        }
    });
    let f = failures.into_inner().unwrap();
    assert!(f.is_empty(), "{f:#?}");
}

fn errors_are_reported_as_the_runtime_does(b: &dyn Backend) {
    assert_eq!(b.stream_destroy(StreamId(0xdead)), Err(BackendError::Cuda(cuda::ERROR_INVALID_RESOURCE_HANDLE)));
    assert_eq!(b.event_record(EventId(0xdead), LEGACY_STREAM), Err(BackendError::Cuda(cuda::ERROR_INVALID_RESOURCE_HANDLE)));
    let d = need!(b.malloc(64, AllocKind::Device)).addr;
    let host = [0u8; 128];
    assert_eq!(b.memcpy(LEGACY_STREAM, copy(d, host.as_ptr() as u64, 128)), Err(BackendError::Cuda(cuda::ERROR_INVALID_VALUE)));
    assert_eq!(b.memset(LEGACY_STREAM, d + 32, 64, 0, 64, 1), Err(BackendError::Cuda(cuda::ERROR_INVALID_VALUE)));
    assert!(b.launch(LEGACY_STREAM, FuncId(0xdead), dims(1, 1, 0), Vec::new()).is_err());
    let m = need!(b.load_module(FATBIN));
    let fill = need!(b.function(m, "fill"));
    assert_eq!(b.launch(LEGACY_STREAM, FuncId(fill.handle), dims(1, 1, 0), vec![0u8; 4]), Err(BackendError::Cuda(cuda::ERROR_INVALID_VALUE)));
    assert!(b.load_module(b"\x50\xed\x55\xba not a real fat binary at all").is_err());
}

/// Stream attributes and the persisting L2 set-aside are hints the device takes (the emulated
/// one has no cache); the device reports its limits, and an unknown stream is an error.
fn stream_hints_are_taken_and_limits_reported(b: &dyn Backend) {
    let p = b.device_props();
    assert!(p.max_persisting_l2 > 0 && p.max_persisting_l2 <= p.l2_bytes, "{p:?}");
    assert!(p.max_access_policy_window > 0, "{p:?}");
    let s = need!(b.stream_create(0, 0));
    let d = need!(b.malloc(4096, AllocKind::Device)).addr;
    let w = AccessPolicy { base: d, bytes: 4096, hit_ratio: 0.5, hit_prop: 2, miss_prop: 1 };
    need!(b.stream_set_attr(s, StreamAttr::AccessPolicyWindow(w)));
    need!(b.stream_set_attr(s, StreamAttr::MemSyncDomain(1)));
    need!(b.stream_set_attr(s, StreamAttr::MemSyncDomainMap(0, 1)));
    need!(b.stream_set_attr(LEGACY_STREAM, StreamAttr::SyncPolicy(3)));
    need!(b.set_persisting_l2_limit(p.max_persisting_l2 as u64 / 2));
    need!(b.reset_persisting_l2());
    assert_eq!(
        b.stream_set_attr(StreamId(0xdead), StreamAttr::SyncPolicy(1)),
        Err(BackendError::Cuda(cuda::ERROR_INVALID_RESOURCE_HANDLE))
    );
    need!(b.stream_destroy(s));
}

/// Textures over the levels of a mipmapped array are taken where textures are (their levels
/// checked), refused where they are not; only a device whose kernels' `cudaGraphSetConditional`
/// stores at the handle the interposer hands out (the emulated one) claims graph conditions —
/// a real GPU's wants the driver's own graphs.
fn mipmap_textures_and_graph_conditions_follow_the_capabilities(b: &dyn Backend) {
    let caps = b.capabilities();
    assert_eq!(b.device_props().graph_conditionals, caps.name == "emu");
    let d = need!(b.malloc(8192, AllocKind::Device)).addr;
    let levels: Vec<TexLevel> =
        (0..4).map(|l| TexLevel { base: d + 2048 * l, width: 8 >> l, height: 8 >> l, depth: 1, pitch: 512 }).collect();
    let desc = |levels: Vec<TexLevel>| TexDesc {
        base: d,
        width: 8,
        height: 8,
        depth: 1,
        pitch: 512,
        bits: [32, 0, 0, 0],
        format_kind: 2,
        address_mode: [1; 3],
        filter_mode: 0,
        read_mode: 0,
        normalized: true,
        mip: Some(TexMip { levels, filter_mode: 1, bias: 0, min_clamp: 0, max_clamp: 3.0f32.to_bits() }),
    };
    match b.texture_create(&desc(levels)) {
        Ok(t) => {
            assert!(caps.textures);
            b.texture_destroy(t).unwrap();
            assert_eq!(b.texture_create(&desc(Vec::new())), Err(BackendError::Cuda(cuda::ERROR_INVALID_VALUE)), "no levels");
        }
        Err(BackendError::Unsupported { .. }) => assert!(!caps.textures),
        Err(e) => panic!("texture over mipmap levels: {e}"),
    }
    b.free(d).unwrap();
}

/// Device state saved from one backend instance comes back at the same addresses in a new
/// one (as after a restart).
fn device_state_survives_save_and_restore(base: u64, make: fn(u64) -> Option<Box<dyn Backend>>) {
    let Some(a) = make(base) else { return };
    let big = pattern((9 << 20) + 17, 5);
    let small = pattern(300, 6);
    let d_big = need!(a.malloc(big.len() as u64, AllocKind::Device)).addr;
    let d_small = need!(a.malloc(small.len() as u64, AllocKind::Device)).addr;
    need!(a.memcpy(LEGACY_STREAM, copy(d_big, big.as_ptr() as u64, big.len() as u64)));
    need!(a.memcpy(LEGACY_STREAM, copy(d_small, small.as_ptr() as u64, small.len() as u64)));
    // Managed memory, written by the host.
    let managed = pattern(8192 + 5, 8);
    let m = need!(a.malloc(managed.len() as u64, AllocKind::Managed)).addr;
    // SAFETY: mapped in this process at `m` by the backend until it is dropped.
    unsafe { std::slice::from_raw_parts_mut(m as *mut u8, managed.len()) }.copy_from_slice(&managed);
    // A module variable, changed from its initial value.
    let module = a.load_module(FATBIN).ok();
    if let Some(m) = module {
        let (table, _) = need!(a.symbol(m, "table"));
        let v: Vec<u8> = [10.0f32, 20.0, 30.0, 40.0].iter().flat_map(|f| f.to_le_bytes()).collect();
        need!(a.memcpy(LEGACY_STREAM, copy(table, v.as_ptr() as u64, 16)));
        // The copy reads `v` when the stream runs it: finish before `v` goes.
        need!(a.device_sync());
    }
    let (regions, saved) = need!(save(&*a));
    let allocations: Vec<(u64, u64)> = regions.iter().filter(|r| r.symbol.is_none()).map(|r| (r.addr, r.len)).collect();
    assert_eq!(allocations, {
        let mut v = vec![(d_big, big.len() as u64), (d_small, small.len() as u64), (m, managed.len() as u64)];
        v.sort();
        v
    });
    assert_eq!(regions.iter().any(|r| r.symbol.as_ref().is_some_and(|s| s.1 == "table")), module.is_some());
    drop(a);

    let b = make(base).expect("the backend opened once already");
    // The module is loaded again with its variables at their checkpointed addresses (the
    // emulated device places them; a driver that puts them elsewhere fails clearly).
    let mut regions = regions;
    let vars: Vec<(String, u64, AllocKind)> =
        regions.iter().filter_map(|r| r.symbol.as_ref().map(|s| (s.1.clone(), r.addr, r.kind))).collect();
    let module_b = match module.map(|_| b.restore_module(FATBIN, &vars)) {
        None => None,
        Some(Ok(m)) => Some(m),
        Some(Err(e)) => {
            assert_eq!(e, BackendError::Cuda(cuda::ERROR_INVALID_SYMBOL), "a moved module variable is refused by name");
            return;
        }
    };
    for r in &mut regions {
        if let (Some(sym), Some(m)) = (r.symbol.as_mut(), module_b) {
            sym.0 = m;
        }
    }
    let allocs = need!(restore_from(&*b, &regions, &saved));
    // Everything comes back at its address.
    for (a, r) in allocs.iter().zip(&regions) {
        assert_eq!(a.addr, r.addr);
    }
    assert_eq!(allocs.len(), regions.len());
    assert!(read_back(&*b, d_big, big.len()) == big);
    assert_eq!(read_back(&*b, d_small, small.len()), small);
    assert_eq!(read_back(&*b, m, managed.len()), managed, "managed memory restored");
    // SAFETY: the restore mapped the managed memory at `m` in this process again.
    assert!(unsafe { std::slice::from_raw_parts(m as *const u8, managed.len()) } == &managed[..]);
    if let Some(m) = module_b {
        let (table, _) = b.symbol(m, "table").unwrap();
        let got: Vec<f32> = read_back(&*b, table, 16).chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(got, vec![10.0, 20.0, 30.0, 40.0], "module variable restored");
    }
}

/// Issue 16, a checkpoint's cut: work enqueued while the queues are held does not start, the
/// queries say not ready, `queued_work` lists it in submission order over the streams (the
/// wait on the other stream by the job it waits for), and released, it runs in order, a host
/// function included, with the right results.
fn held_queues_keep_work_unstarted_and_list_it_in_order(b: &dyn Backend) {
    if !b.capabilities().queue_cut {
        eprintln!("skipped: the {} backend cannot hold its queues", b.name());
        return;
    }
    let m = need!(b.load_module(FATBIN));
    let incr = need!(b.function(m, "incr"));
    let (s1, s2) = (need!(b.stream_create(0, 0)), need!(b.stream_create(1, 0)));
    let n = 4096usize;
    let d = need!(b.malloc((n * 4) as u64, AllocKind::Device)).addr;
    need!(b.memset(s1, d, 0, 0, (n * 4) as u64, 1));
    need!(b.stream_sync(s1));
    let e = need!(b.event_create(0));
    let args = pack(&incr, &[&d.to_le_bytes(), &(n as i32).to_le_bytes()]);
    need!(b.hold_queues());
    for _ in 0..5 {
        need!(b.launch(s1, FuncId(incr.handle), dims((n / 256) as u32, 256, 0), args.clone()));
    }
    need!(b.event_record(e, s1));
    need!(b.stream_wait_event(s2, e));
    need!(b.launch(s2, FuncId(incr.handle), dims((n / 256) as u32, 256, 0), args.clone()));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    need!(b.host_func(s2, Box::new(move || seen2.lock().unwrap().push("h"))));
    assert!(!need!(b.stream_query(s1)) && !need!(b.stream_query(s2)), "a stream with held work is not idle");
    assert!(!need!(b.event_query(e)), "an event whose record is held is not complete");
    let q = need!(b.queued_work());
    let names: Vec<(u64, &str)> = q.iter().map(|w| (w.stream, w.op.name())).collect();
    let mut want = vec![(s1.0, "launch"); 5];
    want.extend([(s1.0, "event record"), (s2.0, "wait"), (s2.0, "launch"), (s2.0, "host function")]);
    assert_eq!(names, want);
    assert_eq!(q[6].op, crum_wire::ckpt::QueuedOp::WaitFor { on_stream: s1.0, on_seq: q[5].seq });
    assert!(q.windows(2).filter(|w| w[0].stream == w[1].stream).all(|w| w[1].seq == w[0].seq + 1), "{q:?}");
    assert!(seen.lock().unwrap().is_empty(), "a held host function ran");
    b.release_queues();
    need!(b.stream_sync(s2));
    assert_eq!(*seen.lock().unwrap(), vec!["h"]);
    assert!(need!(b.event_query(e)) && need!(b.stream_query(s1)));
    let got = read_back(b, d, n * 4);
    assert!(got.chunks(4).all(|c| i32::from_le_bytes(c.try_into().unwrap()) == 6), "every launch ran once, the one on s2 after s1's five");
}

/// Launches on the legacy stream and memsets on a blocking stream, alternating, 201 in all:
/// each must run after the one before it (the legacy stream's implicit order), however much
/// of the work the backend keeps back (all of it, held, where it can hold its queues): the words end as the last memset's bytes plus the one
/// launch after it. A launch let past a memset, or a memset past a launch, changes them.
fn long_queues_keep_the_legacy_stream_order(b: &dyn Backend) {
    let m = need!(b.load_module(FATBIN));
    let incr = need!(b.function(m, "incr"));
    let s = need!(b.stream_create(0, 0));
    let n = 256usize;
    let d = need!(b.malloc((n * 4) as u64, AllocKind::Device)).addr;
    let args = pack(&incr, &[&d.to_le_bytes(), &(n as i32).to_le_bytes()]);
    let e = need!(b.event_create(0));
    // Held, everything queues, and at the release every stream's work is there to run at once.
    let hold = b.capabilities().queue_cut;
    if hold {
        need!(b.hold_queues());
    }
    for i in 0..=200u32 {
        if i % 2 == 0 {
            need!(b.launch(LEGACY_STREAM, FuncId(incr.handle), dims(1, n as u32, 0), args.clone()));
        } else {
            need!(b.memset(s, d, 0, i as u8, (n * 4) as u64, 1));
        }
        if i == 101 {
            need!(b.event_record(e, s));
        }
    }
    if hold {
        b.release_queues();
    }
    need!(b.stream_sync(LEGACY_STREAM));
    assert!(need!(b.event_query(e)) && need!(b.stream_query(s)));
    let got = read_back(b, d, n * 4);
    assert!(got.chunks(4).all(|c| u32::from_le_bytes(c.try_into().unwrap()) == 0xc7c7_c7c8), "{:x?}", &got[..16]);
}

/// Work held at a cut and saved (`queued_work`) replays on a fresh backend restored from the
/// same state (`replay_work`, as a restart does), in order, with the wait between streams
/// renamed to the new sequence numbers.
fn held_work_replays_on_a_fresh_backend(base: u64, make: fn(u64) -> Option<Box<dyn Backend>>) {
    let Some(a) = make(base) else { return };
    if !a.capabilities().queue_cut {
        eprintln!("skipped: the {} backend cannot hold its queues", a.name());
        return;
    }
    let m = need!(a.load_module(FATBIN));
    let incr = need!(a.function(m, "incr"));
    let (s1, s2) = (need!(a.stream_create(0, 0)), need!(a.stream_create(1, 0)));
    let e = need!(a.event_create(0));
    let n = 4096usize;
    let d = need!(a.malloc((n * 4) as u64, AllocKind::Device)).addr;
    need!(a.memset(s1, d, 0, 0, (n * 4) as u64, 1));
    need!(a.device_sync());
    let args = pack(&incr, &[&d.to_le_bytes(), &(n as i32).to_le_bytes()]);
    need!(a.hold_queues());
    for _ in 0..3 {
        need!(a.launch(s1, FuncId(incr.handle), dims((n / 256) as u32, 256, 0), args.clone()));
    }
    need!(a.event_record(e, s1));
    need!(a.stream_wait_event(s2, e));
    need!(a.launch(s2, FuncId(incr.handle), dims((n / 256) as u32, 256, 0), args.clone()));
    let queue = need!(a.queued_work());
    let (mut regions, saved) = need!(save(&*a));
    let next = a.next_handle();
    // (What `a` held runs now, before it goes; its state was saved above.)
    a.release_queues();
    need!(a.device_sync());
    drop(a);

    let b = make(base).expect("the backend opened once already");
    need!(b.set_next_handle(m.0));
    let (m2, _) = need!(restore_all(&*b, &mut regions, &saved));
    assert_eq!(m2, m);
    need!(b.set_next_handle(incr.handle));
    assert_eq!(need!(b.function(m2, "incr")).handle, incr.handle);
    for (h, flags) in [(s1.0, 0), (s2.0, 1)] {
        need!(b.set_next_handle(h));
        assert_eq!(need!(b.stream_create(flags, 0)).0, h);
    }
    need!(b.set_next_handle(e.0));
    assert_eq!(need!(b.event_create(0)), e);
    need!(b.set_next_handle(next));
    let mut seqs = std::collections::HashMap::new();
    for w in &queue {
        let new = need!(b.replay_work(w, &|s, q| seqs.get(&(s, q)).copied(), None));
        seqs.insert((w.stream, w.seq), new);
    }
    need!(b.stream_sync(s2));
    let got = read_back(&*b, d, n * 4);
    assert!(got.chunks(4).all(|c| i32::from_le_bytes(c.try_into().unwrap()) == 4), "{:?}", &got[..16]);
}

/// A saved launch stopped at a block boundary (`first_block`, as the emulated device saves
/// a grid it stopped at a cut) runs only the blocks from there on where the backend can run
/// the rest of a grid; the cuda backend runs it in the kernel's preemptible form, which a
/// module with variables (this one) cannot use: refused, naming why, nothing run.
fn a_launch_saved_from_a_block_runs_only_the_rest(b: &dyn Backend) {
    let m = need!(b.load_module(FATBIN));
    let fill = need!(b.function(m, "fill"));
    let (blocks, threads) = (16u32, 64u32);
    let n = (blocks * threads) as usize;
    let d = need!(b.malloc((n * 4) as u64, AllocKind::Device)).addr;
    need!(b.memset(LEGACY_STREAM, d, 0, 0, (n * 4) as u64, 1));
    let params = pack(&fill, &[&d.to_le_bytes(), &(n as i32).to_le_bytes(), &1.0f32.to_le_bytes()]);
    let w = crum_wire::ckpt::QueuedWork {
        stream: 0,
        seq: 1,
        op: crum_wire::ckpt::QueuedOp::Launch {
            func: fill.handle,
            grid: [blocks, 1, 1],
            block: [threads, 1, 1],
            shared: 0,
            cooperative: false,
            params,
            first_block: 10,
            contexts: Vec::new(),
        },
    };
    match b.replay_work(&w, &|_, _| None, None) {
        Ok(_) => {
            need!(b.device_sync());
            let got = read_back(b, d, n * 4);
            let vals: Vec<f32> = got.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
            let from = 10 * threads as usize;
            assert!(vals[..from].iter().all(|&v| v == 0.0), "blocks before the first ran");
            assert!(vals[from..].iter().enumerate().all(|(k, &v)| v == 1.0 + (from + k) as f32), "the rest did not run right");
        }
        Err(BackendError::Other(why)) => {
            assert!(b.name() == "cuda" && why.contains("`fill`") && why.contains("variables"), "{why}");
            need!(b.device_sync());
            assert!(read_back(b, d, n * 4).iter().all(|&x| x == 0), "a refused launch ran");
        }
        Err(e) => panic!("replaying a launch from block 10: {e}"),
    }
}

macro_rules! conformance {
    ($backend:ident, $make:path, $sized:path; $($case:ident),* $(,)?) => {
        mod $backend {
            $(
                #[test]
                fn $case() {
                    if let Some(b) = $make(super::next_window()) {
                        super::$case(&*b);
                    }
                }
            )*

            #[test]
            fn device_state_survives_save_and_restore() {
                super::device_state_survives_save_and_restore(super::next_window(), $make);
            }
            #[test]
            fn managed_variables_survive_save_and_restore() {
                super::managed_variables_survive_save_and_restore(super::next_window(), $make);
            }
            #[test]
            fn vmm_mappings_are_placed_saved_and_restored() {
                super::vmm_mappings_are_placed_saved_and_restored(super::next_big_window(), $sized);
            }
            #[test]
            fn device_heap_blocks_are_saved_or_named() {
                super::device_heap_blocks_are_saved_or_named(super::next_window(), $make);
            }
            #[test]
            fn event_times_survive_save_and_restore() {
                super::event_times_survive_save_and_restore(super::next_window(), $make);
            }
            #[test]
            fn held_work_replays_on_a_fresh_backend() {
                super::held_work_replays_on_a_fresh_backend(super::next_window(), $make);
            }
        }
    };
}

conformance!(emu, super::make_emu, super::make_emu_sized;
    copies_in_every_direction,
    managed_memory_is_shared_host_memory,
    managed_variables_are_shared_with_the_host,
    module_variables_the_program_never_named_are_saved,
    allocations_are_distinct_and_tracked,
    launches_with_every_parameter_kind,
    launch_geometry_and_dynamic_shared_memory,
    module_variables_are_device_memory,
    module_kernels_are_listed,
    host_functions_run_in_stream_order,
    events_order_work_between_streams,
    streams_events_and_host_functions_keep_order,
    registered_memory_is_copied_in_stream_order,
    concurrent_lanes_do_not_interfere,
    errors_are_reported_as_the_runtime_does,
    stream_hints_are_taken_and_limits_reported,
    mipmap_textures_and_graph_conditions_follow_the_capabilities,
    held_queues_keep_work_unstarted_and_list_it_in_order,
    long_queues_keep_the_legacy_stream_order,
    a_launch_saved_from_a_block_runs_only_the_rest,
);

conformance!(gpu, super::make_cuda, super::make_cuda_sized;
    copies_in_every_direction,
    managed_memory_is_shared_host_memory,
    managed_variables_are_shared_with_the_host,
    module_variables_the_program_never_named_are_saved,
    allocations_are_distinct_and_tracked,
    launches_with_every_parameter_kind,
    launch_geometry_and_dynamic_shared_memory,
    module_variables_are_device_memory,
    module_kernels_are_listed,
    host_functions_run_in_stream_order,
    events_order_work_between_streams,
    streams_events_and_host_functions_keep_order,
    registered_memory_is_copied_in_stream_order,
    concurrent_lanes_do_not_interfere,
    errors_are_reported_as_the_runtime_does,
    stream_hints_are_taken_and_limits_reported,
    mipmap_textures_and_graph_conditions_follow_the_capabilities,
    held_queues_keep_work_unstarted_and_list_it_in_order,
    long_queues_keep_the_legacy_stream_order,
    a_launch_saved_from_a_block_runs_only_the_rest,
);

/// The PTX fallback of the `cuda` backend (drivers without `cuFuncGetParamInfo`) reads the
/// layout nvcc really emits, and agrees with the PTX engine's own reading.
#[test]
fn ptx_fallback_layout_matches_nvcc_output_and_the_ptx_engine() {
    let ptx = include_str!("data/kernels.ptx");
    let layout = crum_proxy::cuda::params::layout_from_ptx(ptx, "kinds").unwrap();
    assert_eq!(layout, vec![(0, 8), (8, 1), (10, 2), (12, 4), (16, 8), (24, 4), (32, 8), (40, 24), (64, 16)]);
    assert_eq!(crum_proxy::cuda::params::layout_from_ptx(ptx, "bump").unwrap(), vec![]);
    match crum_ptx::Module::parse(ptx) {
        Ok(m) => {
            for k in m.kernels() {
                let engine: Vec<(u32, u32)> = k.params.iter().map(|p| (p.offset, p.size)).collect();
                assert_eq!(crum_proxy::cuda::params::layout_from_ptx(ptx, &k.name).unwrap(), engine, "kernel {}", k.name);
            }
        }
        Err(e) => eprintln!("skipped the cross-check: the PTX engine cannot parse the test PTX yet: {e}"),
    }
}

/// Marks the child process of [`gpu_backend_plumbing_against_a_fake_driver`].
const FAKE_DRIVER_ENV: &str = "CRUM_TEST_FAKE_CUDA";

/// Where no GPU exists, every `gpu` case still checks the `cuda` backend's plumbing (window
/// reservation, planner and mappings, staged and pipelined copies, pinned memory, modules,
/// parameter packing and launches, module variables, streams, events, host functions,
/// snapshot/restore, release on drop) against a CPU stand-in for `libcuda.so`
/// (`src/cuda/fake_libcuda.c`, whose kernels are the test kernels written in C), in a child
/// process whose library path finds it first.
#[test]
fn gpu_backend_plumbing_against_a_fake_driver() {
    if std::env::var_os(FAKE_DRIVER_ENV).is_some() {
        return;
    }
    let Some(text) = run_on_fake_driver(&[], &["gpu::"]) else { return };
    let passed = text.lines().filter(|l| l.starts_with("test gpu::") && l.ends_with("... ok")).count();
    assert!(passed >= 21 && text.contains("gpu::vmm_mappings_are_placed_saved_and_restored ... ok") && text.contains("gpu::device_heap_blocks_are_saved_or_named ... ok") && !text.contains("FAILED"), "only {passed} gpu cases ran:\n{text}");
}

/// The same against a fake of a driver older than CUDA 12.4 (no `cuFuncGetParamInfo`): kernel
/// parameter layouts come from the PTX in the fat binary.
#[test]
fn gpu_launches_on_a_driver_without_param_info_use_the_ptx_layout() {
    if std::env::var_os(FAKE_DRIVER_ENV).is_some() {
        return;
    }
    let cases = ["gpu::launches_with_every_parameter_kind", "gpu::launch_geometry_and_dynamic_shared_memory", "gpu::module_variables_are_device_memory"];
    let Some(text) = run_on_fake_driver(&["-DNO_PARAM_INFO"], &cases) else { return };
    let passed = text.lines().filter(|l| l.starts_with("test gpu::") && l.ends_with("... ok")).count();
    assert_eq!(passed, cases.len(), "{text}");
}

/// Build the fake driver with `defines`, run the `filters` tests of this binary against it in
/// a child process; their output, or None (with the reason printed) when `cc` is missing.
fn run_on_fake_driver(defines: &[&str], filters: &[&str]) -> Option<String> {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!("crum-fake-cuda-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir_all(&dir).unwrap();
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/src/cuda/fake_libcuda.c");
    let built = std::process::Command::new("cc").args(["-shared", "-fPIC", "-O1"]).args(defines).arg("-o").arg(dir.join("libcuda.so")).arg(src).status();
    match built {
        Ok(s) if s.success() => {}
        other => {
            eprintln!("skipped: cannot build the fake driver with cc ({other:?})");
            return None;
        }
    }
    let text = run_gpu_cases(("LD_LIBRARY_PATH", dir.as_os_str()), filters, "the fake driver");
    let _ = std::fs::remove_dir_all(&dir);
    Some(text)
}

/// Run the `filters` tests of this binary in a child process with `env` set (which makes the
/// `cuda` backend find a driver); their output. Every case must pass and none be skipped.
fn run_gpu_cases(env: (&str, &std::ffi::OsStr), filters: &[&str], driver: &str) -> String {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    // One test at a time: the driver places module variables by load order, as a driver
    // does in a proxy without address randomization, and the save/restore cases rely on it.
    cmd.arg("--nocapture").arg("--test-threads=1").args(filters);
    if filters.len() > 1 {
        cmd.arg("--exact");
    }
    let out = cmd.env(env.0, env.1).env(FAKE_DRIVER_ENV, "1").output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "gpu cases failed on {driver}:\n{text}");
    assert!(!text.contains("skipped"), "{driver} was not used, or a case was skipped:\n{text}");
    text
}

/// Every `gpu` case against crum's emulated driver (`integration-tests/emu-libcuda`, loaded
/// through `CRUM_LIBCUDA`), which runs the test kernels' own PTX on the interpreter and its
/// streams asynchronously: the backend against a driver with a real driver's behaviour, not
/// hand-written kernels. Skipped (with the reason) where the library has not been built
/// (`cargo test --workspace` builds it).
#[test]
fn gpu_cases_against_the_emulated_driver() {
    if std::env::var_os(FAKE_DRIVER_ENV).is_some() {
        return;
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let lib = target.join("debug/libcrum_emu_libcuda.so");
    if !lib.exists() {
        eprintln!("skipped: {} is not built (cargo build --workspace)", lib.display());
        return;
    }
    let text = run_gpu_cases((crum_proxy::cuda::driver::LIBCUDA_ENV, lib.as_os_str()), &["gpu::"], "the emulated driver");
    let passed = text.lines().filter(|l| l.starts_with("test gpu::") && l.ends_with("... ok")).count();
    assert!(passed >= 21 && text.contains("gpu::launches_with_every_parameter_kind ... ok"), "only {passed} gpu cases ran:\n{text}");
}
