//! Images are untrusted input. A structure-aware fuzzer: valid crum images (process state,
//! memory regions, a CUDA program's device sections, small or stored as blobs) are written
//! with the real encoders, then damaged — a section's bytes before it is written (so its
//! checksum is right), or a file of the image afterwards with the checksums that cover it
//! recomputed (inventory, region table, the damaged chunk's), so that damage reaches the
//! decoders behind the checksums. Every image then goes through what `crum restart` checks
//! before it changes anything ([`crum_restart::validate`]) and what `crum inspect --verify`
//! does ([`crum_restart::check::image`]) and every region is read: each outcome must be a
//! value or a one-line error — never a panic, an abort, or an allocation far beyond the
//! image (a counting allocator checks the largest one).
//!
//! Runs a bounded number of cases in the test suite (96, a few seconds); for a long run:
//! `PROPTEST_CASES=100000 cargo test --release -p crum-restart --test image_fuzz`, with
//! `CRUM_FUZZ_STATS=1` and `-- --nocapture` to see which check refused each image.
//!
//! Also here: directed tests of the same checks (a missing device section, contradicting
//! region flags, damaged device data, a huge length in the process section).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::{Path, PathBuf};

use crum_ckpt::image::{ImageReader, ImageWriter, RegionMeta, WriterOptions};
use crum_ckpt::state::{
    FdKind, FdState, ProcessState, ThreadInfo, PROCESS_STATE_VERSION, REGION_BLOB, REGION_GROWSDOWN,
    REGION_SHARED_ANON, REGION_SHARED_FILE, SECTION_PROCESS,
};
use crum_wire::ckpt::{DeviceState, SavedMemory, SavedStream, SECTION_DEVICE, SECTION_DEVICE_DATA};
use crum_wire::AllocKind;
use proptest::prelude::*;

#[path = "../../ckpt/tests/common/mod.rs"]
mod common;
use common::noise;

// ---------------------------------------------------------------------------------------
// The largest allocation a thread asked for (the fuzzed code runs on the test's thread).

struct Counting;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

// SAFETY: forwards every call to the system allocator unchanged; only records sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: a block of ours, with its layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Runs `f` and returns what it returned and the largest allocation it made.
fn largest_in<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|l| l.set(0));
    let v = f();
    (v, LARGEST.with(|l| l.get()))
}

/// Most a check of a damaged image may allocate at once: a chunk (at most 64 MiB, by the
/// format) and its compressed form, whatever lengths the image claims.
const ALLOC_LIMIT: usize = 80 << 20;

// ---------------------------------------------------------------------------------------
// Valid images.

const CHUNK: u32 = 64 * 1024;
const BASE: u64 = 0x4000_0000;

/// What a generated image holds.
#[derive(Debug, Clone)]
struct Spec {
    /// Per process region: pages of 4 KiB and how they are filled (0 zero, 1 noise, 2 text).
    regions: Vec<(u64, u8)>,
    /// Region flags of the regions after the first.
    shared: Vec<bool>,
    /// Device objects (None: not a CUDA program) and device data bytes.
    device: Option<(usize, usize)>,
    pipe_data: Vec<u8>,
    seed: u64,
}


fn fill(len: usize, how: u8, seed: u64) -> Vec<u8> {
    match how {
        0 => vec![0; len],
        1 => noise(len, seed),
        _ => (0..len).map(|i| b"restart me "[i % 11]).collect(),
    }
}

struct Built {
    process: Vec<u8>,
    device: Option<(Vec<u8>, Vec<u8>)>,
    regions: Vec<(RegionMeta<'static>, Vec<u8>)>,
}

fn build(spec: &Spec) -> Built {
    let mut regions = Vec::new();
    let mut at = BASE;
    for (i, &(pages, how)) in spec.regions.iter().enumerate() {
        let len = pages * 4096;
        let flags = if i == 0 {
            REGION_GROWSDOWN
        } else if spec.shared.get(i).copied().unwrap_or(false) {
            REGION_SHARED_ANON
        } else {
            0
        };
        let meta = RegionMeta { start: at, len, prot: 3, flags, offset: 0, name: b"[anon]" };
        regions.push((meta, fill(len as usize, how, spec.seed + i as u64)));
        at += len + 4096;
    }
    let first = &regions[0].0;
    let mut hooks = Vec::new();
    let device = spec.device.map(|(n, data_len)| {
        let mut d = DeviceState::empty();
        d.backend = "emu".into();
        d.device_name = "fuzz".into();
        let per = (data_len / n.max(1)) as u64;
        for i in 0..n as u64 {
            d.regions.push(SavedMemory {
                addr: crum_wire::DEVICE_VA_BASE + (i << 20),
                len: per,
                kind: AllocKind::Device,
                symbol: (i % 2 == 1).then(|| (i, format!("v{i}"))),
                data_offset: i * per,
            });
            d.streams.push(SavedStream { handle: i + 1, flags: 1, priority: 0 });
        }
        d.data_len = data_len as u64;
        d.printf = b"printf\n".to_vec();
        hooks = vec![SECTION_DEVICE.to_string(), SECTION_DEVICE_DATA.to_string()];
        (d.encode(), fill(data_len, 2, spec.seed ^ 7))
    });
    let state = ProcessState {
        version: PROCESS_STATE_VERSION,
        pid: 4242,
        pid_history: vec![17],
        exe: "/bin/fuzzed".into(),
        cmdline: vec!["fuzzed".into(), "--now".into()],
        cwd: "/".into(),
        regions: Vec::new(),
        specials: Vec::new(),
        threads: vec![ThreadInfo { tid: 4242, slot: 0, fs_base: 0, is_agent: false }],
        entry: first.start + 16,
        restart_info: first.start + 64,
        main_slot: 0,
        main_stack: first.start + first.len,
        fds: vec![
            FdState { fd: 0, flags: 0, kind: FdKind::Stdio },
            FdState { fd: 3, flags: 0, kind: FdKind::Pipe { id: 1, read: true, data: spec.pipe_data.clone() } },
            FdState { fd: 4, flags: 1, kind: FdKind::Pipe { id: 1, read: false, data: Vec::new() } },
            FdState { fd: 5, flags: 1, kind: FdKind::Dup { of: 4 } },
            FdState { fd: 6, flags: 2, kind: FdKind::CharDev { path: "/dev/null".into() } },
        ],
        sigactions: Vec::new(),
        itimers: [(0, 0); 3],
        start_brk: 0,
        brk: 0,
        rlimits: vec![(1024, 4096)],
        umask: 0o022,
        hook_sections: hooks,
        locks: vec![],
        pipe_sizes: vec![],
        pending_signals: vec![],
        posix_timers: vec![],
        advice: vec![],
        guards: vec![],
        file_contents: vec![],
        fd_attrs: vec![],
        deleted_extents: vec![],
        fd_owners: vec![],
        mm_layout: vec![],
        auxv: vec![],
        sysv_shm: vec![],
    };
    Built { process: state.encode(), device, regions }
}

/// Writes an image of `b` under `parent`; hook sections of 64 KiB or more as blobs, as the
/// agent does.
fn write(parent: &Path, b: &Built) -> PathBuf {
    let opts = WriterOptions { chunk_size: CHUNK, dir_name: Some("img".into()), ..Default::default() };
    let mut w = ImageWriter::prepare(parent, &opts).unwrap();
    w.add_section(SECTION_PROCESS, true, &b.process).unwrap();
    if let Some((state, data)) = &b.device {
        for (name, bytes) in [(SECTION_DEVICE, state), (SECTION_DEVICE_DATA, data)] {
            if bytes.len() >= 64 << 10 {
                let meta = RegionMeta { start: 0, len: bytes.len() as u64, prot: 0, flags: REGION_BLOB, offset: 0, name: name.as_bytes() };
                w.add_region(&meta, bytes).unwrap();
            } else {
                w.add_section(name, true, bytes).unwrap();
            }
        }
    }
    for (meta, data) in &b.regions {
        w.add_region(meta, data).unwrap();
    }
    w.commit().unwrap();
    w.final_path().to_path_buf()
}

// ---------------------------------------------------------------------------------------
// Damage, with checksums recomputed.

const HEADER: usize = 144;
const ENTRY: usize = 112;

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}
fn cstr(f: &[u8]) -> String {
    String::from_utf8_lossy(&f[..f.iter().position(|&c| c == 0).unwrap_or(f.len())]).into_owned()
}

/// (name, file, entry offset) of every inventory entry.
fn entries(inv: &[u8]) -> Vec<(String, String, usize)> {
    let n = le32(inv, 12) as usize;
    (0..n)
        .map(|i| HEADER + i * ENTRY)
        .filter(|&at| at + ENTRY <= inv.len())
        .map(|at| (cstr(&inv[at..at + 48]), cstr(&inv[at + 64..at + 112]), at))
        .collect()
}

fn seal_inventory(inv: &mut [u8]) {
    if inv.len() >= 4 {
        let end = inv.len() - 4;
        let crc = crc32fast::hash(&inv[..end]);
        inv[end..].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Records file `file`'s new size and checksum in the inventory and reseals it.
fn reseal_file(img: &Path, file: &str) {
    let p = img.join("inventory");
    let mut inv = std::fs::read(&p).unwrap();
    let bytes = std::fs::read(img.join(file)).unwrap_or_default();
    for (_, f, at) in entries(&inv) {
        if f == file {
            let chunked = le32(&inv, at + 48) & 2 != 0;
            let crc = if chunked { 0 } else { crc32fast::hash(&bytes) };
            inv[at + 52..at + 56].copy_from_slice(&crc.to_le_bytes());
            inv[at + 56..at + 64].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
        }
    }
    seal_inventory(&mut inv);
    std::fs::write(&p, &inv).unwrap();
}

/// Offsets in `regions` of every chunk record, with the chunk's stored offset and length.
fn chunk_records(regions: &[u8]) -> Vec<(usize, u64, u32)> {
    let mut out = Vec::new();
    if regions.len() < 48 {
        return out;
    }
    let bm = le32(regions, 16) as usize;
    let rec = (24 + bm).next_multiple_of(8);
    let body_end = regions.len() - 16;
    let count = le32(regions, body_end + 8);
    let mut at = 32;
    for _ in 0..count {
        if at + 48 > body_end {
            break;
        }
        let name_len = le32(regions, at + 32) as usize;
        let n = le32(regions, at + 40) as usize;
        at += 48 + name_len.next_multiple_of(8);
        for _ in 0..n {
            if at + rec > body_end {
                return out;
            }
            out.push((at, le64(regions, at), le32(regions, at + 8)));
            at += rec;
        }
    }
    out
}

#[derive(Debug, Clone)]
enum Edit {
    /// XOR a byte.
    Flip { at: prop::sample::Index, mask: u8 },
    /// Write a little-endian value of 4 or 8 bytes.
    Word { at: prop::sample::Index, wide: bool, value: u64 },
    /// Write bincode's varint of `value` (a length where one lies).
    Varint { at: prop::sample::Index, value: u64 },
    /// Cut the file.
    Truncate { at: prop::sample::Index },
    /// Remove the file's entry from the inventory (the file stays).
    Drop,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Target {
    Inventory,
    Regions,
    Pages,
    Process,
    Device,
    DeviceData,
}

#[derive(Debug, Clone)]
struct Damage {
    target: Target,
    edit: Edit,
    /// Damage the section's bytes before they are written (checksums made by the writer).
    before_write: bool,
    /// Recompute the checksums covering a damaged file (else the checks must catch it).
    reseal: bool,
}

fn interesting() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::MAX),
        Just(u32::MAX as u64),
        Just(1 << 31),
        Just(1 << 40),
        Just(1 << 62),
        Just(4096),
        Just(CHUNK as u64),
        any::<u64>(),
        0u64..300,
    ]
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        4 => (any::<prop::sample::Index>(), 1u8..).prop_map(|(at, mask)| Edit::Flip { at, mask }),
        4 => (any::<prop::sample::Index>(), any::<bool>(), interesting()).prop_map(|(at, wide, value)| Edit::Word { at, wide, value }),
        3 => (any::<prop::sample::Index>(), interesting()).prop_map(|(at, value)| Edit::Varint { at, value }),
        1 => any::<prop::sample::Index>().prop_map(|at| Edit::Truncate { at }),
        1 => Just(Edit::Drop),
    ]
}

fn damage() -> impl Strategy<Value = Damage> {
    let target = prop_oneof![
        Just(Target::Inventory),
        Just(Target::Regions),
        Just(Target::Pages),
        Just(Target::Process),
        Just(Target::Device),
        Just(Target::DeviceData),
    ];
    (target, edit(), any::<bool>(), prop::bool::weighted(0.85))
        .prop_map(|(target, edit, before_write, reseal)| Damage { target, edit, before_write, reseal })
}

fn varint(v: u64) -> Vec<u8> {
    bincode::encode_to_vec(v, bincode::config::standard()).unwrap()
}

/// Applies `e` to `bytes`; false if there was nothing to apply it to.
fn apply(bytes: &mut Vec<u8>, e: &Edit) -> bool {
    if bytes.is_empty() {
        return false;
    }
    match e {
        Edit::Flip { at, mask } => {
            let i = at.index(bytes.len());
            bytes[i] ^= mask;
        }
        Edit::Word { at, wide, value } => {
            let w = if *wide { 8 } else { 4 };
            let i = at.index(bytes.len());
            let v = value.to_le_bytes();
            let n = w.min(bytes.len() - i);
            bytes[i..i + n].copy_from_slice(&v[..n]);
        }
        Edit::Varint { at, value } => {
            let i = at.index(bytes.len());
            let v = varint(*value);
            let end = (i + 1).min(bytes.len());
            bytes.splice(i..end, v);
        }
        Edit::Truncate { at } => bytes.truncate(at.index(bytes.len())),
        Edit::Drop => return false,
    }
    true
}

/// The file of a section: from the inventory, or None if it is stored as a blob.
fn file_of(img: &Path, section: &str) -> Option<String> {
    let inv = std::fs::read(img.join("inventory")).ok()?;
    entries(&inv).into_iter().find(|(n, _, _)| n == section).map(|(_, f, _)| f)
}

/// Damages the written image at `img` (see [`Damage`]).
fn damage_file(img: &Path, d: &Damage) {
    let name = match d.target {
        Target::Inventory => None,
        Target::Regions => Some("regions"),
        Target::Pages => Some("pages"),
        Target::Process => Some(SECTION_PROCESS),
        Target::Device => Some(SECTION_DEVICE),
        Target::DeviceData => Some(SECTION_DEVICE_DATA),
    };
    if let Edit::Drop = d.edit {
        let Some(name) = name else { return };
        let p = img.join("inventory");
        let mut inv = std::fs::read(&p).unwrap();
        if let Some((_, _, at)) = entries(&inv).into_iter().find(|(n, _, _)| n == name) {
            inv.drain(at..at + ENTRY);
            let n = le32(&inv, 12) - 1;
            inv[12..16].copy_from_slice(&n.to_le_bytes());
            seal_inventory(&mut inv);
            std::fs::write(&p, &inv).unwrap();
        }
        return;
    }
    let file = match name {
        None => "inventory".to_string(),
        // A blob section: damage its stored chunks in `pages`.
        Some(n) => file_of(img, n).unwrap_or_else(|| "pages".to_string()),
    };
    let p = img.join(&file);
    let Ok(mut bytes) = std::fs::read(&p) else { return };
    let before = bytes.clone();
    if !apply(&mut bytes, &d.edit) {
        return;
    }
    std::fs::write(&p, &bytes).unwrap();
    if !d.reseal {
        return;
    }
    match file.as_str() {
        "inventory" => {
            seal_inventory(&mut bytes);
            std::fs::write(&p, &bytes).unwrap();
        }
        "pages" => {
            // Re-checksum every chunk whose stored bytes changed.
            let rp = img.join("regions");
            let mut regions = std::fs::read(&rp).unwrap();
            for (rec, off, len) in chunk_records(&regions) {
                let (s, e) = (off as usize, off as usize + len as usize);
                if e <= bytes.len() && before.get(s..e) != bytes.get(s..e) {
                    let crc = crc32fast::hash(&bytes[s..e]);
                    regions[rec + 16..rec + 20].copy_from_slice(&crc.to_le_bytes());
                }
            }
            std::fs::write(&rp, &regions).unwrap();
            reseal_file(img, "regions");
            reseal_file(img, "pages");
        }
        f => reseal_file(img, f),
    }
}

/// Everything crum does with an image before (and while) restoring it, and what
/// `crum inspect --verify` does. Panics only if a check misbehaves.
fn exercise(img: &Path) {
    let ((), largest) = largest_in(|| {
        let v = crum_restart::validate(img);
        if std::env::var_os("CRUM_FUZZ_STATS").is_some() {
            // Which check refused each image (to see that damage reaches the decoders).
            eprintln!("outcome: {}", v.as_ref().map_or_else(|e| e.to_string(), |_| "accepted".into()));
        }
        if let Err(e) = v {
            let e = e.to_string();
            assert!(!e.contains('\n'), "multi-line error: {e}");
        }
        if let Ok(mut r) = ImageReader::open(img) {
            let _ = crum_restart::check::image(&mut r, true);
            for i in 0..r.regions().len() {
                if r.regions()[i].len <= 16 << 20 {
                    let _ = r.read_region(i);
                }
            }
            if let Ok(Some(b)) = r.section(SECTION_PROCESS) {
                let _ = ProcessState::decode(&b);
            }
        }
    });
    assert!(largest <= ALLOC_LIMIT, "checking a damaged image allocated {largest} bytes at once");
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        proptest::collection::vec((1u64..40, 0u8..3), 1..4),
        proptest::collection::vec(any::<bool>(), 3),
        proptest::option::weighted(0.8, (0usize..5, prop_oneof![0usize..3000, (64usize << 10)..(200 << 10)])),
        proptest::collection::vec(any::<u8>(), 0..32),
        any::<u64>(),
    )
        .prop_map(|(regions, shared, device, pipe_data, seed)| Spec { regions, shared, device, pipe_data, seed })
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(96)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn damaged_images_give_a_value_or_a_clean_error(spec in spec(), damages in proptest::collection::vec(damage(), 1..5)) {
        let tmp = tempfile::tempdir().unwrap();
        let built = build(&spec);
        let good = write(tmp.path(), &built);
        crum_restart::validate(&good).unwrap_or_else(|e| panic!("the undamaged image is refused: {e}"));
        for (i, d) in damages.iter().enumerate() {
            let parent = tmp.path().join(format!("d{i}"));
            std::fs::create_dir(&parent).unwrap();
            let mut b = Built { process: built.process.clone(), device: built.device.clone(), regions: built.regions.clone() };
            let payload = match d.target {
                Target::Process => Some(&mut b.process),
                Target::Device => b.device.as_mut().map(|d| &mut d.0),
                Target::DeviceData => b.device.as_mut().map(|d| &mut d.1),
                _ => None,
            };
            let damaged_before = match payload {
                Some(p) if d.before_write => apply(p, &d.edit),
                _ => false,
            };
            let img = write(&parent, &b);
            if !damaged_before {
                damage_file(&img, d);
            }
            exercise(&img);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Directed tests.

fn cuda_spec(data: usize) -> Spec {
    Spec { regions: vec![(4, 1), (2, 0)], shared: vec![false; 3], device: Some((3, data)), pipe_data: b"buffered".to_vec(), seed: 5 }
}

fn validate_err(img: &Path) -> String {
    match crum_restart::validate(img) {
        Ok(_) => panic!("a crafted image {} was accepted", img.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn an_image_whose_device_section_is_gone_even_from_the_inventory_is_refused() {
    for data in [100, 100 << 10] {
        let tmp = tempfile::tempdir().unwrap();
        let img = write(tmp.path(), &build(&cuda_spec(data)));
        crum_restart::validate(&img).unwrap();
        let inv = std::fs::read(img.join("inventory")).unwrap();
        let sec = entries(&inv).into_iter().find(|(n, _, _)| n == SECTION_DEVICE).unwrap();
        assert_eq!(le32(&inv, sec.2 + 48) & 1, 1, "the device state is a required section");
        // Dropped from the inventory, checksum recomputed: nothing says it was there but
        // the process state.
        damage_file(&img, &Damage { target: Target::Device, edit: Edit::Drop, before_write: false, reseal: true });
        let e = validate_err(&img);
        assert!(e.contains("lacks its `crum.device` section"), "{e}");
    }
}

#[test]
fn device_sections_the_process_state_does_not_list_are_refused() {
    // A program's device sections (small, and a blob) next to the process state of a
    // program that used no device.
    for data in [100, 100 << 10] {
        let tmp = tempfile::tempdir().unwrap();
        let mut b = build(&cuda_spec(data));
        let mut spec = cuda_spec(data);
        spec.device = None;
        b.process = build(&spec).process;
        let img = write(tmp.path(), &b);
        let e = validate_err(&img);
        assert!(e.contains("its process state does not list"), "{e}");
    }
}

#[test]
fn region_flags_that_contradict_the_region_are_refused() {
    let cases: [(&str, u32, &[u8], &str); 6] = [
        ("blob flag on process memory", REGION_BLOB, b"[anon]", "marked as a stored section"),
        ("unknown bit", 0x40, b"[anon]", "unknown flags 0x40"),
        ("shared file without a path", REGION_SHARED_FILE, b"", "without a file path"),
        ("shared file with contents", REGION_SHARED_FILE, b"/etc/hostname", "with stored contents"),
        ("both shared kinds", REGION_SHARED_ANON | REGION_SHARED_FILE, b"/etc/hostname", "both shared"),
        ("shared stack", REGION_SHARED_ANON | REGION_GROWSDOWN, b"[anon]", "shared and as the stack"),
    ];
    for (what, flags, name, want) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let mut b = build(&cuda_spec(100));
        b.regions[0].0.flags = flags;
        b.regions[0].0.name = name;
        let img = write(tmp.path(), &b);
        let e = validate_err(&img);
        assert!(e.contains(want), "{what}: {e}");
    }
}

#[test]
fn damaged_device_data_is_refused_before_the_restart_changes_anything() {
    // Small data (a metadata section) and large data (a compressed blob): a flipped stored
    // byte is caught by validate(), which runs before any file is touched.
    for data in [3000, 150 << 10] {
        let tmp = tempfile::tempdir().unwrap();
        let img = write(tmp.path(), &build(&cuda_spec(data)));
        let file = file_of(&img, SECTION_DEVICE_DATA).unwrap_or_else(|| "pages".into());
        let mut bytes = std::fs::read(img.join(&file)).unwrap();
        let at = if file == "pages" {
            // Inside the blob's first chunk (the blob is written before process memory).
            let r = ImageReader::open(&img).unwrap();
            let blob = r.regions().iter().find(|g| g.flags & REGION_BLOB != 0).unwrap();
            blob.chunks[0].offset as usize + 10
        } else {
            10
        };
        bytes[at] ^= 0x20;
        std::fs::write(img.join(&file), &bytes).unwrap();
        let e = validate_err(&img);
        assert!(e.contains("checksum"), "{data}: {e}");
    }
}

#[test]
fn device_data_of_another_size_than_the_state_says_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut b = build(&cuda_spec(3000));
    b.device.as_mut().unwrap().1.truncate(2000);
    let img = write(tmp.path(), &b);
    let e = validate_err(&img);
    assert!(e.contains("describes 3000 bytes of device data") && e.contains("holds 2000"), "{e}");
}

#[test]
fn a_huge_length_in_the_process_section_allocates_nothing_for_it() {
    let b = build(&cuda_spec(100));
    let at = b.process.windows(12).position(|w| w == b"\x0b/bin/fuzzed").unwrap();
    for huge in [u64::MAX, 1 << 40, 512 << 20] {
        let mut bytes = b.process.clone();
        bytes.splice(at..at + 1, varint(huge));
        let (r, largest) = largest_in(|| ProcessState::decode(&bytes));
        assert!(r.is_err(), "{huge}");
        assert!(largest < 1 << 20, "a {huge}-byte length allocated {largest} bytes");
    }
}

#[test]
fn version_1_images_still_validate() {
    let tmp = tempfile::tempdir().unwrap();
    let mut b = build(&cuda_spec(100));
    let mut st = ProcessState::decode(&b.process).unwrap();
    st.version = 1;
    st.hook_sections.clear();
    st.locks.clear();
    st.pipe_sizes.clear();
    st.pending_signals.clear();
    st.posix_timers.clear();
    st.advice.clear();
    st.guards.clear();
    st.file_contents.clear();
    st.fd_attrs.clear();
    st.deleted_extents.clear();
    st.fd_owners.clear();
    st.mm_layout.clear();
    st.auxv.clear();
    b.process = st.encode();
    // Version 1 ends before `hook_sections`, `locks`, `pipe_sizes`, `pending_signals`,
    // `posix_timers`, `advice`, `guards`, `file_contents`, `fd_attrs`, `deleted_extents`,
    // `fd_owners`, `mm_layout`, `auxv` and `sysv_shm` (empty: one 0 each).
    for _ in 0..14 {
        assert_eq!(b.process.pop(), Some(0));
    }
    let img = write(tmp.path(), &b);
    let plan = crum_restart::validate(&img).unwrap();
    assert!(plan.has_device());
}

#[test]
fn a_required_section_neither_understood_nor_listed_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let b = build(&cuda_spec(100));
    let opts = WriterOptions { chunk_size: CHUNK, dir_name: Some("img".into()), ..Default::default() };
    let mut w = ImageWriter::prepare(tmp.path(), &opts).unwrap();
    w.add_section(SECTION_PROCESS, true, &b.process).unwrap();
    let (state, data) = b.device.as_ref().unwrap();
    w.add_section(SECTION_DEVICE, true, state).unwrap();
    w.add_section(SECTION_DEVICE_DATA, true, data).unwrap();
    w.add_section("future.thing", true, b"?").unwrap();
    for (meta, data) in &b.regions {
        w.add_region(meta, data).unwrap();
    }
    w.commit().unwrap();
    let e = validate_err(w.final_path());
    assert!(e.contains("requires section `future.thing`"), "{e}");
}
