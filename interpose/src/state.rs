//! What the interposer remembers about the application's CUDA objects: registered modules,
//! kernels and module variables (keyed by their host-side addresses), the allocations it was
//! handed (for `cudaMemcpyDefault`, `cudaPointerGetAttributes` and early argument checks),
//! per-thread launch configurations and default streams, and cached device properties.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use crum_wire::{cuda, Body, DeviceProps, FuncInfo, Request};

use crate::client::call;
use crate::errors::CudaResult;

pub struct FuncRec {
    pub module: usize,
    pub name: String,
    pub info: Mutex<Option<FuncInfo>>,
}

pub struct VarRec {
    pub module: usize,
    pub name: String,
    pub size: u64,
    /// Resolved device address.
    pub addr: OnceLock<u64>,
}

/// Memory kinds as `cudaPointerGetAttributes` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemKind {
    Device,
    Managed,
    /// cudaMallocHost / cudaHostAlloc (shared with the proxy).
    Pinned,
    /// cudaHostRegister'ed application memory.
    Registered,
}

#[derive(Debug, Clone, Copy)]
pub struct AllocRec {
    pub len: u64,
    pub kind: MemKind,
    pub flags: u32,
    /// `CU_POINTER_ATTRIBUTE_BUFFER_ID`: unique in the process, never reused (a counter in the
    /// program's memory, so a restart goes on counting where the checkpoint was).
    pub buffer_id: u64,
}

/// The last buffer id handed out.
static BUFFER_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[derive(Default)]
pub struct State {
    pub funcs: RwLock<HashMap<usize, Arc<FuncRec>>>,
    pub vars: RwLock<HashMap<usize, Arc<VarRec>>>,
    pub allocs: RwLock<BTreeMap<u64, AllocRec>>,
    /// stream handle → (flags, priority)
    pub streams: Mutex<HashMap<u64, (u32, i32)>>,
    pub props: OnceLock<DeviceProps>,
    pub limits: Mutex<HashMap<u32, u64>>,
    pub device_flags: Mutex<u32>,
}

pub fn state() -> &'static State {
    static S: OnceLock<State> = OnceLock::new();
    S.get_or_init(State::default)
}

/// A pending `<<<...>>>` configuration.
#[derive(Clone, Copy)]
pub struct CallConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared: usize,
    pub stream: u64,
}

thread_local! {
    pub static CONFIGS: RefCell<Vec<CallConfig>> = const { RefCell::new(Vec::new()) };
    static PER_THREAD_STREAM: Cell<u64> = const { Cell::new(0) };
    /// Inside a driver `_ptsz`/`_ptds` entry point ([`per_thread`]).
    static PER_THREAD_CALL: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` (a driver entry point) as its `_ptsz`/`_ptds` variant: stream 0 is this thread's
/// default stream for every stream `f` resolves, as [`resolve_stream`] does for the runtime's
/// `_ptsz` entry points.
pub fn per_thread<R>(f: impl FnOnce() -> R) -> R {
    with_per_thread(true, f)
}

/// Runs `f` (the program's own code, called back from inside an entry point) with stream 0
/// the legacy stream again, whatever entry point called it.
pub fn outside_per_thread<R>(f: impl FnOnce() -> R) -> R {
    with_per_thread(false, f)
}

fn in_per_thread_call() -> bool {
    PER_THREAD_CALL.try_with(|c| c.get()).unwrap_or(false)
}

fn with_per_thread<R>(on: bool, f: impl FnOnce() -> R) -> R {
    let was = PER_THREAD_CALL.try_with(|c| c.replace(on)).unwrap_or(false);
    let r = f();
    let _ = PER_THREAD_CALL.try_with(|c| c.set(was));
    r
}

/// Whether the program registered kernels or module variables (it is a CUDA program even if
/// it has not called the runtime yet). Never blocks: a held lock counts as "yes".
pub fn has_registrations() -> bool {
    let s = state();
    match (s.funcs.try_read(), s.vars.try_read()) {
        (Ok(f), Ok(v)) => !f.is_empty() || !v.is_empty(),
        _ => true,
    }
}

/// Device properties (fetched once).
pub fn props() -> CudaResult<&'static DeviceProps> {
    if let Some(p) = state().props.get() {
        return Ok(p);
    }
    match call(&Request::DeviceProps)? {
        Body::Props(p) => Ok(state().props.get_or_init(|| p)),
        _ => Err(cuda::ERROR_UNKNOWN),
    }
}

/// `cudaStreamLegacy`.
pub const STREAM_LEGACY: u64 = 1;
/// `cudaStreamPerThread`.
pub const STREAM_PER_THREAD: u64 = 2;

/// Map an application stream to the proxy's: 0 is the legacy stream (or, for `_ptsz` entry
/// points, this thread's default stream), `cudaStreamPerThread` is this thread's default
/// stream (created on first use: a blocking stream, which synchronizes with the legacy stream
/// exactly as CUDA's per-thread default stream does).
pub fn resolve_stream(s: u64, ptsz: bool) -> CudaResult<u64> {
    match s {
        0 if ptsz || in_per_thread_call() => per_thread_stream(),
        0 | STREAM_LEGACY => Ok(0),
        STREAM_PER_THREAD => per_thread_stream(),
        h => Ok(h),
    }
}

fn per_thread_stream() -> CudaResult<u64> {
    let cur = PER_THREAD_STREAM.try_with(|c| c.get()).unwrap_or(0);
    if cur != 0 {
        return Ok(cur);
    }
    let Body::Value(h) = call(&Request::StreamCreate {
        flags: 0,
        priority: 0,
    })?
    else {
        return Err(cuda::ERROR_UNKNOWN);
    };
    let _ = PER_THREAD_STREAM.try_with(|c| c.set(h));
    Ok(h)
}

/// The allocation containing `addr`: (base, record).
pub fn find_alloc(addr: u64) -> Option<(u64, AllocRec)> {
    let g = state().allocs.read().unwrap_or_else(|p| p.into_inner());
    let (&b, r) = g.range(..=addr).next_back()?;
    (addr < b + r.len.max(1)).then_some((b, *r))
}

pub fn add_alloc(addr: u64, len: u64, kind: MemKind, flags: u32) {
    state()
        .allocs
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .insert(addr, AllocRec { len, kind, flags, buffer_id: BUFFER_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1 });
}

pub fn remove_alloc(addr: u64) -> Option<AllocRec> {
    state()
        .allocs
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&addr)
}

/// Whether the proxy can reach `[addr, addr+len)` directly: device, managed or pinned memory
/// (so async copies from or to it can be queued without waiting).
pub fn is_device_visible(addr: u64, len: u64) -> bool {
    find_alloc(addr).is_some_and(|(b, r)| addr.saturating_add(len) <= b + r.len.max(1))
}

/// Whether `addr` is device memory proper (not host-accessible): a device allocation, or any
/// address in the device window that is not a managed/pinned mapping (module variables and
/// stale pointers live there too; the window is PROT_NONE in this process).
pub fn is_device(addr: u64) -> bool {
    match find_alloc(addr) {
        Some((_, r)) => r.kind == MemKind::Device,
        None => (crum_wire::DEVICE_VA_BASE..crum_wire::DEVICE_VA_BASE + crum_wire::DEVICE_VA_SIZE)
            .contains(&addr),
    }
}

/// The kernel registered for host stub `host_fun`, with its attributes (fetched on first use).
pub fn function(host_fun: usize) -> CudaResult<(Arc<FuncRec>, FuncInfo)> {
    let rec = state()
        .funcs
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&host_fun)
        .cloned()
        .ok_or(cuda::ERROR_INVALID_DEVICE_FUNCTION)?;
    let mut g = rec.info.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(i) = &*g {
        return Ok((rec.clone(), i.clone()));
    }
    let module = module_id(rec.module)?;
    let Body::Func(info) = call(&Request::GetFunction {
        module,
        name: rec.name.clone(),
    })?
    else {
        return Err(cuda::ERROR_UNKNOWN);
    };
    *g = Some(info.clone());
    drop(g);
    Ok((rec, info))
}

pub fn module_id(idx: usize) -> CudaResult<u64> {
    crate::api::launch::load(idx)
}

/// Device address and size of a module variable given its host shadow address.
pub fn symbol(host_var: usize) -> CudaResult<(u64, u64)> {
    let rec = state()
        .vars
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&host_var)
        .cloned()
        .ok_or(cuda::ERROR_INVALID_SYMBOL)?;
    if let Some(&a) = rec.addr.get() {
        return Ok((a, rec.size));
    }
    let module = module_id(rec.module)?;
    let Body::Pair(addr, size) = call(&Request::GetSymbol {
        module,
        name: rec.name.clone(),
    })?
    else {
        return Err(cuda::ERROR_UNKNOWN);
    };
    record_symbol(addr, size);
    let _ = rec.addr.set(addr);
    Ok((addr, size))
}

/// Module variables live in device memory the program never allocated itself: record one
/// the proxy named so copies and pointer attributes know what it is (a GPU driver places
/// them outside crum's device window, where an address would otherwise be taken for host
/// memory: a `cuMemcpyHtoD` to a `cuModuleGetGlobal` address failed on an H200). Whether it
/// was recorded now.
pub fn record_symbol(addr: u64, size: u64) -> bool {
    if find_alloc(addr).is_some() {
        return false;
    }
    add_alloc(addr, size, MemKind::Device, 0);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_per_thread_call_ends_with_its_scope_and_a_callback_inside_it_is_outside() {
        assert!(!in_per_thread_call());
        per_thread(|| {
            assert!(in_per_thread_call());
            outside_per_thread(|| assert!(!in_per_thread_call()));
            assert!(in_per_thread_call());
        });
        assert!(!in_per_thread_call());
        assert_eq!(resolve_stream(STREAM_LEGACY, false), Ok(0), "the legacy stream stays the legacy stream");
    }
}
