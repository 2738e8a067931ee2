//! Where device allocations go: a pure address planner over the device window.
//!
//! The `cuda` backend maps physical memory (`cuMemCreate`) at addresses this planner picks, so
//! that a restarted proxy can put every allocation back where the application remembers it.
//! Physical memory is mapped in *chunks* whose size and address are multiples of the device's
//! allocation granularity (2 MiB on current GPUs). An allocation of at least half a granule
//! gets chunks of its own; smaller ones share "small chunks" (page aligned, as on the emulated
//! device), so a program making thousands of tiny allocations does not pay a granule for each.
//!
//! The planner is deterministic: the same sequence of `alloc`/`free` calls yields the same
//! addresses, and [`Planner::place_at`] re-creates an allocation at a recorded address in any
//! order (restart), deriving its chunk from the address alone.

use std::collections::BTreeMap;

/// Alignment of every allocation: a page, more than the 256 bytes `cudaMalloc` guarantees, so
/// that the emulated device, which maps each allocation in pages of its own, can restore an
/// image taken here at the same addresses (with 256 bytes, two small allocations sharing a
/// page could not come back there: found on a GPU).
pub const ALLOC_ALIGN: u64 = 4096;

/// What kind of chunk an allocation lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkKind {
    /// Backs one allocation.
    Own,
    /// Shared by allocations smaller than half a granule.
    Small,
}

/// A physical mapping the backend must create (or may release).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub addr: u64,
    pub len: u64,
}

/// The outcome of placing an allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub addr: u64,
    /// Chunks that did not exist before and must now be mapped.
    pub new_chunks: Vec<Chunk>,
}

/// Why an allocation cannot be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("the device address window is full")]
    Full,
    #[error("{addr:#x}+{len:#x} is outside the device window or misaligned")]
    OutOfWindow { addr: u64, len: u64 },
    #[error("{addr:#x}+{len:#x} overlaps a live allocation")]
    Overlap { addr: u64, len: u64 },
    #[error("no allocation starts at {addr:#x}")]
    NotAllocated { addr: u64 },
}

#[derive(Debug, Clone)]
struct ChunkState {
    len: u64,
    kind: ChunkKind,
    /// Live allocations inside (for small chunks): start → length.
    allocs: BTreeMap<u64, u64>,
}

/// The address planner of one device window.
#[derive(Debug, Clone)]
pub struct Planner {
    base: u64,
    size: u64,
    granule: u64,
    /// Live chunks: start → state.
    chunks: BTreeMap<u64, ChunkState>,
    /// Live allocations: start → (length, chunk start).
    allocs: BTreeMap<u64, (u64, u64)>,
}

impl Planner {
    /// A planner over `[base, base+size)` with chunks of `granule` bytes (a power of two).
    pub fn new(base: u64, size: u64, granule: u64) -> Planner {
        assert!(granule.is_power_of_two(), "granularity must be a power of two");
        assert!(base.is_multiple_of(granule) && size.is_multiple_of(granule), "window must be granule-aligned");
        Planner { base, size, granule, chunks: BTreeMap::new(), allocs: BTreeMap::new() }
    }

    pub fn granule(&self) -> u64 {
        self.granule
    }

    fn is_small(&self, len: u64) -> bool {
        len < self.granule / 2
    }

    fn round(&self, len: u64) -> Option<u64> {
        len.max(1).checked_next_multiple_of(self.granule)
    }

    /// Lowest granule-aligned free range of `len` bytes (first fit keeps replay reproducible).
    fn free_range(&self, len: u64) -> Option<u64> {
        let mut cursor = self.base;
        for (&start, c) in &self.chunks {
            if start >= cursor && start - cursor >= len {
                return Some(cursor);
            }
            cursor = cursor.max(start + c.len);
        }
        (self.base + self.size - cursor >= len).then_some(cursor)
    }

    /// Place a new allocation of `len` bytes; `own` asks for chunks of its own whatever the
    /// size (pinned host memory, which is not device memory and must not share a mapping).
    pub fn alloc(&mut self, len: u64, own: bool) -> Result<Placement, PlanError> {
        if !own && self.is_small(len) {
            let need = len.max(1).next_multiple_of(ALLOC_ALIGN);
            // First fit inside an existing small chunk.
            for (&cstart, c) in &self.chunks {
                if c.kind != ChunkKind::Small {
                    continue;
                }
                if let Some(addr) = gap_in(cstart, c.len, &c.allocs, need) {
                    self.insert(addr, len, cstart);
                    return Ok(Placement { addr, new_chunks: Vec::new() });
                }
            }
            let cstart = self.free_range(self.granule).ok_or(PlanError::Full)?;
            self.chunks.insert(cstart, ChunkState { len: self.granule, kind: ChunkKind::Small, allocs: BTreeMap::new() });
            self.insert(cstart, len, cstart);
            return Ok(Placement { addr: cstart, new_chunks: vec![Chunk { addr: cstart, len: self.granule }] });
        }
        let span = self.round(len).ok_or(PlanError::Full)?;
        let addr = self.free_range(span).ok_or(PlanError::Full)?;
        self.chunks.insert(addr, ChunkState { len: span, kind: ChunkKind::Own, allocs: BTreeMap::new() });
        self.insert(addr, len, addr);
        Ok(Placement { addr, new_chunks: vec![Chunk { addr, len: span }] })
    }

    fn insert(&mut self, addr: u64, len: u64, chunk: u64) {
        self.allocs.insert(addr, (len, chunk));
        let c = self.chunks.get_mut(&chunk).expect("chunk exists");
        if c.kind == ChunkKind::Small {
            c.allocs.insert(addr, len.max(1).next_multiple_of(ALLOC_ALIGN));
        }
    }

    /// Re-create an allocation at a recorded address (restart). Its chunk follows from the
    /// address and size alone, so recorded allocations may be placed in any order.
    pub fn place_at(&mut self, addr: u64, len: u64, own: bool) -> Result<Placement, PlanError> {
        let bad = PlanError::OutOfWindow { addr, len };
        let end = addr.checked_add(len.max(1)).ok_or(bad.clone())?;
        if addr < self.base || end > self.base + self.size || !addr.is_multiple_of(ALLOC_ALIGN) {
            return Err(bad);
        }
        if !own && self.is_small(len) {
            let cstart = addr & !(self.granule - 1);
            let need = len.max(1).next_multiple_of(ALLOC_ALIGN);
            if addr + need > cstart + self.granule {
                return Err(bad);
            }
            let mut new_chunks = Vec::new();
            match self.chunks.get(&cstart) {
                Some(c) if c.kind == ChunkKind::Small => {
                    if overlaps(&c.allocs, addr, need) {
                        return Err(PlanError::Overlap { addr, len });
                    }
                }
                Some(_) => return Err(PlanError::Overlap { addr, len }),
                None => {
                    if self.chunk_overlap(cstart, self.granule) {
                        return Err(PlanError::Overlap { addr, len });
                    }
                    self.chunks.insert(cstart, ChunkState { len: self.granule, kind: ChunkKind::Small, allocs: BTreeMap::new() });
                    new_chunks.push(Chunk { addr: cstart, len: self.granule });
                }
            }
            self.insert(addr, len, cstart);
            return Ok(Placement { addr, new_chunks });
        }
        if !addr.is_multiple_of(self.granule) {
            return Err(bad);
        }
        let span = self.round(len).ok_or(bad.clone())?;
        if addr + span > self.base + self.size {
            return Err(bad);
        }
        if self.chunk_overlap(addr, span) {
            return Err(PlanError::Overlap { addr, len });
        }
        self.chunks.insert(addr, ChunkState { len: span, kind: ChunkKind::Own, allocs: BTreeMap::new() });
        self.insert(addr, len, addr);
        Ok(Placement { addr, new_chunks: vec![Chunk { addr, len: span }] })
    }

    fn chunk_overlap(&self, addr: u64, len: u64) -> bool {
        self.chunks.range(..addr + len).next_back().is_some_and(|(&s, c)| s + c.len > addr)
    }

    /// Free the allocation starting at `addr`; returns the chunk that became empty (to unmap).
    pub fn free(&mut self, addr: u64) -> Result<Option<Chunk>, PlanError> {
        let (_, cstart) = self.allocs.remove(&addr).ok_or(PlanError::NotAllocated { addr })?;
        let c = self.chunks.get_mut(&cstart).expect("chunk of a live allocation");
        c.allocs.remove(&addr);
        if c.kind == ChunkKind::Own || c.allocs.is_empty() {
            let len = c.len;
            self.chunks.remove(&cstart);
            return Ok(Some(Chunk { addr: cstart, len }));
        }
        Ok(None)
    }

    /// The allocation containing `[addr, addr+len)`: (start, length).
    pub fn find(&self, addr: u64, len: u64) -> Option<(u64, u64)> {
        let (&s, &(l, _)) = self.allocs.range(..=addr).next_back()?;
        let end = addr.checked_add(len)?;
        (end <= s + l.max(1)).then_some((s, l))
    }

    /// Whether `addr` lies in the planner's window.
    pub fn in_window(&self, addr: u64) -> bool {
        addr >= self.base && addr < self.base + self.size
    }

    /// Every live allocation (start, length), in address order.
    pub fn allocations(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.allocs.iter().map(|(&a, &(l, _))| (a, l))
    }

    /// Every live chunk, in address order.
    pub fn chunks(&self) -> impl Iterator<Item = Chunk> + '_ {
        self.chunks.iter().map(|(&addr, c)| Chunk { addr, len: c.len })
    }
}

fn overlaps(allocs: &BTreeMap<u64, u64>, addr: u64, len: u64) -> bool {
    allocs.range(..addr + len).next_back().is_some_and(|(&s, &l)| s + l > addr)
}

/// Lowest `ALLOC_ALIGN`-aligned gap of `need` bytes in a small chunk.
fn gap_in(cstart: u64, clen: u64, allocs: &BTreeMap<u64, u64>, need: u64) -> Option<u64> {
    let mut cursor = cstart;
    for (&s, &l) in allocs {
        if s - cursor >= need {
            return Some(cursor);
        }
        cursor = s + l;
    }
    (cstart + clen - cursor >= need).then_some(cursor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const G: u64 = 2 << 20;
    const BASE: u64 = 0x2000_0000_0000;

    fn planner() -> Planner {
        Planner::new(BASE, 1 << 36, G)
    }

    #[test]
    fn large_allocation_gets_its_own_granule_rounded_chunk() {
        let mut p = planner();
        let a = p.alloc(3 << 20, false).unwrap();
        assert_eq!(a.addr, BASE);
        assert_eq!(a.new_chunks, vec![Chunk { addr: BASE, len: 4 << 20 }]);
        let b = p.alloc(G, false).unwrap();
        assert_eq!(b.addr, BASE + (4 << 20));
    }

    #[test]
    fn small_allocations_share_a_chunk_at_page_alignment() {
        let mut p = planner();
        let a = p.alloc(100, false).unwrap();
        let b = p.alloc(300, false).unwrap();
        assert_eq!(a.new_chunks.len(), 1);
        assert!(b.new_chunks.is_empty());
        assert_eq!(b.addr, a.addr + ALLOC_ALIGN);
        assert_eq!(p.find(b.addr + 10, 4), Some((b.addr, 300)));
    }

    #[test]
    fn freeing_the_last_small_allocation_releases_its_chunk() {
        let mut p = planner();
        let a = p.alloc(100, false).unwrap().addr;
        let b = p.alloc(100, false).unwrap().addr;
        assert_eq!(p.free(a).unwrap(), None);
        assert_eq!(p.free(b).unwrap(), Some(Chunk { addr: BASE, len: G }));
        assert_eq!(p.free(b), Err(PlanError::NotAllocated { addr: b }));
    }

    #[test]
    fn freed_range_is_reused_first_fit() {
        let mut p = planner();
        let a = p.alloc(G, false).unwrap().addr;
        let _b = p.alloc(G, false).unwrap().addr;
        p.free(a).unwrap();
        assert_eq!(p.alloc(G / 2, false).unwrap().addr, a);
    }

    #[test]
    fn window_exhaustion_is_full_not_a_panic() {
        let mut p = Planner::new(BASE, 2 * G, G);
        p.alloc(2 * G, false).unwrap();
        assert_eq!(p.alloc(1, false), Err(PlanError::Full));
    }

    #[test]
    fn place_at_refuses_overlap_and_misalignment() {
        let mut p = planner();
        let a = p.alloc(G, false).unwrap().addr;
        assert!(matches!(p.place_at(a, G, false), Err(PlanError::Overlap { .. })));
        assert!(matches!(p.place_at(BASE + G + 4096, G, false), Err(PlanError::OutOfWindow { .. })));
        assert!(matches!(p.place_at(0x1000, 64, false), Err(PlanError::OutOfWindow { .. })));
        assert!(matches!(p.place_at(a + ALLOC_ALIGN, 64, false), Err(PlanError::Overlap { .. })));
    }

    #[test]
    fn own_chunk_is_forced_for_small_pinned_allocations() {
        let mut p = planner();
        let a = p.alloc(100, true).unwrap();
        assert_eq!(a.new_chunks, vec![Chunk { addr: BASE, len: G }]);
        let b = p.alloc(100, false).unwrap();
        assert_eq!(b.addr, BASE + G, "a small device allocation must not share the pinned chunk");
        let mut q = planner();
        assert_eq!(q.place_at(a.addr, 100, true).unwrap().new_chunks, a.new_chunks);
    }

    #[test]
    fn find_outside_any_allocation_is_none() {
        let mut p = planner();
        let a = p.alloc(1000, false).unwrap().addr;
        assert_eq!(p.find(a + 1000, 1), None);
        assert_eq!(p.find(a + 990, 20), None);
        assert_eq!(p.find(a - 1, 1), None);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Alloc(u64),
        Free(usize),
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        prop::collection::vec(
            prop_oneof![
                (1u64..64 << 10).prop_map(Op::Alloc),
                (1u64..8 << 20).prop_map(Op::Alloc),
                (0usize..64).prop_map(Op::Free),
            ],
            1..80,
        )
    }

    fn run(ops: &[Op]) -> (Planner, Vec<(u64, u64)>) {
        let mut p = planner();
        let mut live: Vec<(u64, u64)> = Vec::new();
        for op in ops {
            match *op {
                Op::Alloc(len) => live.push((p.alloc(len, false).unwrap().addr, len)),
                Op::Free(i) if !live.is_empty() => {
                    let (a, _) = live.remove(i % live.len());
                    p.free(a).unwrap();
                }
                Op::Free(_) => {}
            }
        }
        (p, live)
    }

    proptest! {
        #[test]
        fn live_allocations_never_overlap_and_sit_inside_mapped_chunks(ops in ops()) {
            let (p, mut live) = run(&ops);
            live.sort();
            for w in live.windows(2) {
                prop_assert!(w[0].0 + w[0].1 <= w[1].0, "{:x?} overlaps {:x?}", w[0], w[1]);
            }
            let chunks: Vec<Chunk> = p.chunks().collect();
            for &(a, l) in &live {
                prop_assert_eq!(a % ALLOC_ALIGN, 0);
                prop_assert!(chunks.iter().any(|c| c.addr <= a && a + l <= c.addr + c.len));
            }
            for c in &chunks {
                prop_assert_eq!(c.addr % G, 0);
                prop_assert_eq!(c.len % G, 0);
            }
        }

        #[test]
        fn same_calls_give_same_addresses(ops in ops()) {
            let (_, a) = run(&ops);
            let (_, b) = run(&ops);
            prop_assert_eq!(a, b);
        }

        #[test]
        fn replay_at_recorded_addresses_in_any_order_rebuilds_the_same_chunks(ops in ops(), rev in any::<bool>()) {
            let (p, mut live) = run(&ops);
            if rev {
                live.reverse();
            }
            let mut q = planner();
            for &(a, l) in &live {
                prop_assert_eq!(q.place_at(a, l, false).unwrap().addr, a);
            }
            let mut want: Vec<(u64, u64)> = p.allocations().collect();
            let mut got: Vec<(u64, u64)> = q.allocations().collect();
            want.sort();
            got.sort();
            prop_assert_eq!(got, want);
            prop_assert_eq!(q.chunks().collect::<Vec<_>>(), p.chunks().collect::<Vec<_>>());
        }
    }
}
