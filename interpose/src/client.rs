//! The application's side of the channel: connecting (the memfd named by `CRUM_CHANNEL`),
//! one lane per calling thread, synchronous calls and pipelined sends, forwarding device
//! printf output, the device address window (reserved PROT_NONE so no host allocation can
//! land on a device address), shared mappings for managed/pinned memory, and the thread that
//! runs host callbacks when the proxy asks.
//!
//! # Safety
//! The window reservation uses MAP_FIXED_NOREPLACE (never clobbers a mapping); shared
//! mappings are placed with MAP_FIXED only inside that window, at addresses the proxy handed
//! out for allocations that the interposer tracks, so they replace only our own reservation.
//! Host callbacks are the application's own function pointers, called with its own argument,
//! exactly as the CUDA runtime would.
#![allow(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, OnceLock};
use std::time::Duration;

use crum_wire::{cuda, Body, Channel, ChannelError, ClientLane, Request};

use crate::errors::{record, CudaResult};

struct Conn {
    ch: Arc<Channel>,
    /// Shared lane for threads that find no free lane (and for calls during thread exit).
    overflow: Mutex<ClientLane>,
    /// Reserved for the host-callback thread (claimed up front: it blocks in WaitCallback and
    /// must never have to share the overflow lane).
    callbacks: Mutex<Option<ClientLane>>,
    /// Reserved for the checkpoint agent: a program thread that holds the overflow lane (one
    /// exiting: its own lane is gone with its thread-locals) and waits on a checkpoint's cut
    /// must not keep the agent from finishing, or ending, that checkpoint.
    agent: Mutex<Option<ClientLane>>,
    proxy_pid: u32,
}

static CONN: OnceLock<CudaResult<&'static Conn>> = OnceLock::new();
/// The connection that replaced the first one after a restart (a fresh proxy); leaked, so
/// references handed out stay valid.
static CURRENT: AtomicPtr<Conn> = AtomicPtr::new(std::ptr::null_mut());
/// Bumped when [`CURRENT`] changes: lanes claimed under an older generation are stale.
static GEN: AtomicU64 = AtomicU64::new(0);
static GONE: AtomicBool = AtomicBool::new(false);
/// The device address window is reserved in this process (by the first connection; an image
/// brings the reservation back with it).
static WINDOW_RESERVED: AtomicBool = AtomicBool::new(false);
/// Set in a child created by fork(): it shares our lanes' memory, so it must not use them
/// (CUDA, too, refuses a forked child with cudaErrorInitializationError).
static FORKED: AtomicBool = AtomicBool::new(false);

extern "C" fn after_fork_in_child() {
    FORKED.store(true, Ordering::SeqCst);
}

thread_local! {
    /// This thread's lane and the connection generation it belongs to.
    static LANE: RefCell<Option<(u64, ClientLane)>> = const { RefCell::new(None) };
    /// 1 + the connection generation in which this thread found no free lane and went to the
    /// overflow lane (0: never). It stays there for that connection: requests it sent on the
    /// overflow lane may still be unread, and a call on a lane claimed later (one freed by a
    /// thread that exited) would overtake them (a stream synchronize answered before the
    /// launch it must wait for was even seen).
    static ON_OVERFLOW: Cell<u64> = const { Cell::new(0) };
}

/// Start logging if `CRUM_LOG` asks for it (silent otherwise): to `CRUM_LOG_FILE` or stderr.
pub fn init_logging() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let Ok(filter) = std::env::var("CRUM_LOG") else {
            return;
        };
        let filter = tracing_subscriber::EnvFilter::new(filter);
        let b = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false);
        match std::env::var("CRUM_LOG_FILE").ok().and_then(|p| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .ok()
        }) {
            Some(f) => {
                let _ = b.with_writer(Mutex::new(f)).try_init();
            }
            None => {
                let _ = b.with_writer(std::io::stderr).try_init();
            }
        }
    });
}

fn connect() -> CudaResult<Conn> {
    init_logging();
    // Taken over from `CRUM_CHANNEL` by the library's constructor (`agent_hook`).
    // Without one (a program a script or launcher of the job started as a child): a proxy
    // of its own (`own_proxy`), whose channel is crum's like `crum run`'s.
    let fd: i32 = match crate::agent_hook::channel_fd() {
        Some(fd) if crate::agent_hook::crum_exec_channel() == fd => fd,
        Some(_) => {
            // A child forked (without exec) from the process that holds the channel, before
            // that process used CUDA: the device is its parent's, whose checkpoints save it,
            // and a child connecting would take it from the parent. It executed nothing, so
            // it gets no proxy of its own either (`own_proxy`).
            tracing::error!("a child forked without exec gets no CUDA device under crum (execute the CUDA program instead)");
            return Err(cuda::ERROR_NO_DEVICE);
        }
        None => {
            let fd = crate::own_proxy::start()?;
            crate::agent_hook::set_channel_fd(fd);
            crum_ckpt::agent::exclude_fd(fd);
            fd
        }
    };
    connect_fd(fd, true)
}

/// Connect through the channel memfd `fd`; `first`: this process's first connection (reserve
/// the device window, register the fork handler), not a restarted process's new proxy.
fn connect_fd(fd: i32, first: bool) -> CudaResult<Conn> {
    let ch = Arc::new(Channel::open(fd).map_err(|e| {
        tracing::error!("cannot open the crum channel: {e}");
        cuda::ERROR_INITIALIZATION
    })?);
    // Its bytes mean nothing after a restart (the restore hook maps a new channel and
    // retires this one to zeros): images keep the place, not the 80 MiB (which a checkpoint
    // used to copy, touching every page, during the pause).
    let (at, len) = ch.mapping();
    crum_ckpt::agent::scratch_region(at, len);
    ch.wait_ready(Duration::from_secs(60)).map_err(|e| {
        init_logging();
        tracing::error!("the crum device proxy did not get ready ({e}): no CUDA device");
        cuda::ERROR_DEVICES_UNAVAILABLE
    })?;
    // The proxy's death must be seen even while it is a zombie that its parent has not
    // reaped yet (`kill(pid, 0)` succeeds on a zombie): a pidfd, crum's own descriptor,
    // above the program's range.
    match ch.watch_proxy(crum_ckpt::highfd::move_high_raw) {
        Ok(w) => crum_ckpt::agent::exclude_fd(w),
        Err(ChannelError::ProxyGone) => {
            init_logging();
            tracing::error!("the crum device proxy ended as this process connected: no CUDA device");
            return Err(cuda::ERROR_DEVICES_UNAVAILABLE);
        }
        Err(e) => tracing::warn!("{e}; a dead proxy is noticed by its pid only"),
    }
    // One CUDA process per proxy: a second process that inherited the channel (a child the
    // program started) must not drive the first one's device state.
    let owner = ch.app_pid();
    if owner != 0 && owner != crum_ckpt::threads::real_pid() as u32 {
        tracing::error!("process {owner} already uses this crum proxy; run other CUDA programs under their own `crum run`");
        return Err(cuda::ERROR_DEVICES_UNAVAILABLE);
    }
    // The window may be ours already: an image taken while the first connection was under
    // way (its threads had registered kernels, no call had finished) restarts with it.
    if first && !WINDOW_RESERVED.load(Ordering::SeqCst) {
        reserve_window()?;
        WINDOW_RESERVED.store(true, Ordering::SeqCst);
    }
    // The proxy is our sibling, not our parent: under Yama ptrace_scope=1 it may only read
    // our memory (cross-memory attach) if we name it. EINVAL without Yama is fine.
    // SAFETY: prctl with integer arguments only.
    unsafe {
        libc::prctl(
            libc::PR_SET_PTRACER,
            ch.proxy_pid() as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if first {
        // SAFETY: registers a handler that only stores to an atomic (async-signal-safe).
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    }
    // Lanes come back as the proxy's threads see their clients gone (a program image an exec
    // replaced): wait a little for one rather than fail at once.
    let t0 = std::time::Instant::now();
    let mut overflow = loop {
        match ch.claim_lane() {
            Some(l) => break l,
            None if t0.elapsed() < Duration::from_secs(2) => std::thread::sleep(Duration::from_millis(1)),
            None => {
                tracing::error!("every lane of the crum channel is taken");
                return Err(cuda::ERROR_DEVICES_UNAVAILABLE);
            }
        }
    };
    // Hello before any other lane is claimed: when this process executed a new program, the
    // proxy takes every lane but this one for the old image's and releases them.
    let reply = overflow
        .call(&Request::Hello {
            pid: crum_ckpt::threads::real_pid() as u32,
        })
        .map_err(chan_err)?;
    if reply.status != 0 {
        return Err(reply.status);
    }
    let callbacks = ch.claim_lane();
    let agent = ch.claim_lane();
    let proxy_pid = ch.proxy_pid();
    Ok(Conn {
        ch,
        overflow: Mutex::new(overflow),
        callbacks: Mutex::new(callbacks),
        agent: Mutex::new(agent),
        proxy_pid,
    })
}

fn conn() -> CudaResult<&'static Conn> {
    if GONE.load(Ordering::Relaxed) {
        return Err(cuda::ERROR_DEVICES_UNAVAILABLE);
    }
    if FORKED.load(Ordering::Relaxed) {
        return Err(cuda::ERROR_INITIALIZATION);
    }
    let p = CURRENT.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: CURRENT only ever holds leaked (never freed) connections.
        return Ok(unsafe { &*p });
    }
    let r = *CONN.get_or_init(|| connect().map(|c| &*Box::leak(Box::new(c))));
    // A restart connected this process anew while this thread waited for a first connection
    // that began before the checkpoint (and cannot finish: its channel is gone).
    let p = CURRENT.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: as above.
        return Ok(unsafe { &*p });
    }
    r
}

/// The connection in use, if this process has one (without connecting).
fn current() -> Option<&'static Conn> {
    let p = CURRENT.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: as in `conn`.
        return Some(unsafe { &*p });
    }
    match CONN.get() {
        Some(Ok(c)) => Some(*c),
        _ => None,
    }
}

/// Whether this process has connected (without connecting).
pub fn connected() -> bool {
    current().is_some() && !GONE.load(Ordering::Relaxed) && !FORKED.load(Ordering::Relaxed)
}

/// The proxy's pid (0 when not connected).
pub fn proxy_pid() -> u32 {
    current().map_or(0, |c| c.proxy_pid)
}

/// Restart: connect to the fresh proxy behind channel memfd `fd` and make it the connection
/// every thread uses from now on. The old channel (restored from the image; its proxy is
/// gone) is retired, so a thread still waiting on it sees `ProxyGone` and moves over.
pub fn reconnect(fd: i32) -> Result<(), String> {
    // The old proxy's pidfd came back with the image but is not open here: its number is
    // free for the program again (unless it is the new channel's).
    if let Some(w) = current().map(|o| o.ch.watch_fd()).filter(|&w| w >= 0 && w != fd) {
        crum_ckpt::agent::include_fd(w);
    }
    // A program saved before its first CUDA call connects here for the first time.
    let c = connect_fd(fd, current().is_none()).map_err(|e| format!("cannot connect to the new device proxy ({})", cuda::name(e)))?;
    crate::agent_hook::set_channel_fd(fd);
    let old = current();
    let new: &'static Conn = Box::leak(Box::new(c));
    CURRENT.store(new as *const Conn as *mut Conn, Ordering::Release);
    GEN.fetch_add(1, Ordering::AcqRel);
    GONE.store(false, Ordering::SeqCst);
    if let Some(o) = old {
        o.ch.retire();
    }
    Ok(())
}

/// A request from the checkpoint agent (not a program thread): sent on the agent's own lane,
/// without the managed-memory hook. The proxy answers checkpoint requests without
/// touching the program's pending errors and printf output (they are part of the saved
/// state). Must not block on locks a stopped program thread may hold: the lane is only tried.
pub fn agent_call(req: &Request) -> Result<Body, String> {
    let c = conn().map_err(|e| format!("no device connection ({})", cuda::name(e)))?;
    // The agent's own lane (only the agent uses it, one call at a time); the shared overflow
    // lane only where every lane was taken at connection.
    let reply = match c.agent.try_lock() {
        Ok(mut g) if g.is_some() => g.as_mut().map(|l| l.call(req)),
        _ => None,
    };
    let reply = match reply {
        Some(r) => r,
        None => {
            let mut lane = c.overflow.try_lock().map_err(|_| "the shared channel lane is busy".to_string())?;
            lane.call(req)
        }
    };
    let reply = reply.map_err(|e| format!("the device proxy did not answer: {e}"))?;
    if let Body::Failed(msg) = reply.body {
        return Err(msg);
    }
    if reply.status != 0 {
        return Err(format!("the device proxy answered {}", cuda::name(reply.status)));
    }
    Ok(reply.body)
}

/// Whether the channel is up (connecting on first use).
pub fn ensure() -> CudaResult<()> {
    conn().map(|_| ())
}

fn chan_err(e: ChannelError) -> u32 {
    match e {
        ChannelError::ProxyGone | ChannelError::Broken => {
            if !GONE.swap(true, Ordering::SeqCst) {
                init_logging();
                tracing::error!("the crum device proxy is gone: CUDA calls fail from now on");
            }
            cuda::ERROR_DEVICES_UNAVAILABLE
        }
        ChannelError::TooLarge => cuda::ERROR_INVALID_VALUE,
        ChannelError::RetiredUnsent => cuda::ERROR_DEVICES_UNAVAILABLE,
        _ => cuda::ERROR_UNKNOWN,
    }
}

/// Runs `f` on this thread's lane (or the shared overflow lane) of the connection in use,
/// and returns with its result the connection generation it used.
fn with_lane<R>(f: &mut dyn FnMut(&mut ClientLane) -> R) -> CudaResult<(u64, R)> {
    // The connection and its generation, read as a pair: a thread a checkpoint stopped
    // between the two (a call counts as waiting for the proxy from `call_begin` on) read the
    // connection of before a restart and the generation of after it, claimed a lane of the
    // retired channel as a lane of the new one, and its call was cut twice under one name
    // (cudaErrorDevicesUnavailable: `many_threads`, a restart of a restart checkpointed as
    // its threads made their first calls).
    let (c, gen) = loop {
        let gen = GEN.load(Ordering::Acquire);
        let c = conn()?;
        if GEN.load(Ordering::Acquire) == gen {
            break (c, gen);
        }
    };
    let tls = LANE.try_with(|l| {
        let mut b = l.try_borrow_mut().ok()?;
        if b.as_ref().is_some_and(|(g, _)| *g != gen) {
            // A lane of the proxy before a restart: its memory is retired; never touch it.
            if let Some(stale) = b.take() {
                std::mem::forget(stale);
            }
        }
        if b.is_none() {
            if ON_OVERFLOW.try_with(|o| o.get() == gen + 1).unwrap_or(true) {
                return None;
            }
            *b = c.ch.claim_lane().map(|l| (gen, l));
            if b.is_none() {
                let _ = ON_OVERFLOW.try_with(|o| o.set(gen + 1));
            }
        }
        b.as_mut().map(|(_, l)| f(l))
    });
    match tls {
        Ok(Some(r)) => Ok((gen, r)),
        _ => Ok((gen, f(&mut c.overflow.lock().unwrap_or_else(|p| p.into_inner())))),
    }
}

/// A request found the lane's channel retired before it was written (a thread that waited
/// for the shared overflow lane of the connection of before a restart): whether a newer
/// connection exists to send it on. Never when the connection in use is the retired one.
fn unsent_again(gen: u64) -> bool {
    if GEN.load(Ordering::Acquire) != gen {
        return true;
    }
    init_logging();
    tracing::error!("a CUDA call found its channel retired by a restart, but no new device proxy took over");
    false
}

/// Write device printf output where the application's own printf goes (C stdio, so the two
/// interleave in program order).
fn forward_printf(bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    extern "C" {
        static mut stdout: *mut libc::FILE;
    }
    // SAFETY: `stdout` is libc's stream; fwrite reads `bytes.len()` bytes from a live slice.
    unsafe {
        let out = stdout;
        libc::fwrite(bytes.as_ptr().cast(), 1, bytes.len(), out);
    }
}

/// A synchronous call: the reply's body, or its `cudaError_t`.
pub fn call(req: &Request) -> CudaResult<Body> {
    // Connected before the thread counts as waiting for the proxy: a checkpoint must wait
    // for a first connection (Hello, lanes) to finish. A cut taken in its middle restarted a
    // thread half connected to a proxy that was gone; it then said Hello to the new proxy,
    // which took it for an exec of the process and dropped the restored device state
    // (`many_threads`: cudaErrorInvalidResourceHandle after a checkpoint of a restarted
    // program, cudaErrorDevicesUnavailable after a restart of a restart).
    conn()?;
    crate::managed::before_request(req);
    let counted = crate::ckpt::call_begin();
    let reply = call_resumable(req);
    crate::ckpt::call_end(counted);
    let reply = reply?;
    crate::managed::after_request(req);
    finish(reply)
}

/// Send `req` and wait for its reply. A call that a checkpoint cut (the restart retired the
/// channel it waited on) is resumed by name on the new proxy: `Resume` answers with the
/// call's reply, or `NotCarried` when the checkpoint had not started it, and then it is sent
/// again. A `Resume` cut by a later checkpoint is itself resumed the same way.
fn call_resumable(req: &Request) -> CudaResult<crum_wire::Reply> {
    let mut stack: Vec<Request> = Vec::new();
    let mut resume: Option<Request> = None;
    let mut last_cut = None;
    loop {
        let cur = resume.as_ref().unwrap_or(req);
        let (gen, (name, r)) = with_lane(&mut |l| (l.next_call(), l.call(cur)))?;
        match r {
            // Never written (the old proxy never saw it): the same request again, on the
            // connection that replaced the retired one.
            Err(ChannelError::RetiredUnsent) if unsent_again(gen) => {}
            Err(ChannelError::RetiredUnsent) => return Err(cuda::ERROR_DEVICES_UNAVAILABLE),
            Ok(reply) if reply.body == Body::NotCarried && resume.is_some() => {
                resume = stack.pop();
            }
            Ok(reply) => return Ok(reply),
            // The same lane retired twice: no newer channel replaced it (never loop on it).
            Err(ChannelError::Retired) if last_cut == Some(name) => {
                init_logging();
                tracing::error!("a CUDA call was cut by a checkpoint but no new device proxy took over");
                return Err(cuda::ERROR_DEVICES_UNAVAILABLE);
            }
            Err(ChannelError::Retired) => {
                last_cut = Some(name);
                if let Some(r) = resume.take() {
                    stack.push(r);
                }
                let (channel, lane, seq) = name;
                resume = Some(Request::Resume { channel, lane, seq });
            }
            Err(e) => return Err(chan_err(e)),
        }
    }
}

fn finish(reply: crum_wire::Reply) -> CudaResult<Body> {
    forward_printf(&reply.printf);
    if reply.deferred != 0 {
        record(reply.deferred);
    }
    if reply.status != 0 {
        Err(reply.status)
    } else {
        Ok(reply.body)
    }
}

/// A pipelined request: sent without waiting; its errors surface at a later call.
pub fn send(req: &Request) -> CudaResult<()> {
    // Pipelined requests are work (launches, copies, event records…): after a sticky error
    // they fail at once, as every call does on a corrupt context (the proxy refuses them too).
    crate::errors::sticky()?;
    crate::managed::before_request(req);
    loop {
        match with_lane(&mut |l| l.send(req))? {
            // As in `call_resumable`: a launch a thread held back by the cut (waiting for the
            // shared overflow lane) is sent to the new proxy, not lost.
            (gen, Err(ChannelError::RetiredUnsent)) if unsent_again(gen) => {}
            (_, r) => return r.map_err(chan_err),
        }
    }
}

/// Reserve the device address window in this process.
fn reserve_window() -> CudaResult<()> {
    // SAFETY: MAP_FIXED_NOREPLACE never replaces a mapping; PROT_NONE commits nothing.
    let p = unsafe {
        libc::mmap(
            crum_wire::DEVICE_VA_BASE as *mut libc::c_void,
            crum_wire::DEVICE_VA_SIZE as usize,
            libc::PROT_NONE,
            libc::MAP_PRIVATE
                | libc::MAP_ANONYMOUS
                | libc::MAP_NORESERVE
                | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if p as u64 != crum_wire::DEVICE_VA_BASE {
        tracing::error!(
            "the device address window {:#x} is taken in this process",
            crum_wire::DEVICE_VA_BASE
        );
        return Err(cuda::ERROR_INITIALIZATION);
    }
    Ok(())
}

fn in_window(addr: u64, len: u64) -> bool {
    addr >= crum_wire::DEVICE_VA_BASE
        && addr.saturating_add(len) <= crum_wire::DEVICE_VA_BASE + crum_wire::DEVICE_VA_SIZE
}

/// Map the proxy's shared memory `memfd` at `addr` (managed and pinned memory).
pub fn map_shared(addr: u64, len: u64, memfd: i32) -> CudaResult<()> {
    let c = conn()?;
    let span = len.max(1).next_multiple_of(4096);
    if !in_window(addr, span) {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let path = format!("/proc/{}/fd/{}\0", c.proxy_pid, memfd);
    // SAFETY: NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        tracing::error!(
            "cannot open the proxy's shared memory {path}: {}",
            std::io::Error::last_os_error()
        );
        return Err(cuda::ERROR_MEMORY_ALLOCATION);
    }
    // SAFETY: see module docs: inside our own window reservation.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            span as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd,
            0,
        )
    };
    // SAFETY: closing the descriptor we opened; the mapping keeps the memory alive.
    unsafe { libc::close(fd) };
    if p == libc::MAP_FAILED {
        return Err(cuda::ERROR_MEMORY_ALLOCATION);
    }
    // The proxy saves these bytes with the device state and a restart maps them again: the
    // process image need not carry them (and could only copy them while they change).
    crum_ckpt::agent::exclude_region(addr, span);
    Ok(())
}

/// Put the reservation back over a freed shared mapping.
pub fn unmap_shared(addr: u64, len: u64) {
    let span = len.max(1).next_multiple_of(4096);
    if !in_window(addr, span) {
        return;
    }
    crum_ckpt::agent::include_region(addr);
    // SAFETY: see module docs.
    unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            span as usize,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
            -1,
            0,
        )
    };
}

/// Host function signature (`cudaHostFn_t`).
pub type HostFn = unsafe extern "C" fn(*mut libc::c_void);

/// Start (once) the thread that runs host functions when a stream reaches them.
pub fn start_callback_thread() -> CudaResult<()> {
    static STARTED: OnceLock<CudaResult<()>> = OnceLock::new();
    *STARTED.get_or_init(|| {
        let c = conn()?;
        let mut lane = c
            .callbacks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(|| {
                tracing::error!("no channel lane is left for host callbacks");
                cuda::ERROR_DEVICES_UNAVAILABLE
            })?;
        let mut gen = GEN.load(Ordering::Acquire);
        std::thread::Builder::new()
            .name("crum-callbacks".into())
            .spawn(move || loop {
                let reply = match lane.call(&Request::WaitCallback) {
                    // A restart replaced the proxy: move to the new one's callback lane.
                    Err(_) if GEN.load(Ordering::Acquire) != gen => {
                        let Some(next) = current().and_then(|c| c.callbacks.lock().unwrap_or_else(|p| p.into_inner()).take())
                        else {
                            return;
                        };
                        std::mem::forget(std::mem::replace(&mut lane, next));
                        gen = GEN.load(Ordering::Acquire);
                        continue;
                    }
                    r => r.map_err(chan_err).and_then(finish),
                };
                match reply {
                    Ok(Body::Callback { id, func, data }) => {
                        // The stream's earlier work is done: the host function sees its
                        // results, and the work after it sees what the function wrote.
                        crate::managed::sync_point();
                        if func != 0 {
                            // SAFETY: `func` is the host function pointer the application
                            // passed to cudaLaunchHostFunc/cudaStreamAddCallback (module docs).
                            let f: HostFn =
                                unsafe { std::mem::transmute::<usize, HostFn>(func as usize) };
                            // SAFETY: as above; called with the application's own argument.
                            unsafe { f(data as *mut libc::c_void) };
                        }
                        crate::managed::sync_point();
                        let _ = lane.send(&Request::CallbackDone { id });
                    }
                    Ok(_) => {}
                    Err(_) => return,
                }
            })
            .map(|_| ())
            .map_err(|_| cuda::ERROR_UNKNOWN)
    })
}
