//! The driver API's per-thread default stream variants (issue 13): the `_ptsz` and `_ptds`
//! entry points `cuda.h` 13 maps the plain names to when a program is built with
//! `CUDA_API_PER_THREAD_DEFAULT_STREAM` (`cuMemcpyAsync_ptsz`, `cuMemcpyHtoD_v2_ptds`,
//! `cuLaunchKernel_ptsz`…), and the older forms' variants that `cuGetProcAddress` hands out
//! (`cuStreamGetCaptureInfo_v2_ptsz`…). Each runs its plain form under
//! `state::per_thread`, where stream 0 — the stream argument, or the implicit stream of a
//! synchronous copy or memset — is this thread's default stream, as the runtime's `_ptsz`
//! entry points resolve it (`state::resolve_stream`): the same per-thread stream, so either
//! face's work on it is ordered, and a checkpoint keeps it as the runtime's.
//!
//! # Safety
//! Each export passes its arguments unchanged to the plain export, whose contract is the
//! same (the `_ptsz` forms have the plain forms' signatures).
#![allow(unsafe_code, non_snake_case, clippy::not_unsafe_ptr_arg_deref, clippy::too_many_arguments)]

use std::ffi::c_void;

use super::{driver as d, driver_graph as g, driver_mem as m, driver_ptr as p};

/// `$name` runs `$plain` with these arguments as a per-thread default stream call.
macro_rules! per_thread {
    ($($name:ident => $m:ident :: $plain:ident ($($arg:ident: $ty:ty),* $(,)?);)*) => {
        $(
            #[no_mangle]
            pub extern "C" fn $name($($arg: $ty),*) -> u32 {
                crate::state::per_thread(|| $m::$plain($($arg),*))
            }
        )*
        /// Every variant's name (tests).
        #[cfg(test)]
        const NAMES: &[&str] = &[$(stringify!($name)),*];
    };
}

per_thread! {
    cuMemcpy_ptds => d::cuMemcpy(dst: u64, src: u64, n: usize);
    cuMemcpyAsync_ptsz => d::cuMemcpyAsync(dst: u64, src: u64, n: usize, stream: *mut c_void);
    cuMemcpyHtoD_v2_ptds => d::cuMemcpyHtoD_v2(dst: u64, src: *const c_void, n: usize);
    cuMemcpyDtoH_v2_ptds => d::cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, n: usize);
    cuMemcpyDtoD_v2_ptds => d::cuMemcpyDtoD_v2(dst: u64, src: u64, n: usize);
    cuMemcpyHtoDAsync_v2_ptsz => d::cuMemcpyHtoDAsync_v2(dst: u64, src: *const c_void, n: usize, stream: *mut c_void);
    cuMemcpyDtoHAsync_v2_ptsz => d::cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: u64, n: usize, stream: *mut c_void);
    cuMemcpyDtoDAsync_v2_ptsz => d::cuMemcpyDtoDAsync_v2(dst: u64, src: u64, n: usize, stream: *mut c_void);
    cuMemcpy2D_v2_ptds => m::cuMemcpy2D_v2(p: *const u8);
    cuMemcpy2DUnaligned_v2_ptds => m::cuMemcpy2DUnaligned_v2(p: *const u8);
    cuMemcpy3D_v2_ptds => m::cuMemcpy3D_v2(p: *const u8);
    cuMemcpy2DAsync_v2_ptsz => m::cuMemcpy2DAsync_v2(p: *const u8, stream: *mut c_void);
    cuMemcpy3DAsync_v2_ptsz => m::cuMemcpy3DAsync_v2(p: *const u8, stream: *mut c_void);
    cuMemsetD8_v2_ptds => d::cuMemsetD8_v2(dst: u64, v: u8, n: usize);
    cuMemsetD16_v2_ptds => d::cuMemsetD16_v2(dst: u64, v: u16, n: usize);
    cuMemsetD32_v2_ptds => d::cuMemsetD32_v2(dst: u64, v: u32, n: usize);
    cuMemsetD2D8_v2_ptds => m::cuMemsetD2D8_v2(dst: u64, pitch: usize, v: u8, width: usize, height: usize);
    cuMemsetD2D16_v2_ptds => m::cuMemsetD2D16_v2(dst: u64, pitch: usize, v: u16, width: usize, height: usize);
    cuMemsetD2D32_v2_ptds => m::cuMemsetD2D32_v2(dst: u64, pitch: usize, v: u32, width: usize, height: usize);
    cuMemsetD8Async_ptsz => d::cuMemsetD8Async(dst: u64, v: u8, n: usize, stream: *mut c_void);
    cuMemsetD16Async_ptsz => d::cuMemsetD16Async(dst: u64, v: u16, n: usize, stream: *mut c_void);
    cuMemsetD32Async_ptsz => d::cuMemsetD32Async(dst: u64, v: u32, n: usize, stream: *mut c_void);
    cuMemsetD2D8Async_ptsz => m::cuMemsetD2D8Async(dst: u64, pitch: usize, v: u8, width: usize, height: usize, stream: *mut c_void);
    cuMemsetD2D16Async_ptsz => m::cuMemsetD2D16Async(dst: u64, pitch: usize, v: u16, width: usize, height: usize, stream: *mut c_void);
    cuMemsetD2D32Async_ptsz => m::cuMemsetD2D32Async(dst: u64, pitch: usize, v: u32, width: usize, height: usize, stream: *mut c_void);
    cuMemAllocAsync_ptsz => m::cuMemAllocAsync(dptr: *mut u64, bytes: usize, stream: *mut c_void);
    cuMemAllocFromPoolAsync_ptsz => m::cuMemAllocFromPoolAsync(dptr: *mut u64, bytes: usize, pool: *mut c_void, stream: *mut c_void);
    cuMemFreeAsync_ptsz => m::cuMemFreeAsync(dptr: u64, stream: *mut c_void);
    cuMemPrefetchAsync_v2_ptsz => p::cuMemPrefetchAsync_v2(ptr: u64, count: usize, location: u64, flags: u32, stream: *mut c_void);
    cuMemPrefetchAsync_ptsz => p::cuMemPrefetchAsync(ptr: u64, count: usize, dev: i32, stream: *mut c_void);
    cuStreamQuery_ptsz => d::cuStreamQuery(s: *mut c_void);
    cuStreamSynchronize_ptsz => d::cuStreamSynchronize(s: *mut c_void);
    cuStreamWaitEvent_ptsz => d::cuStreamWaitEvent(s: *mut c_void, e: *mut c_void, flags: u32);
    cuEventRecord_ptsz => d::cuEventRecord(e: *mut c_void, s: *mut c_void);
    cuLaunchKernel_ptsz => d::cuLaunchKernel(f: usize, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32, shared: u32, stream: *mut c_void, params: *mut *mut c_void, extra: *mut *mut c_void);
    cuLaunchKernelEx_ptsz => d::cuLaunchKernelEx(config: *const u8, f: usize, params: *mut *mut c_void, extra: *mut *mut c_void);
    cuLaunchCooperativeKernel_ptsz => d::cuLaunchCooperativeKernel(f: usize, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32, shared: u32, stream: *mut c_void, params: *mut *mut c_void);
    cuLaunchHostFunc_ptsz => g::cuLaunchHostFunc(stream: *mut c_void, func: *const c_void, data: *mut c_void);
    cuGraphInstantiateWithParams_ptsz => g::cuGraphInstantiateWithParams(exec: *mut *mut c_void, graph: *mut c_void, params: *mut u8);
    cuGraphUpload_ptsz => g::cuGraphUpload(exec: *mut c_void, stream: *mut c_void);
    cuGraphLaunch_ptsz => g::cuGraphLaunch(exec: *mut c_void, stream: *mut c_void);
    cuStreamBeginCapture_v2_ptsz => g::cuStreamBeginCapture_v2(stream: *mut c_void, mode: u32);
    cuStreamBeginCapture_ptsz => g::cuStreamBeginCapture(stream: *mut c_void);
    cuStreamBeginCaptureToGraph_ptsz => g::cuStreamBeginCaptureToGraph(stream: *mut c_void, graph: *mut c_void, dep: *const u64, edge_data: *const u64, n: usize, mode: u32);
    cuStreamBeginRecaptureToGraph_ptsz => g::cuStreamBeginRecaptureToGraph(stream: *mut c_void, mode: u32, graph: *mut c_void, callback: *const c_void, data: *mut c_void);
    cuStreamEndCapture_ptsz => g::cuStreamEndCapture(stream: *mut c_void, graph: *mut *mut c_void);
    cuStreamIsCapturing_ptsz => g::cuStreamIsCapturing(stream: *mut c_void, status: *mut u32);
    cuStreamGetCaptureInfo_v3_ptsz => g::cuStreamGetCaptureInfo_v3(stream: *mut c_void, status: *mut u32, id: *mut u64, graph: *mut *mut c_void, deps: *mut *const u64, edge_data: *mut *const u64, n: *mut usize);
    cuStreamGetCaptureInfo_v2_ptsz => g::cuStreamGetCaptureInfo_v2(stream: *mut c_void, status: *mut u32, id: *mut u64, graph: *mut *mut c_void, deps: *mut *const u64, n: *mut usize);
    cuStreamGetCaptureInfo_ptsz => g::cuStreamGetCaptureInfo(stream: *mut c_void, status: *mut u32, id: *mut u64);
    cuStreamUpdateCaptureDependencies_v2_ptsz => g::cuStreamUpdateCaptureDependencies_v2(stream: *mut c_void, dep: *const u64, edge_data: *const u64, n: usize, flags: u32);
    cuStreamUpdateCaptureDependencies_ptsz => g::cuStreamUpdateCaptureDependencies(stream: *mut c_void, dep: *const u64, n: usize, flags: u32);
}

#[cfg(test)]
mod tests {
    use super::NAMES;

    #[test]
    fn every_variant_is_named_for_its_plain_form_with_a_per_thread_suffix() {
        for n in NAMES {
            assert!(n.ends_with("_ptsz") || n.ends_with("_ptds"), "{n}");
        }
        assert!(NAMES.contains(&"cuStreamBeginRecaptureToGraph_ptsz"));
    }
}
