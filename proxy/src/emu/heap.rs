//! The device heap of the emulated device: what kernels get from device-side `malloc`/`free`
//! (and so C++ `new`/`delete` in device code). A GPU's heap is 8 MiB by default
//! (`cudaLimitMallocHeapSize`); here it is one device allocation of that size, made at the
//! first device `malloc`, and managed in band: its bookkeeping lives in its own bytes, so a
//! checkpoint saves it with the data (the heap is an allocation like any other) and a restart
//! brings back every block the program still holds, at its address.
//!
//! Layout: a 16-byte heap header (`MAGIC`, length), then blocks, each a 16-byte header
//! (size of the block including the header, with bit 0 set while in use; `BLOCK_MAGIC`)
//! followed by its bytes (16-aligned). `malloc` is first fit, splitting, and merges free
//! neighbours as it walks; `free` checks the block header (a pointer that is not a block is
//! ignored, as a GPU's heap does not check either but must not corrupt ours).
//!
//! After a restart the proxy does not know which allocation was the heap: the next device
//! `malloc` makes a new one, and `free` finds a block's heap by the header at the start of
//! the allocation the pointer lies in, so blocks of the old heap are freed where they are.
//!
//! # Safety
//! Device memory is mapped at its device address in this process (`Vram`): a heap's bytes are
//! read and written through raw pointers to `base..base+len` of a live allocation, with the
//! heap lock held (kernels do not touch headers unless they write out of bounds, which a GPU's
//! heap does not survive either).
#![allow(unsafe_code)]

use std::sync::Mutex;

use crum_wire::AllocKind;

use super::memory::Vram;

/// Bytes of the heap, as `cudaDeviceGetLimit(cudaLimitMallocHeapSize)` reports.
pub const HEAP_BYTES: u64 = 8 << 20;
const MAGIC: u64 = u64::from_le_bytes(*b"CRUMHEAP");
const BLOCK_MAGIC: u64 = u64::from_le_bytes(*b"crumblck");
const HDR: u64 = 16;

/// The heap of this proxy (its base once made).
#[derive(Default)]
pub struct Heap {
    base: Mutex<Option<u64>>,
    /// `cudaLimitMallocHeapSize` when the program set it (0: [`HEAP_BYTES`]).
    limit: std::sync::atomic::AtomicU64,
}

fn rd(addr: u64) -> u64 {
    // SAFETY: see the module docs (an address inside a live heap allocation, 8-aligned).
    unsafe { (addr as *const u64).read_volatile() }
}

fn wr(addr: u64, v: u64) {
    // SAFETY: as in `rd`.
    unsafe { (addr as *mut u64).write_volatile(v) }
}

impl Heap {
    /// Device `malloc(size)`: the address of a fresh 16-aligned block, or None (NULL for the
    /// kernel) when the heap is full or cannot be made.
    pub fn malloc(&self, vram: &Vram, size: u64) -> Option<u64> {
        let need = size.checked_add(15)? / 16 * 16 + HDR;
        let mut g = self.base.lock().unwrap_or_else(|p| p.into_inner());
        let base = match *g {
            Some(b) if vram.lookup(b).is_some_and(|r| r.base == b) && rd(b) == MAGIC => b,
            _ => {
                let len = match self.limit.load(std::sync::atomic::Ordering::Relaxed) {
                    0 => HEAP_BYTES,
                    n => n.div_ceil(16) * 16,
                };
                let (b, _) = vram.alloc(len, AllocKind::Device).ok()?;
                wr(b, MAGIC);
                wr(b + 8, len);
                wr(b + HDR, (len - HDR) & !1);
                wr(b + HDR + 8, BLOCK_MAGIC);
                *g = Some(b);
                b
            }
        };
        let end = base + rd(base + 8);
        let mut at = base + HDR;
        while at < end {
            let word = rd(at);
            let len = word & !1;
            if len < HDR || at + len > end || rd(at + 8) != BLOCK_MAGIC {
                return None; // damaged (a kernel wrote out of bounds): no more blocks
            }
            if word & 1 == 0 {
                // Merge the free blocks that follow.
                let mut len = len;
                while at + len < end && rd(at + len) & 1 == 0 && rd(at + len + 8) == BLOCK_MAGIC {
                    len += rd(at + len);
                }
                wr(at, len);
                if len >= need {
                    if len - need >= 2 * HDR {
                        wr(at + need, len - need);
                        wr(at + need + 8, BLOCK_MAGIC);
                        wr(at, need | 1);
                    } else {
                        wr(at, len | 1);
                    }
                    return Some(at + HDR);
                }
            }
            at += rd(at) & !1;
        }
        None
    }

    /// `cudaDeviceSetLimit(cudaLimitMallocHeapSize)`: the size of the heap to make; once it
    /// is made (a kernel allocated), `cudaErrorInvalidValue`, as CUDA answers.
    pub fn set_limit(&self, bytes: u64) -> Result<(), u32> {
        let g = self.base.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_some() {
            return Err(crum_wire::cuda::ERROR_INVALID_VALUE);
        }
        if bytes < 4 * HDR {
            return Err(crum_wire::cuda::ERROR_INVALID_VALUE);
        }
        self.limit.store(bytes, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Forgets the heap (its allocation was freed by a device reset).
    pub fn reset(&self) {
        *self.base.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Device `free(p)` of a block of this heap or of an earlier one (before a restart).
    pub fn free(&self, vram: &Vram, p: u64) {
        let _g = self.base.lock().unwrap_or_else(|e| e.into_inner());
        let Some(r) = vram.lookup(p) else { return };
        if r.len < 2 * HDR || rd(r.base) != MAGIC || p < r.base + 2 * HDR || !p.is_multiple_of(16) {
            return;
        }
        let at = p - HDR;
        let word = rd(at);
        if word & 1 == 1 && rd(at + 8) == BLOCK_MAGIC && at + (word & !1) <= r.base + rd(r.base + 8) {
            wr(at, word & !1);
        }
    }
}
