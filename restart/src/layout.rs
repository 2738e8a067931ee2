//! The address space: collision checks against the restorer's own mappings, mapping and
//! filling the image's regions, and moving the kernel's special mappings.
//!
//! # Safety
//! Regions are mapped with `MAP_FIXED_NOREPLACE`, so nothing of the restorer is ever
//! replaced; the slices built over them cover exactly the fresh mapping. `mremap` moves the
//! restorer's own `[vvar]`/`[vdso]` to addresses the checks proved free; the restorer calls
//! nothing that uses the vDSO afterwards.
#![allow(unsafe_code)]

use crum_ckpt::capture::{own_maps, MapsEntry, SPECIAL_NAMES};
use crum_ckpt::state::{is_process_memory, ProcessState, REGION_GROWSDOWN, REGION_SHARED_ANON, REGION_SHARED_FILE};

use crate::{sys_err, Plan, RestartError};

/// Regions at least this big are read with several threads.
const PARALLEL_MIN: u64 = 64 << 20;

/// Room kept free below the restorer's own stack so that it can still grow.
const STACK_ROOM: u64 = 8 << 20;

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

fn own_specials(maps: &[MapsEntry]) -> Vec<&MapsEntry> {
    maps.iter().filter(|m| SPECIAL_NAMES.contains(&m.name.as_str())).collect()
}

/// Checks that the image's regions and special-mapping targets are free in this process.
/// Err: a description of the first collision (a fresh layout may avoid it).
pub fn check(plan: &Plan) -> Result<(), String> {
    let maps = own_maps()?;
    let st = &plan.state;
    // Special mappings: the same set with the same sizes (same kernel ABI).
    let mine = own_specials(&maps);
    for s in &st.specials {
        match mine.iter().find(|m| m.name == s.name) {
            Some(m) if m.end - m.start == s.end - s.start => {}
            Some(_) => return Err(format!("{} has a different size on this kernel", s.name)),
            None => return Err(format!("this kernel has no {} mapping", s.name)),
        }
    }
    let mut wanted: Vec<(u64, u64, String)> =
        plan.reader.regions().iter().filter(|r| is_process_memory(r.flags)).map(|r| (r.start, r.start + r.len, r.name_lossy())).collect();
    wanted.extend(st.specials.iter().map(|s| (s.start, s.end, s.name.clone())));
    for m in &maps {
        if m.name == "[vsyscall]" {
            continue;
        }
        let special = SPECIAL_NAMES.contains(&m.name.as_str());
        let lo = if m.name == "[stack]" { m.start.saturating_sub(STACK_ROOM) } else { m.start };
        for w in &wanted {
            if special && st.specials.iter().any(|s| s.name == m.name && s.start == m.start) {
                continue;
            }
            if overlaps((lo, m.end), (w.0, w.1)) {
                return Err(format!("restorer mapping {:#x}-{:#x} {} overlaps image {:#x}-{:#x} {}", m.start, m.end, m.name, w.0, w.1, w.2));
            }
        }
    }
    Ok(())
}

pub enum MapError {
    Collision(String),
    Other(RestartError),
}

/// Maps every region at its address, fills it from the image and sets its protection.
/// `progress` is told the bytes filled so far.
///
/// `job_shm`: this process's mappings of its job's shared memory, (start, end, memfd,
/// offset): mapped from those objects (made and filled once by the job's restart).
///
/// `lazy`: the regions to serve lazily (`crate::lazy`): registered and handed to the page
/// server, which is started here, once everything is mapped and before anything is filled
/// (so its fork copies no memory); not filled here. Where that cannot be done they are
/// filled like the others, saying why. Returns what the program keeps of a lazy restart.
pub fn map_regions(
    plan: &mut Plan,
    progress: &dyn Fn(u64),
    job_shm: &[(u64, u64, i32, u64)],
    lazy: Option<crate::lazy::Lazy>,
) -> Result<Option<crate::lazy::Handles>, MapError> {
    let regions = plan.reader.regions().to_vec();
    let of_job = |r: &crum_ckpt::image::RegionInfo| {
        job_shm.iter().find(|g| r.flags & REGION_SHARED_ANON != 0 && g.0 == r.start && g.1 == r.start + r.len)
    };
    for r in regions.iter().filter(|r| is_process_memory(r.flags)) {
        let name = r.name_lossy();
        let shared_file = r.flags & REGION_SHARED_FILE != 0;
        let mut flags = libc::MAP_FIXED_NOREPLACE;
        let mut fd = -1;
        let mut off = 0;
        if let Some(&(_, _, memfd, offset)) = of_job(r) {
            // SAFETY: F_DUPFD_CLOEXEC of the inherited memfd (closed below like a file's).
            fd = unsafe { libc::fcntl(memfd, libc::F_DUPFD_CLOEXEC, 3) };
            if fd < 0 {
                return Err(MapError::Other(sys_err(format!("mapping the job's shared memory at {:#x}", r.start))));
            }
            flags |= libc::MAP_SHARED;
            off = offset as i64;
        } else if shared_file {
            let c = std::ffi::CString::new(r.name.clone()).map_err(|_| MapError::Other(RestartError::Invalid("bad mapped file name".into())))?;
            // Read-write where the file allows it, even for a mapping read-only now: the
            // program may make it writable later (mprotect), which a mapping of a read-only
            // descriptor refuses. Read-only only when the file cannot be opened for writing.
            // SAFETY: NUL-terminated path.
            fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
            if fd < 0 && r.prot & libc::PROT_WRITE as u32 == 0 {
                // SAFETY: as above.
                fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
            }
            if fd < 0 {
                return Err(MapError::Other(sys_err(format!("opening mapped file {name}"))));
            }
            flags |= libc::MAP_SHARED;
        } else if r.flags & REGION_SHARED_ANON != 0 {
            flags |= libc::MAP_SHARED | libc::MAP_ANONYMOUS;
        } else {
            // MAP_NORESERVE where the program's mapping had it (its `VmFlags` "nr": allocator
            // arenas, the agent's scratch arena), not elsewhere: the flag shows in smaps, and
            // without it the memory is accounted as the program's was.
            let has = |bit: u32| plan.state.advice.iter().any(|&(a, b, bits)| bits & bit != 0 && a < r.start + r.len && b > r.start);
            // A droppable mapping (its type instead of private) comes back droppable.
            let kind = if has(crum_ckpt::state::ADVICE_DROPPABLE_BIT) { crum_ckpt::state::MAP_DROPPABLE } else { libc::MAP_PRIVATE };
            flags |= kind | libc::MAP_ANONYMOUS | if has(crum_ckpt::state::ADVICE_NORESERVE_BIT) { libc::MAP_NORESERVE } else { 0 };
            if r.flags & REGION_GROWSDOWN != 0 {
                flags |= libc::MAP_GROWSDOWN;
            }
        }
        let prot = if shared_file { r.prot as i32 } else { libc::PROT_READ | libc::PROT_WRITE };
        let off = if shared_file { r.file_offset as i64 } else { off };
        // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping.
        let p = unsafe { libc::mmap(r.start as *mut libc::c_void, r.len as usize, prot, flags, fd, off) };
        let err = std::io::Error::last_os_error();
        if fd >= 0 {
            // SAFETY: our own fd.
            unsafe { libc::close(fd) };
        }
        if p == libc::MAP_FAILED || p as u64 != r.start {
            if p != libc::MAP_FAILED {
                // SAFETY: the kernel placed it elsewhere (old kernel ignoring NOREPLACE).
                unsafe { libc::munmap(p, r.len as usize) };
            }
            if err.raw_os_error() == Some(libc::EEXIST) || p != libc::MAP_FAILED {
                return Err(MapError::Collision(format!("{:#x}-{:#x} {name} is taken", r.start, r.start + r.len)));
            }
            return Err(MapError::Other(RestartError::Sys { what: format!("mapping {:#x}+{:#x} {name}", r.start, r.len), source: err }));
        }
    }
    let mut handles = None;
    let mut lazy_regions: Vec<usize> = Vec::new();
    if let Some(l) = lazy {
        match l.register(&regions) {
            Ok(()) => {
                lazy_regions = l.regions.clone();
                let bytes = l.bytes();
                handles = Some(l.start(&mut plan.reader).map_err(MapError::Other)?);
                tracing::info!(bytes, regions = lazy_regions.len(), "lazy restart: page server started");
            }
            Err(why) => {
                eprintln!("crum: restarting eagerly, not lazily: {why}");
                l.abandon();
            }
        }
    }
    // Every region is mapped by now, so the reader's helper threads (large regions only) get
    // their stacks elsewhere; they are joined before each call returns.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(4);
    let mut done = 0;
    for (i, r) in regions.iter().enumerate().filter(|(_, r)| is_process_memory(r.flags)) {
        // (The job's shared memory holds its bytes already.)
        if r.has_data && r.flags & REGION_SHARED_FILE == 0 && of_job(r).is_none() && !lazy_regions.contains(&i) {
            // SAFETY: the fresh, writable mapping created above covers exactly this range.
            let dst = unsafe { std::slice::from_raw_parts_mut(r.start as *mut u8, r.len as usize) };
            let res = if r.len >= PARALLEL_MIN {
                plan.reader.read_region_into_zeroed_parallel(i, dst, threads)
            } else {
                plan.reader.read_region_into_zeroed(i, dst)
            };
            res.map_err(|e| MapError::Other(e.into()))?;
            done += r.len;
            progress(done);
        }
        if r.flags & REGION_SHARED_FILE == 0 {
            // SAFETY: our mapping; only its protection changes.
            if unsafe { libc::mprotect(r.start as *mut libc::c_void, r.len as usize, r.prot as i32) } != 0 {
                return Err(MapError::Other(sys_err(format!("mprotect of {:#x}", r.start))));
            }
        }
    }
    Ok(handles)
}

/// Moves `[vvar]`, `[vvar_vclock]` and `[vdso]` to the program's addresses.
pub fn move_specials(st: &ProcessState) -> Result<(), RestartError> {
    let maps = own_maps().map_err(RestartError::Invalid)?;
    for s in &st.specials {
        let Some(m) = maps.iter().find(|m| m.name == s.name) else { continue };
        if m.start == s.start {
            continue;
        }
        let len = (m.end - m.start) as usize;
        // SAFETY: moves a special mapping of ours to a range checked to be free.
        let p = unsafe {
            libc::mremap(m.start as *mut libc::c_void, len, len, libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED, s.start as *mut libc::c_void)
        };
        if p == libc::MAP_FAILED {
            return Err(sys_err(format!("moving {} to {:#x}", s.name, s.start)));
        }
    }
    Ok(())
}
