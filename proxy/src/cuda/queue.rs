//! The cuda backend's own stream queues (issue 16): the proxy hands the driver only a short
//! **window** of work per stream and holds the rest, so that a checkpoint can stop feeding,
//! wait for the window alone, and save what it holds instead of waiting for the GPU to drain.
//!
//! Every operation the program puts on a stream (launch, copy, memset, event record, wait on
//! another stream, host function, a legacy-stream sync point) becomes an [`Item`]: what it is
//! ([`QueuedOp`], saved by a checkpoint) and how to give it to the driver ([`Feed`]). Each
//! stream has a sequence number per item (`submitted`), the items given to the driver so far
//! (`fed`) and those the driver finished (`completed`, from an event recorded after each fed
//! item). An item is **fed** when it is at the head of its stream's queue, fewer than
//! `window` items of the stream are in flight, the queues are not held, and what it must
//! follow has been fed:
//! - the legacy default stream's implicit order: an item on the legacy stream follows the
//!   items already submitted to every blocking stream, and an item on a blocking stream the
//!   legacy stream's. Once those are fed, the driver's own legacy-stream semantics order it
//!   after them on the device, so the device sees exactly the program's order;
//! - a wait on another stream's item (`cudaStreamWaitEvent`, `QueuedOp::WaitFor`): once that
//!   item is fed, the wait is `cuStreamWaitEvent` on the event recorded after it (nothing if
//!   it completed already).
//!
//! The thread that submits an item feeds it at once when it can (most launches reach the
//! driver in the caller's thread, and a launch the driver refuses fails in the call, as
//! before); otherwise each stream's **feeder thread** feeds it as the work in flight completes
//! (it waits on the oldest in-flight item's event, `CU_EVENT_BLOCKING_SYNC`). Items that block
//! in the driver (a synchronous copy of pageable memory, done piece by piece through staging
//! buffers) are fed only by the feeder, once nothing else of their stream is in flight, so no
//! program call waits inside the driver for queued work: it waits for named points
//! ([`Core::wait_points`]), which a checkpoint can save and a restart resume.
//!
//! **Hold** ([`Core::hold`]): no item is fed from then on; it returns once every item in
//! flight has completed (the window: a few operations per stream). What is not fed is the
//! work a checkpoint saves ([`Core::queued`]), in submission order over all streams.
//! `CRUM_CUDA_WINDOW` sets the window (default [`WINDOW`]).
//!
//! Lock order: the queue state's lock is never held while feeding (feeds take the tables'
//! lock and call the driver) or while waiting for an event.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};

use crum_wire::ckpt::{QueuedOp, QueuedWork};

use super::driver;
use super::errors::{runtime_error, Op};
use super::Core;
use crate::backend::{BackendError, Result};

/// Items of one stream given to the driver and not known to be complete, at most.
pub const WINDOW: usize = 4;

/// How to give one item to the driver, on this stream.
pub type Feed = Box<dyn FnOnce(&Core, &driver::Stream) -> Result<()> + Send>;

/// The window from `CRUM_CUDA_WINDOW` (at least 1), else [`WINDOW`].
pub fn window_from_env() -> usize {
    match std::env::var("CRUM_CUDA_WINDOW").ok().map(|v| v.parse::<usize>()) {
        None => WINDOW,
        Some(Ok(n)) if n >= 1 => n,
        Some(_) => {
            tracing::warn!("CRUM_CUDA_WINDOW must be a whole number of at least 1; using {WINDOW}");
            WINDOW
        }
    }
}

/// One operation for a stream.
pub struct Work {
    pub op: QueuedOp,
    /// Bytes taken from pageable memory (a copy), saved with the op if it is not fed.
    pub staged: Option<Arc<Vec<u8>>>,
    /// It blocks in the driver until done: fed only by the feeder, with nothing in flight.
    pub blocking: bool,
    /// (stream, seq) it waits for on the device (`cuStreamWaitEvent` once those are fed).
    pub waits: Vec<(u64, u64)>,
    pub feed: Feed,
}

struct Item {
    seq: u64,
    /// Submission order over all streams.
    order: u64,
    /// (stream, seq) that must be fed first (legacy-stream order).
    after: Vec<(u64, u64)>,
    work: Work,
}

/// An item taken from its queue to be fed.
struct Taken {
    item: Item,
    /// Events to wait on first (`cuStreamWaitEvent`).
    events: Vec<Arc<driver::Event>>,
    drv: Arc<driver::Stream>,
}

struct StreamQ {
    drv: Arc<driver::Stream>,
    nonblocking: bool,
    pending: VecDeque<Item>,
    /// Fed items not known to be complete, with the event recorded after each.
    in_flight: VecDeque<(u64, Option<Arc<driver::Event>>)>,
    submitted: u64,
    fed: u64,
    completed: u64,
    /// A thread is feeding an item of this stream (outside the lock).
    feeding: bool,
    /// `cudaStreamDestroy`ed: no new work; its feeder ends once its work is done.
    destroyed: bool,
}

#[derive(Default)]
struct State {
    streams: BTreeMap<u64, StreamQ>,
    order: u64,
    held: bool,
    shutdown: bool,
}

/// The queues of one backend.
pub struct Queues {
    state: Mutex<State>,
    cv: Condvar,
    window: usize,
    feeders: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Queues {
    pub fn new(window: usize) -> Queues {
        Queues { state: Mutex::default(), cv: Condvar::new(), window: window.max(1), feeders: Mutex::default() }
    }

    /// Items fed ahead per stream, at most.
    pub fn window(&self) -> usize {
        self.window
    }

    /// Whether the head of stream `id` can be fed now.
    fn can_feed(&self, g: &State, id: u64, by_feeder: bool) -> bool {
        let Some(s) = g.streams.get(&id) else { return false };
        if g.held || s.feeding || s.in_flight.len() >= self.window {
            return false;
        }
        let Some(head) = s.pending.front() else { return false };
        if head.work.blocking && !(by_feeder && s.in_flight.is_empty()) {
            return false;
        }
        head.after.iter().chain(&head.work.waits).all(|&(t, n)| g.streams.get(&t).is_none_or(|t| t.fed >= n))
    }
}

impl Core {
    /// Start queueing for stream `id` (the legacy stream at the backend's start, the others
    /// at `cudaStreamCreate`), with its feeder thread.
    pub(super) fn add_stream(self: &Arc<Self>, id: u64, drv: Arc<driver::Stream>, nonblocking: bool) -> Result<()> {
        {
            let mut g = self.queues.state.lock().unwrap();
            g.streams.insert(
                id,
                StreamQ {
                    drv,
                    nonblocking,
                    pending: VecDeque::new(),
                    in_flight: VecDeque::new(),
                    submitted: 0,
                    fed: 0,
                    completed: 0,
                    feeding: false,
                    destroyed: false,
                },
            );
        }
        let core = self.clone();
        let h = std::thread::Builder::new()
            .name(format!("crum-feed-{id:x}"))
            .spawn(move || core.feeder(id))
            .map_err(|e| BackendError::Other(format!("cannot start the feeder thread of stream {id:#x}: {e}")))?;
        self.queues.feeders.lock().unwrap().push(h);
        Ok(())
    }

    /// `cudaStreamDestroy`: no new work; what it holds still runs (CUDA semantics).
    pub(super) fn retire_stream(&self, id: u64) {
        let mut g = self.queues.state.lock().unwrap();
        if let Some(s) = g.streams.get_mut(&id) {
            s.destroyed = true;
        }
        self.queues.cv.notify_all();
    }

    /// Put `work` on stream `id`; returns its sequence number. Fed at once when it can be
    /// (then a refusal by the driver is this call's error); otherwise held until it can.
    pub(super) fn enqueue(&self, id: u64, work: Work) -> Result<u64> {
        let mut g = self.queues.state.lock().unwrap();
        let s = g.streams.get(&id).filter(|s| !s.destroyed).ok_or(BackendError::Cuda(crum_wire::cuda::ERROR_INVALID_RESOURCE_HANDLE))?;
        let nonblocking = s.nonblocking;
        let mut after = Vec::new();
        if id == 0 {
            for (&t, q) in g.streams.iter().filter(|(&t, q)| t != 0 && !q.nonblocking) {
                if q.submitted > q.fed {
                    after.push((t, q.submitted));
                }
            }
        } else if !nonblocking {
            if let Some(l) = g.streams.get(&0).filter(|l| l.submitted > l.fed) {
                after.push((0, l.submitted));
            }
        }
        g.order += 1;
        let order = g.order;
        let s = g.streams.get_mut(&id).expect("looked up above");
        s.submitted += 1;
        let seq = s.submitted;
        let first = s.pending.is_empty();
        s.pending.push_back(Item { seq, order, after, work });
        // Fed by this thread when it can be at once (taken under the same lock, so that the
        // feeder cannot take it first): the driver's refusal is then this call's error.
        let mut mine = Ok(seq);
        if first && self.queues.can_feed(&g, id, false) {
            let taken = Self::take_head(g, id);
            self.queues.cv.notify_all();
            mine = self.feed_taken(id, taken).map(|_| seq);
        } else {
            drop(g);
            self.queues.cv.notify_all();
        }
        for (_, r) in self.pump(id, false) {
            if let Err(e) = r {
                self.shared.report(e.code());
            }
        }
        mine
    }

    /// Feed stream `id` while its head can be fed; returns what each fed item gave.
    fn pump(&self, id: u64, by_feeder: bool) -> Vec<(u64, Result<()>)> {
        let mut out = Vec::new();
        loop {
            let g = self.queues.state.lock().unwrap();
            if !self.queues.can_feed(&g, id, by_feeder) {
                return out;
            }
            let taken = Self::take_head(g, id);
            let seq = taken.item.seq;
            out.push((seq, self.feed_taken(id, taken)));
        }
    }

    /// Take the head of stream `id` to feed it (the caller checked `can_feed` under this
    /// lock): no other thread feeds the stream until [`Core::feed_taken`] is done.
    fn take_head(mut g: std::sync::MutexGuard<'_, State>, id: u64) -> Taken {
        let head = g.streams[&id].pending.front().expect("can_feed saw it");
        // Waits on items not complete yet: the events recorded after them.
        let events: Vec<Arc<driver::Event>> = head
            .work
            .waits
            .iter()
            .filter_map(|&(t, n)| {
                let t = g.streams.get(&t)?;
                if t.completed >= n {
                    return None;
                }
                t.in_flight.iter().find(|(q, _)| *q == n).and_then(|(_, e)| e.clone())
            })
            .collect();
        let s = g.streams.get_mut(&id).expect("can_feed saw it");
        let item = s.pending.pop_front().expect("can_feed saw it");
        s.feeding = true;
        Taken { item, events, drv: s.drv.clone() }
    }

    /// Give a taken item to the driver (outside the lock) and count it in flight.
    fn feed_taken(&self, id: u64, t: Taken) -> Result<()> {
        let q = &self.queues;
        let Taken { item, events, drv } = t;
        let mut r = Ok(());
        for e in &events {
            if let Err(c) = driver::stream_wait_event(&drv, e) {
                r = Err(self.err(Op::Other, c));
                break;
            }
        }
        if r.is_ok() {
            r = (item.work.feed)(self, &drv);
        }
        // Completion is told by an event after the item (none if the driver cannot make
        // one: the item then counts as complete once those before it are).
        let done = driver::event_create(3).and_then(|e| driver::event_record(&e, &drv).map(|_| Arc::new(e))).ok();
        let mut g = q.state.lock().unwrap();
        if let Some(s) = g.streams.get_mut(&id) {
            s.fed = item.seq;
            s.in_flight.push_back((item.seq, done));
            s.feeding = false;
        }
        drop(g);
        q.cv.notify_all();
        r
    }

    /// A stream's feeder: feeds what the submitting threads could not, and tells completion.
    fn feeder(self: Arc<Self>, id: u64) {
        if let Err(c) = self.bind_ctx() {
            tracing::error!("the feeder of stream {id:#x} cannot use the device's context: {}", driver::error_name(c));
        }
        let q = &self.queues;
        loop {
            for (_, r) in self.pump(id, true) {
                if let Err(e) = r {
                    self.shared.report(e.code());
                }
            }
            let mut g = q.state.lock().unwrap();
            loop {
                let Some(s) = g.streams.get(&id) else { return };
                if let Some((seq, ev)) = s.in_flight.front().cloned() {
                    drop(g);
                    if let Some(ev) = ev {
                        // A fault of the work before the event is sticky: every call after it
                        // returns it, but a wait that began before the fault may not (the
                        // emulated driver checks at entry), so ask once more after it.
                        if let Err(c) = driver::event_sync(&ev).and_then(|_| driver::event_query(&ev).map(|_| ())) {
                            let rt = runtime_error(Op::Other, c);
                            self.shared.report(rt);
                        }
                    }
                    let mut g = q.state.lock().unwrap();
                    if let Some(s) = g.streams.get_mut(&id) {
                        s.in_flight.pop_front();
                        s.completed = seq;
                    }
                    drop(g);
                    q.cv.notify_all();
                    break;
                }
                if q.can_feed(&g, id, true) {
                    break;
                }
                if s.destroyed && s.pending.is_empty() && !s.feeding {
                    g.streams.remove(&id);
                    drop(g);
                    q.cv.notify_all();
                    return;
                }
                if g.shutdown {
                    return;
                }
                g = q.cv.wait(g).unwrap();
            }
        }
    }

    /// Stream `id`'s last sequence number (None: no such stream).
    pub(super) fn submitted(&self, id: u64) -> Option<u64> {
        self.queues.state.lock().unwrap().streams.get(&id).filter(|s| !s.destroyed).map(|s| s.submitted)
    }

    /// Every stream's last sequence number (destroyed ones with work left included).
    pub(super) fn points_all(&self) -> Vec<(u64, u64)> {
        self.queues.state.lock().unwrap().streams.iter().map(|(&id, s)| (id, s.submitted)).collect()
    }

    /// Whether item `seq` of stream `id` has been given to the driver (a stream gone: yes).
    pub(super) fn is_fed(&self, id: u64, seq: u64) -> bool {
        self.queues.state.lock().unwrap().streams.get(&id).is_none_or(|s| s.fed >= seq)
    }

    /// Whether stream `id` holds nothing the driver has not got (None: no such stream).
    pub(super) fn all_fed(&self, id: u64) -> Option<bool> {
        let g = self.queues.state.lock().unwrap();
        g.streams.get(&id).filter(|s| !s.destroyed).map(|s| s.fed == s.submitted && !s.feeding)
    }

    /// Block until every (stream, seq) has completed (a stream gone: its work is done).
    pub(super) fn wait_points(&self, points: &[(u64, u64)]) {
        let q = &self.queues;
        let mut g = q.state.lock().unwrap();
        for &(id, seq) in points {
            while g.streams.get(&id).is_some_and(|s| s.completed < seq) {
                g = q.cv.wait(g).unwrap();
            }
        }
    }

    /// Block until everything submitted so far has completed.
    pub(super) fn drain_all(&self) {
        let points = self.points_all();
        self.wait_points(&points);
    }

    /// Feed nothing more; returns once nothing is in flight, with the number of items that
    /// were (the window's work, waited for).
    pub(super) fn hold(&self) -> usize {
        let q = &self.queues;
        let mut g = q.state.lock().unwrap();
        g.held = true;
        let waited = g.streams.values().map(|s| s.in_flight.len() + usize::from(s.feeding)).sum();
        while g.streams.values().any(|s| s.feeding || !s.in_flight.is_empty()) {
            g = q.cv.wait(g).unwrap();
        }
        waited
    }

    /// The work held, not fed, in submission order over all streams.
    pub(super) fn queued(&self) -> std::result::Result<Vec<QueuedWork>, String> {
        let g = self.queues.state.lock().unwrap();
        if let Some((id, _)) = g.streams.iter().find(|(_, s)| s.destroyed && !s.pending.is_empty()) {
            return Err(format!("destroyed stream {id:#x} still has work that has not started"));
        }
        let mut all: Vec<(u64, QueuedWork)> = g
            .streams
            .iter()
            .flat_map(|(&id, s)| {
                s.pending.iter().map(move |i| {
                    let mut op = i.work.op.clone();
                    if let (QueuedOp::Copy { staged, .. }, Some(b)) = (&mut op, &i.work.staged) {
                        *staged = Some(b.to_vec());
                    }
                    (i.order, QueuedWork { stream: id, seq: i.seq, op })
                })
            })
            .collect();
        all.sort_by_key(|(o, _)| *o);
        Ok(all.into_iter().map(|(_, w)| w).collect())
    }

    /// Feed again after a hold.
    pub(super) fn release(&self) {
        self.queues.state.lock().unwrap().held = false;
        self.queues.cv.notify_all();
    }

    /// End the feeders (the backend is dropped; its work was drained).
    pub(super) fn shutdown(&self) {
        self.queues.state.lock().unwrap().shutdown = true;
        self.queues.cv.notify_all();
        let feeders = std::mem::take(&mut *self.queues.feeders.lock().unwrap());
        for h in feeders {
            let _ = h.join();
        }
    }
}
