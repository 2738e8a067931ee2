//! Streams and events of the emulated driver: every stream is an ordered queue served by a
//! thread of its own, so work is asynchronous and a call that queues returns at once, as on a
//! GPU. An operation waits before it starts for what it depends on — a point `(stream, n)`
//! means "the first n operations of that stream are done":
//!
//! - the **legacy default stream** (`NULL`, `CU_STREAM_LEGACY`) waits for all earlier work of
//!   every blocking stream, and blocking streams wait for earlier work of the legacy stream
//!   (streams created `CU_STREAM_NON_BLOCKING` do neither);
//! - `cuStreamWaitEvent` waits for the event's latest record at the time of the call.
//!
//! Events are points of their stream with the time the point was reached. Errors of queued
//! work are kept: sticky ones (illegal address, …) are returned by every later call of the
//! context, others by the next synchronizing call. Priorities are kept but do not reorder
//! work (one kernel runs at a time anyway: the interpreter uses every core for it).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crate::code::*;

/// Handle value of the legacy default stream inside the driver (`NULL` and
/// `CU_STREAM_LEGACY` both name it; `CU_STREAM_PER_THREAD` is taken as it, see the docs).
pub const LEGACY: u64 = 0;

type Work = Box<dyn FnOnce() + Send>;

struct Op {
    deps: Vec<(u64, u64)>,
    work: Work,
}

struct Stream {
    non_blocking: bool,
    priority: i32,
    queue: VecDeque<Op>,
    /// Operations queued so far / done so far.
    queued: u64,
    done: u64,
    destroyed: bool,
}

struct Event {
    flags: u32,
    /// The latest record: its stream, point and generation.
    record: Option<(u64, u64, u64)>,
    /// When the record of that generation was reached.
    reached: Option<(u64, Instant)>,
}

struct State {
    streams: HashMap<u64, Stream>,
    events: HashMap<u64, Event>,
    next: u64,
}

/// Streams, events and the context's errors.
pub struct Sched {
    s: Mutex<State>,
    cv: Condvar,
    sticky: AtomicU32,
    pending: AtomicU32,
}

/// `CU_EVENT_DISABLE_TIMING`
const EVENT_DISABLE_TIMING: u32 = 2;

impl Sched {
    pub fn new() -> Sched {
        Sched {
            s: Mutex::new(State { streams: HashMap::new(), events: HashMap::new(), next: 0x5000 }),
            cv: Condvar::new(),
            sticky: AtomicU32::new(0),
            pending: AtomicU32::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.s.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The sticky error, if the context has one.
    pub fn sticky(&self) -> CuResult<()> {
        match self.sticky.load(Ordering::SeqCst) {
            0 => Ok(()),
            e => Err(e),
        }
    }

    /// An error of queued work.
    pub fn report(&self, code: u32) {
        if is_sticky(code) {
            let _ = self.sticky.compare_exchange(0, code, Ordering::SeqCst, Ordering::SeqCst);
        } else {
            let _ = self.pending.compare_exchange(0, code, Ordering::SeqCst, Ordering::SeqCst);
        }
    }

    /// What a synchronizing call returns: the sticky error, else an error of queued work not
    /// reported yet (once).
    fn sync_result(&self) -> CuResult<()> {
        self.sticky()?;
        match self.pending.swap(0, Ordering::SeqCst) {
            0 => Ok(()),
            e => Err(e),
        }
    }

    /// Start the legacy default stream (at `cuInit`).
    pub fn start(&'static self) {
        let mut s = self.lock();
        if let std::collections::hash_map::Entry::Vacant(v) = s.streams.entry(LEGACY) {
            v.insert(Stream { non_blocking: false, priority: 0, queue: VecDeque::new(), queued: 0, done: 0, destroyed: false });
            drop(s);
            self.spawn(LEGACY);
        }
    }

    fn spawn(&'static self, id: u64) {
        std::thread::Builder::new()
            .name(format!("emu-cu-stream-{id:x}"))
            .spawn(move || self.serve(id))
            .expect("spawn a stream thread");
    }

    /// The stream thread: runs operations in order, each once its dependencies are done.
    fn serve(&self, id: u64) {
        let mut s = self.lock();
        loop {
            let st = s.streams.get(&id).expect("a stream is removed only by its thread");
            let Some(op) = st.queue.front() else {
                if st.destroyed {
                    s.streams.remove(&id);
                    self.cv.notify_all();
                    return;
                }
                s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
                continue;
            };
            let ready = op.deps.iter().all(|&(d, n)| s.streams.get(&d).is_none_or(|o| o.done >= n));
            if !ready {
                s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            let op = s.streams.get_mut(&id).expect("above").queue.pop_front().expect("above");
            drop(s);
            (op.work)();
            s = self.lock();
            s.streams.get_mut(&id).expect("ours").done += 1;
            self.cv.notify_all();
        }
    }

    /// The driver's id of a stream handle (`NULL`, `CU_STREAM_LEGACY` = 1 and
    /// `CU_STREAM_PER_THREAD` = 2 are the legacy stream).
    fn id(s: &State, handle: u64) -> CuResult<u64> {
        let id = if handle <= 2 { LEGACY } else { handle };
        match s.streams.get(&id) {
            Some(st) if !st.destroyed => Ok(id),
            _ => Err(INVALID_HANDLE),
        }
    }

    /// Check a stream handle.
    pub fn check_stream(&self, handle: u64) -> CuResult<()> {
        Self::id(&self.lock(), handle).map(|_| ())
    }

    /// Queue `work` on stream `handle` after `extra` dependencies; the point it will reach.
    pub fn enqueue(&self, handle: u64, extra: Vec<(u64, u64)>, work: Work) -> CuResult<(u64, u64)> {
        self.enqueue_noting(handle, extra, work, |_, _| {})
    }

    /// [`Sched::enqueue`], calling `noted` with the point under the same lock (before the
    /// stream's thread can run the work).
    fn enqueue_noting(&self, handle: u64, extra: Vec<(u64, u64)>, work: Work, noted: impl FnOnce(&mut State, (u64, u64))) -> CuResult<(u64, u64)> {
        self.sticky()?;
        let mut s = self.lock();
        let id = Self::id(&s, handle)?;
        let mut deps = extra;
        if id == LEGACY {
            deps.extend(s.streams.iter().filter(|(&k, st)| k != LEGACY && !st.non_blocking).map(|(&k, st)| (k, st.queued)));
        } else if !s.streams[&id].non_blocking {
            deps.push((LEGACY, s.streams[&LEGACY].queued));
        }
        deps.retain(|&(d, n)| d != id && n > 0);
        let st = s.streams.get_mut(&id).expect("checked");
        st.queue.push_back(Op { deps, work });
        st.queued += 1;
        let at = (id, st.queued);
        noted(&mut s, at);
        self.cv.notify_all();
        Ok(at)
    }

    /// `cuStreamCreateWithPriority`
    pub fn create(&'static self, non_blocking: bool, priority: i32) -> u64 {
        let mut s = self.lock();
        s.next += 0x10;
        let id = s.next;
        s.streams.insert(id, Stream { non_blocking, priority, queue: VecDeque::new(), queued: 0, done: 0, destroyed: false });
        drop(s);
        self.spawn(id);
        id
    }

    /// `cuStreamDestroy`: queued work still runs; the handle is invalid at once.
    pub fn destroy(&self, handle: u64) -> CuResult<()> {
        let mut s = self.lock();
        if handle <= 2 {
            return Err(INVALID_HANDLE);
        }
        let id = Self::id(&s, handle)?;
        s.streams.get_mut(&id).expect("checked").destroyed = true;
        self.cv.notify_all();
        Ok(())
    }

    /// `cuStreamGetPriority`
    pub fn priority(&self, handle: u64) -> CuResult<i32> {
        let s = self.lock();
        let id = Self::id(&s, handle)?;
        Ok(s.streams[&id].priority)
    }

    /// `cuStreamQuery`: Ok(true) when all its work is done.
    pub fn query(&self, handle: u64) -> CuResult<bool> {
        self.sticky()?;
        let s = self.lock();
        let id = Self::id(&s, handle)?;
        let st = &s.streams[&id];
        Ok(st.done == st.queued)
    }

    /// `cuStreamSynchronize`: wait for the work queued before the call.
    pub fn sync_stream(&self, handle: u64) -> CuResult<()> {
        let mut s = self.lock();
        let id = Self::id(&s, handle)?;
        let want = s.streams[&id].queued;
        while s.streams.get(&id).is_some_and(|st| st.done < want) && self.sticky().is_ok() {
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        drop(s);
        self.sync_result()
    }

    /// `cuCtxSynchronize`: wait for the work of every stream queued before the call.
    pub fn sync_all(&self) -> CuResult<()> {
        let mut s = self.lock();
        let want: Vec<(u64, u64)> = s.streams.iter().map(|(&k, st)| (k, st.queued)).collect();
        loop {
            let left = want.iter().any(|&(k, n)| s.streams.get(&k).is_some_and(|st| st.done < n));
            if !left || self.sticky().is_err() {
                break;
            }
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        drop(s);
        self.sync_result()
    }

    /// `cuEventCreate`
    pub fn event_create(&self, flags: u32) -> u64 {
        let mut s = self.lock();
        s.next += 0x10;
        let id = s.next;
        s.events.insert(id, Event { flags, record: None, reached: None });
        id
    }

    /// `cuEventDestroy`: a pending record still completes (its time goes nowhere).
    pub fn event_destroy(&self, e: u64) -> CuResult<()> {
        self.lock().events.remove(&e).map(|_| ()).ok_or(INVALID_HANDLE)
    }

    /// `cuEventRecord`
    pub fn event_record(&'static self, e: u64, stream: u64) -> CuResult<()> {
        let gen = {
            let mut s = self.lock();
            if !s.events.contains_key(&e) {
                return Err(INVALID_HANDLE);
            }
            s.next += 1;
            s.next
        };
        let reached = move || {
            let mut s = self.lock();
            if let Some(ev) = s.events.get_mut(&e) {
                if ev.record.is_some_and(|r| r.2 == gen) {
                    ev.reached = Some((gen, Instant::now()));
                }
            }
        };
        // The record is noted before the stream's thread can reach it.
        self.enqueue_noting(stream, Vec::new(), Box::new(reached), |s, (id, n)| {
            if let Some(ev) = s.events.get_mut(&e) {
                ev.record = Some((id, n, gen));
            }
        })
        .map(|_| ())
    }

    fn event_done(s: &State, ev: &Event) -> bool {
        match ev.record {
            None => true,
            Some((id, n, _)) => s.streams.get(&id).is_none_or(|st| st.done >= n),
        }
    }

    /// `cuEventQuery`: Ok(true) when its latest record is reached (or it was never recorded).
    pub fn event_query(&self, e: u64) -> CuResult<bool> {
        self.sticky()?;
        let s = self.lock();
        let ev = s.events.get(&e).ok_or(INVALID_HANDLE)?;
        Ok(Self::event_done(&s, ev))
    }

    /// `cuEventSynchronize`
    pub fn event_sync(&self, e: u64) -> CuResult<()> {
        let mut s = self.lock();
        loop {
            let ev = s.events.get(&e).ok_or(INVALID_HANDLE)?;
            if Self::event_done(&s, ev) || self.sticky().is_err() {
                break;
            }
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        drop(s);
        self.sync_result()
    }

    /// `cuEventElapsedTime` in milliseconds.
    pub fn elapsed(&self, a: u64, b: u64) -> CuResult<f32> {
        self.sticky()?;
        let s = self.lock();
        let (ea, eb) = (s.events.get(&a).ok_or(INVALID_HANDLE)?, s.events.get(&b).ok_or(INVALID_HANDLE)?);
        if ea.flags & EVENT_DISABLE_TIMING != 0 || eb.flags & EVENT_DISABLE_TIMING != 0 {
            return Err(INVALID_HANDLE);
        }
        let (Some(ra), Some(rb)) = (ea.record, eb.record) else {
            return Err(INVALID_HANDLE);
        };
        if !Self::event_done(&s, ea) || !Self::event_done(&s, eb) {
            return Err(NOT_READY);
        }
        let time = |ev: &Event, gen: u64| ev.reached.filter(|r| r.0 == gen).map(|r| r.1);
        let (Some(ta), Some(tb)) = (time(ea, ra.2), time(eb, rb.2)) else {
            return Err(NOT_READY);
        };
        let ms = if tb >= ta { tb.duration_since(ta).as_secs_f64() * 1e3 } else { -(ta.duration_since(tb).as_secs_f64() * 1e3) };
        Ok(ms as f32)
    }

    /// `cuStreamWaitEvent`: later work of `stream` waits for the event's latest record.
    pub fn wait_event(&self, stream: u64, e: u64) -> CuResult<()> {
        let rec = {
            let s = self.lock();
            Self::id(&s, stream)?;
            s.events.get(&e).ok_or(INVALID_HANDLE)?.record
        };
        let deps = rec.map(|(id, n, _)| vec![(id, n)]).unwrap_or_default();
        self.enqueue(stream, deps, Box::new(|| {})).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn sched() -> &'static Sched {
        let s: &'static Sched = Box::leak(Box::new(Sched::new()));
        s.start();
        s
    }

    /// A stream whose first operation waits until the returned sender is used.
    fn blocked(s: &'static Sched, non_blocking: bool) -> (u64, mpsc::Sender<()>) {
        let st = s.create(non_blocking, 0);
        let (tx, rx) = mpsc::channel::<()>();
        s.enqueue(st, Vec::new(), Box::new(move || {
            let _ = rx.recv();
        })).unwrap();
        (st, tx)
    }

    #[test]
    fn the_legacy_stream_waits_for_blocking_streams_but_not_for_non_blocking_ones() {
        let s = sched();
        let (_nb, nb_go) = blocked(s, true);
        s.enqueue(LEGACY, Vec::new(), Box::new(|| {})).unwrap();
        s.sync_stream(LEGACY).unwrap();
        let (_b, b_go) = blocked(s, false);
        s.enqueue(LEGACY, Vec::new(), Box::new(|| {})).unwrap();
        assert_eq!(s.query(LEGACY), Ok(false), "waits for the blocked blocking stream");
        b_go.send(()).unwrap();
        s.sync_stream(LEGACY).unwrap();
        nb_go.send(()).unwrap();
        s.sync_all().unwrap();
    }

    #[test]
    fn a_stream_waits_for_the_event_recorded_before_the_wait() {
        let s = sched();
        let (a, go) = blocked(s, true);
        let e = s.event_create(0);
        s.event_record(e, a).unwrap();
        assert_eq!(s.event_query(e), Ok(false));
        let b = s.create(true, 0);
        s.wait_event(b, e).unwrap();
        s.enqueue(b, Vec::new(), Box::new(|| {})).unwrap();
        assert_eq!(s.query(b), Ok(false));
        assert_eq!(s.elapsed(e, e), Err(NOT_READY));
        go.send(()).unwrap();
        s.sync_stream(b).unwrap();
        assert_eq!(s.event_query(e), Ok(true));
        assert_eq!(s.elapsed(e, e), Ok(0.0));
        let unrecorded = s.event_create(0);
        assert_eq!(s.elapsed(e, unrecorded), Err(INVALID_HANDLE));
    }

    #[test]
    fn sticky_errors_stay_and_others_are_reported_once() {
        let s = sched();
        s.report(NOT_SUPPORTED);
        assert_eq!(s.sync_all(), Err(NOT_SUPPORTED));
        assert_eq!(s.sync_all(), Ok(()));
        s.report(ILLEGAL_ADDRESS);
        assert_eq!(s.sync_all(), Err(ILLEGAL_ADDRESS));
        assert_eq!(s.enqueue(LEGACY, Vec::new(), Box::new(|| {})), Err(ILLEGAL_ADDRESS));
    }

    #[test]
    fn a_destroyed_stream_finishes_its_work_and_its_handle_is_invalid() {
        let s = sched();
        let (st, go) = blocked(s, false);
        s.destroy(st).unwrap();
        assert_eq!(s.query(st), Err(INVALID_HANDLE));
        go.send(()).unwrap();
        s.sync_all().unwrap();
    }
}
