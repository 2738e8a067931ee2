//! The `cuda` backend: a real NVIDIA GPU driven through the CUDA driver API (cudarc, with the
//! driver library loaded at run time, so the proxy builds and runs where no CUDA is installed).
//!
//! - Probing ([`probe`]): the driver library loads, `cuInit` succeeds, a device exists. Each
//!   failure names what is missing; nothing panics when `libcuda.so.1` is absent.
//! - Device memory ([`planner`]): placed at addresses the proxy chooses, in the device window
//!   the application reserves, with the virtual memory management API (reserve at a fixed
//!   address, create, map, set access), so a restart puts every allocation back at the same
//!   address. Managed memory comes from `cuMemAllocManaged` (the driver picks its address; a
//!   restart that cannot get the same address fails with a clear error). Pinned host memory is
//!   a memfd shared with the application, mapped here at the same address and registered with
//!   `cuMemHostRegister`, so copies from it are asynchronous DMA with no extra copy.
//! - Copies to and from the application's own memory go through page-locked staging buffers;
//!   the reads and writes of the application's memory run as host functions on the stream
//!   (`cuLaunchHostFunc`), so they happen exactly when CUDA would touch that memory.
//! - Modules from the program's fat binaries (`cuModuleLoadData`: the driver picks SASS or JITs
//!   the PTX); parameter layouts from `cuFuncGetParamInfo`, or the PTX `.entry` declaration on
//!   drivers older than 12.4 ([`params`]).
//! - Errors translated to `cudaError_t` ([`errors`]).
//! - Checkpoint ([`Cuda::snapshot`]): drain, then stream device memory out through several
//!   staging buffers with copies in flight; [`Cuda::restore`] puts it back.
//!
//! Design and limits: `docs/gpu-backend.md`.
//!
//! # Safety
//! Driver calls live in [`driver`]. This module's own unsafe code touches memory by address:
//! staging buffers reserved for one piece of a copy until the stream (or an event) says the
//! piece is done, and pinned host allocations it mapped itself (`mmap` with
//! `MAP_FIXED_NOREPLACE` inside its window, so nothing else is replaced), accessed only while
//! live; a free drains the device first, so no queued host function outlives the memory.
#![allow(unsafe_code)]

pub mod driver;
pub mod errors;
pub mod heap;
pub mod params;
pub mod pieces;
pub mod planner;
pub mod printf;
mod queue;

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use cudarc::driver::sys::{CUdevice_attribute as DA, CUfunction_attribute as FA};
use crum_wire::{cuda, AllocKind, DeviceProps, FuncInfo};

use crate::backend::*;
use crate::hostmem::AppMemory;
use driver::{DResult, Device, HostBuf};
use errors::{runtime_error, Op};
use planner::Planner;

/// Size of one staging buffer.
const STAGE: u64 = 8 << 20;
/// Staging buffers (copies in flight at once).
const STAGES: usize = 6;

/// Why the `cuda` backend cannot run here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    #[error("the CUDA driver library (libcuda.so.1) cannot be loaded; install the NVIDIA driver or add its directory to LD_LIBRARY_PATH")]
    NoLibrary,
    #[error("the driver library CRUM_LIBCUDA names ({path}) cannot be used: {why}")]
    EnvLibrary { path: String, why: String },
    #[error("cuInit failed with {name} ({code}){hint}")]
    Init { code: u32, name: String, hint: &'static str },
    #[error("the CUDA driver sees no device (cuDeviceGetCount = 0)")]
    NoDevice,
    #[error("{call} failed with {name} ({code})")]
    Driver { call: &'static str, code: u32, name: String },
    #[error("device {0} does not support the virtual memory management API (needed to restart at the same addresses)")]
    NoVmm(String),
    #[error("the device address window {base:#x} is not available in this process (the driver placed it at {got:#x})")]
    Window { base: u64, got: u64 },
}

fn drv(call: &'static str) -> impl Fn(u32) -> ProbeError {
    move |code| ProbeError::Driver { call, code, name: driver::error_name(code) }
}

/// Check that a usable GPU is here: the driver loads, `cuInit` succeeds, a device exists and
/// supports the virtual memory management API. Returns device 0.
pub fn probe() -> std::result::Result<Device, ProbeError> {
    if let Some((path, why)) = driver::env_library_error() {
        return Err(ProbeError::EnvLibrary { path, why });
    }
    if !driver::library_present() {
        return Err(ProbeError::NoLibrary);
    }
    // cudarc panics on a missing symbol; a damaged driver installation must not take the
    // proxy down.
    let r = std::panic::catch_unwind(|| -> std::result::Result<Device, ProbeError> {
        driver::init().map_err(|code| ProbeError::Init {
            code,
            name: driver::error_name(code),
            hint: match code {
                34 => ": the loaded libcuda is the toolkit's stub library, not the driver",
                100 => ": no NVIDIA GPU is visible (check /dev/nvidia*, CUDA_VISIBLE_DEVICES)",
                803 => ": the kernel module and libcuda versions differ",
                _ => "",
            },
        })?;
        if driver::device_count().map_err(drv("cuDeviceGetCount"))? < 1 {
            return Err(ProbeError::NoDevice);
        }
        let dev = driver::device_get(0).map_err(drv("cuDeviceGet"))?;
        if driver::device_attr(dev, DA::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED).map_err(drv("cuDeviceGetAttribute"))? == 0 {
            return Err(ProbeError::NoVmm(driver::device_name(dev).unwrap_or_default()));
        }
        Ok(dev)
    });
    r.unwrap_or_else(|_| Err(ProbeError::Driver { call: "driver library", code: 999, name: "missing entry point".into() }))
}

thread_local! {
    /// The context this thread last made current (0 = none).
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

/// What a backend-owned address is.
#[derive(Debug)]
enum Region {
    /// Device memory placed by the planner (its physical mapping is in `Tables::mappings`,
    /// possibly shared with other small allocations).
    Device,
    /// Managed memory: host memory like `Pinned` (the device reaches it through unified
    /// addressing); the application keeps shadow pages of it (`interpose::managed`).
    Managed { _memfd: OwnedFd },
    Pinned { _memfd: OwnedFd },
}

/// Kinds backed by host memory mapped in this process (a memfd the application maps too).
fn host_backed(kind: AllocKind) -> bool {
    matches!(kind, AllocKind::PinnedHost | AllocKind::Managed)
}

struct Alloc {
    len: u64,
    region: Region,
}

/// The staging buffer pool.
struct Staging {
    free: Mutex<(Vec<HostBuf>, usize)>,
    cv: Condvar,
}

impl Staging {
    fn take(&self) -> DResult<HostBuf> {
        let mut g = self.free.lock().unwrap();
        loop {
            if let Some(b) = g.0.pop() {
                return Ok(b);
            }
            if g.1 < STAGES {
                g.1 += 1;
                drop(g);
                return HostBuf::new(STAGE as usize).inspect_err(|_| self.free.lock().unwrap().1 -= 1);
            }
            g = self.cv.wait(g).unwrap();
        }
    }

    fn give(&self, b: HostBuf) {
        self.free.lock().unwrap().0.push(b);
        self.cv.notify_one();
    }
}

/// State reachable from host functions running on driver threads.
struct Shared {
    app: OnceLock<Arc<AppMemory>>,
    async_err: AtomicU32,
    sticky: AtomicU32,
    staging: Staging,
    /// Device printf output, when stdout is captured ([`Cuda::capture_printf`]).
    printf: OnceLock<printf::Capture>,
}

impl Shared {
    fn report(&self, code: u32) {
        if cuda::is_sticky(code) {
            let _ = self.sticky.compare_exchange(0, code, Ordering::SeqCst, Ordering::SeqCst);
        }
        let _ = self.async_err.compare_exchange(0, code, Ordering::SeqCst, Ordering::SeqCst);
    }
}

struct ModuleRec {
    module: driver::Module,
    /// The image's PTX, extracted on first need (parameter layouts on drivers without
    /// `cuFuncGetParamInfo`).
    ptx: OnceLock<Option<String>>,
    /// Its `__managed__` variables ([`Mirror`]).
    mirrors: Vec<Mirror>,
    /// Recorded after the last launch of one of its kernels while it has mirrors (after the
    /// copies back): the next such launch, on any stream, waits for it.
    last_use: Option<Arc<driver::Event>>,
    /// Whether every module variable of its PTX has been looked up ([`Cuda::learn_globals`]).
    globals_known: bool,
    /// Which of its kernels can allocate on the device heap (found at the first lookup).
    heap: OnceLock<heap::HeapUse>,
    /// Its PTX in the preemptible form (`crum_ptx::preempt`), loaded when a launch of one
    /// of its kernels must run the rest of a grid stopped part-way ([`Cuda::launch_rest`]).
    preempt: Option<(driver::Module, crum_ptx::preempt::PreemptibleModule)>,
}

/// A `__managed__` variable. The driver places it (in its own managed memory, which the
/// program cannot map); the program's host code reaches it through a managed allocation of
/// this backend (host memory shared with the program, `host`). A launch of a kernel of its
/// module copies `host` to the driver's variable (`dev`), and that back into `before`, ahead of
/// the kernel; after it, the variable comes back into `after` and a host function writes into
/// `host` the bytes that differ from `before`: what the kernel changed through the variable.
/// (Device copies only: a host-to-host `cuMemcpyAsync` waits for the stream in the calling
/// thread, and one that waited for a host function wanting a lock it held hung on a GPU.) Bytes a
/// kernel wrote through a pointer to `host` (the program passes `&var` to kernels, as
/// `managed_vars.cu` does) are not overwritten with the variable's stale copy. Launches of
/// that module's kernels run one after the other (a counter that kernels on two streams add
/// to stays right). Host code that writes the variable while such a kernel runs keeps its
/// write unless the kernel changed the same bytes.
struct Mirror {
    name: String,
    dev: u64,
    host: u64,
    len: u64,
    before: Arc<Mutex<driver::HostBuf>>,
    after: Arc<Mutex<driver::HostBuf>>,
    /// Their addresses (the launching thread never locks them: only the host function does).
    before_addr: u64,
    after_addr: u64,
}

struct FuncRec {
    f: driver::Function,
    module: u64,
    name: String,
    layout: Vec<(u32, u32)>,
    param_bytes: u32,
    /// Its name, where it can allocate on the device heap (`heap::HeapUse`).
    heap: Option<String>,
}

struct EventRec {
    /// The driver event of its latest record (a new one per record, `Backend::event_record`).
    ev: Arc<driver::Event>,
    flags: u32,
    /// Its latest record as a point of the proxy's queues (stream, seq).
    rec: Option<(u64, u64)>,
    recorded: bool,
    timing: bool,
    /// Milliseconds this event completed before its device record: an event restored at a
    /// restart is recorded again then, `shift` older (its age at the checkpoint), so times
    /// between events keep the program's time (the downtime between checkpoint and restart
    /// left out). 0 for an event recorded in this process.
    shift: f64,
}

#[derive(Default)]
struct Tables {
    allocs: BTreeMap<u64, Alloc>,
    mappings: BTreeMap<u64, driver::Mapping>,
    /// Module variables found so far: address → (length, module, name).
    globals: BTreeMap<u64, (u64, u64, String)>,
    /// The managed allocations that hold `__managed__` variables ([`Mirror`]): host address
    /// → (module, name).
    managed_vars: BTreeMap<u64, (u64, String)>,
    /// Application ranges registered with cudaHostRegister: start → length.
    registered: BTreeMap<u64, u64>,
    modules: HashMap<u64, ModuleRec>,
    funcs: HashMap<u64, FuncRec>,
    streams: HashMap<u64, Arc<driver::Stream>>,
    /// Per user stream, a private non-blocking stream that runs the application-side halves
    /// of large staged copies, so they overlap with the DMA on the user stream.
    io: HashMap<u64, Arc<driver::Stream>>,
    events: HashMap<u64, EventRec>,
    /// Kernels launched that can allocate on the driver's device heap, which a checkpoint of
    /// this backend does not save (named at the cut: [`Backend::unsaved_state`]).
    heap_launches: BTreeSet<String>,
    /// Control blocks of preemptible launches ([`Cuda::launch_rest`]), kept until the backend
    /// goes (a host function may not free driver memory).
    control_blocks: Vec<HostBuf>,
}

/// Address planners of the two halves of the window, and of the VMM range.
struct Planners {
    device: Planner,
    pinned: Planner,
    /// The driver API's VMM range of the window (`crum_wire::VMM_VA_OFFSET`), where
    /// `cuMemMap` places memory at the program's addresses (`Backend::map_at`); None when the
    /// window is too small to hold it or it could not be reserved.
    vmm: Option<Planner>,
}

/// The `cuda` backend.
pub struct Cuda {
    dev: Device,
    core: Arc<Core>,
    planner: Mutex<Planners>,
    /// The whole window `[base, base+size)`: device memory in the lower half (reserved from
    /// the driver in one piece), pinned host memory in the upper half.
    window: (u64, u64),
    /// The range reserved with `cuMemAddressReserve` (released on drop).
    reserved: (u64, u64),
    /// The VMM range, when reserved apart from `reserved` (released on drop).
    vmm_reserved: Option<(u64, u64)>,
    /// The pinned half, reserved PROT_NONE in this process (released on drop).
    host_reserved: (u64, u64),
    next_handle: AtomicU64,
    props: DeviceProps,
    legacy: Arc<driver::Stream>,
    /// The read-only zeros at the start of the window (unmapped on drop).
    guard: Mutex<Option<driver::Mapping>>,
}

/// The backend reaches its core's tables, shared state and copy routines as its own (the
/// core is what feeder threads share).
impl std::ops::Deref for Cuda {
    type Target = Core;
    fn deref(&self) -> &Core {
        &self.core
    }
}

fn bad() -> BackendError {
    BackendError::Cuda(cuda::ERROR_INVALID_VALUE)
}

fn handle_err() -> BackendError {
    BackendError::Cuda(cuda::ERROR_INVALID_RESOURCE_HANDLE)
}

impl Cuda {
    /// Open device 0 with its allocations in the agreed device window.
    /// This is the proxy's constructor: it also captures the process's standard output, where
    /// the driver writes device `printf` output, so that it reaches the application's own
    /// stdout in order (see [`Cuda::capture_printf`]).
    pub fn open() -> std::result::Result<Cuda, ProbeError> {
        let c = Cuda::with_window(crum_wire::DEVICE_VA_BASE, crum_wire::DEVICE_VA_SIZE)?;
        if let Err(e) = c.capture_printf() {
            tracing::warn!("device printf output will go to the proxy's stdout: {e}");
        }
        Ok(c)
    }

    /// Maps `[base, base+len)` zero-filled and read-only for the device.
    fn guard(dev: Device, base: u64, len: u64) -> std::result::Result<driver::Mapping, u32> {
        let m = driver::map_in(dev, base, len)?;
        let zeroed = driver::memset(base, len, 0, len, 1, &driver::Stream::LEGACY)
            .and_then(|_| driver::stream_sync(&driver::Stream::LEGACY))
            .and_then(|_| driver::set_read_only(dev, base, len));
        match zeroed {
            Ok(()) => Ok(m),
            Err(c) => {
                let _ = driver::unmap(m);
                Err(c)
            }
        }
    }

    /// Route this process's standard output (fd 1), where the driver prints device `printf`
    /// output at synchronization points, into [`printf::Capture`], which
    /// [`Backend::take_printf`] drains (the server returns it with the synchronizing reply).
    pub fn capture_printf(&self) -> std::io::Result<()> {
        if self.shared.printf.get().is_none() {
            let _ = self.shared.printf.set(printf::Capture::start(1)?);
        }
        Ok(())
    }

    /// Open device 0 with its allocations in `[base, base+size)` (granularity-aligned).
    pub fn with_window(base: u64, size: u64) -> std::result::Result<Cuda, ProbeError> {
        let dev = probe()?;
        let ctx = driver::primary_ctx_retain(dev).map_err(drv("cuDevicePrimaryCtxRetain"))?;
        driver::ctx_set_current(&ctx).map_err(drv("cuCtxSetCurrent"))?;
        CURRENT.with(|c| c.set(ctx.raw()));
        // The minimum granularity: an image's allocations (of this backend or the emulated
        // device, which lays memory out in 2 MiB steps) go back to their addresses; a larger
        // recommended one would move the start of the window and refuse them.
        let (granule, recommended) = driver::granularity(dev).map_err(drv("cuMemGetAllocationGranularity"))?;
        if !granule.is_power_of_two() || !base.is_multiple_of(granule) || !size.is_multiple_of(granule) {
            return Err(ProbeError::Driver { call: "cuMemGetAllocationGranularity", code: 1, name: format!("granularity {granule:#x} does not divide the window") });
        }
        let props = read_props(dev).map_err(drv("cuDeviceGetAttribute"))?;
        // Device memory: the lower half of the window, at most four times the device's memory
        // (address space for fragmentation), reserved in one piece now, so that nothing the
        // driver allocates for itself later (module variables, local memory) can land where
        // the planner will put an allocation, and so that a restarted proxy either gets the
        // whole range back or fails at once with a clear reason.
        let half = (size / 2).next_multiple_of(granule).min(size);
        let dev_size = half.min((props.total_mem.saturating_mul(4)).next_multiple_of(granule)).max(granule);
        driver::reserve_exact(base, dev_size).map_err(|e| match e {
            driver::MapError::Moved { got } => ProbeError::Window { base, got },
            driver::MapError::Driver(code) => drv("cuMemAddressReserve")(code),
        })?;
        if let Err(e) = if size > half { host_reserve(base + half, size - half) } else { Ok(()) } {
            let _ = driver::release_reservation(base, dev_size);
            tracing::warn!("pinned half of the device window: {e}");
            return Err(ProbeError::Window { base: base + half, got: 0 });
        }
        let pinned = Planner::new(base + half, size - half, granule);
        // The VMM range: ordinary allocations stay below it; reserved with the device half
        // when that holds it, apart otherwise (the device half is sized by the device's
        // memory), and left out when the window is too small (tests' windows).
        let (vmm_base, vmm_len) = (base + crum_wire::VMM_VA_OFFSET, crum_wire::VMM_VA_SIZE);
        let fits = crum_wire::VMM_VA_OFFSET + vmm_len <= half && vmm_base.is_multiple_of(granule) && vmm_len.is_multiple_of(granule);
        let mut vmm_reserved = None;
        let vmm = if !fits {
            None
        } else if crum_wire::VMM_VA_OFFSET + vmm_len <= dev_size {
            Some(Planner::new(vmm_base, vmm_len, granule))
        } else if crum_wire::VMM_VA_OFFSET >= dev_size && driver::reserve_exact(vmm_base, vmm_len).is_ok() {
            vmm_reserved = Some((vmm_base, vmm_len));
            Some(Planner::new(vmm_base, vmm_len, granule))
        } else {
            tracing::warn!("the VMM range of the device window cannot be reserved: cuMemMap will be refused");
            None
        };
        // Ordinary device allocations end below the VMM range.
        let dev_plan_end = if vmm.is_some() { dev_size.min(crum_wire::VMM_VA_OFFSET) } else { dev_size };
        // The start of the window: zeros, read-only, never handed out. On a GPU the runtime's
        // own allocations lie below a program's first one, and a stencil that reads a[-1] of it
        // reads memory; here it reads zeros (as on the emulated device) instead of faulting.
        let guard_len = crum_wire::DEVICE_RESERVED.next_multiple_of(granule).min(dev_size / 2);
        let guard = match Self::guard(dev, base, guard_len) {
            Ok(m) => m,
            Err(code) => {
                let _ = driver::release_reservation(base, dev_size);
                if let Some((a, l)) = vmm_reserved {
                    let _ = driver::release_reservation(a, l);
                }
                // SAFETY: the pinned half was reserved just above by `host_reserve`, unused.
                unsafe { libc::munmap((base + half) as *mut libc::c_void, (size - half) as usize) };
                return Err(drv("cuMemMap")(code));
            }
        };
        tracing::info!(
            device = %props.name,
            driver = driver::driver_version().unwrap_or(0),
            window = format_args!("{base:#x}+{dev_size:#x}"),
            granule,
            recommended,
            "cuda backend ready"
        );
        let window = queue::window_from_env();
        let c = Cuda {
            dev,
            planner: Mutex::new(Planners { device: Planner::new(base + guard_len, dev_plan_end - guard_len, granule), pinned, vmm }),
            guard: Mutex::new(Some(guard)),
            window: (base, size),
            reserved: (base, dev_size),
            vmm_reserved,
            host_reserved: (base + half, size - half),
            core: Arc::new(Core {
                ctx,
                tables: Mutex::default(),
                queues: queue::Queues::new(window),
                shared: Arc::new(Shared {
                app: OnceLock::new(),
                async_err: AtomicU32::new(0),
                sticky: AtomicU32::new(0),
                staging: Staging { free: Mutex::new((Vec::new(), 0)), cv: Condvar::new() },
                printf: OnceLock::new(),
            }),
            }),
            next_handle: AtomicU64::new(0x100),
            props,
            legacy: Arc::new(driver::Stream::LEGACY),
        };
        // The legacy stream's queue (dropping `c` on failure gives the window back).
        c.core.add_stream(0, c.legacy.clone(), false).map_err(|e| ProbeError::Driver { call: "the legacy stream's feeder", code: 999, name: e.to_string() })?;
        Ok(c)
    }

    /// Make the primary context current on the calling thread (lane threads are many).
    fn bind(&self) -> Result<()> {
        self.bind_ctx().map_err(|c| self.err(Op::Other, c))?;
        if let Some(s) = self.sticky_error() {
            return Err(BackendError::Cuda(s));
        }
        Ok(())
    }

    fn handle(&self) -> u64 {
        self.next_handle.fetch_add(1, Ordering::Relaxed)
    }

    fn stream(&self, id: StreamId) -> Result<Arc<driver::Stream>> {
        if id == LEGACY_STREAM {
            return Ok(self.legacy.clone());
        }
        self.tables.lock().unwrap().streams.get(&id.0).cloned().ok_or_else(handle_err)
    }

    /// Whether `[addr, addr+len)` is memory the driver can address directly.
    fn locate(&self, addr: u64, len: u64) -> Option<AllocKind> {
        // Lock order: planner, then tables (as `place` takes them).
        let planners = self.planner.lock().unwrap();
        let in_vmm = |a: u64| planners.vmm.as_ref().is_some_and(|v| v.in_window(a));
        let t = self.tables.lock().unwrap();
        let inside = |m: &BTreeMap<u64, _>, get_len: &dyn Fn(&_) -> u64| {
            m.range(..=addr).next_back().is_some_and(|(&s, v)| addr.checked_add(len).is_some_and(|e| e <= s + get_len(v).max(1)))
        };
        if let Some((&s, a)) = t.allocs.range(..=addr).next_back() {
            if addr.checked_add(len).is_some_and(|e| e <= s + a.len.max(1)) {
                return Some(match a.region {
                    Region::Device => AllocKind::Device,
                    Region::Managed { .. } => AllocKind::Managed,
                    Region::Pinned { .. } => AllocKind::PinnedHost,
                });
            }
            // VMM mappings side by side are one range to the device (`cuMemMap` of two
            // physical allocations next to each other, then one memset or kernel over both),
            // as on the emulated device.
            if matches!(a.region, Region::Device) && addr < s + a.len && in_vmm(s) {
                let end = addr.checked_add(len)?;
                let mut at = s;
                for (&b, x) in t.allocs.range(s..) {
                    if b != at || !matches!(x.region, Region::Device) || !in_vmm(b) {
                        break;
                    }
                    at = b + x.len;
                    if end <= at {
                        return Some(AllocKind::Device);
                    }
                }
            }
        }
        inside(&t.globals, &|g: &(u64, u64, String)| g.0).then_some(AllocKind::Device)
    }


    fn in_window(&self, addr: u64) -> bool {
        addr >= self.window.0 && addr - self.window.0 < self.window.1
    }

    /// Place `len` bytes of `kind` at a planner address (`at`: a recorded one, for restart).
    fn place(&self, len: u64, kind: AllocKind, at: Option<u64>) -> Result<Allocation> {
        self.bind()?;
        if len == 0 {
            return Err(bad());
        }
        // Managed memory is host memory registered with the driver, as pinned memory is: the
        // application's shadow pages need a memfd to alias (the driver's own managed memory has
        // none), and the planner places it at a replayable address.
        let pinned = host_backed(kind);
        let mut planners = self.planner.lock().unwrap();
        let Planners { device, pinned: host, vmm } = &mut *planners;
        // A recorded address in the VMM range is a mapping (`map_at`), of chunks of its own.
        let (planner, own) = match (vmm.as_mut(), at) {
            (Some(v), Some(a)) if !pinned && v.in_window(a) => (v, true),
            _ if pinned => (host, true),
            _ => (device, false),
        };
        let placed = match at {
            Some(a) => planner.place_at(a, len, own),
            None => planner.alloc(len, own),
        }
        .map_err(|e| {
            tracing::warn!("device allocation of {len:#x} bytes: {e}");
            BackendError::Cuda(cuda::ERROR_MEMORY_ALLOCATION)
        })?;
        let undo = |planner: &mut Planner| {
            let _ = planner.free(placed.addr);
        };
        if pinned {
            let span = len.next_multiple_of(4096);
            let memfd = match pinned_map(placed.addr, span) {
                Ok(fd) => fd,
                Err(e) => {
                    undo(planner);
                    tracing::warn!("pinned host allocation at {:#x}: {e}", placed.addr);
                    return Err(BackendError::Cuda(cuda::ERROR_MEMORY_ALLOCATION));
                }
            };
            if let Err(c) = driver::host_register(placed.addr, span) {
                pinned_unmap(placed.addr, span);
                undo(planner);
                return Err(self.err(Op::Other, c));
            }
            let fd = memfd.as_raw_fd();
            let region = if kind == AllocKind::Managed { Region::Managed { _memfd: memfd } } else { Region::Pinned { _memfd: memfd } };
            self.tables.lock().unwrap().allocs.insert(placed.addr, Alloc { len, region });
            return Ok(Allocation { addr: placed.addr, memfd: Some(fd) });
        }
        let mut made = Vec::new();
        for c in &placed.new_chunks {
            match driver::map_in(self.dev, c.addr, c.len) {
                Ok(m) => made.push(m),
                Err(code) => {
                    for m in made {
                        let _ = driver::unmap(m);
                    }
                    undo(planner);
                    return Err(self.err(Op::Other, code));
                }
            }
        }
        let mut t = self.tables.lock().unwrap();
        for m in made {
            t.mappings.insert(m.addr, m);
        }
        t.allocs.insert(placed.addr, Alloc { len, region: Region::Device });
        Ok(Allocation { addr: placed.addr, memfd: None })
    }

}

/// What the backend's feeder threads (`queue`) share with it: the context, the object tables,
/// the state host functions reach, and the per-stream queues. Work fed to the driver runs
/// against this, never against [`Cuda`] itself (which the server owns and may drop).
pub struct Core {
    ctx: driver::Context,
    tables: Mutex<Tables>,
    shared: Arc<Shared>,
    queues: queue::Queues,
}

impl Core {
    /// Make the primary context current on the calling thread.
    fn bind_ctx(&self) -> DResult<()> {
        let raw = self.ctx.raw();
        if CURRENT.with(|c| c.get()) != raw {
            driver::ctx_set_current(&self.ctx)?;
            CURRENT.with(|c| c.set(raw));
        }
        Ok(())
    }

    /// Translate a driver error, remembering sticky ones.
    fn err(&self, op: Op, code: u32) -> BackendError {
        let rt = runtime_error(op, code);
        if cuda::is_sticky(rt) {
            self.shared.report(rt);
        }
        BackendError::Cuda(rt)
    }

    /// Give a launch to the driver on `s` (fed from the stream's queue). A kernel of a module
    /// with `__managed__` variables runs after the previous one of its module, between the
    /// copies of its variables in and out ([`Mirror`]).
    fn launch_now(&self, f: driver::Function, module: u64, packed: &mut params::Packed, mirrored: bool, dims: LaunchDims, s: &driver::Stream) -> Result<()> {
        let launch = |packed: &mut params::Packed| {
            driver::launch(f, dims.grid, dims.block, dims.shared, s, packed, dims.cooperative).map_err(|c| self.err(Op::Launch, c))
        };
        if !mirrored {
            return launch(packed);
        }
        // One launch of a module with `__managed__` variables at a time: copies in, kernel,
        // copies out, after the previous one's (`Mirror`).
        let mut t = self.tables.lock().unwrap();
        let m = t.modules.get_mut(&module).ok_or_else(handle_err)?;
        let d = |c| self.err(Op::Other, c);
        if let Some(e) = &m.last_use {
            driver::stream_wait_event(s, e).map_err(d)?;
        }
        for x in &m.mirrors {
            driver::copy_2d(x.dev, x.len, x.host, x.len, x.len, 1, s).map_err(d)?;
            driver::copy_2d(x.before_addr, x.len, x.dev, x.len, x.len, 1, s).map_err(d)?;
        }
        launch(packed)?;
        for x in &m.mirrors {
            driver::copy_2d(x.after_addr, x.len, x.dev, x.len, x.len, 1, s).map_err(d)?;
            let (host, len, before, after) = (x.host, x.len, x.before.clone(), x.after.clone());
            driver::launch_host_func(
                s,
                Box::new(move || {
                    // SAFETY: `host` is this backend's managed allocation of `len` bytes, mapped
                    // here while the module lives (its unload synchronizes the device first).
                    let dst = unsafe { stage_slice(host, len) };
                    merge_changed(dst, before.lock().unwrap().as_slice(), after.lock().unwrap().as_slice());
                }),
            )
            .map_err(d)?;
        }
        let e = driver::event_create(2).map_err(d)?;
        driver::event_record(&e, s).map_err(d)?;
        m.last_use = Some(Arc::new(e));
        Ok(())
    }

    /// Queue a copy between two addresses the driver can reach.
    fn copy_direct(&self, s: &driver::Stream, op: &CopyOp, src: u64) -> Result<()> {
        driver::copy_2d(op.dst, op.dpitch, src, op.spitch, op.width, op.height, s).map_err(|c| self.err(Op::Other, c))
    }

    /// Queue a copy that has the application's memory (or staged bytes) on one side, piece by
    /// piece through staging buffers.
    fn copy_staged(&self, s: &driver::Stream, op: CopyOp, dst_dev: bool, src_dev: bool) -> Result<()> {
        let shared = &self.shared;
        for p in pieces::pieces(op.width, op.height, STAGE) {
            let mut buf = shared.staging.take().map_err(|c| self.err(Op::Other, c))?;
            let n = p.bytes();
            let soff = p.row0 * op.spitch + p.col0;
            let doff = p.row0 * op.dpitch + p.col0;
            match (&op.src, src_dev, dst_dev) {
                (Endpoint::Staged(data), _, true) => {
                    // Staged bytes are packed (pitch = width).
                    // (memcpy checked that `data` holds width × height bytes.)
                    let dst_rows = buf.as_mut_slice();
                    for r in 0..p.rows {
                        let from = ((p.row0 + r) * op.width + p.col0) as usize;
                        dst_rows[(r * p.cols) as usize..][..p.cols as usize].copy_from_slice(&data[from..from + p.cols as usize]);
                    }
                    self.enqueue_h2d(s, buf, op.dst + doff, op.dpitch, p)?;
                }
                (Endpoint::Addr(src), false, true) => {
                    // Read the application's memory when the stream gets here, into the
                    // buffer that the device copy queued next reads (see `stage_slice`).
                    let (sh, src, spitch) = (shared.clone(), *src + soff, op.spitch);
                    let bufaddr = buf.addr();
                    let queued = driver::launch_host_func(s, Box::new(move || {
                        let Some(app) = sh.app.get() else { return sh.report(cuda::ERROR_INITIALIZATION) };
                        // SAFETY: the buffer is reserved for this piece; the device copy that
                        // reads it is queued after this host function, and the buffer returns to
                        // the pool only after that copy.
                        let dst = unsafe { stage_slice(bufaddr, n) };
                        for r in 0..p.rows {
                            if app.read(src + r * spitch, &mut dst[(r * p.cols) as usize..][..p.cols as usize]).is_err() {
                                return sh.report(cuda::ERROR_INVALID_VALUE);
                            }
                        }
                    }));
                    if let Err(c) = queued {
                        shared.staging.give(buf);
                        return Err(self.err(Op::Other, c));
                    }
                    self.enqueue_h2d(s, buf, op.dst + doff, op.dpitch, p)?;
                }
                (Endpoint::Addr(src), true, false) => {
                    if let Err(c) = driver::copy_2d(buf.addr(), p.cols, src + soff, op.spitch, p.cols, p.rows, s) {
                        shared.staging.give(buf);
                        return Err(self.err(Op::Other, c));
                    }
                    let (sh, dst, dpitch) = (shared.clone(), op.dst + doff, op.dpitch);
                    driver::launch_host_func(s, Box::new(move || {
                        match sh.app.get() {
                            Some(app) => {
                                let data = buf.as_slice();
                                for r in 0..p.rows {
                                    if app.write(dst + r * dpitch, &data[(r * p.cols) as usize..][..p.cols as usize]).is_err() {
                                        sh.report(cuda::ERROR_INVALID_VALUE);
                                        break;
                                    }
                                }
                            }
                            None => sh.report(cuda::ERROR_INITIALIZATION),
                        }
                        sh.staging.give(buf);
                    }))
                    .map_err(|c| self.err(Op::Other, c))?;
                }
                (Endpoint::Addr(src), false, false) => {
                    // Application to application (a host-to-host copy ordered on a stream).
                    let (sh, src, dst, spitch, dpitch) = (shared.clone(), *src + soff, op.dst + doff, op.spitch, op.dpitch);
                    driver::launch_host_func(s, Box::new(move || {
                        if let Some(app) = sh.app.get() {
                            let data = buf.as_mut_slice();
                            for r in 0..p.rows {
                                let row = &mut data[(r * p.cols) as usize..][..p.cols as usize];
                                if app.read(src + r * spitch, row).is_err() || app.write(dst + r * dpitch, row).is_err() {
                                    sh.report(cuda::ERROR_INVALID_VALUE);
                                    break;
                                }
                            }
                        }
                        sh.staging.give(buf);
                    }))
                    .map_err(|c| self.err(Op::Other, c))?;
                }
                _ => {
                    shared.staging.give(buf);
                    return Err(bad());
                }
            }
        }
        Ok(())
    }

    /// A synchronous copy between pageable application memory and backend memory, done from
    /// this thread as CUDA does it: for host to device, the stream's earlier work completes
    /// first ("a stream sync is performed before the copy is initiated"), then each piece is
    /// read from the application into a staging buffer and copied; for device to host, each
    /// piece is copied into a staging buffer and written to the application once its copy has
    /// completed, and the call returns when all are done. Up to `STAGES` pieces are in flight,
    /// so the DMA of one piece overlaps the cross-memory copy of another, and no host
    /// function is involved (they cost tens of microseconds each).
    fn copy_sync(&self, s: &driver::Stream, op: CopyOp, to_app: bool) -> Result<()> {
        let Endpoint::Addr(src) = op.src else { return Err(bad()) };
        let app = self.shared.app.get().cloned().ok_or(BackendError::Cuda(cuda::ERROR_INITIALIZATION))?;
        if !to_app {
            // Wait for the stream's earlier work (an event on it carries the implicit waits
            // of the legacy stream), so whatever it writes to the source is there to read.
            let e = driver::event_create(2).map_err(|c| self.err(Op::Other, c))?;
            driver::event_record(&e, s).map_err(|c| self.err(Op::Other, c))?;
            driver::event_sync(&e).map_err(|c| self.err(Op::Other, c))?;
        }
        let mut queue = VecDeque::new();
        let r = self.copy_sync_pieces(s, &op, src, to_app, &app, &mut queue);
        self.settle(s, r.is_err(), queue);
        r
    }

    fn copy_sync_pieces(&self, s: &driver::Stream, op: &CopyOp, src: u64, to_app: bool, app: &AppMemory, queue: &mut VecDeque<InFlight>) -> Result<()> {
        let ps = pieces::pieces(op.width, op.height, STAGE);
        // Finish the oldest piece in flight: wait for its copy, then (device to host) write it
        // to the application.
        let retire = |f: InFlight| -> Result<()> {
            let synced = driver::event_sync(&f.done).map_err(|c| self.err(Op::Other, c));
            let r = synced.and_then(|_| {
                if !to_app {
                    return Ok(());
                }
                let p = ps[f.region];
                let data = f.buf.as_slice();
                for r in 0..p.rows {
                    let at = op.dst + (p.row0 + r) * op.dpitch + p.col0;
                    app.write(at, &data[(r * p.cols) as usize..][..p.cols as usize]).map_err(|_| bad())?;
                }
                Ok(())
            });
            self.shared.staging.give(f.buf);
            r
        };
        for (i, p) in ps.iter().enumerate() {
            if queue.len() >= STAGES {
                retire(queue.pop_front().expect("non-empty"))?;
            }
            let (mut buf, done) = self.piece_slot()?;
            let soff = p.row0 * op.spitch + p.col0;
            let doff = p.row0 * op.dpitch + p.col0;
            let queued = if to_app {
                driver::copy_2d(buf.addr(), p.cols, src + soff, op.spitch, p.cols, p.rows, s).map_err(|c| self.err(Op::Other, c))
            } else {
                let data = buf.as_mut_slice();
                let read = (0..p.rows).try_for_each(|r| app.read(src + soff + r * op.spitch, &mut data[(r * p.cols) as usize..][..p.cols as usize]).map_err(|_| bad()));
                read.and_then(|_| driver::copy_2d(op.dst + doff, op.dpitch, buf.addr(), p.cols, p.cols, p.rows, s).map_err(|c| self.err(Op::Other, c)))
            };
            if let Err(e) = queued {
                self.shared.staging.give(buf);
                return Err(e);
            }
            let recorded = driver::event_record(&done, s);
            queue.push_back(InFlight { buf, done, region: i, off: 0, len: p.bytes() });
            recorded.map_err(|c| self.err(Op::Other, c))?;
        }
        while let Some(f) = queue.pop_front() {
            retire(f)?;
        }
        Ok(())
    }

    /// The helper stream of user stream `id` (created on first use).
    fn io_stream(&self, id: StreamId) -> Result<Arc<driver::Stream>> {
        let mut t = self.tables.lock().unwrap();
        if let Some(s) = t.io.get(&id.0) {
            return Ok(s.clone());
        }
        let s = Arc::new(driver::stream_create(true, 0).map_err(|c| self.err(Op::Other, c))?);
        t.io.insert(id.0, s.clone());
        Ok(s)
    }

    /// Make `waiter` wait until `on` has reached this point (a throwaway event: the wait
    /// captures it when enqueued, and the driver frees it once complete).
    fn order(&self, on: &driver::Stream, waiter: &driver::Stream) -> Result<()> {
        let e = driver::event_create(2).map_err(|c| self.err(Op::Other, c))?;
        driver::event_record(&e, on).map_err(|c| self.err(Op::Other, c))?;
        driver::stream_wait_event(waiter, &e).map_err(|c| self.err(Op::Other, c))
    }

    /// A copy between the application's memory and backend memory larger than one staging
    /// buffer, with the two halves of each piece on two streams so they overlap: the DMA of
    /// piece k+1 on the user stream runs while a host function on the helper stream moves
    /// piece k to or from the application. Events keep each piece's halves in order, and the
    /// user stream continues only once the last piece is complete, so ordering with earlier
    /// and later work is that of one copy on the user stream.
    fn copy_pipelined(&self, id: StreamId, s: &driver::Stream, op: CopyOp, to_app: bool) -> Result<()> {
        let Endpoint::Addr(src) = op.src else { return Err(bad()) };
        let io = self.io_stream(id)?;
        let shared = &self.shared;
        if !to_app {
            // The helper reads the application only once the user stream gets here.
            self.order(s, &io)?;
        }
        for p in pieces::pieces(op.width, op.height, STAGE) {
            let buf = shared.staging.take().map_err(|c| self.err(Op::Other, c))?;
            let n = p.bytes();
            let soff = p.row0 * op.spitch + p.col0;
            let doff = p.row0 * op.dpitch + p.col0;
            let sh = shared.clone();
            if to_app {
                let r = driver::copy_2d(buf.addr(), p.cols, src + soff, op.spitch, p.cols, p.rows, s).map_err(|c| self.err(Op::Other, c));
                if let Err(e) = r {
                    shared.staging.give(buf);
                    return Err(e);
                }
                self.order(s, &io)?;
                let (dst, dpitch) = (op.dst + doff, op.dpitch);
                driver::launch_host_func(&io, Box::new(move || {
                    match sh.app.get() {
                        Some(app) => {
                            let data = buf.as_slice();
                            for r in 0..p.rows {
                                if app.write(dst + r * dpitch, &data[(r * p.cols) as usize..][..p.cols as usize]).is_err() {
                                    sh.report(cuda::ERROR_INVALID_VALUE);
                                    break;
                                }
                            }
                        }
                        None => sh.report(cuda::ERROR_INITIALIZATION),
                    }
                    sh.staging.give(buf);
                }))
                .map_err(|c| self.err(Op::Other, c))?;
            } else {
                let (from, spitch, bufaddr) = (src + soff, op.spitch, buf.addr());
                driver::launch_host_func(&io, Box::new(move || {
                    let Some(app) = sh.app.get() else { return sh.report(cuda::ERROR_INITIALIZATION) };
                    // SAFETY: the buffer is reserved for this piece; the device copy that reads
                    // it waits for this host function (event), and the buffer returns to the
                    // pool only after that copy.
                    let dst = unsafe { stage_slice(bufaddr, n) };
                    for r in 0..p.rows {
                        if app.read(from + r * spitch, &mut dst[(r * p.cols) as usize..][..p.cols as usize]).is_err() {
                            return sh.report(cuda::ERROR_INVALID_VALUE);
                        }
                    }
                }))
                .map_err(|c| self.err(Op::Other, c))?;
                if let Err(e) = self.order(&io, s) {
                    // The read queued on the helper stream may still fill the buffer: it goes
                    // back only through that stream.
                    let sh = shared.clone();
                    let _ = driver::launch_host_func(&io, Box::new(move || sh.staging.give(buf)));
                    return Err(e);
                }
                self.enqueue_h2d(s, buf, op.dst + doff, op.dpitch, p)?;
            }
        }
        if to_app {
            // Later work on the user stream (and its synchronization) waits for the last write.
            self.order(&io, s)?;
        }
        Ok(())
    }

    /// Device copy out of a filled staging buffer, then return the buffer to the pool.
    fn enqueue_h2d(&self, s: &driver::Stream, buf: HostBuf, dst: u64, dpitch: u64, p: pieces::Piece) -> Result<()> {
        let copied = driver::copy_2d(dst, dpitch, buf.addr(), p.cols, p.cols, p.rows, s);
        // Even when the copy could not be queued, the buffer goes back only through the
        // stream: a host function queued before may still be filling it.
        let sh = self.shared.clone();
        let released = driver::launch_host_func(s, Box::new(move || sh.staging.give(buf)));
        copied.and(released).map_err(|c| self.err(Op::Other, c))
    }

    /// After a snapshot or restore: on failure, let copies still moving into or out of the
    /// queued buffers finish before the buffers go back to the pool.
    fn settle(&self, s: &driver::Stream, failed: bool, queue: VecDeque<InFlight>) {
        if failed {
            let _ = driver::stream_sync(s);
        }
        for f in queue {
            self.shared.staging.give(f.buf);
        }
    }

    /// Take a staging buffer and an event for one piece (both or neither).
    fn piece_slot(&self) -> Result<(HostBuf, driver::Event)> {
        let done = driver::event_create(2).map_err(|c| self.err(Op::Other, c))?;
        let buf = self.shared.staging.take().map_err(|c| self.err(Op::Other, c))?;
        Ok((buf, done))
    }

    fn sync_result(&self, r: DResult<()>) -> Result<()> {
        r.map_err(|c| self.err(Op::Other, c))?;
        match self.shared.async_err.swap(0, Ordering::SeqCst) {
            0 => Ok(()),
            c => Err(BackendError::Cuda(c)),
        }
    }
}

/// The bytes at `addr` in this process: a staging buffer a host function fills, or pinned host
/// memory the backend mapped (snapshot, restore, memset).
///
/// # Safety
/// `addr..addr+len` must be mapped and writable for the lifetime the caller uses the slice,
/// and nothing else may access it meanwhile: a staging buffer reserved for one piece of a copy
/// (returned to the pool only after that piece is done), or a live pinned allocation while
/// the device is drained or the access is ordered on a stream (a free drains the device first).
/// Writes into `dst` the bytes of `after` that differ from `before` (a kernel's changes to a
/// `__managed__` variable, [`Mirror`]).
fn merge_changed(dst: &mut [u8], before: &[u8], after: &[u8]) {
    for ((d, b), a) in dst.iter_mut().zip(before).zip(after) {
        if a != b {
            *d = *a;
        }
    }
}

unsafe fn stage_slice<'a>(addr: u64, len: u64) -> &'a mut [u8] {
    // SAFETY: the caller guarantees the range is mapped, writable and exclusively ours.
    unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len as usize) }
}

/// Map a new memfd of `len` bytes at `addr` (shared, so the application maps the same pages).
/// Reserve `[addr, addr+len)` of this process's address space (PROT_NONE, nothing committed)
/// for pinned host memory, so that nothing else — the driver's own host allocations included —
/// lands where the planner will put it.
fn host_reserve(addr: u64, len: u64) -> std::io::Result<()> {
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; PROT_NONE with
    // MAP_NORESERVE commits nothing.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len as usize,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    if p as u64 != addr {
        // Old kernels ignore the flag and pick another address.
        // SAFETY: unmapping what was just mapped.
        unsafe { libc::munmap(p, len as usize) };
        return Err(std::io::Error::from(std::io::ErrorKind::AddrInUse));
    }
    Ok(())
}

/// Map a new memfd of `len` bytes at `addr` (shared, so the application maps the same pages),
/// over this module's reservation of the pinned half of the window.
fn pinned_map(addr: u64, len: u64) -> std::io::Result<OwnedFd> {
    let fd = nix::sys::memfd::memfd_create(c"crum-pinned", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).map_err(std::io::Error::from)?;
    nix::unistd::ftruncate(&fd, len as i64).map_err(std::io::Error::from)?;
    // SAFETY: MAP_FIXED replaces only part of our own PROT_NONE reservation of the pinned half
    // (`host_reserve`), at a planner chunk no other allocation uses.
    let p = unsafe {
        libc::mmap(addr as *mut libc::c_void, len as usize, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED | libc::MAP_FIXED, fd.as_raw_fd(), 0)
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd)
}

/// Give a pinned mapping's pages back, keeping the range reserved.
fn pinned_unmap(addr: u64, len: u64) {
    // SAFETY: replaces a pinned mapping this module made with a PROT_NONE reservation again;
    // no references into it remain (the device is drained before a free).
    unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len as usize,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
            -1,
            0,
        );
    }
}

fn read_props(dev: Device) -> DResult<DeviceProps> {
    let a = |x| driver::device_attr(dev, x);
    let pci_bus = a(DA::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?;
    Ok(DeviceProps {
        name: driver::device_name(dev)?,
        total_mem: driver::device_total_mem(dev)?,
        major: a(DA::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        minor: a(DA::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        multiprocessors: a(DA::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        max_threads_per_block: a(DA::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        max_threads_per_sm: a(DA::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?,
        max_blocks_per_sm: a(DA::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR)?,
        warp_size: a(DA::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?,
        regs_per_block: a(DA::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK)?,
        regs_per_sm: a(DA::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR)?,
        shared_per_block: a(DA::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)? as u64,
        shared_per_block_optin: a(DA::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as u64,
        shared_per_sm: a(DA::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)? as u64,
        const_mem: a(DA::CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY)? as u64,
        clock_khz: a(DA::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)?,
        mem_clock_khz: a(DA::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)?,
        mem_bus_width: a(DA::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)?,
        l2_bytes: a(DA::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?,
        max_grid: [a(DA::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?, a(DA::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?, a(DA::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?],
        max_block: [a(DA::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?, a(DA::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?, a(DA::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?],
        managed: a(DA::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY)? != 0,
        concurrent_kernels: a(DA::CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS)? != 0,
        cooperative_launch: a(DA::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH)? != 0,
        pci_bus_id: pci_bus,
        uuid: driver::device_uuid(dev)?,
        max_persisting_l2: a(DA::CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE)?,
        max_access_policy_window: a(DA::CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE)?,
        graph_conditionals: false,
    })
}

/// Whether `ptx` declares the module variable `name` managed (`.attribute(.managed)`, how
/// nvcc emits `__managed__`).
fn declares_managed(ptx: &str, name: &str) -> bool {
    ptx.lines().filter(|l| l.contains(".attribute(.managed)")).any(|l| {
        let decl = l.split(['=', ';']).next().unwrap_or("");
        let last = decl.split_whitespace().last().unwrap_or("");
        last.split('[').next() == Some(name)
    })
}

/// The PTX text of a module image, for the parameter-layout fallback: the highest-architecture
/// PTX of each fat binary (decompressed by `crum_ptx::fatbin`; several for a program built
/// with `-rdc=true`, whose kernels are in its objects' PTX), else PTX text found as is (plain
/// PTX, or an uncompressed fat binary entry).
fn ptx_text(image: &[u8]) -> Option<String> {
    if image.starts_with(&0xBA55_ED50u32.to_le_bytes()) {
        if let Ok(images) = crum_ptx::fatbin::program_ptx(image) {
            if !images.is_empty() {
                return Some(images.iter().map(|i| i.ptx.as_str()).collect::<Vec<_>>().join("\n"));
            }
        }
    }
    let start = image.windows(8).position(|w| w == b".version")?;
    let end = image[start..].iter().position(|&b| b == 0).map_or(image.len(), |e| start + e);
    std::str::from_utf8(&image[start..end]).ok().map(str::to_string)
}

/// Check that a module image is well formed before the driver parses it (the driver trusts
/// the sizes in it; the image comes from the application and is untrusted): a fat binary whose
/// header and entry sizes stay inside the image, a 64-bit ELF (cubin), or PTX text.
fn check_image(image: &[u8]) -> std::result::Result<(), &'static str> {
    let u16_at = |o: usize| image.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| image.get(o..o + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])));
    let u64_at = |o: usize| image.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    if u32_at(0) == Some(0xBA55_ED50) {
        if u16_at(4) != Some(1) || u16_at(6) != Some(16) {
            return Err("unknown fat binary version or header size");
        }
        let size = u64_at(8).ok_or("truncated fat binary header")?;
        let end = size.checked_add(16).filter(|&e| e <= image.len() as u64).ok_or("fat binary larger than the image")? as usize;
        let mut at = 16usize;
        if at == end {
            return Err("fat binary without entries");
        }
        while at < end {
            let kind = u16_at(at).ok_or("truncated entry")?;
            let hsize = u32_at(at + 4).ok_or("truncated entry")? as u64;
            let psize = u64_at(at + 8).ok_or("truncated entry")?;
            if !(kind == 1 || kind == 2) || hsize < 64 {
                return Err("unknown fat binary entry");
            }
            let next = (at as u64).checked_add(hsize).and_then(|x| x.checked_add(psize)).filter(|&n| n <= end as u64).ok_or("fat binary entry past the end")?;
            at = next as usize;
        }
        return Ok(());
    }
    if image.starts_with(b"\x7fELF") {
        return if image.get(4) == Some(&2) && image.len() >= 64 { Ok(()) } else { Err("not a 64-bit ELF image") };
    }
    let text = image.split(|&b| b == 0).next().unwrap_or_default();
    match std::str::from_utf8(text) {
        Ok(t) if t.contains(".version") && t.contains(".target") => Ok(()),
        _ => Err("neither a fat binary, a cubin nor PTX text"),
    }
}

/// Runtime `cudaFuncAttribute` values that `cuFuncSetAttribute` accepts with the same number.
fn settable_attr(attr: u32) -> Option<FA> {
    match attr {
        8 => Some(FA::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES),
        9 => Some(FA::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT),
        _ => None,
    }
}

impl Backend for Cuda {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn capabilities(&self) -> Capabilities {
        // Pinned and managed memory are memfds the application maps (managed: behind its
        // shadow pages), but device memory is not: no shared host mappings in general.
        Capabilities { name: "cuda", shared_host_mappings: false, cooperative_launch: self.props.cooperative_launch, textures: false, fixed_addresses: true, fork_snapshot: false, queue_cut: true }
    }

    fn device_props(&self) -> DeviceProps {
        self.props.clone()
    }

    fn attach_app(&self, app: Arc<AppMemory>) {
        let _ = self.shared.app.set(app);
    }

    fn mem_info(&self) -> Result<(u64, u64)> {
        self.bind()?;
        driver::mem_get_info().map_err(|c| self.err(Op::Other, c))
    }

    fn malloc(&self, size: u64, kind: AllocKind) -> Result<Allocation> {
        self.place(size, kind, None)
    }

    fn map_at(&self, addr: u64, size: u64) -> Result<Allocation> {
        let inside = {
            let p = self.planner.lock().unwrap();
            match &p.vmm {
                None => return Err(BackendError::Unsupported { backend: "cuda", op: "cuMemMap (the device window has no VMM range here)" }),
                Some(v) => v.in_window(addr) && addr.checked_add(size).is_some_and(|e| e == addr || v.in_window(e - 1)),
            }
        };
        if !inside || size == 0 {
            return Err(bad());
        }
        self.place(size, AllocKind::Device, Some(addr))
    }

    fn free(&self, addr: u64) -> Result<()> {
        self.bind()?;
        // cudaFree synchronizes the device: nothing may still use the memory.
        self.drain_all();
        self.free_synced(addr)
    }

    fn free_synced(&self, addr: u64) -> Result<()> {
        self.bind()?;
        self.sync_result(driver::ctx_synchronize())?;
        // Lock order: planner, then tables (as `place` takes them).
        let mut planners = self.planner.lock().unwrap();
        let a = self.tables.lock().unwrap().allocs.remove(&addr).ok_or(BackendError::Cuda(cuda::ERROR_INVALID_VALUE))?;
        match a.region {
            Region::Managed { .. } | Region::Pinned { .. } => {
                let span = a.len.next_multiple_of(4096);
                let _ = driver::host_unregister(addr);
                pinned_unmap(addr, span);
                let _ = planners.pinned.free(addr);
                Ok(())
            }
            Region::Device => {
                let planner = match planners.vmm.as_mut() {
                    Some(v) if v.in_window(addr) => v,
                    _ => &mut planners.device,
                };
                let released = planner.free(addr).map_err(|_| bad())?;
                let mapping = released.and_then(|chunk| self.tables.lock().unwrap().mappings.remove(&chunk.addr));
                match mapping {
                    Some(m) => driver::unmap(m).map_err(|c| self.err(Op::Other, c)),
                    None => Ok(()),
                }
            }
        }
    }

    fn owns(&self, addr: u64, len: u64) -> Option<AllocKind> {
        self.locate(addr, len.max(1))
    }

    fn host_register(&self, addr: u64, len: u64) -> Result<()> {
        // The application's memory lives in another process and cannot be page-locked from
        // here; remember the range so copies from it are ordered on the stream (read when the
        // stream reaches them) as CUDA does for page-locked memory.
        if len == 0 || addr.checked_add(len).is_none() {
            return Err(bad());
        }
        let mut t = self.tables.lock().unwrap();
        let overlaps = t.registered.range(..addr + len).next_back().is_some_and(|(&s, &l)| s + l > addr);
        if overlaps {
            return Err(BackendError::Cuda(cuda::ERROR_HOST_MEMORY_ALREADY_REGISTERED));
        }
        t.registered.insert(addr, len);
        Ok(())
    }

    fn host_unregister(&self, addr: u64) -> Result<()> {
        self.tables.lock().unwrap().registered.remove(&addr).map(|_| ()).ok_or(BackendError::Cuda(cuda::ERROR_HOST_MEMORY_NOT_REGISTERED))
    }

    fn is_registered(&self, addr: u64, len: u64) -> bool {
        let t = self.tables.lock().unwrap();
        t.registered.range(..=addr).next_back().is_some_and(|(&s, &l)| addr.checked_add(len).is_some_and(|e| e <= s + l))
    }

    fn load_module(&self, image: &[u8]) -> Result<ModuleId> {
        self.bind()?;
        if let Err(why) = check_image(image) {
            tracing::warn!("refusing a module image: {why}");
            return Err(BackendError::Cuda(cuda::ERROR_INVALID_KERNEL_IMAGE));
        }
        let module = driver::module_load(image).map_err(|c| self.err(Op::ModuleLoad, c))?;
        let id = self.handle();
        self.tables.lock().unwrap().modules.insert(id, ModuleRec { module, ptx: OnceLock::new(), mirrors: Vec::new(), last_use: None, globals_known: false, heap: OnceLock::new(), preempt: None });
        Ok(ModuleId(id))
    }

    fn unload_module(&self, module: ModuleId) -> Result<()> {
        self.bind()?;
        self.drain_all();
        self.unload_module_synced(module)
    }

    fn unload_module_synced(&self, module: ModuleId) -> Result<()> {
        self.bind()?;
        self.sync_result(driver::ctx_synchronize())?;
        let mut t = self.tables.lock().unwrap();
        let m = t.modules.remove(&module.0).ok_or_else(handle_err)?;
        t.globals.retain(|_, g| g.1 != module.0);
        for x in &m.mirrors {
            t.managed_vars.remove(&x.host);
        }
        drop(t);
        for x in &m.mirrors {
            self.free_synced(x.host)?;
        }
        driver::module_unload(m.module).map_err(|c| self.err(Op::Other, c))
    }

    fn function(&self, module: ModuleId, name: &str) -> Result<FuncInfo> {
        self.bind()?;
        let mut t = self.tables.lock().unwrap();
        let m = t.modules.get(&module.0).ok_or_else(handle_err)?;
        let f = driver::module_function(&m.module, name).map_err(|c| self.err(Op::FunctionLookup, c))?;
        let layout = match driver::param_layout(f) {
            Some(r) => r.map_err(|c| self.err(Op::Other, c))?,
            None => {
                let ptx = m.ptx.get_or_init(|| ptx_text(m.module.image())).as_deref().ok_or_else(|| {
                    tracing::error!(kernel = name, "driver older than 12.4 and no plain PTX in the module: parameter layout unknown");
                    BackendError::Unsupported { backend: "cuda", op: "parameter layout without cuFuncGetParamInfo or PTX" }
                })?;
                params::layout_from_ptx(ptx, name).map_err(|e| {
                    tracing::error!(kernel = name, "{e}");
                    BackendError::Cuda(cuda::ERROR_INVALID_DEVICE_FUNCTION)
                })?
            }
        };
        let fa = |a| driver::func_attr(f, a).map_err(|c| self.err(Op::Other, c));
        let param_bytes = params::block_size(&layout);
        let info = FuncInfo {
            handle: 0,
            params: layout.clone(),
            param_bytes,
            shared_bytes: fa(FA::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)? as u64,
            local_bytes: fa(FA::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)? as u64,
            const_bytes: fa(FA::CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES)? as u64,
            max_threads_per_block: fa(FA::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            num_regs: fa(FA::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
            ptx_version: fa(FA::CU_FUNC_ATTRIBUTE_PTX_VERSION)?,
            binary_version: fa(FA::CU_FUNC_ATTRIBUTE_BINARY_VERSION)?,
            max_dynamic_shared: fa(FA::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)?,
        };
        let heap = t.modules.get(&module.0).is_some_and(|m| {
            m.heap
                .get_or_init(|| heap::HeapUse::of_image(m.module.image(), m.ptx.get_or_init(|| ptx_text(m.module.image())).as_deref()))
                .reaches(name)
        });
        let id = self.handle();
        t.funcs.insert(id, FuncRec { f, module: module.0, name: name.to_string(), layout, param_bytes, heap: heap.then(|| name.to_string()) });
        Ok(FuncInfo { handle: id, ..info })
    }

    fn module_kernels(&self, module: ModuleId) -> Result<Vec<String>> {
        self.bind()?;
        let t = self.tables.lock().unwrap();
        let m = t.modules.get(&module.0).ok_or_else(handle_err)?;
        if let Some(names) = driver::module_function_names(&m.module) {
            return names.map_err(|c| self.err(Op::Other, c));
        }
        // A driver older than CUDA 12.4: the kernels its PTX declares.
        let ptx = m.ptx.get_or_init(|| ptx_text(m.module.image())).as_deref().ok_or_else(|| {
            tracing::error!("driver older than 12.4 and no plain PTX in the module: its kernels cannot be listed");
            BackendError::Unsupported { backend: "cuda", op: "listing the kernels of a module without cuModuleEnumerateFunctions or PTX" }
        })?;
        Ok(heap::entry_names(ptx))
    }

    fn symbol(&self, module: ModuleId, name: &str) -> Result<(u64, u64)> {
        self.bind()?;
        let mut t = self.tables.lock().unwrap();
        let m = t.modules.get(&module.0).ok_or_else(handle_err)?;
        // A `__managed__` variable is where the program sees it.
        if let Some(x) = m.mirrors.iter().find(|x| x.name == name) {
            return Ok((x.host, x.len));
        }
        let (addr, len) = driver::module_global(&m.module, name).map_err(|c| self.err(Op::SymbolLookup, c))?;
        t.globals.insert(addr, (len, module.0, name.to_string()));
        Ok((addr, len))
    }

    fn managed_var(&self, module: ModuleId, name: &str) -> Result<Allocation> {
        self.bind()?;
        let (dev, len) = {
            let t = self.tables.lock().unwrap();
            let m = t.modules.get(&module.0).ok_or_else(handle_err)?;
            if m.mirrors.iter().any(|x| x.name == name) {
                return Err(bad());
            }
            // Only a variable declared managed is one (`cudaLibraryGetManaged` of a plain
            // `__device__` variable is `cudaErrorSymbolNotFound`); the driver's lookup finds
            // every variable, so the module's PTX says which (a module of machine code only
            // cannot be asked: taken as declared).
            let ptx = m.ptx.get_or_init(|| ptx_text(m.module.image()));
            if ptx.as_deref().is_some_and(|p| !declares_managed(p, name)) {
                return Err(BackendError::Cuda(cuda::ERROR_INVALID_SYMBOL));
            }
            driver::module_global(&m.module, name).map_err(|c| self.err(Op::SymbolLookup, c))?
        };
        let a = self.place(len, AllocKind::Managed, None)?;
        // Its initial value.
        let copied = driver::copy_2d(a.addr, len, dev, len, len, 1, &self.legacy).and_then(|_| driver::stream_sync(&self.legacy));
        if let Err(c) = copied {
            let _ = self.free(a.addr);
            return Err(self.err(Op::Other, c));
        }
        self.mirror(module.0, name, dev, a.addr, len)?;
        Ok(a)
    }

    fn func_set_attribute(&self, func: FuncId, attr: u32, value: i32) -> Result<()> {
        self.bind()?;
        let f = self.tables.lock().unwrap().funcs.get(&func.0).map(|r| r.f).ok_or(BackendError::Cuda(cuda::ERROR_INVALID_DEVICE_FUNCTION))?;
        let a = settable_attr(attr).ok_or_else(bad)?;
        driver::func_set_attr(f, a, value).map_err(|c| self.err(Op::Other, c))
    }

    fn launch(&self, stream: StreamId, func: FuncId, dims: LaunchDims, params: Vec<u8>) -> Result<()> {
        self.bind()?;
        let (f, module, mut packed, mirrored) = {
            let mut t = self.tables.lock().unwrap();
            let r = t.funcs.get(&func.0).ok_or(BackendError::Cuda(cuda::ERROR_INVALID_DEVICE_FUNCTION))?;
            if params.len() < r.param_bytes as usize {
                return Err(bad());
            }
            let mirrored = t.modules.get(&r.module).is_some_and(|m| !m.mirrors.is_empty());
            let out = (r.f, r.module, params::pointers(&params, &r.layout).map_err(|_| bad())?, mirrored);
            if let Some(name) = r.heap.as_ref().filter(|n| !t.heap_launches.contains(*n)) {
                let name = name.clone();
                t.heap_launches.insert(name);
            }
            out
        };
        let op = crum_wire::ckpt::QueuedOp::Launch {
            func: func.0,
            grid: dims.grid,
            block: dims.block,
            shared: dims.shared,
            cooperative: dims.cooperative,
            params,
            first_block: 0,
            contexts: Vec::new(),
        };
        let feed: queue::Feed = Box::new(move |core: &Core, s: &driver::Stream| core.launch_now(f, module, &mut packed, mirrored, dims, s));
        self.enqueue(stream.0, queue::Work { op, staged: None, blocking: false, waits: Vec::new(), feed }).map(|_| ())
    }

    fn memcpy(&self, stream: StreamId, op: CopyOp) -> Result<()> {
        self.bind()?;
        if op.width == 0 || op.height == 0 {
            return Ok(());
        }
        let span = |pitch: u64| pitch.checked_mul(op.height - 1).and_then(|x| x.checked_add(op.width));
        let (Some(dspan), Some(sspan)) = (span(op.dpitch), span(op.spitch)) else {
            return Err(bad());
        };
        let dst_dev = self.locate(op.dst, dspan).is_some();
        if !dst_dev && self.in_window(op.dst) {
            return Err(bad());
        }
        let (src, staged) = match &op.src {
            Endpoint::Addr(a) => (*a, None),
            Endpoint::Staged(b) => (0, Some(b.clone())),
        };
        let desc = crum_wire::ckpt::QueuedOp::Copy { dst: op.dst, dpitch: op.dpitch, src, spitch: op.spitch, width: op.width, height: op.height, staged: None };
        let work = |blocking: bool, feed: queue::Feed| queue::Work { op: desc, staged, blocking, waits: Vec::new(), feed };
        let w = match op.src {
            Endpoint::Addr(src) => {
                let src_dev = self.locate(src, sspan).is_some();
                if !src_dev && self.in_window(src) {
                    return Err(bad());
                }
                let multi = op.width.saturating_mul(op.height) > STAGE;
                // The application side of a copy with one end in backend memory.
                let app_side = if src_dev { (op.dst, dspan) } else { (src, sspan) };
                if src_dev && dst_dev {
                    work(false, Box::new(move |c: &Core, s: &driver::Stream| c.copy_direct(s, &op, src)))
                } else if src_dev != dst_dev && !self.is_registered(app_side.0, app_side.1) {
                    // Pageable memory: the server sends these only for synchronous copies
                    // (it then waits for the stream): done by the feeder, piece by piece.
                    work(true, Box::new(move |c: &Core, s: &driver::Stream| c.copy_sync(s, op, src_dev)))
                } else if multi && src_dev != dst_dev {
                    work(false, Box::new(move |c: &Core, s: &driver::Stream| c.copy_pipelined(stream, s, op, src_dev)))
                } else {
                    work(false, Box::new(move |c: &Core, s: &driver::Stream| c.copy_staged(s, op, dst_dev, src_dev)))
                }
            }
            Endpoint::Staged(ref data) => {
                if !dst_dev || (data.len() as u64) < op.width * op.height {
                    return Err(bad());
                }
                work(false, Box::new(move |c: &Core, s: &driver::Stream| c.copy_staged(s, op, true, false)))
            }
        };
        self.enqueue(stream.0, w).map(|_| ())
    }

    fn memset(&self, stream: StreamId, dst: u64, pitch: u64, value: u8, width: u64, height: u64) -> Result<()> {
        self.bind()?;
        if width == 0 || height == 0 {
            return Ok(());
        }
        let span = pitch.checked_mul(height - 1).and_then(|x| x.checked_add(width)).ok_or_else(bad)?;
        let kind = self.locate(dst, span).ok_or_else(bad)?;
        let feed: queue::Feed = if host_backed(kind) {
            // Host memory mapped here: set it when the stream gets here (the driver's memset
            // entry points take device memory).
            Box::new(move |c: &Core, s: &driver::Stream| {
                driver::launch_host_func(s, Box::new(move || {
                    for row in 0..height {
                        // SAFETY: the rows lie in a live pinned allocation (checked above); it is
                        // freed only after a device drain, which waits for this host function.
                        unsafe { stage_slice(dst + row * pitch, width) }.fill(value);
                    }
                }))
                .map_err(|code| c.err(Op::Other, code))
            })
        } else {
            Box::new(move |c: &Core, s: &driver::Stream| driver::memset(dst, pitch, value, width, height, s).map_err(|code| c.err(Op::Other, code)))
        };
        let op = crum_wire::ckpt::QueuedOp::Memset { dst, pitch, value, width, height };
        self.enqueue(stream.0, queue::Work { op, staged: None, blocking: false, waits: Vec::new(), feed }).map(|_| ())
    }

    fn stream_create(&self, flags: u32, priority: i32) -> Result<StreamId> {
        self.bind()?;
        let s = Arc::new(driver::stream_create(flags & 1 != 0, priority).map_err(|c| self.err(Op::Other, c))?);
        let id = self.handle();
        self.core.add_stream(id, s.clone(), flags & 1 != 0)?;
        self.tables.lock().unwrap().streams.insert(id, s);
        Ok(StreamId(id))
    }

    fn stream_destroy(&self, stream: StreamId) -> Result<()> {
        self.bind()?;
        // The driver destroys the stream when the last lane using it lets go; queued work
        // still completes (cuStreamDestroy semantics).
        let mut t = self.tables.lock().unwrap();
        t.io.remove(&stream.0);
        t.streams.remove(&stream.0).ok_or_else(handle_err)?;
        // What the proxy still holds for it is fed and completes too.
        self.retire_stream(stream.0);
        Ok(())
    }

    fn stream_query(&self, stream: StreamId) -> Result<bool> {
        self.bind()?;
        let s = self.stream(stream)?;
        // Not ready while the proxy holds work of it the driver has not got.
        if !self.all_fed(stream.0).ok_or_else(handle_err)? {
            return Ok(false);
        }
        driver::stream_query(&s).map_err(|c| self.err(Op::Other, c))
    }

    fn stream_sync(&self, stream: StreamId) -> Result<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        let points = self.sync_points(SyncOn::Stream(stream))?;
        self.core.wait_points(&points);
        self.sync_result(driver::stream_sync(&s))
    }

    fn stream_wait_event(&self, stream: StreamId, event: EventId) -> Result<()> {
        self.bind()?;
        self.stream(stream)?;
        // The event's latest record, as a point of its stream: the wait is for that item,
        // whatever records come later.
        let rec = self.tables.lock().unwrap().events.get(&event.0).map(|e| e.rec).ok_or_else(handle_err)?;
        let Some((on_stream, on_seq)) = rec else { return Ok(()) };
        let op = crum_wire::ckpt::QueuedOp::WaitFor { on_stream, on_seq };
        let feed: queue::Feed = Box::new(|_: &Core, _: &driver::Stream| Ok(()));
        self.enqueue(stream.0, queue::Work { op, staged: None, blocking: false, waits: vec![(on_stream, on_seq)], feed }).map(|_| ())
    }

    fn stream_set_attr(&self, stream: StreamId, attr: crum_wire::StreamAttr) -> Result<()> {
        self.bind()?;
        let s = self.stream(stream)?;
        driver::stream_set_attr(&s, attr).map_err(|c| self.err(Op::Other, c))
    }

    fn reset_persisting_l2(&self) -> Result<()> {
        self.bind()?;
        driver::reset_persisting_l2().map_err(|c| self.err(Op::Other, c))
    }

    fn set_persisting_l2_limit(&self, bytes: u64) -> Result<()> {
        self.bind()?;
        driver::set_persisting_l2_limit(bytes).map_err(|c| self.err(Op::Other, c))
    }

    fn set_heap_limit(&self, bytes: u64) -> Result<()> {
        self.bind()?;
        driver::set_heap_limit(bytes).map_err(|c| self.err(Op::Other, c))
    }

    fn host_func(&self, stream: StreamId, call: HostCall) -> Result<()> {
        self.host_func_named(stream, call, 0, 0)
    }

    fn host_func_named(&self, stream: StreamId, call: HostCall, func: u64, data: u64) -> Result<()> {
        self.bind()?;
        let op = crum_wire::ckpt::QueuedOp::HostFunc { func, data };
        let feed: queue::Feed = Box::new(move |c: &Core, s: &driver::Stream| driver::launch_host_func(s, call).map_err(|code| c.err(Op::Other, code)));
        self.enqueue(stream.0, queue::Work { op, staged: None, blocking: false, waits: Vec::new(), feed }).map(|_| ())
    }

    fn event_create(&self, flags: u32) -> Result<EventId> {
        self.bind()?;
        if flags & !0x7 != 0 {
            return Err(bad());
        }
        let ev = driver::event_create(flags).map_err(|c| self.err(Op::Other, c))?;
        let id = self.handle();
        self.tables.lock().unwrap().events.insert(id, EventRec { ev: Arc::new(ev), flags, rec: None, recorded: false, timing: flags & 2 == 0, shift: 0.0 });
        Ok(EventId(id))
    }

    fn event_destroy(&self, event: EventId) -> Result<()> {
        self.bind()?;
        // Destroyed when the last user (a wait in progress on another lane) lets go.
        self.tables.lock().unwrap().events.remove(&event.0).map(|_| ()).ok_or_else(handle_err)
    }

    fn event_record(&self, event: EventId, stream: StreamId) -> Result<()> {
        self.bind()?;
        self.stream(stream)?;
        let flags = self.tables.lock().unwrap().events.get(&event.0).map(|e| e.flags).ok_or_else(handle_err)?;
        // A driver event of its own per record: a record fed later (it waited in the queue)
        // must not overwrite a newer one fed earlier on another stream.
        let ev = Arc::new(driver::event_create(flags).map_err(|c| self.err(Op::Other, c))?);
        let fed = ev.clone();
        let op = crum_wire::ckpt::QueuedOp::EventRecord { event: event.0 };
        let feed: queue::Feed = Box::new(move |c: &Core, s: &driver::Stream| driver::event_record(&fed, s).map_err(|code| c.err(Op::Other, code)));
        let seq = self.enqueue(stream.0, queue::Work { op, staged: None, blocking: false, waits: Vec::new(), feed })?;
        let mut t = self.tables.lock().unwrap();
        let e = t.events.get_mut(&event.0).ok_or_else(handle_err)?;
        e.ev = ev;
        e.rec = Some((stream.0, seq));
        e.recorded = true;
        e.shift = 0.0;
        Ok(())
    }

    fn event_completed_ago(&self, event: EventId) -> Result<Option<u64>> {
        self.bind()?;
        let (ev, timing, shift, rec) = {
            let t = self.tables.lock().unwrap();
            let e = t.events.get(&event.0).ok_or_else(handle_err)?;
            if !e.recorded {
                return Ok(None);
            }
            (e.ev.clone(), e.timing, e.shift, e.rec)
        };
        // A record still in the proxy's queue is not complete (a checkpoint saves it queued).
        if rec.is_some_and(|(s, q)| !self.is_fed(s, q)) {
            return Err(BackendError::Cuda(cuda::ERROR_NOT_READY));
        }
        // The device is idle at a checkpoint: the event is complete.
        if !driver::event_query(&ev).map_err(|c| self.err(Op::Other, c))? {
            return Err(BackendError::Cuda(cuda::ERROR_NOT_READY));
        }
        if !timing {
            return Ok(Some(0));
        }
        // Its age: the time from it to an event recorded now.
        let now = driver::event_create(0).map_err(|c| self.err(Op::Other, c))?;
        let s = self.stream(LEGACY_STREAM)?;
        driver::event_record(&now, &s).map_err(|c| self.err(Op::Other, c))?;
        driver::event_sync(&now).map_err(|c| self.err(Op::Other, c))?;
        let ms = driver::event_elapsed(&ev, &now).map_err(|c| self.err(Op::Other, c))? as f64 + shift;
        Ok(Some((ms.max(0.0) * 1e6) as u64))
    }

    fn event_restore(&self, event: EventId, ago_ns: u64) -> Result<()> {
        self.bind()?;
        let s = self.stream(LEGACY_STREAM)?;
        let mut t = self.tables.lock().unwrap();
        let e = t.events.get_mut(&event.0).ok_or_else(handle_err)?;
        driver::event_record(&e.ev, &s).map_err(|c| self.err(Op::Other, c))?;
        driver::event_sync(&e.ev).map_err(|c| self.err(Op::Other, c))?;
        e.rec = None;
        e.recorded = true;
        e.shift = ago_ns as f64 / 1e6;
        Ok(())
    }

    fn event_query(&self, event: EventId) -> Result<bool> {
        self.bind()?;
        let (ev, rec) = {
            let t = self.tables.lock().unwrap();
            let e = t.events.get(&event.0).ok_or_else(handle_err)?;
            (e.ev.clone(), e.rec)
        };
        // Not ready while its record waits in the proxy's queue.
        if rec.is_some_and(|(s, q)| !self.is_fed(s, q)) {
            return Ok(false);
        }
        driver::event_query(&ev).map_err(|c| self.err(Op::Other, c))
    }

    fn event_sync(&self, event: EventId) -> Result<()> {
        self.bind()?;
        // Wait without holding the table lock: other lanes keep working meanwhile.
        let (ev, rec) = {
            let t = self.tables.lock().unwrap();
            let e = t.events.get(&event.0).ok_or_else(handle_err)?;
            if !e.recorded {
                return Ok(());
            }
            (e.ev.clone(), e.rec)
        };
        if let Some(point) = rec {
            self.core.wait_points(&[point]);
        }
        self.sync_result(driver::event_sync(&ev))
    }

    fn event_elapsed(&self, start: EventId, end: EventId) -> Result<f32> {
        self.bind()?;
        let t = self.tables.lock().unwrap();
        let (a, b) = (t.events.get(&start.0).ok_or_else(handle_err)?, t.events.get(&end.0).ok_or_else(handle_err)?);
        if !a.timing || !b.timing || !a.recorded || !b.recorded {
            return Err(handle_err());
        }
        if [a.rec, b.rec].iter().flatten().any(|&(s, q)| !self.is_fed(s, q)) {
            return Err(BackendError::Cuda(cuda::ERROR_NOT_READY));
        }
        let ms = driver::event_elapsed(&a.ev, &b.ev).map_err(|c| self.err(Op::Other, c))?;
        Ok((ms as f64 + a.shift - b.shift) as f32)
    }

    fn device_sync(&self) -> Result<()> {
        self.bind()?;
        self.drain_all();
        self.sync_result(driver::ctx_synchronize())
    }

    fn sync_points(&self, on: SyncOn) -> Result<Vec<(u64, u64)>> {
        self.bind()?;
        Ok(match on {
            SyncOn::Device => self.points_all(),
            SyncOn::Stream(id) if id == LEGACY_STREAM => {
                // Work on the legacy stream follows the blocking streams': a point there
                // follows everything it must.
                let op = crum_wire::ckpt::QueuedOp::Marker;
                let feed: queue::Feed = Box::new(|_: &Core, _: &driver::Stream| Ok(()));
                vec![(0, self.enqueue(0, queue::Work { op, staged: None, blocking: false, waits: Vec::new(), feed })?)]
            }
            SyncOn::Stream(id) => vec![(id.0, self.submitted(id.0).ok_or_else(handle_err)?)],
            SyncOn::Event(e) => {
                let t = self.tables.lock().unwrap();
                t.events.get(&e.0).ok_or_else(handle_err)?.rec.map(|p| vec![p]).unwrap_or_default()
            }
        })
    }

    fn wait_points(&self, points: &[(u64, u64)]) -> Result<()> {
        self.core.wait_points(points);
        Ok(())
    }

    fn hold_queues(&self) -> Result<Vec<String>> {
        let t0 = std::time::Instant::now();
        let waited = self.hold();
        if waited == 0 {
            return Ok(Vec::new());
        }
        let ms = t0.elapsed().as_millis();
        let note = format!(
            "{waited} operations already given to the driver ran to their end ({ms} ms; the cuda backend feeds at most {} per stream ahead)",
            self.queues.window()
        );
        tracing::info!("checkpoint cut: {note}");
        Ok(vec![note])
    }

    fn queued_work(&self) -> Result<Vec<crum_wire::ckpt::QueuedWork>> {
        self.queued().map_err(BackendError::Other)
    }

    fn release_queues(&self) {
        self.release();
    }

    fn replay_work(&self, w: &crum_wire::ckpt::QueuedWork, map: &dyn Fn(u64, u64) -> Option<u64>, host: Option<HostCall>) -> Result<u64> {
        use crum_wire::ckpt::QueuedOp;
        self.bind()?;
        let stream = StreamId(w.stream);
        self.stream(stream)?;
        let noop = || -> queue::Feed { Box::new(|_: &Core, _: &driver::Stream| Ok(())) };
        let plain = |op: QueuedOp, waits: Vec<(u64, u64)>| queue::Work { op, staged: None, blocking: false, waits, feed: noop() };
        match &w.op {
            QueuedOp::Launch { func, grid, block, shared, cooperative, params, first_block, contexts } => {
                if !contexts.is_empty() {
                    return Err(BackendError::Other(format!(
                        "kernel {func:#x} was saved in the middle of {} blocks on the emulated device; the cuda backend cannot resume block contexts (restart on the emulated device)",
                        contexts.len()
                    )));
                }
                let dims = LaunchDims { grid: *grid, block: *block, shared: *shared, cooperative: *cooperative };
                if *first_block != 0 {
                    self.launch_rest(stream, FuncId(*func), dims, params.clone(), *first_block)?;
                } else {
                    self.launch(stream, FuncId(*func), dims, params.clone())?;
                }
            }
            QueuedOp::Copy { dst, dpitch, src, spitch, width, height, staged } => {
                let src = match staged {
                    Some(b) => Endpoint::Staged(Arc::new(b.clone())),
                    None => Endpoint::Addr(*src),
                };
                self.memcpy(stream, CopyOp { dst: *dst, dpitch: *dpitch, src, spitch: *spitch, width: *width, height: *height })?;
            }
            QueuedOp::Memset { dst, pitch, value, width, height } => self.memset(stream, *dst, *pitch, *value, *width, *height)?,
            // An event destroyed after the recording was queued: nobody can observe it.
            QueuedOp::EventRecord { event } if self.tables.lock().unwrap().events.contains_key(event) => {
                self.event_record(EventId(*event), stream)?;
            }
            QueuedOp::WaitFor { on_stream, on_seq } => {
                // Named by this proxy's sequence numbers from now on; not in the map:
                // complete before the cut.
                let w = match map(*on_stream, *on_seq) {
                    Some(n) => plain(QueuedOp::WaitFor { on_stream: *on_stream, on_seq: n }, vec![(*on_stream, n)]),
                    None => plain(QueuedOp::WaitFor { on_stream: *on_stream, on_seq: 0 }, Vec::new()),
                };
                self.enqueue(stream.0, w)?;
            }
            QueuedOp::HostFunc { func, data } => {
                let call = host.ok_or_else(|| BackendError::Other("a host function to replay has no caller".into()))?;
                self.host_func_named(stream, call, *func, *data)?;
            }
            QueuedOp::EventRecord { .. } | QueuedOp::Marker => {
                self.enqueue(stream.0, plain(QueuedOp::Marker, Vec::new()))?;
            }
        }
        self.submitted(stream.0).ok_or_else(handle_err)
    }

    fn device_reset(&self) -> Result<()> {
        self.bind()?;
        self.drain_all();
        self.device_reset_synced()
    }

    fn device_reset_synced(&self) -> Result<()> {
        self.bind()?;
        self.sync_result(driver::ctx_synchronize())?;
        let addrs: Vec<u64> = self.tables.lock().unwrap().allocs.keys().copied().collect();
        for a in addrs {
            self.free_synced(a)?;
        }
        let mut t = self.tables.lock().unwrap();
        for &id in t.streams.keys() {
            self.retire_stream(id);
        }
        t.streams.clear();
        t.io.clear();
        t.events.clear();
        t.registered.clear();
        // The program may no longer use what the reset freed, heap blocks included.
        t.heap_launches.clear();
        self.shared.async_err.store(0, Ordering::SeqCst);
        Ok(())
    }

    fn take_async_error(&self) -> Option<u32> {
        let sticky = self.shared.sticky.load(Ordering::SeqCst);
        let e = self.shared.async_err.swap(0, Ordering::SeqCst);
        match (sticky, e) {
            (0, 0) => None,
            (0, e) => Some(e),
            (s, _) => Some(s),
        }
    }

    fn sticky_error(&self) -> Option<u32> {
        Some(self.shared.sticky.load(Ordering::SeqCst)).filter(|&c| c != 0)
    }

    fn peek_printf(&self) -> Vec<u8> {
        // The checkpoint synchronized the device: the driver has printed its kernels' output.
        self.shared.printf.get().map(|c| c.peek()).unwrap_or_default()
    }

    fn take_printf(&self, max: usize) -> Vec<u8> {
        self.shared.printf.get().map(|c| c.take(max)).unwrap_or_default()
    }

    fn unsaved_state(&self) -> Vec<String> {
        let t = self.tables.lock().unwrap();
        if t.heap_launches.is_empty() {
            return Vec::new();
        }
        let names: Vec<&str> = t.heap_launches.iter().map(String::as_str).collect();
        vec![format!(
            "device heap: kernels that call device-side malloc/new ran ({}); the blocks they still hold are on the driver's heap, which the cuda backend cannot save, so a restart would lose them",
            names.join(", ")
        )]
    }

    fn saved_regions(&self) -> Result<Vec<SavedRegion>> {
        self.learn_globals();
        Ok(self.regions())
    }

    fn next_handle(&self) -> u64 {
        self.next_handle.load(Ordering::SeqCst)
    }

    fn set_next_handle(&self, h: u64) -> Result<()> {
        self.next_handle.store(h, Ordering::SeqCst);
        Ok(())
    }

    fn snapshot(&self, sink: SaveSink<'_>) -> Result<Vec<SavedRegion>> {
        self.bind()?;
        self.sync_result(driver::ctx_synchronize())?;
        self.learn_globals();
        let regions = self.regions();
        let stream = driver::stream_create(true, 0).map_err(|c| self.err(Op::Other, c))?;
        self.drain_out(&stream, &regions, sink).map(|_| regions)
    }

    fn restore(&self, regions: &[SavedRegion], source: RestoreSource<'_>) -> Result<Vec<Allocation>> {
        self.bind()?;
        let mut out = Vec::new();
        let mut targets = Vec::new();
        for r in regions {
            match &r.symbol {
                Some((module, name)) if r.kind == AllocKind::Managed => {
                    // A `__managed__` variable: its managed allocation at its address, tied
                    // to the driver's variable again.
                    let dev = {
                        let t = self.tables.lock().unwrap();
                        let m = t.modules.get(&module.0).ok_or_else(handle_err)?;
                        let (dev, len) = driver::module_global(&m.module, name).map_err(|c| self.err(Op::SymbolLookup, c))?;
                        if len != r.len {
                            tracing::error!(symbol = %name, "module variable changed size ({} → {len})", r.len);
                            return Err(BackendError::Cuda(cuda::ERROR_INVALID_SYMBOL));
                        }
                        dev
                    };
                    let a = self.place(r.len, AllocKind::Managed, Some(r.addr))?;
                    self.mirror(module.0, name, dev, a.addr, r.len)?;
                    targets.push(a.addr);
                    out.push(a);
                }
                Some((module, name)) => {
                    let (addr, len) = self.symbol(*module, name)?;
                    if len != r.len {
                        tracing::error!(symbol = %name, "module variable changed size ({} → {len})", r.len);
                        return Err(BackendError::Cuda(cuda::ERROR_INVALID_SYMBOL));
                    }
                    if addr != r.addr {
                        tracing::error!(
                            symbol = %name,
                            "module variable was at {:#x}, the driver put it at {addr:#x}: its address cannot be reproduced",
                            r.addr
                        );
                        return Err(BackendError::Cuda(cuda::ERROR_INVALID_SYMBOL));
                    }
                    out.push(Allocation { addr, memfd: None });
                    targets.push(addr);
                }
                None => {
                    let a = self.place(r.len, r.kind, Some(r.addr))?;
                    targets.push(a.addr);
                    out.push(a);
                }
            }
        }
        let stream = driver::stream_create(true, 0).map_err(|c| self.err(Op::Other, c))?;
        self.fill_in(&stream, regions, &targets, source).map(|_| out)
    }
}

/// Whether a PTX module declares variables in global or constant memory at module scope
/// (a second load of the module would have copies of its own).
fn declares_variables(ptx: &str) -> bool {
    ptx.lines().map(str::trim_start).any(|l| {
        let l = l.strip_prefix(".visible ").or_else(|| l.strip_prefix(".extern ")).or_else(|| l.strip_prefix(".weak ")).unwrap_or(l);
        l.starts_with(".global ") || l.starts_with(".const ")
    })
}

impl Cuda {
    /// Run the rest of a grid a checkpoint stopped part-way (blocks `first..` of `dims.grid`;
    /// the blocks before it ran, their effects are in the restored memory): the kernel in its
    /// preemptible form (`crum_ptx::preempt`: persistent blocks take logical block indices
    /// from a control block, starting at `first`), loaded from the module's PTX on first
    /// need. Refused, naming why, for a module with variables (a second load would not share
    /// them), without PTX, or a kernel the transformation refuses.
    fn launch_rest(&self, stream: StreamId, func: FuncId, dims: LaunchDims, params: Vec<u8>, first: u64) -> Result<()> {
        use crum_ptx::preempt::{params_with_ctl, physical_config, ControlBlock, CTL_BYTES};
        self.bind()?;
        let refuse = |name: &str, why: String| {
            BackendError::Other(format!(
                "kernel `{name}` was stopped part-way (from block {first}) and the cuda backend cannot run the rest of its grid: {why} (restart on the emulated device)"
            ))
        };
        let (f, layout, param_bytes, name) = {
            let mut t = self.tables.lock().unwrap();
            let r = t.funcs.get(&func.0).ok_or(BackendError::Cuda(cuda::ERROR_INVALID_DEVICE_FUNCTION))?;
            let (module, name, mut layout, param_bytes) = (r.module, r.name.clone(), r.layout.clone(), r.param_bytes);
            let m = t.modules.get_mut(&module).ok_or_else(handle_err)?;
            if m.preempt.is_none() {
                let ptx = m.ptx.get_or_init(|| ptx_text(m.module.image())).clone().ok_or_else(|| refuse(&name, "its module ships no PTX".into()))?;
                if declares_variables(&ptx) {
                    return Err(refuse(&name, "its module has variables, which a second load of the module would not share".into()));
                }
                let pm = crum_ptx::preempt::transform(&ptx).map_err(|e| refuse(&name, format!("its PTX cannot be read ({e})")))?;
                let loaded = driver::module_load(pm.ptx.as_bytes())
                    .map_err(|c| refuse(&name, format!("its preemptible form does not load ({})", driver::error_name(c))))?;
                m.preempt = Some((loaded, pm));
            }
            let (loaded, pm) = m.preempt.as_ref().expect("set above");
            match pm.outcome(&name).map(|o| &o.result) {
                Some(Ok(k)) if k.fits(dims.block) => {}
                Some(Ok(_)) => return Err(refuse(&name, format!("its preemptible form needs whole warps per row, and the block is {:?}", dims.block))),
                Some(Err(e)) => return Err(refuse(&name, e.to_string())),
                None => return Err(refuse(&name, "the preemptible module lacks it".into())),
            }
            let f = driver::module_function(loaded, &name).map_err(|c| self.err(Op::FunctionLookup, c))?;
            layout.push((param_bytes.next_multiple_of(8), 8));
            (f, layout, param_bytes, name)
        };
        let first32 = u32::try_from(first).map_err(|_| refuse(&name, "the block index exceeds 32 bits".into()))?;
        if params.len() < param_bytes as usize {
            return Err(bad());
        }
        // The control block and its flag word (never raised: this run goes to the end) in
        // page-locked host memory, which the device reaches at the same address.
        let mut ctl = HostBuf::new(CTL_BYTES + 8).map_err(|c| self.err(Op::Other, c))?;
        let cb = ControlBlock::new(dims.grid, first32, ctl.addr() + CTL_BYTES as u64).map_err(|e| refuse(&name, e.to_string()))?;
        let bytes = ctl.as_mut_slice();
        bytes.fill(0);
        bytes[..CTL_BYTES].copy_from_slice(&cb.encode());
        let with_ctl = params_with_ctl(&params[..param_bytes as usize], ctl.addr());
        let mut packed = params::pointers(&with_ctl, &layout).map_err(|_| bad())?;
        self.tables.lock().unwrap().control_blocks.push(ctl);
        let logical = crum_ptx::LaunchConfig { grid: dims.grid, block: dims.block, dynamic_shared_bytes: dims.shared, cooperative: false };
        let threads = dims.block.iter().product::<u32>().max(1);
        let per_sm = (self.props.max_threads_per_sm.max(1) as u32 / threads).clamp(1, self.props.max_blocks_per_sm.max(1) as u32);
        let phys = physical_config(&logical, per_sm * self.props.multiprocessors.max(1) as u32);
        let pdims = LaunchDims { grid: phys.grid, block: dims.block, shared: dims.shared, cooperative: false };
        tracing::info!(kernel = %name, first, physical = phys.grid[0], "the rest of a grid stopped part-way runs in its preemptible form");
        let op = crum_wire::ckpt::QueuedOp::Launch {
            func: func.0,
            grid: dims.grid,
            block: dims.block,
            shared: dims.shared,
            cooperative: dims.cooperative,
            params,
            first_block: first,
            contexts: Vec::new(),
        };
        let feed: queue::Feed = Box::new(move |c: &Core, s: &driver::Stream| c.launch_now(f, u64::MAX, &mut packed, false, pdims, s));
        self.enqueue(stream.0, queue::Work { op, staged: None, blocking: false, waits: Vec::new(), feed }).map(|_| ())
    }
}

impl Drop for Cuda {
    /// Give everything back to the driver, so that another instance (a restart in the same
    /// process, as in the tests) can map the same addresses.
    fn drop(&mut self) {
        if driver::ctx_set_current(&self.ctx).is_err() {
            return;
        }
        CURRENT.with(|c| c.set(self.ctx.raw()));
        // The work the proxy still holds reaches the device first, then the feeders end.
        self.release();
        self.drain_all();
        self.shutdown();
        let _ = driver::ctx_synchronize();
        let mut t = self.tables.lock().unwrap();
        t.streams.clear();
        t.io.clear();
        t.events.clear();
        for (addr, a) in std::mem::take(&mut t.allocs) {
            match a.region {
                Region::Managed { .. } | Region::Pinned { .. } => {
                    let _ = driver::host_unregister(addr);
                    pinned_unmap(addr, a.len.next_multiple_of(4096));
                }
                Region::Device => {}
            }
        }
        for (_, m) in std::mem::take(&mut t.mappings) {
            let _ = driver::unmap(m);
        }
        if let Some(g) = self.guard.lock().unwrap().take() {
            let _ = driver::unmap(g);
        }
        let _ = driver::release_reservation(self.reserved.0, self.reserved.1);
        if let Some((a, l)) = self.vmm_reserved {
            let _ = driver::release_reservation(a, l);
        }
        let (addr, len) = self.host_reserved;
        if len > 0 {
            // SAFETY: the pinned half was reserved by `host_reserve` in `with_window`; every
            // pinned mapping in it was unmapped above.
            unsafe { libc::munmap(addr as *mut libc::c_void, len as usize) };
        }
        for (_, m) in t.modules.drain() {
            let _ = driver::module_unload(m.module);
        }
    }
}

/// One staging copy in flight during a snapshot or restore.
struct InFlight {
    buf: HostBuf,
    done: driver::Event,
    region: usize,
    off: u64,
    len: u64,
}

impl Cuda {
    /// Ties the driver's `__managed__` variable `name` of `module` (at `dev`) to the managed
    /// allocation `host` the program sees ([`Mirror`]).
    fn mirror(&self, module: u64, name: &str, dev: u64, host: u64, len: u64) -> Result<()> {
        let buf = || driver::HostBuf::new(len as usize).map_err(|c| self.err(Op::Other, c));
        let (before, after) = (buf()?, buf()?);
        let (before_addr, after_addr) = (before.addr(), after.addr());
        let (before, after) = (Arc::new(Mutex::new(before)), Arc::new(Mutex::new(after)));
        let mut t = self.tables.lock().unwrap();
        let m = t.modules.get_mut(&module).ok_or_else(handle_err)?;
        m.mirrors.push(Mirror { name: name.to_string(), dev, host, len, before, after, before_addr, after_addr });
        t.managed_vars.insert(host, (module, name.to_string()));
        Ok(())
    }

    /// Looks up every module variable of every module's PTX, so that a checkpoint saves them
    /// all: the driver places them and cannot list them, and until now only those the program
    /// named through the runtime were known (a kernel's output in a variable the program had
    /// not touched yet was lost at a restart). `__managed__` variables are mirrored instead.
    fn learn_globals(&self) {
        let mut t = self.tables.lock().unwrap();
        let mut found = Vec::new();
        for (&id, m) in t.modules.iter_mut().filter(|(_, m)| !m.globals_known) {
            m.globals_known = true;
            let images = crum_ptx::fatbin::program_ptx(m.module.image()).unwrap_or_default();
            let texts: Vec<&str> = images.iter().map(|i| i.ptx.as_str()).collect();
            let parsed = if texts.is_empty() { None } else { crum_ptx::Module::link(&texts).ok() };
            let Some(ptx) = parsed else {
                tracing::warn!(
                    module = id,
                    "no readable PTX in the module: only the variables the program named are saved at a checkpoint"
                );
                continue;
            };
            for g in ptx.globals() {
                if m.mirrors.iter().any(|x| x.name == g.name) {
                    continue;
                }
                match driver::module_global(&m.module, &g.name) {
                    Ok((addr, len)) => found.push((addr, (len, id, g.name.clone()))),
                    Err(c) => tracing::debug!(symbol = %g.name, code = c, "module variable of the PTX not in the loaded module"),
                }
            }
        }
        t.globals.extend(found);
    }

    /// Every region a checkpoint must save, in address order.
    fn regions(&self) -> Vec<SavedRegion> {
        let t = self.tables.lock().unwrap();
        let mut v: Vec<SavedRegion> = t
            .allocs
            .iter()
            .map(|(&addr, a)| SavedRegion {
                addr,
                len: a.len,
                kind: match a.region {
                    Region::Device => AllocKind::Device,
                    Region::Managed { .. } => AllocKind::Managed,
                    Region::Pinned { .. } => AllocKind::PinnedHost,
                },
                symbol: t.managed_vars.get(&addr).map(|(m, name)| (ModuleId(*m), name.clone())),
            })
            .collect();
        v.extend(t.globals.iter().map(|(&addr, (len, m, name))| SavedRegion { addr, len: *len, kind: AllocKind::Device, symbol: Some((ModuleId(*m), name.clone())) }));
        v.sort_by_key(|r| r.addr);
        v
    }

    /// Copy every region out through the staging buffers, `STAGES` copies in flight.
    fn drain_out(&self, s: &driver::Stream, regions: &[SavedRegion], sink: SaveSink<'_>) -> Result<()> {
        let mut queue = VecDeque::new();
        let r = self.drain_out_pieces(s, regions, sink, &mut queue);
        self.settle(s, r.is_err(), queue);
        r
    }

    fn drain_out_pieces(&self, s: &driver::Stream, regions: &[SavedRegion], sink: SaveSink<'_>, queue: &mut VecDeque<InFlight>) -> Result<()> {
        let io = |e: std::io::Error| {
            tracing::error!("device snapshot: {e}");
            BackendError::Cuda(cuda::ERROR_UNKNOWN)
        };
        let finish = |f: InFlight, sink: SaveSink<'_>| -> Result<()> {
            let synced = driver::event_sync(&f.done).map_err(|c| self.err(Op::Other, c));
            let r = synced.and_then(|_| sink(&regions[f.region], f.off, &f.buf.as_slice()[..f.len as usize]).map_err(io));
            self.shared.staging.give(f.buf);
            r
        };
        for (i, r) in regions.iter().enumerate() {
            if host_backed(r.kind) {
                // Host memory mapped here: hand it over directly.
                // SAFETY: a live pinned allocation mapped here; the device is drained and the
                // application is quiesced during a snapshot.
                let bytes = unsafe { stage_slice(r.addr, r.len) };
                sink(r, 0, bytes).map_err(io)?;
                continue;
            }
            let mut off = 0;
            while off < r.len {
                if queue.len() >= STAGES {
                    finish(queue.pop_front().expect("non-empty"), sink)?;
                }
                let len = STAGE.min(r.len - off);
                let (buf, done) = self.piece_slot()?;
                if let Err(c) = driver::copy_2d(buf.addr(), len, r.addr + off, len, len, 1, s) {
                    self.shared.staging.give(buf);
                    return Err(self.err(Op::Other, c));
                }
                let recorded = driver::event_record(&done, s);
                queue.push_back(InFlight { buf, done, region: i, off, len });
                recorded.map_err(|c| self.err(Op::Other, c))?;
                off += len;
            }
        }
        while let Some(f) = queue.pop_front() {
            finish(f, sink)?;
        }
        Ok(())
    }

    /// Upload every region from `source` through the staging buffers, copies in flight.
    fn fill_in(&self, s: &driver::Stream, regions: &[SavedRegion], targets: &[u64], source: RestoreSource<'_>) -> Result<()> {
        let mut queue = VecDeque::new();
        let r = self.fill_in_pieces(s, regions, targets, source, &mut queue);
        self.settle(s, r.is_err(), queue);
        r
    }

    fn fill_in_pieces(&self, s: &driver::Stream, regions: &[SavedRegion], targets: &[u64], source: RestoreSource<'_>, queue: &mut VecDeque<InFlight>) -> Result<()> {
        let io = |e: std::io::Error| {
            tracing::error!("device restore: {e}");
            BackendError::Cuda(cuda::ERROR_UNKNOWN)
        };
        let retire = |f: InFlight| -> Result<()> {
            let r = driver::event_sync(&f.done).map_err(|c| self.err(Op::Other, c));
            self.shared.staging.give(f.buf);
            r
        };
        for (i, r) in regions.iter().enumerate() {
            let dst = targets[i];
            if host_backed(r.kind) {
                // SAFETY: the pinned allocation was just mapped here by `place`, and nothing
                // uses it before the restore returns.
                let bytes = unsafe { stage_slice(dst, r.len) };
                source(r, 0, bytes).map_err(io)?;
                continue;
            }
            let mut off = 0;
            while off < r.len {
                if queue.len() >= STAGES {
                    retire(queue.pop_front().expect("non-empty"))?;
                }
                let len = STAGE.min(r.len - off);
                let (mut buf, done) = self.piece_slot()?;
                let filled = source(r, off, &mut buf.as_mut_slice()[..len as usize]).map_err(io);
                let queued = filled.and_then(|_| driver::copy_2d(dst + off, len, buf.addr(), len, len, 1, s).map_err(|c| self.err(Op::Other, c)));
                if let Err(e) = queued {
                    self.shared.staging.give(buf);
                    return Err(e);
                }
                let recorded = driver::event_record(&done, s);
                queue.push_back(InFlight { buf, done, region: i, off, len });
                recorded.map_err(|c| self.err(Op::Other, c))?;
                off += len;
            }
        }
        while let Some(f) = queue.pop_front() {
            retire(f)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptx_text_is_found_in_plain_ptx_and_uncompressed_fatbins() {
        let mut fatbin = vec![0x50u8, 0xed, 0x55, 0xba, 1, 0, 0x10, 0];
        fatbin.extend_from_slice(&[0u8; 40]);
        fatbin.extend_from_slice(b".version 8.0\n.target sm_80\n.entry k() { ret; }\0\0\0");
        let t = ptx_text(&fatbin).unwrap();
        assert!(t.starts_with(".version 8.0") && t.ends_with("ret; }"));
        assert_eq!(ptx_text(b"\x50\xed\x55\xba compressed bytes"), None);
    }

    /// A fat binary with one plain PTX entry, laid out as nvcc does (`--no-compress`).
    fn plain_ptx_fatbin(ptx: &str) -> Vec<u8> {
        let mut payload = ptx.as_bytes().to_vec();
        payload.push(0);
        payload.resize(payload.len().div_ceil(8) * 8, 0);
        let mut e = vec![0u8; 80];
        e[0..2].copy_from_slice(&1u16.to_le_bytes());
        e[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
        e[4..8].copy_from_slice(&80u32.to_le_bytes());
        e[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        e[28..32].copy_from_slice(&80u32.to_le_bytes());
        e[40..48].copy_from_slice(&0x11u64.to_le_bytes());
        e.extend_from_slice(&payload);
        let mut f = vec![0x50u8, 0xed, 0x55, 0xba, 1, 0, 0x10, 0];
        f.extend_from_slice(&(e.len() as u64).to_le_bytes());
        f.extend_from_slice(&e);
        f
    }

    #[test]
    fn ptx_text_of_an_rdc_image_holds_every_objects_kernels() {
        // Device-link fat binary (no entries), then two objects' relocatable fat binaries.
        let mut image = vec![0x50u8, 0xed, 0x55, 0xba, 1, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        image.extend(plain_ptx_fatbin(".version 8.0\n.target sm_80\n.visible .entry ka(.param .u64 p) { ret; }"));
        image.extend(plain_ptx_fatbin(".version 8.0\n.target sm_80\n.visible .entry kb(.param .u32 n) { ret; }"));
        let t = ptx_text(&image).unwrap();
        assert_eq!(params::layout_from_ptx(&t, "ka").unwrap().len(), 1);
        assert_eq!(params::layout_from_ptx(&t, "kb").unwrap().len(), 1);
    }

    #[test]
    fn nvcc_fat_binary_passes_the_image_check() {
        assert_eq!(check_image(include_bytes!("../../tests/data/kernels.fatbin")), Ok(()));
        assert_eq!(check_image(b".version 8.0\n.target sm_80\n.entry k() { ret; }\0"), Ok(()));
    }

    #[test]
    fn damaged_images_are_refused_before_the_driver_sees_them() {
        let good = include_bytes!("../../tests/data/kernels.fatbin");
        // Truncated: the header's size no longer fits.
        assert!(check_image(&good[..good.len() - 1]).is_err());
        // An entry whose payload size runs past the end.
        let mut bad = good.to_vec();
        bad[16 + 8..16 + 16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(check_image(&bad).is_err());
        assert!(check_image(b"\x50\xed\x55\xba not a real fat binary at all").is_err());
        assert!(check_image(b"\x7fELF\x01short").is_err());
        assert!(check_image(b"random bytes").is_err());
        assert!(check_image(&[]).is_err());
    }

    #[test]
    fn managed_declarations_are_told_from_plain_variables() {
        let ptx = ".visible .global .attribute(.managed) .align 4 .u32 hits = 3;\n.visible .global .align 4 .u32 plain;\n.global .attribute(.managed) .align 8 .b8 arr[64];";
        assert!(declares_managed(ptx, "hits"));
        assert!(declares_managed(ptx, "arr"));
        assert!(!declares_managed(ptx, "plain"));
        assert!(!declares_managed(ptx, "hit"));
    }

    #[test]
    fn only_attributes_with_matching_numbers_are_settable() {
        assert_eq!(settable_attr(8), Some(FA::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES));
        assert_eq!(settable_attr(0), None);
        assert_eq!(settable_attr(1000), None);
    }

    #[test]
    fn probe_without_driver_library_names_libcuda_and_does_not_panic() {
        if driver::library_present() {
            eprintln!("skipped: a CUDA driver library is installed here");
            return;
        }
        assert_eq!(probe().err(), Some(ProbeError::NoLibrary));
        assert!(ProbeError::NoLibrary.to_string().contains("libcuda.so.1"));
    }
}
