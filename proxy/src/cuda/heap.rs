//! Which kernels of a module use the device heap (device-side `malloc`, and so C++ `new` in
//! device code).
//!
//! The driver keeps the heap inside the context, out of reach of the backend: blocks a kernel
//! allocated and the program still holds are not in a checkpoint of this backend (the emulated
//! device's heap is an allocation like any other and is saved). A checkpoint must name that
//! loss rather than restart with dangling pointers, so the backend records the launches of
//! kernels that can reach `malloc` ([`HeapUse::reaches`]) and says so at the cut.
//!
//! From the module's PTX (the highest architecture's, as the parameter-layout fallback finds
//! it): the kernels whose static call graph reaches `malloc`, and every kernel that makes an
//! indirect call in a module that calls `malloc` anywhere (the callee is not known). A module
//! of machine code only: every kernel, if an ELF string table names `malloc`.
//!
//! Also here, from the same reading of PTX: the kernels a module declares ([`entry_names`]),
//! for drivers without `cuModuleEnumerateFunctions`.

use std::collections::{HashMap, HashSet};

/// What a module's kernels do with the device heap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeapUse {
    /// No kernel of the module can call `malloc`.
    None,
    /// These kernels (entry names) can.
    Kernels(HashSet<String>),
    /// The module calls `malloc` and has no PTX to tell which kernels: any may.
    Any,
}

impl HeapUse {
    /// Whether a launch of `kernel` may allocate on the device heap.
    pub fn reaches(&self, kernel: &str) -> bool {
        match self {
            HeapUse::None => false,
            HeapUse::Kernels(k) => k.contains(kernel),
            HeapUse::Any => true,
        }
    }

    /// Of a module image: a fat binary, a cubin, or PTX text; `ptx` is its PTX where found.
    pub fn of_image(image: &[u8], ptx: Option<&str>) -> HeapUse {
        if let Some(ptx) = ptx {
            return of_ptx(ptx);
        }
        let names_malloc = |elf: &[u8]| elf.windows(8).any(|w| w == b"\0malloc\0");
        let any = if image.starts_with(&0xBA55_ED50u32.to_le_bytes()) {
            // Undecodable entries: the driver will refuse them too; assume the worst.
            crum_ptx::fatbin::elf_images(image).map_or(true, |elves| elves.iter().any(|(_, e)| names_malloc(e)))
        } else {
            names_malloc(image)
        };
        if any {
            HeapUse::Any
        } else {
            HeapUse::None
        }
    }
}

/// The kernels of a PTX module that can reach `malloc` (see the module docs).
pub fn of_ptx(ptx: &str) -> HeapUse {
    let text = strip_comments(ptx);
    // Function name → (is a kernel, direct callees, makes indirect calls).
    let mut funcs: HashMap<String, (bool, HashSet<String>, bool)> = HashMap::new();
    let mut depth = 0usize;
    let mut header = String::new();
    let mut current: Option<String> = None;
    let mut stmt = String::new();
    for c in text.chars() {
        match c {
            '{' => {
                if depth == 0 {
                    current = function_name(&header);
                    if let Some(n) = &current {
                        funcs.entry(n.clone()).or_default().0 = header.contains(".entry");
                    }
                    header.clear();
                }
                depth += 1;
                stmt.clear();
            }
            '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    current = None;
                }
                stmt.clear();
            }
            ';' if depth == 0 => header.clear(),
            ';' => {
                if let (Some(f), Some(callee)) = (&current, call_target(&stmt)) {
                    let e = funcs.entry(f.clone()).or_default();
                    if callee.starts_with('%') {
                        e.2 = true;
                    } else {
                        e.1.insert(callee);
                    }
                }
                stmt.clear();
            }
            _ if depth == 0 => header.push(c),
            _ => stmt.push(c),
        }
    }
    let calls_malloc = funcs.values().any(|f| f.1.contains("malloc"));
    if !calls_malloc {
        return HeapUse::None;
    }
    // Functions that reach malloc: a fixed point over the direct calls.
    let mut reach: HashSet<&str> = HashSet::new();
    loop {
        let before = reach.len();
        for (name, (_, callees, indirect)) in &funcs {
            if *indirect || callees.iter().any(|c| c == "malloc" || reach.contains(c.as_str())) {
                reach.insert(name);
            }
        }
        if reach.len() == before {
            break;
        }
    }
    HeapUse::Kernels(funcs.iter().filter(|(n, f)| f.0 && reach.contains(n.as_str())).map(|(n, _)| n.clone()).collect())
}

/// The kernels (`.entry`) a PTX module defines, in its order.
pub fn entry_names(ptx: &str) -> Vec<String> {
    let text = strip_comments(ptx);
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find(".entry") {
        let after = &rest[at + 6..];
        if after.starts_with(char::is_whitespace) {
            let name: String = after.trim_start().chars().take_while(|&c| is_ident(c)).collect();
            if !name.is_empty() && !out.contains(&name) {
                out.push(name);
            }
        }
        rest = after;
    }
    out
}

fn strip_comments(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len());
    let mut rest = ptx;
    while !rest.is_empty() {
        let line = rest.find("//");
        let block = rest.find("/*");
        match (line, block) {
            (Some(l), b) if b.is_none_or(|b| l < b) => {
                out.push_str(&rest[..l]);
                rest = rest[l..].find('\n').map_or("", |e| &rest[l + e..]);
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                rest = rest[b + 2..].find("*/").map_or("", |e| &rest[b + 2 + e + 2..]);
                out.push(' ');
            }
            _ => {
                out.push_str(rest);
                rest = "";
            }
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '%' | '.')
}

/// The name a function header (`.visible .entry k(`, `.func (.param .b64 r) f(`) declares.
fn function_name(header: &str) -> Option<String> {
    let at = header.find(".entry").map(|p| p + 6).or_else(|| header.find(".func").map(|p| p + 5))?;
    let mut rest = header[at..].trim_start();
    if rest.starts_with('(') {
        // The return parameters.
        rest = rest[rest.find(')')? + 1..].trim_start();
    }
    let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
    (!name.is_empty()).then_some(name)
}

/// The callee of a `call` statement (`call.uni (retval0), malloc, (param0)`): a function
/// name, or a register for an indirect call.
fn call_target(stmt: &str) -> Option<String> {
    let s = stmt.trim_start();
    let s = s.strip_prefix('@').map_or(s, |p| p.split_once(char::is_whitespace).map_or("", |x| x.1).trim_start());
    let rest = s.strip_prefix("call")?;
    if !rest.starts_with(['.', ' ', '\t', '\n', '\r']) {
        return None;
    }
    let mut rest = rest.trim_start_matches(|c: char| c == '.' || c.is_ascii_alphanumeric()).trim_start();
    if rest.starts_with('(') {
        rest = rest[rest.find(')')? + 1..].trim_start().strip_prefix(',')?.trim_start();
    }
    let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What nvcc 13 emits (`-ptx -arch=sm_80`) for a kernel calling `malloc` through a device
    /// function, one calling it directly, one that does not, and one using `new`/`delete`
    /// and a virtual call.
    const PTX: &str = r#"
.version 9.0
.target sm_80
.address_size 64
.func  (.param .b32 func_retval0) _ZN1B1fEv
(
	.param .b64 _ZN1B1fEv_param_0
)
;
.extern .func  (.param .b64 func_retval0) malloc
(
	.param .b64 malloc_param_0
)
;
.extern .func free
(
	.param .b64 free_param_0
)
;
.func  (.param .b64 func_retval0) _Z4grabi(
	.param .b32 _Z4grabi_param_0
)
{
	.reg .b64 	%rd<4>;
	{ // callseq 0, 0
	.param .b64 param0;
	.param .b64 retval0;
	call.uni (retval0), 
	malloc, 
	(
	param0
	);
	} // callseq 0
	ret;
}
.visible .entry keep(
	.param .u64 keep_param_0,
	.param .u32 keep_param_1
)
{
	{ // callseq 1, 0
	.param .b32 param0;
	.param .b64 retval0;
	call.uni (retval0), 
	_Z4grabi, 
	(
	param0
	);
	} // callseq 1
	ret;
}
.visible .entry plain(
	.param .u64 plain_param_0
)
{
	/* a comment naming malloc; */
	st.global.u32 	[%rd2], %r1; // call.uni malloc;
	ret;
}
.visible .entry viaptr(
	.param .u64 viaptr_param_0
)
{
	.reg .b64 %rd<9>;
	call.uni (retval0), 
	malloc, 
	(
	param0
	);
	prototype_0 : .callprototype (.param .b32 _) _ (.param .b64 _);
	call (retval0), %rd8, (param0), prototype_0;
	ret;
}
.visible .entry indirect_only(
	.param .u64 p
)
{
	@%p1 call (retval0), %rd8, (param0), prototype_0;
	ret;
}
"#;

    #[test]
    fn kernels_that_reach_malloc_directly_through_calls_or_indirectly_are_found() {
        let u = of_ptx(PTX);
        for k in ["keep", "viaptr", "indirect_only"] {
            assert!(u.reaches(k), "{k}: {u:?}");
        }
        for k in ["plain", "_Z4grabi", "_ZN1B1fEv", "nothing"] {
            assert!(!u.reaches(k), "{k}: {u:?}");
        }
    }

    #[test]
    fn the_kernels_of_a_ptx_module_are_listed_in_order() {
        assert_eq!(entry_names(PTX), ["keep", "plain", "viaptr", "indirect_only"]);
    }

    #[test]
    fn a_module_without_a_call_to_malloc_uses_no_heap() {
        // Declared (and `free` called) but `malloc` never called.
        let ptx = ".extern .func (.param .b64 func_retval0) malloc (.param .b64 p);\n.visible .entry k() { call.uni free, (param0); ret; }";
        assert_eq!(of_ptx(ptx), HeapUse::None);
        assert_eq!(of_ptx(".visible .entry k() { ret; }"), HeapUse::None);
    }

    /// The conformance suite's fat binary, as nvcc 13 builds it (PTX for compute_80; machine
    /// code for sm_80 to sm_120).
    #[test]
    fn nvcc_output_is_read_from_its_ptx_or_else_from_its_machine_code() {
        let fatbin = include_bytes!("../../tests/data/kernels.fatbin");
        let ptx = super::super::ptx_text(fatbin);
        let u = HeapUse::of_image(fatbin, ptx.as_deref());
        assert!(matches!(&u, HeapUse::Kernels(k) if k.len() == 1 && k.contains("heap_keep")), "{u:?}");
        assert_eq!(HeapUse::of_image(fatbin, None), HeapUse::Any);
        assert_eq!(crum_ptx::fatbin::elf_images(fatbin).unwrap().len(), 4);
    }

    #[test]
    fn machine_code_without_ptx_is_judged_by_its_string_table() {
        let mut elf = b"\x7fELF\x02\x01\x01".to_vec();
        elf.extend_from_slice(b"\0.text.keep\0malloc\0free\0");
        assert_eq!(HeapUse::of_image(&elf, None), HeapUse::Any);
        assert!(HeapUse::of_image(&elf, None).reaches("whatever"));
        let mut plain = b"\x7fELF\x02\x01\x01".to_vec();
        plain.extend_from_slice(b"\0.text.k\0free\0my_malloc\0");
        assert_eq!(HeapUse::of_image(&plain, None), HeapUse::None);
    }
}
