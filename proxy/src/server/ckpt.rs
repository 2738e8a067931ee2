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
use std::time::Duration;

use crum_wire::ckpt::{
    copied_at_cut, DeviceState, SavedEvent, SavedFunction, SavedMemory, SavedModule, SavedStream, DEVICE_STATE_VERSION,
};
use crum_wire::{cuda, Body, TexDesc};

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

fn failed(msg: String) -> std::result::Result<Body, u32> {
    tracing::error!("{msg}");
    Ok(Body::Failed(msg))
}

impl Server {
    pub(super) fn checkpoint_state(&self, lane: usize) -> std::result::Result<Body, u32> {
        let b = &*self.backend;
        if !self.wait_quiet(lane, DRAIN_LIMIT) {
            return failed("the program's queued CUDA requests did not drain within 120 s".into());
        }
        code(b.device_sync())?;
        let regions = match b.saved_regions() {
            Ok(r) => r,
            Err(e) => return failed(format!("the {} device cannot save its memory: {e}", b.name())),
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
        };
        drop(o);
        let state = state.encode();
        let reply = Body::CkptPlan { state_len: state.len() as u64, copied_len, snapshot };
        *self.pending_ckpt.lock().unwrap() = Some(Pending { state, regions, offsets, copied_len, snapshot });
        Ok(reply)
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

    pub(super) fn restore_device(&self, state_addr: u64, state_len: u64, data_addr: u64, data_len: u64) -> std::result::Result<Body, u32> {
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
        match self.replay(&st, data_addr) {
            Ok(v) => Ok(Body::Restored(v)),
            Err(e) => failed(e),
        }
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

