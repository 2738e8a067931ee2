//! The divergence analysis: may a thread leave a kernel while other threads of its block
//! still reach a barrier or warp operation?

use std::collections::{HashMap, HashSet};

use super::facts::FuncFacts;
use super::text::{identifiers, is_cta_barrier, is_warp_collective, parse_int, reg_tokens, special_base, split_operands, Body, Stmt, SPECIAL_VARYING};
/// How far a value may differ between the threads of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    /// One value per block.
    Uniform,
    /// One value per warp, provided the block's rows are whole warps or it has one row
    /// (then `%tid.x / 32` is the warp index and `%tid.y`, `%tid.z` are the same across a
    /// warp): [`PreemptibleKernel::warp_rows`].
    Warp,
    /// Exactly `%tid.x`: a division by a multiple of 32 gives a [`Class::Warp`] value.
    Lane,
    /// May differ between any two threads.
    Varying,
}

impl Class {
    /// The class of a register with two definitions of these classes.
    pub(super) fn merge(self, o: Class) -> Class {
        match (self, o) {
            (a, b) if a == b => a,
            (Class::Uniform, Class::Warp) | (Class::Warp, Class::Uniform) => Class::Warp,
            _ => Class::Varying,
        }
    }
    /// The class of a value computed from operands of these classes (Lane: see `classify`).
    pub(super) fn max(self, o: Class) -> Class {
        match (self, o) {
            (Class::Uniform, b) => b,
            (a, Class::Uniform) => a,
            (Class::Warp, Class::Warp) => Class::Warp,
            _ => Class::Varying,
        }
    }
}

/// Which branches of a kernel may go different ways for the threads of one block, and
/// whether a thread can leave while others still reach a collective instruction.
///
/// Flow-insensitive taint over registers: a register is *varying* when an instruction that
/// writes it reads a varying register or special register (`%tid`, `%laneid`, clocks), is a
/// load (other than of a kernel parameter), an atomic, a warp operation, a call's result, a
/// texture or surface read, is guarded by a varying predicate, or lies in the region
/// controlled by a varying branch (from the branch to its immediate post-dominator: the
/// values merged there depend on the path). Iterated to a fixed point. Everything else
/// (kernel parameters, `%ntid`, `%ctaid`, constants and what is computed from them) has one
/// value per block. Between the two, [`Class::Warp`]: `%tid.x` shifted right by 5 or more,
/// divided by or masked to a multiple of 32, or compared with one (`tid < 64`), and
/// `%tid.y`/`%tid.z`, are the same across a warp when the block's rows are whole warps; a
/// branch on such a value may separate warps, not the lanes of one, so only barriers of the
/// whole block count after it, not warp operations.
pub(super) struct Divergence<'a> {
    pub(super) body: &'a Body,
    pub(super) n: usize,
    pub(super) succ: Vec<Vec<usize>>,
    /// Barriers and warp operations (and calls of functions with any).
    pub(super) collective: Vec<bool>,
    /// Barriers of the whole block (and calls of functions with any collective).
    pub(super) block_collective: Vec<bool>,
    /// Immediate post-dominator of each instruction (None: it cannot reach the exit).
    pub(super) ipdom: Vec<Option<usize>>,
    pub(super) class: HashMap<String, Class>,
}

impl<'a> Divergence<'a> {
    pub(super) fn new(body: &'a Body, facts: &FuncFacts, params: &HashSet<String>) -> Divergence<'a> {
        let n = body.insts.len();
        let mut succ = vec![Vec::new(); n];
        let (mut collective, mut block_collective) = (vec![false; n], vec![false; n]);
        for (i, sv) in succ.iter_mut().enumerate() {
            let s = body.inst(i);
            let next = i + 1; // n is the virtual exit
            let guarded = s.guard.is_some();
            match s.base() {
                "bra" => {
                    let target = identifiers(&s.operands).next().and_then(|l| body.labels.get(l)).copied().unwrap_or(n);
                    sv.push(target);
                    if guarded {
                        sv.push(next);
                    }
                }
                "ret" | "exit" => {
                    sv.push(n);
                    if guarded {
                        sv.push(next);
                    }
                }
                "trap" if !guarded => {}
                _ => sv.push(next),
            }
            sv.dedup();
            let calls = s.base() == "call" && identifiers(&s.operands).any(|w| facts.0.get(w).is_some_and(|x| x.collective));
            block_collective[i] = (is_cta_barrier(s) && !s.op.starts_with("bar.warp")) || calls;
            collective[i] = block_collective[i] || is_warp_collective(s) || is_cta_barrier(s);
        }
        let mut d = Divergence { body, n, succ, collective, block_collective, ipdom: Vec::new(), class: HashMap::new() };
        d.ipdom = d.immediate_post_dominators();
        d.taint(params);
        d
    }

    pub(super) fn guard_reg(s: &Stmt) -> Option<&str> {
        s.guard.as_deref().map(|g| g.trim_start_matches('@').trim_start_matches('!'))
    }

    pub(super) fn intrinsically_varying(s: &Stmt, params: &HashSet<String>) -> bool {
        match s.base() {
            "ld" if s.op.starts_with("ld.param") => {
                // A kernel parameter is the same for every thread; a call's result is not.
                let addr = s.operands.split('[').nth(1).unwrap_or("");
                !identifiers(addr).next().is_some_and(|w| params.contains(w))
            }
            "ld" | "ldu" | "atom" | "tex" | "tld4" | "suld" | "mbarrier" | "cp" | "bar" | "barrier" | "call" => true,
            _ => is_warp_collective(s),
        }
    }

    /// Registers an instruction writes: those of its first operand, for instructions that
    /// have a destination.
    pub(super) fn dests(s: &Stmt) -> Vec<&str> {
        if matches!(s.base(), "st" | "red" | "sust" | "bra" | "call" | "ret" | "exit" | "trap" | "membar" | "fence" | "prefetch" | "prefetchu" | "bar" | "barrier" | "pmevent" | "nanosleep")
            && !(s.op.starts_with("bar.red") || s.op.starts_with("barrier.red"))
        {
            return Vec::new();
        }
        let first = split_operands(&s.operands).into_iter().next().unwrap_or("");
        if first.starts_with('[') {
            return Vec::new();
        }
        reg_tokens(first).into_iter().map(|(a, e)| &first[a..e]).filter(|t| special_base(t).is_none()).collect()
    }

    pub(super) fn reg_class(&self, tok: &str) -> Class {
        match special_base(tok) {
            Some("tid") if tok == "%tid.x" => Class::Lane,
            Some("tid") => Class::Warp,
            Some(b) if SPECIAL_VARYING.contains(&b) => Class::Varying,
            Some(_) => Class::Uniform,
            None => self.class.get(tok).copied().unwrap_or(Class::Uniform),
        }
    }

    pub(super) fn guard_class(&self, s: &Stmt) -> Class {
        match Self::guard_reg(s).map(|g| self.reg_class(g)) {
            None | Some(Class::Uniform) => Class::Uniform,
            Some(Class::Warp) => Class::Warp,
            Some(_) => Class::Varying,
        }
    }

    /// The class of what `s` computes from its operands (not counting guard and region).
    pub(super) fn classify(&self, s: &Stmt, params: &HashSet<String>) -> Class {
        if Self::intrinsically_varying(s, params) {
            return Class::Varying;
        }
        let ops = split_operands(&s.operands);
        let srcs = ops.get(1..).unwrap_or(&[]);
        let classes: Vec<Class> = srcs.iter().map(|o| reg_tokens(o).into_iter().fold(Class::Uniform, |c, (a, e)| self.lane_or_max(c, self.reg_class(&o[a..e])))).collect();
        if !classes.contains(&Class::Lane) {
            return classes.into_iter().fold(Class::Uniform, Class::max);
        }
        // Only `%tid.x` itself, or one operation of it with a constant that is the same
        // across every 32 consecutive values, keeps a per-warp structure.
        let lane_then_const = |k: usize| classes.len() == 2 && classes[k] == Class::Lane && parse_int(srcs[1 - k]).is_some();
        let c = |k: usize| parse_int(srcs[1 - k]).unwrap_or(1);
        let width32 = s.op.ends_with(".u32") || s.op.ends_with(".s32") || s.op.ends_with(".b32");
        match s.base() {
            "mov" | "cvt" if classes.len() == 1 && classes[0] == Class::Lane => Class::Lane,
            "shr" if width32 && lane_then_const(0) && c(0) >= 5 => Class::Warp,
            "div" if width32 && lane_then_const(0) && c(0) > 0 && c(0) % 32 == 0 => Class::Warp,
            "and" if width32 && (0..2).any(|k| lane_then_const(k) && c(k) & 31 == 0) => Class::Warp,
            "setp" if width32 && lane_then_const(0) => {
                let cmp = s.op.split('.').nth(1).unwrap_or("");
                match cmp {
                    "lt" | "ge" | "lo" | "hs" if c(0) % 32 == 0 => Class::Warp,
                    "le" | "gt" | "ls" | "hi" if c(0) % 32 == 31 => Class::Warp,
                    _ => Class::Varying,
                }
            }
            _ => Class::Varying,
        }
    }

    /// Combine the classes of the registers of one operand (a Lane register alone stays Lane).
    pub(super) fn lane_or_max(&self, acc: Class, c: Class) -> Class {
        match (acc, c) {
            (Class::Uniform, c) => c,
            (a, Class::Uniform) => a,
            (a, b) => a.max(b),
        }
    }

    pub(super) fn taint(&mut self, params: &HashSet<String>) {
        let n = self.n;
        let mut in_region = vec![Class::Uniform; n];
        let mut branch_done = vec![Class::Uniform; n];
        loop {
            let mut changed = false;
            for i in 0..n {
                let s = self.body.inst(i);
                let guard = self.guard_class(s);
                let c = match self.classify(s, params) {
                    Class::Lane if guard == Class::Uniform && in_region[i] == Class::Uniform => Class::Lane,
                    c => c.max(guard).max(in_region[i]),
                };
                for d in Self::dests(s) {
                    let new = self.class.get(d).map_or(c, |&old| old.merge(c));
                    if self.class.get(d) != Some(&new) {
                        self.class.insert(d.to_string(), new);
                        changed = true;
                    }
                }
                if s.base() == "bra" && guard != Class::Uniform && branch_done[i] != guard.max(branch_done[i]) {
                    branch_done[i] = guard.max(branch_done[i]);
                    for r in self.region(i, self.ipdom[i]) {
                        let c = in_region[r].max(guard);
                        changed |= c != in_region[r];
                        in_region[r] = c;
                    }
                }
            }
            if !changed {
                break;
            }
        }
    }

    /// Instructions reachable from `i`'s successors before `stop` (its immediate
    /// post-dominator; None: everything reachable).
    pub(super) fn region(&self, i: usize, stop: Option<usize>) -> Vec<usize> {
        let mut seen = vec![false; self.n + 1];
        let mut stack: Vec<usize> = self.succ[i].clone();
        let mut out = Vec::new();
        while let Some(x) = stack.pop() {
            if x >= self.n || Some(x) == stop || seen[x] {
                continue;
            }
            seen[x] = true;
            out.push(x);
            stack.extend(self.succ[x].iter().copied());
        }
        out
    }

    /// Immediate post-dominator of each instruction (None when it cannot reach the exit).
    /// Iterative data flow over bitsets of instructions (kernels have at most a few
    /// thousand).
    pub(super) fn immediate_post_dominators(&self) -> Vec<Option<usize>> {
        let n = self.n;
        let words = (n + 1).div_ceil(64);
        let full = vec![u64::MAX; words];
        let mut pdom: Vec<Vec<u64>> = vec![full; n + 1];
        pdom[n] = vec![0; words];
        pdom[n][n / 64] |= 1 << (n % 64);
        loop {
            let mut changed = false;
            for i in (0..n).rev() {
                let mut acc = if self.succ[i].is_empty() { vec![0; words] } else { vec![u64::MAX; words] };
                for &s in &self.succ[i] {
                    for (a, b) in acc.iter_mut().zip(&pdom[s]) {
                        *a &= b;
                    }
                }
                acc[i / 64] |= 1 << (i % 64);
                if acc != pdom[i] {
                    pdom[i] = acc;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        // The immediate post-dominator is the strict post-dominator with the most
        // post-dominators of its own (they are totally ordered).
        let count: Vec<usize> = pdom.iter().map(|v| v.iter().map(|w| w.count_ones() as usize).sum()).collect();
        (0..n)
            .map(|i| {
                if count[i] > n {
                    return None; // never reaches the exit: still the full set
                }
                (0..=n).filter(|&d| d != i && pdom[i][d / 64] >> (d % 64) & 1 == 1).find(|&d| count[d] == count[i] - 1)
            })
            .collect()
    }

    /// Whether a thread can leave while another of its block still reaches a collective
    /// instruction: `Err(line)` of the first branch or guarded `ret`/`exit` where that can
    /// happen; `Ok(true)` when the answer relies on [`Class::Warp`] (a branch on a per-warp
    /// value that warp operations, but no barrier, follow).
    pub(super) fn exit_before_collective(&self) -> Result<bool, usize> {
        let all = self.splits(&self.collective);
        let block = self.splits(&self.block_collective);
        let mut warp_rows = false;
        for i in 0..self.n {
            let s = self.body.inst(i);
            match self.guard_class(s) {
                Class::Uniform => {}
                Class::Warp if !block[i] => warp_rows |= all[i],
                _ if all[i] => return Err(s.line),
                _ => {}
            }
        }
        Ok(warp_rows)
    }

    /// For each instruction with two successors: whether, if threads went different ways
    /// there, one could leave without passing a `coll` instruction while another reaches
    /// one.
    ///
    /// For a branch with an immediate post-dominator `p` (other than the exit) every thread
    /// passes `p`; a thread that leaves does so after `p`, where the later branches decide
    /// (and are checked themselves). So the branch splits its threads only when one path
    /// reaches a collective before `p` and another reaches `p` without one and can then
    /// leave without one. Without such a `p`, any path counts.
    pub(super) fn splits(&self, coll: &[bool]) -> Vec<bool> {
        let n = self.n;
        // reach[i]: a collective is reachable from i; free[i]: the exit is reachable from i
        // without passing one.
        let (mut reach, mut free) = (vec![false; n + 1], vec![false; n + 1]);
        free[n] = true;
        fixed_point(n, |i| {
            let r = coll[i] || self.succ[i].iter().any(|&s| reach[s]);
            let f = !coll[i] && self.succ[i].iter().any(|&s| free[s]);
            let changed = r != reach[i] || f != free[i];
            reach[i] = r;
            free[i] = f;
            changed
        });
        (0..n)
            .map(|i| {
                let ss = &self.succ[i];
                if ss.len() < 2 {
                    return false;
                }
                match self.ipdom[i].filter(|&p| p < n && self.body.inst(i).base() == "bra") {
                    None => ss.iter().any(|&a| free[a] && ss.iter().any(|&b| b != a && reach[b])),
                    Some(p) => {
                        // The same, within the region up to p.
                        let region: HashSet<usize> = self.region(i, Some(p)).into_iter().collect();
                        let (mut rr, mut fr) = (vec![false; n + 1], vec![false; n + 1]);
                        fr[p] = free[p];
                        fixed_point(n, |x| {
                            if !region.contains(&x) {
                                return false;
                            }
                            let r = coll[x] || self.succ[x].iter().any(|&y| y != p && rr[y]);
                            let f = !coll[x] && self.succ[x].iter().any(|&y| fr[y]);
                            let changed = r != rr[x] || f != fr[x];
                            rr[x] = r;
                            fr[x] = f;
                            changed
                        });
                        ss.iter().any(|&a| fr[a] && ss.iter().any(|&b| b != a && b != p && rr[b]))
                    }
                }
            })
            .collect()
    }
}

/// Run `step` over `n-1 ..= 0` until no call reports a change.
pub(super) fn fixed_point(n: usize, mut step: impl FnMut(usize) -> bool) {
    loop {
        let mut changed = false;
        for i in (0..n).rev() {
            changed |= step(i);
        }
        if !changed {
            break;
        }
    }
}
