//! The emulated device: device memory mapped in the proxy at device addresses
//! ([`memory`]), streams as ordered worker queues ([`stream`]), and kernels run by the PTX
//! interpreter of `crum-ptx` ([`kernels`]).
//!
//! # Safety
//! Copies and memsets touch device memory through raw pointers at device addresses. Each is
//! bounds-checked against a live allocation before the job is queued and again when it runs
//! (a free is preceded by a device drain, as `cudaFree` is synchronizing). Concurrent access
//! by kernels on other streams is the application's data race, as on a GPU; the bytes
//! involved are plain memory with no Rust invariants.
#![allow(unsafe_code)]

pub mod heap;
pub mod kernels;
pub mod memory;
pub mod stream;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use crum_wire::ckpt::{QueuedOp, QueuedWork};
use crum_wire::{cuda, AllocKind, DeviceProps, FuncInfo, TexDesc};

use crate::backend::*;
use crate::hostmem::AppMemory;
use memory::Vram;
use stream::{Desc, JobFn, Order, Stream};

/// Memory the emulated device reports (allocations beyond it fail like a full GPU).
const CAPACITY: u64 = 16 << 30;

/// State shared with stream jobs.
pub struct Shared {
    pub vram: Vram,
    app: OnceLock<Arc<AppMemory>>,
    async_err: AtomicU32,
    sticky: AtomicU32,
    printf: Mutex<Vec<u8>>,
    pub(crate) kernels: kernels::Kernels,
    /// The launch running and the cut's hold on launches (block-boundary preemption, flush).
    running: Mutex<kernels::Running>,
    /// Device-side `malloc`/`free`.
    pub(crate) heap: heap::Heap,
}

impl Shared {
    fn report(&self, code: u32) {
        if cuda::is_sticky(code) {
            let _ = self
                .sticky
                .compare_exchange(0, code, Ordering::SeqCst, Ordering::SeqCst);
        }
        let _ = self
            .async_err
            .compare_exchange(0, code, Ordering::SeqCst, Ordering::SeqCst);
    }

    fn app(&self) -> Result<&Arc<AppMemory>> {
        self.app
            .get()
            .ok_or(BackendError::Cuda(cuda::ERROR_INITIALIZATION))
    }

    pub(crate) fn append_printf(&self, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.printf.lock().unwrap().extend_from_slice(bytes);
        }
    }

    /// Copy rows between device memory and the application. Runs on a stream worker.
    fn run_copy(&self, op: &CopyOp) -> std::result::Result<(), u32> {
        let bad = cuda::ERROR_INVALID_VALUE;
        let dev = |addr: u64, len: u64| self.vram.contains(addr, len).map(|_| addr as *mut u8);
        for row in 0..op.height {
            let d = op.dst + row * op.dpitch;
            let w = op.width as usize;
            match (&op.src, dev(d, op.width)) {
                (Endpoint::Staged(data), dst) => {
                    let off = (row * op.width) as usize;
                    let src = data.get(off..off + w).ok_or(bad)?;
                    match dst {
                        // SAFETY: `dst` is inside a live allocation for `w` bytes (checked).
                        Some(p) => unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, w) },
                        None => self
                            .app()
                            .map_err(|e| e.code())?
                            .write(d, src)
                            .map_err(|_| bad)?,
                    }
                }
                (Endpoint::Addr(s0), dst) => {
                    let s = s0 + row * op.spitch;
                    match (dev(s, op.width), dst) {
                        // SAFETY: both ranges are inside live allocations (checked); `copy`
                        // allows overlap.
                        (Some(sp), Some(dp)) => unsafe { std::ptr::copy(sp, dp, w) },
                        (None, Some(dp)) => {
                            // SAFETY: `dp` is inside a live allocation for `w` bytes.
                            let buf = unsafe { std::slice::from_raw_parts_mut(dp, w) };
                            self.app()
                                .map_err(|e| e.code())?
                                .read(s, buf)
                                .map_err(|_| bad)?;
                        }
                        (Some(sp), None) => {
                            // SAFETY: `sp` is inside a live allocation for `w` bytes.
                            let buf = unsafe { std::slice::from_raw_parts(sp, w) };
                            self.app()
                                .map_err(|e| e.code())?
                                .write(d, buf)
                                .map_err(|_| bad)?;
                        }
                        (None, None) => {
                            let app = self.app().map_err(|e| e.code())?;
                            let mut tmp = vec![0u8; w];
                            app.read(s, &mut tmp).map_err(|_| bad)?;
                            app.write(d, &tmp).map_err(|_| bad)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Where an event was last recorded: the stream, the job's sequence number, and the
/// completion time the job fills in.
type Recorded = (Arc<Stream>, u64, Arc<OnceLock<Instant>>);

struct Event {
    blocking_sync: bool,
    timing: bool,
    rec: Mutex<Option<Recorded>>,
}

/// The emulated device.
pub struct Emu {
    shared: Arc<Shared>,
    streams: Mutex<HashMap<u64, Arc<Stream>>>,
    events: Mutex<HashMap<u64, Arc<Event>>>,
    textures: Mutex<HashMap<u64, TexDesc>>,
    next_handle: AtomicU64,
    props: DeviceProps,
    /// Submission order over all streams (a checkpoint saves unstarted work in it).
    order: Order,
    /// Destroyed streams whose work had not finished (it still runs, as on a GPU).
    retiring: Mutex<Vec<Arc<Stream>>>,
    /// A checkpoint holds the queues (streams created meanwhile start held).
    held: AtomicBool,
}

impl Emu {
    /// The emulated device with its memory window at the agreed device address range.
    pub fn new() -> std::io::Result<Emu> {
        Emu::with_window(crum_wire::DEVICE_VA_BASE, crum_wire::DEVICE_VA_SIZE)
    }

    /// The emulated device with its memory window at `[base, base+size)`.
    pub fn with_window(base: u64, size: u64) -> std::io::Result<Emu> {
        let mut vram = Vram::new(base, size, CAPACITY.min(size))?;
        vram.set_strict(strict_memory());
        let shared = Arc::new(Shared {
            vram,
            app: OnceLock::new(),
            async_err: AtomicU32::new(0),
            sticky: AtomicU32::new(0),
            printf: Mutex::default(),
            kernels: kernels::Kernels::new(),
            running: Mutex::default(),
            heap: heap::Heap::default(),
        });
        let emu = Emu {
            shared,
            streams: Mutex::default(),
            events: Mutex::default(),
            textures: Mutex::default(),
            next_handle: AtomicU64::new(0x100),
            props: emu_props(),
            order: Order::default(),
            retiring: Mutex::default(),
            held: AtomicBool::new(false),
        };
        let legacy = Stream::spawn(0, false, 0, emu.order.clone(), emu.on_error());
        emu.streams.lock().unwrap().insert(0, legacy);
        Ok(emu)
    }

    fn on_error(&self) -> Arc<dyn Fn(u32) + Send + Sync> {
        let s = Arc::downgrade(&self.shared);
        Arc::new(move |code| {
            if let Some(s) = s.upgrade() {
                s.report(code)
            }
        })
    }

    fn handle(&self) -> u64 {
        self.next_handle.fetch_add(1, Ordering::Relaxed)
    }

    fn stream(&self, id: StreamId) -> Result<Arc<Stream>> {
        self.streams
            .lock()
            .unwrap()
            .get(&id.0)
            .cloned()
            .ok_or(BackendError::Cuda(cuda::ERROR_INVALID_RESOURCE_HANDLE))
    }

    fn event(&self, id: EventId) -> Result<Arc<Event>> {
        self.events
            .lock()
            .unwrap()
            .get(&id.0)
            .cloned()
            .ok_or(BackendError::Cuda(cuda::ERROR_INVALID_RESOURCE_HANDLE))
    }

    /// Enqueue on a stream with the implicit dependencies of the legacy default stream:
    /// legacy work waits for every blocking stream, blocking-stream work waits for legacy work.
    fn submit(&self, id: StreamId, desc: Desc, run: JobFn) -> Result<(Arc<Stream>, u64)> {
        let s = self.stream(id)?;
        let deps = self.implicit_deps(&s);
        let seq = s.submit(deps, desc, run);
        Ok((s, seq))
    }

    /// The legacy default stream's implicit dependencies of work enqueued on `s` now.
    fn implicit_deps(&self, s: &Arc<Stream>) -> Vec<(Arc<Stream>, u64)> {
        let streams = self.streams.lock().unwrap();
        let mut deps = Vec::new();
        if s.id == LEGACY_STREAM.0 {
            for t in streams.values().filter(|t| t.id != 0 && !t.nonblocking) {
                deps.push((t.clone(), t.submitted()));
            }
        } else if !s.nonblocking {
            if let Some(legacy) = streams.get(&0) {
                deps.push((legacy.clone(), legacy.submitted()));
            }
        }
        deps
    }

    fn check_device(&self, addr: u64, len: u64) -> Result<()> {
        if len == 0 || self.shared.vram.contains(addr, len).is_some() {
            Ok(())
        } else {
            Err(BackendError::Cuda(cuda::ERROR_INVALID_VALUE))
        }
    }

    fn all_streams(&self) -> Vec<Arc<Stream>> {
        self.streams.lock().unwrap().values().cloned().collect()
    }
}

/// `CRUM_STRICT_MEMORY=1` (`crum run --strict-memory`): kernels may touch only the bytes
/// they allocated; any other access is an illegal address, logged with the allocation it
/// misses (a GPU lets accesses within an allocation's pages pass).
pub fn strict_memory() -> bool {
    std::env::var_os("CRUM_STRICT_MEMORY").is_some_and(|v| v == "1")
}

/// Properties of the emulated device (also reported by the emulated driver,
/// `integration-tests/emu-libcuda`): an sm_80-class part (A100-like limits), so programs
/// that size their launches from the properties behave as on a real one.
pub fn emu_props() -> DeviceProps {
    DeviceProps {
        name: "crum emulated device (sm_80)".into(),
        total_mem: CAPACITY,
        major: 8,
        minor: 0,
        multiprocessors: 108,
        max_threads_per_block: 1024,
        max_threads_per_sm: 2048,
        max_blocks_per_sm: 32,
        warp_size: 32,
        regs_per_block: 65536,
        regs_per_sm: 65536,
        shared_per_block: 48 << 10,
        shared_per_block_optin: 163 << 10,
        shared_per_sm: 164 << 10,
        const_mem: 64 << 10,
        clock_khz: 1_410_000,
        mem_clock_khz: 1_215_000,
        mem_bus_width: 5120,
        l2_bytes: 40 << 20,
        max_grid: [i32::MAX, 65535, 65535],
        max_block: [1024, 1024, 64],
        managed: true,
        concurrent_kernels: true,
        cooperative_launch: true,
        pci_bus_id: 0,
        uuid: *b"crum-emu-device\0",
        // As an A100 reports them: 75% of L2 may persist, windows up to 128 MiB.
        max_persisting_l2: 30 << 20,
        max_access_policy_window: 128 << 20,
        graph_conditionals: true,
    }
}

impl Backend for Emu {
    fn name(&self) -> &'static str {
        "emu"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            name: "emu",
            shared_host_mappings: true,
            cooperative_launch: true,
            textures: true,
            fixed_addresses: true,
            fork_snapshot: true,
            queue_cut: true,
        }
    }

    fn device_props(&self) -> DeviceProps {
        self.props.clone()
    }

    fn attach_app(&self, app: Arc<AppMemory>) {
        let _ = self.shared.app.set(app);
    }

    fn mem_info(&self) -> Result<(u64, u64)> {
        let v = &self.shared.vram;
        Ok((v.capacity() - v.used(), v.capacity()))
    }

    fn malloc(&self, size: u64, kind: AllocKind) -> Result<Allocation> {
        let (addr, memfd) = self
            .shared
            .vram
            .alloc(size, kind)
            .map_err(BackendError::Cuda)?;
        Ok(Allocation { addr, memfd })
    }

    fn map_at(&self, addr: u64, size: u64) -> Result<Allocation> {
        let (addr, memfd) = self.shared.vram.map_at(addr, size).map_err(BackendError::Cuda)?;
        Ok(Allocation { addr, memfd })
    }

    fn free(&self, addr: u64) -> Result<()> {
        // cudaFree synchronizes the device: nothing may still be using the memory.
        self.device_sync_inner();
        self.free_synced(addr)
    }

    fn free_synced(&self, addr: u64) -> Result<()> {
        self.shared
            .vram
            .free(addr)
            .map(|_| ())
            .map_err(BackendError::Cuda)
    }

    fn owns(&self, addr: u64, len: u64) -> Option<AllocKind> {
        self.shared.vram.contains(addr, len.max(1)).map(|r| r.kind)
    }

    fn host_register(&self, addr: u64, len: u64) -> Result<()> {
        self.shared
            .vram
            .register(addr, len)
            .map_err(BackendError::Cuda)
    }

    fn host_unregister(&self, addr: u64) -> Result<()> {
        self.shared
            .vram
            .unregister(addr)
            .map_err(BackendError::Cuda)
    }

    fn is_registered(&self, addr: u64, len: u64) -> bool {
        self.shared.vram.is_registered(addr, len)
    }

    fn load_module(&self, image: &[u8]) -> Result<ModuleId> {
        let id = self.handle();
        self.shared.kernels.load(id, image, &self.shared.vram, None)?;
        Ok(ModuleId(id))
    }

    fn restore_module(&self, image: &[u8], vars: &[(String, u64, AllocKind)]) -> Result<ModuleId> {
        let id = self.handle();
        let placement = vars.iter().map(|(n, a, k)| (n.clone(), (*a, *k))).collect();
        self.shared.kernels.load(id, image, &self.shared.vram, Some(&placement))?;
        Ok(ModuleId(id))
    }

    fn next_handle(&self) -> u64 {
        self.next_handle.load(Ordering::SeqCst)
    }

    fn peek_async_error(&self) -> Option<u32> {
        let sticky = self.shared.sticky.load(Ordering::SeqCst);
        let e = self.shared.async_err.load(Ordering::SeqCst);
        Some(if sticky != 0 { sticky } else { e }).filter(|&c| c != 0)
    }

    fn peek_printf(&self) -> Vec<u8> {
        self.shared.printf.lock().unwrap().clone()
    }

    fn event_completed_ago(&self, event: EventId) -> Result<Option<u64>> {
        let e = self.event(event)?;
        let rec = e.rec.lock().unwrap().clone();
        Ok(rec.map(|(_, _, t)| t.get().map_or(0, |t| t.elapsed().as_nanos() as u64)))
    }

    fn event_restore(&self, event: EventId, ago_ns: u64) -> Result<()> {
        let e = self.event(event)?;
        let now = Instant::now();
        let at = now.checked_sub(std::time::Duration::from_nanos(ago_ns)).unwrap_or(now);
        let stamp = Arc::new(OnceLock::new());
        let _ = stamp.set(at);
        let legacy = self.stream(StreamId(0))?;
        *e.rec.lock().unwrap() = Some((legacy, 0, stamp));
        Ok(())
    }

    fn set_next_handle(&self, h: u64) -> Result<()> {
        self.next_handle.store(h, Ordering::SeqCst);
        Ok(())
    }

    fn saved_regions(&self) -> Result<Vec<SavedRegion>> {
        let names: HashMap<u64, (u64, String)> = self
            .shared
            .kernels
            .globals_named()
            .into_iter()
            .map(|(a, m, n)| (a, (m, n)))
            .collect();
        let vram = &self.shared.vram;
        let mut regions = Vec::new();
        for addr in vram.all() {
            let Some(r) = vram.lookup(addr) else { continue };
            regions.push(SavedRegion {
                addr,
                len: r.len,
                kind: r.kind,
                symbol: names.get(&addr).map(|(m, n)| (ModuleId(*m), n.clone())),
            });
        }
        Ok(regions)
    }

    fn snapshot(&self, sink: SaveSink<'_>) -> Result<Vec<SavedRegion>> {
        if !self.held.load(Ordering::SeqCst) {
            self.device_sync_inner();
        }
        let regions = self.saved_regions()?;
        for r in &regions {
            // SAFETY: a live allocation of `len` bytes mapped readable at its device address
            // in this process; the device is idle (drained above, or its queues held, and the
            // server holds every lane quiet while it snapshots).
            let bytes = unsafe { std::slice::from_raw_parts(r.addr as *const u8, r.len as usize) };
            for (i, chunk) in bytes.chunks(64 << 20).enumerate() {
                sink(r, (i as u64) << 26, chunk).map_err(|e| {
                    tracing::error!("cannot save device memory: {e}");
                    BackendError::Cuda(cuda::ERROR_UNKNOWN)
                })?;
            }
        }
        Ok(regions)
    }

    fn restore(&self, regions: &[SavedRegion], source: RestoreSource<'_>) -> Result<Vec<Allocation>> {
        let vram = &self.shared.vram;
        let mut out = Vec::new();
        for r in regions {
            match &r.symbol {
                Some((m, name)) => {
                    let (addr, len) = self.shared.kernels.symbol(m.0, name)?;
                    if addr != r.addr || len != r.len {
                        tracing::error!(symbol = %name, "module variable not at its checkpointed place");
                        return Err(BackendError::Cuda(cuda::ERROR_INVALID_SYMBOL));
                    }
                    out.push(Allocation { addr, memfd: self.shared_fd(addr) });
                }
                None => {
                    let (addr, memfd) = vram.alloc_at(r.addr, r.len, r.kind).map_err(|c| {
                        tracing::error!("device address {:#x} ({} bytes) cannot be allocated again", r.addr, r.len);
                        BackendError::Cuda(c)
                    })?;
                    out.push(Allocation { addr, memfd });
                }
            }
        }
        for r in regions {
            // SAFETY: allocated (or placed with its module) just above: `len` bytes mapped
            // writable at `addr` in this process; nothing runs on the device yet.
            let bytes = unsafe { std::slice::from_raw_parts_mut(r.addr as *mut u8, r.len as usize) };
            for (i, chunk) in bytes.chunks_mut(64 << 20).enumerate() {
                source(r, (i as u64) << 26, chunk).map_err(|e| {
                    tracing::error!("cannot read saved device memory: {e}");
                    BackendError::Cuda(cuda::ERROR_UNKNOWN)
                })?;
            }
        }
        Ok(out)
    }

    fn unload_module(&self, module: ModuleId) -> Result<()> {
        self.device_sync_inner();
        self.unload_module_synced(module)
    }

    fn unload_module_synced(&self, module: ModuleId) -> Result<()> {
        self.shared.kernels.unload(module.0, &self.shared.vram)
    }

    fn function(&self, module: ModuleId, name: &str) -> Result<FuncInfo> {
        self.shared
            .kernels
            .function(module.0, name, || self.handle(), &self.props)
    }

    fn symbol(&self, module: ModuleId, name: &str) -> Result<(u64, u64)> {
        self.shared.kernels.symbol(module.0, name)
    }

    fn managed_var(&self, module: ModuleId, name: &str) -> Result<Allocation> {
        self.shared
            .kernels
            .make_managed(module.0, name, &self.shared.vram)
    }

    fn func_set_attribute(&self, func: FuncId, attr: u32, value: i32) -> Result<()> {
        self.shared
            .kernels
            .set_attribute(func.0, attr, value, &self.props)
    }

    fn launch(
        &self,
        stream: StreamId,
        func: FuncId,
        dims: LaunchDims,
        params: Vec<u8>,
    ) -> Result<()> {
        self.launch_from(stream, func, dims, params, 0, Vec::new())
    }

    fn memcpy(&self, stream: StreamId, op: CopyOp) -> Result<()> {
        // Validate what can be validated now: device-window addresses must be allocations.
        let span = |pitch: u64| {
            pitch
                .checked_mul(op.height.saturating_sub(1))
                .and_then(|x| x.checked_add(op.width))
        };
        let (dspan, sspan) = (span(op.dpitch), span(op.spitch));
        let (Some(dspan), Some(sspan)) = (dspan, sspan) else {
            return Err(BackendError::Cuda(cuda::ERROR_INVALID_VALUE));
        };
        if op.width == 0 || op.height == 0 {
            return Ok(());
        }
        let in_window = |a: u64| self.shared.vram.in_window(a);
        if in_window(op.dst) {
            self.check_device(op.dst, dspan)?;
        }
        if let Endpoint::Addr(s) = op.src {
            if in_window(s) {
                self.check_device(s, sspan)?;
            }
        }
        let (src, staged) = match &op.src {
            Endpoint::Addr(a) => (*a, None),
            Endpoint::Staged(b) => (0, Some(b.clone())),
        };
        let desc = Desc {
            op: QueuedOp::Copy {
                dst: op.dst,
                dpitch: op.dpitch,
                src,
                spitch: op.spitch,
                width: op.width,
                height: op.height,
                staged: None,
            },
            staged,
        };
        let shared = self.shared.clone();
        self.submit(stream, desc, Box::new(move || shared.run_copy(&op)))?;
        Ok(())
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
        if width == 0 || height == 0 {
            return Ok(());
        }
        let span = pitch
            .checked_mul(height - 1)
            .and_then(|x| x.checked_add(width))
            .ok_or(BackendError::Cuda(cuda::ERROR_INVALID_VALUE))?;
        self.check_device(dst, span)?;
        let shared = self.shared.clone();
        self.submit(
            stream,
            Desc::op(QueuedOp::Memset { dst, pitch, value, width, height }),
            Box::new(move || {
                shared
                    .vram
                    .contains(dst, span)
                    .ok_or(cuda::ERROR_INVALID_VALUE)?;
                for row in 0..height {
                    // SAFETY: the whole span lies in a live allocation (checked just above).
                    unsafe {
                        std::ptr::write_bytes((dst + row * pitch) as *mut u8, value, width as usize)
                    };
                }
                Ok(())
            }),
        )?;
        Ok(())
    }

    fn stream_create(&self, flags: u32, priority: i32) -> Result<StreamId> {
        let id = self.handle();
        let s = Stream::spawn(id, flags & 1 != 0, priority, self.order.clone(), self.on_error());
        if self.held.load(Ordering::SeqCst) {
            s.hold();
        }
        self.streams.lock().unwrap().insert(id, s);
        Ok(StreamId(id))
    }

    fn stream_destroy(&self, stream: StreamId) -> Result<()> {
        if stream == LEGACY_STREAM {
            return Err(BackendError::Cuda(cuda::ERROR_INVALID_RESOURCE_HANDLE));
        }
        let s = self
            .streams
            .lock()
            .unwrap()
            .remove(&stream.0)
            .ok_or(BackendError::Cuda(cuda::ERROR_INVALID_RESOURCE_HANDLE))?;
        s.shutdown();
        let mut r = self.retiring.lock().unwrap();
        r.retain(|t| !t.idle());
        if !s.idle() {
            r.push(s);
        }
        Ok(())
    }

    fn stream_query(&self, stream: StreamId) -> Result<bool> {
        Ok(self.stream(stream)?.idle())
    }

    fn stream_sync(&self, stream: StreamId) -> Result<()> {
        if stream == LEGACY_STREAM {
            // Work on the legacy stream waits for blocking streams; a no-op job there waits
            // for everything it must.
            let (s, seq) = self.submit(stream, Desc::op(QueuedOp::Marker), Box::new(|| Ok(())))?;
            s.wait(seq);
        } else {
            self.stream(stream)?.drain();
        }
        Ok(())
    }

    fn stream_wait_event(&self, stream: StreamId, event: EventId) -> Result<()> {
        let e = self.event(event)?;
        let rec = e.rec.lock().unwrap().clone();
        let s = self.stream(stream)?;
        if let Some((es, seq, _)) = rec {
            let desc = Desc::op(QueuedOp::WaitFor { on_stream: es.id, on_seq: seq });
            s.submit(vec![(es, seq)], desc, Box::new(|| Ok(())));
        }
        Ok(())
    }

    /// The emulated device has no cache: an L2 or synchronization hint changes nothing it
    /// does (the stream must exist, as on a GPU).
    fn stream_set_attr(&self, stream: StreamId, _attr: crum_wire::StreamAttr) -> Result<()> {
        if stream != LEGACY_STREAM {
            self.stream(stream)?;
        }
        Ok(())
    }

    /// No cache, so no persisting lines to reset.
    fn reset_persisting_l2(&self) -> Result<()> {
        Ok(())
    }

    /// No cache to set aside; the limit is remembered by the interposer for
    /// `cudaDeviceGetLimit`.
    fn set_persisting_l2_limit(&self, _bytes: u64) -> Result<()> {
        Ok(())
    }

    fn module_kernels(&self, module: ModuleId) -> Result<Vec<String>> {
        self.shared.kernels.kernel_names(module.0)
    }

    fn set_heap_limit(&self, bytes: u64) -> Result<()> {
        self.shared.heap.set_limit(bytes).map_err(BackendError::Cuda)
    }

    fn host_func(&self, stream: StreamId, call: HostCall) -> Result<()> {
        self.host_func_named(stream, call, 0, 0)
    }

    fn host_func_named(&self, stream: StreamId, call: HostCall, func: u64, data: u64) -> Result<()> {
        self.submit(
            stream,
            Desc::op(QueuedOp::HostFunc { func, data }),
            Box::new(move || {
                call();
                Ok(())
            }),
        )?;
        Ok(())
    }

    fn event_create(&self, flags: u32) -> Result<EventId> {
        let id = self.handle();
        let e = Event {
            blocking_sync: flags & 1 != 0,
            timing: flags & 2 == 0,
            rec: Mutex::new(None),
        };
        let _ = e.blocking_sync;
        self.events.lock().unwrap().insert(id, Arc::new(e));
        Ok(EventId(id))
    }

    fn event_destroy(&self, event: EventId) -> Result<()> {
        self.events
            .lock()
            .unwrap()
            .remove(&event.0)
            .map(|_| ())
            .ok_or(BackendError::Cuda(cuda::ERROR_INVALID_RESOURCE_HANDLE))
    }

    fn event_record(&self, event: EventId, stream: StreamId) -> Result<()> {
        let e = self.event(event)?;
        let stamp = Arc::new(OnceLock::new());
        let st = stamp.clone();
        let (s, seq) = self.submit(
            stream,
            Desc::op(QueuedOp::EventRecord { event: event.0 }),
            Box::new(move || {
                let _ = st.set(Instant::now());
                Ok(())
            }),
        )?;
        *e.rec.lock().unwrap() = Some((s, seq, stamp));
        Ok(())
    }

    fn event_query(&self, event: EventId) -> Result<bool> {
        let e = self.event(event)?;
        let rec = e.rec.lock().unwrap().clone();
        Ok(rec.is_none_or(|(s, seq, _)| s.reached(seq)))
    }

    fn event_sync(&self, event: EventId) -> Result<()> {
        let e = self.event(event)?;
        let rec = e.rec.lock().unwrap().clone();
        if let Some((s, seq, _)) = rec {
            s.wait(seq);
        }
        Ok(())
    }

    fn event_elapsed(&self, start: EventId, end: EventId) -> Result<f32> {
        let (a, b) = (self.event(start)?, self.event(end)?);
        if !a.timing || !b.timing {
            return Err(BackendError::Cuda(cuda::ERROR_INVALID_RESOURCE_HANDLE));
        }
        let stamp = |e: &Event| -> Result<Instant> {
            let rec = e.rec.lock().unwrap().clone();
            let (s, seq, t) = rec.ok_or(BackendError::Cuda(cuda::ERROR_INVALID_RESOURCE_HANDLE))?;
            if !s.reached(seq) {
                return Err(BackendError::Cuda(cuda::ERROR_NOT_READY));
            }
            t.get()
                .copied()
                .ok_or(BackendError::Cuda(cuda::ERROR_NOT_READY))
        };
        let (ta, tb) = (stamp(&a)?, stamp(&b)?);
        let ms = if tb >= ta {
            (tb - ta).as_secs_f64() * 1e3
        } else {
            -((ta - tb).as_secs_f64() * 1e3)
        };
        Ok(ms as f32)
    }

    fn device_sync(&self) -> Result<()> {
        self.device_sync_inner();
        Ok(())
    }

    fn sync_points(&self, on: SyncOn) -> Result<Vec<(u64, u64)>> {
        Ok(match on {
            SyncOn::Device => {
                let retiring = self.retiring.lock().unwrap().clone();
                self.all_streams().iter().chain(&retiring).map(|s| (s.id, s.submitted())).collect()
            }
            SyncOn::Stream(id) if id == LEGACY_STREAM => {
                // Work on the legacy stream waits for blocking streams: a marker there waits
                // for everything it must.
                let (_, seq) = self.submit(id, Desc::op(QueuedOp::Marker), Box::new(|| Ok(())))?;
                vec![(id.0, seq)]
            }
            SyncOn::Stream(id) => vec![(id.0, self.stream(id)?.submitted())],
            SyncOn::Event(e) => {
                let rec = self.event(e)?.rec.lock().unwrap().clone();
                rec.map(|(s, seq, _)| vec![(s.id, seq)]).unwrap_or_default()
            }
        })
    }

    fn wait_points(&self, points: &[(u64, u64)]) -> Result<()> {
        for &(id, seq) in points {
            let s = self.streams.lock().unwrap().get(&id).cloned();
            let s = s.or_else(|| self.retiring.lock().unwrap().iter().find(|t| t.id == id).cloned());
            // A stream destroyed and gone from `retiring` finished its work.
            if let Some(s) = s {
                s.wait(seq);
            }
        }
        Ok(())
    }

    fn hold_queues(&self) -> Result<Vec<String>> {
        self.held.store(true, Ordering::SeqCst);
        let policy = KernelPolicy::from_env();
        let mut notes = Vec::new();
        {
            let mut run = self.shared.running.lock().unwrap();
            run.cutting = policy != KernelPolicy::Drain;
            if let Some(l) = run.current.clone() {
                let (mode, why) = policy.decide(&self.shared, &l);
                l.ctl.mode.store(mode, Ordering::SeqCst);
                let done = l.ctl.blocks_done.load(Ordering::Relaxed);
                let what = match mode {
                    crum_ptx::LaunchCtl::FLUSH => "flushed, to run again from its start",
                    crum_ptx::LaunchCtl::SAVE => "its running blocks saved where they are (context save)",
                    crum_ptx::LaunchCtl::STOP if !l.grid_sync && l.total_blocks > 1 => "stopped at a block boundary",
                    _ => "drained (waited for)",
                };
                let note = format!(
                    "kernel {} ({} of {} blocks done): {what}, policy {}: {why}",
                    l.name,
                    l.first_block + done,
                    l.total_blocks,
                    policy.name()
                );
                tracing::info!("checkpoint cut: {note}");
                notes.push(note);
            }
        }
        let retiring = self.retiring.lock().unwrap().clone();
        for s in self.all_streams().iter().chain(&retiring) {
            s.hold();
        }
        self.shared.running.lock().unwrap().cutting = false;
        Ok(notes)
    }

    fn queued_work(&self) -> Result<Vec<QueuedWork>> {
        let mut all = Vec::new();
        for s in self.retiring.lock().unwrap().iter() {
            if !s.queued().is_empty() {
                return Err(BackendError::Other(format!(
                    "destroyed stream {:#x} still has work that has not started",
                    s.id
                )));
            }
        }
        for s in self.all_streams() {
            all.extend(s.queued());
        }
        all.sort_by_key(|(order, _)| *order);
        Ok(all.into_iter().map(|(_, w)| w).collect())
    }

    fn release_queues(&self) {
        self.held.store(false, Ordering::SeqCst);
        let retiring = self.retiring.lock().unwrap().clone();
        for s in self.all_streams().iter().chain(&retiring) {
            s.release();
        }
    }

    fn replay_work(
        &self,
        w: &QueuedWork,
        map: &dyn Fn(u64, u64) -> Option<u64>,
        host: Option<HostCall>,
    ) -> Result<u64> {
        let stream = StreamId(w.stream);
        let target = self.stream(stream)?;
        let noop: JobFn = Box::new(|| Ok(()));
        match &w.op {
            QueuedOp::Launch { func, grid, block, shared, cooperative, params, first_block, contexts } => {
                let dims = LaunchDims { grid: *grid, block: *block, shared: *shared, cooperative: *cooperative };
                let contexts = contexts
                    .iter()
                    .map(|c| crum_ptx::BlockContext::decode(c))
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(BackendError::Other)?;
                self.launch_from(stream, FuncId(*func), dims, params.clone(), *first_block, contexts)?;
            }
            QueuedOp::Copy { dst, dpitch, src, spitch, width, height, staged } => {
                let src = match staged {
                    Some(b) => Endpoint::Staged(Arc::new(b.clone())),
                    None => Endpoint::Addr(*src),
                };
                let op = CopyOp { dst: *dst, dpitch: *dpitch, src, spitch: *spitch, width: *width, height: *height };
                self.memcpy(stream, op)?;
            }
            QueuedOp::Memset { dst, pitch, value, width, height } => {
                self.memset(stream, *dst, *pitch, *value, *width, *height)?;
            }
            // An event destroyed after the recording was queued: nobody can observe it.
            QueuedOp::EventRecord { event } if self.event(EventId(*event)).is_ok() => {
                self.event_record(EventId(*event), stream)?;
            }
            QueuedOp::WaitFor { on_stream, on_seq } => {
                // Named by this proxy's sequence numbers from now on (a later checkpoint saves
                // it again); seq 0: complete before the cut.
                let (dep, on_seq) = match map(*on_stream, *on_seq) {
                    Some(n) => (vec![(self.stream(StreamId(*on_stream))?, n)], n),
                    None => (Vec::new(), 0),
                };
                target.submit(dep, Desc::op(QueuedOp::WaitFor { on_stream: *on_stream, on_seq }), noop);
            }
            QueuedOp::HostFunc { func, data } => {
                let call = host.ok_or_else(|| BackendError::Other("a host function to replay has no caller".into()))?;
                self.host_func_named(stream, call, *func, *data)?;
            }
            QueuedOp::EventRecord { .. } | QueuedOp::Marker => {
                self.submit(stream, Desc::op(QueuedOp::Marker), noop)?;
            }
        }
        Ok(target.submitted())
    }

    fn device_reset(&self) -> Result<()> {
        self.device_sync_inner();
        self.device_reset_synced()
    }

    fn device_reset_synced(&self) -> Result<()> {
        let ids: Vec<u64> = self
            .streams
            .lock()
            .unwrap()
            .keys()
            .copied()
            .filter(|&k| k != 0)
            .collect();
        for id in ids {
            let _ = self.stream_destroy(StreamId(id));
        }
        self.events.lock().unwrap().clear();
        self.textures.lock().unwrap().clear();
        for a in self.shared.vram.all() {
            if !self.shared.kernels.is_global(a) {
                let _ = self.shared.vram.free(a);
            }
        }
        self.shared.heap.reset();
        self.shared.sticky.store(0, Ordering::SeqCst);
        self.shared.async_err.store(0, Ordering::SeqCst);
        Ok(())
    }

    fn texture_create(&self, desc: &TexDesc) -> Result<u64> {
        // A level is at least half the one before, so a 64-bit extent has at most 64 levels.
        if desc.mip.as_ref().is_some_and(|m| m.levels.is_empty() || m.levels.len() > 64) {
            return Err(BackendError::Cuda(cuda::ERROR_INVALID_VALUE));
        }
        let id = self.handle();
        self.textures.lock().unwrap().insert(id, desc.clone());
        Ok(id)
    }

    fn texture_destroy(&self, tex: u64) -> Result<()> {
        self.textures
            .lock()
            .unwrap()
            .remove(&tex)
            .map(|_| ())
            .ok_or(BackendError::Cuda(cuda::ERROR_INVALID_VALUE))
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

    fn take_printf(&self, max: usize) -> Vec<u8> {
        let mut g = self.shared.printf.lock().unwrap();
        if g.len() <= max {
            std::mem::take(&mut *g)
        } else {
            let rest = g.split_off(max);
            std::mem::replace(&mut *g, rest)
        }
    }
}

/// What a checkpoint's cut does with the kernel running (`CRUM_CKPT_KERNEL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KernelPolicy {
    /// Wait for it.
    Drain,
    /// Stop it at the next block boundary (drain if it cannot be: grid-wide sync).
    Block,
    /// Flush it when it is idempotent for this launch, else as `Block`.
    Flush,
    /// Save its running blocks where they are (context save; grid-wide sync: drain).
    Save,
    /// The default: blocks short (under [`FLUSH_WORTH`]): `Block`; long and idempotent:
    /// `Flush`; long otherwise: `Save`.
    Auto,
}

/// Blocks at least this long make a flush worth its lost work.
const FLUSH_WORTH: std::time::Duration = std::time::Duration::from_millis(50);

impl KernelPolicy {
    fn from_env() -> KernelPolicy {
        match std::env::var("CRUM_CKPT_KERNEL").as_deref() {
            Ok("drain") => KernelPolicy::Drain,
            Ok("block") => KernelPolicy::Block,
            Ok("flush") => KernelPolicy::Flush,
            Ok("save") => KernelPolicy::Save,
            _ => KernelPolicy::Auto,
        }
    }

    fn name(self) -> &'static str {
        match self {
            KernelPolicy::Drain => "drain",
            KernelPolicy::Block => "block",
            KernelPolicy::Flush => "flush",
            KernelPolicy::Save => "save",
            KernelPolicy::Auto => "auto",
        }
    }

    /// The control mode for the running launch, and why.
    fn decide(self, shared: &Shared, l: &kernels::RunningLaunch) -> (u8, String) {
        use crum_ptx::LaunchCtl;
        let stoppable = !l.grid_sync && l.total_blocks > 1;
        let block = |why: String| {
            if stoppable {
                (LaunchCtl::STOP, why)
            } else if l.grid_sync {
                (LaunchCtl::RUN, format!("{why}; it synchronizes the whole grid, so it cannot stop between blocks"))
            } else {
                (LaunchCtl::RUN, format!("{why}; a grid of one block has no boundary to stop at"))
            }
        };
        let save = |why: String| {
            if l.grid_sync {
                (LaunchCtl::RUN, format!("{why}; it synchronizes the whole grid, so its blocks cannot be saved apart"))
            } else {
                (LaunchCtl::SAVE, why)
            }
        };
        match self {
            KernelPolicy::Drain => (LaunchCtl::RUN, "forced".into()),
            KernelPolicy::Block => block("forced".into()),
            KernelPolicy::Save => save("forced".into()),
            KernelPolicy::Flush | KernelPolicy::Auto => {
                let done = l.ctl.blocks_done.load(Ordering::Relaxed);
                let elapsed = l.started.elapsed();
                // Time per block so far (a lower bound while none has finished).
                let per_block = if done > 0 { elapsed / done as u32 } else { elapsed };
                if self == KernelPolicy::Auto && stoppable && per_block < FLUSH_WORTH {
                    return (LaunchCtl::STOP, format!("blocks take about {} ms", per_block.as_millis()));
                }
                match l.idempotence(shared) {
                    Ok(()) => (LaunchCtl::FLUSH, format!("idempotent for this launch; blocks take at least {} ms", per_block.as_millis())),
                    Err(e) if self == KernelPolicy::Auto => {
                        save(format!("not idempotent ({e}); blocks take at least {} ms", per_block.as_millis()))
                    }
                    Err(e) => block(format!("not idempotent: {e}")),
                }
            }
        }
    }
}

impl Emu {
    /// Enqueue a launch of the blocks from `first_block` on (0: the whole grid; more: the
    /// rest of a grid a checkpoint stopped at a block boundary).
    fn launch_from(
        &self,
        stream: StreamId,
        func: FuncId,
        dims: LaunchDims,
        params: Vec<u8>,
        first_block: u64,
        contexts: Vec<crum_ptx::BlockContext>,
    ) -> Result<()> {
        let job = self.shared.kernels.prepare(func.0, dims, params, &self.props)?;
        let total = dims.grid.iter().map(|&d| d as u64).product::<u64>();
        if first_block > total || (first_block == total && first_block != 0 && contexts.is_empty()) {
            return Err(BackendError::Other(format!("a saved launch starts at block {first_block} of {total}")));
        }
        if contexts.iter().any(|c| c.index >= first_block) {
            return Err(BackendError::Other("a saved block lies at or after the first block to run".into()));
        }
        let desc = Desc::op(job.desc(first_block, &contexts));
        let shared = self.shared.clone();
        let textures: Arc<HashMap<u64, TexDesc>> = Arc::new(self.textures.lock().unwrap().clone());
        let s = self.stream(stream)?;
        let deps = self.implicit_deps(&s);
        s.submit_resumable(deps, desc, Box::new(move || kernels::run(shared, job, textures, first_block, contexts)));
        Ok(())
    }

    /// The memfd behind a shared (managed/pinned) allocation starting at `addr`.
    fn shared_fd(&self, addr: u64) -> Option<i32> {
        self.shared.vram.memfd(addr)
    }

    fn device_sync_inner(&self) {
        for s in self.all_streams() {
            s.drain();
        }
    }
}

impl Drop for Emu {
    fn drop(&mut self) {
        for s in self.all_streams() {
            s.shutdown();
        }
    }
}

#[cfg(test)]
mod tests;
