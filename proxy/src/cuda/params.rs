//! Kernel parameter layouts and packing.
//!
//! The interposer packs a launch's arguments into one block at the offsets the proxy reported
//! for the kernel ([`crum_wire::FuncInfo::params`]). The layout comes from the driver
//! (`cuFuncGetParamInfo`, CUDA 12.4+) or, on older drivers, from the kernel's PTX `.entry`
//! declaration, parsed here with the PTX ABI's rules: each parameter at the next multiple of its
//! alignment, scalars aligned to their size, `.align N .b8 name[M]` aggregates to `N`.
//!
//! [`pointers`] turns a packed block into the `void** kernelParams` array that
//! `cuLaunchKernel` reads, after checking that every parameter lies inside the block (the block
//! comes from the application and is untrusted).
//!
//! # Safety
//! [`Packed`] holds raw pointers into its own heap storage (so it may move between threads),
//! and the parameter bytes are copied into that storage with bounds checked first.
#![allow(unsafe_code)]

use std::ffi::c_void;

/// One parameter: offset and size in the packed block.
pub type Param = (u32, u32);

/// Why a parameter declaration could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    #[error("kernel {0} has no .entry declaration in the PTX")]
    NoEntry(String),
    #[error("cannot read parameter declaration {0:?}")]
    Syntax(String),
    #[error("the parameter block is {got} bytes; the kernel needs {need}")]
    ShortBlock { got: usize, need: usize },
}

fn strip_comments(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("//") {
            rest = r.find('\n').map_or("", |i| &r[i..]);
        } else if let Some(r) = rest.strip_prefix("/*") {
            rest = r.find("*/").map_or("", |i| &r[i + 2..]);
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

fn scalar_size(ty: &str) -> Option<u32> {
    Some(match ty {
        ".u8" | ".s8" | ".b8" => 1,
        ".u16" | ".s16" | ".b16" | ".f16" | ".bf16" => 2,
        ".u32" | ".s32" | ".b32" | ".f32" | ".f16x2" | ".bf16x2" => 4,
        ".u64" | ".s64" | ".b64" | ".f64" => 8,
        _ => return None,
    })
}

/// Parse one `.param` declaration: (size, alignment).
fn parse_param(decl: &str) -> Result<(u32, u32), ParamError> {
    let bad = || ParamError::Syntax(decl.trim().to_string());
    let mut toks = decl.split_whitespace().peekable();
    if toks.next() != Some(".param") {
        return Err(bad());
    }
    let mut align = None;
    let mut size = None;
    let mut after_ptr = false;
    let mut name = None;
    while let Some(t) = toks.next() {
        match t {
            ".align" => {
                let n: u32 = toks.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
                // `.ptr ... .align N` describes the pointee, not the parameter.
                if !after_ptr {
                    align = Some(n);
                }
            }
            ".ptr" => after_ptr = true,
            ".global" | ".const" | ".shared" | ".local" => {}
            t if t.starts_with('.') => size = Some(scalar_size(t).ok_or_else(bad)?),
            t => name = Some(t),
        }
    }
    let elem = size.ok_or_else(bad)?;
    let name = name.ok_or_else(bad)?;
    let count = match (name.find('['), name.strip_suffix(']')) {
        (Some(i), Some(n)) => n[i + 1..].trim().parse::<u32>().map_err(|_| bad())?,
        (None, None) => 1,
        _ => return Err(bad()),
    };
    let total = elem.checked_mul(count).ok_or_else(bad)?;
    let align = align.unwrap_or(elem);
    if !align.is_power_of_two() {
        return Err(bad());
    }
    Ok((total, align))
}

/// The parameter layout of kernel `name` from its PTX `.entry` declaration.
pub fn layout_from_ptx(ptx: &str, name: &str) -> Result<Vec<Param>, ParamError> {
    let text = strip_comments(ptx);
    let mut search = text.as_str();
    let decl = loop {
        let i = search.find(".entry").ok_or_else(|| ParamError::NoEntry(name.to_string()))?;
        let rest = search[i + ".entry".len()..].trim_start();
        if let Some(after) = rest.strip_prefix(name) {
            let after = after.trim_start();
            if after.starts_with('(') || after.starts_with('{') || after.starts_with('.') {
                break after;
            }
        }
        search = &search[i + 1..];
    };
    let Some(body) = decl.strip_prefix('(') else {
        return Ok(Vec::new());
    };
    let end = body.find(')').ok_or_else(|| ParamError::Syntax(name.to_string()))?;
    let mut out = Vec::new();
    let mut cursor: u32 = 0;
    for d in body[..end].split(',').filter(|d| !d.trim().is_empty()) {
        let (size, align) = parse_param(d)?;
        let off = cursor.checked_next_multiple_of(align).ok_or_else(|| ParamError::Syntax(d.to_string()))?;
        out.push((off, size));
        cursor = off.checked_add(size).ok_or_else(|| ParamError::Syntax(d.to_string()))?;
    }
    Ok(out)
}

/// Size of the packed block for a layout.
pub fn block_size(layout: &[Param]) -> u32 {
    layout.iter().map(|&(o, s)| o + s).max().unwrap_or(0)
}

/// A packed parameter block copied to 16-byte-aligned storage, with the `kernelParams` array
/// pointing into it. Keep it alive until the launch call returns (the driver copies the
/// values during `cuLaunchKernel`).
pub struct Packed {
    storage: Vec<u128>,
    ptrs: Vec<*mut c_void>,
}

// SAFETY: the raw pointers point into `storage`, which `Packed` owns; moving `Packed` to
// another thread moves the heap buffer they point to along with it.
unsafe impl Send for Packed {}

impl Packed {
    /// The `void**` that `cuLaunchKernel` takes (null for a kernel without parameters).
    pub fn as_kernel_params(&mut self) -> *mut *mut c_void {
        if self.ptrs.is_empty() {
            std::ptr::null_mut()
        } else {
            self.ptrs.as_mut_ptr()
        }
    }

    /// The bytes of parameter `i` (for tests and logging).
    pub fn param_bytes(&self, layout: &[Param], i: usize) -> &[u8] {
        let (o, s) = layout[i];
        let bytes: &[u8] = bytemuck_bytes(&self.storage);
        &bytes[o as usize..(o + s) as usize]
    }
}

fn bytemuck_bytes(v: &[u128]) -> &[u8] {
    let len = std::mem::size_of_val(v);
    // SAFETY: u128 has no padding and every byte pattern is a valid u8; the slice covers
    // exactly the memory of `v` and borrows it.
    unsafe {
        std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), len)
    }
}

/// Check `block` against `layout` and build the `kernelParams` array pointing into a copy.
pub fn pointers(block: &[u8], layout: &[Param]) -> Result<Packed, ParamError> {
    let need = block_size(layout) as usize;
    if block.len() < need {
        return Err(ParamError::ShortBlock { got: block.len(), need });
    }
    let mut storage = vec![0u128; block.len().div_ceil(16).max(1)];
    let base = storage.as_mut_ptr().cast::<u8>();
    // SAFETY: `storage` holds at least `block.len()` bytes; source and destination are
    // distinct allocations.
    unsafe {
        std::ptr::copy_nonoverlapping(block.as_ptr(), base, block.len())
    };
    let ptrs = layout.iter().map(|&(o, _)| base.wrapping_add(o as usize).cast::<c_void>()).collect();
    Ok(Packed { storage, ptrs })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = r#"
.version 8.0
.target sm_80
.address_size 64
	// .globl	_Z4fillPfif
.visible .entry _Z4fillPfif(
	.param .u64 .ptr .global .align 4 _Z4fillPfif_param_0,
	.param .u32 _Z4fillPfif_param_1, /* count */
	.param .f32 _Z4fillPfif_param_2
)
{ ret; }
.visible .entry _Z3mixc6float3dPv(
	.param .u8 _Z3mixc6float3dPv_param_0,
	.param .align 4 .b8 _Z3mixc6float3dPv_param_1[12],
	.param .f64 _Z3mixc6float3dPv_param_2,
	.param .u64 _Z3mixc6float3dPv_param_3
)
{ ret; }
.visible .entry _Z4nonev()
{ ret; }
.visible .entry big(.param .align 16 .b8 big_param_0[32], .param .u16 big_param_1)
{ ret; }
"#;

    #[test]
    fn pointer_int_float_are_packed_at_natural_alignment() {
        assert_eq!(layout_from_ptx(PTX, "_Z4fillPfif").unwrap(), vec![(0, 8), (8, 4), (12, 4)]);
    }

    #[test]
    fn aggregates_and_doubles_follow_their_alignment() {
        // char at 0, float3 (align 4) at 4..16, double at 16, pointer at 24.
        assert_eq!(layout_from_ptx(PTX, "_Z3mixc6float3dPv").unwrap(), vec![(0, 1), (4, 12), (16, 8), (24, 8)]);
        assert_eq!(layout_from_ptx(PTX, "big").unwrap(), vec![(0, 32), (32, 2)]);
    }

    #[test]
    fn kernel_without_parameters_has_empty_layout() {
        assert_eq!(layout_from_ptx(PTX, "_Z4nonev").unwrap(), vec![]);
    }

    #[test]
    fn name_prefix_of_another_kernel_is_not_matched() {
        assert_eq!(layout_from_ptx(PTX, "_Z4fill"), Err(ParamError::NoEntry("_Z4fill".into())));
    }

    #[test]
    fn unknown_type_is_a_syntax_error() {
        let ptx = ".entry k(.param .weird k_param_0) {}";
        assert!(matches!(layout_from_ptx(ptx, "k"), Err(ParamError::Syntax(_))));
    }

    #[test]
    fn packed_pointers_address_each_parameter() {
        let layout = vec![(0, 8), (8, 4), (12, 4)];
        let mut block = vec![0u8; 16];
        block[0..8].copy_from_slice(&0x1234_5678_9abc_def0u64.to_le_bytes());
        block[8..12].copy_from_slice(&7u32.to_le_bytes());
        block[12..16].copy_from_slice(&1.5f32.to_le_bytes());
        let mut p = pointers(&block, &layout).unwrap();
        assert_eq!(p.param_bytes(&layout, 1), &7u32.to_le_bytes());
        let arr = p.as_kernel_params();
        assert!(!arr.is_null());
        assert_eq!(p.ptrs[2] as usize - p.ptrs[0] as usize, 12);
        assert_eq!(p.ptrs[0] as usize % 16, 0);
    }

    #[test]
    fn block_shorter_than_the_layout_is_refused() {
        let r = pointers(&[0u8; 10], &[(0, 8), (8, 4)]);
        assert_eq!(r.err(), Some(ParamError::ShortBlock { got: 10, need: 12 }));
    }

    #[test]
    fn no_parameters_give_null_kernel_params() {
        let mut p = pointers(&[], &[]).unwrap();
        assert!(p.as_kernel_params().is_null());
    }
}
