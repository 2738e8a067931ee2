//! Reading PTX text for the transformation: comments, module-level functions, body
//! statements, register tokens and special registers. Only what the transformation needs;
//! the engine's decoder is `crate::parse`.

use std::collections::{HashMap, HashSet};

use crate::api::ParseError;
// ---------------------------------------------------------------------------------------
// Reading the text: comments, functions, statements.

/// Remove `//` and `/* */` comments (outside string literals), keeping every newline so that
/// line numbers stay those of the input.
pub(super) fn strip_comments(s: &str) -> String {
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

pub(super) struct LineIndex(Vec<usize>);

impl LineIndex {
    pub(super) fn new(t: &str) -> LineIndex {
        LineIndex(t.bytes().enumerate().filter(|&(_, c)| c == b'\n').map(|(i, _)| i).collect())
    }
    /// 1-based line of byte `pos`.
    pub(super) fn line(&self, pos: usize) -> usize {
        self.0.partition_point(|&nl| nl < pos) + 1
    }
}

pub(super) fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c == b'%'
}

/// A `.entry` or `.func` at module level.
pub(super) struct FuncSpan {
    pub(super) entry: bool,
    pub(super) name: String,
    /// Byte where the header's `.entry`/`.func` word starts.
    pub(super) start: usize,
    /// Byte after the name.
    pub(super) name_end: usize,
    /// Parameter list `(` and `)`, if the header has one.
    pub(super) params: Option<(usize, usize)>,
    /// The body's `}` or the declaration's `;`.
    pub(super) end: usize,
    /// Body `{` and `}`; None for a declaration.
    pub(super) body: Option<(usize, usize)>,
}

pub(super) fn perr(lines: &LineIndex, pos: usize, msg: impl Into<String>) -> ParseError {
    ParseError { line: lines.line(pos), msg: msg.into() }
}

/// Index of the bracket closing the one at `open` (strings skipped).
pub(super) fn matching(b: &[u8], open: usize, lines: &LineIndex) -> Result<usize, ParseError> {
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

pub(super) fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

pub(super) fn scan_functions(t: &str, lines: &LineIndex) -> Result<Vec<FuncSpan>, ParseError> {
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

pub(super) fn function_header(t: &str, start: usize, mut j: usize, entry: bool, lines: &LineIndex) -> Result<FuncSpan, ParseError> {
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
pub(super) enum Item {
    Label(String),
    Open,
    Close,
    Stmt(Stmt),
}

#[derive(Debug, Clone)]
pub(super) struct Stmt {
    pub(super) line: usize,
    /// `@%p` / `@!%p` guard, as written.
    pub(super) guard: Option<String>,
    /// The full opcode, e.g. `ld.param.u64`; a directive (`.reg`) for declarations.
    pub(super) op: String,
    pub(super) operands: String,
}

impl Stmt {
    pub(super) fn base(&self) -> &str {
        self.op.split('.').next().unwrap_or("")
    }
    pub(super) fn is_decl(&self) -> bool {
        self.op.starts_with('.')
    }
    pub(super) fn text(&self) -> String {
        let g = self.guard.as_deref().map(|g| format!("{g} ")).unwrap_or_default();
        format!("{g}{} {}", self.op, self.operands)
    }
}

pub(super) fn parse_body(t: &str, from: usize, to: usize, lines: &LineIndex) -> Result<Vec<Item>, String> {
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

pub(super) const SPECIAL_VEC: &[&str] = &["tid", "ntid", "ctaid", "nctaid", "clusterid", "nclusterid", "cluster_ctaid", "cluster_nctaid"];
/// Special registers with one value for the whole grid or block.
pub(super) const SPECIAL_UNIFORM: &[&str] = &["ntid", "ctaid", "nctaid", "nsmid", "gridid", "dynamic_smem_size", "total_smem_size", "aggr_smem_size"];
/// Special registers that differ between threads or over time.
pub(super) const SPECIAL_VARYING: &[&str] =
    &["tid", "laneid", "warpid", "nwarpid", "smid", "lanemask_eq", "lanemask_le", "lanemask_lt", "lanemask_ge", "lanemask_gt", "clock", "clock64", "clock_hi", "globaltimer", "globaltimer_lo", "globaltimer_hi"];
/// Special registers a logical block cannot give its meaning to.
pub(super) fn special_refused(base: &str) -> bool {
    base == "gridid"
        || base.starts_with("cluster")
        || base.starts_with("ncluster")
        || base == "is_explicit_cluster"
        || base.starts_with("reserved_smem")
        || base == "current_graph_exec"
}

/// `%name` tokens of `s` (with `.x/.y/.z/.w` for vector special registers), in order, with
/// their byte ranges.
pub(super) fn reg_tokens(s: &str) -> Vec<(usize, usize)> {
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
pub(super) fn special_base(tok: &str) -> Option<&str> {
    let base = tok.strip_prefix('%')?.split('.').next()?;
    let known = SPECIAL_UNIFORM.contains(&base) || SPECIAL_VARYING.contains(&base) || SPECIAL_VEC.contains(&base);
    (known || base.starts_with("envreg") || base.starts_with("pm") && base[2..].bytes().all(|c| c.is_ascii_digit()) || special_refused(base)).then_some(base)
}

pub(super) fn identifiers(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$')).filter(|w| w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == '$'))
}

// ---------------------------------------------------------------------------------------
// Per-function facts and the call graph.

/// A function body as instructions with resolved labels.
pub(super) struct Body {
    pub(super) items: Vec<Item>,
    /// Instructions (not declarations), as indices into `items`.
    pub(super) insts: Vec<usize>,
    /// Label → index into `insts` of the instruction that follows it.
    pub(super) labels: HashMap<String, usize>,
    /// Functions named by `call` instructions.
    pub(super) calls: HashSet<String>,
}

impl Body {
    pub(super) fn new(items: Vec<Item>, funcs: &HashSet<String>) -> Body {
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
    pub(super) fn inst(&self, i: usize) -> &Stmt {
        match &self.items[self.insts[i]] {
            Item::Stmt(s) => s,
            _ => unreachable!("insts index statements only"),
        }
    }
    pub(super) fn stmts(&self) -> impl Iterator<Item = &Stmt> {
        self.items.iter().filter_map(|it| if let Item::Stmt(s) = it { Some(s) } else { None })
    }
}

pub(super) fn is_warp_collective(s: &Stmt) -> bool {
    matches!(s.base(), "shfl" | "vote" | "match" | "redux" | "activemask" | "wmma" | "mma" | "ldmatrix" | "stmatrix" | "elect")
}
pub(super) fn is_cta_barrier(s: &Stmt) -> bool {
    matches!(s.base(), "bar" | "barrier" | "mbarrier")
}

/// Operands split at top-level commas.
pub(super) fn split_operands(s: &str) -> Vec<&str> {
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

pub(super) fn parse_int(t: &str) -> Option<u64> {
    let t = t.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h.trim_end_matches(['U', 'u']), 16).ok(),
        None => t.trim_end_matches(['U', 'u']).parse().ok(),
    }
}
