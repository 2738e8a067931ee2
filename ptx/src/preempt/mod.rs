//! Preemptible kernels (EffiSha, PPoPP'17): a PTX → PTX transformation after which a kernel
//! can be told to stop at a thread-block boundary and be launched again later from there.
//!
//! A transformed kernel is *persistent*: it is launched with fewer (physical) blocks than
//! its grid, and each physical block loops over *logical* blocks. One thread per block
//! (thread 0) reads the preemption flag and, when it is clear, takes the next logical block
//! index from a counter in a [`ControlBlock`] in global memory (`atom.add`); it broadcasts the
//! index through a shared-memory slot between two barriers. Every `%ctaid.*` of the original
//! body reads the logical block's coordinates instead and every `%nctaid.*` the original grid;
//! the body's `ret`/`exit` branch to the loop's continuation, where a barrier waits for the
//! whole block and thread 0 counts the logical block as done. When the flag is set (or the
//! counter passes `end`), every physical block returns at its next boundary.
//!
//! Because a logical block is taken only while the flag is clear and is then always run to
//! its end, the blocks done after a launch are exactly `first .. first + done`: the rest of the
//! grid is launched later (after a restart, on any device) by setting `next = first + done`
//! and the flag clear ([`ControlBlock::rearm`]). Nothing of a thread's state is saved.
//!
//! The transformation refuses (never transforms wrongly) what it cannot prove safe, with the
//! kernel and the reason ([`NotPreemptible`], [`Reason`]): grid-wide synchronization,
//! dynamic parallelism, `%ctaid`/`%nctaid` read in a device function (the function would see
//! the physical block), `exit` in a device function, clusters, `%gridid`, the reserved
//! shared window (cooperative groups expect it zeroed at each block's start), indirect
//! branches, barrier ids in registers or no free barrier id, and a thread that may leave the
//! body while other threads of its block still reach a barrier or a warp-synchronous
//! instruction: in the original such a thread has exited and is not waited for, in the
//! persistent form it waits at the hand-out barrier, so the others would wait forever. The
//! last check uses a divergence analysis ([`Divergence`]): a branch whose condition may
//! differ between the threads of a block (derived from `%tid`, loads, atomics, warp
//! operations, or computed under such a branch) is divergent.
//!
//! Constraints the transformed kernel relies on, as CUDA does for any non-cooperative grid:
//! blocks do not wait for each other, and a block does not read shared memory it has not
//! written (a logical block finds the previous logical block's shared memory; CUDA leaves it
//! undefined at a block's start). Design and figures: `docs/ptx-engine.md`.

mod divergence;
mod facts;
mod text;

use std::collections::{HashMap, HashSet};

use crate::api::{LaunchConfig, ParseError};
use divergence::Divergence;
use facts::FuncFacts;
use text::{parse_body, reg_tokens, scan_functions, special_base, special_refused, split_operands, strip_comments, identifiers, Body, FuncSpan, Item, LineIndex, Stmt};

/// Size of the control block in bytes (see [`ControlBlock`]).
pub const CTL_BYTES: usize = 40;
/// Byte offsets of the control block's fields as the transformed PTX reads them.
pub const CTL_FLAG_PTR: u64 = 0;
pub const CTL_NEXT: u64 = 8;
pub const CTL_DONE: u64 = 12;
pub const CTL_END: u64 = 16;
pub const CTL_GRID: u64 = 20;
pub const CTL_FIRST: u64 = 32;

/// The per-launch control block in device memory the transformed kernel's extra parameter
/// points at. Layout (little-endian): `u64 flag_addr` (address of a `u32` preemption flag,
/// nonzero = stop at the next boundary; on a GPU a word of mapped pinned host memory), `u32
/// next` (next logical block to hand out), `u32 done` (logical blocks completed), `u32 end`
/// (logical blocks from `end` on are not run), `u32 grid[3]` (the original grid), `u32
/// first` (host bookkeeping: the first logical block of this run), 4 bytes padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlBlock {
    pub flag_addr: u64,
    pub next: u32,
    pub done: u32,
    pub end: u32,
    pub grid: [u32; 3],
    pub first: u32,
}

/// Why a grid cannot be run through a control block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    #[error("grid {0:?} has a zero dimension")]
    EmptyGrid([u32; 3]),
    #[error("grid {0:?} has 2^32 - 1 blocks or more (the logical block counter is 32 bits)")]
    GridTooLarge([u32; 3]),
    #[error("first logical block {first} is beyond the grid's {total} blocks")]
    FirstBeyondGrid { first: u32, total: u32 },
}

impl ControlBlock {
    /// A control block for the whole `grid`, starting at logical block `first`, with its
    /// preemption flag at `flag_addr`.
    pub fn new(grid: [u32; 3], first: u32, flag_addr: u64) -> Result<ControlBlock, ControlError> {
        if grid.contains(&0) {
            return Err(ControlError::EmptyGrid(grid));
        }
        let total = grid.iter().try_fold(1u32, |a, &d| a.checked_mul(d)).filter(|&t| t < u32::MAX);
        let total = total.ok_or(ControlError::GridTooLarge(grid))?;
        if first > total {
            return Err(ControlError::FirstBeyondGrid { first, total });
        }
        Ok(ControlBlock { flag_addr, next: first, done: 0, end: total, grid, first })
    }

    /// Logical blocks in the grid.
    pub fn total(&self) -> u32 {
        self.grid[0] * self.grid[1] * self.grid[2]
    }

    /// The first logical block not done: every block before it ran to its end.
    pub fn resume_point(&self) -> u32 {
        self.first.saturating_add(self.done).min(self.end)
    }

    /// Whether every logical block up to `end` is done.
    pub fn finished(&self) -> bool {
        self.resume_point() >= self.end
    }

    /// Ready the control block for a launch of the rest of the grid after a preempted one
    /// (the counter went past the last block handed out; `done` stays cumulative).
    pub fn rearm(&mut self) {
        self.next = self.resume_point();
    }

    pub fn encode(&self) -> [u8; CTL_BYTES] {
        let mut b = [0u8; CTL_BYTES];
        b[0..8].copy_from_slice(&self.flag_addr.to_le_bytes());
        let words = [self.next, self.done, self.end, self.grid[0], self.grid[1], self.grid[2], self.first];
        for (k, w) in words.iter().enumerate() {
            b[8 + 4 * k..12 + 4 * k].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// Decode what [`ControlBlock::encode`] wrote (and a kernel updated); None when short.
    pub fn decode(b: &[u8]) -> Option<ControlBlock> {
        let w = |k: usize| Some(u32::from_le_bytes(b.get(8 + 4 * k..12 + 4 * k)?.try_into().ok()?));
        Some(ControlBlock {
            flag_addr: u64::from_le_bytes(b.get(0..8)?.try_into().ok()?),
            next: w(0)?,
            done: w(1)?,
            end: w(2)?,
            grid: [w(3)?, w(4)?, w(5)?],
            first: w(6)?,
        })
    }
}

/// The launch of a transformed kernel for the logical launch `logical`: a 1-D grid of
/// `min(logical blocks, resident)` physical blocks of the same shape. `resident` is what the
/// device runs at once (the emulator: its pool's workers; a GPU: the occupancy calculator's
/// blocks per SM times the SMs): more physical blocks than that would only wait, fewer would
/// leave the device idle.
pub fn physical_config(logical: &LaunchConfig, resident: u32) -> LaunchConfig {
    let total = logical.grid.iter().map(|&d| u64::from(d)).product::<u64>();
    let n = total.min(u64::from(resident.max(1))).max(1) as u32;
    LaunchConfig { grid: [n, 1, 1], block: logical.block, dynamic_shared_bytes: logical.dynamic_shared_bytes, cooperative: false }
}

/// The original kernel's packed parameter block with the control block's address appended
/// (8-aligned, as the transformed kernel's last `.param .u64`).
pub fn params_with_ctl(params: &[u8], ctl_addr: u64) -> Vec<u8> {
    let mut p = params.to_vec();
    p.resize(params.len().next_multiple_of(8), 0);
    p.extend_from_slice(&ctl_addr.to_le_bytes());
    p
}

/// The most instructions of a kernel with barriers or warp-synchronous instructions the
/// divergence analysis takes (its post-dominator sets are bitsets of n² bits: 18 MB here).
pub const MAX_ANALYSED: usize = 12_000;

/// Why a kernel is left as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    #[error("it synchronizes grid-wide (reads `{0}`, the cooperative-groups grid workspace)")]
    GridSync(String),
    #[error("it launches work from the device (dynamic parallelism: calls `{0}`)")]
    DynamicParallelism(String),
    #[error("device function `{func}` reads `{reg}`, which would give the physical block, not the logical one")]
    BlockIdInFunction { func: String, reg: String },
    #[error("device function `{0}` executes `exit`, which would end the persistent loop")]
    ExitInFunction(String),
    #[error("it reads `{reg}` (PTX line {line}), which a logical block cannot be given (clusters, the grid id, or the reserved shared window that cooperative groups expect zeroed at each block's start)")]
    SpecialRegister { reg: String, line: usize },
    #[error("a thread may leave the kernel at PTX line {line} while other threads of its block still reach a barrier or warp-synchronous instruction")]
    ExitBeforeBarrier { line: usize },
    #[error("the barrier id at PTX line {line} is not a constant")]
    DynamicBarrierId { line: usize },
    #[error("all 16 barrier ids are in use: none is left for the block hand-out")]
    NoFreeBarrier,
    #[error("indirect branch at PTX line {line}")]
    IndirectBranch { line: usize },
    #[error("it already uses the names the transformation adds (`crum_`)")]
    NameClash,
    #[error("it has {instructions} instructions and barriers or warp-synchronous instructions: more than the divergence analysis takes ({MAX_ANALYSED})")]
    TooLarge { instructions: usize },
    #[error("its body cannot be read: {0}")]
    Malformed(String),
}

/// A kernel the transformation left unchanged, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("kernel `{kernel}` cannot be made preemptible: {reason}")]
pub struct NotPreemptible {
    pub kernel: String,
    #[source]
    pub reason: Reason,
}

/// A kernel made preemptible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreemptibleKernel {
    /// The barrier id the block hand-out uses (the highest one the kernel does not use).
    pub barrier: u32,
    /// The transformation is safe only for blocks whose rows are whole warps or that have one
    /// row ([`PreemptibleKernel::fits`]): the kernel leaves whole warps early (`if (warp ==
    /// 0) { shuffles }`, with `warp = threadIdx.x / 32`) before warp operations, which keeps
    /// the lanes of one warp together only for such shapes. Launch the original otherwise.
    pub warp_rows: bool,
}

impl PreemptibleKernel {
    /// Whether the transformed kernel may be launched with blocks of shape `block`.
    pub fn fits(&self, block: [u32; 3]) -> bool {
        !self.warp_rows || block[0].is_multiple_of(32) || (block[1] == 1 && block[2] == 1)
    }
}

/// What [`transform`] did to one kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelOutcome {
    pub name: String,
    pub result: Result<PreemptibleKernel, NotPreemptible>,
}

/// The transformed module: its PTX text (comments removed; kernels that could not be
/// transformed are kept unchanged, so the module still offers them for ordinary launches)
/// and one outcome per kernel in module order.
#[derive(Debug, Clone)]
pub struct PreemptibleModule {
    pub ptx: String,
    pub kernels: Vec<KernelOutcome>,
}

impl PreemptibleModule {
    pub fn outcome(&self, kernel: &str) -> Option<&KernelOutcome> {
        self.kernels.iter().find(|k| k.name == kernel)
    }
}

/// Make every kernel of the PTX module `ptx` preemptible where that is safe. Fails only when
/// the module's structure (function headers, braces) cannot be read.
pub fn transform(ptx: &str) -> Result<PreemptibleModule, ParseError> {
    let text = strip_comments(ptx);
    let lines = LineIndex::new(&text);
    let funcs = scan_functions(&text, &lines)?;
    let names: HashSet<String> = funcs.iter().map(|f| f.name.clone()).collect();
    let mut bodies: HashMap<String, Body> = HashMap::new();
    let mut broken: HashMap<String, String> = HashMap::new();
    for f in &funcs {
        if let Some((open, close)) = f.body {
            match parse_body(&text, open + 1, close, &lines) {
                Ok(items) => {
                    bodies.insert(f.name.clone(), Body::new(items, &names));
                }
                Err(e) => {
                    broken.insert(f.name.clone(), e);
                }
            }
        }
    }
    let facts = FuncFacts::closure(&funcs, &bodies);
    // The hand-out's barriers are reached from different paths (the leader's and the
    // others'): on sm_70 and later the non-aligned `barrier.sync` says so; before, `bar.sync`.
    let sync = if target_sm(&text).is_some_and(|sm| sm >= 70) { "barrier.sync" } else { "bar.sync" };
    let mut out = String::with_capacity(text.len() * 2);
    let mut kernels = Vec::new();
    let mut pos = 0;
    for (k, f) in funcs.iter().enumerate().filter(|(_, f)| f.entry) {
        let Some((open, close)) = f.body else { continue };
        let result = match (bodies.get(&f.name), broken.get(&f.name)) {
            (_, Some(e)) => Err(Reason::Malformed(e.clone())),
            (Some(body), None) => check_kernel(f, &text[f.start..=close], f.params.map_or("", |(o, c)| &text[o + 1..c]), body, &facts),
            (None, None) => Err(Reason::Malformed("no body".into())),
        };
        let result = match result {
            Ok(kernel) => {
                let body = &bodies[&f.name];
                match f.params {
                    Some((po, pc)) => {
                        out.push_str(&text[pos..pc]);
                        out.push_str(if text[po + 1..pc].trim().is_empty() { "\n" } else { ",\n" });
                        out.push_str("\t.param .u64 __crum_ctl\n");
                        out.push_str(&text[pc..open]);
                    }
                    None => {
                        out.push_str(&text[pos..f.name_end]);
                        out.push_str("(\n\t.param .u64 __crum_ctl\n)");
                        out.push_str(&text[f.name_end..open]);
                    }
                }
                emit_body(&mut out, k, body, kernel.barrier, sync);
                pos = close + 1;
                Ok(kernel)
            }
            Err(reason) => Err(NotPreemptible { kernel: f.name.clone(), reason }),
        };
        kernels.push(KernelOutcome { name: f.name.clone(), result });
    }
    out.push_str(&text[pos..]);
    Ok(PreemptibleModule { ptx: out, kernels })
}

// ---------------------------------------------------------------------------------------
// The kernel checks.

/// What the persistent form needs, or why the kernel stays as it is.
fn check_kernel(f: &FuncSpan, text: &str, params: &str, body: &Body, facts: &FuncFacts) -> Result<PreemptibleKernel, Reason> {
    if text.contains("crum_") {
        return Err(Reason::NameClash);
    }
    let own = &facts.0[&f.name];
    if let Some(r) = &own.envreg {
        return Err(Reason::GridSync(r.clone()));
    }
    if let Some(d) = &own.device_runtime {
        return Err(Reason::DynamicParallelism(d.clone()));
    }
    for c in &body.calls {
        let y = &facts.0[c];
        if let Some(r) = &y.block_id {
            // A chain through several functions names the one that reads it.
            let mut parts: Vec<&str> = r.split('\u{0}').collect();
            let reg = parts.pop().unwrap_or_default().to_string();
            let func = parts.last().map_or(c.clone(), |s| s.to_string());
            return Err(Reason::BlockIdInFunction { func, reg });
        }
        if y.exit {
            return Err(Reason::ExitInFunction(c.clone()));
        }
    }
    for s in body.stmts().filter(|s| !s.is_decl()) {
        for (a, e) in reg_tokens(&s.operands) {
            let tok = &s.operands[a..e];
            let refused = match special_base(tok) {
                Some(b) if special_refused(b) => true,
                Some("ctaid" | "nctaid") => !tok.contains('.'),
                _ => false,
            };
            if refused {
                return Err(Reason::SpecialRegister { reg: tok.to_string(), line: s.line });
            }
        }
        if matches!(s.base(), "brx") {
            return Err(Reason::IndirectBranch { line: s.line });
        }
    }
    if let Some(r) = &own.refused_special {
        return Err(Reason::SpecialRegister { reg: r.clone(), line: f_line(body) });
    }
    if let Some(line) = own.dynamic_barrier {
        return Err(Reason::DynamicBarrierId { line });
    }
    let barrier = (0..16u32).rev().find(|b| !own.barriers.contains(b)).ok_or(Reason::NoFreeBarrier)?;
    let mut warp_rows = false;
    if own.collective {
        if body.insts.len() > MAX_ANALYSED {
            return Err(Reason::TooLarge { instructions: body.insts.len() });
        }
        let params = kernel_param_names(params);
        warp_rows = Divergence::new(body, facts, &params).exit_before_collective().map_err(|line| Reason::ExitBeforeBarrier { line })?;
    }
    Ok(PreemptibleKernel { barrier, warp_rows })
}

fn f_line(body: &Body) -> usize {
    body.stmts().next().map_or(0, |s| s.line)
}

/// Names of a kernel's parameters (the text between its parameter list's parentheses).
fn kernel_param_names(list: &str) -> HashSet<String> {
    split_operands(list)
        .iter()
        .filter_map(|p| {
            let p = p.split('[').next()?.trim();
            identifiers(p).last().map(str::to_string)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Emitting the persistent form.

/// The persistent form of one kernel. Layout (`B` the hand-out barrier, thread 0 the leader):
///
/// ```text
///   prologue: control block fields, leader predicate, slot address
///   @leader bra lead
/// take:    barrier.sync B; idx = slot; idx >= end → exit; logical %ctaid from idx
///          original body (ret/exit → bra done)
/// done:    barrier.sync B; @!leader bra take   (bar.sync before sm_70)
///          membar.sys; red.add done, 1                    (leader: the block is complete)
/// lead:    slot = flag ? ~0 : atom.add(next, 1); bra take (leader: hand out the next block)
/// exit:    ret
/// ```
///
/// A thread other than the leader runs six instructions per logical block besides the body
/// (two barriers, the slot read, the end test and two branches) plus the `%ctaid`
/// arithmetic the body needs (one `rem` for `.x`, `div`+`rem` for `.y`, one `div` for `.z`).
fn emit_body(out: &mut String, k: usize, body: &Body, barrier: u32, sync: &str) {
    use std::fmt::Write;
    let uses = |c: &str| body.stmts().any(|s| s.operands.contains(c));
    let (ux, uy, uz) = (uses("%ctaid.x"), uses("%ctaid.y"), uses("%ctaid.z"));
    let (need_ny, need_nz) = (uy || uz || uses("%nctaid.y"), uses("%nctaid.z"));
    let slot = format!("__crum_slot_{k}");
    // The body's own declarations first (they do not execute), so that no declaration
    // follows an instruction in the kernel's outer scope.
    out.push_str("{\n");
    let mut depth = 0;
    for it in &body.items {
        match it {
            Item::Open => depth += 1,
            Item::Close => depth -= 1,
            Item::Stmt(s) if depth == 0 && is_hoisted(s) => {
                let _ = writeln!(out, "\t{};", s.text());
            }
            _ => {}
        }
    }
    let _ = write!(
        out,
        "\t.reg .b32 %crum_r<16>;\n\t.reg .b64 %crum_rd<2>;\n\t.reg .pred %crum_p<3>;\n\t.shared .align 4 .b32 {slot};\n\
         \tld.param.u64 %crum_rd0, [__crum_ctl];\n\tcvta.to.global.u64 %crum_rd0, %crum_rd0;\n\
         \tld.global.u32 %crum_r1, [%crum_rd0+{CTL_END}];\n\tld.global.u32 %crum_r2, [%crum_rd0+{CTL_GRID}];\n"
    );
    if need_ny {
        let _ = writeln!(out, "\tld.global.u32 %crum_r3, [%crum_rd0+{}];", CTL_GRID + 4);
    }
    if need_nz {
        let _ = writeln!(out, "\tld.global.u32 %crum_r4, [%crum_rd0+{}];", CTL_GRID + 8);
    }
    if uz {
        out.push_str("\tmul.lo.u32 %crum_r8, %crum_r2, %crum_r3;\n");
    }
    let _ = write!(
        out,
        "\tmov.u32 %crum_r5, %tid.x;\n\tmov.u32 %crum_r6, %tid.y;\n\tor.b32 %crum_r5, %crum_r5, %crum_r6;\n\
         \tmov.u32 %crum_r6, %tid.z;\n\tor.b32 %crum_r5, %crum_r5, %crum_r6;\n\tsetp.eq.u32 %crum_p0, %crum_r5, 0;\n\
         \tmov.u32 %crum_r7, {slot};\n\t@%crum_p0 bra $L__crum_lead;\n\
         $L__crum_take:\n\
         \t{sync} {barrier};\n\tld.shared.u32 %crum_r11, [%crum_r7];\n\tsetp.ge.u32 %crum_p2, %crum_r11, %crum_r1;\n\
         \t@%crum_p2 bra $L__crum_exit;\n"
    );
    if ux {
        out.push_str("\trem.u32 %crum_r12, %crum_r11, %crum_r2;\n");
    }
    if uy {
        out.push_str("\tdiv.u32 %crum_r15, %crum_r11, %crum_r2;\n\trem.u32 %crum_r13, %crum_r15, %crum_r3;\n");
    }
    if uz {
        out.push_str("\tdiv.u32 %crum_r14, %crum_r11, %crum_r8;\n");
    }
    let mut depth = 0;
    for it in &body.items {
        match it {
            Item::Open => depth += 1,
            Item::Close => depth -= 1,
            Item::Stmt(s) if depth == 0 && is_hoisted(s) => continue,
            _ => {}
        }
        match it {
            Item::Label(l) => {
                let _ = writeln!(out, "{l}:");
            }
            Item::Open => out.push_str("{\n"),
            Item::Close => out.push_str("}\n"),
            Item::Stmt(s) if matches!(s.base(), "ret" | "exit") => {
                let g = s.guard.as_deref().map(|g| format!("{g} ")).unwrap_or_default();
                let _ = writeln!(out, "\t{g}bra $L__crum_done;");
            }
            Item::Stmt(s) => {
                let _ = writeln!(out, "\t{};", rewrite_block_ids(&s.text()));
            }
        }
    }
    let _ = write!(
        out,
        "$L__crum_done:\n\t{sync} {barrier};\n\t@!%crum_p0 bra $L__crum_take;\n\
         \tmembar.sys;\n\tred.global.add.u32 [%crum_rd0+{CTL_DONE}], 1;\n\
         $L__crum_lead:\n\
         \tmov.u32 %crum_r9, 0xFFFFFFFF;\n\tld.global.u64 %crum_rd1, [%crum_rd0+{CTL_FLAG_PTR}];\n\
         \tld.volatile.u32 %crum_r10, [%crum_rd1];\n\tsetp.ne.u32 %crum_p1, %crum_r10, 0;\n\
         \t@!%crum_p1 atom.global.add.u32 %crum_r9, [%crum_rd0+{CTL_NEXT}], 1;\n\
         \tst.shared.u32 [%crum_r7], %crum_r9;\n\tbra $L__crum_take;\n\
         $L__crum_exit:\n\tret;\n}}"
    );
}

/// The number of the module's `.target sm_NN` (the first architecture named).
fn target_sm(text: &str) -> Option<u32> {
    let rest = &text[text.find(".target")? + 7..];
    let sm = rest.split(|c: char| c.is_whitespace() || c == ',').find(|w| !w.is_empty())?.strip_prefix("sm_")?;
    sm.trim_end_matches(|c: char| c.is_ascii_alphabetic()).parse().ok()
}

/// Declarations of the body's outer scope, moved before the hand-out code.
fn is_hoisted(s: &Stmt) -> bool {
    matches!(s.op.split_whitespace().next().unwrap_or(""), ".reg" | ".local" | ".shared" | ".param" | ".const")
}

/// `%ctaid.*` → the logical block's coordinates, `%nctaid.*` → the original grid.
fn rewrite_block_ids(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut pos = 0;
    for (a, e) in reg_tokens(s) {
        let rep = match &s[a..e] {
            "%ctaid.x" => "%crum_r12",
            "%ctaid.y" => "%crum_r13",
            "%ctaid.z" => "%crum_r14",
            "%nctaid.x" => "%crum_r2",
            "%nctaid.y" => "%crum_r3",
            "%nctaid.z" => "%crum_r4",
            _ => continue,
        };
        out.push_str(&s[pos..a]);
        out.push_str(rep);
        pos = e;
    }
    out.push_str(&s[pos..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const VADD: &str = r#"
.version 8.0
.target sm_80
.address_size 64
.visible .entry k(
	.param .u64 k_param_0, // a comment with ( and {
	.param .u32 k_param_1
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<6>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [k_param_0];
	ld.param.u32 %r2, [k_param_1];
	mov.u32 %r3, %ctaid.x;
	mov.u32 %r4, %ntid.x;
	mov.u32 %r5, %tid.x;
	mad.lo.s32 %r1, %r3, %r4, %r5;
	setp.ge.s32 %p1, %r1, %r2;
	@%p1 bra $L__BB0_2;
	cvta.to.global.u64 %rd2, %rd1;
	mul.wide.s32 %rd3, %r1, 4;
	add.s64 %rd2, %rd2, %rd3;
	st.global.u32 [%rd2], %r1;
$L__BB0_2:
	ret;
}
"#;

    #[test]
    fn a_simple_kernel_is_transformed_and_still_parses() {
        let m = transform(VADD).unwrap();
        assert_eq!(m.kernels.len(), 1);
        assert_eq!(m.kernels[0].result, Ok(PreemptibleKernel { barrier: 15, warp_rows: false }));
        assert!(m.ptx.contains("__crum_ctl") && !m.ptx.contains("%ctaid.x;"), "{}", m.ptx);
        let parsed = crate::Module::parse(&m.ptx).unwrap_or_else(|e| panic!("{e}\n{}", m.ptx));
        let k = parsed.kernel("k").unwrap();
        assert_eq!((k.params.len(), k.params[2].offset), (3, 16));
    }

    #[test]
    fn an_exit_before_a_barrier_under_a_thread_dependent_branch_is_refused() {
        let src = VADD.replace("st.global.u32 [%rd2], %r1;", "st.global.u32 [%rd2], %r1;\n\tbar.sync 0;");
        let m = transform(&src).unwrap();
        let e = m.kernels[0].result.clone().unwrap_err();
        assert!(matches!(e.reason, Reason::ExitBeforeBarrier { .. }), "{e}");
        assert!(e.to_string().starts_with("kernel `k` cannot be made preemptible"), "{e}");
        // The kernel is kept as it was.
        assert!(!m.ptx.contains("__crum_ctl"));
    }

    #[test]
    fn an_exit_before_a_barrier_under_a_parameter_branch_is_accepted() {
        let src = VADD.replace("setp.ge.s32 %p1, %r1, %r2;", "setp.ge.s32 %p1, %r4, %r2;").replace("st.global.u32 [%rd2], %r1;", "st.global.u32 [%rd2], %r1;\n\tbar.sync 0;");
        let m = transform(&src).unwrap();
        assert_eq!(m.kernels[0].result, Ok(PreemptibleKernel { barrier: 15, warp_rows: false }));
    }

    #[test]
    fn grid_sync_and_block_ids_in_functions_are_refused_with_reasons() {
        let f = ".func (.param .b32 r) bid()\n{\n\t.reg .b32 %r<2>;\n\tmov.u32 %r1, %ctaid.x;\n\tst.param.b32 [r], %r1;\n\tret;\n}\n";
        let src = VADD.replace(".visible .entry", &format!("{f}.visible .entry")).replace(
            "mov.u32 %r3, %ctaid.x;",
            "{\n\t.param .b32 rv;\n\tcall.uni (rv), bid, ();\n\tld.param.b32 %r3, [rv];\n\t}",
        );
        let e = transform(&src).unwrap().kernels[0].result.clone().unwrap_err();
        assert_eq!(e.reason, Reason::BlockIdInFunction { func: "bid".into(), reg: "%ctaid.x".into() });
        let src = VADD.replace("mov.u32 %r4, %ntid.x;", "mov.u32 %r4, %envreg1;");
        let e = transform(&src).unwrap().kernels[0].result.clone().unwrap_err();
        assert_eq!(e.reason, Reason::GridSync("%envreg1".into()));
    }

    #[test]
    fn a_kernel_without_a_parameter_list_gets_one_and_declarations_come_first() {
        let src = VADD.replace("k(\n\t.param .u64 k_param_0, // a comment with ( and {\n\t.param .u32 k_param_1\n)", "k").replace("[k_param_0]", "[%rd1]").replace("ld.param.u32 %r2, [k_param_1];", "mov.u32 %r2, 100;").replace("\tld.param.u64 %rd1, [%rd1];\n", "\tmov.u64 %rd1, 4096;\n\t.reg .b32 %late;\n");
        let m = transform(&src).unwrap();
        assert!(m.kernels[0].result.is_ok(), "{:?}\n{src}", m.kernels[0].result);
        let k = crate::Module::parse(&m.ptx).unwrap_or_else(|e| panic!("{e}\n{}", m.ptx));
        assert_eq!(k.kernel("k").unwrap().params.len(), 1);
        // Every declaration of the outer scope precedes the first instruction.
        let body = &m.ptx[m.ptx.find('{').unwrap()..];
        let first_inst = body.find("ld.param.u64 %crum_rd0").unwrap();
        assert!(body.find(".reg .b32 %late").unwrap() < first_inst && body.find(".reg .b64 %rd<4>").unwrap() < first_inst, "{}", m.ptx);
    }

    #[test]
    fn truncated_or_damaged_ptx_never_panics() {
        for end in (0..VADD.len()).filter(|&e| VADD.is_char_boundary(e)) {
            let _ = transform(&VADD[..end]);
        }
        for (i, c) in ["{", "}", "(", ")", ";", ":", "@", "\"", "%ctaid.x", "ret;", "bar.sync %r1;"].iter().enumerate() {
            for at in (0..VADD.len()).step_by(7 + i) {
                let mut s = VADD.to_string();
                s.insert_str(at, c);
                if let Ok(m) = transform(&s) {
                    let _ = crate::Module::parse(&m.ptx);
                }
            }
        }
    }

    #[test]
    fn predicated_returns_exits_and_scopes_become_branches_to_the_loop_end() {
        let src = VADD.replace("@%p1 bra $L__BB0_2;", "@%p1 ret;\n\t{\n\t.reg .b32 %t;\n\tmov.u32 %t, %nctaid.y;\n\t}").replace("\tret;\n}", "\texit;\n}");
        let m = transform(&src).unwrap();
        assert!(m.kernels[0].result.is_ok(), "{:?}", m.kernels[0].result);
        assert!(m.ptx.contains("@%p1 bra $L__crum_done;") && !m.ptx.contains("\texit;"), "{}", m.ptx);
        assert!(m.ptx.contains("mov.u32 %t, %crum_r3;"), "{}", m.ptx);
        crate::Module::parse(&m.ptx).unwrap_or_else(|e| panic!("{e}\n{}", m.ptx));
    }

    #[test]
    fn barrier_ids_in_registers_and_full_barrier_sets_are_refused() {
        let src = VADD.replace("st.global.u32 [%rd2], %r1;", "st.global.u32 [%rd2], %r1;\n\tbar.sync %r4;");
        assert_eq!(transform(&src).unwrap().kernels[0].result.clone().unwrap_err().reason, Reason::DynamicBarrierId { line: 25 });
        let bars: String = (0..16).map(|b| format!("\tbar.sync {b};\n")).collect();
        let src = VADD.replace("\tld.param.u64 %rd1", &format!("{bars}\tld.param.u64 %rd1"));
        assert_eq!(transform(&src).unwrap().kernels[0].result.clone().unwrap_err().reason, Reason::NoFreeBarrier);
        let src = VADD.replace("\tld.param.u64 %rd1", "\tbar.sync 15;\n\tld.param.u64 %rd1");
        assert_eq!(transform(&src).unwrap().kernels[0].result, Ok(PreemptibleKernel { barrier: 14, warp_rows: false }));
    }

    #[test]
    fn a_barrier_in_a_loop_with_a_data_dependent_exit_is_refused() {
        let src = VADD.replace(
            "\tst.global.u32 [%rd2], %r1;",
            "$L__loop:\n\tbar.sync 0;\n\tld.global.u32 %r1, [%rd2];\n\tsetp.ne.u32 %p1, %r1, 0;\n\t@%p1 bra $L__loop;",
        );
        let e = transform(&src).unwrap().kernels[0].result.clone().unwrap_err();
        assert!(matches!(e.reason, Reason::ExitBeforeBarrier { .. }), "{e}");
    }

    /// Threads from 64 on leave before the shuffle of the first two warps: per warp (accepted
    /// for rows of whole warps); from 48 on: lanes of one warp part (refused).
    #[test]
    fn a_per_warp_exit_before_a_shuffle_is_accepted_for_whole_warps_only() {
        let shfl = |bound: u32| {
            VADD.replace("setp.ge.s32 %p1, %r1, %r2;", &format!("setp.ge.u32 %p1, %r5, {bound};"))
                .replace("\tst.global.u32 [%rd2], %r1;", "\tshfl.sync.down.b32 %r3, %r1, 1, 31, -1;\n\tst.global.u32 [%rd2], %r3;")
        };
        let k = transform(&shfl(64)).unwrap().kernels[0].result.clone().unwrap();
        assert!(k.warp_rows && k.fits([128, 1, 1]) && k.fits([32, 3, 1]) && !k.fits([16, 8, 1]));
        let e = transform(&shfl(48)).unwrap().kernels[0].result.clone().unwrap_err();
        assert!(matches!(e.reason, Reason::ExitBeforeBarrier { .. }), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn control_blocks_decode_what_they_encode(flag in proptest::prelude::any::<u64>(), w in proptest::prelude::any::<[u32; 7]>()) {
            let c = ControlBlock { flag_addr: flag, next: w[0], done: w[1], end: w[2], grid: [w[3], w[4], w[5]], first: w[6] };
            proptest::prop_assert_eq!(ControlBlock::decode(&c.encode()), Some(c));
            proptest::prop_assert_eq!(ControlBlock::decode(&c.encode()[..CTL_BYTES - 5]), None);
        }
    }

    #[test]
    fn control_blocks_round_trip_and_rearm_from_the_blocks_done() {
        let mut c = ControlBlock::new([4, 3, 2], 5, 0x1000).unwrap();
        assert_eq!((c.total(), c.next, c.end), (24, 5, 24));
        assert_eq!(ControlBlock::decode(&c.encode()), Some(c));
        c.next = 13; // the counter passed the blocks handed out
        c.done = 6;
        c.rearm();
        assert_eq!((c.next, c.resume_point(), c.finished()), (11, 11, false));
        assert_eq!(ControlBlock::new([0, 1, 1], 0, 0), Err(ControlError::EmptyGrid([0, 1, 1])));
        assert!(ControlBlock::new([65536, 65536, 1], 0, 0).is_err());
        assert_eq!(params_with_ctl(&[1, 2, 3, 4, 5], 9).len(), 16);
    }
}
