//! What the program told CUDA about its managed memory (`cudaMemAdvise`,
//! `cudaMemPrefetchAsync`), per page range, for `cudaMemRangeGetAttribute(s)`.
//!
//! The shadow pages make every piece of advice a no-op for where data lives (the proxy holds
//! it; the program's view is fetched on demand), but a program reads its advice back, so it
//! is recorded here: a map of page-aligned segments, each with the advice in force; pages in
//! no segment have none. The map is in the program's memory and survives a restart with it.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// Advice applies to whole pages.
const PAGE: u64 = 4096;

/// `cudaMemLocation` (type, id); type 1 device, 2 host, 3 host NUMA node, 4 current NUMA node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    pub ty: u32,
    pub id: i32,
}

pub const LOC_DEVICE: u32 = 1;
pub const LOC_HOST: u32 = 2;
pub const LOC_HOST_NUMA: u32 = 3;
pub const LOC_HOST_NUMA_CURRENT: u32 = 4;

/// The advice in force on one page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Advice {
    pub read_mostly: bool,
    pub preferred: Option<Loc>,
    /// `cudaMemAdviseSetAccessedBy` for device 0 and for the CPU.
    pub accessed_by_device: bool,
    pub accessed_by_host: bool,
    /// The last location the pages were explicitly prefetched to.
    pub prefetched: Option<Loc>,
}

/// Segment start → (end, advice); segments never overlap.
static MAP: Mutex<BTreeMap<u64, (u64, Advice)>> = Mutex::new(BTreeMap::new());

fn pages(addr: u64, len: u64) -> (u64, u64) {
    (addr / PAGE * PAGE, addr.saturating_add(len).div_ceil(PAGE).saturating_mul(PAGE))
}

/// Split the segment that straddles `at`, if any.
fn split(m: &mut BTreeMap<u64, (u64, Advice)>, at: u64) {
    if let Some((&k, &(end, a))) = m.range(..at).next_back() {
        if end > at {
            m.insert(k, (at, a));
            m.insert(at, (end, a));
        }
    }
}

/// Apply `f` to the advice of every page of `[addr, addr+len)`.
pub fn update(addr: u64, len: u64, f: impl Fn(&mut Advice)) {
    let (s, e) = pages(addr, len);
    if s >= e {
        return;
    }
    let mut m = MAP.lock().unwrap_or_else(|p| p.into_inner());
    split(&mut m, s);
    split(&mut m, e);
    // Pages without advice get a segment of their own first.
    let mut cur = s;
    let inside: Vec<(u64, u64)> = m.range(s..e).map(|(&k, &(end, _))| (k, end)).collect();
    for (k, end) in inside {
        if k > cur {
            m.insert(cur, (k, Advice::default()));
        }
        cur = end;
    }
    if cur < e {
        m.insert(cur, (e, Advice::default()));
    }
    for (_, (_, a)) in m.range_mut(s..e) {
        f(a);
    }
}

/// The distinct advice found on the pages of `[addr, addr+len)` (pages without any count as
/// the default).
pub fn query(addr: u64, len: u64) -> Vec<Advice> {
    let (s, e) = pages(addr, len.max(1));
    let mut m = MAP.lock().unwrap_or_else(|p| p.into_inner());
    split(&mut m, s);
    split(&mut m, e);
    let mut out: Vec<Advice> = Vec::new();
    let mut push = |a: Advice| {
        if !out.contains(&a) {
            out.push(a);
        }
    };
    let mut cur = s;
    for (&k, &(end, a)) in m.range(s..e) {
        if k > cur {
            push(Advice::default());
        }
        push(a);
        cur = end;
    }
    if cur < e {
        push(Advice::default());
    }
    out
}

/// A freed allocation's advice goes with it.
pub fn forget(addr: u64, len: u64) {
    let (s, e) = pages(addr, len);
    let mut m = MAP.lock().unwrap_or_else(|p| p.into_inner());
    split(&mut m, s);
    split(&mut m, e);
    let keys: Vec<u64> = m.range(s..e).map(|(&k, _)| k).collect();
    for k in keys {
        m.remove(&k);
    }
}

/// `cudaDeviceReset`: managed memory is gone.
pub fn clear() {
    MAP.lock().unwrap_or_else(|p| p.into_inner()).clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test touches the global map, at addresses no other test uses.
    #[test]
    fn advice_is_recorded_per_page_and_reported_uniform_or_mixed() {
        let base = 0x7e57_0000_0000u64;
        update(base + 4096, 8192, |a| a.read_mostly = true);
        assert_eq!(query(base + 4096, 8192), vec![Advice { read_mostly: true, ..Default::default() }]);
        // A range that also covers a page without advice is mixed.
        assert_eq!(query(base, 8192).len(), 2);
        // Unaligned ranges cover their whole pages.
        update(base + 5000, 10, |a| a.prefetched = Some(Loc { ty: LOC_DEVICE, id: 0 }));
        let q = query(base + 4096, 4096);
        assert_eq!(q, vec![Advice { read_mostly: true, prefetched: Some(Loc { ty: LOC_DEVICE, id: 0 }), ..Default::default() }]);
        assert_eq!(query(base + 4096, 8192).len(), 2);
        forget(base, 1 << 20);
        assert_eq!(query(base, 1 << 20), vec![Advice::default()]);
    }
}
