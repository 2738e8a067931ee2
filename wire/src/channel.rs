//! The shared-memory channel: one memfd, a header, and a fixed number of lanes.
//!
//! Each application thread that calls CUDA claims a lane (an SPSC byte ring for requests plus
//! a reply slot); the proxy serves each claimed lane from its own thread, so a thread blocked
//! in `cudaStreamSynchronize` never holds up another thread's calls. Both sides spin briefly
//! and then sleep on a futex in the shared mapping (cross-process futexes, so not
//! `FUTEX_PRIVATE`). Waits poll for the other side's death every few tens of milliseconds:
//! the application gets [`ChannelError::ProxyGone`] instead of hanging. The application
//! watches the proxy through a pidfd ([`Channel::watch_proxy`]), which becomes readable when
//! the proxy exits, also while it is a zombie that nobody reaps (`kill(pid, 0)` succeeds on a
//! zombie).
//!
//! Layout (all offsets from the start of the memfd):
//! `[Header: 4 KiB][lane 0: ctl 4 KiB | ring RING | reply REPLY][lane 1]...`
//! A ring record is `[len: u32][flags: u32][payload, padded to 8]`; `len == u32::MAX` marks a
//! wrap to offset 0. Records are placed contiguously: a writer wraps whenever fewer than
//! `MAX_MSG + 8` bytes remain before the end, so it can encode in place without knowing the
//! length first.
//!
//! # Safety
//! The mapping is created here with the exact size of the layout and stays mapped as long as
//! any [`Channel`] clone lives (it is unmapped in `Drop` of the last `Arc`). Control words are
//! atomics at fixed, aligned offsets, valid in every process that maps the memfd. Ring bytes
//! are written only by the lane's client between `tail` and `tail + RING` (space the server
//! has released) before it publishes `head` with `Release`; the server reads only between
//! `tail` and the `head` it loaded with `Acquire`. The reply slot is written only by the
//! server between the client's request and the `resp_seq` bump, and read by the client only
//! after it observed that bump. The other side is untrusted: every length read from shared
//! memory is bounds-checked before it is used as an offset.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::msg::{self, Reply, Request};
use crate::ChannelError;

/// Number of lanes (application threads that can call CUDA at once without sharing a lane).
pub const LANES: usize = 64;
/// Request ring bytes per lane.
pub const RING: usize = 256 << 10;
/// Reply slot bytes per lane.
pub const REPLY: usize = 1 << 20;
/// Largest encoded request or reply.
pub const MAX_MSG: usize = 64 << 10;
/// Largest reply (printf output is split over several replies beyond this).
pub const MAX_REPLY: usize = REPLY;

const MAGIC: u64 = 0x4c4e_4843_4d55_5243; // "CRUMCHNL"
const VERSION: u32 = 1;
const HEADER: usize = 4096;
const CTL: usize = 4096;
const LANE: usize = CTL + RING + REPLY;
/// Total size of the memfd.
pub const SIZE: usize = HEADER + LANES * LANE;

const WRAP: u32 = u32::MAX;
const FLAG_REPLY: u32 = 1;

/// Proxy states in the header.
const STARTING: u32 = 0;
const READY: u32 = 1;
const DEAD: u32 = 2;
/// A restarted process's view of the channel of the proxy its image was taken with (zero
/// pages now): a thread still waiting on one of its lanes learns that its call was cut by a
/// checkpoint ([`ChannelError::Retired`]).
const RETIRED: u32 = 3;

#[repr(C)]
struct Header {
    magic: AtomicU64,
    version: AtomicU32,
    lanes: AtomicU32,
    proxy_pid: AtomicU32,
    state: AtomicU32,
    /// Bumped (and futex-woken) when a lane is claimed.
    epoch: AtomicU32,
    app_pid: AtomicU32,
    /// Random identity of this channel: names a lane's calls across a checkpoint and restart.
    id: AtomicU64,
}

#[repr(C)]
struct LaneCtl {
    claimed: AtomicU32,
    served: AtomicU32,
    broken: AtomicU32,
    _p0: [u8; 52],
    /// Bytes ever written by the client.
    head: AtomicU64,
    _p1: [u8; 56],
    /// Bytes ever consumed by the server.
    tail: AtomicU64,
    /// 1 while the server sleeps (futex word).
    server_sleep: AtomicU32,
    _p2: [u8; 52],
    /// Replies ever written (futex word for the client).
    resp_seq: AtomicU32,
    resp_len: AtomicU32,
    /// 1 while the client sleeps.
    client_sleep: AtomicU32,
    /// Replies the client has read (a checkpoint saves a reply written and not yet read).
    consumed: AtomicU32,
}

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER);
const _: () = assert!(std::mem::size_of::<LaneCtl>() <= CTL);

fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call; FUTEX_WAIT only
    // reads it and returns on mismatch, wake, timeout or signal (all fine for our loops).
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            0usize,
            0u32,
        );
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a valid aligned u32; FUTEX_WAKE does not access memory beyond it.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            0usize,
            0usize,
            0u32,
        );
    }
}

/// How long a waiter spins before sleeping on the futex.
const SPIN: Duration = Duration::from_micros(30);
/// How often a sleeping waiter re-checks that the other side is alive.
const POLL: Duration = Duration::from_millis(20);

/// A mapped channel (either side).
pub struct Channel {
    base: *mut u8,
    fd: OwnedFd,
    /// Application side: a pidfd of the proxy (-1: none), owned by the channel.
    watch: AtomicI32,
    /// Application side: the proxy was seen ready. The shared state never goes back to
    /// STARTING, so a channel seen ready that reads STARTING (all zeros) is the memory of a
    /// channel from before a restart that the image kept only as a place — retired, whether
    /// or not `retire` ran in this process (a channel two restarts old was retired by the
    /// process of the first restart).
    seen_ready: std::sync::atomic::AtomicBool,
    /// The channel's identity, read once: its shared copy reads 0 once a restart has retired
    /// the memory, and calls are resumed by names made of it.
    id: AtomicU64,
}

// SAFETY: the mapping is shared memory accessed only through atomics and the disciplined
// ring/reply protocol described in the module docs; the pointer itself is immutable.
unsafe impl Send for Channel {}
// SAFETY: as above.
unsafe impl Sync for Channel {}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: `base` was returned by mmap with length SIZE and no reference into the
        // mapping outlives `self` (lanes hold an `Arc<Channel>`).
        unsafe { libc::munmap(self.base.cast(), SIZE) };
        let w = self.watch.load(Acquire);
        if w >= 0 {
            // SAFETY: the pidfd is owned by this channel and closed once, here.
            unsafe { libc::close(w) };
        }
    }
}

impl Channel {
    /// Create a new channel in a fresh memfd (by `crum run`). The descriptor is not
    /// close-on-exec, so the proxy and the application inherit it.
    pub fn create() -> io::Result<Channel> {
        // SAFETY: the name is a NUL-terminated literal; flags are valid.
        let fd = unsafe { libc::memfd_create(c"crum-channel".as_ptr(), 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: memfd_create returned a fresh descriptor that we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: valid descriptor, size fits in off_t.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), SIZE as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let ch = Channel::map(fd)?;
        let h = ch.header();
        h.magic.store(MAGIC, Relaxed);
        h.version.store(VERSION, Relaxed);
        let id = random_id();
        h.id.store(id, Relaxed);
        ch.id.store(id, Relaxed);
        h.lanes.store(LANES as u32, Release);
        Ok(ch)
    }

    /// Map an inherited channel descriptor (takes ownership of `fd`).
    pub fn open(fd: RawFd) -> Result<Channel, ChannelError> {
        // A closed descriptor must not become an `OwnedFd` (closing it again aborts).
        // SAFETY: F_GETFD on any integer is harmless.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            return Err(ChannelError::Setup(format!("channel descriptor {fd} is not open")));
        }
        // SAFETY: the caller hands us a descriptor number it owns (from CRUM_CHANNEL); if it
        // is not a channel the size and magic checks below reject it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: `stat` is plain old data; all-zero is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is a valid out-pointer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 || (st.st_size as usize) < SIZE {
            return Err(ChannelError::Setup(
                "channel descriptor is not a crum channel".into(),
            ));
        }
        let ch = Channel::map(fd)
            .map_err(|e| ChannelError::Setup(format!("mapping the channel: {e}")))?;
        let h = ch.header();
        if h.magic.load(Acquire) != MAGIC
            || h.version.load(Relaxed) != VERSION
            || h.lanes.load(Relaxed) as usize != LANES
        {
            return Err(ChannelError::Setup(
                "channel header mismatch (different crum version?)".into(),
            ));
        }
        ch.id.store(h.id.load(Relaxed), Relaxed);
        Ok(ch)
    }

    fn map(fd: OwnedFd) -> io::Result<Channel> {
        // SAFETY: mapping a descriptor we own with its full size; MAP_SHARED so both
        // processes see the same pages.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Channel { base: p.cast(), fd, watch: AtomicI32::new(-1), seen_ready: std::sync::atomic::AtomicBool::new(false), id: AtomicU64::new(0) })
    }

    /// In a restarted process, for the channel of a proxy that no longer exists (its memory
    /// came back from the image): replace the mapping with fresh private zero pages marked
    /// dead, so that a thread still holding one of its lanes gets `ProxyGone` at once and
    /// later images store only zero pages for it. Its proxy watch is forgotten.
    pub fn retire(&self) {
        // SAFETY: replaces our own mapping of SIZE bytes at `base` in place (MAP_FIXED over
        // it); references into it (lanes) stay valid, now to zeroed private memory.
        let p = unsafe {
            libc::mmap(
                self.base.cast(),
                SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            self.header().state.store(RETIRED, Release);
        }
        // Its pidfd, too, belonged to the process the image was taken of: the number is not
        // ours here (it may be another descriptor now); forget it without closing it.
        self.watch.store(-1, Release);
    }

    /// Whether this is the retired channel of a proxy from before a restart.
    pub fn retired(&self) -> bool {
        match self.header().state.load(Acquire) {
            RETIRED => true,
            STARTING => self.seen_ready.load(Acquire),
            _ => false,
        }
    }

    /// The channel's random identity.
    pub fn id(&self) -> u64 {
        self.id.load(Relaxed)
    }

    /// Where the channel is mapped in this process: (address, length).
    pub fn mapping(&self) -> (u64, u64) {
        (self.base as u64, SIZE as u64)
    }

    /// The memfd behind the channel.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn header(&self) -> &Header {
        // SAFETY: offset 0 of a live mapping of SIZE bytes, page-aligned, Header fits.
        unsafe { &*(self.base as *const Header) }
    }

    fn ctl(&self, lane: usize) -> &LaneCtl {
        assert!(lane < LANES);
        // SAFETY: in bounds (lane < LANES) and 4 KiB aligned.
        unsafe { &*(self.base.add(HEADER + lane * LANE) as *const LaneCtl) }
    }

    fn ring(&self, lane: usize) -> *mut u8 {
        // SAFETY: in bounds of the mapping.
        unsafe { self.base.add(HEADER + lane * LANE + CTL) }
    }

    fn reply_area(&self, lane: usize) -> *mut u8 {
        // SAFETY: in bounds of the mapping.
        unsafe { self.base.add(HEADER + lane * LANE + CTL + RING) }
    }

    /// Proxy side: announce the proxy's pid and that it serves requests.
    pub fn set_ready(&self, proxy_pid: u32) {
        self.header().proxy_pid.store(proxy_pid, Release);
        self.header().state.store(READY, Release);
    }

    /// `crum run`: the proxy died; every waiting client fails instead of hanging.
    pub fn set_dead(&self) {
        self.header().state.store(DEAD, SeqCst);
        for i in 0..LANES {
            futex_wake(&self.ctl(i).resp_seq);
        }
    }

    /// Proxy side: wake the thread serving `lane` from its idle wait, so that it polls its
    /// `alive` check now (see [`ServerLane::recv`]).
    pub fn wake_server(&self, lane: usize) {
        let c = self.ctl(lane);
        // A thread about to sleep compares against 1: it returns at once.
        c.server_sleep.store(0, SeqCst);
        futex_wake(&c.server_sleep);
    }

    pub fn set_app_pid(&self, pid: u32) {
        self.header().app_pid.store(pid, Release);
    }

    pub fn app_pid(&self) -> u32 {
        self.header().app_pid.load(Acquire)
    }

    /// Whether any claimed lane other than `except` holds requests not yet read.
    pub fn any_pending(&self, except: usize) -> bool {
        (0..LANES).filter(|&i| i != except).any(|i| {
            let c = self.ctl(i);
            c.claimed.load(Acquire) == 1 && c.head.load(Acquire) != c.tail.load(Acquire)
        })
    }

    /// Proxy side: replies written on `lane` so far and replies its client has read.
    pub fn replies(&self, lane: usize) -> (u32, u32) {
        let c = self.ctl(lane);
        (c.resp_seq.load(Acquire), c.consumed.load(Acquire))
    }

    /// Proxy side: the encoded bytes of the last reply written on `lane` (a checkpoint saves
    /// a reply its client has not read yet). Only while that lane's thread writes no reply.
    pub fn last_reply(&self, lane: usize) -> Vec<u8> {
        let c = self.ctl(lane);
        let len = (c.resp_len.load(Acquire) as usize).min(REPLY);
        // SAFETY: in bounds (len <= REPLY); the server writes the slot only when it replies.
        unsafe { std::slice::from_raw_parts(self.reply_area(lane), len) }.to_vec()
    }

    /// Whether claimed lane `lane` holds requests not yet read.
    pub fn pending(&self, lane: usize) -> bool {
        let c = self.ctl(lane);
        c.claimed.load(Acquire) == 1 && c.head.load(Acquire) != c.tail.load(Acquire)
    }

    pub fn proxy_pid(&self) -> u32 {
        self.header().proxy_pid.load(Acquire)
    }

    /// Whether the proxy is (still) serving. Waits up to `timeout` for it to become ready.
    pub fn wait_ready(&self, timeout: Duration) -> Result<(), ChannelError> {
        let t0 = Instant::now();
        loop {
            match self.header().state.load(Acquire) {
                READY => {
                    self.seen_ready.store(true, Release);
                    return Ok(());
                }
                DEAD | RETIRED => return Err(ChannelError::ProxyGone),
                _ if t0.elapsed() > timeout => return Err(ChannelError::ProxyGone),
                _ => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }

    /// Application side, once the proxy is ready: watch it through a pidfd (`pidfd_open` of
    /// the pid it announced), so that its death is seen even while it is an unreaped zombie.
    /// `place` may move the new descriptor (to where crum keeps its own) and returns where it
    /// is; the channel owns it from then on. Returns the descriptor (to exclude it from
    /// checkpoints). A second call returns the first descriptor.
    pub fn watch_proxy(&self, place: impl FnOnce(RawFd) -> RawFd) -> Result<RawFd, ChannelError> {
        let w = self.watch.load(Acquire);
        if w >= 0 {
            return Ok(w);
        }
        let h = self.header();
        if h.state.load(Acquire) != READY {
            return Err(ChannelError::ProxyGone);
        }
        let pid = h.proxy_pid.load(Acquire) as libc::pid_t;
        let fd = match pidfd_open(pid) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Err(ChannelError::ProxyGone),
            Err(e) => return Err(ChannelError::Setup(format!("cannot watch the device proxy {pid}: {e}"))),
        };
        let fd = place(fd);
        self.watch.store(fd, Release);
        Ok(fd)
    }

    /// The pidfd [`watch_proxy`](Self::watch_proxy) opened (-1: none).
    pub fn watch_fd(&self) -> RawFd {
        self.watch.load(Acquire)
    }

    fn proxy_alive(&self) -> bool {
        let h = self.header();
        match h.state.load(Acquire) {
            DEAD | RETIRED => false,
            // Zeros where a ready channel was: retired (see `seen_ready`).
            STARTING => !self.seen_ready.load(Acquire),
            _ => {
                let w = self.watch.load(Acquire);
                match pidfd_exited(w) {
                    Some(false) => return true,
                    Some(true) => {
                        self.proxy_exited(w);
                        return false;
                    }
                    None => {}
                }
                let pid = h.proxy_pid.load(Acquire) as libc::pid_t;
                // SAFETY: kill with signal 0 only checks for existence/permission.
                pid > 0
                    && (unsafe { libc::kill(pid, 0) } == 0
                        || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH))
            }
        }
    }

    /// The watched proxy has exited: mark the channel dead (every waiter fails at once) and
    /// reap the proxy should it be this process's child (it is `crum run`'s, or after a
    /// restart nobody's but the reaper's; the wait then fails harmlessly).
    fn proxy_exited(&self, pidfd: RawFd) {
        self.set_dead();
        // SAFETY: siginfo_t is plain data; waitid writes into the live local.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(libc::P_PIDFD, pidfd as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::__WALL);
        }
    }

    /// Client side: claim a free lane. None when all lanes are taken, or on a retired channel.
    pub fn claim_lane(self: &Arc<Self>) -> Option<ClientLane> {
        // The zero pages of a retired channel look like free lanes: none is one.
        if self.retired() {
            return None;
        }
        for i in 0..LANES {
            let c = self.ctl(i);
            if c.claimed.compare_exchange(0, 1, AcqRel, Relaxed).is_ok() {
                let want = c.resp_seq.load(Acquire);
                let h = self.header();
                h.epoch.fetch_add(1, SeqCst);
                futex_wake(&h.epoch);
                return Some(ClientLane {
                    ch: self.clone(),
                    lane: i,
                    want,
                });
            }
        }
        None
    }

    /// Proxy side: lanes that are claimed but not yet served, marking them served. Blocks up
    /// to `timeout` for a new claim when there is none.
    pub fn accept_lanes(self: &Arc<Self>, timeout: Duration) -> Vec<ServerLane> {
        let h = self.header();
        let epoch = h.epoch.load(SeqCst);
        let found = self.take_claimed();
        if !found.is_empty() {
            return found;
        }
        futex_wait(&h.epoch, epoch, timeout);
        self.take_claimed()
    }

    fn take_claimed(self: &Arc<Self>) -> Vec<ServerLane> {
        (0..LANES)
            .filter(|&i| {
                let c = self.ctl(i);
                c.claimed.load(Acquire) == 1
                    && c.served.compare_exchange(0, 1, AcqRel, Relaxed).is_ok()
            })
            .map(|i| ServerLane {
                ch: self.clone(),
                lane: i,
            })
            .collect()
    }
}

/// `pidfd_open(pid, 0)`: a descriptor that becomes readable when the process exits.
/// A random 64-bit value (the channel's identity); the time and pid if the kernel has no
/// randomness to give.
fn random_id() -> u64 {
    let mut v = 0u64;
    // SAFETY: getrandom writes at most 8 bytes into the local.
    let n = unsafe { libc::getrandom((&mut v as *mut u64).cast(), 8, libc::GRND_NONBLOCK) };
    if n != 8 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        v = t ^ ((std::process::id() as u64) << 40);
    }
    v
}

fn pidfd_open(pid: libc::pid_t) -> io::Result<RawFd> {
    if pid <= 0 {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    // SAFETY: pidfd_open with a pid and no flags; returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as RawFd;
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(fd)
    }
}

/// Whether the process behind pidfd `fd` has exited (a zombie has); None when `fd` is not a
/// usable descriptor.
fn pidfd_exited(fd: RawFd) -> Option<bool> {
    if fd < 0 {
        return None;
    }
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: polls one live pollfd without waiting.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    match r {
        0 => Some(false),
        r if r > 0 && p.revents & libc::POLLNVAL == 0 => Some(true),
        _ => None,
    }
}

/// Another process watched through a pidfd: [`exited`](Self::exited) turns true when it ends,
/// also while it is a zombie nobody reaps (unlike `kill(pid, 0)`). The proxy watches the
/// restored program it serves this way (it is not that program's child).
pub struct PeerWatch(OwnedFd);

impl PeerWatch {
    /// Watches process `pid` (`ESRCH`: it is gone already).
    pub fn open(pid: i32) -> io::Result<PeerWatch> {
        let fd = pidfd_open(pid)?;
        // SAFETY: a new descriptor that nothing else owns.
        Ok(PeerWatch(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Whether the watched process has ended.
    pub fn exited(&self) -> bool {
        pidfd_exited(self.0.as_raw_fd()).unwrap_or(true)
    }
}

/// The application's end of one lane. Not shared between threads (wrap it in a mutex).
pub struct ClientLane {
    ch: Arc<Channel>,
    lane: usize,
    /// Replies received so far (the next reply makes it `want + 1`).
    want: u32,
}

impl ClientLane {
    pub fn index(&self) -> usize {
        self.lane
    }

    pub fn channel(&self) -> &Arc<Channel> {
        &self.ch
    }

    /// Identity of the call the next `call` makes: (channel, lane, reply number). A call cut
    /// by a checkpoint is resumed after the restart under this name.
    pub fn next_call(&self) -> (u64, u32, u32) {
        (self.ch.id(), self.lane as u32, self.want.wrapping_add(1))
    }

    fn push(&mut self, req: &Request, flags: u32) -> Result<(), ChannelError> {
        let c = self.ch.ctl(self.lane);
        if self.ch.retired() {
            return Err(ChannelError::RetiredUnsent);
        }
        if c.broken.load(Acquire) != 0 {
            return Err(ChannelError::Broken);
        }
        let head = c.head.load(Relaxed);
        let pos = (head % RING as u64) as usize;
        let waste = if RING - pos < MAX_MSG + 8 {
            RING - pos
        } else {
            0
        };
        let need = (waste + MAX_MSG + 8) as u64;
        // Wait for the server to free enough space (rare: the ring holds many requests).
        let t0 = Instant::now();
        while head + need - c.tail.load(Acquire) > RING as u64 {
            if t0.elapsed() > SPIN {
                if !self.ch.proxy_alive() {
                    // Retired while it waited for space (a restart): not written either.
                    if self.ch.retired() {
                        return Err(ChannelError::RetiredUnsent);
                    }
                    return Err(ChannelError::ProxyGone);
                }
                std::thread::sleep(Duration::from_micros(50));
            } else {
                std::hint::spin_loop();
            }
        }
        let ring = self.ch.ring(self.lane);
        let mut at = pos;
        if waste != 0 {
            // SAFETY: `pos` is 8-aligned and < RING, so 4 bytes fit; the space is ours.
            unsafe { (ring.add(pos) as *mut u32).write(WRAP) };
            at = 0;
        }
        // SAFETY: [at, at + 8 + MAX_MSG) lies inside the ring and the server has released it
        // (checked against `tail` above).
        let dst = unsafe { std::slice::from_raw_parts_mut(ring.add(at + 8), MAX_MSG) };
        let len = msg::encode_into(req, dst).ok_or(ChannelError::TooLarge)?;
        // SAFETY: as above, header words at an 8-aligned offset inside our space.
        unsafe {
            (ring.add(at) as *mut u32).write(len as u32);
            (ring.add(at + 4) as *mut u32).write(flags);
        }
        let rec = (8 + len).next_multiple_of(8);
        c.head.store(head + (waste + rec) as u64, SeqCst);
        if c.server_sleep.load(SeqCst) == 1 {
            c.server_sleep.store(0, SeqCst);
            futex_wake(&c.server_sleep);
        }
        Ok(())
    }

    /// Send a request without waiting (pipelined).
    pub fn send(&mut self, req: &Request) -> Result<(), ChannelError> {
        self.push(req, 0)
    }

    /// Send a request and wait for its reply.
    pub fn call(&mut self, req: &Request) -> Result<Reply, ChannelError> {
        self.push(req, FLAG_REPLY)?;
        let want = self.want.wrapping_add(1);
        let c = self.ch.ctl(self.lane);
        let t0 = Instant::now();
        let mut spins = 0u32;
        loop {
            let seq = c.resp_seq.load(Acquire);
            if seq == want {
                break;
            }
            if c.broken.load(Acquire) != 0 {
                return Err(ChannelError::Broken);
            }
            spins += 1;
            if spins < 64 || t0.elapsed() < SPIN {
                std::hint::spin_loop();
                continue;
            }
            c.client_sleep.store(1, SeqCst);
            if c.resp_seq.load(SeqCst) == seq {
                futex_wait(&c.resp_seq, seq, POLL);
            }
            c.client_sleep.store(0, SeqCst);
            if c.resp_seq.load(Acquire) != want && !self.ch.proxy_alive() {
                if self.ch.retired() {
                    return Err(ChannelError::Retired);
                }
                return Err(ChannelError::ProxyGone);
            }
        }
        let len = c.resp_len.load(Acquire) as usize;
        if len > MAX_REPLY {
            return Err(self.retired_or(ChannelError::Malformed("reply length".into())));
        }
        // SAFETY: the server finished writing `len` (<= REPLY) bytes before bumping resp_seq,
        // which we observed with Acquire; it will not write again until our next request.
        let src = unsafe { std::slice::from_raw_parts(self.ch.reply_area(self.lane), len) };
        let r = msg::decode(src);
        // A thread a checkpoint stopped while it read the reply finds zero pages after the
        // restart: its call is resumed by name instead (the checkpoint saved unread replies).
        if self.ch.retired() {
            return Err(ChannelError::Retired);
        }
        self.want = want;
        c.consumed.store(want, Release);
        r
    }

    fn retired_or(&self, e: ChannelError) -> ChannelError {
        if self.ch.retired() {
            ChannelError::Retired
        } else {
            e
        }
    }
}

impl Drop for ClientLane {
    fn drop(&mut self) {
        // The server resets and releases the lane when it reads Close.
        let _ = self.push(&Request::Close, 0);
    }
}

/// One received request.
pub struct Incoming {
    pub request: Result<Request, ChannelError>,
    pub wants_reply: bool,
}

/// The proxy's end of one lane.
pub struct ServerLane {
    ch: Arc<Channel>,
    lane: usize,
}

impl ServerLane {
    pub fn index(&self) -> usize {
        self.lane
    }

    /// Wait for the next request. Err(Broken) when the client violated the framing (the lane
    /// is then dead); Err(Closed) never happens here — Close arrives as a request.
    /// `alive` is polled while idle; returning false ends the wait with ProxyGone.
    pub fn recv(&mut self, alive: &dyn Fn() -> bool) -> Result<Incoming, ChannelError> {
        self.recv_counting(alive, None)
    }

    /// [`ServerLane::recv`] that adds 1 to `taken` before the request leaves the ring (before
    /// `tail` moves), so that an observer who sees the lane empty ([`Channel::any_pending`])
    /// and `taken` unchanged knows no request was taken and not yet counted: the caller
    /// subtracts it once the request is handled (or needs no waiting for).
    pub fn recv_counting(&mut self, alive: &dyn Fn() -> bool, taken: Option<&AtomicUsize>) -> Result<Incoming, ChannelError> {
        let c = self.ch.ctl(self.lane);
        let mut t0 = Instant::now();
        let mut spins = 0u32;
        let tail = c.tail.load(Relaxed);
        loop {
            let head = c.head.load(Acquire);
            if head != tail {
                if head < tail || head - tail > RING as u64 {
                    return Err(self.corrupt());
                }
                return self.read_at(tail, head, taken);
            }
            spins += 1;
            if spins < 64 || t0.elapsed() < SPIN * 4 {
                std::hint::spin_loop();
                continue;
            }
            c.server_sleep.store(1, SeqCst);
            if c.head.load(SeqCst) == tail {
                futex_wait(&c.server_sleep, 1, POLL * 5);
            }
            c.server_sleep.store(0, SeqCst);
            if !alive() {
                return Err(ChannelError::ProxyGone);
            }
            t0 = Instant::now();
            spins = 0;
        }
    }

    fn corrupt(&self) -> ChannelError {
        let c = self.ch.ctl(self.lane);
        c.broken.store(1, SeqCst);
        futex_wake(&c.resp_seq);
        ChannelError::Broken
    }

    fn read_at(&mut self, tail: u64, head: u64, taken: Option<&AtomicUsize>) -> Result<Incoming, ChannelError> {
        let c = self.ch.ctl(self.lane);
        let ring = self.ch.ring(self.lane);
        let mut pos = (tail % RING as u64) as usize;
        let mut consumed = 0usize;
        // SAFETY: pos is 8-aligned and < RING; the client published this record (head > tail).
        let mut len = unsafe { (ring.add(pos) as *const u32).read_volatile() };
        if len == WRAP {
            consumed = RING - pos;
            pos = 0;
            if head - tail <= consumed as u64 {
                return Err(self.corrupt());
            }
            // SAFETY: offset 0 of the ring.
            len = unsafe { (ring as *const u32).read_volatile() };
        }
        let len = len as usize;
        if len > MAX_MSG || pos + 8 + len > RING {
            return Err(self.corrupt());
        }
        let rec = (8 + len).next_multiple_of(8);
        if (consumed + rec) as u64 > head - tail {
            return Err(self.corrupt());
        }
        // SAFETY: bounds checked above; the bytes were published before `head`.
        let flags = unsafe { (ring.add(pos + 4) as *const u32).read_volatile() };
        // SAFETY: as above.
        let payload = unsafe { std::slice::from_raw_parts(ring.add(pos + 8), len) };
        let request = msg::decode::<Request>(payload);
        if let Some(t) = taken {
            t.fetch_add(1, SeqCst);
        }
        c.tail.store(tail + (consumed + rec) as u64, Release);
        Ok(Incoming {
            request,
            wants_reply: flags & FLAG_REPLY != 0,
        })
    }

    /// Write an already encoded reply (one a checkpoint saved).
    pub fn reply_raw(&mut self, bytes: &[u8]) {
        let c = self.ch.ctl(self.lane);
        let n = bytes.len().min(REPLY);
        // SAFETY: the reply slot belongs to the server until it bumps resp_seq.
        let dst = unsafe { std::slice::from_raw_parts_mut(self.ch.reply_area(self.lane), REPLY) };
        dst[..n].copy_from_slice(&bytes[..n]);
        c.resp_len.store(n as u32, Release);
        c.resp_seq.fetch_add(1, SeqCst);
        if c.client_sleep.load(SeqCst) == 1 {
            futex_wake(&c.resp_seq);
        }
    }

    /// Write the reply to the last request that wanted one.
    pub fn reply(&mut self, r: &Reply) {
        let c = self.ch.ctl(self.lane);
        // SAFETY: the reply slot belongs to the server until it bumps resp_seq.
        let dst = unsafe { std::slice::from_raw_parts_mut(self.ch.reply_area(self.lane), REPLY) };
        let len = match msg::encode_into(r, dst) {
            Some(n) => n,
            None => msg::encode_into(&Reply::err(crate::cuda::ERROR_UNKNOWN), dst)
                .expect("small reply fits"),
        };
        c.resp_len.store(len as u32, Release);
        c.resp_seq.fetch_add(1, SeqCst);
        if c.client_sleep.load(SeqCst) == 1 {
            futex_wake(&c.resp_seq);
        }
    }

    /// The client closed the lane: reset it for the next thread and release it.
    pub fn release(self) {
        let c = self.ch.ctl(self.lane);
        let head = c.head.load(Acquire);
        c.head.store(0, Relaxed);
        c.tail.store(0, Relaxed);
        let _ = head;
        c.broken.store(0, Relaxed);
        c.served.store(0, Release);
        c.claimed.store(0, Release);
    }
}

/// Duplicate a descriptor without close-on-exec at a number ≥ `min` (used by `crum run` to
/// hand the channel to children).
pub fn inheritable_dup(fd: RawFd, min: RawFd) -> io::Result<RawFd> {
    // SAFETY: F_DUPFD on a valid descriptor.
    let r = unsafe { libc::fcntl(fd, libc::F_DUPFD, min) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}
