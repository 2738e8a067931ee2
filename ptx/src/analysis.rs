//! What a kernel does to global memory, as functions of its parameters: the basis of the
//! idempotence test a checkpoint uses to decide whether a running kernel may be flushed and
//! run again from its start (issue 16, seed `idempotence-preemptive-kernel-scheduling.txt`).
//!
//! The analysis is flow-insensitive taint tracking over the kernel's instructions: every
//! register carries the set of *origins* its value may derive from — a kernel parameter
//! (`ld.param` of the packed block), the address of a module variable, or a value loaded from
//! memory — joined through every arithmetic, move, conversion and select until nothing
//! changes. Each global (or generic) memory access then reads or writes the targets its
//! address may derive from: [`Target::Param`], [`Target::Global`], or [`Target::Unknown`] (an
//! address loaded from memory, or computed from no pointer at all). Calls to device functions,
//! `malloc`/`free`, surfaces and textures make the summary less precise, never wrong: they
//! count as unknown.
//!
//! Per launch ([`idempotent_launch`]), pointer parameters are mapped to the allocations they
//! point into (two parameters into one allocation alias), and the launch is idempotent when no
//! allocation is both read and written, there are no atomics, and nothing unknown is written
//! (nor read while anything is written).

use std::collections::BTreeSet;

use crate::api::{KernelInfo, Module};
use crate::ir::{Base, CallTarget, Extern, Op, Opd, Space};

/// Where an access may land.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    /// Memory reached from kernel parameter `i` (its index in [`KernelInfo::params`]).
    Param(u32),
    /// A module variable, by name.
    Global(String),
    /// Anything (an address loaded from memory, or not derived from a pointer).
    Unknown,
}

/// The global-memory behaviour of one kernel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Accesses {
    pub reads: BTreeSet<Target>,
    pub writes: BTreeSet<Target>,
    /// Atomic or reduction operations on global memory.
    pub atomics: bool,
    /// Calls a device function (not analysed: its effects are unknown).
    pub calls: bool,
}

/// Origins of a register's value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Origin {
    params: BTreeSet<u32>,
    globals: BTreeSet<u32>,
    loaded: bool,
}

impl Origin {
    fn join(&mut self, o: &Origin) -> bool {
        let before = (self.params.len(), self.globals.len(), self.loaded);
        self.params.extend(o.params.iter().copied());
        self.globals.extend(o.globals.iter().copied());
        self.loaded |= o.loaded;
        before != (self.params.len(), self.globals.len(), self.loaded)
    }
}

impl Module {
    /// The global-memory accesses of kernel `name`, or None if there is no such kernel.
    pub fn kernel_accesses(&self, name: &str) -> Option<Accesses> {
        let prog = &self.prog;
        let ki = prog.kernels.iter().position(|k| k.name == name)?;
        let info = &prog.kernels[ki];
        let fi = prog.kernel_funcs[ki] as usize;
        let f = &prog.funcs[fi];
        // The function's code runs from its entry to the next function's entry.
        let end = prog
            .funcs
            .iter()
            .map(|g| g.entry)
            .filter(|&e| e > f.entry)
            .min()
            .unwrap_or(prog.code.len() as u32);
        let code = &prog.code[f.entry as usize..end as usize];
        let mut regs = vec![Origin::default(); f.nregs as usize];
        let param_of = |off: i64| -> Option<u32> {
            info.params
                .iter()
                .position(|p| off >= p.offset as i64 && off < (p.offset + p.size) as i64)
                .map(|i| i as u32)
        };
        fn of(regs: &[Origin], o: &Opd) -> Origin {
            match o {
                Opd::Reg(r) | Opd::NotReg(r) => regs.get(*r as usize).cloned().unwrap_or_default(),
                Opd::GlobalSym(g) => Origin { globals: [*g].into(), ..Default::default() },
                Opd::Addr(Base::Reg(r), _) => regs.get(*r as usize).cloned().unwrap_or_default(),
                Opd::Addr(Base::Global(g), _) => Origin { globals: [*g].into(), ..Default::default() },
                Opd::Vec(v) => {
                    let mut o = Origin::default();
                    for x in v {
                        o.join(&of(regs, x));
                    }
                    o
                }
                _ => Origin::default(),
            }
        }
        fn dests(o: &Opd, out: &mut Vec<u32>) {
            match o {
                Opd::Reg(r) => out.push(*r),
                Opd::Vec(v) => v.iter().for_each(|x| dests(x, out)),
                _ => {}
            }
        }
        // Taint to a fixpoint.
        loop {
            let mut changed = false;
            for i in code {
                let mut ds = Vec::new();
                dests(&i.d, &mut ds);
                dests(&i.d2, &mut ds);
                if ds.is_empty() {
                    continue;
                }
                let src = match i.op {
                    Op::Ld if i.m.space == Space::Param => match &i.a {
                        Opd::Addr(Base::None, off) => match param_of(*off) {
                            Some(p) => Origin { params: [p].into(), ..Default::default() },
                            None => Origin { loaded: true, ..Default::default() },
                        },
                        _ => Origin { loaded: true, ..Default::default() },
                    },
                    Op::Ld | Op::Atom | Op::Tex | Op::Suld | Op::Shfl | Op::Call => {
                        Origin { loaded: true, ..Default::default() }
                    }
                    _ => {
                        let mut o = Origin::default();
                        for x in [&i.a, &i.b, &i.c, &i.e] {
                            o.join(&of(&regs, x));
                        }
                        o
                    }
                };
                for d in ds {
                    if let Some(r) = regs.get_mut(d as usize) {
                        changed |= r.join(&src);
                    }
                }
            }
            if !changed {
                break;
            }
        }
        let targets = |o: &Origin| -> BTreeSet<Target> {
            let mut t: BTreeSet<Target> = o.params.iter().map(|&p| Target::Param(p)).collect();
            t.extend(o.globals.iter().map(|&g| Target::Global(prog.symbols.get(g as usize).cloned().unwrap_or_default())));
            if o.loaded || t.is_empty() {
                t.insert(Target::Unknown);
            }
            t
        };
        let global = |s: Space| matches!(s, Space::Global | Space::Generic);
        let mut acc = Accesses::default();
        for i in code {
            match i.op {
                Op::Ld if global(i.m.space) => acc.reads.extend(targets(&of(&regs, &i.a))),
                Op::St if global(i.m.space) => acc.writes.extend(targets(&of(&regs, &i.a))),
                Op::CpAsync => acc.reads.extend(targets(&of(&regs, &i.a))),
                Op::Atom | Op::Red if global(i.m.space) => {
                    acc.atomics = true;
                    let t = targets(&of(&regs, &i.a));
                    acc.reads.extend(t.iter().cloned());
                    acc.writes.extend(t);
                }
                Op::Tex | Op::Suld => {
                    acc.reads.insert(Target::Unknown);
                }
                Op::Sust => {
                    acc.writes.insert(Target::Unknown);
                }
                Op::Call => match prog.calls.get(i.aux as usize).map(|c| c.target) {
                    Some(CallTarget::Extern(Extern::Vprintf | Extern::AssertFail)) => {}
                    Some(CallTarget::Extern(Extern::Malloc | Extern::Free | Extern::GraphSetConditional)) => {
                        acc.writes.insert(Target::Unknown);
                    }
                    _ => acc.calls = true,
                },
                _ => {}
            }
        }
        Some(acc)
    }
}

/// Whether running this launch again from its start gives the same memory as running it once
/// (`Ok`), or why not. `params` is the packed parameter block, `info` the kernel's layout,
/// `allocation` the base of the allocation an address lies in (None: not device memory),
/// `symbol` the address of a module variable.
pub fn idempotent_launch(
    acc: &Accesses,
    info: &KernelInfo,
    params: &[u8],
    allocation: &dyn Fn(u64) -> Option<u64>,
    symbol: &dyn Fn(&str) -> Option<u64>,
) -> Result<(), String> {
    if acc.atomics {
        return Err("it uses atomic operations on global memory".into());
    }
    if acc.calls {
        return Err("it calls a device function (not analysed)".into());
    }
    // Each target → the allocation it lands in (None: unknown).
    let place = |t: &Target| -> Option<u64> {
        match t {
            Target::Param(i) => {
                let p = info.params.get(*i as usize)?;
                if p.size != 8 {
                    return None;
                }
                let at = p.offset as usize;
                let v = u64::from_le_bytes(params.get(at..at + 8)?.try_into().ok()?);
                allocation(v)
            }
            Target::Global(n) => symbol(n).and_then(allocation),
            Target::Unknown => None,
        }
    };
    let mut written = BTreeSet::new();
    for t in &acc.writes {
        match place(t) {
            Some(a) => {
                written.insert(a);
            }
            None => return Err(format!("it writes memory it cannot be shown to own ({t:?})")),
        }
    }
    if written.is_empty() {
        return Ok(());
    }
    for t in &acc.reads {
        match place(t) {
            Some(a) if written.contains(&a) => {
                return Err(format!("it reads and writes the allocation at {a:#x}"));
            }
            Some(_) => {}
            None => return Err(format!("it writes memory and reads through a pointer it cannot place ({t:?})")),
        }
    }
    Ok(())
}
