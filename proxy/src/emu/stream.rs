//! Streams of the emulated device: ordered queues, each drained by its own worker thread.
//!
//! A job may depend on other streams reaching a sequence number (legacy default stream
//! semantics, `cudaStreamWaitEvent`); the worker waits for those before running it. A job's
//! error becomes the device's pending asynchronous error (reported by the next synchronizing
//! call), as on a GPU.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};

/// A unit of stream work; `Err(code)` is a `cudaError_t` to report asynchronously.
pub type JobFn = Box<dyn FnOnce() -> Result<(), u32> + Send>;

struct Job {
    seq: u64,
    deps: Vec<(Arc<Stream>, u64)>,
    run: JobFn,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    submitted: u64,
    completed: u64,
    shutdown: bool,
}

/// One stream.
pub struct Stream {
    pub id: u64,
    /// `cudaStreamNonBlocking`: no implicit synchronization with the legacy stream.
    pub nonblocking: bool,
    pub priority: i32,
    state: Mutex<State>,
    cv: Condvar,
}

impl Stream {
    /// Create a stream and start its worker; `on_error` receives job failures.
    pub fn spawn(
        id: u64,
        nonblocking: bool,
        priority: i32,
        on_error: Arc<dyn Fn(u32) + Send + Sync>,
    ) -> Arc<Stream> {
        let s = Arc::new(Stream {
            id,
            nonblocking,
            priority,
            state: Mutex::default(),
            cv: Condvar::new(),
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
                    if let Some(j) = g.queue.pop_front() {
                        break j;
                    }
                    if g.shutdown {
                        return;
                    }
                    g = self.cv.wait(g).unwrap();
                }
            };
            for (dep, seq) in &job.deps {
                dep.wait(*seq);
            }
            if let Err(code) = (job.run)() {
                on_error(code);
            }
            let mut g = self.state.lock().unwrap();
            g.completed = job.seq;
            self.cv.notify_all();
        }
    }

    /// Enqueue; returns the job's sequence number.
    pub fn submit(&self, deps: Vec<(Arc<Stream>, u64)>, run: JobFn) -> u64 {
        let mut g = self.state.lock().unwrap();
        g.submitted += 1;
        let seq = g.submitted;
        g.queue.push_back(Job { seq, deps, run });
        self.cv.notify_all();
        seq
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

    #[test]
    fn jobs_run_in_submission_order() {
        let s = Stream::spawn(1, false, 0, noerr());
        let log = Arc::new(Mutex::new(Vec::new()));
        for i in 0..100 {
            let l = log.clone();
            s.submit(
                vec![],
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
        let a = Stream::spawn(1, false, 0, noerr());
        let b = Stream::spawn(2, false, 0, noerr());
        let flag = Arc::new(AtomicU32::new(0));
        let f = flag.clone();
        let seq = a.submit(
            vec![],
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
        let s = Stream::spawn(1, false, 0, Arc::new(move |c| g.store(c, Ordering::SeqCst)));
        s.submit(vec![], Box::new(|| Err(700)));
        s.drain();
        assert_eq!(got.load(Ordering::SeqCst), 700);
    }
}
