//! Memory pools (`cudaMemPool_t`): the device's default pool, pools the program creates,
//! and the stream-ordered allocator on top (`cudaMallocAsync`, `cudaMallocFromPoolAsync`,
//! `cudaFreeAsync`). A pool is bookkeeping in this process over ordinary device allocations
//! of the proxy: a block freed into its pool is kept for reuse, and memory above the
//! release threshold goes back to the device at the next synchronization (stream, event or
//! device), or at `cudaMemPoolTrimTo`, as CUDA does. Blocks are device allocations like any
//! other, so a checkpoint saves them and a restart puts them back at their addresses; the
//! pools themselves are in the process image.
//!
//! `cudaFreeAsync` waits for the stream before the block goes back to the pool, so a
//! cached block is idle and any stream may reuse it (all three reuse policies hold).
#![allow(non_upper_case_globals)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use crum_wire::{cuda, AllocKind, Request};

use crate::abi_gen::*;
use crate::api::memory::alloc_any;
use crate::client::call;
use crate::errors::CudaResult;
use crate::state::{add_alloc, remove_alloc, MemKind};

/// Granularity of pool blocks.
pub const BLOCK_ALIGN: u64 = 512;

#[derive(Debug, Clone)]
pub struct Pool {
    pub release_threshold: u64,
    /// cudaMemPoolReuseFollowEventDependencies, AllowOpportunistic, AllowInternalDependencies.
    pub reuse: [i32; 3],
    pub max_size: u64,
    pub used: u64,
    pub used_high: u64,
    pub reserved: u64,
    pub reserved_high: u64,
    /// Blocks handed out: address → size.
    pub live: HashMap<u64, u64>,
    /// Blocks freed into the pool, kept for reuse: (address, size).
    pub cached: Vec<(u64, u64)>,
    pub destroyed: bool,
}

impl Pool {
    fn new(max_size: u64) -> Pool {
        Pool {
            release_threshold: 0,
            reuse: [1, 1, 1],
            max_size,
            used: 0,
            used_high: 0,
            reserved: 0,
            reserved_high: 0,
            live: HashMap::new(),
            cached: Vec::new(),
            destroyed: false,
        }
    }

    /// A cached block for `size` bytes (best fit, at most twice the size).
    fn take_cached(&mut self, size: u64) -> Option<(u64, u64)> {
        let i = self
            .cached
            .iter()
            .enumerate()
            .filter(|(_, &(_, s))| s >= size && s <= size.saturating_mul(2))
            .min_by_key(|(_, &(_, s))| s)
            .map(|(i, _)| i)?;
        Some(self.cached.swap_remove(i))
    }

    fn hand_out(&mut self, addr: u64, size: u64) {
        self.live.insert(addr, size);
        self.used += size;
        self.used_high = self.used_high.max(self.used);
    }

    /// Cached blocks to give back until at most `keep` bytes stay reserved (never below
    /// what is in use).
    fn trim(&mut self, keep: u64) -> Vec<u64> {
        let mut out = Vec::new();
        // Largest first: fewest device frees.
        self.cached.sort_by_key(|&(_, s)| std::cmp::Reverse(s));
        while self.reserved > keep {
            let Some((a, s)) = self.cached.pop() else { break };
            self.reserved -= s;
            out.push(a);
        }
        out
    }
}

#[derive(Default)]
struct Pools {
    next: u64,
    /// The device's default pool (0 until first use).
    default: u64,
    /// `cudaDeviceSetMemPool`: the pool `cudaMallocAsync` uses (0: the default).
    current: u64,
    pools: HashMap<u64, Pool>,
    /// Block address → its pool.
    owner: HashMap<u64, u64>,
}

/// Some pool holds cached blocks (the synchronizations' fast path).
static CACHED: AtomicBool = AtomicBool::new(false);

fn pools() -> MutexGuard<'static, Pools> {
    static P: OnceLock<Mutex<Pools>> = OnceLock::new();
    P.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Pool handles: far from the graph handles and from NULL.
const POOL_BASE: u64 = 0x5e_0000;

impl Pools {
    fn create(&mut self, max_size: u64) -> u64 {
        self.next += 1;
        let h = POOL_BASE + self.next * 0x10;
        self.pools.insert(h, Pool::new(max_size));
        h
    }

    fn default_pool(&mut self) -> u64 {
        if self.default == 0 {
            self.default = self.create(0);
        }
        self.default
    }

    fn get(&mut self, h: u64) -> CudaResult<&mut Pool> {
        match self.pools.get_mut(&h) {
            Some(p) if !p.destroyed => Ok(p),
            _ => Err(cuda::ERROR_INVALID_VALUE),
        }
    }
}

/// `cudaDeviceReset`: the device's memory is gone, so every pool forgets its blocks; the
/// pools themselves stay (their handles are the program's), emptied, with default
/// attributes for the default pool as after a fresh start.
pub fn reset() {
    let mut p = pools();
    p.owner.clear();
    p.current = 0;
    let def = p.default;
    for (&h, pool) in p.pools.iter_mut() {
        let max = if h == def { 0 } else { pool.max_size };
        if h == def || !pool.destroyed {
            *pool = Pool::new(max);
        }
    }
    CACHED.store(false, Ordering::Release);
}

/// `cudaDeviceGetDefaultMemPool`.
pub fn default_pool() -> u64 {
    pools().default_pool()
}

/// `cudaDeviceGetMemPool`.
pub fn current() -> u64 {
    let mut p = pools();
    if p.current == 0 {
        p.default_pool()
    } else {
        p.current
    }
}

/// `cudaDeviceSetMemPool`.
pub fn set_current(h: u64) -> CudaResult<()> {
    let mut p = pools();
    p.get(h)?;
    p.current = h;
    Ok(())
}

/// `cudaMemPoolCreate` (device memory of device 0, no IPC handle types).
pub fn create(max_size: u64) -> u64 {
    pools().create(max_size)
}

/// `cudaMemPoolDestroy`: cached blocks go back now, blocks still in use when they are freed.
pub fn destroy(h: u64) -> CudaResult<()> {
    let free = {
        let mut p = pools();
        if h == p.default {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let pool = p.get(h)?;
        pool.destroyed = true;
        let blocks: Vec<u64> = pool.cached.drain(..).map(|(a, _)| a).collect();
        if p.current == h {
            p.current = 0;
        }
        for a in &blocks {
            p.owner.remove(a);
        }
        blocks
    };
    give_back(&free)
}

fn give_back(blocks: &[u64]) -> CudaResult<()> {
    let mut r = Ok(());
    for &a in blocks {
        if let Err(e) = call(&Request::Free { addr: a }) {
            r = Err(e);
        }
    }
    r
}

/// `cudaMallocFromPoolAsync` / `cudaMallocAsync`: a block of at least `size` bytes.
pub fn alloc(h: u64, size: u64) -> CudaResult<u64> {
    if size == 0 {
        return Ok(0);
    }
    let size = size.checked_next_multiple_of(BLOCK_ALIGN).ok_or(cuda::ERROR_MEMORY_ALLOCATION)?;
    let (max, reserved) = {
        let mut p = pools();
        let pool = p.get(h)?;
        if let Some((a, s)) = pool.take_cached(size) {
            pool.hand_out(a, s);
            add_alloc(a, s, MemKind::Device, 0);
            return Ok(a);
        }
        (pool.max_size, pool.reserved)
    };
    if max != 0 && reserved + size > max {
        // Make room from the cache first.
        let free = pools().get(h)?.trim(max.saturating_sub(size));
        give_back(&free)?;
        if pools().get(h)?.reserved + size > max {
            return Err(cuda::ERROR_MEMORY_ALLOCATION);
        }
    }
    let a = alloc_any(size, AllocKind::Device, MemKind::Device, 0)?;
    let mut p = pools();
    p.owner.insert(a, h);
    let pool = p.pools.get_mut(&h).ok_or(cuda::ERROR_INVALID_VALUE)?;
    pool.reserved += size;
    pool.reserved_high = pool.reserved_high.max(pool.reserved);
    pool.hand_out(a, size);
    Ok(a)
}

/// Whether `addr` is a block a pool handed out.
pub fn owns(addr: u64) -> bool {
    !pools().owner.is_empty() && pools().owner.contains_key(&addr)
}

/// The pool that handed out the block at `addr` (`CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE`).
pub fn pool_of(addr: u64) -> Option<u64> {
    pools().owner.get(&addr).copied()
}

/// `cudaFreeAsync` of a pool block (the stream's earlier work is done): back to its pool,
/// or to the device if the pool was destroyed. `false`: not a pool block.
pub fn free(addr: u64) -> CudaResult<bool> {
    let give = {
        let mut p = pools();
        let Some(&h) = p.owner.get(&addr) else {
            return Ok(false);
        };
        let pool = p.pools.get_mut(&h).ok_or(cuda::ERROR_INVALID_VALUE)?;
        let size = pool.live.remove(&addr).ok_or(cuda::ERROR_INVALID_VALUE)?;
        pool.used -= size;
        remove_alloc(addr);
        if pool.destroyed {
            pool.reserved -= size;
            p.owner.remove(&addr);
            true
        } else {
            pool.cached.push((addr, size));
            CACHED.store(true, Ordering::Release);
            false
        }
    };
    if give {
        give_back(&[addr])?;
    }
    Ok(true)
}

/// `cudaFree` of a pool block: it leaves its pool (the caller frees it on the device).
pub fn forget(addr: u64) {
    let mut p = pools();
    if let Some(h) = p.owner.remove(&addr) {
        if let Some(pool) = p.pools.get_mut(&h) {
            if let Some(size) = pool.live.remove(&addr) {
                pool.used -= size;
                pool.reserved -= size;
            }
        }
    }
}

/// After a synchronization: every pool gives back what it caches above its release
/// threshold.
pub fn after_sync() {
    if !CACHED.load(Ordering::Acquire) {
        return;
    }
    let free: Vec<u64> = {
        let mut p = pools();
        let mut out = Vec::new();
        let mut any = false;
        for pool in p.pools.values_mut() {
            out.extend(pool.trim(pool.release_threshold.max(pool.used)));
            any |= !pool.cached.is_empty();
        }
        for a in &out {
            p.owner.remove(a);
        }
        CACHED.store(any, Ordering::Release);
        out
    };
    let _ = give_back(&free);
}

/// `cudaMemPoolTrimTo`.
pub fn trim_to(h: u64, keep: u64) -> CudaResult<()> {
    let free = {
        let mut p = pools();
        let pool = p.get(h)?;
        let keep = keep.max(pool.used);
        let out = pool.trim(keep);
        for a in &out {
            p.owner.remove(a);
        }
        out
    };
    give_back(&free)
}

/// A pool attribute's value: `Int` for the `int` attributes, `U64` for `cuuint64_t` ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrValue {
    Int(i32),
    U64(u64),
}

/// `cudaMemPoolGetAttribute`.
pub fn get_attr(h: u64, attr: u32) -> CudaResult<AttrValue> {
    let mut p = pools();
    let pool = p.get(h)?;
    Ok(match attr {
        cudaMemPoolReuseFollowEventDependencies => AttrValue::Int(pool.reuse[0]),
        cudaMemPoolReuseAllowOpportunistic => AttrValue::Int(pool.reuse[1]),
        cudaMemPoolReuseAllowInternalDependencies => AttrValue::Int(pool.reuse[2]),
        cudaMemPoolAttrReleaseThreshold => AttrValue::U64(pool.release_threshold),
        cudaMemPoolAttrReservedMemCurrent => AttrValue::U64(pool.reserved),
        cudaMemPoolAttrReservedMemHigh => AttrValue::U64(pool.reserved_high),
        cudaMemPoolAttrUsedMemCurrent => AttrValue::U64(pool.used),
        cudaMemPoolAttrUsedMemHigh => AttrValue::U64(pool.used_high),
        // cudaMemAllocationTypePinned: device memory.
        cudaMemPoolAttrAllocationType => AttrValue::Int(1),
        cudaMemPoolAttrExportHandleTypes => AttrValue::Int(0),
        cudaMemPoolAttrLocationId => AttrValue::Int(0),
        // cudaMemLocationTypeDevice.
        cudaMemPoolAttrLocationType => AttrValue::Int(1),
        cudaMemPoolAttrMaxPoolSize => AttrValue::U64(pool.max_size),
        cudaMemPoolAttrHwDecompressEnabled => AttrValue::Int(0),
        _ => return Err(cuda::ERROR_INVALID_VALUE),
    })
}

/// Whether attribute `attr` is an `int` (else a `cuuint64_t`).
pub fn attr_is_int(attr: u32) -> bool {
    matches!(
        attr,
        cudaMemPoolReuseFollowEventDependencies
            | cudaMemPoolReuseAllowOpportunistic
            | cudaMemPoolReuseAllowInternalDependencies
            | cudaMemPoolAttrAllocationType
            | cudaMemPoolAttrExportHandleTypes
            | cudaMemPoolAttrLocationId
            | cudaMemPoolAttrLocationType
            | cudaMemPoolAttrHwDecompressEnabled
    )
}

/// `cudaMemPoolSetAttribute`: the reuse policies, the release threshold, and resetting the
/// high-water marks (only to 0, which sets them to the current value).
pub fn set_attr(h: u64, attr: u32, v: AttrValue) -> CudaResult<()> {
    let mut p = pools();
    let pool = p.get(h)?;
    match (attr, v) {
        (cudaMemPoolReuseFollowEventDependencies, AttrValue::Int(x)) => pool.reuse[0] = x,
        (cudaMemPoolReuseAllowOpportunistic, AttrValue::Int(x)) => pool.reuse[1] = x,
        (cudaMemPoolReuseAllowInternalDependencies, AttrValue::Int(x)) => pool.reuse[2] = x,
        (cudaMemPoolAttrReleaseThreshold, AttrValue::U64(x)) => pool.release_threshold = x,
        (cudaMemPoolAttrReservedMemHigh, AttrValue::U64(0)) => pool.reserved_high = pool.reserved,
        (cudaMemPoolAttrUsedMemHigh, AttrValue::U64(0)) => pool.used_high = pool.used,
        _ => return Err(cuda::ERROR_INVALID_VALUE),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_blocks_are_reused_best_fit_within_twice_the_size() {
        let mut p = Pool::new(0);
        p.cached = vec![(0x1000, 4096), (0x9000, 1024), (0x20000, 65536)];
        assert_eq!(p.take_cached(1024), Some((0x9000, 1024)));
        assert_eq!(p.take_cached(3000), Some((0x1000, 4096)));
        assert_eq!(p.take_cached(1024), None, "64 KiB is too big for 1 KiB");
    }

    #[test]
    fn trim_keeps_what_is_asked_and_never_in_use_memory() {
        let mut p = Pool::new(0);
        p.reserved = 3 * 4096;
        p.used = 4096;
        p.cached = vec![(0x1000, 4096), (0x3000, 4096)];
        assert_eq!(p.trim(4096).len(), 2);
        assert_eq!(p.reserved, 4096);
        assert!(p.cached.is_empty());
    }

    #[test]
    fn attributes_round_trip_and_current_values_are_read_only() {
        let h = create(0);
        set_attr(h, cudaMemPoolAttrReleaseThreshold, AttrValue::U64(1 << 20)).unwrap();
        assert_eq!(get_attr(h, cudaMemPoolAttrReleaseThreshold), Ok(AttrValue::U64(1 << 20)));
        set_attr(h, cudaMemPoolReuseAllowOpportunistic, AttrValue::Int(0)).unwrap();
        assert_eq!(get_attr(h, cudaMemPoolReuseAllowOpportunistic), Ok(AttrValue::Int(0)));
        assert_eq!(
            set_attr(h, cudaMemPoolAttrUsedMemCurrent, AttrValue::U64(0)),
            Err(cuda::ERROR_INVALID_VALUE)
        );
        assert_eq!(
            set_attr(h, cudaMemPoolAttrUsedMemHigh, AttrValue::U64(5)),
            Err(cuda::ERROR_INVALID_VALUE)
        );
        assert!(attr_is_int(cudaMemPoolAttrLocationType));
        assert!(!attr_is_int(cudaMemPoolAttrReservedMemHigh));
    }
}
