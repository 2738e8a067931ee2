//! The CUDA side of checkpoints (issue 6): the gate every runtime entry point passes, and the
//! hooks the checkpoint agent (`crum_ckpt::agent`) calls.
//!
//! - `quiesce` (the program's threads still run): close the gate, so that new CUDA calls wait
//!   at their entry; wait until every call in flight either waits for the proxy's answer or
//!   has it (a thread that gets its answer now waits at the gate on its way out, having sent
//!   nothing more); ask the proxy for the device state (`CheckpointState`). The proxy cuts
//!   the device there: on the emulated device the streams are held (the jobs running finish,
//!   the rest is saved unstarted) and calls waiting for the device are saved as waiting;
//!   elsewhere the device is drained. Calls that reach the proxy during the cut wait there
//!   unstarted. After a restart, a thread that waited for an answer asks the new proxy for it
//!   by the call's name (`client::call`). The device cannot change after this: nothing
//!   reaches the proxy until the gate opens, and `resume` ends the cut (`CheckpointEnd`).
//! - `collect` (threads stopped): bring managed memory up to date in the proxy (dirty shadow
//!   pages), allocate the state and the bytes copied at the cut and let the proxy write them
//!   straight into them (`CheckpointData`). Where the proxy takes a copy-on-write snapshot of
//!   device memory (emu), only managed and pinned memory is copied now: the device data
//!   section is gathered by the image writer after the program runs again, device memory
//!   read from the proxy's snapshot (`crum_ckpt::agent::SectionData::Gathered`), which lives
//!   until the writer closes its copy of a hold pipe.
//! - `resume`: open the gate (in the program that goes on after the fork).
//! - `restore` (in a restarted process, threads stopped): connect to the fresh proxy that
//!   `crum restart` started (its channel descriptor is in the restart information), replay the
//!   device state (`RestoreDevice`), map managed and pinned memory again, open the gate.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crum_ckpt::agent::{Piece, PieceFrom, SectionData};
use crum_wire::ckpt::{copied_at_cut, DeviceState, SECTION_DEVICE, SECTION_DEVICE_DATA};
use crum_wire::{AllocKind, Body, Request};

use crate::client;

static CLOSED: AtomicBool = AtomicBool::new(false);
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// Threads in flight that wait inside a call to the proxy.
static IN_CALL: AtomicUsize = AtomicUsize::new(0);
/// Threads in flight that got their answer while the gate was closed and wait at it.
static AT_GATE: AtomicUsize = AtomicUsize::new(0);
/// The proxy holds a cut (`CheckpointState` answered) until `resume` ends it.
static CUT: AtomicBool = AtomicBool::new(false);
static GATE: Mutex<()> = Mutex::new(());
static OPENED: Condvar = Condvar::new();
/// Longest a checkpoint waits for CUDA calls in flight (a long kernel, a long copy).
const IN_FLIGHT_LIMIT: Duration = Duration::from_secs(3600);

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// The plan from `CheckpointState`, used by `collect`: (state bytes, bytes copied at the cut,
/// snapshot).
static SIZES: Mutex<Option<(u64, u64, bool)>> = Mutex::new(None);

/// Entry of a runtime API call: waits while a checkpoint holds the gate. Returns whether the
/// call was counted (the outermost entry of this thread); pass it to [`leave`].
pub fn enter() -> bool {
    let outer = DEPTH
        .try_with(|d| {
            let v = d.get();
            d.set(v + 1);
            v == 0
        })
        .unwrap_or(false);
    if !outer {
        return false;
    }
    loop {
        IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
        if !CLOSED.load(Ordering::SeqCst) {
            return true;
        }
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        let mut g = GATE.lock().unwrap_or_else(|p| p.into_inner());
        while CLOSED.load(Ordering::SeqCst) {
            g = OPENED.wait_timeout(g, Duration::from_millis(50)).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}

/// Exit of a runtime API call.
pub fn leave(counted: bool) {
    let _ = DEPTH.try_with(|d| d.set(d.get().saturating_sub(1)));
    if counted {
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A thread starts waiting for the proxy's answer. Returns whether it counts (it is a
/// program thread inside a CUDA call); pass it to [`call_end`].
pub fn call_begin() -> bool {
    let inside = DEPTH.try_with(|d| d.get() > 0).unwrap_or(false);
    if inside {
        IN_CALL.fetch_add(1, Ordering::SeqCst);
    }
    inside
}

/// The answer came. While a checkpoint holds the gate, the thread waits here: it sends
/// nothing more until the checkpoint is over (the cut saved what it had sent).
pub fn call_end(counted: bool) {
    if !counted {
        return;
    }
    if !CLOSED.load(Ordering::SeqCst) {
        IN_CALL.fetch_sub(1, Ordering::SeqCst);
        return;
    }
    AT_GATE.fetch_add(1, Ordering::SeqCst);
    IN_CALL.fetch_sub(1, Ordering::SeqCst);
    let mut g = GATE.lock().unwrap_or_else(|p| p.into_inner());
    while CLOSED.load(Ordering::SeqCst) {
        g = OPENED.wait_timeout(g, Duration::from_millis(50)).unwrap_or_else(|p| p.into_inner()).0;
    }
    drop(g);
    AT_GATE.fetch_sub(1, Ordering::SeqCst);
}

/// Calls in flight that are neither waiting for the proxy nor waiting at the gate.
fn running_calls() -> usize {
    let waiting = IN_CALL.load(Ordering::SeqCst) + AT_GATE.load(Ordering::SeqCst);
    IN_FLIGHT.load(Ordering::SeqCst).saturating_sub(waiting)
}

/// Opens the gate without taking `GATE`: after a restart, a thread the checkpoint stopped
/// while it held the lock (between two waits in [`enter`]) is released only once the restore
/// is done, so taking the lock here could wait forever. A waiter that misses the notification
/// sees the gate open at its next wake-up (50 ms).
fn open_gate() {
    CLOSED.store(false, Ordering::SeqCst);
    OPENED.notify_all();
}

/// Registers the hooks (from the library constructor, for programs under `crum run`).
pub fn install() {
    crum_ckpt::agent::set_hooks(crum_ckpt::agent::Hooks { quiesce, collect, resume, restore });
}

/// Whether this process is a CUDA program (it connected, or registered a fat binary or
/// kernels to use).
fn is_cuda_program() -> bool {
    client::connected() || crate::state::has_registrations() || crate::api::launch::has_modules()
}

fn quiesce() -> Result<(), String> {
    *SIZES.lock().unwrap_or_else(|p| p.into_inner()) = None;
    if !is_cuda_program() {
        return Ok(());
    }
    CLOSED.store(true, Ordering::SeqCst);
    let t0 = Instant::now();
    let mut said = false;
    while running_calls() != 0 {
        if !said && t0.elapsed() > Duration::from_secs(1) {
            client::init_logging();
            tracing::warn!(
                calls = running_calls(),
                "checkpoint waits for CUDA calls in flight to reach the device proxy"
            );
            said = true;
        }
        if t0.elapsed() > IN_FLIGHT_LIMIT {
            return Err(format!("CUDA calls still in flight after {} s", IN_FLIGHT_LIMIT.as_secs()));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    if !client::connected() {
        // Kernels registered, no call made yet: the restart connects to its own proxy.
        return Ok(());
    }
    let td = Instant::now();
    // Set before asking: whatever becomes of the answer (an error after the proxy started the
    // cut), `resume` ends the cut, so the program is never left held.
    CUT.store(true, Ordering::SeqCst);
    let sizes = match client::agent_call(&Request::CheckpointState)? {
        Body::CkptPlan { state_len, copied_len, snapshot } => (state_len, copied_len, snapshot),
        other => return Err(format!("unexpected reply to a device checkpoint: {other:?}")),
    };
    let drain = td.elapsed();
    if said || drain > Duration::from_secs(1) {
        tracing::info!(ms = drain.as_millis() as u64, "device drained for the checkpoint");
    }
    crum_ckpt::agent::PHASE_DRAIN_US.store(drain.as_micros() as u64, Ordering::Relaxed);
    *SIZES.lock().unwrap_or_else(|p| p.into_inner()) = Some(sizes);
    Ok(())
}

/// Runs while the program's threads are stopped: allocations come from the agent's arena;
/// no logging, no C stdio.
fn collect() -> Result<Vec<(String, SectionData)>, String> {
    if !is_cuda_program() {
        return Ok(Vec::new());
    }
    let sizes = *SIZES.try_lock().map_err(|_| "checkpoint state busy".to_string())?;
    let Some((state_len, copied_len, snapshot)) = sizes else {
        // A CUDA program that has not used the device yet: an empty state still tells the
        // restart to start a proxy.
        let empty = DeviceState::empty();
        return Ok(vec![
            (SECTION_DEVICE.to_string(), SectionData::Bytes(empty.encode())),
            (SECTION_DEVICE_DATA.to_string(), SectionData::Bytes(Vec::new())),
        ]);
    };
    // The program's threads are stopped: the proxy's managed memory gets every page they
    // wrote, and nothing changes it until they run again.
    crate::managed::checkpoint_flush()?;
    let mut state = vec![0u8; state_len as usize];
    let mut data = vec![0u8; copied_len as usize];
    // The snapshot's hold pipe: the proxy opens the read end through /proc; the write end
    // goes to the image writer (the agent closes its own copy once the writer runs).
    let mut hold = [-1i32; 2];
    if snapshot {
        // Above the program's descriptors: the program runs while the writer holds it.
        let (r, w) = crum_ckpt::highfd::pipe_high().map_err(|e| format!("cannot create the device snapshot's pipe: {e}"))?;
        hold = [r, w];
    }
    let (read_end, write_end) = (crum_ckpt::agent::Hold::new(hold[0]), crum_ckpt::agent::Hold::new(hold[1]));
    let reply = client::agent_call(&Request::CheckpointData {
        state_addr: state.as_mut_ptr() as u64,
        state_len,
        data_addr: data.as_mut_ptr() as u64,
        data_len: copied_len,
        hold_fd: hold[0],
    })?;
    drop(read_end);
    crum_ckpt::agent::PHASE_DEVICE_COPIED.store(copied_len, Ordering::Relaxed);
    let holder = match reply {
        Body::Value(pid) => pid as i32,
        other => return Err(format!("unexpected reply to the device checkpoint data: {other:?}")),
    };
    let decoded = DeviceState::decode(&state)?;
    for u in &decoded.unsaved {
        crum_ckpt::agent::name_unsaved(format!("not saved by the {} device: {u}", decoded.backend));
    }
    if !snapshot {
        crum_ckpt::agent::PHASE_DEVICE_BYTES.store(copied_len, Ordering::Relaxed);
        return Ok(vec![
            (SECTION_DEVICE.to_string(), SectionData::Bytes(state)),
            (SECTION_DEVICE_DATA.to_string(), SectionData::Bytes(data)),
        ]);
    }
    if holder <= 0 {
        return Err("the proxy took no device snapshot".into());
    }
    let mut pieces = Vec::with_capacity(decoded.regions.len());
    let mut copied = 0u64;
    let mut regions: Vec<_> = decoded.regions.iter().collect();
    regions.sort_by_key(|r| r.data_offset);
    let mut at = 0u64;
    for r in regions {
        if r.data_offset != at {
            return Err(format!("the device state's region at {:#x} is not where the data continues", r.addr));
        }
        at += r.len;
        let from = if copied_at_cut(r.kind, true) {
            copied += r.len;
            PieceFrom::Local(copied - r.len)
        } else {
            PieceFrom::Remote { pid: holder, addr: r.addr }
        };
        pieces.push(Piece { len: r.len, from });
    }
    if copied != copied_len || at != decoded.data_len {
        return Err("the device state does not match the data the proxy copied".into());
    }
    crum_ckpt::agent::PHASE_DEVICE_BYTES.store(at, Ordering::Relaxed);
    Ok(vec![
        (SECTION_DEVICE.to_string(), SectionData::Bytes(state)),
        (SECTION_DEVICE_DATA.to_string(), SectionData::Gathered { local: data, pieces, hold: write_end }),
    ])
}

fn resume() {
    if CUT.swap(false, Ordering::SeqCst) {
        if let Err(e) = client::agent_call(&Request::CheckpointEnd) {
            client::init_logging();
            tracing::error!("ending the device checkpoint: {e}");
        }
    }
    if CLOSED.load(Ordering::SeqCst) {
        open_gate();
    }
}

fn restore(read: &dyn Fn(&str) -> Option<Vec<u8>>) -> Result<(), String> {
    // The cut belonged to the proxy of before the restart.
    CUT.store(false, Ordering::SeqCst);
    // This process (not a forked child) may still start a proxy of its own later.
    crate::own_proxy::restarted();
    let Some(state) = read(SECTION_DEVICE) else {
        // Not a CUDA program when it was saved.
        open_gate();
        return Ok(());
    };
    let data = read(SECTION_DEVICE_DATA).unwrap_or_default();
    let decoded = DeviceState::decode(&state)?;
    if decoded.data_len != data.len() as u64 {
        return Err(format!(
            "the image's device data holds {} bytes, its device state names {}",
            data.len(),
            decoded.data_len
        ));
    }
    crate::managed::before_restore()?;
    let fd = crum_ckpt::agent::restart_channel_fd()
        .ok_or("this CUDA program's image was restarted without a device proxy (use `crum restart`)")?;
    crum_ckpt::agent::exclude_fd(fd);
    client::reconnect(fd)?;
    // Before the device state: the saved queue starts running with it, and a kernel that
    // calls device `malloc` then makes the new heap at the default size (and a later limit
    // is refused: the restart failed now and then under load).
    crate::api::stream_attrs::replay_before_restore()?;
    let shared = match client::agent_call(&Request::RestoreDevice {
        state_addr: state.as_ptr() as u64,
        state_len: state.len() as u64,
        data_addr: data.as_ptr() as u64,
        data_len: data.len() as u64,
    })? {
        Body::Restored(v) => v,
        other => return Err(format!("unexpected reply to a device restore: {other:?}")),
    };
    for (addr, len, kind, memfd) in shared {
        let r = match kind {
            AllocKind::Managed => crate::managed::restored(addr, len, memfd),
            _ => client::map_shared(addr, len, memfd),
        };
        r.map_err(|e| {
            format!("cannot map the {kind:?} memory at {addr:#x} ({len} bytes) again ({})", crum_wire::cuda::name(e))
        })?;
    }
    crate::managed::after_restore()?;
    crate::api::stream_attrs::replay_after_restart()?;
    open_gate();
    Ok(())
}
