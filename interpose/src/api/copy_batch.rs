//! Copies with attributes: `cudaMemcpyBatchAsync` and `cudaMemcpyWithAttributesAsync`.
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

crate::export! {
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
