//! The server loop: one thread per claimed lane decodes requests, validates them, calls the
//! backend and replies. A request is untrusted: every handle is looked up, every size capped,
//! every application address goes through cross-memory attach (which the kernel validates),
//! and a malformed message costs the sender an error code, never the proxy.
//!
//! Errors of pipelined requests are kept and reported by the next reply (as CUDA reports
//! asynchronous errors at the next call); synchronizing calls return them as their status.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crum_wire::channel::{LANES, MAX_REPLY};
use crum_wire::{cuda, Body, Channel, CopyKind, Reply, Request, ServerLane};

use crate::backend::*;
use crate::hostmem::AppMemory;

mod ckpt;

/// Largest fat binary the proxy accepts.
const MAX_MODULE: u64 = 1 << 30;
/// Largest async copy from pageable memory staged in the proxy (larger ones run synchronously).
const MAX_STAGED: u64 = 256 << 20;

struct PendingCall {
    id: u64,
    func: u64,
    data: u64,
}

#[derive(Default)]
struct Callbacks {
    queue: Mutex<VecDeque<PendingCall>>,
    ready: Condvar,
    done: Mutex<HashMap<u64, bool>>,
    finished: Condvar,
    next: AtomicU64,
}

/// State shared by all lane threads.
pub struct Server {
    channel: Arc<Channel>,
    backend: Arc<dyn Backend>,
    app: Mutex<Option<Arc<AppMemory>>>,
    deferred: AtomicU32,
    callbacks: Callbacks,
    /// What a checkpoint must re-create (modules, kernels, streams, events, ...).
    objects: Mutex<ckpt::Objects>,
    /// The device state built by `CheckpointState`, written out by `CheckpointData`.
    pending_ckpt: Mutex<Option<ckpt::Pending>>,
    /// After a restart: the sticky error the program's context had (any backend).
    restored_sticky: AtomicU32,
    /// After a restart: device printf output produced before the checkpoint and not yet
    /// delivered; it goes out first with the next synchronizing reply.
    restored_printf: Mutex<Vec<u8>>,
    /// Lanes a thread serves now.
    serving: [std::sync::atomic::AtomicBool; LANES],
    /// Lanes of a program image that an exec replaced: their threads release them.
    stale: [std::sync::atomic::AtomicBool; LANES],
    /// Requests taken from each lane and not yet handled (see `recv_counting`; host-callback
    /// waits are not counted).
    taken: [AtomicUsize; LANES],
    /// A checkpoint's cut: what each lane does while the device is held.
    cut: Mutex<ckpt::Cut>,
    cut_changed: Condvar,
    /// `cut.active`, readable without the lock (set under it).
    cut_on: std::sync::atomic::AtomicBool,
    /// After a restart: calls the checkpoint cut, by (channel, lane, reply number), until
    /// the program resumes them (`Request::Resume`); unclaimed ones go into the next image.
    carried: Mutex<HashMap<(u64, u32, u32), crum_wire::ckpt::Carried>>,
    /// The backend holds queues at a cut (non-draining checkpoints).
    queue_cut: bool,
}

fn code<T>(r: Result<T>) -> std::result::Result<T, u32> {
    r.map_err(|e| {
        if let BackendError::Unsupported { .. } = e {
            tracing::debug!("{e}");
        }
        e.code()
    })
}

impl Server {
    pub fn new(channel: Arc<Channel>, backend: Arc<dyn Backend>) -> Arc<Server> {
        Arc::new(Server {
            channel,
            app: Mutex::new(None),
            deferred: AtomicU32::new(0),
            callbacks: Callbacks::default(),
            objects: Mutex::default(),
            pending_ckpt: Mutex::default(),
            restored_sticky: AtomicU32::new(0),
            restored_printf: Mutex::default(),
            serving: std::array::from_fn(|_| Default::default()),
            stale: std::array::from_fn(|_| Default::default()),
            taken: std::array::from_fn(|_| Default::default()),
            cut: Mutex::default(),
            cut_changed: Condvar::new(),
            cut_on: Default::default(),
            carried: Mutex::default(),
            // `CRUM_CKPT_QUEUE=drain`: checkpoints wait for the device as before issue 16 (for
            // comparison, and as a way out).
            queue_cut: backend.capabilities().queue_cut
                && std::env::var("CRUM_CKPT_QUEUE").map_or(true, |v| v != "drain"),
            backend,
        })
    }

    /// Serve until `keep_going` returns false.
    pub fn run(self: &Arc<Self>, keep_going: &dyn Fn() -> bool) {
        self.channel.set_ready(std::process::id());
        while keep_going() {
            for lane in self.channel.accept_lanes(Duration::from_millis(100)) {
                let s = self.clone();
                let name = format!("crum-lane-{}", lane.index());
                if let Err(e) = std::thread::Builder::new()
                    .name(name)
                    .spawn(move || s.serve_lane(lane))
                {
                    tracing::error!("cannot start a lane thread: {e}");
                }
            }
        }
    }

    fn serve_lane(self: Arc<Self>, mut lane: ServerLane) {
        let lane_index = lane.index();
        self.serving[lane_index].store(true, Ordering::SeqCst);
        let alive = || !self.stale[lane_index].load(Ordering::SeqCst);
        loop {
            // `taken` counts the request from the moment it leaves the ring: a drain
            // (`wait_quiet`) never sees a lane empty and idle while a request it took is not
            // yet handled (a lane thread descheduled between the two used to let a
            // checkpoint save device memory without a launch it had already taken).
            let inc = match lane.recv_counting(&alive, Some(&self.taken[lane_index])) {
                Ok(i) => i,
                Err(_) if !alive() => {
                    // The thread that used it belonged to a program image an exec replaced.
                    tracing::debug!(lane = lane_index, "lane of a replaced program image released");
                    self.stale[lane_index].store(false, Ordering::SeqCst);
                    self.serving[lane_index].store(false, Ordering::SeqCst);
                    lane.release();
                    return;
                }
                Err(e) => {
                    tracing::warn!(lane = lane.index(), "lane closed: {e}");
                    self.serving[lane_index].store(false, Ordering::SeqCst);
                    return;
                }
            };
            let req = match inc.request {
                Ok(Request::Close) => {
                    self.taken[lane_index].fetch_sub(1, Ordering::SeqCst);
                    self.serving[lane_index].store(false, Ordering::SeqCst);
                    lane.release();
                    return;
                }
                Ok(r) => r,
                Err(e) => {
                    self.taken[lane_index].fetch_sub(1, Ordering::SeqCst);
                    tracing::warn!("malformed request: {e}");
                    if inc.wants_reply {
                        lane.reply(&Reply::err(cuda::ERROR_INVALID_VALUE));
                    } else {
                        self.defer(cuda::ERROR_INVALID_VALUE);
                    }
                    continue;
                }
            };
            let syncing = is_syncing(&req);
            // A host-callback wait blocks for as long as the program runs; it is not work
            // that a drain (exit, checkpoint) waits for.
            let counted = !matches!(req, Request::WaitCallback);
            let raw = matches!(
                req,
                Request::CheckpointState
                    | Request::CheckpointData { .. }
                    | Request::CheckpointEnd
                    | Request::RestoreDevice { .. }
            );
            if !counted {
                self.taken[lane_index].fetch_sub(1, Ordering::SeqCst);
            }
            // While a checkpoint holds the device, a call waits here unstarted (after a
            // restart the program sends it again); the checkpoint's own requests and the
            // host-callback traffic it may need pass.
            if inc.wants_reply && self.cut_on.load(Ordering::SeqCst) && !passes_cut(&req) {
                self.wait_cut_over(lane_index);
            }
            if let Request::Resume { channel, lane: l, seq } = req {
                let r = self.resume(lane_index, (channel, l, seq));
                self.taken[lane_index].fetch_sub(1, Ordering::SeqCst);
                match r {
                    Ok(reply) => lane.reply(&reply),
                    Err(raw) => lane.reply_raw(&raw),
                }
                continue;
            }
            let result =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.handle(req, lane_index)))
                    .unwrap_or_else(|_| {
                        tracing::error!("request handler panicked");
                        Err(cuda::ERROR_UNKNOWN)
                    });
            if counted {
                self.taken[lane_index].fetch_sub(1, Ordering::SeqCst);
            }
            if inc.wants_reply {
                if raw {
                    // Checkpoint steps leave the program's pending errors and printf output
                    // alone: they are saved with the device state.
                    lane.reply(&match result {
                        Ok(body) => Reply::ok(body),
                        Err(c) => Reply::err(c),
                    });
                    continue;
                }
                lane.reply(&self.finish(result, syncing));
            } else if let Err(c) = result {
                self.defer(c);
            }
        }
    }

    fn defer(&self, c: u32) {
        let _ = self
            .deferred
            .compare_exchange(0, c, Ordering::SeqCst, Ordering::SeqCst);
    }

    fn finish(&self, result: std::result::Result<Body, u32>, syncing: bool) -> Reply {
        let mut r = match result {
            Ok(body) => Reply::ok(body),
            Err(c) => Reply::err(c),
        };
        let pending = match self.deferred.swap(0, Ordering::SeqCst) {
            0 => self.backend.take_async_error().unwrap_or(0),
            c => c,
        };
        if let Some(s) = self.sticky() {
            r.status = s;
        } else if syncing && r.status == 0 {
            r.status = pending;
        } else {
            r.deferred = pending;
        }
        if syncing {
            // Output from before the checkpoint first, then what the device printed since
            // (work replayed after the restart included) — in one reply when it fits, so the
            // program's own output after this call comes after both.
            let mut held = self.restored_printf.lock().unwrap();
            let at = held.len().min(MAX_REPLY / 2);
            let rest = held.split_off(at);
            let mut out = std::mem::replace(&mut *held, rest);
            if held.is_empty() {
                out.extend(self.backend.take_printf(MAX_REPLY / 2 - out.len()));
            }
            r.printf = out;
        }
        r
    }

    fn app(&self) -> std::result::Result<Arc<AppMemory>, u32> {
        self.app
            .lock()
            .unwrap()
            .clone()
            .ok_or(cuda::ERROR_INITIALIZATION)
    }

    fn host_side_pinned(&self, addr: u64, len: u64) -> bool {
        self.backend.owns(addr, len).is_some() || self.backend.is_registered(addr, len)
    }

    /// Module `module` was unloaded: forget it and its functions.
    fn unloaded(&self, module: u64) {
        let mut o = self.objects.lock().unwrap();
        o.modules.remove(&module);
        o.functions.retain(|_, f| f.0 != module);
    }

    /// The device was reset: its streams, events and textures are gone.
    fn was_reset(&self) {
        let mut o = self.objects.lock().unwrap();
        o.streams.clear();
        o.events.clear();
        o.textures.clear();
    }

    /// The context's sticky error, set on this backend or carried over a restart.
    fn sticky(&self) -> Option<u32> {
        self.backend.sticky_error().or(
            Some(self.restored_sticky.load(Ordering::Relaxed)).filter(|&c| c != 0),
        )
    }

    fn handle(self: &Arc<Self>, req: Request, lane: usize) -> std::result::Result<Body, u32> {
        let b = &*self.backend;
        // After a sticky error the context is corrupt: calls that would move data or start
        // work fail with it and do nothing (a GPU neither copies nor launches any more).
        if does_work(&req) {
            if let Some(s) = self.sticky() {
                return Err(s);
            }
        }
        match req {
            Request::Hello { pid } => {
                let mut g = self.app.lock().unwrap();
                match &*g {
                    None => {}
                    // The program's process executed a new program (its first connection
                    // comes from the same process): nothing of the old image is left.
                    Some(a) if a.pid() == pid => self.reset_for_new_image(lane),
                    // The interposer refuses a second process (it reads the channel's
                    // owner first); a stray Hello changes nothing.
                    Some(_) => return Err(cuda::ERROR_DEVICES_UNAVAILABLE),
                }
                let app = Arc::new(AppMemory::new(pid));
                b.attach_app(app.clone());
                *g = Some(app);
                self.channel.set_app_pid(pid);
                Ok(Body::Value(std::process::id() as u64))
            }
            Request::Close => Ok(Body::None),
            Request::DeviceProps => Ok(Body::Props(b.device_props())),
            Request::MemGetInfo => code(b.mem_info()).map(|(f, t)| Body::Pair(f, t)),
            Request::Malloc { size, kind } => {
                if size == 0 {
                    return Ok(Body::Alloc {
                        addr: 0,
                        memfd: None,
                    });
                }
                code(b.malloc(size, kind)).map(|a| Body::Alloc {
                    addr: a.addr,
                    memfd: a.memfd,
                })
            }
            Request::MapAt { addr, size } => code(b.map_at(addr, size)).map(|a| Body::Alloc { addr: a.addr, memfd: a.memfd }),
            Request::Free { addr } => self.free(lane, addr).map(|_| Body::None),
            Request::HostRegister { addr, len } => {
                code(b.host_register(addr, len))?;
                self.objects.lock().unwrap().registered.insert(addr, len);
                Ok(Body::None)
            }
            Request::HostUnregister { addr } => {
                code(b.host_unregister(addr))?;
                self.objects.lock().unwrap().registered.remove(&addr);
                Ok(Body::None)
            }
            Request::LoadModule { addr, len } => {
                if !(16..=MAX_MODULE).contains(&len) {
                    return Err(cuda::ERROR_INVALID_KERNEL_IMAGE);
                }
                let mut image = vec![0u8; len as usize];
                self.app()?
                    .read(addr, &mut image)
                    .map_err(|_| cuda::ERROR_INVALID_KERNEL_IMAGE)?;
                let m = code(b.load_module(&image))?;
                self.objects.lock().unwrap().modules.insert(m.0, (addr, len));
                Ok(Body::Value(m.0))
            }
            Request::UnloadModule { module } => self.sync_then(lane, ckpt::Then::Unload(module)).map(|_| Body::None),
            Request::GetFunction { module, name } => {
                let f = code(b.function(ModuleId(module), &name))?;
                self.objects.lock().unwrap().functions.entry(f.handle).or_insert((module, name, None));
                Ok(Body::Func(f))
            }
            Request::GetSymbol { module, name } => {
                code(b.symbol(ModuleId(module), &name)).map(|(a, s)| Body::Pair(a, s))
            }
            Request::ModuleKernels { module } => code(b.module_kernels(ModuleId(module))).map(Body::Names),
            Request::ManagedVar { module, name } => code(b.managed_var(ModuleId(module), &name))
                .map(|a| Body::Alloc {
                    addr: a.addr,
                    memfd: a.memfd,
                }),
            Request::FuncSetAttribute { func, attr, value } => {
                code(b.func_set_attribute(FuncId(func), attr, value))?;
                if attr == ckpt::ATTR_MAX_DYNAMIC_SHARED {
                    if let Some(f) = self.objects.lock().unwrap().functions.get_mut(&func) {
                        f.2 = Some(value);
                    }
                }
                Ok(Body::None)
            }
            Request::Launch {
                func,
                grid,
                block,
                shared,
                stream,
                cooperative,
                params,
            } => {
                let dims = LaunchDims {
                    grid,
                    block,
                    shared,
                    cooperative,
                };
                code(b.launch(StreamId(stream), FuncId(func), dims, params)).map(|_| Body::None)
            }
            Request::Memcpy {
                dst,
                src,
                len,
                kind,
                stream,
                sync,
            } => self.copy(lane, CopyArgs {
                dst,
                dpitch: len,
                src,
                spitch: len,
                width: len,
                height: 1,
                kind,
                stream,
                sync,
            }),
            Request::Memcpy2D {
                dst,
                dpitch,
                src,
                spitch,
                width,
                height,
                kind,
                stream,
                sync,
            } => {
                if dpitch < width || spitch < width {
                    return Err(cuda::ERROR_INVALID_PITCH_VALUE);
                }
                self.copy(lane, CopyArgs {
                    dst,
                    dpitch,
                    src,
                    spitch,
                    width,
                    height,
                    kind,
                    stream,
                    sync,
                })
            }
            Request::Memset {
                dst,
                value,
                len,
                stream,
                sync,
            } => {
                code(b.memset(StreamId(stream), dst, len, value, len, 1))?;
                self.sync_if(lane, sync, stream)
            }
            Request::Memset2D {
                dst,
                pitch,
                value,
                width,
                height,
                stream,
                sync,
            } => {
                if pitch < width {
                    return Err(cuda::ERROR_INVALID_PITCH_VALUE);
                }
                code(b.memset(StreamId(stream), dst, pitch, value, width, height))?;
                self.sync_if(lane, sync, stream)
            }
            Request::StreamCreate { flags, priority } => {
                let s = code(b.stream_create(flags, priority))?;
                self.objects.lock().unwrap().streams.insert(s.0, (flags, priority));
                Ok(Body::Value(s.0))
            }
            Request::StreamDestroy { stream } => {
                code(b.stream_destroy(StreamId(stream)))?;
                self.objects.lock().unwrap().streams.remove(&stream);
                Ok(Body::None)
            }
            Request::StreamQuery { stream } => {
                if code(b.stream_query(StreamId(stream)))? {
                    Ok(Body::None)
                } else {
                    Err(cuda::ERROR_NOT_READY)
                }
            }
            Request::StreamSync { stream } => {
                self.block_on(lane, SyncOn::Stream(StreamId(stream))).map(|_| Body::None)
            }
            Request::StreamWaitEvent { stream, event } => {
                code(b.stream_wait_event(StreamId(stream), EventId(event))).map(|_| Body::None)
            }
            Request::StreamSetAttr { stream, attr } => {
                code(b.stream_set_attr(StreamId(stream), attr)).map(|_| Body::None)
            }
            Request::ResetPersistingL2 => code(b.reset_persisting_l2()).map(|_| Body::None),
            Request::SetPersistingL2Limit { bytes } => {
                code(b.set_persisting_l2_limit(bytes)).map(|_| Body::None)
            }
            Request::SetHeapLimit { bytes } => code(b.set_heap_limit(bytes)).map(|_| Body::None),
            Request::EventCreate { flags } => {
                let e = code(b.event_create(flags))?;
                self.objects.lock().unwrap().events.insert(e.0, flags);
                Ok(Body::Value(e.0))
            }
            Request::EventDestroy { event } => {
                code(b.event_destroy(EventId(event)))?;
                self.objects.lock().unwrap().events.remove(&event);
                Ok(Body::None)
            }
            Request::EventRecord { event, stream } => {
                code(b.event_record(EventId(event), StreamId(stream))).map(|_| Body::None)
            }
            Request::EventQuery { event } => {
                if code(b.event_query(EventId(event)))? {
                    Ok(Body::None)
                } else {
                    Err(cuda::ERROR_NOT_READY)
                }
            }
            Request::EventSync { event } => self.block_on(lane, SyncOn::Event(EventId(event))).map(|_| Body::None),
            Request::EventElapsed { start, end } => {
                code(b.event_elapsed(EventId(start), EventId(end))).map(Body::Float)
            }
            Request::HostFunc { stream, func, data } => {
                code(b.host_func_named(StreamId(stream), self.host_call(func, data), func, data)).map(|_| Body::None)
            }
            Request::WaitCallback => {
                let mut q = self.callbacks.queue.lock().unwrap();
                loop {
                    if self.stale[lane].load(Ordering::SeqCst) {
                        return Err(cuda::ERROR_DEVICES_UNAVAILABLE);
                    }
                    if let Some(c) = q.pop_front() {
                        return Ok(Body::Callback {
                            id: c.id,
                            func: c.func,
                            data: c.data,
                        });
                    }
                    q = self
                        .callbacks
                        .ready
                        .wait_timeout(q, Duration::from_millis(200))
                        .unwrap()
                        .0;
                }
            }
            Request::CallbackDone { id } => {
                let mut d = self.callbacks.done.lock().unwrap();
                match d.get_mut(&id) {
                    Some(done) => {
                        *done = true;
                        self.callbacks.finished.notify_all();
                        Ok(Body::None)
                    }
                    None => Err(cuda::ERROR_INVALID_VALUE),
                }
            }
            Request::DeviceSync => self.block_on(lane, SyncOn::Device).map(|_| Body::None),
            Request::DeviceReset => self.sync_then(lane, ckpt::Then::Reset).map(|_| Body::None),
            Request::TexCreate { desc } => {
                let t = code(b.texture_create(&desc))?;
                self.objects.lock().unwrap().textures.insert(t, desc);
                Ok(Body::Value(t))
            }
            Request::TexDestroy { tex } => {
                code(b.texture_destroy(tex))?;
                self.objects.lock().unwrap().textures.remove(&tex);
                Ok(Body::None)
            }
            // Program exit (context teardown): first let every other lane's queued requests
            // reach the device (the exiting program's threads sent them before this), then
            // finish device work so its printf output and errors are delivered.
            Request::Flush => {
                self.wait_quiet(lane, Duration::from_secs(2));
                self.block_on(lane, SyncOn::Device).map(|_| Body::None)
            }
            Request::CheckpointState => self.checkpoint_state(lane),
            Request::CheckpointEnd => {
                self.checkpoint_end();
                Ok(Body::None)
            }
            // Answered by `serve_lane` before it gets here.
            Request::Resume { .. } => Err(cuda::ERROR_UNKNOWN),
            Request::CheckpointData { state_addr, state_len, data_addr, data_len, hold_fd } => {
                self.checkpoint_data(state_addr, state_len, data_addr, data_len, hold_fd)
            }
            Request::RestoreDevice { state_addr, state_len, data_addr, data_len } => {
                self.restore_device(state_addr, state_len, data_addr, data_len)
            }
        }
    }

    /// Requests being handled right now (all lanes; not counting host-callback waits).
    fn busy(&self) -> usize {
        self.taken.iter().map(|t| t.load(Ordering::SeqCst)).sum()
    }

    /// Wait (at most `limit`) until no other lane holds unread requests and no request is
    /// being handled but the caller's; true if that happened.
    fn wait_quiet(&self, lane: usize, limit: Duration) -> bool {
        let t0 = std::time::Instant::now();
        let quiet = || !self.channel.any_pending(lane) && self.busy() <= 1;
        // A request counts as busy from before it leaves its ring (`recv_counting`), so one
        // look suffices: no request is ever neither pending nor busy.
        while t0.elapsed() < limit {
            if quiet() {
                return true;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        false
    }

    fn sync_if(&self, lane: usize, sync: bool, stream: u64) -> std::result::Result<Body, u32> {
        if sync {
            self.block_on(lane, SyncOn::Stream(StreamId(stream)))?;
        }
        Ok(Body::None)
    }

    /// The program's host function `func(data)`, run when its stream reaches it.
    fn host_call(self: &Arc<Self>, func: u64, data: u64) -> HostCall {
        let id = self.callbacks.next.fetch_add(1, Ordering::Relaxed) + 1;
        let me = self.clone();
        Box::new(move || me.run_callback(id, func, data))
    }

    fn copy(&self, lane: usize, a: CopyArgs) -> std::result::Result<Body, u32> {
        let b = &*self.backend;
        if a.width == 0 || a.height == 0 {
            return Ok(Body::None);
        }
        let span = |pitch: u64| {
            pitch
                .checked_mul(a.height - 1)
                .and_then(|x| x.checked_add(a.width))
                .ok_or(cuda::ERROR_INVALID_VALUE)
        };
        let (sspan, dspan) = (span(a.spitch)?, span(a.dpitch)?);
        let mut sync = a.sync;
        let mut src = Endpoint::Addr(a.src);
        if !sync {
            match a.kind {
                // From pageable memory: take the bytes now (the app may reuse the buffer as
                // soon as the call returns), or copy synchronously when too large to stage.
                CopyKind::HostToDevice if !self.host_side_pinned(a.src, sspan) => {
                    if sspan > MAX_STAGED {
                        sync = true;
                    } else {
                        let mut buf = vec![0u8; (a.width * a.height) as usize];
                        let app = self.app()?;
                        for row in 0..a.height {
                            let w = a.width as usize;
                            let off = row as usize * w;
                            app.read(a.src + row * a.spitch, &mut buf[off..off + w])
                                .map_err(|_| cuda::ERROR_INVALID_VALUE)?;
                        }
                        src = Endpoint::Staged(Arc::new(buf));
                    }
                }
                // To pageable memory: CUDA returns only once the copy is done.
                CopyKind::DeviceToHost if !self.host_side_pinned(a.dst, dspan) => sync = true,
                _ => {}
            }
        }
        let spitch = if let Endpoint::Staged(_) = src {
            a.width
        } else {
            a.spitch
        };
        let op = CopyOp {
            dst: a.dst,
            dpitch: a.dpitch,
            src,
            spitch,
            width: a.width,
            height: a.height,
        };
        code(b.memcpy(StreamId(a.stream), op))?;
        self.sync_if(lane, sync, a.stream)
    }

    /// The program's process executed a new program, which connects on `lane`: the old
    /// image's lanes are released (their threads are gone), its host callbacks are never
    /// run (its code is gone), and its device state — modules, memory, streams, events,
    /// registrations, errors — is dropped, as a new process would find the device.
    fn reset_for_new_image(&self, lane: usize) {
        tracing::info!("the program executed a new program: device state of the old one dropped");
        for i in (0..LANES).filter(|&i| i != lane && self.serving[i].load(Ordering::SeqCst)) {
            self.stale[i].store(true, Ordering::SeqCst);
            self.channel.wake_server(i);
        }
        self.callbacks.queue.lock().unwrap().clear();
        for done in self.callbacks.done.lock().unwrap().values_mut() {
            *done = true;
        }
        self.callbacks.finished.notify_all();
        self.callbacks.ready.notify_all();
        let b = &*self.backend;
        let objects = std::mem::take(&mut *self.objects.lock().unwrap());
        for &addr in objects.registered.keys() {
            let _ = b.host_unregister(addr);
        }
        for &m in objects.modules.keys() {
            let _ = b.unload_module(ModuleId(m));
        }
        if let Err(e) = b.device_reset() {
            tracing::warn!("resetting the device for the new program: {e}");
        }
        let _ = b.take_async_error();
        let _ = b.take_printf(usize::MAX);
        self.deferred.store(0, Ordering::SeqCst);
        self.restored_sticky.store(0, Ordering::SeqCst);
        self.restored_printf.lock().unwrap().clear();
        *self.pending_ckpt.lock().unwrap() = None;
    }

    fn run_callback(&self, id: u64, func: u64, data: u64) {
        self.callbacks.done.lock().unwrap().insert(id, false);
        self.callbacks
            .queue
            .lock()
            .unwrap()
            .push_back(PendingCall { id, func, data });
        self.callbacks.ready.notify_one();
        let mut d = self.callbacks.done.lock().unwrap();
        while !d.get(&id).copied().unwrap_or(true) {
            d = self
                .callbacks
                .finished
                .wait_timeout(d, Duration::from_millis(200))
                .unwrap()
                .0;
        }
        d.remove(&id);
    }
}

struct CopyArgs {
    dst: u64,
    dpitch: u64,
    src: u64,
    spitch: u64,
    width: u64,
    height: u64,
    kind: CopyKind,
    stream: u64,
    sync: bool,
}

/// Calls after which device work is complete (their status carries asynchronous errors and
/// their reply carries device printf output).
/// Requests a checkpoint's cut lets through: its own steps and the host-callback traffic a
/// running host function needs.
fn passes_cut(r: &Request) -> bool {
    matches!(
        r,
        Request::CheckpointState
            | Request::CheckpointData { .. }
            | Request::CheckpointEnd
            | Request::RestoreDevice { .. }
            | Request::WaitCallback
            | Request::CallbackDone { .. }
            | Request::Hello { .. }
            | Request::Close
    )
}

/// Requests that move data or start device work: refused once the context has a sticky error.
fn does_work(r: &Request) -> bool {
    matches!(
        r,
        Request::Malloc { .. }
            | Request::MapAt { .. }
            | Request::HostRegister { .. }
            | Request::Launch { .. }
            | Request::Memcpy { .. }
            | Request::Memcpy2D { .. }
            | Request::Memset { .. }
            | Request::Memset2D { .. }
            | Request::HostFunc { .. }
            | Request::EventRecord { .. }
            | Request::StreamWaitEvent { .. }
    )
}

fn is_syncing(r: &Request) -> bool {
    match r {
        Request::DeviceSync
        | Request::StreamSync { .. }
        | Request::EventSync { .. }
        | Request::DeviceReset
        | Request::Flush
        | Request::Free { .. } => true,
        Request::Memcpy { sync, .. }
        | Request::Memcpy2D { sync, .. }
        | Request::Memset { sync, .. }
        | Request::Memset2D { sync, .. } => *sync,
        _ => false,
    }
}

/// Run the proxy on `channel` with `backend` until `keep_going` says stop.
pub fn serve(
    channel: Arc<Channel>,
    backend: Arc<dyn Backend>,
    keep_going: &dyn Fn() -> bool,
) -> Result<()> {
    let server = Server::new(channel, backend);
    server.run(keep_going);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emu::Emu;
    use crum_wire::{AllocKind, ClientLane};
    use std::sync::atomic::AtomicBool;

    fn start() -> (Arc<Channel>, ClientLane, Arc<AtomicBool>) {
        let ch = Arc::new(Channel::create().unwrap());
        let emu: Arc<dyn Backend> =
            Arc::new(Emu::with_window(crate::emu::memory::tests::window(), 1 << 34).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let (c2, s2) = (ch.clone(), stop.clone());
        std::thread::spawn(move || serve(c2, emu, &|| !s2.load(Ordering::SeqCst)));
        ch.wait_ready(Duration::from_secs(5)).unwrap();
        let mut lane = ch.claim_lane().unwrap();
        let r = lane
            .call(&Request::Hello {
                pid: std::process::id(),
            })
            .unwrap();
        assert_eq!(r.status, 0);
        (ch, lane, stop)
    }

    #[test]
    fn bad_requests_get_error_codes_and_the_proxy_keeps_serving() {
        let (_ch, mut lane, stop) = start();
        assert_eq!(
            lane.call(&Request::Free { addr: 0xdead }).unwrap().status,
            cuda::ERROR_INVALID_VALUE
        );
        assert_eq!(
            lane.call(&Request::StreamSync { stream: 77 })
                .unwrap()
                .status,
            cuda::ERROR_INVALID_RESOURCE_HANDLE
        );
        assert_eq!(
            lane.call(&Request::EventElapsed { start: 1, end: 2 })
                .unwrap()
                .status,
            cuda::ERROR_INVALID_RESOURCE_HANDLE
        );
        let r = lane
            .call(&Request::LoadModule {
                addr: 8,
                len: 1 << 40,
            })
            .unwrap();
        assert_eq!(r.status, cuda::ERROR_INVALID_KERNEL_IMAGE);
        let r = lane
            .call(&Request::Memcpy {
                dst: 0x10,
                src: 0x20,
                len: 64,
                kind: CopyKind::HostToDevice,
                stream: 0,
                sync: true,
            })
            .unwrap();
        assert_ne!(
            r.status, 0,
            "copy between unmapped application addresses fails"
        );
        assert_eq!(
            lane.call(&Request::DeviceSync).unwrap().status,
            0,
            "still serving"
        );
        stop.store(true, Ordering::SeqCst);
        std::mem::forget(lane);
    }

    #[test]
    fn pipelined_error_surfaces_at_the_next_call() {
        let (_ch, mut lane, stop) = start();
        lane.send(&Request::Memset {
            dst: 0x1234,
            value: 0,
            len: 8,
            stream: 0,
            sync: false,
        })
        .unwrap();
        let r = lane.call(&Request::MemGetInfo).unwrap();
        assert_eq!(r.status, 0);
        assert_eq!(r.deferred, cuda::ERROR_INVALID_VALUE);
        let r = lane.call(&Request::MemGetInfo).unwrap();
        assert_eq!(r.deferred, 0, "reported once");
        stop.store(true, Ordering::SeqCst);
        std::mem::forget(lane);
    }

    #[test]
    fn copies_move_application_bytes_through_device_memory() {
        let (_ch, mut lane, stop) = start();
        let Body::Alloc { addr, .. } = lane
            .call(&Request::Malloc {
                size: 4096,
                kind: AllocKind::Device,
            })
            .unwrap()
            .body
        else {
            panic!()
        };
        let src: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
        let mut dst = vec![0u8; 4096];
        let kind = CopyKind::HostToDevice;
        assert_eq!(
            lane.call(&Request::Memcpy {
                dst: addr,
                src: src.as_ptr() as u64,
                len: 4096,
                kind,
                stream: 0,
                sync: true
            })
            .unwrap()
            .status,
            0
        );
        let kind = CopyKind::DeviceToHost;
        assert_eq!(
            lane.call(&Request::Memcpy {
                dst: dst.as_mut_ptr() as u64,
                src: addr,
                len: 4096,
                kind,
                stream: 0,
                sync: true
            })
            .unwrap()
            .status,
            0
        );
        assert!(std::hint::black_box(&dst) == &src);
        stop.store(true, Ordering::SeqCst);
        std::mem::forget(lane);
    }

    #[test]
    fn async_copy_from_pageable_memory_is_staged_at_the_call() {
        let (_ch, mut lane, stop) = start();
        let Body::Alloc { addr, .. } = lane
            .call(&Request::Malloc {
                size: 64,
                kind: AllocKind::Device,
            })
            .unwrap()
            .body
        else {
            panic!()
        };
        let Body::Value(s) = lane
            .call(&Request::StreamCreate {
                flags: 0,
                priority: 0,
            })
            .unwrap()
            .body
        else {
            panic!()
        };
        let mut src = [1u8; 64];
        let req = Request::Memcpy {
            dst: addr,
            src: src.as_ptr() as u64,
            len: 64,
            kind: CopyKind::HostToDevice,
            stream: s,
            sync: false,
        };
        assert_eq!(lane.call(&req).unwrap().status, 0);
        src.fill(2); // the application reuses its buffer right after the call returns
        let mut back = vec![0u8; 64];
        let req = Request::Memcpy {
            dst: back.as_mut_ptr() as u64,
            src: addr,
            len: 64,
            kind: CopyKind::DeviceToHost,
            stream: s,
            sync: true,
        };
        assert_eq!(lane.call(&req).unwrap().status, 0);
        assert!(std::hint::black_box(&back).iter().all(|&b| b == 1));
        stop.store(true, Ordering::SeqCst);
        std::mem::forget(lane);
    }

    use proptest::prelude::*;

    /// Requests a buggy or hostile program could send (bounded sizes, so the test does not
    /// commit gigabytes; no host functions, which would wait for a callback thread).
    fn hostile() -> impl Strategy<Value = Request> {
        let addr = prop_oneof![
            Just(0u64),
            any::<u64>(),
            (0u64..1 << 20).prop_map(|o| crum_wire::DEVICE_VA_BASE + o),
            // Low addresses: never mapped, so copies "to the application" fault harmlessly.
            (0u64..1 << 20).prop_map(|o| 0x10 + o),
        ];
        let handle = prop_oneof![Just(0u64), 0x100u64..0x140, any::<u64>()];
        let len = 0u64..1 << 16;
        prop_oneof![
            (len.clone(), 0u8..3).prop_map(|(size, k)| Request::Malloc {
                size,
                kind: [AllocKind::Device, AllocKind::Managed, AllocKind::PinnedHost][k as usize]
            }),
            addr.clone().prop_map(|addr| Request::Free { addr }),
            (addr.clone(), addr.clone(), len.clone(), handle.clone(), any::<bool>()).prop_map(
                |(dst, src, len, stream, sync)| Request::Memcpy {
                    dst,
                    src,
                    len,
                    kind: CopyKind::DeviceToDevice,
                    stream,
                    sync
                }
            ),
            (addr.clone(), any::<u64>(), addr.clone(), any::<u64>(), 0u64..256, 0u64..64, handle.clone())
                .prop_map(|(dst, dpitch, src, spitch, width, height, stream)| Request::Memcpy2D {
                    dst,
                    dpitch,
                    src,
                    spitch,
                    width,
                    height,
                    kind: CopyKind::HostToDevice,
                    stream,
                    sync: true
                }),
            (addr.clone(), any::<u8>(), len.clone(), handle.clone())
                .prop_map(|(dst, value, len, stream)| Request::Memset { dst, value, len, stream, sync: false }),
            (addr.clone(), 0u64..1 << 20).prop_map(|(addr, len)| Request::LoadModule { addr, len }),
            (handle.clone(), ".{0,20}").prop_map(|(module, name)| Request::GetFunction { module, name }),
            (handle.clone(), ".{0,20}").prop_map(|(module, name)| Request::GetSymbol { module, name }),
            (handle.clone(), any::<[u32; 3]>(), any::<[u32; 3]>(), any::<u32>(), handle.clone(), any::<bool>(), proptest::collection::vec(any::<u8>(), 0..64))
                .prop_map(|(func, grid, block, shared, stream, cooperative, params)| Request::Launch {
                    func,
                    grid,
                    block,
                    shared,
                    stream,
                    cooperative,
                    params
                }),
            (any::<u32>(), any::<i32>()).prop_map(|(flags, priority)| Request::StreamCreate { flags, priority }),
            handle.clone().prop_map(|stream| Request::StreamDestroy { stream }),
            handle.clone().prop_map(|stream| Request::StreamQuery { stream }),
            handle.clone().prop_map(|stream| Request::StreamSync { stream }),
            (handle.clone(), handle.clone()).prop_map(|(stream, event)| Request::StreamWaitEvent { stream, event }),
            any::<u32>().prop_map(|flags| Request::EventCreate { flags }),
            (handle.clone(), handle.clone()).prop_map(|(event, stream)| Request::EventRecord { event, stream }),
            handle.clone().prop_map(|event| Request::EventSync { event }),
            (handle.clone(), handle.clone()).prop_map(|(start, end)| Request::EventElapsed { start, end }),
            any::<u64>().prop_map(|id| Request::CallbackDone { id }),
            (addr.clone(), len).prop_map(|(addr, len)| Request::HostRegister { addr, len }),
            addr.prop_map(|addr| Request::HostUnregister { addr }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        #[test]
        fn hostile_request_sequences_never_stop_the_proxy(reqs in proptest::collection::vec(hostile(), 1..40)) {
            let (_ch, mut lane, stop) = start();
            for r in &reqs {
                if r.is_pipelined() {
                    lane.send(r).unwrap();
                } else {
                    lane.call(r).unwrap();
                }
            }
            let r = lane.call(&Request::DeviceSync).unwrap();
            prop_assert!(r.status == 0 || r.status < 1000, "device sync answered");
            let r = lane.call(&Request::MemGetInfo).unwrap();
            prop_assert!(matches!(r.body, Body::Pair(..)) || r.status != 0);
            stop.store(true, Ordering::SeqCst);
            std::mem::forget(lane);
        }
    }
}
