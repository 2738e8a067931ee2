//! PTX text → [`Program`]: a small lexer, a statement parser for directives, declarations
//! and instructions, and the decoder that resolves names and splits opcode words into
//! opcode, types and modifiers.

use std::collections::HashMap;

use crate::api::{GlobalVar, KernelInfo, ParamInfo, ParseError, StateSpace};
use crate::ir::*;
use crate::link::{self, Def, Linkage, LinkTable, Scope, Take};

/// Upper bound on any declared size, so hostile PTX cannot make us allocate wildly.
const MAX_DECL_BYTES: u64 = 1 << 32;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    Str(String),
    Punct(char),
}

struct Lexer;

impl Lexer {
    fn lex(src: &str) -> Result<Vec<(Tok, u32)>, ParseError> {
        let b = src.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        let mut line = 1u32;
        while i < b.len() {
            let c = b[i];
            if c == b'\n' {
                line += 1;
                i += 1;
            } else if c.is_ascii_whitespace() {
                i += 1;
            } else if c == b'/' && b.get(i + 1) == Some(&b'/') {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    if b[i] == b'\n' {
                        line += 1;
                    }
                    i += 1;
                }
                i += 2;
            } else if c == b'"' {
                let mut s = String::new();
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' && i + 1 < b.len() {
                        i += 1;
                    }
                    s.push(b[i] as char);
                    i += 1;
                }
                i += 1;
                out.push((Tok::Str(s), line));
            } else if c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'%' | b'.') {
                let st = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'_' | b'$' | b'%' | b'.' | b':'))
                {
                    // `::` appears in cache-policy modifiers (`.L1::no_allocate`); a single `:`
                    // ends a label.
                    if b[i] == b':' {
                        if b.get(i + 1) == Some(&b':') {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                out.push((Tok::Word(src[st..i].to_string()), line));
            } else {
                out.push((Tok::Punct(c as char), line));
                i += 1;
            }
        }
        Ok(out)
    }
}

fn perr(line: u32, msg: impl Into<String>) -> ParseError {
    ParseError { line: line as usize, msg: msg.into() }
}

struct P {
    toks: Vec<(Tok, u32)>,
    i: usize,
}

impl P {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.i).map(|t| &t.0)
    }
    fn peek_at(&self, k: usize) -> Option<&Tok> {
        self.toks.get(self.i + k).map(|t| &t.0)
    }
    fn line(&self) -> u32 {
        self.toks.get(self.i).or(self.toks.last()).map_or(0, |t| t.1)
    }
    fn next(&mut self) -> Result<Tok, ParseError> {
        let t = self.toks.get(self.i).cloned().ok_or_else(|| perr(self.line(), "unexpected end of PTX"))?;
        self.i += 1;
        Ok(t.0)
    }
    fn is_punct(&self, c: char) -> bool {
        self.peek() == Some(&Tok::Punct(c))
    }
    fn eat_punct(&mut self, c: char) -> bool {
        if self.is_punct(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn expect_punct(&mut self, c: char) -> Result<(), ParseError> {
        if self.eat_punct(c) {
            Ok(())
        } else {
            Err(perr(self.line(), format!("expected `{c}`, found {:?}", self.peek())))
        }
    }
    fn word(&mut self) -> Result<String, ParseError> {
        match self.next()? {
            Tok::Word(w) => Ok(w),
            t => Err(perr(self.line(), format!("expected a word, found {t:?}"))),
        }
    }
    fn peek_word(&self) -> Option<&str> {
        match self.peek() {
            Some(Tok::Word(w)) => Some(w),
            _ => None,
        }
    }
    fn skip_line(&mut self) {
        let l = self.line();
        while self.i < self.toks.len() && self.toks[self.i].1 == l {
            self.i += 1;
        }
    }
    fn skip_to_semi(&mut self) {
        while let Some(t) = self.peek() {
            let semi = *t == Tok::Punct(';');
            self.i += 1;
            if semi {
                break;
            }
        }
    }
    /// An integer (with optional sign) — sizes, alignments, array dimensions.
    fn int(&mut self) -> Result<i64, ParseError> {
        let neg = self.eat_punct('-');
        let w = self.word()?;
        let v = parse_int(&w).ok_or_else(|| perr(self.line(), format!("bad integer `{w}`")))? as i64;
        Ok(if neg { v.wrapping_neg() } else { v })
    }
}

fn parse_int(w: &str) -> Option<u64> {
    let w = w.strip_suffix('U').unwrap_or(w);
    if let Some(h) = w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else if w.len() > 1 && w.starts_with('0') && w.bytes().all(|c| c.is_ascii_digit()) {
        u64::from_str_radix(&w[1..], 8).ok()
    } else {
        w.parse::<u64>().ok()
    }
}

/// Immediate number: integer, `0f` (f32 bits), `0d` (f64 bits) or a decimal float.
fn parse_imm(w: &str) -> Option<(u64, bool)> {
    if let Some(h) = w.strip_prefix("0f").or_else(|| w.strip_prefix("0F")) {
        if h.len() == 8 {
            return u32::from_str_radix(h, 16).ok().map(|v| (v as u64, true));
        }
    }
    if let Some(h) = w.strip_prefix("0d").or_else(|| w.strip_prefix("0D")) {
        if h.len() == 16 {
            return u64::from_str_radix(h, 16).ok().map(|v| (v, true));
        }
    }
    if let Some(v) = parse_int(w) {
        return Some((v, false));
    }
    if w.contains('.') || w.contains('e') {
        return w.parse::<f64>().ok().map(|f| (f.to_bits(), true));
    }
    None
}

/// A declaration's type/space/alignment prefix and name/array suffix.
#[derive(Debug, Default)]
struct Decl {
    space: Option<String>,
    align: Option<u32>,
    ty: Option<Ty>,
    vec: u32,
    name: String,
    /// Array dimensions (product; 0 = unsized `[]`).
    count: Option<u64>,
    /// `%r<100>`.
    range: Option<u32>,
    extern_: bool,
    ptr: bool,
    /// `.attribute(.managed)`.
    managed: bool,
}

impl Decl {
    fn elem_size(&self) -> u64 {
        self.ty.map_or(1, |t| t.size() as u64) * self.vec.max(1) as u64
    }
    fn size(&self) -> u64 {
        self.elem_size() * self.count.unwrap_or(1)
    }
}

/// Symbols a function body can name.
#[derive(Debug, Clone, Copy)]
enum Sym {
    Reg(u32),
    /// Kernel param: offset in the kernel param block (param space, below 2^32).
    KParam(u32),
    /// Frame param (function formal or call-sequence param): offset in the frame.
    FParam(u32),
    /// Index into [`Program::shared_vars`].
    Shared(u32),
    Local(u64),
    Global(u32),
    Label(u32),
}

/// Param-space addresses at or above this are frame-relative.
pub(crate) const FRAME_PARAM_BASE: u64 = 1 << 32;

struct Builder {
    prog: Program,
    /// Module-scope names of each module (`link`: private names and shared declarations).
    scopes: Vec<Scope<Sym>>,
    /// The module being read (index into `scopes` and the token lists).
    module: usize,
    /// Linkage directive of the declaration being read.
    linkage: Linkage,
    /// Names shared by every module.
    link: LinkTable,
    /// Bodies parsed lazily after all prototypes are known: (module, func index, token range).
    bodies: Vec<(usize, u32, usize, usize)>,
    /// Per-function formal names → frame offsets.
    formals: Vec<Vec<(String, u32, u32)>>,
    /// Per-kernel params (name, offset, size).
    kparams: Vec<Vec<(String, u32, u32)>>,
    /// Kernel info index per function (None for .func).
    kernel_of: Vec<Option<usize>>,
    /// (function, shared variable) pairs: which function names which `.shared` variable.
    shared_refs: Vec<(u32, u32)>,
    local_cur: u64,
    /// Function whose body is being decoded.
    cur_func: u32,
    /// Functions that read `%envreg1/2` (grid sync), and caller → callee edges.
    envreg_users: Vec<u32>,
    /// Functions whose address is taken (an operand or an initializer names them) and the
    /// functions that call through a pointer: each of the latter may call any of the former.
    address_taken: Vec<u32>,
    indirect_callers: Vec<u32>,
    call_edges: Vec<(u32, u32)>,
}

/// Parse and decode one PTX text.
#[cfg(test)]
pub(crate) fn parse_module(src: &str) -> Result<Program, ParseError> {
    parse_modules(&[src])
}

/// Parse and decode the PTX texts of one program's modules as one program: a single text
/// as it is, several (`nvcc -rdc=true`) linked by name (`link`).
pub(crate) fn parse_modules(srcs: &[&str]) -> Result<Program, ParseError> {
    let mut b = Builder {
        prog: Program { shared_vars: vec![SharedVar { size: 0, align: 16 }], ..Program::default() },
        scopes: Vec::new(),
        module: 0,
        linkage: Linkage::Private,
        link: LinkTable::default(),
        bodies: Vec::new(),
        formals: Vec::new(),
        kparams: Vec::new(),
        kernel_of: Vec::new(),
        shared_refs: Vec::new(),
        local_cur: 0,
        cur_func: 0,
        envreg_users: Vec::new(),
        address_taken: Vec::new(),
        indirect_callers: Vec::new(),
        call_edges: Vec::new(),
    };
    // Pass 1: module directives, variables and function headers of every module; bodies
    // remembered.
    let mut modules = Vec::with_capacity(srcs.len());
    for (m, src) in srcs.iter().enumerate() {
        let ctx = |e| link::in_module(e, m, srcs.len());
        let mut p = P { toks: Lexer::lex(src).map_err(ctx)?, i: 0 };
        b.module = m;
        b.scopes.push(Scope::default());
        while p.peek().is_some() {
            b.linkage = Linkage::Private;
            b.top_level(&mut p).map_err(ctx)?;
        }
        modules.push(p);
    }
    // Every definition is known now: shared names nobody defines are unresolved.
    let defined: std::collections::HashSet<u32> = b.bodies.iter().map(|&(_, fi, _, _)| fi).collect();
    let unresolved_funcs: Vec<u32> = (0..b.prog.funcs.len() as u32)
        .filter(|fi| !defined.contains(fi) && !link::is_builtin(&b.prog.funcs[*fi as usize].name))
        .collect();
    let mut unresolved_vars: Vec<(String, u32)> =
        b.link.vars.iter().filter(|(_, i)| !b.link.var_defs.contains_key(i)).map(|(n, &i)| (n.clone(), i)).collect();
    unresolved_vars.sort_by_key(|v| v.1);
    b.link.unresolved_vars = unresolved_vars.iter().map(|v| v.1).collect();
    // Pass 2: function bodies (every function name is known by now, so calls resolve).
    let bodies = std::mem::take(&mut b.bodies);
    for (m, fi, st, en) in bodies {
        b.module = m;
        b.body(&modules[m], fi, st, en);
    }
    for fi in unresolved_funcs {
        let name = b.prog.funcs[fi as usize].name.clone();
        b.reject(fi, 0, format!("unresolved extern function `{name}`: no PTX module of the program defines it"));
        b.prog.unresolved.push(name);
    }
    b.prog.unresolved.extend(unresolved_vars.into_iter().map(|v| v.0));
    b.prog.local_bytes = b.local_cur;
    for k in b.prog.kernels.iter_mut() {
        k.local_bytes = b.local_cur;
    }
    b.per_kernel();
    Ok(b.prog)
}

impl Builder {
    /// What each kernel can reach through calls decides its static shared memory layout,
    /// whether it uses grid sync, and whether it can run at all.
    fn per_kernel(&mut self) {
        let nf = self.prog.funcs.len();
        let mut callees = vec![Vec::new(); nf];
        for &(caller, callee) in &self.call_edges {
            callees[caller as usize].push(callee as usize);
        }
        for &caller in &self.indirect_callers {
            callees[caller as usize].extend(self.address_taken.iter().map(|&f| f as usize));
        }
        let mut refs = vec![Vec::new(); nf];
        for &(f, v) in &self.shared_refs {
            refs[f as usize].push(v as usize);
        }
        let mut envreg = vec![false; nf];
        for &f in &self.envreg_users {
            envreg[f as usize] = true;
        }
        let prog = &mut self.prog;
        for (k, &kf) in prog.kernel_funcs.iter().enumerate() {
            let mut seen = vec![false; nf];
            let mut stack = vec![kf as usize];
            seen[kf as usize] = true;
            let mut order = Vec::new();
            while let Some(f) = stack.pop() {
                order.push(f);
                for &c in &callees[f] {
                    if !seen[c] {
                        seen[c] = true;
                        stack.push(c);
                    }
                }
            }
            // Static shared: only the variables the kernel's code can name, in declaration
            // order, after the reserved region; the dynamic part follows, 16-aligned.
            let mut used = vec![false; prog.shared_vars.len()];
            for &f in &order {
                for &v in &refs[f] {
                    used[v] = true;
                }
            }
            let mut offs = vec![0u64; prog.shared_vars.len()];
            let mut cur = RESERVED_SMEM;
            for (v, var) in prog.shared_vars.iter().enumerate().skip(1) {
                if used[v] {
                    let off = cur.div_ceil(var.align) * var.align;
                    offs[v] = off;
                    cur = off + var.size;
                }
            }
            let dyn_base = cur.div_ceil(16) * 16;
            offs[DYN_SHARED as usize] = dyn_base;
            let info = &mut prog.kernels[k];
            info.static_shared_bytes = dyn_base - RESERVED_SMEM;
            info.uses_grid_sync = order.iter().any(|&f| envreg[f]);
            prog.kernel_shared.push(offs);
            // The first rejected function in call order (the kernel itself first).
            prog.kernel_rejected.push(order.iter().find_map(|&f| prog.funcs[f].rejected.clone()));
        }
    }

    fn top_level(&mut self, p: &mut P) -> Result<(), ParseError> {
        let line = p.line();
        let w = match p.next()? {
            Tok::Word(w) => w,
            Tok::Punct(';') => return Ok(()),
            t => return Err(perr(line, format!("unexpected {t:?} at module scope"))),
        };
        match w.as_str() {
            ".version" | ".target" | ".address_size" | ".file" | ".loc" | ".section" => {
                if w == ".version" {
                    if let Some(v) = p.peek_word() {
                        let (a, b) = v.split_once('.').unwrap_or((v, "0"));
                        self.prog.version = self.prog.version.max(a.parse().ok().zip(b.parse().ok()));
                    }
                } else if w == ".target" {
                    if let Some(v) = p.peek_word() {
                        let digits: String = v.trim_start_matches("sm_").chars().take_while(char::is_ascii_digit).collect();
                        // Linked modules: the highest target of them.
                        self.prog.target = self.prog.target.max(digits.parse().ok());
                    }
                }
                if p.line() == line {
                    p.skip_line();
                }
                // `.section` blocks carry debug info in braces.
                if w == ".section" && p.is_punct('{') {
                    let mut depth = 0;
                    while let Some(t) = p.peek().cloned() {
                        p.i += 1;
                        if t == Tok::Punct('{') {
                            depth += 1;
                        } else if t == Tok::Punct('}') {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                    }
                }
                Ok(())
            }
            ".visible" | ".weak" | ".common" => {
                self.linkage = match w.as_str() {
                    ".visible" => Linkage::Visible,
                    ".weak" => Linkage::Weak,
                    _ => Linkage::Common,
                };
                self.top_level(p)
            }
            ".extern" => {
                self.linkage = Linkage::Extern;
                // `.extern .func` prototypes and `.extern .shared` dynamic shared memory.
                if p.peek_word() == Some(".func") {
                    p.next()?;
                    self.func(p, false, true)
                } else {
                    self.module_var(p, true)
                }
            }
            ".entry" => self.func(p, true, false),
            ".func" => self.func(p, false, false),
            ".global" | ".const" | ".shared" => {
                p.i -= 1;
                self.module_var(p, false)
            }
            ".pragma" => {
                p.skip_to_semi();
                Ok(())
            }
            _ => Err(perr(line, format!("unknown module directive `{w}`"))),
        }
    }

    /// `[.align N] [.ptr...] .type [.vN] name[dims]` or `%r<100>` forms.
    fn decl(p: &mut P) -> Result<Decl, ParseError> {
        let mut d = Decl::default();
        while let Some(w) = p.peek_word().map(str::to_string) {
            if !w.starts_with('.') {
                break;
            }
            p.next()?;
            // Words may join several directives (`.ptr.global.align 8`): take them one by one.
            for part in w[1..].split('.') {
                match part {
                    // After `.ptr`, `.align` is the pointee's alignment, not the parameter's.
                    "align" if d.ptr => {
                        p.int()?;
                    }
                    "align" => d.align = Some(p.int()? as u32),
                    "global" | "const" | "shared" | "local" | "param" | "reg" | "tex" if !d.ptr => {
                        d.space = Some(format!(".{part}"))
                    }
                    "global" | "const" | "shared" | "local" => {} // pointee space of `.ptr`
                    "ptr" => d.ptr = true,
                    "v2" => d.vec = 2,
                    "v4" => d.vec = 4,
                    "v8" => d.vec = 8,
                    "texref" | "samplerref" | "surfref" => d.ty = Some(Ty::B64),
                    // `.attribute(.managed)` (`__managed__` variables) and other attributes:
                    // no effect on layout; the runtime re-homes managed variables itself
                    // (`cudaLibraryGetManaged` names only those declared managed).
                    "attribute" => {
                        if p.eat_punct('(') {
                            while !p.eat_punct(')') {
                                if let Tok::Word(w) = p.next()? {
                                    d.managed |= w.trim_start_matches('.') == "managed";
                                }
                            }
                        }
                    }
                    _ => match Ty::parse(part) {
                        Some(t) => d.ty = Some(t),
                        None => return Err(perr(p.line(), format!("unknown declaration modifier `{w}`"))),
                    },
                }
            }
        }
        d.name = p.word()?;
        if p.eat_punct('<') {
            d.range = Some(p.int()? as u32);
            p.expect_punct('>')?;
        }
        while p.eat_punct('[') {
            let n = if p.is_punct(']') { 0 } else { p.int()? as u64 };
            p.expect_punct(']')?;
            let c = d.count.unwrap_or(1).saturating_mul(n);
            if c > MAX_DECL_BYTES {
                return Err(perr(p.line(), "array too large"));
            }
            d.count = Some(c);
        }
        Ok(d)
    }

    fn module_var(&mut self, p: &mut P, extern_: bool) -> Result<(), ParseError> {
        let line = p.line();
        let mut d = Self::decl(p)?;
        d.extern_ = extern_;
        let space = d.space.clone().unwrap_or_default();
        let align = d.align.unwrap_or_else(|| d.elem_size() as u32).max(1);
        let size = d.size();
        if size > MAX_DECL_BYTES {
            return Err(perr(line, "variable too large"));
        }
        let mut init = vec![0u8; size as usize];
        if p.eat_punct('=') {
            let mut vals = Vec::new();
            Self::initializer(p, &mut vals)?;
            // Function names in an initializer (a table of device function pointers, a vtable)
            // are their address values.
            let vals: Vec<InitVal> = vals
                .into_iter()
                .map(|v| match v {
                    InitVal::Sym(n) => match self.scopes[self.module].funcs.get(&n) {
                        Some(&f) => {
                            self.address_taken.push(f);
                            InitVal::Int(crate::ir::func_addr(f))
                        }
                        None => InitVal::Sym(n),
                    },
                    v => v,
                })
                .collect();
            let es = d.ty.map_or(1, |t| t.size()) as usize;
            for (k, v) in vals.iter().enumerate() {
                let bytes = match *v {
                    InitVal::Int(x) => x.to_le_bytes(),
                    InitVal::Float(f) if es == 4 => ((f as f32).to_bits() as u64).to_le_bytes(),
                    InitVal::Float(f) => f.to_bits().to_le_bytes(),
                    InitVal::F32Bits(x) if es == 8 => (f32::from_bits(x as u32) as f64).to_bits().to_le_bytes(),
                    InitVal::F32Bits(x) => x.to_le_bytes(),
                    InitVal::F64Bits(x) if es == 4 => ((f64::from_bits(x) as f32).to_bits() as u64).to_le_bytes(),
                    InitVal::F64Bits(x) => x.to_le_bytes(),
                    // Address of another module variable: not known until the backend
                    // allocates it (nvcc emits these only for device function pointers).
                    InitVal::Sym(_) => 0u64.to_le_bytes(),
                };
                let off = k * es;
                if off + es <= init.len() {
                    init[off..off + es].copy_from_slice(&bytes[..es]);
                }
            }
        }
        p.expect_punct(';')?;
        match space.as_str() {
            ".shared" => {
                let v = if extern_ || d.count == Some(0) { DYN_SHARED } else { self.shared_var(size, align as u64) };
                self.scope().globals.insert(d.name, Sym::Shared(v));
            }
            ".global" | ".const" => {
                let shared = self.linkage.shared();
                let idx = self.var_symbol(&d.name, shared);
                self.scope().globals.insert(d.name.clone(), Sym::Global(idx));
                if !extern_ {
                    let var = GlobalVar {
                        name: self.prog.symbols[idx as usize].clone(),
                        space: if space == ".const" { StateSpace::Const } else { StateSpace::Global },
                        size,
                        align,
                        init,
                        managed: d.managed,
                    };
                    let def = Def::new(self.module, self.linkage);
                    let prev = self.link.var_defs.get(&idx).copied();
                    let take = if shared {
                        link::take_definition("variable", &d.name, prev.map(|p| p.0), def).map_err(|m| perr(line, m))?
                    } else {
                        Take::First
                    };
                    match (take, prev) {
                        (Take::Replace, Some((_, gi))) => {
                            self.prog.globals[gi] = var;
                            self.link.var_defs.insert(idx, (def, gi));
                        }
                        (Take::Ignore, _) => {}
                        _ => {
                            self.prog.globals.push(var);
                            if shared {
                                self.link.var_defs.insert(idx, (def, self.prog.globals.len() - 1));
                            }
                        }
                    }
                }
            }
            _ => return Err(perr(line, format!("unsupported module variable space `{space}`"))),
        }
        Ok(())
    }

    /// The current module's names.
    fn scope(&mut self) -> &mut Scope<Sym> {
        &mut self.scopes[self.module]
    }

    fn shared_var(&mut self, size: u64, align: u64) -> u32 {
        self.prog.shared_vars.push(SharedVar { size, align: align.max(1) });
        (self.prog.shared_vars.len() - 1) as u32
    }

    /// The symbol index of a module variable: a shared name is one symbol for every module; a
    /// private one gets its own, renamed when another module's variable has the name (`link`).
    fn var_symbol(&mut self, name: &str, shared: bool) -> u32 {
        if shared {
            if let Some(&i) = self.link.vars.get(name) {
                return i;
            }
        } else if let Some(Sym::Global(i)) = self.scopes[self.module].globals.get(name) {
            return *i;
        }
        let own = match self.prog.symbols.iter().position(|s| s == name) {
            None => name.to_string(),
            Some(j) if shared => {
                // A private variable of another module has the name: it moves aside.
                if let Some(&m) = self.link.private_vars.get(&(j as u32)) {
                    let moved = link::private_name(name, m);
                    if let Some(g) = self.prog.globals.iter_mut().find(|g| g.name == name) {
                        g.name = moved.clone();
                    }
                    self.prog.symbols[j] = moved;
                }
                name.to_string()
            }
            Some(_) => link::private_name(name, self.module),
        };
        self.prog.symbols.push(own);
        let idx = (self.prog.symbols.len() - 1) as u32;
        if shared {
            self.link.vars.insert(name.to_string(), idx);
        } else {
            self.link.private_vars.insert(idx, self.module);
        }
        idx
    }

    fn initializer(p: &mut P, out: &mut Vec<InitVal>) -> Result<(), ParseError> {
        if p.eat_punct('{') {
            loop {
                if p.eat_punct('}') {
                    break;
                }
                Self::initializer(p, out)?;
                p.eat_punct(',');
            }
            return Ok(());
        }
        let neg = p.eat_punct('-');
        let w = p.word()?;
        if w == "generic" {
            p.expect_punct('(')?;
            let s = p.word()?;
            p.expect_punct(')')?;
            out.push(InitVal::Sym(s));
            return Ok(());
        }
        let is_hex_f = |p: &str| w.starts_with(p) || w.starts_with(&p.to_uppercase());
        match parse_imm(&w) {
            Some((v, true)) if is_hex_f("0f") => out.push(InitVal::F32Bits(v ^ if neg { 0x8000_0000 } else { 0 })),
            Some((v, true)) if is_hex_f("0d") => out.push(InitVal::F64Bits(v ^ if neg { 1 << 63 } else { 0 })),
            Some((v, true)) => {
                let f = f64::from_bits(v);
                out.push(InitVal::Float(if neg { -f } else { f }))
            }
            Some((v, false)) => out.push(InitVal::Int(if neg { v.wrapping_neg() } else { v })),
            None => out.push(InitVal::Sym(w.clone())),
        }
        Ok(())
    }

    /// `.entry name (params) directives { body }` / `.func (rets) name (params) { body }`.
    fn func(&mut self, p: &mut P, kernel: bool, extern_: bool) -> Result<(), ParseError> {
        let line = p.line();
        let mut rets = Vec::new();
        if !kernel && p.is_punct('(') {
            rets = Self::param_list(p)?;
        }
        let name = p.word()?;
        let params = if p.is_punct('(') { Self::param_list(p)? } else { Vec::new() };
        let mut maxntid = None;
        let mut nregs_hint = 0;
        // Performance directives until `{` or `;`.
        while let Some(w) = p.peek_word().map(str::to_string) {
            p.next()?;
            match w.as_str() {
                ".maxntid" | ".reqntid" => {
                    let mut prod = 1u64;
                    loop {
                        prod = prod.saturating_mul(p.int()? as u64);
                        if !p.eat_punct(',') {
                            break;
                        }
                    }
                    maxntid = Some(prod.min(u32::MAX as u64) as u32);
                }
                ".minnctapersm" | ".maxnreg" | ".maxnctapersm" | ".maxclusterrank" => {
                    let v = p.int()?;
                    if w == ".maxnreg" {
                        nregs_hint = v as u32;
                    }
                }
                ".reqnctapercluster" | ".explicitcluster" => {
                    while p.peek_word().is_some_and(|w| !w.starts_with('.')) || p.is_punct(',') {
                        p.next()?;
                    }
                }
                ".noreturn" => {}
                ".pragma" => {
                    p.skip_to_semi();
                }
                _ => return Err(perr(line, format!("unknown function directive `{w}`"))),
            }
        }
        let shared = self.linkage.shared();
        let is_def = !extern_ && p.is_punct('{');
        let known = self.scope().funcs.get(&name).copied();
        let known = known.or_else(|| if shared { self.link.funcs.get(&name).copied() } else { None });
        let fi = match known {
            Some(fi) => fi,
            None => {
                let fi = self.prog.funcs.len() as u32;
                self.prog.funcs.push(Func {
                    name: name.clone(),
                    entry: u32::MAX,
                    nregs: 0,
                    frame_bytes: 0,
                    local_bytes: 0,
                    ret_offs: Vec::new(),
                    param_offs: Vec::new(),
                    rejected: None,
                });
                self.formals.push(Vec::new());
                self.kernel_of.push(None);
                self.kparams.push(Vec::new());
                self.set_formals(fi, &rets, &params);
                fi
            }
        };
        self.scope().funcs.insert(name.clone(), fi);
        if shared {
            self.link.funcs.insert(name.clone(), fi);
        }
        // Which definition the program keeps (`link`): a second one is skipped, replaces a
        // weak one, or is an error.
        let define = if !is_def {
            false
        } else if shared {
            let def = Def::new(self.module, self.linkage);
            let prev = self.link.func_defs.get(&fi).copied();
            match link::take_definition("function", &name, prev, def).map_err(|m| perr(line, m))? {
                Take::Ignore => false,
                Take::First => {
                    self.link.func_defs.insert(fi, def);
                    true
                }
                Take::Replace => {
                    self.link.func_defs.insert(fi, def);
                    self.bodies.retain(|b| b.1 != fi);
                    true
                }
            }
        } else {
            true
        };
        if define {
            // The definition's formals (a prototype in another module may name them otherwise).
            self.set_formals(fi, &rets, &params);
        }
        if kernel && (define || self.kernel_of[fi as usize].is_none()) {
            let mut off = 0u32;
            let mut infos = Vec::new();
            let mut names = Vec::new();
            for d in &params {
                let al = d.align.unwrap_or_else(|| d.elem_size() as u32).max(1);
                off = off.div_ceil(al) * al;
                let sz = d.size() as u32;
                infos.push(ParamInfo { offset: off, size: sz, align: al });
                names.push((d.name.clone(), off, sz));
                off += sz;
            }
            self.kparams[fi as usize] = names;
            let info = KernelInfo {
                name: name.clone(),
                params: infos,
                param_bytes: off,
                static_shared_bytes: 0,
                local_bytes: 0,
                max_threads_per_block: maxntid,
                num_regs: nregs_hint,
                uses_grid_sync: false,
            };
            match self.kernel_of[fi as usize] {
                Some(k) => self.prog.kernels[k] = info,
                None => {
                    self.kernel_of[fi as usize] = Some(self.prog.kernels.len());
                    self.prog.kernels.push(info);
                    self.prog.kernel_funcs.push(fi);
                }
            }
        }
        if p.eat_punct(';') || extern_ {
            p.eat_punct(';');
            return Ok(());
        }
        // Body: remember the token range for pass 2.
        if !p.is_punct('{') {
            return Err(perr(p.line(), format!("expected function body of `{name}`")));
        }
        let st = p.i;
        let mut depth = 0;
        loop {
            let t = p.next()?;
            if t == Tok::Punct('{') {
                depth += 1;
            } else if t == Tok::Punct('}') {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
        }
        if define {
            self.bodies.push((self.module, fi, st + 1, p.i - 1));
        }
        Ok(())
    }

    /// Frame layout of function `fi`'s formals: return values, then parameters, each aligned.
    fn set_formals(&mut self, fi: u32, rets: &[Decl], params: &[Decl]) {
        let mut off = 0u32;
        let mut formals = Vec::new();
        let mut ret_offs = Vec::new();
        let mut param_offs = Vec::new();
        for (is_ret, d) in rets.iter().map(|d| (true, d)).chain(params.iter().map(|d| (false, d))) {
            let al = d.align.unwrap_or_else(|| d.elem_size() as u32).max(1);
            off = off.div_ceil(al) * al;
            let sz = d.size() as u32;
            formals.push((d.name.clone(), off, sz));
            if is_ret {
                ret_offs.push((off, sz));
            } else {
                param_offs.push((off, sz));
            }
            off += sz;
        }
        let f = &mut self.prog.funcs[fi as usize];
        f.frame_bytes = off;
        f.ret_offs = ret_offs;
        f.param_offs = param_offs;
        self.formals[fi as usize] = formals;
    }

    fn param_list(p: &mut P) -> Result<Vec<Decl>, ParseError> {
        p.expect_punct('(')?;
        let mut v = Vec::new();
        while !p.eat_punct(')') {
            v.push(Self::decl(p)?);
            p.eat_punct(',');
        }
        Ok(v)
    }

    /// Decode one function body. A form the decoder rejects fails only this function: its
    /// body becomes one `Unsupported` instruction, and kernels that can reach it are refused
    /// at launch with the form, the line and the function (docs/ptx-engine.md).
    fn body(&mut self, p0: &P, fi: u32, st: usize, en: usize) {
        let code_len = self.prog.code.len();
        let Err(e) = self.body_inner(p0, fi, st, en) else { return };
        self.prog.code.truncate(code_len);
        let why = format!("{} (PTX line {}, in function `{}`)", e.msg, e.line, self.prog.funcs[fi as usize].name);
        self.reject(fi, e.line as u32, why);
    }

    /// Function `fi` cannot run: its body becomes one `Unsupported` instruction saying why,
    /// and kernels that can reach it are refused at launch (`per_kernel`).
    fn reject(&mut self, fi: u32, line: u32, why: String) {
        let code_len = self.prog.code.len();
        let f = &mut self.prog.funcs[fi as usize];
        f.entry = code_len as u32;
        f.nregs = 1;
        f.local_bytes = 0;
        f.rejected = Some(why.clone());
        self.prog.messages.push(why);
        let aux = (self.prog.messages.len() - 1) as u32;
        self.prog.code.push(Inst { op: Op::Unsupported, aux, ..nop(line) });
        self.prog.code.push(Inst { op: Op::Ret, ..nop(0) });
    }

    fn body_inner(&mut self, p0: &P, fi: u32, st: usize, en: usize) -> Result<(), ParseError> {
        self.cur_func = fi;
        let mut p = P { toks: p0.toks[st..en].to_vec(), i: 0 };
        let mut names: HashMap<String, Sym> = HashMap::new();
        let mut nregs = 0u32;
        let f = &self.prog.funcs[fi as usize];
        let mut frame = f.frame_bytes;
        // Each call gets its own `.local` frame; offsets are relative to it.
        let mut local_cur = 0u64;
        for (n, off, _) in &self.formals[fi as usize] {
            names.insert(n.clone(), Sym::FParam(*off));
        }
        for (n, off, _) in &self.kparams[fi as usize] {
            names.insert(n.clone(), Sym::KParam(*off));
        }
        // Pre-pass: labels, so forward branches resolve.
        let entry = self.prog.code.len() as u32;
        let mut pc = entry;
        while p.peek().is_some() {
            if p.eat_punct('{') || p.eat_punct('}') || p.eat_punct(';') {
                continue;
            }
            if let (Some(Tok::Word(w)), Some(Tok::Punct(':'))) = (p.peek().cloned(), p.peek_at(1)) {
                p.i += 2;
                names.insert(w, Sym::Label(pc));
                continue;
            }
            let w = p.peek_word().unwrap_or("");
            if w == ".loc" || w == ".file" {
                p.skip_line();
                continue;
            }
            let stmt = !w.starts_with('.');
            p.skip_to_semi();
            pc += u32::from(stmt);
        }
        // Declarations and instructions in order. Declarations inside `{ }` (nvcc's call
        // sequences) end with their block: two call sequences may both declare `param0`, with
        // different types and so at different frame offsets.
        p.i = 0;
        let mut blocks: Vec<Vec<(String, Option<Sym>)>> = Vec::new();
        let declare = |names: &mut HashMap<String, Sym>, blocks: &mut Vec<Vec<(String, Option<Sym>)>>, n: String, sym: Sym| {
            let prev = names.insert(n.clone(), sym);
            if let Some(b) = blocks.last_mut() {
                b.push((n, prev));
            }
        };
        while p.peek().is_some() {
            if p.eat_punct('{') {
                blocks.push(Vec::new());
                continue;
            }
            if p.eat_punct('}') {
                for (n, prev) in blocks.pop().unwrap_or_default().into_iter().rev() {
                    match prev {
                        Some(s) => names.insert(n, s),
                        None => names.remove(&n),
                    };
                }
                continue;
            }
            if p.eat_punct(';') {
                continue;
            }
            if let (Some(Tok::Word(_)), Some(Tok::Punct(':'))) = (p.peek(), p.peek_at(1)) {
                p.i += 2;
                continue;
            }
            let line = p.line();
            let w = p.peek_word().unwrap_or("").to_string();
            if w == ".callprototype" {
                // `prototype_3 : .callprototype (.param .b32 _) _ (...);` — the signature of an
                // indirect call; the callee's own formals give the sizes at the call.
                p.skip_to_semi();
                continue;
            }
            if w.starts_with('.') && w != ".pragma" && w != ".loc" && w != ".file" {
                let d = Self::decl(&mut p)?;
                let al = d.align.unwrap_or_else(|| d.elem_size() as u32).max(1) as u64;
                match d.space.as_deref() {
                    Some(".reg") => {
                        if let Some(n) = d.range {
                            for k in 0..n {
                                declare(&mut names, &mut blocks, format!("{}{}", d.name, k), Sym::Reg(nregs));
                                nregs += 1;
                            }
                        } else {
                            declare(&mut names, &mut blocks, d.name.clone(), Sym::Reg(nregs));
                            nregs += 1;
                            while p.eat_punct(',') {
                                let n = p.word()?;
                                declare(&mut names, &mut blocks, n, Sym::Reg(nregs));
                                nregs += 1;
                            }
                        }
                    }
                    Some(".param") => {
                        let a = al as u32;
                        frame = frame.div_ceil(a) * a;
                        declare(&mut names, &mut blocks, d.name.clone(), Sym::FParam(frame));
                        frame += d.size() as u32;
                    }
                    Some(".local") => {
                        let off = local_cur.div_ceil(al) * al;
                        local_cur = off + d.size();
                        declare(&mut names, &mut blocks, d.name.clone(), Sym::Local(off));
                    }
                    Some(".shared") => {
                        let v = if d.extern_ || d.count == Some(0) { DYN_SHARED } else { self.shared_var(d.size(), al) };
                        declare(&mut names, &mut blocks, d.name.clone(), Sym::Shared(v));
                    }
                    Some(s) => return Err(perr(line, format!("unsupported declaration `{s}` in a function"))),
                    None => return Err(perr(line, "declaration without state space")),
                }
                p.skip_to_semi();
                continue;
            }
            if w == ".pragma" {
                p.skip_to_semi();
                continue;
            }
            if w == ".loc" || w == ".file" {
                // Line information (`-lineinfo`, `-G`): no `;`, ends with the line.
                p.skip_line();
                continue;
            }
            let s = p.i;
            p.skip_to_semi();
            let toks = &p.toks[s..p.i];
            let inst = self.instruction(toks, &names).map_err(|m| perr(toks[0].1, m))?;
            self.prog.code.push(inst);
        }
        // Falling off the end returns.
        self.prog.code.push(Inst { op: Op::Ret, ..nop(0) });
        let f = &mut self.prog.funcs[fi as usize];
        f.entry = entry;
        f.nregs = nregs + 1; // + the carry flag
        f.frame_bytes = frame;
        f.local_bytes = local_cur.div_ceil(16) * 16;
        self.local_cur += f.local_bytes;
        if let Some(k) = self.kernel_of[fi as usize] {
            if self.prog.kernels[k].num_regs == 0 {
                self.prog.kernels[k].num_regs = nregs.min(255);
            }
        }
        Ok(())
    }

    fn instruction(&mut self, toks: &[(Tok, u32)], names: &HashMap<String, Sym>) -> Result<Inst, String> {
        let line = toks[0].1;
        let mut p = P { toks: toks.to_vec(), i: 0 };
        let mut guard = None;
        if p.eat_punct('@') {
            let neg = p.eat_punct('!');
            let r = p.word().map_err(|e| e.msg)?;
            match names.get(&r) {
                Some(Sym::Reg(i)) => guard = Some((*i, neg)),
                _ => return Err(format!("unknown guard predicate `{r}`")),
            }
        }
        let opw = p.word().map_err(|e| e.msg)?;
        // Operands, comma separated, until `;`.
        let mut ops: Vec<Opd> = Vec::new();
        let mut d2 = Opd::None;
        let mut call_parts: Vec<Vec<String>> = Vec::new();
        let mut call_name = None;
        let is_call = opw.starts_with("call");
        while !p.is_punct(';') && p.peek().is_some() {
            if is_call {
                if p.is_punct('(') {
                    p.next().map_err(|e| e.msg)?;
                    let mut v = Vec::new();
                    while !p.eat_punct(')') {
                        v.push(p.word().map_err(|e| e.msg)?);
                        p.eat_punct(',');
                    }
                    call_parts.push(v);
                } else if let Some(w) = p.peek_word().map(str::to_string) {
                    p.next().map_err(|e| e.msg)?;
                    // The first name is the callee; one after the arguments is an indirect
                    // call's prototype.
                    if call_name.is_none() {
                        call_name = Some((w, call_parts.len()));
                    }
                } else {
                    p.next().map_err(|e| e.msg)?;
                }
                p.eat_punct(',');
                continue;
            }
            let o = self.operand(&mut p, names)?;
            if p.eat_punct('|') {
                d2 = self.operand(&mut p, names)?;
            }
            ops.push(o);
            if !p.eat_punct(',') {
                break;
            }
        }
        let mut inst = decode_opcode(&opw, line, &mut self.prog.messages)?;
        inst.guard = guard;
        inst.d2 = d2;
        if is_call {
            let (name, pos) = call_name.ok_or("call without target")?;
            let (rets, args) = if pos == 0 {
                (Vec::new(), call_parts.first().cloned().unwrap_or_default())
            } else {
                (call_parts.first().cloned().unwrap_or_default(), call_parts.get(1).cloned().unwrap_or_default())
            };
            let target = match name.as_str() {
                "vprintf" => CallTarget::Extern(Extern::Vprintf),
                "__assertfail" | "__assert_fail" => CallTarget::Extern(Extern::AssertFail),
                "malloc" => CallTarget::Extern(Extern::Malloc),
                "free" => CallTarget::Extern(Extern::Free),
                "cudaGraphSetConditional" => CallTarget::Extern(Extern::GraphSetConditional),
                n if n.starts_with('%') => match names.get(n) {
                    Some(Sym::Reg(r)) => {
                        self.indirect_callers.push(self.cur_func);
                        CallTarget::Indirect(*r)
                    }
                    _ => return Err(format!("indirect call through `{n}`, which is not a register")),
                },
                _ => match self.scopes[self.module].funcs.get(&name) {
                    Some(&f) => CallTarget::Func(f),
                    None => return Err(format!("call to unknown function `{name}`")),
                },
            };
            let slot = |n: &String| -> Result<(u32, u32), String> {
                match names.get(n) {
                    Some(Sym::FParam(o)) => Ok((*o, 0)),
                    _ => Err(format!("call argument `{n}` is not a declared .param")),
                }
            };
            let rets = rets.iter().map(slot).collect::<Result<Vec<_>, _>>()?;
            let args = args.iter().map(slot).collect::<Result<Vec<_>, _>>()?;
            // Sizes come from the callee's formals (externs: 8-byte pointers / 4-byte ints).
            let (rets, args) = match target {
                CallTarget::Func(f) => {
                    let func = &self.prog.funcs[f as usize];
                    (
                        rets.iter().zip(&func.ret_offs).map(|(r, f)| (r.0, f.1)).collect(),
                        args.iter().zip(&func.param_offs).map(|(a, f)| (a.0, f.1)).collect(),
                    )
                }
                // Sizes from the callee's formals when it is known, at the call.
                CallTarget::Indirect(_) => (rets, args),
                // vprintf returns an int, malloc a pointer; arguments are pointers or sizes.
                CallTarget::Extern(e) => {
                    let rsize = if e == Extern::Malloc { 8 } else { 4 };
                    // cudaGraphSetConditional(handle: u64, value: u32).
                    let asize = |k: usize| if e == Extern::GraphSetConditional && k == 1 { 4 } else { 8 };
                    (
                        rets.iter().map(|r| (r.0, rsize)).collect(),
                        args.iter().enumerate().map(|(k, a)| (a.0, asize(k))).collect(),
                    )
                }
            };
            if let CallTarget::Func(f) = target {
                self.call_edges.push((self.cur_func, f));
            }
            self.prog.calls.push(CallSite { target, rets, args });
            inst.aux = (self.prog.calls.len() - 1) as u32;
            return Ok(inst);
        }
        let mut it = ops.into_iter();
        let mut take = || it.next().unwrap_or(Opd::None);
        match inst.op {
            Op::St | Op::Red => {
                inst.a = take();
                inst.b = take();
                inst.c = take();
            }
            Op::Bra => {
                inst.a = take();
            }
            Op::Bar | Op::BarArrive | Op::BarWarp | Op::Ret | Op::Exit | Op::Trap | Op::Nop => {
                inst.a = take();
                inst.b = take();
            }
            _ => {
                inst.d = take();
                inst.a = take();
                inst.b = take();
                inst.c = take();
                inst.e = take();
            }
        }
        if inst.op == Op::Unsupported {
            return Ok(inst);
        }
        if matches!(inst.a, Opd::Sreg(Sreg::Envreg(1)) | Opd::Sreg(Sreg::Envreg(2))) {
            self.envreg_users.push(self.cur_func);
        }
        Ok(inst)
    }

    fn operand(&mut self, p: &mut P, names: &HashMap<String, Sym>) -> Result<Opd, String> {
        let e = |e: ParseError| e.msg;
        if p.eat_punct('{') {
            let mut v = Vec::new();
            while !p.eat_punct('}') {
                v.push(self.operand(p, names)?);
                p.eat_punct(',');
            }
            return Ok(Opd::Vec(v));
        }
        if p.eat_punct('[') {
            // Address: [reg], [reg+imm], [sym], [sym+imm], [imm], or tex [h, {c}].
            let first = self.operand(p, names)?;
            if p.eat_punct(',') {
                let c = self.operand(p, names)?;
                p.expect_punct(']').map_err(e)?;
                return Ok(Opd::Tex(Box::new(first), Box::new(c)));
            }
            let mut off = 0i64;
            while p.is_punct('+') || p.is_punct('-') {
                let neg = p.eat_punct('-');
                if !neg {
                    p.next().map_err(e)?;
                }
                let v = p.int().map_err(e)?;
                off = off.wrapping_add(if neg { v.wrapping_neg() } else { v });
            }
            p.expect_punct(']').map_err(e)?;
            return Ok(match first {
                Opd::Reg(r) => Opd::Addr(Base::Reg(r), off),
                Opd::Imm(v) => Opd::Addr(Base::None, (v as i64).wrapping_add(off)),
                Opd::GlobalSym(g) => Opd::Addr(Base::Global(g), off),
                Opd::SharedSym(v) => Opd::Addr(Base::Shared(v), off),
                Opd::Addr(b, o) => Opd::Addr(b, o.wrapping_add(off)),
                o => return Err(format!("bad address operand {o:?}")),
            });
        }
        if p.eat_punct('!') {
            return match self.operand(p, names)? {
                Opd::Reg(r) => Ok(Opd::NotReg(r)),
                o => Err(format!("`!` before non-register {o:?}")),
            };
        }
        let neg = p.eat_punct('-');
        let w = p.word().map_err(e)?;
        if w == "_" {
            return Ok(Opd::Sink);
        }
        // `warpSize` in device code: nvcc emits the PTX constant `WARP_SZ`.
        if w == "WARP_SZ" {
            return Ok(Opd::Imm(32));
        }
        if let Some(s) = sreg(&w) {
            return Ok(Opd::Sreg(s));
        }
        if let Some(sym) = names.get(&w).or_else(|| self.scopes[self.module].globals.get(&w)).copied() {
            if let Sym::Global(g) = sym {
                if self.link.unresolved_vars.contains(&g) {
                    return Err(format!("unresolved extern variable `{w}`: no PTX module of the program defines it"));
                }
            }
            let o = match sym {
                Sym::Reg(r) => Opd::Reg(r),
                Sym::KParam(o) => Opd::Addr(Base::None, o as i64),
                Sym::FParam(o) => Opd::Addr(Base::None, (FRAME_PARAM_BASE + o as u64) as i64),
                Sym::Shared(v) => {
                    // Offsets differ per kernel: resolved at launch from its layout.
                    self.shared_refs.push((self.cur_func, v));
                    Opd::SharedSym(v)
                }
                Sym::Local(o) => Opd::Addr(Base::Local, o as i64),
                Sym::Global(g) => Opd::GlobalSym(g),
                Sym::Label(pc) => Opd::Target(pc),
            };
            // Symbols as values (`mov.u64 %rd1, sym`) are plain numbers.
            return Ok(match o {
                Opd::Addr(Base::None, v) if !p.is_punct(']') && !p.is_punct('+') => Opd::Imm(v as u64),
                o => o,
            });
        }
        // A device function as a value (`mov.u64 %rd1, _Z3addii`): its address value.
        if let Some(&f) = self.scopes[self.module].funcs.get(&w) {
            self.address_taken.push(f);
            return Ok(Opd::Imm(crate::ir::func_addr(f)));
        }
        if let Some((v, _)) = parse_imm(&w) {
            return Ok(Opd::Imm(if neg {
                if w.starts_with("0f") || w.starts_with("0F") {
                    v ^ 0x8000_0000
                } else if w.starts_with("0d") || w.starts_with("0D") || w.contains('.') {
                    v ^ (1 << 63)
                } else {
                    v.wrapping_neg()
                }
            } else {
                v
            }));
        }
        // A label not seen (forward reference to a label resolved in the pre-pass is in
        // `names`); anything else is an error.
        Err(format!("unknown operand `{w}`"))
    }
}

enum InitVal {
    Int(u64),
    Float(f64),
    F32Bits(u64),
    F64Bits(u64),
    /// `generic(sym)` or a bare symbol: a function's address value, else (the address of a
    /// variable, not known before the backend allocates it) zero.
    Sym(String),
}

fn sreg(w: &str) -> Option<Sreg> {
    let dim = |s: &str| match s {
        "x" => Some(0u8),
        "y" => Some(1),
        "z" => Some(2),
        _ => None,
    };
    if let Some((a, b)) = w.split_once('.') {
        let d = dim(b)?;
        return Some(match a {
            "%tid" => Sreg::Tid(d),
            "%ntid" => Sreg::Ntid(d),
            "%ctaid" => Sreg::Ctaid(d),
            "%nctaid" => Sreg::Nctaid(d),
            _ => return None,
        });
    }
    Some(match w {
        "%tid" => Sreg::Tid(0),
        "%laneid" => Sreg::Laneid,
        "%warpid" => Sreg::Warpid,
        "%nwarpid" => Sreg::Nwarpid,
        "%smid" => Sreg::Smid,
        "%nsmid" => Sreg::Nsmid,
        "%gridid" => Sreg::Gridid,
        "%lanemask_eq" => Sreg::LanemaskEq,
        "%lanemask_lt" => Sreg::LanemaskLt,
        "%lanemask_le" => Sreg::LanemaskLe,
        "%lanemask_gt" => Sreg::LanemaskGt,
        "%lanemask_ge" => Sreg::LanemaskGe,
        "%clock" => Sreg::Clock,
        "%clock64" => Sreg::Clock64,
        "%globaltimer" | "%globaltimer_lo" => Sreg::Globaltimer,
        "%dynamic_smem_size" => Sreg::DynSmemSize,
        "%total_smem_size" => Sreg::TotalSmemSize,
        "%aggr_smem_size" => Sreg::AggrSmemSize,
        "%reserved_smem_offset_begin" => Sreg::ReservedBegin,
        "%reserved_smem_offset_end" => Sreg::ReservedEnd,
        "%reserved_smem_offset_cap" => Sreg::ReservedCap,
        "%reserved_smem_offset_0" => Sreg::ReservedOffset(0),
        "%reserved_smem_offset_1" => Sreg::ReservedOffset(1),
        _ => {
            let n = w.strip_prefix("%envreg")?.parse::<u8>().ok()?;
            Sreg::Envreg(n)
        }
    })
}

pub(crate) fn nop(line: u32) -> Inst {
    Inst {
        op: Op::Nop,
        ty: Ty::B32,
        ty2: Ty::B32,
        m: Mods::default(),
        guard: None,
        d: Opd::None,
        d2: Opd::None,
        a: Opd::None,
        b: Opd::None,
        c: Opd::None,
        e: Opd::None,
        aux: 0,
        line,
    }
}

/// Split `opcode.mod.mod.type` into an [`Inst`] skeleton.
fn decode_opcode(w: &str, line: u32, messages: &mut Vec<String>) -> Result<Inst, String> {
    let mut parts = w.split('.');
    let base = parts.next().unwrap_or("");
    let mut inst = nop(line);
    let unsupported = |inst: &mut Inst, messages: &mut Vec<String>, what: String| {
        inst.op = Op::Unsupported;
        messages.push(what);
        inst.aux = (messages.len() - 1) as u32;
    };
    inst.op = match base {
        "mov" => Op::Mov,
        "add" => Op::Add,
        "sub" => Op::Sub,
        "mul" => Op::Mul,
        "mad" => Op::Mad,
        "fma" => Op::Fma,
        "div" => Op::Div,
        "rem" => Op::Rem,
        "abs" => Op::Abs,
        "neg" => Op::Neg,
        "min" => Op::Min,
        "max" => Op::Max,
        "and" => Op::And,
        "or" => Op::Or,
        "xor" => Op::Xor,
        "not" => Op::Not,
        "cnot" => Op::Cnot,
        "shl" => Op::Shl,
        "shr" => Op::Shr,
        "selp" => Op::Selp,
        "slct" => Op::Slct,
        "setp" => Op::Setp,
        "set" => Op::Set,
        "cvt" => Op::Cvt,
        "cvta" => Op::Cvta,
        "ld" | "ldu" => Op::Ld,
        "st" => Op::St,
        "bra" => Op::Bra,
        "ret" => Op::Ret,
        "exit" => Op::Exit,
        "call" => Op::Call,
        "bar" | "barrier" => {
            if w.contains(".warp") {
                Op::BarWarp
            } else if w.contains(".red") {
                Op::BarRed
            } else if w.contains(".arrive") {
                Op::BarArrive
            } else {
                Op::Bar
            }
        }
        "atom" => Op::Atom,
        "red" => Op::Red,
        "vote" => Op::Vote,
        "shfl" => Op::Shfl,
        "activemask" => Op::Activemask,
        "match" => Op::Match,
        "redux" => Op::Redux,
        "rcp" => Op::Rcp,
        "sqrt" => Op::Sqrt,
        "rsqrt" => Op::Rsqrt,
        "ex2" => Op::Ex2,
        "lg2" => Op::Lg2,
        "sin" => Op::Sin,
        "cos" => Op::Cos,
        "tanh" => Op::Tanh,
        "copysign" => Op::Copysign,
        "clz" => Op::Clz,
        "popc" => Op::Popc,
        "brev" => Op::Brev,
        "bfind" => Op::Bfind,
        "bfe" => Op::Bfe,
        "bfi" => Op::Bfi,
        "prmt" => Op::Prmt,
        "shf" => Op::Shf,
        "addc" => Op::Addc,
        "subc" => Op::Subc,
        "madc" => Op::Madc,
        "testp" => Op::Testp,
        "tex" | "tld4" => Op::Tex,
        "suld" if w.starts_with("suld.b.") => Op::Suld,
        "sust" if w.starts_with("sust.b.") => Op::Sust,
        "trap" | "brkpt" => Op::Trap,
        "cp" if w.starts_with("cp.async.mbarrier.arrive") => {
            inst.aux = if w.contains(".noinc") { MB_CP_ARRIVE_NOINC } else { MB_NOP };
            inst.m.space = Space::Shared;
            inst.op = Op::Mbarrier;
            return Ok(inst);
        }
        "cp" if w.starts_with("cp.async.commit_group") || w.starts_with("cp.async.wait") => {
            inst.op = Op::Nop;
            return Ok(inst);
        }
        "cp" if w.starts_with("cp.async.") && !w.contains("bulk") => {
            inst.op = Op::CpAsync;
            return Ok(inst);
        }
        "mbarrier" => {
            let parts: Vec<&str> = w.split('.').collect();
            let has = |m: &str| parts.contains(&m);
            inst.aux = if has("init") {
                MB_INIT
            } else if has("arrive_drop") {
                MB_ARRIVE_DROP
            } else if has("arrive") && !has("expect_tx") {
                MB_ARRIVE
            } else if (has("test_wait") || has("try_wait")) && has("parity") {
                MB_TEST_WAIT_PARITY
            } else if has("test_wait") || has("try_wait") {
                MB_TEST_WAIT
            } else if has("inval") {
                MB_INVAL
            } else if has("pending_count") {
                MB_PENDING_COUNT
            } else {
                unsupported(&mut inst, messages, format!("instruction `{w}`"));
                return Ok(inst);
            };
            inst.m.space = if has("shared") || has("shared::cta") { Space::Shared } else { Space::Generic };
            inst.op = Op::Mbarrier;
            return Ok(inst);
        }
        "membar" | "fence" | "nanosleep" | "prefetch" | "prefetchu" | "pmevent" | "discard" | "griddepcontrol" => Op::Nop,
        "lop3" => Op::Lop3,
        "mul24" => Op::Mul24,
        "mad24" => Op::Mad24,
        "sad" => Op::Sad,
        "dp4a" => Op::Dp4a,
        "dp2a" => Op::Dp2a,
        "isspacep" => Op::Isspacep,
        _ => {
            unsupported(&mut inst, messages, format!("instruction `{w}`"));
            return Ok(inst);
        }
    };
    // Fences, prefetches, sleeps: no effect here, whatever their modifiers.
    if matches!(inst.op, Op::Unsupported | Op::Nop) {
        return Ok(inst);
    }
    let mut types = Vec::new();
    for m in parts {
        if let Some(t) = Ty::parse(m) {
            types.push(t);
            continue;
        }
        let mm = &mut inst.m;
        match m {
            "rn" => mm.rnd = Rnd::Rn,
            "rz" => mm.rnd = Rnd::Rz,
            "rm" => mm.rnd = Rnd::Rm,
            "rp" => mm.rnd = Rnd::Rp,
            "rni" => mm.rnd = Rnd::Rni,
            "rzi" => mm.rnd = Rnd::Rzi,
            "rmi" => mm.rnd = Rnd::Rmi,
            "rpi" => mm.rnd = Rnd::Rpi,
            "ftz" => mm.ftz = true,
            "sat" | "satfinite" => mm.sat = true,
            "cc" => mm.cc = true,
            "hi" => mm.part = Part::Hi,
            "lo" => mm.part = Part::Lo,
            "wide" => mm.part = Part::Wide,
            "global" => mm.space = Space::Global,
            "shared" => mm.space = Space::Shared,
            "local" => mm.space = Space::Local,
            "const" => mm.space = Space::Const,
            "param" => mm.space = Space::Param,
            "to" => mm.to = true,
            "v2" => mm.vec = 2,
            "v4" => mm.vec = 4,
            "eq" => mm.cmp = Cmp::Eq,
            "ne" => mm.cmp = Cmp::Ne,
            "lt" => mm.cmp = Cmp::Lt,
            "le" => mm.cmp = Cmp::Le,
            "gt" => mm.cmp = Cmp::Gt,
            "ge" => mm.cmp = Cmp::Ge,
            "lo_" => {}
            "ls" => mm.cmp = Cmp::Ls,
            "hs" => mm.cmp = Cmp::Hs,
            "equ" => mm.cmp = Cmp::Equ,
            "neu" => mm.cmp = Cmp::Neu,
            "ltu" => mm.cmp = Cmp::Ltu,
            "leu" => mm.cmp = Cmp::Leu,
            "gtu" => mm.cmp = Cmp::Gtu,
            "geu" => mm.cmp = Cmp::Geu,
            "num" => mm.cmp = Cmp::Num,
            "nan" => mm.cmp = Cmp::Nan,
            "and" => mm.sub = Sub::And,
            "or" => mm.sub = Sub::Or,
            "xor" => mm.sub = Sub::Xor,
            "add" => mm.sub = Sub::Add,
            "min" => mm.sub = Sub::Min,
            "max" => mm.sub = Sub::Max,
            "inc" => mm.sub = Sub::Inc,
            "popc" if inst.op == Op::BarRed => mm.sub = Sub::Add,
            "red" if inst.op == Op::BarRed => {}
            "arrive" if inst.op == Op::BarArrive => {}
            "dec" => mm.sub = Sub::Dec,
            "exch" => mm.sub = Sub::Exch,
            "cas" => mm.sub = Sub::Cas,
            "all" => mm.sub = Sub::All,
            "any" => mm.sub = Sub::Any,
            "warp" if inst.op == Op::BarWarp => {}
            "uni" => {
                if inst.op == Op::Vote {
                    mm.sub = Sub::Uni
                }
            }
            "ballot" => mm.sub = Sub::Ballot,
            "up" => mm.sub = Sub::Up,
            "down" => mm.sub = Sub::Down,
            "bfly" => mm.sub = Sub::Bfly,
            "idx" => mm.sub = Sub::Idx,
            "l" => mm.to = true,
            "r" => mm.to = false,
            "wrap" | "shiftamt" => mm.flag = true,
            "clamp" if matches!(inst.op, Op::Suld | Op::Sust) => {
                mm.flag = false;
                mm.clamp = true;
            }
            "clamp" => mm.flag = false,
            "finite" | "infinite" | "number" | "notanumber" | "normal" | "subnormal" => {
                mm.cmp = match m {
                    "finite" => Cmp::Eq,
                    "infinite" => Cmp::Ne,
                    "number" => Cmp::Lt,
                    "notanumber" => Cmp::Le,
                    "normal" => Cmp::Gt,
                    _ => Cmp::Ge,
                }
            }
            // Surface out-of-range handling: `.trap` faults, `.zero` reads zero and drops
            // stores, `.clamp` (above) moves the coordinates to the nearest edge.
            "trap" if matches!(inst.op, Op::Suld | Op::Sust) => mm.flag = true,
            "zero" if matches!(inst.op, Op::Suld | Op::Sust) => mm.flag = false,
            "1d" => mm.geom = 1,
            "2d" => mm.geom = 2,
            "3d" => mm.geom = 3,
            "a1d" => mm.geom = 5,
            "a2d" => mm.geom = 4,
            "cube" => mm.geom = 6,
            "acube" => mm.geom = 7,
            // Mipmapped textures: `tex.level` takes an explicit level of detail, `tex.grad`
            // the coordinates' gradients.
            "level" if inst.op == Op::Tex => mm.lod = 1,
            "grad" if inst.op == Op::Tex => mm.lod = 2,
            // Memory-order, scope, cache and alignment hints: no effect on a sequentially
            // consistent, cache-less emulation.
            "sync" | "aligned" | "volatile" | "relaxed" | "acquire" | "release" | "acq_rel" | "sc" | "cta"
            | "gpu" | "sys" | "cluster" | "nc" | "ca" | "cg" | "cs" | "lu" | "cv" | "wb" | "wt" | "approx"
            | "full" | "uni_" | "noftz" | "ecl" | "b" | "generic" | "pos" | "neg" | "mmio" | "L2" | "u" => {}
            s if s.starts_with("L1::") || s.starts_with("L2::") || s.contains("::") => {}
            s if s.starts_with("shiftamt") => mm.flag = true,
            _ => {
                if inst.op == Op::Bra || inst.op == Op::Call || inst.op == Op::Ret {
                    continue;
                }
                // `lo` in setp compares (unsigned <) is spelled the same as mul's `.lo`.
                unsupported(&mut inst, messages, format!("modifier `.{m}` of `{w}`"));
                return Ok(inst);
            }
        }
    }
    // `setp.lo.u32` means unsigned less-than: part=Lo was set; map for compares.
    if matches!(inst.op, Op::Setp | Op::Set) && w.split('.').any(|m| m == "lo") {
        inst.m.cmp = Cmp::Lo;
    }
    if matches!(inst.op, Op::Setp | Op::Set) && w.split('.').any(|m| m == "hi") {
        inst.m.cmp = Cmp::Hi;
    }
    match types.len() {
        0 => {}
        1 => {
            inst.ty = types[0];
            inst.ty2 = types[0];
        }
        _ => {
            inst.ty = types[0];
            inst.ty2 = types[1];
        }
    }
    // `set.dtype.stype`, `cvt.dtype.stype`, `tex.geom.v4.dtype.ctype`, `slct.dtype.s32`:
    // the first type is the destination, the second the source/selector.
    if inst.op == Op::Setp && types.len() == 1 {
        inst.ty2 = types[0];
    }
    if matches!(inst.op, Op::Set) && types.len() == 2 {
        // dst type first, compare type second
    }
    Ok(inst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imm_forms_decode_to_bits() {
        assert_eq!(parse_imm("0f3F800000"), Some((0x3F80_0000, true)));
        assert_eq!(parse_imm("0d3FF0000000000000"), Some((0x3FF0_0000_0000_0000, true)));
        assert_eq!(parse_imm("0x10"), Some((16, false)));
        assert_eq!(parse_imm("42"), Some((42, false)));
    }

    #[test]
    fn opcode_words_split_into_op_type_and_modifiers() {
        let mut msgs = Vec::new();
        let i = decode_opcode("cvt.rzi.s32.f32", 1, &mut msgs).unwrap();
        assert_eq!((i.op, i.ty, i.ty2, i.m.rnd), (Op::Cvt, Ty::S32, Ty::F32, Rnd::Rzi));
        let i = decode_opcode("setp.geu.f32", 1, &mut msgs).unwrap();
        assert_eq!((i.op, i.ty, i.m.cmp), (Op::Setp, Ty::F32, Cmp::Geu));
        let i = decode_opcode("atom.global.cas.b32", 1, &mut msgs).unwrap();
        assert_eq!((i.op, i.m.space, i.m.sub), (Op::Atom, Space::Global, Sub::Cas));
        let i = decode_opcode("frobnicate.b32", 1, &mut msgs).unwrap();
        assert_eq!(i.op, Op::Unsupported);
    }

    #[test]
    fn kernel_params_and_registers_resolve() {
        let src = r#"
.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 k_param_0, .param .align 8 .b8 k_param_1[24], .param .u32 k_param_2)
.maxntid 256, 1, 1
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [k_param_0];
  ld.param.u32 %r1, [k_param_1+4];
  ld.param.u32 %r2, [k_param_2];
  ret;
}
"#;
        let prog = parse_module(src).unwrap();
        let k = &prog.kernels[0];
        assert_eq!(k.params.iter().map(|p| (p.offset, p.size)).collect::<Vec<_>>(), vec![(0, 8), (8, 24), (32, 4)]);
        assert_eq!(k.param_bytes, 36);
        assert_eq!(k.max_threads_per_block, Some(256));
        assert_eq!(prog.code[1].a, Opd::Addr(Base::None, 12));
        assert_eq!(prog.code[0].d, Opd::Reg(5)); // %r0..%r3, then %rd0, %rd1
    }

    #[test]
    fn managed_variables_parse_with_their_attribute() {
        let src = r#"
.version 8.0
.target sm_80
.address_size 64
.global .attribute(.managed) .align 4 .u32 counter;
.global .attribute(.managed) .align 8 .b8 table[24] = {1, 2, 3};
.global .align 4 .u32 plain;
.visible .entry k()
{
	ret;
}
"#;
        let m = crate::Module::parse(src).expect("managed declarations parse");
        let g: Vec<(&str, u64, bool)> = m.globals().iter().map(|g| (g.name.as_str(), g.size, g.managed)).collect();
        assert_eq!(g, vec![("counter", 4, true), ("table", 24, true), ("plain", 4, false)]);
        assert_eq!(m.globals()[1].init[..4], [1, 2, 3, 0]);
    }

    #[test]
    fn grid_sync_use_is_found_through_calls_and_per_kernel() {
        let src = r#"
.func sync()
{
  .reg .b32 %r1;
  mov.u32 %r1, %envreg1;
  ret;
}
.visible .entry a() { call.uni sync, (); ret; }
.visible .entry b() { ret; }
"#;
        let prog = parse_module(src).unwrap();
        let by_name = |n: &str| prog.kernels.iter().find(|k| k.name == n).unwrap().uses_grid_sync;
        assert!(by_name("a"));
        assert!(!by_name("b"));
    }

    #[test]
    fn pointer_param_alignment_attribute_does_not_change_the_layout() {
        for src in [
            ".visible .entry k(.param .u32 n, .param .u64 .ptr .global .align 1 p) { ret; }",
            ".visible .entry k(.param .u32 n, .param .u64 .ptr.global.align 16 p) { ret; }",
        ] {
            let prog = parse_module(src).unwrap();
            let offs: Vec<(u32, u32)> = prog.kernels[0].params.iter().map(|p| (p.offset, p.size)).collect();
            assert_eq!(offs, vec![(0, 4), (8, 8)]);
        }
    }

    #[test]
    fn module_variables_keep_initializers() {
        let src = r#"
.global .align 1 .b8 $str[3] = {104, 105, 0};
.const .align 4 .b32 tab[2] = {7, 9};
.const .align 4 .f32 one = 0f3F800000;
"#;
        let prog = parse_module(src).unwrap();
        assert_eq!(prog.globals[0].init, b"hi\0");
        assert_eq!(prog.globals[1].init, [7, 0, 0, 0, 9, 0, 0, 0]);
        assert_eq!(prog.globals[2].init, 1.0f32.to_bits().to_le_bytes());
        assert_eq!(prog.globals[1].space, StateSpace::Const);
    }
    /// Every opcode form of tiers 1 and 2 of the nvcc 13.5 census
    /// (`shared/reference/ptx-survey/tiers.txt`) decodes to a supported operation.
    #[test]
    fn every_tier1_and_tier2_form_decodes() {
        const FORMS: &str = "abs.f32 abs.s32 add.f32 add.f64 add.s32 add.s64 and.b16 and.b32 and.b64 and.pred atom.global.add.u32 atom.global.or.b32 atom.shared.add.u32 atom.shared.or.b32 bar.sync bra bra.uni copysign.f32 cvt.f64.f32 cvt.rn.f32.f64 cvt.rn.f32.s32 cvt.rn.f32.u16 cvt.rn.f32.u32 cvt.rzi.s32.f32 cvt.rzi.u32.f32 cvt.s64.s32 cvt.sat.f32.f32 cvt.u32.u64 cvt.u64.u32 cvta.to.global.u64 div.rn.f32 div.s32 ex2.approx.ftz.f32 fma.rm.f32 fma.rn.f32 fma.rn.f64 ld.const.f32 ld.const.u32 ld.const.u64 ld.const.v2.u32 ld.global.f32 ld.global.s32 ld.global.u32 ld.global.u64 ld.global.u8 ld.param.f32 ld.param.u32 ld.param.u64 ld.shared.f32 ld.shared.u32 ld.shared.u8 ld.volatile.shared.u32 mad.lo.s32 max.s32 max.u32 min.s32 min.u32 mov.b32 mov.f32 mov.f64 mov.pred mov.u16 mov.u32 mov.u64 mul.f32 mul.f64 mul.hi.s32 mul.lo.s32 mul.lo.s64 mul.wide.s32 mul.wide.u16 mul.wide.u32 neg.f32 neg.s32 neg.s64 not.b32 not.pred or.b32 or.b64 or.pred rcp.approx.ftz.f32 rcp.rn.f32 rcp.rn.f64 rem.s32 ret selp.b32 selp.f32 selp.u16 selp.u32 setp.eq.b32 setp.eq.f32 setp.eq.s16 setp.eq.s32 setp.eq.s64 setp.ge.f32 setp.ge.s32 setp.ge.s64 setp.ge.u32 setp.geu.f32 setp.gt.f32 setp.gt.s32 setp.gt.u32 setp.le.f32 setp.le.s32 setp.le.u32 setp.leu.f32 setp.lt.f32 setp.lt.s32 setp.lt.s64 setp.lt.u32 setp.lt.u64 setp.ne.s16 setp.ne.s32 setp.ne.s64 shl.b32 shl.b64 shr.s32 shr.u32 shr.u64 sqrt.rn.f32 st.global.f32 st.global.u32 st.global.u64 st.global.u8 st.global.v4.f32 st.shared.f32 st.shared.u32 st.volatile.shared.u32 sub.f32 sub.f64 sub.s32 sub.s64 tex.1d.v4.f32.s32 vote.sync.all.pred vote.sync.any.pred xor.pred abs.f64 add.cc.u32 add.rn.f32 add.rn.f64 add.u64 addc.cc.u32 addc.u32 atom.global.and.b32 atom.global.cas.b32 atom.global.dec.u32 atom.global.exch.b32 atom.global.inc.u32 atom.global.max.s32 atom.global.min.s32 atom.global.xor.b32 bfi.b32 call.uni clz.b64 cvt.rn.f64.s32 cvt.rni.f32.f32 cvt.rni.s32.f64 cvt.rpi.f64.f64 cvt.rzi.f32.f32 cvt.rzi.f64.f64 cvt.rzi.s32.f64 cvt.s32.s8 cvt.u16.u32 cvt.u32.u16 div.approx.f32 div.rn.f64 fma.rz.f32 ld.const.f64 ld.global.f64 ld.global.nc.u64 ld.global.nc.v2.f64 ld.global.u16 ld.local.u64 ld.param.b32 ld.param.f64 ld.shared.f64 mad.lo.cc.u32 madc.hi.cc.u32 madc.hi.u32 madc.lo.cc.u32 min.f32 mov.b64 mul.hi.u32 mul.lo.u32 mul.rn.f32 mul.rn.f64 neg.f64 or.b16 prmt.b32 rcp.approx.ftz.f64 selp.b16 selp.b64 selp.f64 selp.u64 setp.eq.f64 setp.ge.f64 setp.gt.f64 setp.gt.s64 setp.gtu.f32 setp.gtu.f64 setp.le.s64 setp.lt.f64 setp.ltu.f32 setp.ltu.f64 setp.neu.f32 setp.neu.f64 shl.b16 sqrt.rn.f64 st.global.f64 st.global.u16 st.global.v2.u32 st.local.u64 st.param.b32 st.param.f64 st.shared.f64 st.shared.u64 sub.cc.u32 subc.cc.u32 subc.u32 tex.2d.v4.u32.f32 xor.b32";
        let mut msgs = Vec::new();
        for f in FORMS.split_whitespace() {
            let i = decode_opcode(f, 1, &mut msgs).unwrap();
            assert_ne!(i.op, Op::Unsupported, "{f}: {:?}", msgs.last());
        }
    }

    /// The census forms seen only in the CUDA samples decode too.
    #[test]
    fn sample_only_forms_decode() {
        const FORMS: &str = "add.f16x2 atom.add.release.gpu.u32 atom.global.sys.add.u32 atom.global.sys.and.b32 atom.global.sys.cas.b32 atom.global.sys.dec.u32 atom.global.sys.exch.b32 atom.global.sys.inc.u32 atom.global.sys.max.s32 atom.global.sys.min.s32 atom.global.sys.or.b32 atom.global.sys.xor.b32 atom.shared.exch.b32 bar.warp.sync barrier.sync bfi.b64 clz.b32 cvt.f32.f16 cvt.rn.f16.f32 cvt.rn.f64.s64 cvt.rni.s32.f32 cvta.global.u64 cvta.local.u64 div.u32 fma.rn.f16x2 ld.acquire.gpu.u32 ld.local.u32 ld.param.s8 ld.shared.u64 ld.shared.v2.u16 mad.wide.u32 max.f32 mbarrier.arrive.shared.b64 mbarrier.init.shared.b64 mbarrier.test_wait.shared.b64 mul.f16x2 nanosleep.u32 popc.b32 rem.u32 setp.ge.u64 shfl.sync.down.b32 shr.s64 st.local.u32 st.local.v2.u32 st.param.b64 st.shared.v2.u16 sust.b.2d.b32.trap tex.2d.v4.f32.f32 tex.3d.v4.f32.f32 tex.a2d.v4.f32.f32 tex.cube.v4.f32.f32 trap activemask.b32 add.s16 atom.add.acquire.cta.u32 atom.add.relaxed.cta.u32 atom.or.acq_rel.cta.b32 bfind.shiftamt.u32 brev.b32 call cp.async.ca.shared.global cp.async.cg.shared.global cp.async.commit_group cp.async.mbarrier.arrive.shared.b64 cp.async.wait_group cvt.rn.f32.s16 cvt.s32.s16 cvta.shared.u64 div.u16 fence.sc.cta ld.acquire.cta.u32 ld.f32 ld.f64 ld.global.nc.f32 ld.global.nc.f64 ld.global.nc.u32 ld.global.v4.u32 ld.param.b64 ld.param.s16 ld.param.u16 ld.param.u8 ld.relaxed.cta.b32 ld.shared.v2.f64 ld.shared.v4.f32 ld.shared.v4.u32 ld.u32 ld.volatile.shared.f32 match.any.sync.b32 match.any.sync.b64 mbarrier.inval.shared.b64 mbarrier.test_wait.parity.shared.b64 membar.gl mul.lo.s16 not.b16 red.and.release.cta.b32 redux.sync.add.s32 redux.sync.max.s32 setp.gt.s16 setp.gt.u64 setp.le.u64 setp.lt.s16 shf.l.wrap.b32 shfl.sync.bfly.b32 shfl.sync.idx.b32 shfl.sync.up.b32 shr.s16 shr.u16 st.f32 st.f64 st.global.v4.u32 st.global.v4.u8 st.local.u8 st.local.v4.u8 st.param.f32 st.relaxed.cta.b32 st.shared.u8 st.shared.v4.u32 st.u32 st.u64 st.volatile.shared.f32 sub.s16 vote.sync.ballot.b32";
        let mut msgs = Vec::new();
        for f in FORMS.split_whitespace() {
            let i = decode_opcode(f, 1, &mut msgs).unwrap();
            assert_ne!(i.op, Op::Unsupported, "{f}: {:?}", msgs.last());
        }
    }

    const SAMPLE: &str = r#"
.version 8.0
.target sm_80
.address_size 64
.global .align 4 .b8 tab[8] = {1, 2, 3, 4, 5, 6, 7, 8};
.extern .shared .align 16 .b8 dyn[];
.func (.param .b32 r) f(.param .b32 a)
{
  .reg .b32 %r<3>;
  ld.param.u32 %r1, [a];
  st.param.b32 [r], %r1;
  ret;
}
.visible .entry k(.param .u64 p, .param .align 8 .b8 s[16])
.maxntid 128, 1, 1
{
  .reg .pred %p<3>;
  .reg .b32 %r<9>;
  .reg .f32 %f<3>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [p];
  mov.u32 %r1, %tid.x;
  setp.lt.and.s32 %p1|%p2, %r1, 4, %p1;
  @!%p1 bra $L__BB0_2;
  mov.f32 %f1, 0f3F800000;
  { .param .b32 a0; st.param.b32 [a0], %r1; .param .b32 r0;
  call.uni (r0), f, (a0); ld.param.b32 %r2, [r0]; }
  mov.b64 %rd2, {%r1, %r2};
  st.shared.u32 [dyn+4], %r2;
$L__BB0_2:
  ret;
}
"#;

    #[test]
    fn sample_with_calls_vectors_and_dynamic_shared_parses() {
        let prog = parse_module(SAMPLE).unwrap();
        assert_eq!((prog.version, prog.target), (Some((8, 0)), Some(80)));
        assert_eq!(prog.kernels.len(), 1);
        assert_eq!(prog.kernels[0].max_threads_per_block, Some(128));
        assert_eq!(prog.globals[0].init, [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(prog.calls.len(), 1);
    }

    proptest::proptest! {
        /// Damaged PTX (bytes deleted or replaced) is an error or a module, never a panic.
        #[test]
        fn damaged_ptx_never_panics(cuts in proptest::collection::vec((0usize..2000, 0usize..6, proptest::prelude::any::<u8>()), 1..6)) {
            let mut b = SAMPLE.as_bytes().to_vec();
            for (at, len, c) in cuts {
                let at = at % b.len();
                let end = (at + len).min(b.len());
                b.splice(at..end, [c]);
            }
            let text = String::from_utf8_lossy(&b);
            let _ = parse_module(&text);
        }
    }
}
