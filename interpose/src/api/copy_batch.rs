//! Copies with attributes: `cudaMemcpyBatchAsync`, `cudaMemcpyWithAttributesAsync`, and
//! their 3-D forms `cudaMemcpy3DBatchAsync` and `cudaMemcpy3DWithAttributesAsync`, whose
//! operands are pointers (with a row length and layer height in elements) or CUDA arrays
//! (with an offset in elements); the element size is the array's, 1 byte between pointers.
//!
//! Each copy is an ordinary 1-D copy on the stream (direction inferred, as
//! `cudaMemcpyDefault`), so the batch runs in stream order. The attributes are checked as
//! CUDA documents them; of what they ask, only the source access order changes what crum
//! does: `cudaMemcpySrcAccessOrderDuringApiCall` promises the program that the source is read
//! before the call returns, so those copies wait for their completion. The location hints
//! apply only with concurrent managed access (which crum's device does not report) and the
//! overlap flag is a scheduling hint: both are checked and need nothing more.
// `#[no_mangle]` exports count as unsafe code.
#![allow(unsafe_code, non_upper_case_globals)]

use std::ffi::c_void;

use crum_wire::cuda;

use super::memory::copy;
use crate::abi_gen::*;
use crate::errors::CudaResult;
use crate::ffi::*;
use crate::state::*;

/// `cudaMemcpyDefault`.
const DEFAULT: u32 = 4;
/// `cudaMemcpySrcAccessOrder`: stream, during the API call, any.
const ORDER_STREAM: u32 = 1;
const ORDER_DURING_API_CALL: u32 = 2;
const ORDER_ANY: u32 = 3;
/// `cudaMemcpyFlagPreferOverlapWithCompute`.
const FLAG_PREFER_OVERLAP: u32 = 1;

/// Whether the copies of `attrs` must be complete when the call returns.
fn check_attrs(attrs: *const u8) -> CudaResult<bool> {
    let order: u32 = field(attrs, CUDAMEMCPYATTRIBUTES_SRCACCESSORDER)?;
    let flags: u32 = field(attrs, CUDAMEMCPYATTRIBUTES_FLAGS)?;
    if !(ORDER_STREAM..=ORDER_ANY).contains(&order) || flags & !FLAG_PREFER_OVERLAP != 0 {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    Ok(order == ORDER_DURING_API_CALL)
}

/// The stream of a copy with attributes: any but the legacy NULL stream.
fn batch_stream(stream: *mut c_void, ptsz: bool) -> CudaResult<u64> {
    if (stream.is_null() && !ptsz) || stream as u64 == STREAM_LEGACY {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    resolve_stream(stream as u64, ptsz)
}

#[allow(clippy::too_many_arguments)]
fn batch(
    dsts: *const u64,
    srcs: *const u64,
    sizes: *const usize,
    count: usize,
    attrs: *const u8,
    attr_idxs: *const usize,
    num_attrs: usize,
    stream: *mut c_void,
    ptsz: bool,
) -> CudaResult<()> {
    let s = batch_stream(stream, ptsz)?;
    if count == 0 || num_attrs == 0 || num_attrs > count {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    // Which attribute entry each copy takes: indices start at 0, grow, and stay below count.
    let mut starts = Vec::with_capacity(num_attrs);
    let mut sync = Vec::with_capacity(num_attrs);
    for k in 0..num_attrs {
        let i = read(attr_idxs.wrapping_add(k))?;
        let ok = if k == 0 { i == 0 } else { i > starts[k - 1] && i < count };
        if !ok {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        starts.push(i);
        sync.push(check_attrs(attrs.wrapping_add(k * CUDAMEMCPYATTRIBUTES_SIZE))?);
    }
    let mut ops = Vec::with_capacity(count);
    for i in 0..count {
        let k = starts.partition_point(|&st| st <= i) - 1;
        ops.push((read(dsts.wrapping_add(i))?, read(srcs.wrapping_add(i))?, read(sizes.wrapping_add(i))? as u64, sync[k]));
    }
    for (d, src, n, sync) in ops {
        copy(d, n, src, n, n, 1, DEFAULT, s, sync)?;
    }
    Ok(())
}

fn with_attributes(dst: u64, src: u64, size: usize, attrs: *const u8, stream: *mut c_void, ptsz: bool) -> CudaResult<()> {
    let s = resolve_stream(stream as u64, ptsz)?;
    let sync = check_attrs(attrs)?;
    copy(dst, size as u64, src, size as u64, size as u64, 1, DEFAULT, s, sync)
}

/// One side of a 3-D batch copy, decoded: (address of the first element, row pitch, slice
/// pitch), given the copy's element size and extent.
fn operand3d(o: *const u8, elem: u64, ext: &super::array::Extent) -> CudaResult<(u64, u64, u64)> {
    let (w, h, d) = (ext.width as u64, ext.height as u64, ext.depth as u64);
    match field::<u32>(o, CUDAMEMCPY3DOPERAND_TYPE)? {
        cudaMemcpyOperandTypePointer => {
            let ptr: u64 = field(o, CUDAMEMCPY3DOPERAND_OP_PTR_PTR)?;
            let row: usize = field(o, CUDAMEMCPY3DOPERAND_OP_PTR_ROWLENGTH)?;
            let layer: usize = field(o, CUDAMEMCPY3DOPERAND_OP_PTR_LAYERHEIGHT)?;
            // Zero: tightly packed by the copy's extent; else at least the extent.
            let (row, layer) = (if row == 0 { w } else { row as u64 }, if layer == 0 { h } else { layer as u64 });
            if ptr == 0 || row < w || layer < h {
                return Err(cuda::ERROR_INVALID_VALUE);
            }
            Ok((ptr, row * elem, row * elem * layer))
        }
        cudaMemcpyOperandTypeArray => {
            let handle: u64 = field(o, CUDAMEMCPY3DOPERAND_OP_ARRAY_ARRAY)?;
            let off: [usize; 3] = field(o, CUDAMEMCPY3DOPERAND_OP_ARRAY_OFFSET)?;
            let a = super::array::array(handle as *const c_void)?;
            let (x, y, z) = (off[0] as u64, off[1] as u64, off[2] as u64);
            let inside = |at: u64, n: u64, size: u64| at.checked_add(n).is_some_and(|e| e <= size.max(1));
            if !inside(x, w, a.width) || !inside(y, h, a.height) || !inside(z, d, a.depth) {
                return Err(cuda::ERROR_INVALID_VALUE);
            }
            Ok((a.base + z * a.slice + y * a.pitch + x * a.elem, a.pitch, a.slice))
        }
        _ => Err(cuda::ERROR_INVALID_VALUE),
    }
}

/// The element size of an operand: its array's (`None` for a pointer).
fn operand_elem(o: *const u8) -> CudaResult<Option<u64>> {
    if field::<u32>(o, CUDAMEMCPY3DOPERAND_TYPE)? != cudaMemcpyOperandTypeArray {
        return Ok(None);
    }
    let handle: u64 = field(o, CUDAMEMCPY3DOPERAND_OP_ARRAY_ARRAY)?;
    Ok(Some(super::array::array(handle as *const c_void)?.elem))
}

/// A decoded `cudaMemcpy3DBatchOp`: (dst, dst pitch, dst slice, src, src pitch, src slice,
/// row bytes, rows, slices, complete when the call returns).
type Op3d = (u64, u64, u64, u64, u64, u64, u64, u64, u64, bool);

fn decode_op3d(op: *const u8) -> CudaResult<Op3d> {
    let ext: super::array::Extent = field(op, CUDAMEMCPY3DBATCHOP_EXTENT)?;
    if ext.width == 0 || ext.height == 0 || ext.depth == 0 {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let order: u32 = field(op, CUDAMEMCPY3DBATCHOP_SRCACCESSORDER)?;
    let flags: u32 = field(op, CUDAMEMCPY3DBATCHOP_FLAGS)?;
    if !(ORDER_STREAM..=ORDER_ANY).contains(&order) || flags & !FLAG_PREFER_OVERLAP != 0 {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let (src, dst) = (op.wrapping_add(CUDAMEMCPY3DBATCHOP_SRC), op.wrapping_add(CUDAMEMCPY3DBATCHOP_DST));
    // Between two arrays their element sizes must match; 1 byte between two pointers.
    let elem = match (operand_elem(src)?, operand_elem(dst)?) {
        (Some(a), Some(b)) if a != b => return Err(cuda::ERROR_INVALID_VALUE),
        (Some(a), _) | (None, Some(a)) => a,
        (None, None) => 1,
    };
    let (s, sp, ss) = operand3d(src, elem, &ext)?;
    let (d, dp, ds) = operand3d(dst, elem, &ext)?;
    Ok((d, dp, ds, s, sp, ss, ext.width as u64 * elem, ext.height as u64, ext.depth as u64, order == ORDER_DURING_API_CALL))
}

fn run_op3d(op: Op3d, stream: u64) -> CudaResult<()> {
    let (d, dp, ds, s, sp, ss, row, rows, slices, sync) = op;
    for z in 0..slices {
        copy(d + z * ds, dp, s + z * ss, sp, row, rows, DEFAULT, stream, sync)?;
    }
    Ok(())
}

/// `cudaMemcpy3DBatchAsync`: every operation is checked before any copy starts.
fn batch3d(num_ops: usize, ops: *const u8, flags: u64, stream: *mut c_void, ptsz: bool) -> CudaResult<()> {
    let s = batch_stream(stream, ptsz)?;
    if num_ops == 0 || ops.is_null() || flags != 0 {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let decoded = (0..num_ops)
        .map(|i| decode_op3d(ops.wrapping_add(i * CUDAMEMCPY3DBATCHOP_SIZE)))
        .collect::<CudaResult<Vec<_>>>()?;
    for op in decoded {
        run_op3d(op, s)?;
    }
    Ok(())
}

fn with_attributes3d(op: *const u8, flags: u64, stream: *mut c_void, ptsz: bool) -> CudaResult<()> {
    let s = resolve_stream(stream as u64, ptsz)?;
    if flags != 0 {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    run_op3d(decode_op3d(op)?, s)
}

crate::export! {
    fn cudaMemcpy3DBatchAsync(num_ops: usize, ops: *const u8, flags: u64, stream: *mut c_void) {
        batch3d(num_ops, ops, flags, stream, false)
    }
    fn cudaMemcpy3DBatchAsync_ptsz(num_ops: usize, ops: *const u8, flags: u64, stream: *mut c_void) {
        batch3d(num_ops, ops, flags, stream, true)
    }
    fn cudaMemcpy3DWithAttributesAsync(op: *const u8, flags: u64, stream: *mut c_void) {
        with_attributes3d(op, flags, stream, false)
    }
    fn cudaMemcpy3DWithAttributesAsync_ptsz(op: *const u8, flags: u64, stream: *mut c_void) {
        with_attributes3d(op, flags, stream, true)
    }

    fn cudaMemcpyBatchAsync(dsts: *const u64, srcs: *const u64, sizes: *const usize, count: usize, attrs: *const u8, attr_idxs: *const usize, num_attrs: usize, stream: *mut c_void) {
        batch(dsts, srcs, sizes, count, attrs, attr_idxs, num_attrs, stream, false)
    }
    fn cudaMemcpyBatchAsync_ptsz(dsts: *const u64, srcs: *const u64, sizes: *const usize, count: usize, attrs: *const u8, attr_idxs: *const usize, num_attrs: usize, stream: *mut c_void) {
        batch(dsts, srcs, sizes, count, attrs, attr_idxs, num_attrs, stream, true)
    }
    fn cudaMemcpyWithAttributesAsync(dst: *mut c_void, src: *const c_void, size: usize, attrs: *const u8, stream: *mut c_void) {
        with_attributes(dst as u64, src as u64, size, attrs, stream, false)
    }
    fn cudaMemcpyWithAttributesAsync_ptsz(dst: *mut c_void, src: *const c_void, size: usize, attrs: *const u8, stream: *mut c_void) {
        with_attributes(dst as u64, src as u64, size, attrs, stream, true)
    }
}
