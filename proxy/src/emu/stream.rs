//! Streams of the emulated device: ordered queues, each drained by its own worker thread.
//!
//! A job may depend on other streams reaching a sequence number (legacy default stream
//! semantics, `cudaStreamWaitEvent`); the worker waits for those before running it. A job's
//! error becomes the device's pending asynchronous error (reported by the next synchronizing
//! call), as on a GPU.
//!
//! Every job carries a description of what it does ([`Desc`]), so that a checkpoint can
//! **hold** the streams (each worker finishes the job it runs and starts no other; a job still
//! waiting for another stream goes back to the queue) and save the work not started
//! ([`Stream::queued`]) instead of waiting for it; a restart replays it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crum_wire::ckpt::{QueuedOp, QueuedWork};

/// A unit of stream work; `Err(code)` is a `cudaError_t` to report asynchronously.
pub type JobFn = Box<dyn FnOnce() -> Result<(), u32> + Send>;

/// Work a checkpoint may stop part-way at a safe point (a kernel at a block boundary).
pub type ResumableFn = Box<dyn FnOnce() -> Ran + Send>;

/// How resumable work ended.
pub enum Ran {
    Done(Result<(), u32>),
    /// Stopped at a safe point: the rest, to run (or save) in its place.
    Stopped { rest: ResumableFn, desc: Desc },
}

enum Work {
    Plain(JobFn),
    Resumable(ResumableFn),
}

/// What a job does, for a checkpoint that saves it unstarted. Staged copy bytes are shared
/// with the job (copied only if a checkpoint saves it).
pub struct Desc {
    pub op: QueuedOp,
    pub staged: Option<Arc<Vec<u8>>>,
}

impl Desc {
    pub fn op(op: QueuedOp) -> Desc {
        Desc { op, staged: None }
    }
}

struct Job {
    seq: u64,
    /// Submission order over all streams of the device.
    order: u64,
    deps: Vec<(Arc<Stream>, u64)>,
    run: Work,
    desc: Desc,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    submitted: u64,
    completed: u64,
    shutdown: bool,
    /// A checkpoint holds the stream: no job starts.
    held: bool,
    /// The worker runs (or waits for the dependencies of) a job it took.
    running: bool,
}

/// Submission order shared by the streams of one device.
pub type Order = Arc<AtomicU64>;

/// One stream.
pub struct Stream {
    pub id: u64,
    /// `cudaStreamNonBlocking`: no implicit synchronization with the legacy stream.
    pub nonblocking: bool,
    pub priority: i32,
    state: Mutex<State>,
    cv: Condvar,
    order: Order,
}

impl Stream {
    /// Create a stream and start its worker; `on_error` receives job failures.
    pub fn spawn(
        id: u64,
        nonblocking: bool,
        priority: i32,
        order: Order,
        on_error: Arc<dyn Fn(u32) + Send + Sync>,
    ) -> Arc<Stream> {
        let s = Arc::new(Stream {
            id,
            nonblocking,
            priority,
            state: Mutex::default(),
            cv: Condvar::new(),
            order,
        });
        let w = s.clone();
        std::thread::Builder::new()
            .name(format!("crum-stream-{id:x}"))
            .spawn(move || w.work(&*on_error))
            .expect("spawning a stream worker");
        s
    }

    fn work(&self, on_error: &(dyn Fn(u32) + Send + Sync)) {
        loop {
            let job = {
                let mut g = self.state.lock().unwrap();
                loop {
                    if !g.held {
                        if let Some(j) = g.queue.pop_front() {
                            g.running = true;
                            break j;
                        }
                    }
                    if g.shutdown && g.queue.is_empty() {
                        return;
                    }
                    g = self.cv.wait(g).unwrap();
                }
            };
            if !self.wait_deps(&job.deps) {
                // Held while it waited for another stream: not started, back to the queue.
                let mut g = self.state.lock().unwrap();
                g.queue.push_front(job);
                g.running = false;
                self.cv.notify_all();
                continue;
            }
            let result = match job.run {
                Work::Plain(f) => f(),
                Work::Resumable(f) => match f() {
                    Ran::Done(r) => r,
                    Ran::Stopped { rest, desc } => {
                        // Stopped for a checkpoint: the rest goes back, first, under the same
                        // number (waits on it stay valid); its dependencies were met.
                        let mut g = self.state.lock().unwrap();
                        g.queue.push_front(Job { seq: job.seq, order: job.order, deps: Vec::new(), run: Work::Resumable(rest), desc });
                        g.running = false;
                        self.cv.notify_all();
                        continue;
                    }
                },
            };
            if let Err(code) = result {
                on_error(code);
            }
            let mut g = self.state.lock().unwrap();
            g.completed = job.seq;
            g.running = false;
            self.cv.notify_all();
        }
    }

    /// Wait for `deps`; false if this stream was held meanwhile.
    fn wait_deps(&self, deps: &[(Arc<Stream>, u64)]) -> bool {
        for (dep, seq) in deps {
            loop {
                if dep.reached(*seq) {
                    break;
                }
                if self.state.lock().unwrap().held {
                    return false;
                }
                dep.wait_for(*seq, Duration::from_millis(5));
            }
        }
        true
    }

    /// Enqueue; returns the job's sequence number.
    pub fn submit(&self, deps: Vec<(Arc<Stream>, u64)>, desc: Desc, run: JobFn) -> u64 {
        self.enqueue(deps, desc, Work::Plain(run))
    }

    /// Enqueue work a checkpoint may stop part-way ([`Ran::Stopped`]).
    pub fn submit_resumable(&self, deps: Vec<(Arc<Stream>, u64)>, desc: Desc, run: ResumableFn) -> u64 {
        self.enqueue(deps, desc, Work::Resumable(run))
    }

    fn enqueue(&self, deps: Vec<(Arc<Stream>, u64)>, desc: Desc, run: Work) -> u64 {
        let mut g = self.state.lock().unwrap();
        g.submitted += 1;
        let seq = g.submitted;
        let order = self.order.fetch_add(1, Ordering::Relaxed);
        g.queue.push_back(Job { seq, order, deps, run, desc });
        self.cv.notify_all();
        seq
    }

    /// Hold the stream: returns once its worker runs no job (the one it ran finished; one
    /// waiting for another stream went back to the queue). Nothing starts until [`release`].
    ///
    /// [`release`]: Stream::release
    pub fn hold(&self) {
        self.request_hold();
        self.wait_held();
    }

    /// Start no new job from now on (the one running goes on).
    fn request_hold(&self) {
        self.state.lock().unwrap().held = true;
        self.cv.notify_all();
    }

    /// Wait until the worker runs no job.
    fn wait_held(&self) {
        let mut g = self.state.lock().unwrap();
        while g.running {
            g = self.cv.wait(g).unwrap();
        }
    }

    /// Let a held stream run again.
    pub fn release(&self) {
        self.state.lock().unwrap().held = false;
        self.cv.notify_all();
    }

    /// The work not started, with its submission order (a held stream's queue).
    pub fn queued(&self) -> Vec<(u64, QueuedWork)> {
        let g = self.state.lock().unwrap();
        g.queue
            .iter()
            .map(|j| {
                let mut op = j.desc.op.clone();
                if let (QueuedOp::Copy { staged, .. }, Some(b)) = (&mut op, &j.desc.staged) {
                    *staged = Some(b.to_vec());
                }
                (j.order, QueuedWork { stream: self.id, seq: j.seq, op })
            })
            .collect()
    }

    /// Wait at most `limit` for job `seq` to complete.
    fn wait_for(&self, seq: u64, limit: Duration) {
        let g = self.state.lock().unwrap();
        if g.completed < seq {
            let _ = self.cv.wait_timeout(g, limit).unwrap();
        }
    }

    /// Sequence number of the last submitted job.
    pub fn submitted(&self) -> u64 {
        self.state.lock().unwrap().submitted
    }

    /// Whether job `seq` has completed.
    pub fn reached(&self, seq: u64) -> bool {
        self.state.lock().unwrap().completed >= seq
    }

    pub fn idle(&self) -> bool {
        let g = self.state.lock().unwrap();
        g.completed == g.submitted
    }

    /// Block until job `seq` has completed.
    pub fn wait(&self, seq: u64) {
        let mut g = self.state.lock().unwrap();
        while g.completed < seq {
            g = self.cv.wait(g).unwrap();
        }
    }

    /// Block until everything submitted so far has completed.
    pub fn drain(&self) {
        let seq = self.submitted();
        self.wait(seq);
    }

    /// Let the worker finish what is queued, then exit.
    pub fn shutdown(&self) {
        self.state.lock().unwrap().shutdown = true;
        self.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn noerr() -> Arc<dyn Fn(u32) + Send + Sync> {
        Arc::new(|_| {})
    }

    fn mark() -> Desc {
        Desc::op(QueuedOp::Marker)
    }

    #[test]
    fn a_held_stream_finishes_its_job_and_keeps_the_rest_queued_in_order() {
        let order = Order::default();
        let a = Stream::spawn(1, false, 0, order.clone(), noerr());
        let b = Stream::spawn(2, false, 0, order, noerr());
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let started = Arc::new(AtomicU32::new(0));
        let st = started.clone();
        let first = a.submit(vec![], mark(), Box::new(move || {
            st.store(1, Ordering::SeqCst);
            rx.recv().unwrap();
            Ok(())
        }));
        let ran = Arc::new(AtomicU32::new(0));
        for _ in 0..3 {
            let r = ran.clone();
            a.submit(vec![], mark(), Box::new(move || {
                r.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }));
        }
        // b's job waits for a's first job: held while it waits, it goes back unstarted.
        let r = ran.clone();
        b.submit(vec![(a.clone(), first + 1)], mark(), Box::new(move || {
            r.fetch_add(100, Ordering::SeqCst);
            Ok(())
        }));
        while started.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        a.request_hold();
        b.hold();
        tx.send(()).unwrap();
        a.wait_held();
        assert!(a.reached(first));
        assert_eq!(ran.load(Ordering::SeqCst), 0, "nothing starts while held");
        let mut q: Vec<(u64, QueuedWork)> = a.queued().into_iter().chain(b.queued()).collect();
        q.sort_by_key(|(o, _)| *o);
        let names: Vec<(u64, u64)> = q.iter().map(|(_, w)| (w.stream, w.seq)).collect();
        assert_eq!(names, vec![(1, 2), (1, 3), (1, 4), (2, 1)]);
        a.release();
        b.release();
        b.drain();
        a.drain();
        assert_eq!(ran.load(Ordering::SeqCst), 103);
    }

    #[test]
    fn jobs_run_in_submission_order() {
        let s = Stream::spawn(1, false, 0, Order::default(), noerr());
        let log = Arc::new(Mutex::new(Vec::new()));
        for i in 0..100 {
            let l = log.clone();
            s.submit(
                vec![],
                mark(),
                Box::new(move || {
                    l.lock().unwrap().push(i);
                    Ok(())
                }),
            );
        }
        s.drain();
        assert_eq!(*log.lock().unwrap(), (0..100).collect::<Vec<_>>());
        s.shutdown();
    }

    #[test]
    fn dependency_on_another_stream_is_waited_for() {
        let a = Stream::spawn(1, false, 0, Order::default(), noerr());
        let b = Stream::spawn(2, false, 0, Order::default(), noerr());
        let flag = Arc::new(AtomicU32::new(0));
        let f = flag.clone();
        let seq = a.submit(
            vec![],
            mark(),
            Box::new(move || {
                std::thread::sleep(std::time::Duration::from_millis(30));
                f.store(1, Ordering::SeqCst);
                Ok(())
            }),
        );
        let seen = Arc::new(AtomicU32::new(99));
        let (f, s2) = (flag.clone(), seen.clone());
        b.submit(
            vec![(a.clone(), seq)],
            mark(),
            Box::new(move || {
                s2.store(f.load(Ordering::SeqCst), Ordering::SeqCst);
                Ok(())
            }),
        );
        b.drain();
        assert_eq!(seen.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn job_error_is_reported_to_the_device() {
        let got = Arc::new(AtomicU32::new(0));
        let g = got.clone();
        let s = Stream::spawn(1, false, 0, Order::default(), Arc::new(move |c| g.store(c, Ordering::SeqCst)));
        s.submit(vec![], mark(), Box::new(|| Err(700)));
        s.drain();
        assert_eq!(got.load(Ordering::SeqCst), 700);
    }
}
