//! The device backend trait, its capability query and the probing factory.
//!
//! The server loop validates and decodes requests and calls one [`Backend`]; a backend owns
//! the device and its object tables. Every method has a default that returns
//! [`BackendError::Unsupported`], so a backend states what it does rather than silently
//! succeeding at what it does not. Work that CUDA runs on a stream is *enqueued* by these
//! methods (they return once the work is ordered); [`Backend::stream_sync`] and friends wait.

use std::sync::Arc;

use crum_wire::{cuda, AllocKind, DeviceProps, FuncInfo, StreamAttr, TexDesc};

use crate::hostmem::AppMemory;

/// A stream handle as the application sees it (0 = the legacy default stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId(pub u64);
/// An event handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(pub u64);
/// A loaded module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModuleId(pub u64);
/// A kernel of a loaded module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FuncId(pub u64);

/// The legacy default stream.
pub const LEGACY_STREAM: StreamId = StreamId(0);

/// Backend failures; each maps to one `cudaError_t` ([`BackendError::code`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    #[error("{op} is not supported by the {backend} backend")]
    Unsupported {
        backend: &'static str,
        op: &'static str,
    },
    #[error("{}", cuda::description(*.0))]
    Cuda(u32),
    /// A failure that is not a CUDA error code (a checkpoint or restart step).
    #[error("{0}")]
    Other(String),
}

impl BackendError {
    /// The `cudaError_t` this error is reported as.
    pub fn code(&self) -> u32 {
        match self {
            BackendError::Unsupported { .. } => cuda::ERROR_NOT_SUPPORTED,
            BackendError::Cuda(c) => *c,
            BackendError::Other(_) => cuda::ERROR_UNKNOWN,
        }
    }
}

pub type Result<T> = std::result::Result<T, BackendError>;

fn unsupported<T>(backend: &'static str, op: &'static str) -> Result<T> {
    Err(BackendError::Unsupported { backend, op })
}

/// What a backend can do (beyond the basics every backend implements).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    pub name: &'static str,
    /// Kernels can access managed and pinned host memory directly (shared mappings).
    pub shared_host_mappings: bool,
    pub cooperative_launch: bool,
    pub textures: bool,
    /// Device allocations can be re-created at chosen addresses (restart).
    pub fixed_addresses: bool,
    /// Device memory is private memory of the proxy at its device addresses, so a fork of
    /// the proxy is a copy-on-write snapshot of it (checkpoints without copying it in the
    /// pause).
    pub fork_snapshot: bool,
    /// A checkpoint can hold the streams at job boundaries and save the work not started
    /// (instead of waiting for it), and synchronizing calls wait for points a restart can
    /// name ([`Backend::sync_points`]).
    pub queue_cut: bool,
}

/// What a synchronizing call waits for.
#[derive(Debug, Clone, Copy)]
pub enum SyncOn {
    Device,
    Stream(StreamId),
    Event(EventId),
}

/// Launch geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchDims {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared: u32,
    pub cooperative: bool,
}

/// One side of a copy.
#[derive(Debug, Clone)]
pub enum Endpoint {
    /// An address the backend owns (device, managed or pinned memory) or, failing that, an
    /// address in the application (moved by cross-memory attach).
    Addr(u64),
    /// Bytes already taken from the application (async copies from pageable memory).
    Staged(Arc<Vec<u8>>),
}

/// A (possibly 2-D) copy: `height` rows of `width` bytes.
#[derive(Debug, Clone)]
pub struct CopyOp {
    pub dst: u64,
    pub dpitch: u64,
    pub src: Endpoint,
    pub spitch: u64,
    pub width: u64,
    pub height: u64,
}

/// A new allocation; `memfd` is the descriptor (in this process) of the shared mapping behind
/// managed and pinned memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    pub addr: u64,
    pub memfd: Option<i32>,
}

/// A host function the application must run when a stream reaches it; calling it blocks the
/// stream until the application reports completion.
pub type HostCall = Box<dyn FnOnce() + Send>;

/// One piece of device state a checkpoint saves: an allocation, or a module variable (which
/// a restart finds again by name, since the driver chooses its address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedRegion {
    pub addr: u64,
    pub len: u64,
    pub kind: AllocKind,
    /// For a module variable: its module (as re-created before the restore) and name.
    pub symbol: Option<(ModuleId, String)>,
}

/// Receives saved device memory: `(region, offset in it, bytes)`, in order.
pub type SaveSink<'a> = &'a mut dyn FnMut(&SavedRegion, u64, &[u8]) -> std::io::Result<()>;
/// Supplies device memory to restore: fill `(region, offset, buffer)` completely.
pub type RestoreSource<'a> = &'a mut dyn FnMut(&SavedRegion, u64, &mut [u8]) -> std::io::Result<()>;

/// One device behind the proxy.
pub trait Backend: Send + Sync {
    fn name(&self) -> &'static str;
    fn capabilities(&self) -> Capabilities;
    fn device_props(&self) -> DeviceProps;
    /// The application whose memory copies read and write (set once, at the first Hello).
    fn attach_app(&self, app: Arc<AppMemory>);

    fn mem_info(&self) -> Result<(u64, u64)> {
        unsupported(self.name(), "cudaMemGetInfo")
    }
    fn malloc(&self, size: u64, kind: AllocKind) -> Result<Allocation> {
        let _ = (size, kind);
        unsupported(self.name(), "cudaMalloc")
    }
    /// Device memory exactly at `addr`, inside the VMM range (`cuMemMap`).
    fn map_at(&self, _addr: u64, _size: u64) -> Result<Allocation> {
        unsupported(self.name(), "cuMemMap")
    }
    fn free(&self, addr: u64) -> Result<()> {
        let _ = addr;
        unsupported(self.name(), "cudaFree")
    }
    /// Whether `[addr, addr+len)` lies in memory the backend can reach directly (device,
    /// managed, pinned); None when it is not the backend's at all.
    fn owns(&self, addr: u64, len: u64) -> Option<AllocKind> {
        let _ = (addr, len);
        None
    }
    fn host_register(&self, addr: u64, len: u64) -> Result<()> {
        let _ = (addr, len);
        unsupported(self.name(), "cudaHostRegister")
    }
    fn host_unregister(&self, addr: u64) -> Result<()> {
        let _ = addr;
        unsupported(self.name(), "cudaHostUnregister")
    }
    /// Whether the application range is registered (page-locked) host memory.
    fn is_registered(&self, addr: u64, len: u64) -> bool {
        let _ = (addr, len);
        false
    }

    fn load_module(&self, image: &[u8]) -> Result<ModuleId> {
        let _ = image;
        unsupported(self.name(), "module load")
    }
    fn unload_module(&self, module: ModuleId) -> Result<()> {
        let _ = module;
        unsupported(self.name(), "module unload")
    }
    fn function(&self, module: ModuleId, name: &str) -> Result<FuncInfo> {
        let _ = (module, name);
        unsupported(self.name(), "function lookup")
    }
    /// Device address and size of a module-scope variable.
    fn symbol(&self, module: ModuleId, name: &str) -> Result<(u64, u64)> {
        let _ = (module, name);
        unsupported(self.name(), "symbol lookup")
    }
    /// Move a module variable into managed memory (`__managed__`).
    fn managed_var(&self, module: ModuleId, name: &str) -> Result<Allocation> {
        let _ = (module, name);
        unsupported(self.name(), "__managed__ variables")
    }
    fn func_set_attribute(&self, func: FuncId, attr: u32, value: i32) -> Result<()> {
        let _ = (func, attr, value);
        unsupported(self.name(), "cudaFuncSetAttribute")
    }
    fn launch(
        &self,
        stream: StreamId,
        func: FuncId,
        dims: LaunchDims,
        params: Vec<u8>,
    ) -> Result<()> {
        let _ = (stream, func, dims, params);
        unsupported(self.name(), "kernel launch")
    }
    fn memcpy(&self, stream: StreamId, op: CopyOp) -> Result<()> {
        let _ = (stream, op);
        unsupported(self.name(), "cudaMemcpy")
    }
    fn memset(
        &self,
        stream: StreamId,
        dst: u64,
        pitch: u64,
        value: u8,
        width: u64,
        height: u64,
    ) -> Result<()> {
        let _ = (stream, dst, pitch, value, width, height);
        unsupported(self.name(), "cudaMemset")
    }

    fn stream_create(&self, flags: u32, priority: i32) -> Result<StreamId> {
        let _ = (flags, priority);
        unsupported(self.name(), "cudaStreamCreate")
    }
    fn stream_destroy(&self, stream: StreamId) -> Result<()> {
        let _ = stream;
        unsupported(self.name(), "cudaStreamDestroy")
    }
    /// True when all work on the stream has completed.
    fn stream_query(&self, stream: StreamId) -> Result<bool> {
        let _ = stream;
        unsupported(self.name(), "cudaStreamQuery")
    }
    fn stream_sync(&self, stream: StreamId) -> Result<()> {
        let _ = stream;
        unsupported(self.name(), "cudaStreamSynchronize")
    }
    fn stream_wait_event(&self, stream: StreamId, event: EventId) -> Result<()> {
        let _ = (stream, event);
        unsupported(self.name(), "cudaStreamWaitEvent")
    }
    /// `cudaStreamSetAttribute`: a hint about the stream's work for the device (L2 access
    /// policy window, synchronization policy, memory synchronization domain). The request
    /// was validated against [`DeviceProps`]; results never depend on it.
    fn stream_set_attr(&self, stream: StreamId, attr: StreamAttr) -> Result<()> {
        let _ = (stream, attr);
        unsupported(self.name(), "cudaStreamSetAttribute")
    }
    /// `cudaCtxResetPersistingL2Cache`.
    fn reset_persisting_l2(&self) -> Result<()> {
        unsupported(self.name(), "cudaCtxResetPersistingL2Cache")
    }
    /// `cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, bytes)` (already clamped).
    fn set_persisting_l2_limit(&self, bytes: u64) -> Result<()> {
        let _ = bytes;
        unsupported(self.name(), "cudaLimitPersistingL2CacheSize")
    }
    /// `cudaFree` of `addr` once the device has done the work submitted before it (the caller
    /// waited for it): no device synchronization of its own.
    fn free_synced(&self, addr: u64) -> Result<()> {
        self.free(addr)
    }
    /// Module unload once the device has done the work submitted before it (as
    /// [`Self::free_synced`]).
    fn unload_module_synced(&self, module: ModuleId) -> Result<()> {
        self.unload_module(module)
    }
    /// `cudaDeviceReset` once the device has done the work submitted before it (as
    /// [`Self::free_synced`]).
    fn device_reset_synced(&self) -> Result<()> {
        self.device_reset()
    }
    /// The names of module `module`'s kernels, in the module's order.
    fn module_kernels(&self, module: ModuleId) -> Result<Vec<String>> {
        let _ = module;
        unsupported(self.name(), "cudaLibraryEnumerateKernels")
    }
    /// `cudaDeviceSetLimit(cudaLimitMallocHeapSize, bytes)`: the device heap's size.
    fn set_heap_limit(&self, bytes: u64) -> Result<()> {
        let _ = bytes;
        unsupported(self.name(), "cudaLimitMallocHeapSize")
    }
    fn host_func(&self, stream: StreamId, call: HostCall) -> Result<()> {
        let _ = (stream, call);
        unsupported(self.name(), "cudaLaunchHostFunc")
    }
    /// [`Backend::host_func`] of the program's function `func(data)` (named so that a
    /// checkpoint can save it unstarted).
    fn host_func_named(&self, stream: StreamId, call: HostCall, func: u64, data: u64) -> Result<()> {
        let _ = (func, data);
        self.host_func(stream, call)
    }

    /// Non-draining checkpoints (`Capabilities::queue_cut`): the (stream, sequence) points a
    /// synchronizing call waits for (a legacy-stream synchronize enqueues a marker).
    fn sync_points(&self, on: SyncOn) -> Result<Vec<(u64, u64)>> {
        let _ = on;
        unsupported(self.name(), "synchronization points")
    }
    /// Block until every point is reached (points of streams destroyed since count as
    /// reached once their work is done).
    fn wait_points(&self, points: &[(u64, u64)]) -> Result<()> {
        let _ = points;
        unsupported(self.name(), "synchronization points")
    }
    /// Hold every stream: the jobs running finish (or stop at a safe point), none starts until
    /// [`Backend::release_queues`]. Returns what it did with the work running, for the log
    /// and the image.
    fn hold_queues(&self) -> Result<Vec<String>> {
        unsupported(self.name(), "holding the queues")
    }
    /// The work not started on the held streams, in submission order.
    fn queued_work(&self) -> Result<Vec<crum_wire::ckpt::QueuedWork>> {
        unsupported(self.name(), "holding the queues")
    }
    fn release_queues(&self) {}
    /// After a restart: enqueue saved work again; `map` turns a saved (stream, seq) into this
    /// proxy's sequence number on that stream (None: complete before the cut). `host` runs a
    /// host function. Returns the new sequence number.
    fn replay_work(
        &self,
        w: &crum_wire::ckpt::QueuedWork,
        map: &dyn Fn(u64, u64) -> Option<u64>,
        host: Option<HostCall>,
    ) -> Result<u64> {
        let _ = (w, map, host);
        unsupported(self.name(), "replaying saved work")
    }

    fn event_create(&self, flags: u32) -> Result<EventId> {
        let _ = flags;
        unsupported(self.name(), "cudaEventCreate")
    }
    fn event_destroy(&self, event: EventId) -> Result<()> {
        let _ = event;
        unsupported(self.name(), "cudaEventDestroy")
    }
    fn event_record(&self, event: EventId, stream: StreamId) -> Result<()> {
        let _ = (event, stream);
        unsupported(self.name(), "cudaEventRecord")
    }
    /// True when the event has completed (or was never recorded).
    fn event_query(&self, event: EventId) -> Result<bool> {
        let _ = event;
        unsupported(self.name(), "cudaEventQuery")
    }
    fn event_sync(&self, event: EventId) -> Result<()> {
        let _ = event;
        unsupported(self.name(), "cudaEventSynchronize")
    }
    fn event_elapsed(&self, start: EventId, end: EventId) -> Result<f32> {
        let _ = (start, end);
        unsupported(self.name(), "cudaEventElapsedTime")
    }

    fn device_sync(&self) -> Result<()> {
        unsupported(self.name(), "cudaDeviceSynchronize")
    }
    fn device_reset(&self) -> Result<()> {
        unsupported(self.name(), "cudaDeviceReset")
    }
    fn texture_create(&self, desc: &TexDesc) -> Result<u64> {
        let _ = desc;
        unsupported(self.name(), "texture objects")
    }
    fn texture_destroy(&self, tex: u64) -> Result<()> {
        let _ = tex;
        unsupported(self.name(), "texture objects")
    }

    /// Checkpoint: finish all device work, then hand every allocation's and known module
    /// variable's bytes to `sink`; returns the regions saved.
    fn snapshot(&self, sink: SaveSink<'_>) -> Result<Vec<SavedRegion>> {
        let _ = sink;
        unsupported(self.name(), "device snapshot")
    }
    /// Checkpoint: device state the program holds that this backend cannot save, one line
    /// each, for the checkpoint to name (a warning; an error under `--strict`). The regions
    /// of [`Backend::saved_regions`] are not in it.
    fn unsaved_state(&self) -> Vec<String> {
        Vec::new()
    }
    /// Checkpoint: the regions [`Backend::snapshot`] will save, in the same order (the device
    /// is idle).
    fn saved_regions(&self) -> Result<Vec<SavedRegion>> {
        unsupported(self.name(), "device snapshot")
    }
    /// Restart: re-create `regions` at their recorded addresses (module variables by name)
    /// and fill them from `source`; returns the allocations in the same order.
    fn restore(&self, regions: &[SavedRegion], source: RestoreSource<'_>) -> Result<Vec<Allocation>> {
        let _ = (regions, source);
        unsupported(self.name(), "device restore")
    }
    /// Restart: load a module again, with its variables at their checkpointed addresses
    /// (`vars`: name, address, kind). A backend that cannot choose (the driver places module
    /// variables) loads it and fails, naming the variable, if an address differs.
    /// (`__managed__` variables, kind managed, are the backend's allocations: [`Backend::restore`]
    /// makes them again.)
    fn restore_module(&self, image: &[u8], vars: &[(String, u64, AllocKind)]) -> Result<ModuleId> {
        let m = self.load_module(image)?;
        for (name, addr, _) in vars.iter().filter(|v| v.2 != AllocKind::Managed) {
            let (now, _) = self.symbol(m, name)?;
            if now != *addr {
                tracing::error!(
                    "module variable `{name}` was at {addr:#x} and the {} device puts it at {now:#x}: \
                     its address cannot be reproduced",
                    self.name()
                );
                return Err(BackendError::Cuda(cuda::ERROR_INVALID_SYMBOL));
            }
        }
        Ok(m)
    }
    /// Checkpoint: the asynchronous error not yet reported, without taking it.
    fn peek_async_error(&self) -> Option<u32> {
        None
    }
    /// Checkpoint: device printf output not yet delivered, without taking it.
    fn peek_printf(&self) -> Vec<u8> {
        Vec::new()
    }
    /// Checkpoint (device idle): nanoseconds since `event` completed; None if it was never
    /// recorded.
    fn event_completed_ago(&self, event: EventId) -> Result<Option<u64>> {
        let _ = event;
        unsupported(self.name(), "event timestamps")
    }
    /// Restart: mark `event` recorded and complete `ago_ns` nanoseconds ago.
    fn event_restore(&self, event: EventId, ago_ns: u64) -> Result<()> {
        let _ = (event, ago_ns);
        unsupported(self.name(), "event timestamps")
    }
    /// The handle the next created object (stream, event, module, kernel, texture) gets.
    fn next_handle(&self) -> u64 {
        0
    }
    /// Restart: make the next created object get handle `h` (objects come back behind the
    /// handle values the program holds).
    fn set_next_handle(&self, h: u64) -> Result<()> {
        let _ = h;
        unsupported(self.name(), "handle replay")
    }

    /// The error of earlier asynchronous work not yet reported (reported once), if any.
    fn take_async_error(&self) -> Option<u32> {
        None
    }
    /// Sticky error: once set, every later call fails with it.
    fn sticky_error(&self) -> Option<u32> {
        None
    }
    /// Device printf output produced so far (at most `max` bytes; the rest stays queued).
    fn take_printf(&self, max: usize) -> Vec<u8> {
        let _ = max;
        Vec::new()
    }
}

/// Which device a proxy should drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceChoice {
    /// A real GPU when one is usable, else the emulated device.
    Auto,
    Emu,
    Cuda,
}

/// Why no backend could be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("no usable NVIDIA GPU: {reason}")]
    NoGpu { reason: String },
    #[error("the emulated device could not start")]
    Emu(#[source] std::io::Error),
}

/// Why the `cuda` backend is not usable on this machine (None = usable): the driver library
/// loads, `cuInit` succeeds, a device exists (see [`crate::cuda::probe`]).
pub fn probe_cuda() -> Option<String> {
    crate::cuda::probe().err().map(|e| e.to_string())
}

/// The probing factory: `Auto` tries the GPU, then falls back to the emulated device.
pub fn open(choice: DeviceChoice) -> std::result::Result<Arc<dyn Backend>, OpenError> {
    match choice {
        DeviceChoice::Emu => Ok(Arc::new(crate::emu::Emu::new().map_err(OpenError::Emu)?)),
        DeviceChoice::Cuda => match crate::cuda::Cuda::open() {
            Ok(c) => {
                if crate::emu::strict_memory() {
                    // A GPU does not check accesses against allocations; compute-sanitizer does.
                    tracing::warn!(
                        "--strict-memory checks kernel accesses on the emulated device only; \
                         the GPU runs without it"
                    );
                }
                Ok(Arc::new(c))
            }
            Err(e) => Err(OpenError::NoGpu { reason: e.to_string() }),
        },
        DeviceChoice::Auto => match open(DeviceChoice::Cuda) {
            Err(OpenError::NoGpu { reason }) => {
                tracing::info!(%reason, "using the emulated device");
                open(DeviceChoice::Emu)
            }
            r => r,
        },
    }
}
