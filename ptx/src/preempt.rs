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

use std::collections::{HashMap, HashSet};

use crate::api::{LaunchConfig, ParseError};

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
                emit_body(&mut out, k, body, kernel.barrier);
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
// Reading the text: comments, functions, statements.

/// Remove `//` and `/* */` comments (outside string literals), keeping every newline so that
/// line numbers stay those of the input.
fn strip_comments(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let (mut i, mut in_str) = (0, false);
    while i < b.len() {
        let c = b[i];
        if in_str {
            in_str = c != b'"';
            out.push(c);
            i += 1;
        } else if c == b'"' {
            in_str = true;
            out.push(c);
            i += 1;
        } else if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i += 2;
            while i < b.len() && !b[i..].starts_with(b"*/") {
                if b[i] == b'\n' {
                    out.push(b'\n');
                }
                i += 1;
            }
            i = (i + 2).min(b.len());
            out.push(b' ');
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

struct LineIndex(Vec<usize>);

impl LineIndex {
    fn new(t: &str) -> LineIndex {
        LineIndex(t.bytes().enumerate().filter(|&(_, c)| c == b'\n').map(|(i, _)| i).collect())
    }
    /// 1-based line of byte `pos`.
    fn line(&self, pos: usize) -> usize {
        self.0.partition_point(|&nl| nl < pos) + 1
    }
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c == b'%'
}

/// A `.entry` or `.func` at module level.
struct FuncSpan {
    entry: bool,
    name: String,
    /// Byte where the header's `.entry`/`.func` word starts.
    start: usize,
    /// Byte after the name.
    name_end: usize,
    /// Parameter list `(` and `)`, if the header has one.
    params: Option<(usize, usize)>,
    /// The body's `}` or the declaration's `;`.
    end: usize,
    /// Body `{` and `}`; None for a declaration.
    body: Option<(usize, usize)>,
}

fn perr(lines: &LineIndex, pos: usize, msg: impl Into<String>) -> ParseError {
    ParseError { line: lines.line(pos), msg: msg.into() }
}

/// Index of the bracket closing the one at `open` (strings skipped).
fn matching(b: &[u8], open: usize, lines: &LineIndex) -> Result<usize, ParseError> {
    let (o, c) = (b[open], if b[open] == b'(' { b')' } else { b'}' });
    let (mut depth, mut i, mut in_str) = (0usize, open, false);
    while i < b.len() {
        let x = b[i];
        if in_str {
            in_str = x != b'"';
        } else if x == b'"' {
            in_str = true;
        } else if x == o {
            depth += 1;
        } else if x == c {
            depth -= 1;
            if depth == 0 {
                return Ok(i);
            }
        }
        i += 1;
    }
    Err(perr(lines, open, format!("unbalanced `{}`", o as char)))
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

fn scan_functions(t: &str, lines: &LineIndex) -> Result<Vec<FuncSpan>, ParseError> {
    let b = t.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut depth, mut in_str) = (0, 0i64, false);
    while i < b.len() {
        let c = b[i];
        if in_str {
            in_str = c != b'"';
            i += 1;
            continue;
        }
        match c {
            b'"' => in_str = true,
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth < 0 {
                    return Err(perr(lines, i, "unbalanced `}`"));
                }
            }
            b'.' if depth == 0 && (i == 0 || !is_ident(b[i - 1])) => {
                let word_end = (i + 1..b.len()).find(|&j| !is_ident(b[j])).unwrap_or(b.len());
                let word = &t[i..word_end];
                if word == ".entry" || word == ".func" {
                    let f = function_header(t, i, word_end, word == ".entry", lines)?;
                    i = f.end + 1;
                    out.push(f);
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(out)
}

fn function_header(t: &str, start: usize, mut j: usize, entry: bool, lines: &LineIndex) -> Result<FuncSpan, ParseError> {
    let b = t.as_bytes();
    j = skip_ws(b, j);
    if !entry && b.get(j) == Some(&b'(') {
        j = skip_ws(b, matching(b, j, lines)? + 1);
    }
    let name_end = (j..b.len()).find(|&k| !is_ident(b[k])).unwrap_or(b.len());
    if name_end == j {
        return Err(perr(lines, start, "function without a name"));
    }
    let name = t[j..name_end].to_string();
    j = skip_ws(b, name_end);
    let params = if b.get(j) == Some(&b'(') {
        let (open, close) = (j, matching(b, j, lines)?);
        j = close + 1;
        Some((open, close))
    } else {
        None
    };
    while j < b.len() && b[j] != b'{' && b[j] != b';' {
        j += 1;
    }
    let body = match b.get(j) {
        Some(b'{') => Some((j, matching(b, j, lines)?)),
        Some(_) => None,
        None => return Err(perr(lines, start, format!("function `{name}` has no body and no `;`"))),
    };
    let end = body.map_or(j, |(_, close)| close);
    Ok(FuncSpan { entry, name, start, name_end, params, body, end })
}

/// One item of a function body.
#[derive(Debug, Clone)]
enum Item {
    Label(String),
    Open,
    Close,
    Stmt(Stmt),
}

#[derive(Debug, Clone)]
struct Stmt {
    line: usize,
    /// `@%p` / `@!%p` guard, as written.
    guard: Option<String>,
    /// The full opcode, e.g. `ld.param.u64`; a directive (`.reg`) for declarations.
    op: String,
    operands: String,
}

impl Stmt {
    fn base(&self) -> &str {
        self.op.split('.').next().unwrap_or("")
    }
    fn is_decl(&self) -> bool {
        self.op.starts_with('.')
    }
    fn text(&self) -> String {
        let g = self.guard.as_deref().map(|g| format!("{g} ")).unwrap_or_default();
        format!("{g}{} {}", self.op, self.operands)
    }
}

fn parse_body(t: &str, from: usize, to: usize, lines: &LineIndex) -> Result<Vec<Item>, String> {
    let b = t.as_bytes();
    let mut items = Vec::new();
    let mut i = from;
    loop {
        i = skip_ws(b, i);
        if i >= to {
            return Ok(items);
        }
        match b[i] {
            b'{' => {
                items.push(Item::Open);
                i += 1;
                continue;
            }
            b'}' => {
                items.push(Item::Close);
                i += 1;
                continue;
            }
            _ => {}
        }
        let w = (i..to).find(|&k| !is_ident(b[k])).unwrap_or(to);
        let after = skip_ws(b, w);
        if w > i && after < to && b[after] == b':' {
            items.push(Item::Label(t[i..w].to_string()));
            i = after + 1;
            continue;
        }
        let mut end = i;
        let mut in_str = false;
        while end < to && (in_str || b[end] != b';') {
            if b[end] == b'"' {
                in_str = !in_str;
            }
            end += 1;
        }
        if end >= to {
            return Err(format!("statement without `;` at PTX line {}", lines.line(i)));
        }
        let s = t[i..end].trim();
        let (guard, rest) = if s.starts_with('@') {
            let g = s.find(char::is_whitespace).ok_or_else(|| format!("lone guard at PTX line {}", lines.line(i)))?;
            (Some(s[..g].to_string()), s[g..].trim_start())
        } else {
            (None, s)
        };
        let o = rest.find(char::is_whitespace).unwrap_or(rest.len());
        items.push(Item::Stmt(Stmt { line: lines.line(i), guard, op: rest[..o].to_string(), operands: rest[o..].trim().to_string() }));
        i = end + 1;
    }
}

// ---------------------------------------------------------------------------------------
// Registers and special registers.

const SPECIAL_VEC: &[&str] = &["tid", "ntid", "ctaid", "nctaid", "clusterid", "nclusterid", "cluster_ctaid", "cluster_nctaid"];
/// Special registers with one value for the whole grid or block.
const SPECIAL_UNIFORM: &[&str] = &["ntid", "ctaid", "nctaid", "nsmid", "gridid", "dynamic_smem_size", "total_smem_size", "aggr_smem_size"];
/// Special registers that differ between threads or over time.
const SPECIAL_VARYING: &[&str] =
    &["tid", "laneid", "warpid", "nwarpid", "smid", "lanemask_eq", "lanemask_le", "lanemask_lt", "lanemask_ge", "lanemask_gt", "clock", "clock64", "clock_hi", "globaltimer", "globaltimer_lo", "globaltimer_hi"];
/// Special registers a logical block cannot give its meaning to.
fn special_refused(base: &str) -> bool {
    base == "gridid"
        || base.starts_with("cluster")
        || base.starts_with("ncluster")
        || base == "is_explicit_cluster"
        || base.starts_with("reserved_smem")
        || base == "current_graph_exec"
}

/// `%name` tokens of `s` (with `.x/.y/.z/.w` for vector special registers), in order, with
/// their byte ranges.
fn reg_tokens(s: &str) -> Vec<(usize, usize)> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && (i == 0 || !is_ident(b[i - 1])) {
            let mut j = i + 1;
            while j < b.len() && is_ident(b[j]) && b[j] != b'%' {
                j += 1;
            }
            if SPECIAL_VEC.contains(&&s[i + 1..j]) && b.get(j) == Some(&b'.') && b.get(j + 1).is_some_and(|c| b"xyzw".contains(c)) && !b.get(j + 2).is_some_and(|&c| is_ident(c)) {
                j += 2;
            }
            out.push((i, j));
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// The special register's name without `%` and component, if `tok` is one.
fn special_base(tok: &str) -> Option<&str> {
    let base = tok.strip_prefix('%')?.split('.').next()?;
    let known = SPECIAL_UNIFORM.contains(&base) || SPECIAL_VARYING.contains(&base) || SPECIAL_VEC.contains(&base);
    (known || base.starts_with("envreg") || base.starts_with("pm") && base[2..].bytes().all(|c| c.is_ascii_digit()) || special_refused(base)).then_some(base)
}

fn identifiers(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$')).filter(|w| w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == '$'))
}

// ---------------------------------------------------------------------------------------
// Per-function facts and the call graph.

/// A function body as instructions with resolved labels.
struct Body {
    items: Vec<Item>,
    /// Instructions (not declarations), as indices into `items`.
    insts: Vec<usize>,
    /// Label → index into `insts` of the instruction that follows it.
    labels: HashMap<String, usize>,
    /// Functions named by `call` instructions.
    calls: HashSet<String>,
}

impl Body {
    fn new(items: Vec<Item>, funcs: &HashSet<String>) -> Body {
        let (mut insts, mut labels, mut calls) = (Vec::new(), HashMap::new(), HashSet::new());
        for (k, it) in items.iter().enumerate() {
            match it {
                Item::Label(l) => {
                    labels.insert(l.clone(), insts.len());
                }
                Item::Stmt(s) if !s.is_decl() => {
                    if s.base() == "call" {
                        calls.extend(identifiers(&s.operands).filter(|w| funcs.contains(*w)).map(str::to_string));
                    }
                    insts.push(k);
                }
                _ => {}
            }
        }
        Body { items, insts, labels, calls }
    }
    fn inst(&self, i: usize) -> &Stmt {
        match &self.items[self.insts[i]] {
            Item::Stmt(s) => s,
            _ => unreachable!("insts index statements only"),
        }
    }
    fn stmts(&self) -> impl Iterator<Item = &Stmt> {
        self.items.iter().filter_map(|it| if let Item::Stmt(s) = it { Some(s) } else { None })
    }
}

fn is_warp_collective(s: &Stmt) -> bool {
    matches!(s.base(), "shfl" | "vote" | "match" | "redux" | "activemask" | "wmma" | "mma" | "ldmatrix" | "stmatrix" | "elect")
}
fn is_cta_barrier(s: &Stmt) -> bool {
    matches!(s.base(), "bar" | "barrier" | "mbarrier")
}

/// What a function does, itself or through the functions it calls.
#[derive(Default, Clone)]
struct Facts {
    /// A `%ctaid`/`%nctaid` read (the register).
    block_id: Option<String>,
    envreg: Option<String>,
    exit: bool,
    collective: bool,
    refused_special: Option<String>,
    /// Named barrier ids used, or a line where the id is a register.
    barriers: HashSet<u32>,
    dynamic_barrier: Option<usize>,
    device_runtime: Option<String>,
}

struct FuncFacts(HashMap<String, Facts>);

impl FuncFacts {
    fn closure(funcs: &[FuncSpan], bodies: &HashMap<String, Body>) -> FuncFacts {
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

/// Operands split at top-level commas.
fn split_operands(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' | '[' | '(' => depth += 1,
            '}' | ']' | ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if !s[start..].trim().is_empty() {
        out.push(s[start..].trim());
    }
    out
}

fn parse_int(t: &str) -> Option<u64> {
    let t = t.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h.trim_end_matches(['U', 'u']), 16).ok(),
        None => t.trim_end_matches(['U', 'u']).parse().ok(),
    }
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

/// How far a value may differ between the threads of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
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
    fn merge(self, o: Class) -> Class {
        match (self, o) {
            (a, b) if a == b => a,
            (Class::Uniform, Class::Warp) | (Class::Warp, Class::Uniform) => Class::Warp,
            _ => Class::Varying,
        }
    }
    /// The class of a value computed from operands of these classes (Lane: see `classify`).
    fn max(self, o: Class) -> Class {
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
struct Divergence<'a> {
    body: &'a Body,
    n: usize,
    succ: Vec<Vec<usize>>,
    /// Barriers and warp operations (and calls of functions with any).
    collective: Vec<bool>,
    /// Barriers of the whole block (and calls of functions with any collective).
    block_collective: Vec<bool>,
    /// Immediate post-dominator of each instruction (None: it cannot reach the exit).
    ipdom: Vec<Option<usize>>,
    class: HashMap<String, Class>,
}

impl<'a> Divergence<'a> {
    fn new(body: &'a Body, facts: &FuncFacts, params: &HashSet<String>) -> Divergence<'a> {
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

    fn guard_reg(s: &Stmt) -> Option<&str> {
        s.guard.as_deref().map(|g| g.trim_start_matches('@').trim_start_matches('!'))
    }

    fn intrinsically_varying(s: &Stmt, params: &HashSet<String>) -> bool {
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
    fn dests(s: &Stmt) -> Vec<&str> {
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

    fn reg_class(&self, tok: &str) -> Class {
        match special_base(tok) {
            Some("tid") if tok == "%tid.x" => Class::Lane,
            Some("tid") => Class::Warp,
            Some(b) if SPECIAL_VARYING.contains(&b) => Class::Varying,
            Some(_) => Class::Uniform,
            None => self.class.get(tok).copied().unwrap_or(Class::Uniform),
        }
    }

    fn guard_class(&self, s: &Stmt) -> Class {
        match Self::guard_reg(s).map(|g| self.reg_class(g)) {
            None | Some(Class::Uniform) => Class::Uniform,
            Some(Class::Warp) => Class::Warp,
            Some(_) => Class::Varying,
        }
    }

    /// The class of what `s` computes from its operands (not counting guard and region).
    fn classify(&self, s: &Stmt, params: &HashSet<String>) -> Class {
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
    fn lane_or_max(&self, acc: Class, c: Class) -> Class {
        match (acc, c) {
            (Class::Uniform, c) => c,
            (a, Class::Uniform) => a,
            (a, b) => a.max(b),
        }
    }

    fn taint(&mut self, params: &HashSet<String>) {
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
    fn region(&self, i: usize, stop: Option<usize>) -> Vec<usize> {
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
    fn immediate_post_dominators(&self) -> Vec<Option<usize>> {
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
    fn exit_before_collective(&self) -> Result<bool, usize> {
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
    fn splits(&self, coll: &[bool]) -> Vec<bool> {
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
fn fixed_point(n: usize, mut step: impl FnMut(usize) -> bool) {
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

// ---------------------------------------------------------------------------------------
// Emitting the persistent form.

/// The persistent form of one kernel. Layout (`B` the hand-out barrier, thread 0 the leader):
///
/// ```text
///   prologue: control block fields, leader predicate, slot address
///   @leader bra lead
/// take:    bar.sync B; idx = slot; idx >= end → exit; logical %ctaid from idx
///          original body (ret/exit → bra done)
/// done:    bar.sync B; @!leader bra take
///          membar.sys; red.add done, 1                    (leader: the block is complete)
/// lead:    slot = flag ? ~0 : atom.add(next, 1); bra take (leader: hand out the next block)
/// exit:    ret
/// ```
///
/// A thread other than the leader runs six instructions per logical block besides the body
/// (two barriers, the slot read, the end test and two branches) plus the `%ctaid`
/// arithmetic the body needs (one `rem` for `.x`, `div`+`rem` for `.y`, one `div` for `.z`).
fn emit_body(out: &mut String, k: usize, body: &Body, barrier: u32) {
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
         \tbar.sync {barrier};\n\tld.shared.u32 %crum_r11, [%crum_r7];\n\tsetp.ge.u32 %crum_p2, %crum_r11, %crum_r1;\n\
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
        "$L__crum_done:\n\tbar.sync {barrier};\n\t@!%crum_p0 bra $L__crum_take;\n\
         \tmembar.sys;\n\tred.global.add.u32 [%crum_rd0+{CTL_DONE}], 1;\n\
         $L__crum_lead:\n\
         \tmov.u32 %crum_r9, 0xFFFFFFFF;\n\tld.global.u64 %crum_rd1, [%crum_rd0+{CTL_FLAG_PTR}];\n\
         \tld.volatile.u32 %crum_r10, [%crum_rd1];\n\tsetp.ne.u32 %crum_p1, %crum_r10, 0;\n\
         \t@!%crum_p1 atom.global.add.u32 %crum_r9, [%crum_rd0+{CTL_NEXT}], 1;\n\
         \tst.shared.u32 [%crum_r7], %crum_r9;\n\tbra.uni $L__crum_take;\n\
         $L__crum_exit:\n\tret;\n}}"
    );
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
