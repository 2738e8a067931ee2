//! What each function of a module does, itself or through the functions it calls: block
//! ids, grid sync, `exit`, collective instructions, barrier ids, device-runtime calls.

use std::collections::{HashMap, HashSet};

use super::text::{is_cta_barrier, is_warp_collective, parse_int, reg_tokens, special_base, special_refused, split_operands, Body, FuncSpan};
/// What a function does, itself or through the functions it calls.
#[derive(Default, Clone)]
pub(super) struct Facts {
    /// A `%ctaid`/`%nctaid` read (the register).
    pub(super) block_id: Option<String>,
    pub(super) envreg: Option<String>,
    pub(super) exit: bool,
    pub(super) collective: bool,
    pub(super) refused_special: Option<String>,
    /// Named barrier ids used, or a line where the id is a register.
    pub(super) barriers: HashSet<u32>,
    pub(super) dynamic_barrier: Option<usize>,
    pub(super) device_runtime: Option<String>,
}

pub(super) struct FuncFacts(pub(super) HashMap<String, Facts>);

impl FuncFacts {
    pub(super) fn closure(funcs: &[FuncSpan], bodies: &HashMap<String, Body>) -> FuncFacts {
        let mut own: HashMap<String, Facts> = HashMap::new();
        for f in funcs {
            if f.body.is_none() && own.contains_key(&f.name) {
                continue; // a declaration of a function defined before
            }
            let mut x = Facts::default();
            if f.body.is_none() && f.name.starts_with("cuda") {
                x.device_runtime = Some(f.name.clone());
            }
            if let Some(body) = bodies.get(&f.name) {
                for s in body.stmts().filter(|s| !s.is_decl()) {
                    for (a, e) in reg_tokens(&s.operands) {
                        let tok = &s.operands[a..e];
                        match special_base(tok) {
                            Some("ctaid" | "nctaid") => x.block_id = x.block_id.or(Some(tok.to_string())),
                            Some(b) if b.starts_with("envreg") => x.envreg = x.envreg.or(Some(tok.to_string())),
                            Some(b) if special_refused(b) => x.refused_special = x.refused_special.or(Some(tok.to_string())),
                            _ => {}
                        }
                    }
                    x.exit |= s.base() == "exit";
                    x.collective |= is_warp_collective(s) || is_cta_barrier(s);
                    if matches!(s.base(), "bar" | "barrier") && !s.op.starts_with("bar.warp") {
                        let ops = split_operands(&s.operands);
                        let id = if s.op.starts_with("bar.red") || s.op.starts_with("barrier.red") { ops.get(1) } else { ops.first() };
                        match id.map(|t| parse_int(t)) {
                            Some(Some(v)) if v < 16 => {
                                x.barriers.insert(v as u32);
                            }
                            _ => x.dynamic_barrier = x.dynamic_barrier.or(Some(s.line)),
                        }
                    }
                }
            }
            own.insert(f.name.clone(), x);
        }
        // Transitive closure over calls (fixed point; call graphs may be recursive).
        let mut all = own.clone();
        loop {
            let mut changed = false;
            for f in funcs {
                let Some(body) = bodies.get(&f.name) else { continue };
                let mut x = all[&f.name].clone();
                for c in &body.calls {
                    let y = &all[c];
                    let before = (x.block_id.is_some(), x.envreg.is_some(), x.exit, x.collective, x.refused_special.is_some(), x.barriers.len(), x.dynamic_barrier.is_some(), x.device_runtime.is_some());
                    x.block_id = x.block_id.or(y.block_id.clone().map(|r| format!("{c}\u{0}{r}")));
                    x.envreg = x.envreg.or(y.envreg.clone());
                    x.exit |= y.exit;
                    x.collective |= y.collective;
                    x.refused_special = x.refused_special.or(y.refused_special.clone());
                    x.barriers.extend(y.barriers.iter().copied());
                    x.dynamic_barrier = x.dynamic_barrier.or(y.dynamic_barrier);
                    x.device_runtime = x.device_runtime.or(y.device_runtime.clone());
                    let after = (x.block_id.is_some(), x.envreg.is_some(), x.exit, x.collective, x.refused_special.is_some(), x.barriers.len(), x.dynamic_barrier.is_some(), x.device_runtime.is_some());
                    changed |= before != after;
                }
                all.insert(f.name.clone(), x);
            }
            if !changed {
                break;
            }
        }
        FuncFacts(all)
    }
}
