//! Stream capture (`cudaStreamBeginCapture` … `cudaStreamEndCapture`): while a stream
//! captures, the work the program queues on it (launches, async copies and memsets, host
//! functions, external event records and waits) becomes nodes of a graph instead of
//! requests to the proxy. Each capturing stream has a *frontier*, the nodes the next
//! operation depends on; an event recorded in a capturing stream stands for its frontier, and
//! a stream that waits for such an event joins the capture (fork/join across streams).
//!
//! The rules CUDA enforces are kept: potentially unsafe calls (`cudaMalloc`, synchronous
//! copies, device synchronization) fail with `cudaErrorStreamCaptureUnsupported` and
//! invalidate the captures the calling thread's mode says they conflict with; synchronizing
//! or querying a capturing stream does the same; work on the legacy stream while a blocking
//! stream captures is `cudaErrorStreamCaptureImplicit`; an invalidated capture answers
//! `cudaErrorStreamCaptureInvalidated` until it is ended.
//!
//! A recapture (`cudaStreamBeginRecaptureToGraph`) captures into a graph made before: each
//! operation is matched, in order, with the graph's next node in creation order, which must
//! have the same type and the same dependencies, and takes the operation's parameters (the
//! program's callback, if any, is told each change, and whether `cudaGraphExecUpdate` can take
//! it). A topology or type mismatch, a changed memory allocation or free node, or a callback
//! that answers an error fails the recapture (`cudaErrorGraphRecaptureFailure`); the graph is
//! then in an undefined state, as CUDA says.
//!
//! Nothing here costs anything while no stream captures: one atomic load.
#![allow(non_upper_case_globals)]

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread::ThreadId;

use crum_wire::cuda;

use crate::abi_gen::*;
use crate::errors::CudaResult;
use crate::graph::{self, NodeKind};

/// `cudaStreamNonBlocking`.
const NON_BLOCKING: u32 = 1;
/// `cudaGraphRecaptureStatus` (driver_types.h, CUDA 13.3).
const cudaGraphRecaptureEligibleForUpdate: u32 = 0;
const cudaGraphRecaptureIneligibleForUpdate: u32 = 1;

struct Capture {
    graph: u64,
    /// `cudaStreamBeginCaptureToGraph`: the program's graph, kept if the capture fails.
    given: bool,
    mode: u32,
    owner: ThreadId,
    origin: u64,
    invalidated: bool,
    /// Participating stream → its frontier.
    streams: HashMap<u64, Vec<u64>>,
    recapture: Option<Recapture>,
}

/// The face that began a recapture, which decides the parameters its callback is given: a
/// `cudaGraphNodeParams` (`cudaStreamBeginRecaptureToGraph`) or a `CUgraphNodeParams`
/// (`cuStreamBeginRecaptureToGraph`, translated by `api::driver_graph`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Face {
    Runtime,
    Driver,
}

/// The state of a recapture (see the module docs).
struct Recapture {
    /// Position, in the graph's creation order, of the node the next operation must match.
    next: usize,
    /// `cudaGraphRecaptureCallbackData`: (function, user data).
    callback: Option<(u64, u64)>,
    face: Face,
    failed: bool,
}

/// A parameter change of a recaptured node, for the program's callback (called once the
/// capture lock is released: the callback may call CUDA).
struct Changed {
    capture: u64,
    callback: (u64, u64),
    face: Face,
    node: u64,
    old: NodeKind,
    new: NodeKind,
    status: u32,
}

#[derive(Default)]
struct Captures {
    next_id: u64,
    by_id: HashMap<u64, Capture>,
    stream: HashMap<u64, u64>,
    /// Event last recorded in a capturing stream → (capture, the nodes it stands for).
    events: HashMap<u64, (u64, Vec<u64>)>,
}

/// Captures in progress (the fast path's test).
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

fn captures() -> MutexGuard<'static, Captures> {
    static C: OnceLock<Mutex<Captures>> = OnceLock::new();
    C.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

thread_local! {
    /// `cudaThreadExchangeStreamCaptureMode`: which captures this thread's unsafe calls
    /// conflict with.
    static MODE: Cell<u32> = const { Cell::new(cudaStreamCaptureModeGlobal) };
    /// What the last `cudaStreamGetCaptureInfo` of this thread handed out.
    static INFO: RefCell<(Vec<u64>, Vec<u64>)> = const { RefCell::new((Vec::new(), Vec::new())) };
    /// Recaptured nodes whose callback is still to be called ([`done`]).
    static CHANGED: RefCell<Vec<Changed>> = const { RefCell::new(Vec::new()) };
}

/// After an operation added (or matched) a node with the capture lock held: release the
/// lock, then tell the program's recapture callback what changed; an error from it fails the
/// recapture.
fn done(c: MutexGuard<'static, Captures>, r: CudaResult<u64>) -> CudaResult<bool> {
    drop(c);
    let changed = CHANGED.try_with(|ch| std::mem::take(&mut *ch.borrow_mut())).unwrap_or_default();
    let mut result = r.map(|_| true);
    for ch in changed {
        if result.is_err() {
            break;
        }
        let (func, data) = ch.callback;
        // The program's code, outside any driver `_ptsz` call that recorded the operation: its
        // own stream 0 is the legacy stream.
        let answer = crate::state::outside_per_thread(|| match ch.face {
            Face::Runtime => crate::api::graph::recapture_callback(func, data, ch.node, &ch.old, &ch.new, ch.status),
            Face::Driver => crate::api::driver_graph::recapture_callback(func, data, ch.node, &ch.old, &ch.new, ch.status),
        });
        if answer != cuda::SUCCESS {
            let mut c = captures();
            if let Some(cap) = c.by_id.get_mut(&ch.capture) {
                cap.invalidated = true;
                if let Some(r) = cap.recapture.as_mut() {
                    r.failed = true;
                }
            }
            result = Err(cuda::ERROR_GRAPH_RECAPTURE_FAILURE);
        }
    }
    result
}

fn is_blocking(stream: u64) -> bool {
    let flags = crate::state::state()
        .streams
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&stream)
        .map_or(0, |f| f.0);
    flags & NON_BLOCKING == 0
}

impl Captures {
    fn invalidate(&mut self, id: u64) {
        if let Some(c) = self.by_id.get_mut(&id) {
            c.invalidated = true;
        }
    }

    /// The capture `stream` belongs to, refusing an invalidated one.
    fn live(&mut self, stream: u64) -> CudaResult<Option<u64>> {
        match self.stream.get(&stream) {
            Some(&id) if self.by_id[&id].invalidated => Err(cuda::ERROR_STREAM_CAPTURE_INVALIDATED),
            Some(&id) => Ok(Some(id)),
            None => Ok(None),
        }
    }

    /// Work on the legacy stream while a blocking stream captures.
    fn implicit(&mut self, stream: u64) -> CudaResult<()> {
        if stream != 0 {
            return Ok(());
        }
        let hit: Vec<u64> = self
            .stream
            .iter()
            .filter(|(&s, _)| is_blocking(s))
            .map(|(_, &id)| id)
            .collect();
        if hit.is_empty() {
            return Ok(());
        }
        for id in hit {
            self.invalidate(id);
        }
        Err(cuda::ERROR_STREAM_CAPTURE_IMPLICIT)
    }

    fn add(&mut self, id: u64, stream: u64, kind: NodeKind) -> CudaResult<u64> {
        let c = self.by_id.get_mut(&id).ok_or(cuda::ERROR_ILLEGAL_STATE)?;
        let deps = c.streams.get(&stream).cloned().unwrap_or_default();
        if c.recapture.is_some() {
            return self.rematch(id, stream, deps, kind);
        }
        let child = match kind {
            NodeKind::Child(g) => Some(g),
            _ => None,
        };
        let mut s = graph::store();
        let n = s.add_node(c.graph, &deps, kind)?;
        // A launched graph captured as a child node: the node owns the copy.
        if let Some(g) = child.and_then(|g| s.graphs.get_mut(&g)) {
            g.owner = Some(n);
        }
        drop(s);
        c.streams.insert(stream, vec![n]);
        Ok(n)
    }

    /// A recapture's operation: the graph's next node, if it matches (module docs).
    fn rematch(&mut self, id: u64, stream: u64, deps: Vec<u64>, kind: NodeKind) -> CudaResult<u64> {
        let c = self.by_id.get_mut(&id).ok_or(cuda::ERROR_ILLEGAL_STATE)?;
        let Some(r) = c.recapture.as_mut() else { return Err(cuda::ERROR_ILLEGAL_STATE) };
        let mut s = graph::store();
        let target = s.graph(c.graph)?.nodes.get(r.next).copied().filter(|&t| {
            s.node(t).is_ok_and(|n| {
                let memory = matches!(n.kind, NodeKind::MemAlloc(_) | NodeKind::MemFree(_) | NodeKind::Conditional(_));
                n.deps.len() == deps.len()
                    && deps.iter().all(|d| n.deps.contains(d))
                    && n.kind.type_code() == kind.type_code()
                    && (!memory || n.kind == kind)
            })
        });
        let Some(t) = target else {
            tracing::warn!(position = r.next, "the recapture's operation does not match the graph's node there (type, dependencies, or a memory node's parameters)");
            r.failed = true;
            c.invalidated = true;
            if let NodeKind::Child(g) = kind {
                let _ = s.destroy_graph(g);
            }
            return Err(cuda::ERROR_GRAPH_RECAPTURE_FAILURE);
        };
        r.next += 1;
        c.streams.insert(stream, vec![t]);
        if s.node(t)?.kind == kind {
            return Ok(t);
        }
        // cudaGraphExecUpdate refuses a kernel that moves between cooperative and plain
        // launches (`graph::Store::update`); any other change of the same type it takes.
        let status = match (&s.node(t)?.kind, &kind) {
            (NodeKind::Kernel(a), NodeKind::Kernel(b)) if a.cooperative != b.cooperative => cudaGraphRecaptureIneligibleForUpdate,
            _ => cudaGraphRecaptureEligibleForUpdate,
        };
        let (callback, face) = (r.callback, r.face);
        let new = callback.map(|_| kind.clone());
        let old = s.replace_kind(t, kind)?;
        if let (Some(callback), Some(new)) = (callback, new) {
            let ch = Changed { capture: id, callback, face, node: t, old, new, status };
            CHANGED.try_with(|c| c.borrow_mut().push(ch)).map_err(|_| cuda::ERROR_UNKNOWN)?;
        }
        Ok(t)
    }

    fn finish(&mut self, id: u64) -> Option<Capture> {
        let c = self.by_id.remove(&id)?;
        self.stream.retain(|_, v| *v != id);
        self.events.retain(|_, v| v.0 != id);
        ACTIVE.fetch_sub(1, Ordering::SeqCst);
        Some(c)
    }
}

/// Whether any stream captures (cheap).
pub fn any() -> bool {
    ACTIVE.load(Ordering::Acquire) != 0
}

/// A stream-ordered operation on `stream` (resolved): when the stream captures, `make`'s
/// node is added to its graph and `true` returned; the caller runs it otherwise.
pub fn record(stream: u64, make: impl FnOnce() -> CudaResult<NodeKind>) -> CudaResult<bool> {
    if !any() {
        return Ok(false);
    }
    let mut c = captures();
    let Some(id) = c.live(stream)? else {
        c.implicit(stream)?;
        return Ok(false);
    };
    let kind = make()?;
    let r = c.add(id, stream, kind);
    done(c, r)
}

/// `cudaFreeAsync` on a capturing stream: a mem free node when the memory is an allocation
/// of this capture's graph, else an empty node (the memory stays allocated). `true` when
/// captured.
pub fn record_free(stream: u64, addr: u64) -> CudaResult<bool> {
    if !any() {
        return Ok(false);
    }
    let mut c = captures();
    let Some(id) = c.live(stream)? else {
        c.implicit(stream)?;
        return Ok(false);
    };
    let g = c.by_id[&id].graph;
    let kind = {
        let s = graph::store();
        match s.graph_alloc(g, addr) {
            Some(a) if !a.freed_in_graph.swap(true, Ordering::AcqRel) => NodeKind::MemFree(addr),
            Some(_) => return Err(cuda::ERROR_INVALID_VALUE),
            None => NodeKind::Empty,
        }
    };
    let r = c.add(id, stream, kind);
    done(c, r)
}

/// A potentially unsafe call (allocation, synchronous copy, device synchronization): refused
/// while a capture this thread's mode conflicts with is in progress, which it invalidates.
pub fn forbid_unsafe() -> CudaResult<()> {
    if !any() {
        return Ok(());
    }
    let mode = MODE.try_with(|m| m.get()).unwrap_or(cudaStreamCaptureModeGlobal);
    if mode == cudaStreamCaptureModeRelaxed {
        return Ok(());
    }
    let me = std::thread::current().id();
    let mut c = captures();
    let hit: Vec<u64> = c
        .by_id
        .iter()
        .filter(|(_, cap)| {
            (cap.owner == me && cap.mode != cudaStreamCaptureModeRelaxed)
                || (mode == cudaStreamCaptureModeGlobal && cap.mode == cudaStreamCaptureModeGlobal)
        })
        .map(|(&id, _)| id)
        .collect();
    if hit.is_empty() {
        return Ok(());
    }
    for id in hit {
        c.invalidate(id);
    }
    Err(cuda::ERROR_STREAM_CAPTURE_UNSUPPORTED)
}

/// Synchronizing or querying `stream` (or copying synchronously on it): not while it
/// captures (the capture is invalidated), and not the legacy stream while a blocking
/// stream captures.
pub fn check_sync(stream: u64) -> CudaResult<()> {
    if !any() {
        return Ok(());
    }
    {
        let mut c = captures();
        if let Some(&id) = c.stream.get(&stream) {
            c.invalidate(id);
            return Err(cuda::ERROR_STREAM_CAPTURE_UNSUPPORTED);
        }
        c.implicit(stream)?;
    }
    if stream == 0 {
        // The legacy stream waits for every blocking stream, captured or not: an unsafe call
        // for any global capture, non-blocking streams' too (CUDA 13 on an H200:
        // cudaStreamQuery(0) answered cudaErrorStreamCaptureUnsupported and invalidated it).
        forbid_unsafe()?;
    }
    Ok(())
}

/// `cudaEventQuery`/`cudaEventSynchronize`/elapsed time on an event recorded in a capture:
/// refused, and the capture is invalidated (CUDA 13 on an H200: the capture's status became
/// invalidated and its end failed).
pub fn check_event(event: u64) -> CudaResult<()> {
    if !any() {
        return Ok(());
    }
    let mut c = captures();
    if let Some(&(id, _)) = c.events.get(&event) {
        c.invalidate(id);
        return Err(cuda::ERROR_CAPTURED_EVENT);
    }
    Ok(())
}

/// `cudaEventRecord[WithFlags]` on `stream`: in a capture the event stands for the
/// stream's frontier (with `external`, an event record node is added too). `true` when
/// captured.
pub fn event_record(event: u64, stream: u64, external: bool) -> CudaResult<bool> {
    if !any() {
        return Ok(false);
    }
    let mut c = captures();
    let Some(id) = c.live(stream)? else {
        c.implicit(stream)?;
        c.events.remove(&event);
        return Ok(false);
    };
    if external {
        let r = c.add(id, stream, NodeKind::EventRecord(event));
        done(c, r)?;
        c = captures();
    }
    let front = c.by_id[&id].streams.get(&stream).cloned().unwrap_or_default();
    c.events.insert(event, (id, front));
    Ok(true)
}

/// `cudaStreamWaitEvent(stream, event)`: a stream waiting for an event of a capture joins
/// it; a capturing stream waiting for uncaptured work is refused unless `external` (then an
/// event wait node). `true` when captured.
pub fn wait_event(stream: u64, event: u64, external: bool) -> CudaResult<bool> {
    if !any() {
        return Ok(false);
    }
    let mut c = captures();
    let mine = c.live(stream)?;
    match (c.events.get(&event).cloned(), mine) {
        (Some((id, deps)), Some(cur)) if id == cur => {
            let cap = c.by_id.get_mut(&id).ok_or(cuda::ERROR_ILLEGAL_STATE)?;
            let f = cap.streams.entry(stream).or_default();
            for d in deps {
                if !f.contains(&d) {
                    f.push(d);
                }
            }
            Ok(true)
        }
        (Some((id, _)), Some(cur)) => {
            c.invalidate(id);
            c.invalidate(cur);
            Err(cuda::ERROR_STREAM_CAPTURE_MERGE)
        }
        (Some((id, deps)), None) => {
            if c.by_id[&id].invalidated {
                // What CUDA 13 answers (an H200), where one would expect "invalidated".
                return Err(cuda::ERROR_INVALID_VALUE);
            }
            c.stream.insert(stream, id);
            c.by_id
                .get_mut(&id)
                .ok_or(cuda::ERROR_ILLEGAL_STATE)?
                .streams
                .insert(stream, deps);
            Ok(true)
        }
        (None, Some(cur)) if external => {
            let r = c.add(cur, stream, NodeKind::EventWait(event));
            done(c, r)
        }
        (None, Some(cur)) => {
            c.invalidate(cur);
            Err(cuda::ERROR_STREAM_CAPTURE_ISOLATION)
        }
        (None, None) => {
            c.implicit(stream)?;
            Ok(false)
        }
    }
}

/// `cudaStreamBeginCapture[ToGraph]`: into a new graph, or into `into` = (graph, frontier).
pub fn begin(stream: u64, mode: u32, into: Option<(u64, Vec<u64>)>) -> CudaResult<()> {
    start(stream, mode, into, None)
}

/// `cudaStreamBeginRecaptureToGraph`: into `graph`'s own nodes (module docs), with the
/// program's callback (function, user data) for parameter changes, given the parameters of
/// `face`. The user objects the graph holds are released first, as CUDA does.
pub fn begin_recapture(stream: u64, mode: u32, graph: u64, callback: Option<(u64, u64)>, face: Face) -> CudaResult<()> {
    let recapture = Recapture { next: 0, callback, face, failed: false };
    start(stream, mode, Some((graph, Vec::new())), Some(recapture))?;
    let refs: Vec<(u64, u32)> = match graph::store().graphs.get_mut(&graph) {
        Some(g) => g.user_objects.drain().collect(),
        None => Vec::new(),
    };
    crate::user_object::release_all(&refs);
    Ok(())
}

fn start(stream: u64, mode: u32, into: Option<(u64, Vec<u64>)>, recapture: Option<Recapture>) -> CudaResult<()> {
    if mode > cudaStreamCaptureModeRelaxed {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    if stream == 0 {
        // The legacy stream cannot capture.
        return Err(cuda::ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    let mut c = captures();
    if c.stream.contains_key(&stream) {
        return Err(cuda::ERROR_ILLEGAL_STATE);
    }
    let (graph, given, front) = match into {
        Some((g, deps)) => {
            let s = graph::store();
            s.graph(g)?;
            for d in &deps {
                if s.node(*d)?.graph != g {
                    return Err(cuda::ERROR_INVALID_VALUE);
                }
            }
            (g, true, deps)
        }
        None => (graph::store().create_graph(), false, Vec::new()),
    };
    c.next_id += 1;
    let id = c.next_id;
    c.by_id.insert(
        id,
        Capture {
            graph,
            given,
            mode,
            owner: std::thread::current().id(),
            origin: stream,
            invalidated: false,
            streams: HashMap::from([(stream, front)]),
            recapture,
        },
    );
    c.stream.insert(stream, id);
    ACTIVE.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// `cudaStreamEndCapture`: the captured graph. Ends the capture also when it fails
/// (invalidated, unjoined work); a thread-local capture only from its own thread.
pub fn end(stream: u64) -> CudaResult<u64> {
    let mut c = captures();
    let id = *c.stream.get(&stream).ok_or(cuda::ERROR_ILLEGAL_STATE)?;
    let cap = &c.by_id[&id];
    if cap.origin != stream {
        c.invalidate(id);
        return Err(cuda::ERROR_STREAM_CAPTURE_UNMATCHED);
    }
    if cap.mode == cudaStreamCaptureModeThreadLocal && cap.owner != std::thread::current().id() {
        return Err(cuda::ERROR_STREAM_CAPTURE_WRONG_THREAD);
    }
    let cap = c.finish(id).ok_or(cuda::ERROR_ILLEGAL_STATE)?;
    let mut s = graph::store();
    let fail = |s: &mut graph::Store, code: u32| {
        if !cap.given {
            let _ = s.destroy_graph(cap.graph);
        }
        Err(code)
    };
    if let Some(r) = &cap.recapture {
        if r.failed {
            return Err(cuda::ERROR_GRAPH_RECAPTURE_FAILURE);
        }
    }
    if cap.invalidated {
        return fail(&mut s, cuda::ERROR_STREAM_CAPTURE_INVALIDATED);
    }
    let origin = cap.streams.get(&stream).cloned().unwrap_or_default();
    let joined = cap.streams.iter().filter(|(&st, _)| st != stream).all(|(_, front)| {
        front.iter().all(|&n| origin.iter().any(|&o| s.reaches(n, o)))
    });
    if !joined {
        return fail(&mut s, cuda::ERROR_STREAM_CAPTURE_UNJOINED);
    }
    if let Some(r) = &cap.recapture {
        // Fewer operations than the graph has nodes: a topology mismatch.
        if r.next != s.graph(cap.graph)?.nodes.len() {
            tracing::warn!(matched = r.next, "the recapture ended before it matched every node of the graph");
            return Err(cuda::ERROR_GRAPH_RECAPTURE_FAILURE);
        }
    }
    Ok(cap.graph)
}

/// `cudaStreamGetCaptureInfo`: (status, capture id, graph, frontier). The frontier is kept
/// in this thread until its next query, where the returned pointers point.
pub fn info(stream: u64) -> CudaResult<(u32, u64, u64, *const u64, *const u64, usize)> {
    if !any() {
        return Ok((cudaStreamCaptureStatusNone, 0, 0, std::ptr::null(), std::ptr::null(), 0));
    }
    let mut c = captures();
    let Some(&id) = c.stream.get(&stream) else {
        c.implicit(stream)?;
        return Ok((cudaStreamCaptureStatusNone, 0, 0, std::ptr::null(), std::ptr::null(), 0));
    };
    let cap = &c.by_id[&id];
    if cap.invalidated {
        return Ok((cudaStreamCaptureStatusInvalidated, id, 0, std::ptr::null(), std::ptr::null(), 0));
    }
    let front = cap.streams.get(&stream).cloned().unwrap_or_default();
    let n = front.len();
    let (p, e) = INFO
        .try_with(|i| {
            let mut i = i.borrow_mut();
            i.0 = front;
            // cudaGraphEdgeData is 8 bytes: one zeroed u64 per dependency (default edges).
            i.1 = vec![0u64; n];
            (i.0.as_ptr(), i.1.as_ptr())
        })
        .map_err(|_| cuda::ERROR_UNKNOWN)?;
    Ok((cudaStreamCaptureStatusActive, id, cap.graph, p, e, n))
}

/// `cudaStreamIsCapturing`.
pub fn status(stream: u64) -> CudaResult<u32> {
    info(stream).map(|i| i.0)
}

/// `cudaStreamUpdateCaptureDependencies`: replace (`set`) or extend the frontier.
pub fn update_deps(stream: u64, deps: &[u64], set: bool) -> CudaResult<()> {
    let mut c = captures();
    let id = c.live(stream)?.ok_or(cuda::ERROR_ILLEGAL_STATE)?;
    let g = c.by_id[&id].graph;
    {
        let s = graph::store();
        for d in deps {
            if s.node(*d)?.graph != g {
                return Err(cuda::ERROR_INVALID_VALUE);
            }
        }
    }
    let cap = c.by_id.get_mut(&id).ok_or(cuda::ERROR_ILLEGAL_STATE)?;
    let f = cap.streams.entry(stream).or_default();
    if set {
        f.clear();
    }
    for &d in deps {
        if !f.contains(&d) {
            f.push(d);
        }
    }
    Ok(())
}

/// `cudaThreadExchangeStreamCaptureMode`.
pub fn exchange_mode(mode: u32) -> CudaResult<u32> {
    if mode > cudaStreamCaptureModeRelaxed {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    MODE.try_with(|m| m.replace(mode)).map_err(|_| cuda::ERROR_UNKNOWN)
}

/// `cudaDeviceReset`: every capture ends (its graph went with the device's graphs).
pub fn reset() {
    let mut c = captures();
    let n = c.by_id.len();
    c.by_id.clear();
    c.stream.clear();
    c.events.clear();
    ACTIVE.fetch_sub(n, Ordering::SeqCst);
}
