//! The interpreter. Each block runs on one worker; its threads are interpreted one at a
//! time, each until it reaches a barrier, a warp-synchronous operation, or its end. When no
//! thread of the block can run, pending warp operations whose member lanes have all arrived
//! complete together, then barriers whose thread count is reached release. No thread can
//! run and nothing completes → `Deadlock` (never a hang).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crate::api::{DeviceMemory, LaunchConfig, LaunchError, LaunchOutput, Module, Pool};
use crate::fp;
use crate::ir::*;
use crate::mem::{region_of, Regions};
use crate::parse::FRAME_PARAM_BASE;

/// Generic-address windows of the per-block and per-thread state spaces. They sit in the
/// non-canonical part of the 64-bit space, so no real device address can collide.
pub(crate) const SHARED_WIN: u64 = 0xFFFF_8000_0000_0000;
pub(crate) const LOCAL_WIN: u64 = 0xFFFF_9000_0000_0000;
pub(crate) const PARAM_WIN: u64 = 0xFFFF_A000_0000_0000;
/// The cooperative-groups grid-sync workspace (`%envreg1/2`).
pub(crate) const GRID_WIN: u64 = 0xFFFF_B000_0000_0000;
const WIN_SIZE: u64 = 1 << 40;
/// Shared and local addresses are 32-bit (as on a GPU): their windows are 4 GiB, and an
/// address computed in either space wraps to 32 bits.
const WIN32_SIZE: u64 = 1 << 32;

/// Threads per block, as on every CUDA GPU.
const MAX_THREADS_PER_BLOCK: u64 = 1024;
/// Estimated remaining grid time above which helper workers are started.
const SPAWN_WORTH_S: f64 = 300e-6;
/// Steps (instructions per thread) a warp runs before the other warps of its block get a
/// turn, so a thread that spins on a flag another warp of its block sets makes progress.
const YIELD_AFTER: u64 = 1 << 16;
/// Steps the lowest-pc threads of a warp run alone before the warp's other running threads
/// step with them for as long ([`Block::run_warp`]).
const STARVE_AFTER: u64 = 1 << 20;
/// Blocks of a grid-synchronizing (cooperative) grid the engine keeps resident at most: all of
/// them live at once, spread over the workers (the device refuses larger grids at launch by
/// its occupancy limit, which is lower).
const MAX_COOP_BLOCKS: u64 = 1 << 14;
/// Steps per warp turn when a worker keeps many blocks of a cooperative grid resident.
const COOP_QUANTUM: u64 = 1 << 11;
/// Shared memory per block the emulated device offers at most (the largest GPUs: 228 KiB).
const MAX_SHARED_BYTES: u64 = 228 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    Run,
    /// Waiting at `bar.sync id, count` (count 0 = all threads).
    Bar(u32, u32),
    /// Waiting at a warp-synchronous instruction (pc points at it).
    Warp,
    Done,
}

#[derive(Debug, Clone, Copy)]
struct Frame {
    ret_pc: u32,
    rb: u32,
    fb: u32,
    lb: u32,
    func: u32,
    call: u32,
}

pub(crate) struct Thread {
    pc: u32,
    regs: Vec<u64>,
    rb: usize,
    pframe: Vec<u8>,
    fb: usize,
    /// `.local` memory: one frame per active call, `lb` is the current one's start.
    local: Vec<u8>,
    lb: usize,
    func: u32,
    frames: Vec<Frame>,
    st: St,
    tid: [u32; 3],
    /// Linear thread index in the block.
    lin: u32,
}

/// Everything a launch shares between workers.
struct Launch<'a> {
    prog: &'a Program,
    func: u32,
    cfg: LaunchConfig,
    params: &'a [u8],
    syms: Vec<u64>,
    /// Shared-space offset of every `.shared` variable in this kernel's layout.
    shared_offs: &'a [u64],
    /// Bytes of a block's shared memory: reserved region, static variables, dynamic part.
    shared_len: u64,
    t0: Instant,
    /// The grid-sync workspace (`%envreg1/2`), when the kernel uses grid sync.
    grid_buf: Option<Vec<AtomicU64>>,
    stop: AtomicBool,
    /// The launch's control mode (a checkpoint may flush it).
    flush: Option<&'a std::sync::atomic::AtomicU8>,
}

/// Per-block state on one worker.
pub(crate) struct Block<'a, 'l> {
    l: &'l Launch<'a>,
    regions: Regions<'a>,
    pub(crate) ctaid: [u32; 3],
    shared: Vec<u8>,
    pub(crate) printf: Vec<u8>,
    /// `bar.arrive` arrivals per barrier id not yet consumed by a release.
    arrivals: [u32; 16],
    insts: u64,
    nthreads: u32,
    /// Set when the block was saved in the middle ([`crate::api::LaunchCtl::SAVE`]).
    saved: Option<crate::api::BlockContext>,
    /// Per warp: steps its lowest-pc threads ran alone, steps all may still run
    /// ([`Block::run_warp`]); kept across the warp's turns.
    starve: Vec<(u64, u64)>,
    /// Steps a warp runs per turn ([`YIELD_AFTER`]; shorter when a worker keeps many blocks
    /// of a cooperative grid resident, so blocks spinning in `grid.sync()` pass the turn soon).
    quantum: u64,
}

type R<T> = Result<T, LaunchError>;

#[allow(clippy::too_many_arguments)]
pub(crate) fn launch(
    module: &Module,
    kernel: &str,
    cfg: &LaunchConfig,
    params: &[u8],
    symbols: &dyn Fn(&str) -> Option<u64>,
    mem: &dyn DeviceMemory,
    pool: &Pool,
    first_block: u64,
    ctl: Option<&crate::api::LaunchCtl>,
    contexts: Vec<crate::api::BlockContext>,
) -> R<LaunchOutput> {
    let prog = &module.prog;
    let ki = prog.kernels.iter().position(|k| k.name == kernel).ok_or_else(|| LaunchError::KernelNotFound(kernel.into()))?;
    let info = &prog.kernels[ki];
    let nthreads = cfg.block.iter().map(|&d| d as u64).product::<u64>();
    let nblocks = cfg.grid.iter().map(|&d| d as u64).product::<u64>();
    if nthreads == 0 || nblocks == 0 || nthreads > MAX_THREADS_PER_BLOCK {
        return Err(LaunchError::InvalidConfig(format!("grid {:?} block {:?}", cfg.grid, cfg.block)));
    }
    if let Some(m) = info.max_threads_per_block {
        if nthreads > m as u64 {
            return Err(LaunchError::InvalidConfig(format!("{nthreads} threads > .maxntid {m}")));
        }
    }
    if params.len() < info.param_bytes as usize {
        return Err(LaunchError::InvalidConfig(format!("parameter block {} < {} bytes", params.len(), info.param_bytes)));
    }
    if let Some(why) = &prog.kernel_rejected[ki] {
        return Err(LaunchError::Unsupported(format!("kernel `{kernel}` cannot run: {why}")));
    }
    let shared_offs = &prog.kernel_shared[ki][..];
    let user_shared = info.static_shared_bytes + cfg.dynamic_shared_bytes as u64;
    if user_shared > MAX_SHARED_BYTES {
        return Err(LaunchError::TooManyResources(format!("{user_shared} bytes of shared memory per block")));
    }
    let shared_len = shared_offs[DYN_SHARED as usize] + cfg.dynamic_shared_bytes as u64;
    let mut syms = Vec::with_capacity(prog.symbols.len());
    for s in &prog.symbols {
        // Unresolved symbols fault only if used (address 0 is never a live region).
        syms.push(symbols(s).unwrap_or(0));
    }
    let grid_sync = info.uses_grid_sync;
    if grid_sync && nblocks > MAX_COOP_BLOCKS {
        return Err(LaunchError::CooperativeTooLarge);
    }
    if first_block > nblocks || (grid_sync && (first_block != 0 || !contexts.is_empty())) {
        return Err(LaunchError::InvalidConfig(format!("first block {first_block} of {nblocks}")));
    }
    if contexts.iter().any(|c| c.index >= first_block) {
        return Err(LaunchError::InvalidConfig("a saved block lies at or after the first block to run".into()));
    }
    // Grid-wide synchronization needs every block resident: such a grid is never stopped at a
    // block boundary (it may be flushed).
    let mode = || ctl.map_or(0, |c| c.mode.load(Ordering::Relaxed));
    let stopped = |l: &Launch| {
        l.stop.load(Ordering::Relaxed) || match mode() {
            crate::api::LaunchCtl::STOP | crate::api::LaunchCtl::SAVE => !grid_sync,
            crate::api::LaunchCtl::FLUSH => true,
            _ => false,
        }
    };
    let grid_buf = grid_sync.then(|| (0..64).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
    let l = Launch {
        prog,
        func: prog.kernel_funcs[ki],
        cfg: *cfg,
        params,
        syms,
        shared_offs,
        shared_len,
        t0: Instant::now(),
        grid_buf,
        stop: AtomicBool::new(false),
        flush: ctl.map(|c| &c.mode),
    };
    let next = AtomicUsize::new(first_block as usize);
    let to_resume = Mutex::new(contexts);
    let saved_out: Mutex<Vec<crate::api::BlockContext>> = Mutex::new(Vec::new());
    // (block index, printf output, failure) of blocks that printed or failed.
    type BlockResult = (usize, Vec<u8>, Option<LaunchError>);
    let results: Mutex<Vec<BlockResult>> = Mutex::new(Vec::new());
    let total_insts = std::sync::atomic::AtomicU64::new(0);
    let workers = (pool.threads as u64).min(nblocks - first_block + to_resume.lock().unwrap_or_else(|e| e.into_inner()).len() as u64).max(1) as usize;
    // A worker's block state (reused from block to block), warps taking turns of `quantum`.
    let new_block = |quantum: u64| {
        let mut b = Block {
            l: &l,
            regions: Regions::new(mem),
            ctaid: [0; 3],
            shared: Vec::new(),
            printf: Vec::new(),
            arrivals: [0; 16],
            insts: 0,
            nthreads: nthreads as u32,
            saved: None,
            starve: Vec::new(),
            quantum,
        };
        b.regions.extra = l.grid_buf.as_deref().map(|buf| region_of(buf, GRID_WIN));
        b
    };
    // Runs blocks from the shared counter until none is left (or `limit` blocks are done).
    let work = |limit: Option<usize>| {
        let mut done = 0usize;
        let mut b = new_block(YIELD_AFTER);
        let mut threads: Vec<Thread> = Vec::new();
        loop {
            if stopped(&l) || limit.is_some_and(|n| done >= n) {
                break;
            }
            done += 1;
            // Saved blocks first, then new ones.
            let ctx = to_resume.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let i = match &ctx {
                Some(c) => c.index as usize,
                None => next.fetch_add(1, Ordering::Relaxed),
            };
            if i as u64 >= nblocks {
                break;
            }
            let g = cfg.grid;
            b.ctaid = [i as u32 % g[0], (i as u32 / g[0]) % g[1], i as u32 / (g[0] * g[1])];
            // An engine bug must fail the launch, not take the device process down.
            let r = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.run_block(&mut threads, ctx))) {
                Ok(r) => r,
                Err(p) => {
                    let msg = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned());
                    threads.clear();
                    Err(LaunchError::Unsupported(format!("internal error of the PTX engine: {}", msg.unwrap_or_default())))
                }
            };
            let saved = b.saved.take();
            if saved.is_none() {
                if let Some(c) = ctl {
                    c.blocks_done.fetch_add(1, Ordering::Relaxed);
                }
            }
            let out = std::mem::take(&mut b.printf);
            let failed = r.is_err();
            if !out.is_empty() || failed {
                results.lock().unwrap_or_else(|e| e.into_inner()).push((i, out, r.err()));
            }
            if failed {
                l.stop.store(true, Ordering::Relaxed);
                break;
            }
            if let Some(s) = saved {
                saved_out.lock().unwrap_or_else(|e| e.into_inner()).push(s);
                break;
            }
        }
        total_insts.fetch_add(b.insts, Ordering::Relaxed);
    };
    // Grid sync needs every block of the grid resident at once: each worker keeps its share
    // of the blocks (every `workers`-th) and runs them in turns, a short quantum each, so a
    // block spinning in `grid.sync()` lets the others reach it.
    let coop = |k: usize| {
        let mut blocks: Vec<(Block, Vec<Thread>, usize)> = Vec::new();
        let mut insts = 0u64;
        let fail = |i: usize, b: &mut Block, e: LaunchError| {
            results.lock().unwrap_or_else(|e| e.into_inner()).push((i, std::mem::take(&mut b.printf), Some(e)));
            l.stop.store(true, Ordering::Relaxed);
        };
        for i in (k..nblocks as usize).step_by(workers) {
            let mut b = new_block(COOP_QUANTUM);
            let g = cfg.grid;
            b.ctaid = [i as u32 % g[0], (i as u32 / g[0]) % g[1], i as u32 / (g[0] * g[1])];
            let mut th = Vec::new();
            if let Err(e) = b.start_block(&mut th, None) {
                fail(i, &mut b, e);
                return;
            }
            blocks.push((b, th, i));
        }
        let mut finished = vec![false; blocks.len()];
        let mut live = blocks.len();
        while live > 0 {
            for (j, (b, th, i)) in blocks.iter_mut().enumerate() {
                if finished[j] {
                    continue;
                }
                // An engine bug must fail the launch, not take the device process down.
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.round(th))).unwrap_or_else(|p| {
                    let msg = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned());
                    Err(LaunchError::Unsupported(format!("internal error of the PTX engine: {}", msg.unwrap_or_default())))
                });
                match r {
                    Ok(false) => {}
                    Ok(true) => {
                        finished[j] = true;
                        live -= 1;
                        if let Some(c) = ctl {
                            c.blocks_done.fetch_add(1, Ordering::Relaxed);
                        }
                        if !b.printf.is_empty() {
                            results.lock().unwrap_or_else(|e| e.into_inner()).push((*i, std::mem::take(&mut b.printf), None));
                        }
                    }
                    Err(e) => {
                        fail(*i, b, e);
                        finished[j] = true;
                        live -= 1;
                    }
                }
            }
        }
        for (b, _, _) in &blocks {
            insts += b.insts;
        }
        total_insts.fetch_add(insts, Ordering::Relaxed);
    };
    if grid_sync && nblocks > 1 {
        std::thread::scope(|s| {
            for k in 1..workers {
                s.spawn(move || coop(k));
            }
            coop(0);
        });
        next.store(nblocks as usize, Ordering::Relaxed);
    } else if workers <= 1 {
        work(None);
    } else {
        // Run the first block here and time it: helpers are only worth their start-up cost
        // (tens of microseconds) when the rest of the grid takes longer than that.
        let t = Instant::now();
        work(Some(1));
        let rest = t.elapsed().as_secs_f64() * (nblocks - first_block).saturating_sub(1) as f64;
        if rest < SPAWN_WORTH_S {
            work(None);
        } else {
            std::thread::scope(|s| {
                for _ in 1..workers {
                    s.spawn(|| work(None));
                }
                work(None);
            });
        }
    }
    if mode() == crate::api::LaunchCtl::FLUSH {
        // Abandoned as a whole, whether or not a block had started.
        return Err(LaunchError::Flushed);
    }
    let mut contexts = saved_out.into_inner().unwrap_or_else(|e| e.into_inner());
    contexts.extend(to_resume.into_inner().unwrap_or_else(|e| e.into_inner()));
    contexts.sort_by_key(|c| c.index);
    let mut res = results.into_inner().unwrap_or_else(|e| e.into_inner());
    res.sort_by_key(|r| r.0);
    let mut printf = Vec::new();
    let mut err = None;
    for (_, out, e) in res {
        printf.extend_from_slice(&out);
        if err.is_none() {
            err = e;
        }
    }
    match err {
        None => {
            // Every block fetched ran or was saved; a fetch past the end took none.
            let fetched = (next.into_inner() as u64).min(nblocks);
            let stopped_at = (fetched < nblocks || !contexts.is_empty()).then_some(fetched);
            Ok(LaunchOutput { printf, instructions: total_insts.into_inner(), stopped_at, contexts })
        }
        Some(e) if printf.is_empty() => Err(e),
        Some(e) => Err(LaunchError::WithPrintf { source: Box::new(e), printf }),
    }
}

#[inline(always)]
fn sext(v: u64, bits: u32) -> i64 {
    let s = 64 - bits;
    ((v << s) as i64) >> s
}

#[inline(always)]
fn trunc(v: u64, bits: u32) -> u64 {
    if bits >= 64 {
        v
    } else {
        v & ((1u64 << bits) - 1)
    }
}

#[inline(always)]
fn f32v(v: u64) -> f32 {
    f32::from_bits(v as u32)
}

#[inline(always)]
fn f32b(f: f32) -> u64 {
    f.to_bits() as u64
}

/// Read a value of type `ty` as f64 (for float ops on f16/f32/f64).
fn to_f64(v: u64, ty: Ty) -> f64 {
    match ty {
        Ty::F64 => f64::from_bits(v),
        Ty::F32 => f32v(v) as f64,
        Ty::F16 => fp::f16_to_f32(v as u16) as f64,
        Ty::Bf16 => fp::bf16_to_f32(v as u16) as f64,
        _ => f64::from_bits(v),
    }
}

fn from_f32(f: f32, ty: Ty) -> u64 {
    match ty {
        Ty::F16 => fp::f32_to_f16(f) as u64,
        Ty::Bf16 => fp::f32_to_bf16(f) as u64,
        Ty::F64 => (f as f64).to_bits(),
        _ => f32b(f),
    }
}

fn to_f32(v: u64, ty: Ty) -> f32 {
    match ty {
        Ty::F16 => fp::f16_to_f32(v as u16),
        Ty::Bf16 => fp::bf16_to_f32(v as u16),
        Ty::F64 => f64::from_bits(v) as f32,
        _ => f32v(v),
    }
}

impl<'a, 'l> Block<'a, 'l> {
    fn run_block(&mut self, threads: &mut Vec<Thread>, resume: Option<crate::api::BlockContext>) -> R<()> {
        self.start_block(threads, resume)?;
        self.block_loop(threads)
    }

    /// Set the block up to run from its start (or from a saved context).
    fn start_block(&mut self, threads: &mut Vec<Thread>, resume: Option<crate::api::BlockContext>) -> R<()> {
        let l = self.l;
        let prog = l.prog;
        if let Some(c) = resume {
            self.starve.clear();
            return self.restore(threads, c);
        }
        let f = &prog.funcs[l.func as usize];
        let [bx, by, _] = l.cfg.block;
        let n = self.nthreads as usize;
        // Zeroed, the reserved region included (cooperative groups expect their multi-warp
        // barriers there to start at zero, as the driver leaves them).
        self.shared.clear();
        self.shared.resize(l.shared_len as usize, 0);
        self.arrivals = [0; 16];
        self.starve.clear();
        threads.truncate(n);
        while threads.len() < n {
            threads.push(Thread {
                pc: 0,
                regs: Vec::new(),
                rb: 0,
                pframe: Vec::new(),
                fb: 0,
                local: Vec::new(),
                lb: 0,
                func: 0,
                frames: Vec::new(),
                st: St::Run,
                tid: [0; 3],
                lin: 0,
            });
        }
        for (i, t) in threads.iter_mut().enumerate() {
            let i = i as u32;
            t.pc = f.entry;
            t.regs.clear();
            t.regs.resize(f.nregs as usize, 0);
            t.rb = 0;
            t.pframe.clear();
            t.pframe.resize(f.frame_bytes as usize, 0);
            t.fb = 0;
            t.local.clear();
            t.local.resize(f.local_bytes as usize, 0);
            t.lb = 0;
            t.func = l.func;
            t.frames.clear();
            t.st = St::Run;
            t.tid = [i % bx, (i / bx) % by, i / (bx * by)];
            t.lin = i;
        }
        Ok(())
    }

    /// Run the block's threads until all are done (or the launch is stopped, flushed, or
    /// the block saved).
    fn block_loop(&mut self, threads: &mut [Thread]) -> R<()> {
        while !self.round(threads)? {}
        Ok(())
    }

    /// One scheduling round of the block: every warp runs its turn, then warp operations and
    /// barriers complete. `Ok(true)`: the block is finished (done, stopped, or saved).
    fn round(&mut self, threads: &mut [Thread]) -> R<bool> {
        let l = self.l;
        let prog = l.prog;
        {
            let mut any_run = false;
            for (w, warp) in threads.chunks_mut(32).enumerate() {
                any_run |= self.run_warp(w, warp)?;
            }
            if threads.iter().all(|t| t.st == St::Done) {
                return Ok(true);
            }
            let w = self.resolve_warps(threads, false)?;
            let b = self.resolve_barriers(threads);
            if !w && !b && !any_run && !self.resolve_warps(threads, true)? {
                let t = threads.iter().find(|t| t.st != St::Done).map(|t| t.pc).unwrap_or(0);
                let line = prog.code.get(t as usize).map_or(0, |i| i.line);
                return Err(LaunchError::Deadlock(format!("threads wait forever (PTX line {line})")));
            }
            if l.stop.load(Ordering::Relaxed) {
                return Ok(true);
            }
            match l.flush.map(|f| f.load(Ordering::Relaxed)) {
                Some(crate::api::LaunchCtl::FLUSH) => return Err(LaunchError::Flushed),
                Some(crate::api::LaunchCtl::SAVE) if l.grid_buf.is_none() => {
                    self.saved = Some(self.capture(threads));
                    return Ok(true);
                }
                _ => {}
            }
        }
        Ok(false)
    }

    /// The block as it is between two scheduling rounds.
    fn capture(&self, threads: &[Thread]) -> crate::api::BlockContext {
        let g = self.l.cfg.grid;
        let [x, y, z] = self.ctaid;
        crate::api::BlockContext {
            index: (z as u64 * g[1] as u64 + y as u64) * g[0] as u64 + x as u64,
            shared: self.shared.clone(),
            arrivals: self.arrivals,
            threads: threads
                .iter()
                .map(|t| crate::api::ThreadContext {
                    pc: t.pc,
                    regs: t.regs.clone(),
                    rb: t.rb as u64,
                    pframe: t.pframe.clone(),
                    fb: t.fb as u64,
                    local: t.local.clone(),
                    lb: t.lb as u64,
                    func: t.func,
                    frames: t.frames.iter().map(|f| [f.ret_pc, f.rb, f.fb, f.lb, f.func, f.call]).collect(),
                    st: match t.st {
                        St::Run => (0, 0, 0),
                        St::Bar(a, b) => (1, a, b),
                        St::Warp => (2, 0, 0),
                        St::Done => (3, 0, 0),
                    },
                    tid: t.tid,
                    lin: t.lin,
                })
                .collect(),
        }
    }

    /// Put a saved block back, after checking it fits this launch (it comes from an image).
    fn restore(&mut self, threads: &mut Vec<Thread>, c: crate::api::BlockContext) -> R<()> {
        let l = self.l;
        let prog = l.prog;
        let bad = |what: &str| Err(LaunchError::InvalidConfig(format!("saved block {}: {what}", c.index)));
        if c.threads.len() != self.nthreads as usize {
            return bad("thread count");
        }
        if c.shared.len() as u64 != l.shared_len {
            return bad("shared memory size");
        }
        let ncode = prog.code.len() as u32;
        let nfuncs = prog.funcs.len() as u32;
        for t in &c.threads {
            let ok = t.pc < ncode
                && t.func < nfuncs
                && t.rb as usize <= t.regs.len()
                && t.fb as usize <= t.pframe.len()
                && t.lb as usize <= t.local.len()
                && t.st.0 <= 3
                && t.frames.iter().all(|f| f[0] < ncode && f[4] < nfuncs);
            if !ok {
                return bad("thread state out of range");
            }
        }
        self.shared = c.shared;
        self.arrivals = c.arrivals;
        threads.clear();
        for t in c.threads {
            threads.push(Thread {
                pc: t.pc,
                regs: t.regs,
                rb: t.rb as usize,
                pframe: t.pframe,
                fb: t.fb as usize,
                local: t.local,
                lb: t.lb as usize,
                func: t.func,
                frames: t
                    .frames
                    .iter()
                    .map(|f| Frame { ret_pc: f[0], rb: f[1], fb: f[2], lb: f[3], func: f[4], call: f[5] })
                    .collect(),
                st: match t.st {
                    (0, _, _) => St::Run,
                    (1, a, b) => St::Bar(a, b),
                    (2, _, _) => St::Warp,
                    _ => St::Done,
                },
                tid: t.tid,
                lin: t.lin,
            });
        }
        Ok(())
    }

    fn resolve_barriers(&mut self, threads: &mut [Thread]) -> bool {
        let live = threads.iter().filter(|t| t.st != St::Done).count() as u32;
        let mut progressed = false;
        for id in 0..16u32 {
            let mut arrived = 0;
            let mut want = 0;
            for t in threads.iter() {
                if let St::Bar(i, c) = t.st {
                    if i == id {
                        arrived += 1;
                        want = want.max(c);
                    }
                }
            }
            if arrived == 0 {
                continue;
            }
            let need = if want == 0 { live } else { want.min(live + self.arrivals[id as usize]) };
            if arrived + self.arrivals[id as usize] >= need {
                self.arrivals[id as usize] = 0;
                let code = &self.l.prog.code;
                let pred = |b: &Self, t: &Thread| {
                    let i = &code[t.pc as usize];
                    let o = if matches!(i.c, Opd::None) { &i.b } else { &i.c };
                    b.val(t, o) & 1
                };
                let here = |t: &Thread| matches!(t.st, St::Bar(i, _) if i == id);
                let popc = threads.iter().filter(|t| here(t)).map(|t| pred(self, t)).sum::<u64>();
                for t in threads.iter_mut().filter(|t| here(t)) {
                    let i = &code[t.pc as usize];
                    if i.op == Op::BarRed {
                        let r = match i.m.sub {
                            Sub::Add => popc,
                            Sub::And => (popc == arrived as u64) as u64,
                            _ => (popc != 0) as u64,
                        };
                        let ty = if i.m.sub == Sub::Add { Ty::U32 } else { Ty::Pred };
                        self.set(t, &i.d, r, ty);
                    }
                    t.pc += 1;
                    t.st = St::Run;
                }
                progressed = true;
            }
        }
        progressed
    }

    /// Complete warp operations whose member lanes have all arrived at the same
    /// instruction; `relaxed` (used only when nothing else can progress) also accepts
    /// members waiting at the same operation elsewhere (`if (c) shfl(..) else shfl(..)`).
    fn resolve_warps(&mut self, threads: &mut [Thread], relaxed: bool) -> R<bool> {
        let code = &self.l.prog.code;
        let mut progressed = false;
        for w0 in (0..threads.len()).step_by(32) {
            let w1 = (w0 + 32).min(threads.len());
            let lanes = w1 - w0;
            let waiting: u32 = (0..lanes).filter(|&i| threads[w0 + i].st == St::Warp).fold(0, |m, i| m | 1 << i);
            if waiting == 0 {
                continue;
            }
            let live: u32 = (0..lanes).filter(|&i| threads[w0 + i].st != St::Done).fold(0, |m, i| m | 1 << i);
            let mut handled = 0u32;
            for i in 0..lanes {
                if waiting & (1 << i) == 0 || handled & (1 << i) != 0 {
                    continue;
                }
                let t = &threads[w0 + i];
                let inst = &code[t.pc as usize];
                let group = match inst.op {
                    Op::Activemask => {
                        // Lanes converged at this very instruction.
                        (0..lanes).filter(|&j| waiting & (1 << j) != 0 && threads[w0 + j].pc == t.pc).fold(0, |m, j| m | 1 << j)
                    }
                    _ => {
                        let mop = match inst.op {
                            Op::BarWarp => &inst.a,
                            Op::Shfl => &inst.e,
                            Op::Vote | Op::Redux | Op::Match => &inst.b,
                            _ => &inst.b,
                        };
                        let mask = if matches!(mop, Opd::None) { u32::MAX } else { self.val(t, mop) as u32 };
                        let members = mask & live;
                        let same_pc = (0..lanes).filter(|&j| members & (1 << j) != 0).all(|j| {
                            let o = &code[threads[w0 + j].pc as usize];
                            threads[w0 + j].pc == t.pc || relaxed && o.op == inst.op && o.m.sub == inst.m.sub
                        });
                        if members & waiting != members || !same_pc {
                            continue; // someone has not arrived (here) yet
                        }
                        members | (1 << i)
                    }
                };
                handled |= group;
                self.warp_op(&mut threads[w0..w1], group)?;
                progressed = true;
            }
        }
        Ok(progressed)
    }

    fn warp_op(&mut self, lanes: &mut [Thread], group: u32) -> R<()> {
        let code = &self.l.prog.code;
        let mut vals = [0u64; 32];
        let mut preds = [false; 32];
        let members = (0..lanes.len()).filter(|&j| group & (1 << j) != 0);
        for j in members.clone() {
            let t = &lanes[j];
            let inst = &code[t.pc as usize];
            vals[j] = self.val(t, &inst.a);
            preds[j] = vals[j] & 1 != 0;
        }
        for j in members {
            let t = &lanes[j];
            let inst = &code[t.pc as usize];
            let lane = j as u32;
            match inst.op {
                Op::BarWarp => {}
                Op::Activemask => self.set(&mut lanes[j], &inst.d, group as u64, Ty::B32),
                Op::Vote => {
                    let ballot = (0..32).filter(|&k| group & (1 << k) != 0 && preds[k]).fold(0u32, |m, k| m | 1 << k);
                    let r = match inst.m.sub {
                        Sub::All => (ballot == group) as u64,
                        Sub::Any => (ballot != 0) as u64,
                        Sub::Uni => (ballot == 0 || ballot == group) as u64,
                        _ => ballot as u64,
                    };
                    let ty = if inst.m.sub == Sub::Ballot { Ty::B32 } else { Ty::Pred };
                    let (d, neg) = (inst.d.clone(), matches!(inst.a, Opd::NotReg(_)));
                    let _ = neg;
                    self.set(&mut lanes[j], &d, r, ty);
                }
                Op::Shfl => {
                    let b = self.val(t, &inst.b) as u32 & 31;
                    let c = self.val(t, &inst.c) as u32;
                    let seg = (c >> 8) & 31;
                    let maxl = (lane & seg) | (c & 31 & !seg);
                    let minl = lane & seg;
                    let (jj, ok) = match inst.m.sub {
                        Sub::Up => {
                            let s = lane as i32 - b as i32;
                            (s, s >= maxl as i32)
                        }
                        Sub::Down => {
                            let s = (lane + b) as i32;
                            (s, s <= maxl as i32)
                        }
                        Sub::Bfly => {
                            let s = (lane ^ b) as i32;
                            (s, s <= maxl as i32)
                        }
                        _ => {
                            let s = (minl | (b & !seg)) as i32;
                            (s, s <= maxl as i32)
                        }
                    };
                    let src = if ok { jj as usize } else { j };
                    let v = if src < lanes.len() && group & (1 << src) != 0 { vals[src] } else { vals[j] };
                    let (d, d2) = (inst.d.clone(), inst.d2.clone());
                    self.set(&mut lanes[j], &d, v, Ty::B32);
                    if !matches!(d2, Opd::None) {
                        self.set(&mut lanes[j], &d2, ok as u64, Ty::Pred);
                    }
                }
                Op::Match => {
                    let bits = inst.ty.bits();
                    let me = trunc(vals[j], bits);
                    let same = (0..lanes.len()).filter(|&k| group & (1 << k) != 0 && trunc(vals[k], bits) == me).fold(0u32, |m, k| m | 1 << k);
                    let (d, d2) = (inst.d.clone(), inst.d2.clone());
                    if inst.m.sub == Sub::All {
                        let all = same == group;
                        self.set(&mut lanes[j], &d, if all { group as u64 } else { 0 }, Ty::B32);
                        if !matches!(d2, Opd::None) {
                            self.set(&mut lanes[j], &d2, all as u64, Ty::Pred);
                        }
                    } else {
                        self.set(&mut lanes[j], &d, same as u64, Ty::B32);
                    }
                }
                Op::Redux => {
                    let it = (0..lanes.len()).filter(|&k| group & (1 << k) != 0).map(|k| vals[k] as u32);
                    let r = match (inst.m.sub, inst.ty.is_signed()) {
                        (Sub::Add, _) => it.fold(0u32, |a, v| a.wrapping_add(v)),
                        (Sub::Min, true) => it.map(|v| v as i32).min().unwrap_or(0) as u32,
                        (Sub::Max, true) => it.map(|v| v as i32).max().unwrap_or(0) as u32,
                        (Sub::Min, false) => it.min().unwrap_or(0),
                        (Sub::Max, false) => it.max().unwrap_or(0),
                        (Sub::And, _) => it.fold(u32::MAX, |a, v| a & v),
                        (Sub::Or, _) => it.fold(0, |a, v| a | v),
                        (Sub::Xor, _) => it.fold(0, |a, v| a ^ v),
                        _ => return Err(LaunchError::Unsupported("redux operation".into())),
                    };
                    let d = inst.d.clone();
                    self.set(&mut lanes[j], &d, r as u64, Ty::B32);
                }
                _ => {}
            }
            lanes[j].pc += 1;
            lanes[j].st = St::Run;
        }
        Ok(())
    }

    #[inline(always)]
    fn sreg(&self, t: &Thread, s: Sreg) -> u64 {
        let c = &self.l.cfg;
        let lane = t.lin & 31;
        match s {
            Sreg::Tid(d) => t.tid[d as usize] as u64,
            Sreg::Ntid(d) => c.block[d as usize] as u64,
            Sreg::Ctaid(d) => self.ctaid[d as usize] as u64,
            Sreg::Nctaid(d) => c.grid[d as usize] as u64,
            Sreg::Laneid => lane as u64,
            Sreg::Warpid => (t.lin / 32) as u64,
            Sreg::Nwarpid => self.nthreads.div_ceil(32) as u64,
            Sreg::Smid | Sreg::Gridid => 0,
            Sreg::Nsmid => 1,
            Sreg::LanemaskEq => 1u64 << lane,
            Sreg::LanemaskLt => (1u64 << lane) - 1,
            Sreg::LanemaskLe => ((1u64 << (lane + 1)) - 1) & 0xffff_ffff,
            Sreg::LanemaskGt => (!((1u64 << (lane + 1)) - 1)) & 0xffff_ffff,
            Sreg::LanemaskGe => (!((1u64 << lane) - 1)) & 0xffff_ffff,
            Sreg::Clock => self.l.t0.elapsed().as_nanos() as u32 as u64,
            Sreg::Clock64 => self.l.t0.elapsed().as_nanos() as u64,
            Sreg::Globaltimer => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64),
            // CUDA 13's cooperative_groups/details/driver_abi.h: the grid workspace address
            // is (envreg1 << 32) | envreg2.
            Sreg::Envreg(1) => GRID_WIN >> 32,
            Sreg::Envreg(2) => GRID_WIN & 0xffff_ffff,
            Sreg::Envreg(_) => 0,
            Sreg::DynSmemSize => c.dynamic_shared_bytes as u64,
            Sreg::TotalSmemSize => self.l.shared_len - RESERVED_SMEM,
            Sreg::AggrSmemSize => self.l.shared_len,
            Sreg::ReservedBegin => 0,
            Sreg::ReservedEnd | Sreg::ReservedCap => RESERVED_SMEM,
            Sreg::ReservedOffset(n) => RESERVED_SMEM_OFFSETS[n as usize & 1],
        }
    }

    #[inline(always)]
    fn val(&self, t: &Thread, o: &Opd) -> u64 {
        match *o {
            Opd::Reg(r) => t.regs[t.rb + r as usize],
            Opd::Imm(v) => v,
            Opd::NotReg(r) => (t.regs[t.rb + r as usize] & 1) ^ 1,
            Opd::Sreg(s) => self.sreg(t, s),
            Opd::GlobalSym(g) => self.l.syms[g as usize],
            Opd::SharedSym(v) => self.l.shared_offs[v as usize],
            Opd::Addr(..) => self.addr(t, o),
            _ => 0,
        }
    }

    #[inline(always)]
    fn addr(&self, t: &Thread, o: &Opd) -> u64 {
        match *o {
            Opd::Addr(Base::Reg(r), off) => t.regs[t.rb + r as usize].wrapping_add(off as u64),
            Opd::Addr(Base::None, off) => off as u64,
            Opd::Addr(Base::Shared(v), off) => self.l.shared_offs[v as usize].wrapping_add(off as u64),
            Opd::Addr(Base::Local, off) => (t.lb as u64).wrapping_add(off as u64),
            Opd::Addr(Base::Global(g), off) => self.l.syms[g as usize].wrapping_add(off as u64),
            _ => self.val(t, o),
        }
    }

    #[inline(always)]
    fn set(&self, t: &mut Thread, o: &Opd, v: u64, ty: Ty) {
        if let Opd::Reg(r) = *o {
            t.regs[t.rb + r as usize] = trunc(v, ty.bits().max(1));
        }
    }

    /// Memory access by state space; returns a pointer-free result.
    pub(crate) fn load(&mut self, t: &Thread, space: Space, addr: u64, size: u32) -> R<u64> {
        match space {
            Space::Global | Space::Const => self.regions.read(addr, size),
            Space::Shared => rd_slice(&self.shared, addr & 0xffff_ffff, size),
            Space::Local => rd_slice(&t.local, addr & 0xffff_ffff, size),
            Space::Param => {
                if addr >= FRAME_PARAM_BASE {
                    rd_slice(&t.pframe[t.fb..], addr - FRAME_PARAM_BASE, size)
                } else {
                    rd_slice(self.l.params, addr, size)
                }
            }
            Space::Generic => {
                let (s, a) = generic(addr);
                if s == Space::Generic {
                    self.regions.read(addr, size)
                } else {
                    self.load(t, s, a, size)
                }
            }
        }
    }

    fn store(&mut self, t: &mut Thread, space: Space, addr: u64, size: u32, v: u64) -> R<()> {
        match space {
            Space::Global | Space::Const => self.regions.write(addr, size, v),
            Space::Shared => wr_slice(&mut self.shared, addr & 0xffff_ffff, size, v),
            Space::Local => wr_slice(&mut t.local, addr & 0xffff_ffff, size, v),
            Space::Param => {
                if addr >= FRAME_PARAM_BASE {
                    let fb = t.fb;
                    wr_slice(&mut t.pframe[fb..], addr - FRAME_PARAM_BASE, size, v)
                } else {
                    Err(LaunchError::IllegalAddress { addr })
                }
            }
            Space::Generic => {
                let (s, a) = generic(addr);
                if s == Space::Generic {
                    self.regions.write(addr, size, v)
                } else {
                    self.store(t, s, a, size, v)
                }
            }
        }
    }

    fn atomic(&mut self, t: &mut Thread, space: Space, addr: u64, size: u32, f: impl Fn(u64) -> Option<u64>) -> R<u64> {
        let (space, addr) = if space == Space::Generic {
            let (s, a) = generic(addr);
            if s == Space::Generic {
                (Space::Global, addr)
            } else {
                (s, a)
            }
        } else {
            (space, addr)
        };
        match space {
            Space::Global | Space::Const => self.regions.atomic(addr, size, &f),
            _ => {
                // Block-private memory: one worker runs the whole block, so a plain
                // read-modify-write is atomic.
                let old = self.load(t, space, addr, size)?;
                if let Some(n) = f(old) {
                    self.store(t, space, addr, size, n)?;
                }
                Ok(old)
            }
        }
    }

    /// Run one thread until it blocks or ends.
    /// Run one warp's threads in lockstep, as a GPU does (SIMT), for up to [`YIELD_AFTER`]
    /// steps: each step executes the next instruction of every running thread whose pc is
    /// the lowest of the warp, so converged threads execute each instruction together (all
    /// loads of a step before any later store: warp-synchronous code, and code missing a
    /// `__syncthreads()` that a warp's lockstep hides, behave as on a GPU), and threads that
    /// diverged reconverge where the lagging ones catch up (nvcc lays out the join point of an
    /// `if`/`else` and the exit of a loop after their bodies). Threads waiting at a barrier,
    /// in a warp-wide operation or done do not step. Returns whether any thread ran.
    ///
    /// A group of threads that alone runs for [`STARVE_AFTER`] steps (one lane spinning on a
    /// flag another lane of its warp sets, which deadlocks pre-Volta GPUs and completes on
    /// Volta's independent thread scheduling) lets the others step too for as long.
    fn run_warp(&mut self, w: usize, warp: &mut [Thread]) -> R<bool> {
        let prog = self.l.prog;
        let code = &prog.code[..];
        let mut ran = false;
        if self.starve.len() <= w {
            self.starve.resize(w + 1, (0, 0));
        }
        let (mut alone, mut everyone) = self.starve[w];
        let mut n = 0u64;
        let (mut low, mut running) = (u32::MAX, 0u32);
        for t in warp.iter() {
            if t.st == St::Run {
                running += 1;
                low = low.min(t.pc);
            }
        }
        for _ in 0..self.quantum {
            if running == 0 {
                break;
            }
            ran = true;
            let all = everyone > 0;
            let mut stepped = 0u32;
            // Step the chosen threads and find the next step's lowest pc in the same pass.
            let (mut next_low, mut next_running) = (u32::MAX, 0u32);
            for t in warp.iter_mut() {
                if t.st != St::Run {
                    continue;
                }
                if all || t.pc == low {
                    stepped += 1;
                    let inst = &code[t.pc as usize];
                    let skip = inst.guard.is_some_and(|(g, neg)| ((t.regs[t.rb + g as usize] & 1) != 0) == neg);
                    if skip {
                        t.pc += 1;
                    } else {
                        match self.step(t, inst) {
                            Ok(true) => t.pc = t.pc.wrapping_add(1),
                            Ok(false) => {}
                            Err(e) => {
                                self.insts += n + stepped as u64;
                                self.starve[w] = (alone, everyone);
                                return Err(e);
                            }
                        }
                    }
                    if t.st != St::Run {
                        continue;
                    }
                }
                next_running += 1;
                next_low = next_low.min(t.pc);
            }
            n += stepped as u64;
            if all {
                everyone -= 1;
            } else if stepped < running {
                alone += 1;
                if alone >= STARVE_AFTER {
                    everyone = STARVE_AFTER;
                    alone = 0;
                }
            } else {
                alone = 0;
            }
            (low, running) = (next_low, next_running);
        }
        self.insts += n;
        self.starve[w] = if ran { (alone, everyone) } else { (0, 0) };
        Ok(ran)
    }

    /// Execute one instruction. `Ok(true)`: continue with pc+1; `Ok(false)`: the thread
    /// stopped (pc already set as needed).
    #[inline(always)]
    fn step(&mut self, t: &mut Thread, i: &Inst) -> R<bool> {
        let ty = i.ty;
        let bits = ty.bits();
        match i.op {
            Op::Mov => {
                if let Opd::Vec(v) = &i.a {
                    // Pack: mov.b64 %rd, {%r1, %r2}.
                    let w = bits / v.len() as u32;
                    let mut x = 0u64;
                    for (k, o) in v.iter().enumerate() {
                        x |= trunc(self.val(t, o), w) << (w * k as u32);
                    }
                    self.set(t, &i.d, x, ty);
                } else if let Opd::Vec(v) = &i.d {
                    // Unpack: mov.b64 {%r1, %r2}, %rd.
                    let x = self.val(t, &i.a);
                    let w = bits / v.len() as u32;
                    for (k, o) in v.iter().enumerate() {
                        let vk = trunc(x >> (w * k as u32), w);
                        if let Opd::Reg(r) = *o {
                            t.regs[t.rb + r as usize] = vk;
                        }
                    }
                } else {
                    let v = self.val(t, &i.a);
                    self.set(t, &i.d, v, ty);
                }
            }
            Op::Add | Op::Sub => {
                let a = self.val(t, &i.a);
                let b = self.val(t, &i.b);
                let sub = i.op == Op::Sub;
                let r = match ty {
                    Ty::F32 => {
                        let (x, y) = self.fin32(i, a, b);
                        let y = if sub { -y } else { y };
                        f32b(self.fout32(i, fp::add32(x, y, i.m.rnd)))
                    }
                    Ty::F64 => {
                        let (x, y) = (f64::from_bits(a), f64::from_bits(b));
                        let y = if sub { -y } else { y };
                        let r = fp::add64(x, y, i.m.rnd);
                        (if i.m.sat { fp::sat64(r) } else { r }).to_bits()
                    }
                    Ty::F16 | Ty::Bf16 => {
                        let (x, y) = (to_f32(a, ty), to_f32(b, ty));
                        from_f32(if sub { x - y } else { x + y }, ty)
                    }
                    Ty::F16x2 | Ty::Bf16x2 => {
                        let e = if ty == Ty::F16x2 { Ty::F16 } else { Ty::Bf16 };
                        simd2(a, b, |x, y| from_f32(if sub { to_f32(x, e) - to_f32(y, e) } else { to_f32(x, e) + to_f32(y, e) }, e))
                    }
                    _ => {
                        if i.m.sat && ty == Ty::S32 {
                            let (x, y) = (a as u32 as i32, b as u32 as i32);
                            (if sub { x.saturating_sub(y) } else { x.saturating_add(y) }) as u32 as u64
                        } else if i.m.cc {
                            let (x, y) = (trunc(a, bits), trunc(b, bits));
                            let (r, c) = if sub {
                                let (r, bo) = x.overflowing_sub(y);
                                (r, bo)
                            } else {
                                let r = x + y;
                                (r, r >> bits != 0 && bits < 64 || (bits == 64 && r < x))
                            };
                            let cc = self.cc_slot(t);
                            t.regs[cc] = c as u64;
                            r
                        } else if sub {
                            a.wrapping_sub(b)
                        } else {
                            a.wrapping_add(b)
                        }
                    }
                };
                self.set(t, &i.d, r, ty);
            }
            Op::Addc | Op::Subc => {
                let (a, b) = (trunc(self.val(t, &i.a), bits), trunc(self.val(t, &i.b), bits));
                let cc = self.cc_slot(t);
                let cin = t.regs[cc] & 1;
                let (r, c) = if i.op == Op::Addc {
                    let r = (a as u128) + (b as u128) + cin as u128;
                    (r as u64, (r >> bits) & 1 != 0)
                } else {
                    let r = (a as i128) - (b as i128) - cin as i128;
                    (r as u64, r < 0)
                };
                if i.m.cc {
                    t.regs[cc] = c as u64;
                }
                self.set(t, &i.d, r, ty);
            }
            Op::Mul | Op::Mad | Op::Madc | Op::Mul24 | Op::Mad24 => {
                let a = self.val(t, &i.a);
                let b = self.val(t, &i.b);
                let is_mad = matches!(i.op, Op::Mad | Op::Madc | Op::Mad24);
                let c = if is_mad { self.val(t, &i.c) } else { 0 };
                let r = match ty {
                    Ty::F32 => {
                        let (x, y) = self.fin32(i, a, b);
                        let r = if is_mad {
                            let z = if i.m.ftz { fp::ftz32(f32v(c)) } else { f32v(c) };
                            fp::fma32(x, y, z, i.m.rnd)
                        } else {
                            fp::mul32(x, y, i.m.rnd)
                        };
                        f32b(self.fout32(i, r))
                    }
                    Ty::F64 => {
                        let (x, y) = (f64::from_bits(a), f64::from_bits(b));
                        let r = if is_mad { fp::fma64(x, y, f64::from_bits(c), i.m.rnd) } else { fp::mul64(x, y, i.m.rnd) };
                        (if i.m.sat { fp::sat64(r) } else { r }).to_bits()
                    }
                    Ty::F16 | Ty::Bf16 => {
                        let r = to_f32(a, ty) * to_f32(b, ty) + if is_mad { to_f32(c, ty) } else { 0.0 };
                        from_f32(r, ty)
                    }
                    Ty::F16x2 | Ty::Bf16x2 => {
                        let e = if ty == Ty::F16x2 { Ty::F16 } else { Ty::Bf16 };
                        let p = simd2(a, b, |x, y| from_f32(to_f32(x, e) * to_f32(y, e), e));
                        if is_mad {
                            simd2(p, c, |x, y| from_f32(to_f32(x, e) + to_f32(y, e), e))
                        } else {
                            p
                        }
                    }
                    _ => {
                        let (a, b) = if matches!(i.op, Op::Mul24 | Op::Mad24) {
                            if ty.is_signed() {
                                (sext(a, 24) as u64, sext(b, 24) as u64)
                            } else {
                                (trunc(a, 24), trunc(b, 24))
                            }
                        } else {
                            (a, b)
                        };
                        let wide = if ty.is_signed() {
                            (sext(a, bits) as i128 * sext(b, bits) as i128) as u128
                        } else {
                            trunc(a, bits) as u128 * trunc(b, bits) as u128
                        };
                        let prod = match i.m.part {
                            Part::Lo => wide as u64,
                            Part::Hi => (wide >> bits) as u64,
                            Part::Wide => wide as u64,
                        };
                        let obits = if i.m.part == Part::Wide { bits * 2 } else { bits };
                        if is_mad {
                            if i.op == Op::Madc || i.m.cc {
                                let cc = self.cc_slot(t);
                                let cin = if i.op == Op::Madc { t.regs[cc] & 1 } else { 0 };
                                let s = trunc(prod, obits) as u128 + trunc(c, obits) as u128 + cin as u128;
                                if i.m.cc {
                                    t.regs[cc] = ((s >> obits) & 1) as u64;
                                }
                                s as u64
                            } else if i.m.sat && ty == Ty::S32 {
                                (sext(prod, 32) + sext(c, 32)).clamp(i32::MIN as i64, i32::MAX as i64) as u64
                            } else {
                                prod.wrapping_add(c)
                            }
                        } else {
                            prod
                        }
                    }
                };
                let oty = if i.m.part == Part::Wide && !ty.is_float() { wide_ty(ty) } else { ty };
                self.set(t, &i.d, r, oty);
            }
            Op::Fma => {
                let (a, b, c) = (self.val(t, &i.a), self.val(t, &i.b), self.val(t, &i.c));
                let r = match ty {
                    Ty::F32 => {
                        let (x, y) = self.fin32(i, a, b);
                        let z = if i.m.ftz { fp::ftz32(f32v(c)) } else { f32v(c) };
                        f32b(self.fout32(i, fp::fma32(x, y, z, i.m.rnd)))
                    }
                    Ty::F64 => {
                        let r = fp::fma64(f64::from_bits(a), f64::from_bits(b), f64::from_bits(c), i.m.rnd);
                        (if i.m.sat { fp::sat64(r) } else { r }).to_bits()
                    }
                    Ty::F16x2 | Ty::Bf16x2 => {
                        let e = if ty == Ty::F16x2 { Ty::F16 } else { Ty::Bf16 };
                        let lo = to_f32(a & 0xffff, e).mul_add(to_f32(b & 0xffff, e), to_f32(c & 0xffff, e));
                        let hi = to_f32((a >> 16) & 0xffff, e).mul_add(to_f32((b >> 16) & 0xffff, e), to_f32((c >> 16) & 0xffff, e));
                        from_f32(lo, e) | (from_f32(hi, e) << 16)
                    }
                    _ => from_f32(to_f32(a, ty).mul_add(to_f32(b, ty), to_f32(c, ty)), ty),
                };
                self.set(t, &i.d, r, ty);
            }
            Op::Div | Op::Rem => {
                let a = self.val(t, &i.a);
                let b = self.val(t, &i.b);
                let r = match ty {
                    Ty::F32 => {
                        let (x, y) = self.fin32(i, a, b);
                        f32b(self.fout32(i, fp::div32(x, y, i.m.rnd)))
                    }
                    Ty::F64 => fp::div64(f64::from_bits(a), f64::from_bits(b), i.m.rnd).to_bits(),
                    _ if ty.is_signed() => {
                        let (x, y) = (sext(a, bits), sext(b, bits));
                        // Division by zero does not trap on a GPU; the result is unspecified.
                        if y == 0 {
                            if i.op == Op::Div {
                                u64::MAX
                            } else {
                                x as u64
                            }
                        } else if i.op == Op::Div {
                            x.wrapping_div(y) as u64
                        } else {
                            x.wrapping_rem(y) as u64
                        }
                    }
                    _ => {
                        let (x, y) = (trunc(a, bits), trunc(b, bits));
                        if y == 0 {
                            if i.op == Op::Div {
                                u64::MAX
                            } else {
                                x
                            }
                        } else if i.op == Op::Div {
                            x / y
                        } else {
                            x % y
                        }
                    }
                };
                self.set(t, &i.d, r, ty);
            }
            Op::Abs | Op::Neg => {
                let a = self.val(t, &i.a);
                let r = match ty {
                    Ty::F32 => {
                        let x = if i.m.ftz { fp::ftz32(f32v(a)) } else { f32v(a) };
                        f32b(if i.op == Op::Abs { x.abs() } else { -x })
                    }
                    Ty::F64 => {
                        let x = f64::from_bits(a);
                        (if i.op == Op::Abs { x.abs() } else { -x }).to_bits()
                    }
                    Ty::F16 | Ty::Bf16 => {
                        if i.op == Op::Abs {
                            a & 0x7fff
                        } else {
                            a ^ 0x8000
                        }
                    }
                    Ty::F16x2 | Ty::Bf16x2 => {
                        if i.op == Op::Abs {
                            a & 0x7fff_7fff
                        } else {
                            a ^ 0x8000_8000
                        }
                    }
                    _ => {
                        let x = sext(a, bits);
                        (if i.op == Op::Abs { x.wrapping_abs() } else { x.wrapping_neg() }) as u64
                    }
                };
                self.set(t, &i.d, r, ty);
            }
            Op::Min | Op::Max => {
                let a = self.val(t, &i.a);
                let b = self.val(t, &i.b);
                let mx = i.op == Op::Max;
                let r = match ty {
                    Ty::F32 => {
                        let (x, y) = self.fin32(i, a, b);
                        // PTX min/max: NaN only if both are NaN.
                        f32b(if mx { x.max(y) } else { x.min(y) })
                    }
                    Ty::F64 => {
                        let (x, y) = (f64::from_bits(a), f64::from_bits(b));
                        (if mx { x.max(y) } else { x.min(y) }).to_bits()
                    }
                    Ty::F16 | Ty::Bf16 => {
                        let (x, y) = (to_f32(a, ty), to_f32(b, ty));
                        from_f32(if mx { x.max(y) } else { x.min(y) }, ty)
                    }
                    Ty::F16x2 | Ty::Bf16x2 => {
                        let e = if ty == Ty::F16x2 { Ty::F16 } else { Ty::Bf16 };
                        simd2(a, b, |x, y| {
                            let (x, y) = (to_f32(x, e), to_f32(y, e));
                            from_f32(if mx { x.max(y) } else { x.min(y) }, e)
                        })
                    }
                    _ if ty.is_signed() => {
                        let (x, y) = (sext(a, bits), sext(b, bits));
                        (if mx { x.max(y) } else { x.min(y) }) as u64
                    }
                    _ => {
                        let (x, y) = (trunc(a, bits), trunc(b, bits));
                        if mx {
                            x.max(y)
                        } else {
                            x.min(y)
                        }
                    }
                };
                self.set(t, &i.d, r, ty);
            }
            Op::And | Op::Or | Op::Xor => {
                let a = self.val(t, &i.a);
                let b = self.val(t, &i.b);
                let r = match i.op {
                    Op::And => a & b,
                    Op::Or => a | b,
                    _ => a ^ b,
                };
                self.set(t, &i.d, r, ty);
            }
            Op::Not => {
                let a = self.val(t, &i.a);
                let r = if ty == Ty::Pred { (a & 1) ^ 1 } else { !a };
                self.set(t, &i.d, r, ty);
            }
            Op::Cnot => {
                let a = trunc(self.val(t, &i.a), bits);
                self.set(t, &i.d, (a == 0) as u64, ty);
            }
            Op::Lop3 => {
                let (a, b, c) = (self.val(t, &i.a), self.val(t, &i.b), self.val(t, &i.c));
                let lut = self.val(t, &i.e) as u8;
                let mut r = 0u64;
                for k in 0..8 {
                    if lut & (1 << k) != 0 {
                        let ma = if k & 4 != 0 { a } else { !a };
                        let mb = if k & 2 != 0 { b } else { !b };
                        let mc = if k & 1 != 0 { c } else { !c };
                        r |= ma & mb & mc;
                    }
                }
                self.set(t, &i.d, r, ty);
            }
            Op::Shl | Op::Shr => {
                let a = self.val(t, &i.a);
                let s = self.val(t, &i.b) as u32;
                let r = if i.op == Op::Shl {
                    if s >= bits {
                        0
                    } else {
                        a << s
                    }
                } else if ty.is_signed() {
                    (sext(a, bits) >> s.min(63)) as u64
                } else if s >= bits {
                    0
                } else {
                    trunc(a, bits) >> s
                };
                self.set(t, &i.d, r, ty);
            }
            Op::Shf => {
                let (a, b) = (trunc(self.val(t, &i.a), 32), trunc(self.val(t, &i.b), 32));
                let mut n = self.val(t, &i.c) as u32;
                n = if i.m.flag { n & 31 } else { n.min(32) };
                let v = (b << 32) | a;
                let r = if i.m.to { (v << n) >> 32 } else { v >> n };
                self.set(t, &i.d, r, Ty::B32);
            }
            Op::Selp => {
                let p = self.val(t, &i.c) & 1;
                let v = if p != 0 { self.val(t, &i.a) } else { self.val(t, &i.b) };
                self.set(t, &i.d, v, ty);
            }
            Op::Slct => {
                let c = self.val(t, &i.c);
                let ge = if i.ty2 == Ty::F32 { f32v(c) >= 0.0 } else { sext(c, 32) >= 0 };
                let v = if ge { self.val(t, &i.a) } else { self.val(t, &i.b) };
                self.set(t, &i.d, v, ty);
            }
            Op::Setp | Op::Set => {
                let a = self.val(t, &i.a);
                let b = self.val(t, &i.b);
                let cty = if i.op == Op::Set { i.ty2 } else { ty };
                let mut r = compare(i.m.cmp, cty, a, b, i.m.ftz);
                if i.m.sub != Sub::None {
                    let c = self.val(t, &i.c) & 1 != 0;
                    r = match i.m.sub {
                        Sub::And => r && c,
                        Sub::Or => r || c,
                        _ => r ^ c,
                    };
                }
                if i.op == Op::Set {
                    let v = if ty == Ty::F32 {
                        if r {
                            f32b(1.0)
                        } else {
                            0
                        }
                    } else if r {
                        u64::MAX
                    } else {
                        0
                    };
                    self.set(t, &i.d, v, ty);
                } else {
                    self.set(t, &i.d, r as u64, Ty::Pred);
                    if !matches!(i.d2, Opd::None) {
                        let mut q = !compare(i.m.cmp, cty, a, b, i.m.ftz);
                        if i.m.sub != Sub::None {
                            let c = self.val(t, &i.c) & 1 != 0;
                            q = match i.m.sub {
                                Sub::And => q && c,
                                Sub::Or => q || c,
                                _ => q ^ c,
                            };
                        }
                        self.set(t, &i.d2, q as u64, Ty::Pred);
                    }
                }
            }
            Op::Cvt => {
                let a = self.val(t, &i.a);
                let r = if matches!(ty, Ty::F16x2 | Ty::Bf16x2) {
                    // cvt.rn.f16x2.f32 d, hi, lo: two conversions packed.
                    let e = if ty == Ty::F16x2 { Ty::F16 } else { Ty::Bf16 };
                    let lo = self.val(t, &i.b);
                    (from_f32(f32v(a), e) << 16) | from_f32(f32v(lo), e)
                } else {
                    cvt(i, a)
                };
                self.set(t, &i.d, r, ty);
            }
            Op::Cvta => {
                let a = self.val(t, &i.a);
                let (win, sp) = match i.m.space {
                    Space::Shared => (SHARED_WIN, true),
                    Space::Local => (LOCAL_WIN, true),
                    Space::Param => (PARAM_WIN, true),
                    _ => (0, false),
                };
                let r = if !sp {
                    a
                } else if i.m.to {
                    a.wrapping_sub(win)
                } else {
                    a.wrapping_add(win)
                };
                self.set(t, &i.d, r, ty);
            }
            Op::Isspacep => {
                let a = self.val(t, &i.a);
                let (s, _) = generic(a);
                let r = match i.m.space {
                    Space::Shared | Space::Local | Space::Param => s == i.m.space,
                    _ => s == Space::Generic,
                };
                self.set(t, &i.d, r as u64, Ty::Pred);
            }
            Op::Ld => {
                let addr = self.addr(t, &i.a);
                let sz = ty.size();
                match &i.d {
                    Opd::Vec(v) => {
                        for (k, o) in v.iter().enumerate() {
                            let x = self.load(t, i.m.space, addr + (k as u32 * sz) as u64, sz)?;
                            let x = if ty.is_signed() { sext(x, sz * 8) as u64 } else { x };
                            if let Opd::Reg(r) = *o {
                                t.regs[t.rb + r as usize] = x;
                            }
                        }
                    }
                    d => {
                        let x = self.load(t, i.m.space, addr, sz)?;
                        // Sign-extend narrow signed loads into wider registers.
                        let x = if ty.is_signed() && sz < 8 { sext(x, sz * 8) as u64 } else { x };
                        if let Opd::Reg(r) = *d {
                            t.regs[t.rb + r as usize] = x;
                        }
                    }
                }
            }
            Op::St => {
                let addr = self.addr(t, &i.a);
                let sz = ty.size();
                match &i.b {
                    Opd::Vec(v) => {
                        for (k, o) in v.iter().enumerate() {
                            let x = self.val(t, o);
                            self.store(t, i.m.space, addr + (k as u32 * sz) as u64, sz, x)?;
                        }
                    }
                    o => {
                        let x = self.val(t, o);
                        self.store(t, i.m.space, addr, sz, x)?;
                    }
                }
            }
            Op::Atom | Op::Red => {
                let (dst, ao, bo, co) = if i.op == Op::Atom { (&i.d, &i.a, &i.b, &i.c) } else { (&Opd::None, &i.a, &i.b, &i.c) };
                let addr = self.addr(t, ao);
                let b = self.val(t, bo);
                let c = self.val(t, co);
                let sz = ty.size();
                let sub = i.m.sub;
                let old = self.atomic(t, i.m.space, addr, sz, |o| Some(atom_op(sub, ty, o, b, c)).filter(|_| !(sub == Sub::Cas && trunc(o, bits) != trunc(b, bits))))?;
                if i.op == Op::Atom {
                    let old = if ty.is_signed() { trunc(old, bits) } else { old };
                    self.set(t, dst, old, ty);
                }
            }
            Op::Bra => {
                if let Opd::Target(pc) = i.a {
                    t.pc = pc;
                    return Ok(false_continue(t));
                }
                return Err(LaunchError::Unsupported("indirect branch".into()));
            }
            Op::Ret => return self.ret(t),
            Op::Exit => {
                t.st = St::Done;
                return Ok(false);
            }
            Op::Call => return self.call(t, i),
            Op::Bar => {
                // The pc stays on the barrier; release moves it on.
                let id = if matches!(i.a, Opd::None) { 0 } else { self.val(t, &i.a) as u32 };
                let cnt = if matches!(i.b, Opd::None) { 0 } else { self.val(t, &i.b) as u32 };
                t.st = St::Bar(id & 15, cnt);
                return Ok(false);
            }
            Op::BarArrive => {
                let id = self.val(t, &i.a) as u32 & 15;
                self.arrivals[id as usize] += 1;
            }
            Op::BarRed => {
                // bar.red.op d, id, [count,] pred
                let id = self.val(t, &i.a) as u32;
                let cnt = if matches!(i.c, Opd::None) { 0 } else { self.val(t, &i.b) as u32 };
                t.st = St::Bar(id & 15, cnt);
                return Ok(false);
            }
            Op::BarWarp | Op::Vote | Op::Shfl | Op::Activemask | Op::Match | Op::Redux => {
                t.st = St::Warp;
                return Ok(false);
            }
            Op::Rcp | Op::Sqrt | Op::Rsqrt | Op::Ex2 | Op::Lg2 | Op::Sin | Op::Cos | Op::Tanh => {
                let a = self.val(t, &i.a);
                let r = match ty {
                    Ty::F64 => {
                        let x = f64::from_bits(a);
                        let r = match i.op {
                            Op::Rcp => fp::div64(1.0, x, i.m.rnd),
                            Op::Sqrt => fp::sqrt64(x, i.m.rnd),
                            Op::Rsqrt => 1.0 / x.sqrt(),
                            Op::Ex2 => x.exp2(),
                            Op::Lg2 => x.log2(),
                            Op::Sin => x.sin(),
                            Op::Cos => x.cos(),
                            _ => x.tanh(),
                        };
                        r.to_bits()
                    }
                    Ty::F32 => {
                        let x = if i.m.ftz { fp::ftz32(f32v(a)) } else { f32v(a) };
                        let r = match i.op {
                            Op::Rcp => fp::div32(1.0, x, i.m.rnd),
                            Op::Sqrt => fp::sqrt32(x, i.m.rnd),
                            Op::Rsqrt => (1.0 / (x as f64).sqrt()) as f32,
                            Op::Ex2 => x.exp2(),
                            Op::Lg2 => x.log2(),
                            Op::Sin => x.sin(),
                            Op::Cos => x.cos(),
                            _ => x.tanh(),
                        };
                        f32b(self.fout32(i, r))
                    }
                    _ => {
                        let x = to_f32(a, ty);
                        let r = match i.op {
                            Op::Rcp => 1.0 / x,
                            Op::Sqrt => x.sqrt(),
                            Op::Rsqrt => 1.0 / x.sqrt(),
                            Op::Ex2 => x.exp2(),
                            Op::Lg2 => x.log2(),
                            Op::Sin => x.sin(),
                            Op::Cos => x.cos(),
                            _ => x.tanh(),
                        };
                        from_f32(r, ty)
                    }
                };
                self.set(t, &i.d, r, ty);
            }
            Op::Copysign => {
                // copysign.f32 d, a, b: magnitude of b, sign of a.
                let (a, b) = (self.val(t, &i.a), self.val(t, &i.b));
                let r = if ty == Ty::F64 {
                    f64::from_bits(b).copysign(f64::from_bits(a)).to_bits()
                } else {
                    f32b(f32v(b).copysign(f32v(a)))
                };
                self.set(t, &i.d, r, ty);
            }
            Op::Testp => {
                let a = self.val(t, &i.a);
                let x = to_f64(a, ty);
                let sub = if ty == Ty::F32 { f32v(a).is_subnormal() } else { x.is_subnormal() };
                let r = match i.m.cmp {
                    Cmp::Eq => x.is_finite(),
                    Cmp::Ne => x.is_infinite(),
                    Cmp::Lt => !x.is_nan(),
                    Cmp::Le => x.is_nan(),
                    Cmp::Gt => x.is_finite() && x != 0.0 && !sub,
                    _ => sub,
                };
                self.set(t, &i.d, r as u64, Ty::Pred);
            }
            Op::Clz | Op::Popc | Op::Brev | Op::Bfind => {
                let a = trunc(self.val(t, &i.a), bits);
                let r = match i.op {
                    Op::Clz => (a.leading_zeros() - (64 - bits)) as u64,
                    Op::Popc => a.count_ones() as u64,
                    Op::Brev => a.reverse_bits() >> (64 - bits),
                    _ => {
                        let v = if ty.is_signed() && sext(a, bits) < 0 { trunc(!a, bits) } else { a };
                        if v == 0 {
                            0xffff_ffff
                        } else {
                            let msb = 63 - v.leading_zeros() as u64;
                            if i.m.flag {
                                bits as u64 - 1 - msb
                            } else {
                                msb
                            }
                        }
                    }
                };
                let oty = if i.op == Op::Brev { ty } else { Ty::U32 };
                self.set(t, &i.d, r, oty);
            }
            Op::Bfe => {
                let a = trunc(self.val(t, &i.a), bits);
                let pos = (self.val(t, &i.b) & 0xff) as u32;
                let len = (self.val(t, &i.c) & 0xff) as u32;
                let msb = bits - 1;
                // PTX: sign bit from a[min(pos+len-1, msb)], bits past the field are the sign.
                let sbit = ty.is_signed() && len != 0 && (a >> (pos + len - 1).min(msb)) & 1 != 0;
                let take = if pos > msb { 0 } else { len.min(bits - pos) };
                let field = if take == 0 { 0 } else { trunc(a >> pos, take) };
                let r = if sbit && take < 64 { field | (u64::MAX << take) } else { field };
                self.set(t, &i.d, r, ty);
            }
            Op::Bfi => {
                let (a, b) = (self.val(t, &i.a), self.val(t, &i.b));
                let pos = (self.val(t, &i.c) & 0xff) as u32;
                let len = (self.val(t, &i.e) & 0xff) as u32;
                let r = if len == 0 || pos >= bits {
                    b
                } else {
                    let len = len.min(bits - pos);
                    let m = if len >= 64 { u64::MAX } else { ((1u64 << len) - 1) << pos };
                    (b & !m) | ((a << pos) & m)
                };
                self.set(t, &i.d, r, ty);
            }
            Op::Prmt => {
                let (a, b) = (self.val(t, &i.a) as u32, self.val(t, &i.b) as u32);
                let c = self.val(t, &i.c) as u32;
                let bytes = ((b as u64) << 32 | a as u64).to_le_bytes();
                let mut r = 0u32;
                for k in 0..4 {
                    let sel = (c >> (4 * k)) & 0xf;
                    let mut byte = bytes[(sel & 7) as usize];
                    if sel & 8 != 0 {
                        byte = if byte & 0x80 != 0 { 0xff } else { 0 };
                    }
                    r |= (byte as u32) << (8 * k);
                }
                self.set(t, &i.d, r as u64, Ty::B32);
            }
            Op::Sad => {
                let (a, b, c) = (self.val(t, &i.a), self.val(t, &i.b), self.val(t, &i.c));
                let d = if ty.is_signed() { sext(a, bits).abs_diff(sext(b, bits)) } else { trunc(a, bits).abs_diff(trunc(b, bits)) };
                self.set(t, &i.d, c.wrapping_add(d), ty);
            }
            Op::Dp4a | Op::Dp2a => {
                let (a, b, c) = (self.val(t, &i.a) as u32, self.val(t, &i.b) as u32, self.val(t, &i.c) as u32);
                let (sa, sb) = (i.ty.is_signed(), i.ty2.is_signed());
                let byte = |x: u32, k: u32, s: bool| if s { (x >> (8 * k)) as u8 as i8 as i64 } else { ((x >> (8 * k)) & 0xff) as i64 };
                let half = |x: u32, k: u32, s: bool| if s { (x >> (16 * k)) as u16 as i16 as i64 } else { ((x >> (16 * k)) & 0xffff) as i64 };
                let mut acc = c as i32 as i64;
                if i.op == Op::Dp4a {
                    for k in 0..4 {
                        acc += byte(a, k, sa) * byte(b, k, sb);
                    }
                } else {
                    let hi = i.m.part == Part::Hi;
                    for k in 0..2 {
                        acc += half(a, k, sa) * byte(b, k + if hi { 2 } else { 0 }, sb);
                    }
                }
                self.set(t, &i.d, acc as u64, Ty::B32);
            }
            Op::Tex => {
                let r = crate::tex::fetch(self, t, i)?;
                if let Opd::Vec(v) = &i.d {
                    for (k, o) in v.iter().enumerate() {
                        if let Opd::Reg(rr) = *o {
                            t.regs[t.rb + rr as usize] = r[k];
                        }
                    }
                }
            }
            Op::CpAsync => {
                // cp.async [dst], [src], size{, src-size}: done at once (the waits are no-ops).
                let dst = self.addr(t, &i.d);
                let src = self.addr(t, &i.a);
                let size = self.val(t, &i.b).min(256);
                let src_size = if matches!(i.c, Opd::None) { size } else { self.val(t, &i.c).min(size) };
                for k in 0..size {
                    let v = if k < src_size { self.load(t, Space::Generic, src + k, 1)? } else { 0 };
                    self.store(t, Space::Shared, dst + k, 1, v)?;
                }
            }
            Op::Mbarrier => return self.mbarrier(t, i),
            Op::Suld | Op::Sust => {
                let (ao, vo) = if i.op == Op::Suld { (&i.a, &i.d) } else { (&i.d, &i.a) };
                let Opd::Tex(h, c) = ao else { return Err(LaunchError::Unsupported("surface operand".into())) };
                let handle = self.val(t, h);
                let desc = self.regions.mem().surface(handle).ok_or(LaunchError::IllegalAddress { addr: handle })?;
                let coords: Vec<i64> = match &**c {
                    Opd::Vec(v) => v.iter().map(|o| self.val(t, o) as u32 as i32 as i64).collect(),
                    o => vec![self.val(t, o) as u32 as i32 as i64],
                };
                let esize: u64 = desc.bits.iter().map(|&b| (b / 8) as u64).sum::<u64>().max(1);
                let pitch = if desc.pitch > 0 { desc.pitch } else { desc.width * esize };
                let dims = i.m.geom.clamp(1, 3) as usize;
                let (x, y, z) = (coords[0], if dims > 1 { coords.get(1).copied().unwrap_or(0) } else { 0 }, if dims > 2 { coords.get(2).copied().unwrap_or(0) } else { 0 });
                let vals: Vec<&Opd> = match vo {
                    Opd::Vec(v) => v.iter().collect(),
                    o => vec![o],
                };
                let sz = ty.size();
                let bytes = sz as i64 * vals.len() as i64;
                let (x, y, z) = if i.m.clamp {
                    // `.clamp`: the nearest access inside the surface (x is in bytes).
                    let last_x = ((desc.width * esize) as i64 - bytes).max(0);
                    (
                        x.clamp(0, last_x),
                        y.clamp(0, desc.height.max(1) as i64 - 1),
                        z.clamp(0, desc.depth.max(1) as i64 - 1),
                    )
                } else {
                    (x, y, z)
                };
                let inside = x >= 0
                    && x + bytes <= (desc.width * esize) as i64
                    && y >= 0
                    && y < desc.height.max(1) as i64
                    && z >= 0
                    && z < desc.depth.max(1) as i64;
                if !inside {
                    if i.m.flag {
                        return Err(LaunchError::IllegalAddress { addr: desc.base });
                    }
                    if i.op == Op::Suld {
                        for o in vals {
                            self.set(t, o, 0, ty);
                        }
                    }
                    return Ok(true);
                }
                let addr = desc.base + z as u64 * pitch * desc.height.max(1) + y as u64 * pitch + x as u64;
                for (k, o) in vals.into_iter().enumerate() {
                    let a = addr + (k as u32 * sz) as u64;
                    if i.op == Op::Suld {
                        let v = self.regions.read(a, sz)?;
                        self.set(t, o, v, ty);
                    } else {
                        let v = self.val(t, o);
                        self.regions.write(a, sz, v)?;
                    }
                }
            }
            Op::Trap => return Err(LaunchError::Trap),
            Op::Nop => {}
            Op::Unsupported => {
                let m = self.l.prog.messages.get(i.aux as usize).cloned().unwrap_or_default();
                return Err(LaunchError::Unsupported(format!("{m} (PTX line {})", i.line)));
            }
        }
        Ok(true)
    }

    pub(crate) fn val_pub(&self, t: &Thread, o: &Opd) -> u64 {
        self.val(t, o)
    }

    pub(crate) fn mem(&mut self) -> &mut Regions<'a> {
        &mut self.regions
    }

    /// `mbarrier` objects (8 bytes, usually in shared memory): bits 0..20 pending arrivals
    /// of the current phase, 20..40 expected arrivals, bit 63 the phase parity. A failed
    /// wait yields the thread so the arrivals it waits for can happen.
    fn mbarrier(&mut self, t: &mut Thread, i: &Inst) -> R<bool> {
        const M20: u64 = (1 << 20) - 1;
        let space = i.m.space;
        let (addr, op_a) = match i.aux {
            MB_INIT | MB_INVAL | MB_CP_ARRIVE_NOINC | MB_NOP => (self.addr(t, &i.d), &i.a),
            _ => (self.addr(t, &i.a), &i.b),
        };
        let arrive = |b: &mut Self, t: &mut Thread, drop: bool| -> R<u64> {
            let old = b.atomic(t, space, addr, 8, |w| {
                let (pending, expected, phase) = (w & M20, (w >> 20) & M20, w >> 63);
                let expected = if drop { expected.saturating_sub(1) } else { expected };
                Some(if pending <= 1 {
                    expected | (expected << 20) | ((phase ^ 1) << 63)
                } else {
                    (pending - 1) | (expected << 20) | (phase << 63)
                })
            })?;
            // The state token: the phase the arrival belonged to.
            Ok(old >> 63)
        };
        match i.aux {
            MB_INIT => {
                let n = self.val(t, op_a) & M20;
                self.store(t, space, addr, 8, n | (n << 20))?;
            }
            MB_ARRIVE | MB_ARRIVE_DROP => {
                let st = arrive(self, t, i.aux == MB_ARRIVE_DROP)?;
                self.set(t, &i.d, st, Ty::B64);
            }
            MB_CP_ARRIVE_NOINC => {
                arrive(self, t, false)?;
            }
            MB_TEST_WAIT | MB_TEST_WAIT_PARITY => {
                let w = self.load(t, space, addr, 8)?;
                let token = self.val(t, op_a) & 1;
                // Complete once the barrier's phase differs from the waited-for phase.
                let done = (w >> 63) != token;
                self.set(t, &i.d, done as u64, Ty::Pred);
                if !done {
                    // Yield: re-run the wait after the block's other threads had a turn.
                    t.pc += 1;
                    return Ok(false);
                }
            }
            MB_PENDING_COUNT => {
                let st = self.val(t, op_a);
                self.set(t, &i.d, st & M20, Ty::U32);
            }
            _ => {}
        }
        Ok(true)
    }

    fn cc_slot(&self, t: &Thread) -> usize {
        t.rb + self.l.prog.funcs[t.func as usize].nregs as usize - 1
    }

    #[inline(always)]
    fn fin32(&self, i: &Inst, a: u64, b: u64) -> (f32, f32) {
        let (x, y) = (f32v(a), f32v(b));
        if i.m.ftz {
            (fp::ftz32(x), fp::ftz32(y))
        } else {
            (x, y)
        }
    }

    #[inline(always)]
    fn fout32(&self, i: &Inst, r: f32) -> f32 {
        let r = if i.m.ftz { fp::ftz32(r) } else { r };
        if i.m.sat {
            fp::sat32(r)
        } else {
            r
        }
    }

    fn call(&mut self, t: &mut Thread, i: &Inst) -> R<bool> {
        let prog = self.l.prog;
        let cs = &prog.calls[i.aux as usize];
        let target = match cs.target {
            // Through a function pointer: the function whose address value the register holds.
            CallTarget::Indirect(r) => {
                let v = t.regs[t.rb + r as usize];
                match crate::ir::addr_func(v, prog.funcs.len()) {
                    Some(f) => CallTarget::Func(f),
                    // A jump to what is not code: an illegal address on a GPU.
                    None => return Err(LaunchError::IllegalAddress { addr: v }),
                }
            }
            t => t,
        };
        match target {
            CallTarget::Indirect(_) => unreachable!("resolved above"),
            CallTarget::Func(f) => {
                if t.frames.len() >= 1024 {
                    return Err(LaunchError::Unsupported("call depth over 1024".into()));
                }
                let cur = &prog.funcs[t.func as usize];
                let callee = &prog.funcs[f as usize];
                if callee.entry == u32::MAX {
                    // Declared `.extern` and defined elsewhere (separate compilation).
                    return Err(LaunchError::Unsupported(format!("call to external function {}", callee.name)));
                }
                let rb = t.rb + cur.nregs as usize;
                let fb = t.fb + cur.frame_bytes as usize;
                let lb = t.lb + cur.local_bytes as usize;
                if t.local.len() < lb + callee.local_bytes as usize {
                    t.local.resize(lb + callee.local_bytes as usize, 0);
                }
                if t.regs.len() < rb + callee.nregs as usize {
                    t.regs.resize(rb + callee.nregs as usize, 0);
                }
                if t.pframe.len() < fb + callee.frame_bytes as usize {
                    t.pframe.resize(fb + callee.frame_bytes as usize, 0);
                }
                // Sizes of the callee's formals (a call through a pointer has no others).
                for (k, &(off, _)) in cs.args.iter().enumerate() {
                    let Some(&(dst, size)) = callee.param_offs.get(k) else { break };
                    let (src, dst, size) = (t.fb + off as usize, fb + dst as usize, size as usize);
                    if src + size > t.pframe.len() || dst + size > t.pframe.len() {
                        return Err(LaunchError::Unsupported(format!("call argument outside the param frame (PTX line {})", i.line)));
                    }
                    if src + size > t.pframe.len() || dst + size > t.pframe.len() {
                return Err(LaunchError::Unsupported("return value outside the param frame".into()));
            }
            t.pframe.copy_within(src..src + size, dst);
                }
                t.frames.push(Frame { ret_pc: t.pc + 1, rb: t.rb as u32, fb: t.fb as u32, lb: t.lb as u32, func: t.func, call: i.aux });
                t.rb = rb;
                t.fb = fb;
                t.lb = lb;
                t.func = f;
                t.pc = callee.entry;
                // Keep running: a call is not a scheduling point.
                Ok(false_continue(t))
            }
            CallTarget::Extern(Extern::Vprintf) => {
                let arg = |k: usize| -> u64 {
                    cs.args.get(k).map_or(0, |&(off, _)| {
                        let o = t.fb + off as usize;
                        t.pframe.get(o..o + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
                    })
                };
                let (fmt, args) = (arg(0), arg(1));
                let n = crate::printf::vprintf(self, t, fmt, args)?;
                if let Some(&(off, _)) = cs.rets.first() {
                    let o = t.fb + off as usize;
                    if let Some(b) = t.pframe.get_mut(o..o + 4) {
                        b.copy_from_slice(&(n as u32).to_le_bytes());
                    }
                }
                Ok(true)
            }
            CallTarget::Extern(Extern::AssertFail) => {
                let arg = |k: usize| -> u64 {
                    cs.args.get(k).map_or(0, |&(off, _)| {
                        let o = t.fb + off as usize;
                        t.pframe.get(o..o + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
                    })
                };
                let msg = crate::printf::read_cstr(self, t, arg(0)).unwrap_or_default();
                let file = crate::printf::read_cstr(self, t, arg(1)).unwrap_or_default();
                let line = arg(2) as u32;
                let func = crate::printf::read_cstr(self, t, arg(3)).unwrap_or_default();
                let s = format!(
                    "{file}:{line}: {func}: block: [{},{},{}], thread: [{},{},{}] Assertion `{msg}` failed.\n",
                    self.ctaid[0], self.ctaid[1], self.ctaid[2], t.tid[0], t.tid[1], t.tid[2]
                );
                self.printf.extend_from_slice(s.as_bytes());
                Err(LaunchError::Assert)
            }
            CallTarget::Extern(Extern::Malloc) => {
                let size = cs.args.first().map_or(0, |&(off, _)| {
                    let o = t.fb + off as usize;
                    t.pframe.get(o..o + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
                });
                // NULL when the device has no heap (or it is exhausted), as on a GPU.
                let p = if size == 0 { 0 } else { self.regions.mem().malloc(size).unwrap_or(0) };
                if let Some(&(off, _)) = cs.rets.first() {
                    let o = t.fb + off as usize;
                    if let Some(b) = t.pframe.get_mut(o..o + 8) {
                        b.copy_from_slice(&p.to_le_bytes());
                    }
                }
                Ok(true)
            }
            CallTarget::Extern(Extern::Free) => {
                let p = cs.args.first().map_or(0, |&(off, _)| {
                    let o = t.fb + off as usize;
                    t.pframe.get(o..o + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
                });
                if p != 0 {
                    self.regions.mem().free(p);
                }
                Ok(true)
            }
            CallTarget::Extern(Extern::GraphSetConditional) => {
                let arg = |k: usize, size: usize| -> u64 {
                    cs.args.get(k).map_or(0, |&(off, _)| {
                        let o = t.fb + off as usize;
                        let mut b = [0u8; 8];
                        if let Some(s) = t.pframe.get(o..o + size) {
                            b[..size].copy_from_slice(s);
                        }
                        u64::from_le_bytes(b)
                    })
                };
                // The handle names the condition's 32-bit value in device memory; a handle
                // that names none faults like any bad store.
                let (handle, value) = (arg(0, 8), arg(1, 4));
                self.regions.write(handle, 4, value)?;
                Ok(true)
            }
        }
    }

    fn ret(&mut self, t: &mut Thread) -> R<bool> {
        let Some(fr) = t.frames.pop() else {
            t.st = St::Done;
            return Ok(false);
        };
        let prog = self.l.prog;
        let callee = &prog.funcs[t.func as usize];
        let cs = &prog.calls[fr.call as usize];
        for (k, &(off, _)) in cs.rets.iter().enumerate() {
            let Some(&(src, size)) = callee.ret_offs.get(k) else { break };
            let (src, dst, size) = (t.fb + src as usize, fr.fb as usize + off as usize, size as usize);
            if src + size > t.pframe.len() || dst + size > t.pframe.len() {
                return Err(LaunchError::Unsupported("return value outside the param frame".into()));
            }
            t.pframe.copy_within(src..src + size, dst);
        }
        t.pc = fr.ret_pc;
        t.rb = fr.rb as usize;
        t.fb = fr.fb as usize;
        t.lb = fr.lb as usize;
        t.func = fr.func;
        Ok(false_continue(t))
    }
}

/// A control transfer that already set `pc`: keep running without the +1. Implemented by
/// pre-decrementing so the caller's `pc += 1` lands on the target.
#[inline(always)]
fn false_continue(t: &mut Thread) -> bool {
    t.pc = t.pc.wrapping_sub(1);
    true
}

fn wide_ty(t: Ty) -> Ty {
    match t {
        Ty::S16 => Ty::S32,
        Ty::U16 => Ty::U32,
        Ty::S32 => Ty::S64,
        Ty::U32 => Ty::U64,
        _ => Ty::B64,
    }
}

fn simd2(a: u64, b: u64, f: impl Fn(u64, u64) -> u64) -> u64 {
    let lo = f(a & 0xffff, b & 0xffff) & 0xffff;
    let hi = f((a >> 16) & 0xffff, (b >> 16) & 0xffff) & 0xffff;
    lo | (hi << 16)
}

/// Which state space a generic address points into, and the offset there.
#[inline]
pub(crate) fn generic(addr: u64) -> (Space, u64) {
    if (SHARED_WIN..SHARED_WIN + WIN32_SIZE).contains(&addr) {
        (Space::Shared, addr - SHARED_WIN)
    } else if (LOCAL_WIN..LOCAL_WIN + WIN32_SIZE).contains(&addr) {
        (Space::Local, addr - LOCAL_WIN)
    } else if (PARAM_WIN..PARAM_WIN + WIN_SIZE).contains(&addr) {
        (Space::Param, addr - PARAM_WIN)
    } else {
        (Space::Generic, addr)
    }
}

#[inline]
fn rd_slice(s: &[u8], addr: u64, size: u32) -> R<u64> {
    let a = addr as usize;
    if addr > usize::MAX as u64 || a.checked_add(size as usize).is_none_or(|e| e > s.len()) {
        return Err(LaunchError::IllegalAddress { addr });
    }
    if size > 1 && !addr.is_multiple_of(size as u64) {
        return Err(LaunchError::MisalignedAddress { addr });
    }
    let mut b = [0u8; 8];
    b[..size as usize].copy_from_slice(&s[a..a + size as usize]);
    Ok(u64::from_le_bytes(b))
}

#[inline]
fn wr_slice(s: &mut [u8], addr: u64, size: u32, v: u64) -> R<()> {
    let a = addr as usize;
    if addr > usize::MAX as u64 || a.checked_add(size as usize).is_none_or(|e| e > s.len()) {
        return Err(LaunchError::IllegalAddress { addr });
    }
    if size > 1 && !addr.is_multiple_of(size as u64) {
        return Err(LaunchError::MisalignedAddress { addr });
    }
    s[a..a + size as usize].copy_from_slice(&v.to_le_bytes()[..size as usize]);
    Ok(())
}

pub(crate) fn compare(c: Cmp, ty: Ty, a: u64, b: u64, ftz: bool) -> bool {
    use std::cmp::Ordering as O;
    let bits = ty.bits();
    let ord: Option<O> = if ty.is_float() {
        let (x, y) = if ty == Ty::F32 {
            let (x, y) = (f32v(a), f32v(b));
            if ftz {
                (fp::ftz32(x) as f64, fp::ftz32(y) as f64)
            } else {
                (x as f64, y as f64)
            }
        } else {
            (to_f64(a, ty), to_f64(b, ty))
        };
        x.partial_cmp(&y)
    } else if ty.is_signed() {
        Some(sext(a, bits).cmp(&sext(b, bits)))
    } else {
        Some(trunc(a, bits).cmp(&trunc(b, bits)))
    };
    let unord = ord.is_none();
    match c {
        Cmp::Eq => ord == Some(O::Equal),
        Cmp::Ne => ord.is_some_and(|o| o != O::Equal),
        Cmp::Lt | Cmp::Lo => ord == Some(O::Less),
        Cmp::Le | Cmp::Ls => ord.is_some_and(|o| o != O::Greater),
        Cmp::Gt | Cmp::Hi => ord == Some(O::Greater),
        Cmp::Ge | Cmp::Hs => ord.is_some_and(|o| o != O::Less),
        Cmp::Equ => unord || ord == Some(O::Equal),
        Cmp::Neu => unord || ord != Some(O::Equal),
        Cmp::Ltu => unord || ord == Some(O::Less),
        Cmp::Leu => unord || ord != Some(O::Greater),
        Cmp::Gtu => unord || ord == Some(O::Greater),
        Cmp::Geu => unord || ord != Some(O::Less),
        Cmp::Num => !unord,
        Cmp::Nan => unord,
    }
}

fn atom_op(sub: Sub, ty: Ty, o: u64, b: u64, c: u64) -> u64 {
    let bits = ty.bits();
    match sub {
        Sub::Add => match ty {
            Ty::F32 => f32b(f32v(o) + f32v(b)),
            Ty::F64 => (f64::from_bits(o) + f64::from_bits(b)).to_bits(),
            Ty::F16 => from_f32(to_f32(o, ty) + to_f32(b, ty), ty),
            _ => o.wrapping_add(b),
        },
        Sub::Min | Sub::Max => {
            let mx = sub == Sub::Max;
            match ty {
                Ty::F32 => f32b(if mx { f32v(o).max(f32v(b)) } else { f32v(o).min(f32v(b)) }),
                Ty::F64 => {
                    let (x, y) = (f64::from_bits(o), f64::from_bits(b));
                    (if mx { x.max(y) } else { x.min(y) }).to_bits()
                }
                _ if ty.is_signed() => {
                    let (x, y) = (sext(o, bits), sext(b, bits));
                    (if mx { x.max(y) } else { x.min(y) }) as u64
                }
                _ => {
                    let (x, y) = (trunc(o, bits), trunc(b, bits));
                    if mx {
                        x.max(y)
                    } else {
                        x.min(y)
                    }
                }
            }
        }
        Sub::Inc => {
            let (x, y) = (trunc(o, bits), trunc(b, bits));
            if x >= y {
                0
            } else {
                x + 1
            }
        }
        Sub::Dec => {
            let (x, y) = (trunc(o, bits), trunc(b, bits));
            if x == 0 || x > y {
                y
            } else {
                x - 1
            }
        }
        Sub::And => o & b,
        Sub::Or => o | b,
        Sub::Xor => o ^ b,
        Sub::Exch => b,
        Sub::Cas => c,
        _ => o,
    }
}

/// `cvt` between every pair of types, with rounding and saturation.
pub(crate) fn cvt(i: &Inst, a: u64) -> u64 {
    let (dt, st) = (i.ty, i.ty2);
    let rnd = i.m.rnd;
    if dt.is_float() && st.is_float() {
        return match (dt, st) {
            (Ty::F32, Ty::F32) => {
                let mut x = f32v(a);
                if i.m.ftz {
                    x = fp::ftz32(x);
                }
                if matches!(rnd, Rnd::Rni | Rnd::Rzi | Rnd::Rmi | Rnd::Rpi) {
                    x = fp::round_int32(x, rnd);
                }
                let x = if i.m.ftz { fp::ftz32(x) } else { x };
                f32b(if i.m.sat { fp::sat32(x) } else { x })
            }
            (Ty::F64, Ty::F64) => {
                let mut x = f64::from_bits(a);
                if matches!(rnd, Rnd::Rni | Rnd::Rzi | Rnd::Rmi | Rnd::Rpi) {
                    x = fp::round_int64(x, rnd);
                }
                (if i.m.sat { fp::sat64(x) } else { x }).to_bits()
            }
            (Ty::F32, Ty::F64) => {
                let x = fp::f64_to_f32(f64::from_bits(a), rnd);
                let x = if i.m.ftz { fp::ftz32(x) } else { x };
                f32b(if i.m.sat { fp::sat32(x) } else { x })
            }
            (Ty::F64, _) => {
                let x = to_f64(a, st);
                let x = if matches!(rnd, Rnd::Rni | Rnd::Rzi | Rnd::Rmi | Rnd::Rpi) { fp::round_int64(x, rnd) } else { x };
                (if i.m.sat { fp::sat64(x) } else { x }).to_bits()
            }
            (_, Ty::F64) => {
                let x = f64::from_bits(a) as f32;
                from_f32(if i.m.sat { fp::sat32(x) } else { x }, dt)
            }
            _ => {
                let x = to_f32(a, st);
                let x = if matches!(rnd, Rnd::Rni | Rnd::Rzi | Rnd::Rmi | Rnd::Rpi) { fp::round_int32(x, rnd) } else { x };
                from_f32(if i.m.sat { fp::sat32(x) } else { x }, dt)
            }
        };
    }
    let sb = st.bits();
    let db = dt.bits();
    if st.is_float() {
        // float → int: round, then saturate (always, per PTX); NaN → 0.
        let x = fp::round_int64(to_f64(a, st), if rnd == Rnd::None { Rnd::Rzi } else { rnd });
        if x.is_nan() {
            return 0;
        }
        return if dt.is_signed() {
            let (lo, hi) = (-(2f64.powi(db as i32 - 1)), 2f64.powi(db as i32 - 1) - 1.0);
            trunc(x.clamp(lo, hi) as i64 as u64, db)
        } else {
            let hi = 2f64.powi(db as i32) - 1.0;
            trunc(x.clamp(0.0, hi) as u64, db)
        };
    }
    if dt.is_float() {
        // int → float.
        let v: f64 = if st.is_signed() { sext(a, sb) as f64 } else { trunc(a, sb) as f64 };
        let exact_int: i128 = if st.is_signed() { sext(a, sb) as i128 } else { trunc(a, sb) as i128 };
        return match dt {
            Ty::F64 => {
                if sb == 64 && matches!(rnd, Rnd::Rz | Rnd::Rm | Rnd::Rp) {
                    let r = v;
                    let e = exact_int.cmp(&(r as i128));
                    fp_adjust64_pub(r, e, rnd).to_bits()
                } else {
                    v.to_bits()
                }
            }
            Ty::F32 => {
                let r = if st.is_signed() { sext(a, sb) as f32 } else { trunc(a, sb) as f32 };
                let r = if matches!(rnd, Rnd::Rz | Rnd::Rm | Rnd::Rp) {
                    let e = exact_int.cmp(&(r as i128));
                    fp_adjust32_pub(r, e, rnd)
                } else {
                    r
                };
                f32b(if i.m.sat { fp::sat32(r) } else { r })
            }
            _ => from_f32(v as f32, dt),
        };
    }
    // int → int: extend from the source, then truncate or saturate to the destination.
    let v: i128 = if st.is_signed() { sext(a, sb) as i128 } else { trunc(a, sb) as i128 };
    if i.m.sat {
        let (lo, hi): (i128, i128) = if dt.is_signed() { (-(1i128 << (db - 1)), (1i128 << (db - 1)) - 1) } else { (0, (1i128 << db) - 1) };
        return trunc(v.clamp(lo, hi) as u64, db);
    }
    trunc(v as u64, db)
}

fn fp_adjust32_pub(r: f32, e: std::cmp::Ordering, rnd: Rnd) -> f32 {
    match (rnd, e) {
        (_, std::cmp::Ordering::Equal) => r,
        (Rnd::Rz, std::cmp::Ordering::Less) if r > 0.0 => r.next_down(),
        (Rnd::Rz, std::cmp::Ordering::Greater) if r < 0.0 => r.next_up(),
        (Rnd::Rm, std::cmp::Ordering::Less) => r.next_down(),
        (Rnd::Rp, std::cmp::Ordering::Greater) => r.next_up(),
        _ => r,
    }
}

fn fp_adjust64_pub(r: f64, e: std::cmp::Ordering, rnd: Rnd) -> f64 {
    match (rnd, e) {
        (_, std::cmp::Ordering::Equal) => r,
        (Rnd::Rz, std::cmp::Ordering::Less) if r > 0.0 => r.next_down(),
        (Rnd::Rz, std::cmp::Ordering::Greater) if r < 0.0 => r.next_up(),
        (Rnd::Rm, std::cmp::Ordering::Less) => r.next_down(),
        (Rnd::Rp, std::cmp::Ordering::Greater) => r.next_up(),
        _ => r,
    }
}

