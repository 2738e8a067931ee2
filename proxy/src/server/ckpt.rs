//! Checkpoint and restart of the device side (issue 6): the objects a restart must re-create,
//! the device state the interposer's checkpoint hooks save in the image, and its replay on a
//! fresh proxy. The state is backend-independent ([`crum_wire::ckpt::DeviceState`]), so an
//! image taken on one backend restarts on another.
//!
//! Checkpoint, in two requests while the program is quiesced (no CUDA call in flight, new
//! ones held at the interposer's gate): `CheckpointState` lets every lane drain, waits for the
//! device, and builds the state (its size and the size of what is copied at the cut go back);
//! `CheckpointData` (the program's threads stopped) writes the encoded state and the bytes of
//! the regions copied at the cut straight into the buffers the program allocated for them
//! (one copy, by cross-memory attach). Where device memory is the proxy's own private memory
//! (emu), that is only managed and pinned memory (shared with the program): device memory
//! stays out of the pause, held by a forked copy-on-write **snapshot** of the proxy that the
//! program's image writer reads by cross-memory attach while the program runs on
//! ([`crate::hostmem::snapshot_holder`]). `CRUM_CKPT_DEVICE=copy` copies everything at the cut instead (for
//! comparison). Restart: `RestoreDevice` reads the state from
//! the restored program, re-creates modules (variables at their addresses), allocations at
//! their addresses, kernels, streams, events and textures behind their handle values, fills
//! memory, and answers with the shared mappings the program must map again.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crum_wire::ckpt::{
    copied_at_cut, Carried, CarriedCall, DeviceState, QueuedOp, QueuedWork, SavedEvent, SavedFunction, SavedMemory,
    SavedModule, SavedStream, DEVICE_STATE_VERSION,
};
use crum_wire::channel::LANES;
use crum_wire::{cuda, Body, Reply, TexDesc};

use super::{code, Server};
use crate::backend::*;

/// `cudaFuncAttributeMaxDynamicSharedMemorySize`.
pub(super) const ATTR_MAX_DYNAMIC_SHARED: u32 = 8;
/// Largest encoded device state accepted from a restored program.
const MAX_STATE: u64 = 256 << 20;
/// How long a checkpoint waits for the other lanes' queued requests to be read.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);

/// Objects the program created that the backend alone cannot list for a restart.
#[derive(Default)]
pub(crate) struct Objects {
    /// module handle → (fat binary address, length) in the program.
    pub modules: BTreeMap<u64, (u64, u64)>,
    /// kernel handle → (module, name, max dynamic shared memory if set).
    pub functions: BTreeMap<u64, (u64, String, Option<i32>)>,
    /// stream handle → (flags, priority).
    pub streams: BTreeMap<u64, (u32, i32)>,
    /// event handle → flags.
    pub events: BTreeMap<u64, u32>,
    pub textures: BTreeMap<u64, TexDesc>,
    /// cudaHostRegister'ed ranges.
    pub registered: BTreeMap<u64, u64>,
}

/// What a lane's thread does, as a checkpoint's cut sees it.
#[derive(Debug, Clone, Default)]
pub(crate) enum LaneUse {
    /// Receiving, or handling a request (then `taken` says so).
    #[default]
    Idle,
    /// In a synchronizing call, waiting for these (stream, seq) points: the cut saves it as a
    /// call to resume; `then`: what the call does once they are reached.
    Parked { points: Vec<(u64, u64)>, syncing: bool, then: Then },
    /// Holding a call the cut keeps from starting.
    Held,
}

/// What a call that synchronizes the device does once the device reached its points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Then {
    /// Nothing: it is a synchronize.
    Answer,
    /// `cudaFree` of this address.
    Free(u64),
    /// Unload this module.
    Unload(u64),
    /// `cudaDeviceReset`.
    Reset,
}

/// The cut of a checkpoint (from `CheckpointState` to `CheckpointEnd`).
pub(crate) struct Cut {
    pub active: bool,
    pub lanes: Vec<LaneUse>,
}

impl Default for Cut {
    fn default() -> Cut {
        Cut { active: false, lanes: vec![LaneUse::Idle; LANES] }
    }
}

/// A checkpoint between its two requests.
pub(crate) struct Pending {
    state: Vec<u8>,
    regions: Vec<SavedRegion>,
    /// Offset of each region copied at the cut in the program's buffer.
    offsets: HashMap<u64, u64>,
    /// Bytes copied at the cut.
    copied_len: u64,
    /// Device memory comes from a snapshot of this process.
    snapshot: bool,
}

/// Whether checkpoints of this backend take device memory from a copy-on-write snapshot.
fn use_snapshot(caps: &Capabilities) -> bool {
    caps.fork_snapshot && std::env::var("CRUM_CKPT_DEVICE").map_or(true, |v| v != "copy")
}

/// A saved reply that handed out shared memory names the old proxy's memfd: the restored
/// allocation at that address has a new one.
fn renumber_memfd(raw: &[u8], shared: &[(u64, u64, crum_wire::AllocKind, i32)]) -> Vec<u8> {
    match crum_wire::msg::decode::<Reply>(raw) {
        Ok(mut r) => {
            if let Body::Alloc { addr, memfd: Some(fd) } = &mut r.body {
                if let Some(&(_, _, _, new)) = shared.iter().find(|s| s.0 == *addr) {
                    *fd = new;
                    return crum_wire::msg::encode(&r);
                }
            }
            raw.to_vec()
        }
        Err(_) => raw.to_vec(),
    }
}

fn failed(msg: String) -> std::result::Result<Body, u32> {
    tracing::error!("{msg}");
    Ok(Body::Failed(msg))
}

impl Server {
    pub(super) fn checkpoint_state(&self, lane: usize) -> std::result::Result<Body, u32> {
        let b = &*self.backend;
        {
            let mut cut = self.cut.lock().unwrap();
            cut.active = true;
            self.cut_on.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let (queue, cut_notes) = match self.cut_device(lane) {
            Ok(q) => q,
            Err(e) => {
                self.checkpoint_end();
                return failed(e);
            }
        };
        let carried = self.carried_calls(lane);
        let regions = match b.saved_regions() {
            Ok(r) => r,
            Err(e) => {
                // No checkpoint follows a failed step 1: the program must not stay held.
                self.checkpoint_end();
                return failed(format!("the {} device cannot save its memory: {e}", b.name()));
            }
        };
        let snapshot = use_snapshot(&b.capabilities());
        let mut offsets = HashMap::new();
        let mut data_len = 0u64;
        let mut copied_len = 0u64;
        let mut saved = Vec::new();
        for r in &regions {
            if copied_at_cut(r.kind, snapshot) {
                offsets.insert(r.addr, copied_len);
                copied_len += r.len;
            }
            saved.push(SavedMemory {
                addr: r.addr,
                len: r.len,
                kind: r.kind,
                symbol: r.symbol.as_ref().map(|(m, n)| (m.0, n.clone())),
                data_offset: data_len,
            });
            data_len += r.len;
        }
        let o = self.objects.lock().unwrap();
        let state = DeviceState {
            version: DEVICE_STATE_VERSION,
            backend: b.name().into(),
            device_name: b.device_props().name,
            next_handle: b.next_handle(),
            modules: o
                .modules
                .iter()
                .map(|(&handle, &(image_addr, image_len))| SavedModule { handle, image_addr, image_len })
                .collect(),
            functions: o
                .functions
                .iter()
                .map(|(&handle, (module, name, mds))| SavedFunction {
                    handle,
                    module: *module,
                    name: name.clone(),
                    max_dynamic_shared: *mds,
                })
                .collect(),
            regions: saved,
            registered: o.registered.iter().map(|(&a, &l)| (a, l)).collect(),
            streams: o
                .streams
                .iter()
                .map(|(&handle, &(flags, priority))| SavedStream { handle, flags, priority })
                .collect(),
            events: o
                .events
                .iter()
                .map(|(&handle, &flags)| SavedEvent {
                    handle,
                    flags,
                    completed_ago_ns: b.event_completed_ago(EventId(handle)).unwrap_or(None),
                })
                .collect(),
            textures: o.textures.iter().map(|(&h, d)| (h, d.clone())).collect(),
            data_len,
            pending_error: match self.deferred.load(std::sync::atomic::Ordering::SeqCst) {
                0 => b.peek_async_error().unwrap_or(0),
                c => c,
            },
            sticky_error: b
                .sticky_error()
                .unwrap_or(self.restored_sticky.load(std::sync::atomic::Ordering::SeqCst)),
            printf: {
                let mut p = self.restored_printf.lock().unwrap().clone();
                p.extend(b.peek_printf());
                p
            },
            queue,
            carried,
            cut_notes,
            unsaved: b.unsaved_state(),
        };
        if !state.queue.is_empty() || !state.carried.is_empty() {
            tracing::info!(queued = state.queue.len(), calls = state.carried.len(), "checkpoint cut without waiting for the device");
        }
        drop(o);
        let state = state.encode();
        let reply = Body::CkptPlan { state_len: state.len() as u64, copied_len, snapshot };
        *self.pending_ckpt.lock().unwrap() = Some(Pending { state, regions, offsets, copied_len, snapshot });
        Ok(reply)
    }

    /// Stop the device at the cut. Where the backend can (emu), its streams are held: the jobs
    /// running finish, the rest is returned to be saved, and calls waiting for the device stay
    /// parked; otherwise every lane's requests are drained and the device synchronized.
    /// Either way the calls that come in meanwhile wait unstarted ([`Server::wait_cut_over`]).
    fn cut_device(&self, lane: usize) -> std::result::Result<(Vec<QueuedWork>, Vec<String>), String> {
        let b = &*self.backend;
        if !self.queue_cut {
            if !self.wait_cut_quiet(lane) {
                return Err("the program's CUDA requests did not drain within 120 s".into());
            }
            code(b.device_sync()).map_err(|c| format!("the device did not finish its work ({})", cuda::name(c)))?;
            return Ok((Vec::new(), vec!["the device was drained (its queues cannot be held)".into()]));
        }
        let t0 = std::time::Instant::now();
        let mut notes = b.hold_queues().map_err(|e| format!("cannot hold the device's queues: {e}"))?;
        let held = t0.elapsed();
        if held > Duration::from_secs(1) {
            tracing::info!(
                ms = held.as_millis() as u64,
                "checkpoint cut waited for the work running on the device to finish (policy: drain)"
            );
        }
        if !self.wait_cut_quiet(lane) {
            return Err("the program's CUDA requests were not taken within 120 s".into());
        }
        match b.queued_work() {
            Ok(q) => Ok((q, notes)),
            Err(e) => {
                // What cannot be saved unstarted is waited for.
                tracing::warn!("{e}: the checkpoint waits for the device's queues");
                notes.push(format!("{e}: the device was drained"));
                b.release_queues();
                code(b.device_sync()).map_err(|c| format!("the device did not finish its work ({})", cuda::name(c)))?;
                b.hold_queues().map_err(|e| format!("cannot hold the device's queues: {e}"))?;
                let q = b.queued_work().map_err(|e| format!("cannot save the device's queues: {e}"))?;
                Ok((q, notes))
            }
        }
    }

    /// Wait (up to [`DRAIN_LIMIT`]) until every other lane has no request unread or in hand,
    /// or is parked in a synchronizing call, or holds a call the cut keeps back.
    fn wait_cut_quiet(&self, lane: usize) -> bool {
        let t0 = std::time::Instant::now();
        let quiet = || {
            let cut = self.cut.lock().unwrap();
            (0..LANES).filter(|&i| i != lane).all(|i| match cut.lanes[i] {
                LaneUse::Parked { .. } | LaneUse::Held => true,
                LaneUse::Idle => {
                    // `taken` first: a request leaves the ring only after it is counted.
                    self.taken[i].load(std::sync::atomic::Ordering::SeqCst) == 0 && !self.channel.pending(i)
                }
            })
        };
        while t0.elapsed() < DRAIN_LIMIT {
            if quiet() {
                return true;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        // Which lanes held the cut up, for the log (a lane with requests no thread serves, a
        // request taken and never finished…).
        let cut = self.cut.lock().unwrap();
        let busy: Vec<String> = (0..LANES)
            .filter(|&i| i != lane)
            .filter(|&i| {
                matches!(cut.lanes[i], LaneUse::Idle)
                    && (self.taken[i].load(std::sync::atomic::Ordering::SeqCst) != 0 || self.channel.pending(i))
            })
            .map(|i| {
                format!(
                    "lane {i}: {} taken, {}, {}{}",
                    self.taken[i].load(std::sync::atomic::Ordering::SeqCst),
                    if self.channel.pending(i) { "requests waiting in its ring" } else { "ring empty" },
                    if self.serving[i].load(std::sync::atomic::Ordering::SeqCst) { "served" } else { "no thread serves it" },
                    if self.stale[i].load(std::sync::atomic::Ordering::SeqCst) { ", stale" } else { "" },
                )
            })
            .collect();
        tracing::error!(lanes = %busy.join("; "), "the cut could not take every lane's requests");
        false
    }

    /// The calls the cut leaves open: parked synchronizing calls, replies written and not
    /// read, and calls a restart brought that the program has not resumed yet.
    fn carried_calls(&self, lane: usize) -> Vec<CarriedCall> {
        let id = self.channel.id();
        let mut out = Vec::new();
        let cut = self.cut.lock().unwrap();
        for i in (0..LANES).filter(|&i| i != lane) {
            let (written, read) = self.channel.replies(i);
            match &cut.lanes[i] {
                LaneUse::Parked { points, syncing, then } => out.push(CarriedCall {
                    channel: id,
                    lane: i as u32,
                    seq: written.wrapping_add(1),
                    what: match *then {
                        Then::Answer => Carried::Wait { points: points.clone(), syncing: *syncing },
                        Then::Free(addr) => Carried::Free { points: points.clone(), addr },
                        Then::Unload(module) => Carried::Unload { points: points.clone(), module },
                        Then::Reset => Carried::Reset { points: points.clone() },
                    },
                }),
                LaneUse::Idle if written != read => out.push(CarriedCall {
                    channel: id,
                    lane: i as u32,
                    seq: written,
                    what: Carried::Reply(self.channel.last_reply(i)),
                }),
                _ => {}
            }
        }
        drop(cut);
        for (&(channel, lane, seq), what) in self.carried.lock().unwrap().iter() {
            out.push(CarriedCall { channel, lane, seq, what: what.clone() });
        }
        out
    }

    /// The checkpoint is over (in the program that goes on): the queues run again and the
    /// calls held or parked go on.
    pub(super) fn checkpoint_end(&self) {
        self.pending_ckpt.lock().unwrap().take();
        self.backend.release_queues();
        let mut cut = self.cut.lock().unwrap();
        cut.active = false;
        self.cut_on.store(false, std::sync::atomic::Ordering::SeqCst);
        drop(cut);
        self.cut_changed.notify_all();
    }

    pub(super) fn cut_state(&self, lane: usize, u: LaneUse) {
        self.cut.lock().unwrap().lanes[lane] = u;
    }

    /// A call that wants a reply arrived during a cut: it waits, unstarted, until the cut ends.
    pub(super) fn wait_cut_over(&self, lane: usize) {
        let mut cut = self.cut.lock().unwrap();
        if !cut.active {
            return;
        }
        cut.lanes[lane] = LaneUse::Held;
        while cut.active {
            cut = self.cut_changed.wait(cut).unwrap();
        }
        cut.lanes[lane] = LaneUse::Idle;
    }

    /// A synchronizing call: wait for `on`. Where the backend names what it waits for
    /// (emu), the wait is parked, so that a checkpoint can cut it and a restart resume it.
    pub(super) fn block_on(&self, lane: usize, on: SyncOn) -> std::result::Result<(), u32> {
        let b = &*self.backend;
        if !self.queue_cut {
            return code(match on {
                SyncOn::Device => b.device_sync(),
                SyncOn::Stream(s) => b.stream_sync(s),
                SyncOn::Event(e) => b.event_sync(e),
            });
        }
        let points = code(b.sync_points(on))?;
        self.wait_parked(lane, points, true, Then::Answer)
    }

    /// `cudaFree(addr)`: it synchronizes the device first. Where queues can be held, it waits
    /// as a parked call (a cut saves it and a restart resumes it, freeing then) and frees once
    /// the device reached the work submitted before it; a blocking device sync inside the free
    /// would wait for ever on queues a cut holds.
    pub(super) fn free(&self, lane: usize, addr: u64) -> std::result::Result<(), u32> {
        self.sync_then(lane, Then::Free(addr))
    }

    /// A call that synchronizes the device and then does `then` (`cudaFree`, a module
    /// unload, `cudaDeviceReset`). Where queues can be held it waits as a parked call (a cut
    /// saves it and a restart resumes it, doing `then` once) instead of synchronizing inside
    /// its handler, which would wait for ever on the queues a cut holds.
    pub(super) fn sync_then(&self, lane: usize, then: Then) -> std::result::Result<(), u32> {
        let b = &*self.backend;
        if !self.queue_cut {
            return match then {
                Then::Answer => code(b.device_sync()),
                Then::Free(addr) => code(b.free(addr)),
                Then::Unload(module) => code(b.unload_module(ModuleId(module))).map(|_| self.unloaded(module)),
                Then::Reset => code(b.device_reset()).map(|_| self.was_reset()),
            };
        }
        let points = code(b.sync_points(SyncOn::Device))?;
        self.wait_parked(lane, points, true, then)?;
        self.after_sync(then)
    }

    /// `then` of [`Self::sync_then`], the device having reached the call's points.
    fn after_sync(&self, then: Then) -> std::result::Result<(), u32> {
        let b = &*self.backend;
        match then {
            Then::Answer => Ok(()),
            Then::Free(addr) => code(b.free_synced(addr)),
            Then::Unload(module) => code(b.unload_module_synced(ModuleId(module))).map(|_| self.unloaded(module)),
            Then::Reset => code(b.device_reset_synced()).map(|_| self.was_reset()),
        }
    }

    fn wait_parked(&self, lane: usize, points: Vec<(u64, u64)>, syncing: bool, then: Then) -> std::result::Result<(), u32> {
        self.cut_state(lane, LaneUse::Parked { points: points.clone(), syncing, then });
        // From here a checkpoint's cut saves the call instead of waiting for it (tests wait
        // for this line before they checkpoint).
        tracing::debug!(target: "crum_proxy::parked", lane, ?points, "a call waits on the device");
        let r = code(self.backend.wait_points(&points));
        let mut cut = self.cut.lock().unwrap();
        // A cut that saw this call parked saves it so: it answers only after the cut.
        while cut.active {
            cut = self.cut_changed.wait(cut).unwrap();
        }
        cut.lanes[lane] = LaneUse::Idle;
        r
    }

    /// `Request::Resume`: the reply to a call a checkpoint cut — the saved reply itself
    /// (`Err(bytes)`), the answer once its wait is over, or `NotCarried`.
    pub(super) fn resume(&self, lane: usize, key: (u64, u32, u32)) -> std::result::Result<Reply, Vec<u8>> {
        let what = self.carried.lock().unwrap().remove(&key);
        match what {
            None => Ok(Reply::ok(Body::NotCarried)),
            Some(Carried::Reply(bytes)) => Err(bytes),
            Some(Carried::Wait { points, syncing }) => {
                let r = self.wait_parked(lane, points, syncing, Then::Answer).map(|_| Body::None);
                Ok(self.finish(r, syncing))
            }
            Some(Carried::Free { points, addr }) => Ok(self.finish_then(lane, points, Then::Free(addr))),
            Some(Carried::Unload { points, module }) => Ok(self.finish_then(lane, points, Then::Unload(module))),
            Some(Carried::Reset { points }) => Ok(self.finish_then(lane, points, Then::Reset)),
        }
    }

    /// A resumed call that synchronizes the device and then does `then`.
    fn finish_then(&self, lane: usize, points: Vec<(u64, u64)>, then: Then) -> Reply {
        let r = self.wait_parked(lane, points, true, then).and_then(|_| self.after_sync(then)).map(|_| Body::None);
        self.finish(r, true)
    }

    pub(super) fn checkpoint_data(
        &self,
        state_addr: u64,
        state_len: u64,
        data_addr: u64,
        data_len: u64,
        hold_fd: i32,
    ) -> std::result::Result<Body, u32> {
        let Some(p) = self.pending_ckpt.lock().unwrap().take() else {
            return failed("device checkpoint data requested without its state".into());
        };
        if state_len != p.state.len() as u64 || data_len != p.copied_len {
            return failed("device checkpoint buffers do not match the state's sizes".into());
        }
        let app = self.app()?;
        app.write(state_addr, &p.state).map_err(|_| cuda::ERROR_INVALID_VALUE)?;
        let mut sink = |r: &SavedRegion, off: u64, bytes: &[u8]| -> std::io::Result<()> {
            if !copied_at_cut(r.kind, p.snapshot) {
                return Ok(());
            }
            let base = p.offsets.get(&r.addr).copied().ok_or_else(|| std::io::Error::other("region changed"))?;
            app.write(data_addr + base + off, bytes)
        };
        let regions = match self.backend.snapshot(&mut sink) {
            Ok(r) => r,
            Err(e) => return failed(format!("saving device memory failed: {e}")),
        };
        if regions != p.regions {
            return failed("device memory changed between the two checkpoint steps".into());
        }
        if !p.snapshot {
            return Ok(Body::Value(0));
        }
        match crate::hostmem::snapshot_holder(app.pid(), hold_fd) {
            Ok(pid) => Ok(Body::Value(pid as u64)),
            Err(e) => failed(format!("cannot take a copy-on-write snapshot of device memory: {e}")),
        }
    }

    pub(super) fn restore_device(self: &Arc<Self>, state_addr: u64, state_len: u64, data_addr: u64, data_len: u64) -> std::result::Result<Body, u32> {
        if state_len > MAX_STATE {
            return failed(format!("the device state is {state_len} bytes, more than crum accepts"));
        }
        let app = self.app()?;
        let mut raw = vec![0u8; state_len as usize];
        app.read(state_addr, &mut raw).map_err(|_| cuda::ERROR_INVALID_VALUE)?;
        let st = match DeviceState::decode(&raw) {
            Ok(s) => s,
            Err(e) => return failed(e),
        };
        if st.data_len != data_len {
            return failed(format!("the device data holds {data_len} bytes, the state names {}", st.data_len));
        }
        match self.replay(&st, data_addr).and_then(|v| self.replay_queue(&st, &v).map(|_| v)) {
            Ok(v) => Ok(Body::Restored(v)),
            Err(e) => failed(e),
        }
    }

    /// Enqueue the work saved unstarted again, in its order, and keep the cut calls for the
    /// program to resume, their waits renamed to this proxy's sequence numbers.
    fn replay_queue(self: &Arc<Self>, st: &DeviceState, shared: &[(u64, u64, crum_wire::AllocKind, i32)]) -> std::result::Result<(), String> {
        let b = &*self.backend;
        if (!st.queue.is_empty() || st.carried.iter().any(|c| !matches!(c.what, Carried::Reply(_)))) && !self.queue_cut {
            return Err(format!(
                "the image holds {} queued device operations and {} waiting calls; the {} device cannot replay them (restart on the emulated device)",
                st.queue.len(),
                st.carried.len(),
                b.name()
            ));
        }
        let mut seqs: HashMap<(u64, u64), u64> = HashMap::new();
        for w in &st.queue {
            let host = match w.op {
                QueuedOp::HostFunc { func, data } => Some(self.host_call(func, data)),
                _ => None,
            };
            let new = b
                .replay_work(w, &|s, q| seqs.get(&(s, q)).copied(), host)
                .map_err(|e| format!("cannot enqueue the saved {} on stream {:#x} again: {e}", w.op.name(), w.stream))?;
            seqs.insert((w.stream, w.seq), new);
        }
        let mut carried = self.carried.lock().unwrap();
        // A point not in the queue was reached before the cut.
        let renumber = |points: &[(u64, u64)]| -> Vec<(u64, u64)> {
            points.iter().filter_map(|&(s, q)| seqs.get(&(s, q)).map(|&n| (s, n))).collect()
        };
        for c in &st.carried {
            let what = match &c.what {
                Carried::Reply(r) => Carried::Reply(renumber_memfd(r, shared)),
                Carried::Wait { points, syncing } => Carried::Wait { points: renumber(points), syncing: *syncing },
                Carried::Free { points, addr } => Carried::Free { points: renumber(points), addr: *addr },
                Carried::Unload { points, module } => Carried::Unload { points: renumber(points), module: *module },
                Carried::Reset { points } => Carried::Reset { points: renumber(points) },
            };
            carried.insert((c.channel, c.lane, c.seq), what);
        }
        if !st.queue.is_empty() || !st.carried.is_empty() {
            tracing::info!(queued = st.queue.len(), calls = st.carried.len(), "saved device work enqueued again");
        }
        Ok(())
    }

    fn replay(&self, st: &DeviceState, data_addr: u64) -> std::result::Result<Vec<(u64, u64, crum_wire::AllocKind, i32)>, String> {
        let b = &*self.backend;
        let dev = b.name();
        let handle = |h: u64| b.set_next_handle(h).map_err(|e| format!("the {dev} device cannot restore handles: {e}"));
        let app = self.app().map_err(|c| format!("no program attached ({})", cuda::description(c)))?;
        let mut objs = self.objects.lock().unwrap();
        if !objs.modules.is_empty() || !objs.streams.is_empty() {
            return Err("the proxy already serves device state; a restore needs a fresh one".into());
        }
        for m in &st.modules {
            if m.image_len > super::MAX_MODULE {
                return Err(format!("module {} is {} bytes, more than crum accepts", m.handle, m.image_len));
            }
            let mut image = vec![0u8; m.image_len as usize];
            app.read(m.image_addr, &mut image)
                .map_err(|e| format!("cannot read module {}'s fat binary at {:#x} in the program: {e}", m.handle, m.image_addr))?;
            let vars: Vec<(String, u64, crum_wire::AllocKind)> = st
                .regions
                .iter()
                .filter_map(|r| match &r.symbol {
                    Some((mid, name)) if *mid == m.handle => Some((name.clone(), r.addr, r.kind)),
                    _ => None,
                })
                .collect();
            handle(m.handle)?;
            let id = b.restore_module(&image, &vars).map_err(|e| format!("cannot load module {} again on the {dev} device: {e}", m.handle))?;
            if id.0 != m.handle {
                return Err(format!("module {} came back as handle {}", m.handle, id.0));
            }
            objs.modules.insert(m.handle, (m.image_addr, m.image_len));
        }
        let regions: Vec<SavedRegion> = st
            .regions
            .iter()
            .map(|r| SavedRegion {
                addr: r.addr,
                len: r.len,
                kind: r.kind,
                symbol: r.symbol.as_ref().map(|(m, n)| (ModuleId(*m), n.clone())),
            })
            .collect();
        let offsets: HashMap<u64, u64> = st.regions.iter().map(|r| (r.addr, r.data_offset)).collect();
        let mut source = |r: &SavedRegion, off: u64, buf: &mut [u8]| -> std::io::Result<()> {
            let base = offsets.get(&r.addr).copied().ok_or_else(|| std::io::Error::other("unknown region"))?;
            app.read(data_addr + base + off, buf)
        };
        let allocs = b.restore(&regions, &mut source).map_err(|e| {
            format!("cannot re-create device memory at its checkpointed addresses on the {dev} device: {e}")
        })?;
        let mut shared = Vec::new();
        for (r, a) in st.regions.iter().zip(&allocs) {
            if a.addr != r.addr {
                return Err(format!("device allocation {:#x} came back at {:#x}", r.addr, a.addr));
            }
            if let Some(fd) = a.memfd {
                shared.push((r.addr, r.len, r.kind, fd));
            }
        }
        for f in &st.functions {
            handle(f.handle)?;
            let info = b
                .function(ModuleId(f.module), &f.name)
                .map_err(|e| format!("kernel `{}` cannot be found again: {e}", f.name))?;
            if info.handle != f.handle {
                return Err(format!("kernel `{}` came back as handle {}", f.name, info.handle));
            }
            if let Some(v) = f.max_dynamic_shared {
                b.func_set_attribute(FuncId(f.handle), ATTR_MAX_DYNAMIC_SHARED, v)
                    .map_err(|e| format!("kernel `{}`: dynamic shared memory {v}: {e}", f.name))?;
            }
            objs.functions.insert(f.handle, (f.module, f.name.clone(), f.max_dynamic_shared));
        }
        for s in &st.streams {
            handle(s.handle)?;
            let id = b.stream_create(s.flags, s.priority).map_err(|e| format!("cannot create stream {:#x}: {e}", s.handle))?;
            if id.0 != s.handle {
                return Err(format!("stream {:#x} came back as {:#x}", s.handle, id.0));
            }
            objs.streams.insert(s.handle, (s.flags, s.priority));
        }
        for e in &st.events {
            handle(e.handle)?;
            let id = b.event_create(e.flags).map_err(|x| format!("cannot create event {:#x}: {x}", e.handle))?;
            if id.0 != e.handle {
                return Err(format!("event {:#x} came back as {:#x}", e.handle, id.0));
            }
            if let Some(ago) = e.completed_ago_ns {
                // Best effort: a backend without settable timestamps leaves it unrecorded.
                if let Err(x) = b.event_restore(id, ago) {
                    tracing::warn!("event {:#x} comes back unrecorded: {x}", e.handle);
                }
            }
            objs.events.insert(e.handle, e.flags);
        }
        for (h, d) in &st.textures {
            handle(*h)?;
            let id = b.texture_create(d).map_err(|e| format!("cannot create texture object {h:#x}: {e}"))?;
            if id != *h {
                return Err(format!("texture object {h:#x} came back as {id:#x}"));
            }
            objs.textures.insert(*h, d.clone());
        }
        for &(a, l) in &st.registered {
            b.host_register(a, l).map_err(|e| format!("cannot register host memory {a:#x}+{l}: {e}"))?;
            objs.registered.insert(a, l);
        }
        self.deferred.store(st.pending_error, std::sync::atomic::Ordering::SeqCst);
        self.restored_sticky.store(st.sticky_error, std::sync::atomic::Ordering::SeqCst);
        *self.restored_printf.lock().unwrap() = st.printf.clone();
        handle(st.next_handle.max(b.next_handle()))?;
        Ok(shared)
    }
}

