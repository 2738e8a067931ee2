//! The driver API's graphs and stream capture (issue 13): `cuGraph*`, `cuStreamBeginCapture`
//! and the rest, each a thin layer over the runtime's implementation (`api::graph`,
//! `crate::graph`, `crate::capture`), so a `CUgraph`, `CUgraphNode` and `CUgraphExec` are the
//! runtime's `cudaGraph_t`, `cudaGraphNode_t` and `cudaGraphExec_t`: a graph built through
//! the driver launches through `cudaGraphLaunch` and the reverse, and a checkpoint keeps
//! both the same way (the graphs live in the program's memory; their kernels are handles the
//! runtime restores).
//!
//! Most driver structures have the runtime's layout (`CUDA_MEMSET_NODE_PARAMS`,
//! `CUDA_HOST_NODE_PARAMS`, `CUDA_MEM_ALLOC_NODE_PARAMS`, `CUDA_GRAPH_INSTANTIATE_PARAMS`,
//! `CUgraphExecUpdateResultInfo`, `CUgraphEdgeData`, launch attributes) and pass through;
//! three are translated here: `CUDA_KERNEL_NODE_PARAMS_v2` (the runtime's
//! `cudaKernelNodeParams` followed by `kern`, a `CUkernel` used when `func` is NULL, and
//! `ctx`), `CUDA_MEMCPY3D` (decoded and written by `api::driver_mem`) and `CUgraphNodeParams`
//! (its kernel and copy members). Versions are the ones `cuda.h` 13 maps the plain names to
//! (`cuGraphAddKernelNode_v2`, `cuGraphGetEdges_v2`, `cuStreamGetCaptureInfo_v3`…;
//! `cuGraphInstantiate` is `cuGraphInstantiateWithFlags`), and the older forms are exported
//! under their plain names for programs that ask `cuGetProcAddress` for an older version.
//!
//! # Safety
//! The only unsafe code is the `#[no_mangle]` exports of `driver!`; application pointers are
//! read and written through `ffi` (`read`, `field`, `out`, `bytes`), under its contract.
#![allow(unsafe_code, non_snake_case)]

use std::ffi::{c_char, c_void};

use crum_wire::cuda;

use super::context;
use super::driver::{driver, rt};
use super::graph as g;
use crate::abi_gen::{
    CUDAGRAPHEXECUPDATERESULTINFO_ST_ERRORNODE, CUDAGRAPHEXECUPDATERESULTINFO_ST_RESULT, CUDAGRAPHEXECUPDATERESULTINFO_ST_SIZE,
    CUDAGRAPHNODEPARAMS_SIZE, CUDAKERNELNODEPARAMSV2_CTX, CUDAKERNELNODEPARAMSV2_FUNCTIONTYPE, CUDAKERNELNODEPARAMS_SIZE,
    CUDAMEMCPY3DPARMS_SIZE, CUDAMEMCPYNODEPARAMS_COPYPARAMS,
};
use crate::errors::CudaResult;
use crate::ffi::*;

/// `CUDA_KERNEL_NODE_PARAMS_v2`: the runtime's 56 bytes, then `kern` and `ctx`.
const KERNEL_PARAMS_SIZE: usize = 72;
const KERNEL_PARAMS_KERN: usize = 56;
const KERNEL_PARAMS_CTX: usize = 64;

/// A `CUDA_KERNEL_NODE_PARAMS_v2` as the runtime's `cudaKernelNodeParams`: `func`, or `kern`
/// where `func` is NULL (a `CUfunction` and a `CUkernel` are both kernel handles here).
fn kernel_params(p: *const u8) -> CudaResult<[u8; CUDAKERNELNODEPARAMS_SIZE]> {
    let mut b = [0u8; CUDAKERNELNODEPARAMS_SIZE];
    b.copy_from_slice(bytes(p, CUDAKERNELNODEPARAMS_SIZE)?);
    let func: u64 = field(p, 0)?;
    if func == 0 {
        let kern: u64 = field(p, KERNEL_PARAMS_KERN)?;
        if kern == 0 {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let ctx: usize = field(p, KERNEL_PARAMS_CTX)?;
        if ctx != 0 {
            context::check(ctx)?;
        }
        set_field(b.as_mut_ptr(), 0, kern);
    } else {
        context::check_launch(func as usize)?;
    }
    Ok(b)
}

/// Offsets in `CUgraphNodeParams`: the node type, and the union of per-type parameters.
const NODE_TYPE: usize = 0;
const NODE_UNION: usize = 16;
/// `CU_GRAPH_NODE_TYPE_KERNEL`, `_MEMCPY`.
const TYPE_KERNEL: u32 = 0;
const TYPE_MEMCPY: u32 = 1;
/// `CUDA_MEMCPY_NODE_PARAMS`: `copyCtx`, then the `CUDA_MEMCPY3D` (200 bytes).
const MEMCPY_NODE_CTX: usize = 8;
const MEMCPY_NODE_COPY: usize = 16;
const MEMCPY3D_SIZE: usize = 200;

/// A `CUgraphNodeParams` as the runtime's `cudaGraphNodeParams` (256 bytes both). The members
/// have the runtime's layouts but two: the kernel's (`CUDA_KERNEL_NODE_PARAMS_v3`: `kern` at
/// 56 where the runtime has its context, the context at 64 where the runtime has the function
/// type) and the copy's (`CUDA_MEMCPY_NODE_PARAMS`: a context and a `CUDA_MEMCPY3D`).
fn node_params(p: *const u8) -> CudaResult<[u8; CUDAGRAPHNODEPARAMS_SIZE]> {
    let mut b = [0u8; CUDAGRAPHNODEPARAMS_SIZE];
    b.copy_from_slice(bytes(p, CUDAGRAPHNODEPARAMS_SIZE)?);
    let u = p.wrapping_add(NODE_UNION);
    let bu = b.as_mut_ptr().wrapping_add(NODE_UNION);
    match field::<u32>(p, NODE_TYPE)? {
        TYPE_KERNEL => {
            let k = kernel_params(u)?;
            b[NODE_UNION..NODE_UNION + CUDAKERNELNODEPARAMS_SIZE].copy_from_slice(&k);
            // The runtime's ctx and function type: the current context, an entry function.
            set_field(bu, CUDAKERNELNODEPARAMSV2_CTX, 0u64);
            set_field(bu, CUDAKERNELNODEPARAMSV2_FUNCTIONTYPE, 0u32);
        }
        TYPE_MEMCPY => {
            node_ctx(field(u, MEMCPY_NODE_CTX)?)?;
            let c = super::driver_mem::copy3d_params(u.wrapping_add(MEMCPY_NODE_COPY))?;
            b[NODE_UNION..NODE_UNION + MEMCPY3D_SIZE + MEMCPY_NODE_COPY].fill(0);
            let at = NODE_UNION + CUDAMEMCPYNODEPARAMS_COPYPARAMS;
            b[at..at + c.len()].copy_from_slice(&c[..]);
        }
        _ => {}
    }
    Ok(b)
}

/// The runtime's `cudaGraphNodeParams` `r` written as a `CUgraphNodeParams` at `p`.
fn write_node_params(r: &[u8; CUDAGRAPHNODEPARAMS_SIZE], p: *mut u8) -> CudaResult<()> {
    zero(p, CUDAGRAPHNODEPARAMS_SIZE)?;
    let ty: u32 = field(r.as_ptr(), NODE_TYPE)?;
    let u = p.wrapping_add(NODE_UNION);
    match ty {
        TYPE_KERNEL => {
            // The runtime's first 56 bytes; no `kern`, no context.
            let k = &r[NODE_UNION..NODE_UNION + CUDAKERNELNODEPARAMS_SIZE];
            for (i, &x) in k.iter().enumerate() {
                set_field(u, i, x);
            }
        }
        TYPE_MEMCPY => {
            let at = NODE_UNION + CUDAMEMCPYNODEPARAMS_COPYPARAMS;
            let mut c = [0u8; CUDAMEMCPY3DPARMS_SIZE];
            c.copy_from_slice(&r[at..at + CUDAMEMCPY3DPARMS_SIZE]);
            super::driver_mem::write_copy3d(&c, u.wrapping_add(MEMCPY_NODE_COPY))?;
        }
        _ => {
            for (i, &x) in r.iter().enumerate().skip(NODE_UNION) {
                set_field(p, i, x);
            }
        }
    }
    set_field(p, NODE_TYPE, ty);
    Ok(())
}

/// Call a recapture callback (`CUgraphRecaptureCallback`) of `cuStreamBeginRecaptureToGraph`
/// for `node`, whose parameters changed from `old` to `new`, given as `CUgraphNodeParams`;
/// its answer (a `CUresult`: anything but `CUDA_SUCCESS` fails the recapture).
pub(crate) fn recapture_callback(func: u64, data: u64, node: u64, old: &crate::graph::NodeKind, new: &crate::graph::NodeKind, status: u32) -> u32 {
    type Callback = unsafe extern "C" fn(*mut c_void, *mut c_void, *const u8, *const u8, u32) -> u32;
    let params = |kind, argv: &mut Vec<u64>| -> CudaResult<[u8; CUDAGRAPHNODEPARAMS_SIZE]> {
        let r = g::recapture_params(kind, argv)?;
        let mut d = [0u8; CUDAGRAPHNODEPARAMS_SIZE];
        write_node_params(&r, d.as_mut_ptr())?;
        Ok(d)
    };
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let (Ok(o), Ok(n)) = (params(old, &mut a), params(new, &mut b)) else {
        return cuda::ERROR_UNKNOWN;
    };
    // SAFETY: the program passed this function as a `CUgraphRecaptureCallback`; both parameter
    // blocks (and the kernel argument arrays `a` and `b` they point to) live across the call.
    let f: Callback = unsafe { std::mem::transmute::<usize, Callback>(func as usize) };
    // SAFETY: as above.
    unsafe { f(data as *mut c_void, node as *mut c_void, o.as_ptr(), n.as_ptr(), status) }
}

/// The context argument of a copy or memset node: NULL (the current one) or a live context
/// (`CUDA_ERROR_INVALID_CONTEXT` otherwise).
fn node_ctx(ctx: usize) -> CudaResult<()> {
    if ctx == 0 {
        return Ok(());
    }
    context::check(ctx)
}

/// CUDA 10/11's `cuGraphInstantiate`: no error node (NULL) and an empty log, whatever the
/// result (the runtime's error says what was wrong).
fn instantiate_logged(exec: *mut *mut c_void, graph: *mut c_void, error_node: *mut u64, log: *mut c_char, size: usize) -> CudaResult<()> {
    if !error_node.is_null() {
        out(error_node, 0)?;
    }
    if !log.is_null() && size > 0 {
        out(log, 0)?;
    }
    rt(g::cudaGraphInstantiateWithFlags(exec, graph, 0))
}

/// An executable graph handle this process made (`CUDA_ERROR_INVALID_VALUE` otherwise, not
/// the update failure an update of an unknown handle would report).
fn exec_exists(exec: *mut c_void) -> CudaResult<()> {
    let mut flags = 0u64;
    rt(g::cudaGraphExecGetFlags(exec, &mut flags)).map_err(|_| cuda::ERROR_INVALID_VALUE)
}

driver! {
    fn cuGraphCreate(graph: *mut *mut c_void, flags: u32) {
        rt(g::cudaGraphCreate(graph, flags))
    }
    fn cuGraphDestroy(graph: *mut c_void) {
        rt(g::cudaGraphDestroy(graph))
    }
    fn cuGraphClone(clone: *mut *mut c_void, graph: *mut c_void) {
        rt(g::cudaGraphClone(clone, graph))
    }
    fn cuGraphAddKernelNode_v2(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize, params: *const u8) {
        let k = kernel_params(params)?;
        rt(g::cudaGraphAddKernelNode(node, graph, dep, n, k.as_ptr()))
    }
    fn cuGraphKernelNodeGetParams_v2(node: *mut c_void, params: *mut u8) {
        zero(params, KERNEL_PARAMS_SIZE)?;
        rt(g::cudaGraphKernelNodeGetParams(node, params))
    }
    fn cuGraphKernelNodeSetParams_v2(node: *mut c_void, params: *const u8) {
        let k = kernel_params(params)?;
        rt(g::cudaGraphKernelNodeSetParams(node, k.as_ptr()))
    }
    fn cuGraphExecKernelNodeSetParams_v2(exec: *mut c_void, node: *mut c_void, params: *const u8) {
        let k = kernel_params(params)?;
        rt(g::cudaGraphExecKernelNodeSetParams(exec, node, k.as_ptr()))
    }
    fn cuGraphAddMemcpyNode(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize, params: *const u8, ctx: usize) {
        node_ctx(ctx)?;
        let p = super::driver_mem::copy3d_params(params)?;
        rt(g::cudaGraphAddMemcpyNode(node, graph, dep, n, p.as_ptr()))
    }
    fn cuGraphAddMemsetNode(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize, params: *const u8, ctx: usize) {
        // CUDA_MEMSET_NODE_PARAMS is cudaMemsetParams.
        node_ctx(ctx)?;
        rt(g::cudaGraphAddMemsetNode(node, graph, dep, n, params))
    }
    fn cuGraphAddHostNode(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize, params: *const u8) {
        rt(g::cudaGraphAddHostNode(node, graph, dep, n, params))
    }
    fn cuGraphAddEmptyNode(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize) {
        rt(g::cudaGraphAddEmptyNode(node, graph, dep, n))
    }
    fn cuGraphAddChildGraphNode(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize, child: *mut c_void) {
        rt(g::cudaGraphAddChildGraphNode(node, graph, dep, n, child))
    }
    fn cuGraphAddEventRecordNode(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize, event: *mut c_void) {
        rt(g::cudaGraphAddEventRecordNode(node, graph, dep, n, event))
    }
    fn cuGraphAddEventWaitNode(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize, event: *mut c_void) {
        rt(g::cudaGraphAddEventWaitNode(node, graph, dep, n, event))
    }
    fn cuGraphAddDependencies_v2(graph: *mut c_void, from: *const u64, to: *const u64, edge_data: *const u64, n: usize) {
        rt(g::cudaGraphAddDependencies(graph, from, to, edge_data, n))
    }
    fn cuGraphGetNodes(graph: *mut c_void, nodes: *mut u64, count: *mut usize) {
        rt(g::cudaGraphGetNodes(graph, nodes, count))
    }
    fn cuGraphGetRootNodes(graph: *mut c_void, nodes: *mut u64, count: *mut usize) {
        rt(g::cudaGraphGetRootNodes(graph, nodes, count))
    }
    fn cuGraphGetEdges_v2(graph: *mut c_void, from: *mut u64, to: *mut u64, edge_data: *mut u64, count: *mut usize) {
        rt(g::cudaGraphGetEdges(graph, from, to, edge_data, count))
    }
    fn cuGraphNodeGetType(node: *mut c_void, ty: *mut u32) {
        // CUgraphNodeType and cudaGraphNodeType have the same values.
        rt(g::cudaGraphNodeGetType(node, ty))
    }
    fn cuGraphDestroyNode(node: *mut c_void) {
        rt(g::cudaGraphDestroyNode(node))
    }
    fn cuGraphInstantiateWithFlags(exec: *mut *mut c_void, graph: *mut c_void, flags: u64) {
        rt(g::cudaGraphInstantiateWithFlags(exec, graph, flags))
    }
    fn cuGraphInstantiateWithParams(exec: *mut *mut c_void, graph: *mut c_void, params: *mut u8) {
        rt(g::cudaGraphInstantiateWithParams(exec, graph, params))
    }
    fn cuGraphLaunch(exec: *mut c_void, stream: *mut c_void) {
        rt(g::cudaGraphLaunch(exec, stream))
    }
    fn cuGraphExecDestroy(exec: *mut c_void) {
        rt(g::cudaGraphExecDestroy(exec))
    }
    fn cuGraphExecUpdate_v2(exec: *mut c_void, graph: *mut c_void, info: *mut u8) {
        exec_exists(exec)?;
        rt(g::cudaGraphExecUpdate(exec, graph, info))
    }
    fn cuStreamBeginCapture_v2(stream: *mut c_void, mode: u32) {
        // CUstreamCaptureMode and cudaStreamCaptureMode have the same values.
        rt(g::cudaStreamBeginCapture(stream, mode))
    }
    fn cuStreamEndCapture(stream: *mut c_void, graph: *mut *mut c_void) {
        rt(g::cudaStreamEndCapture(stream, graph))
    }
    fn cuStreamIsCapturing(stream: *mut c_void, status: *mut u32) {
        rt(super::stream::cudaStreamIsCapturing(stream, status))
    }
    fn cuStreamGetCaptureInfo_v3(stream: *mut c_void, status: *mut u32, id: *mut u64, graph: *mut *mut c_void, deps: *mut *const u64, edge_data: *mut *const u64, n: *mut usize) {
        rt(g::cudaStreamGetCaptureInfo(stream, status, id, graph, deps, edge_data, n))
    }
    fn cuThreadExchangeStreamCaptureMode(mode: *mut u32) {
        rt(g::cudaThreadExchangeStreamCaptureMode(mode))
    }
    fn cuGraphMemcpyNodeGetParams(node: *mut c_void, params: *mut u8) {
        if params.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let mut r = [0u8; crate::abi_gen::CUDAMEMCPY3DPARMS_SIZE];
        rt(g::cudaGraphMemcpyNodeGetParams(node, r.as_mut_ptr()))?;
        super::driver_mem::write_copy3d(&r, params)
    }
    fn cuGraphMemcpyNodeSetParams(node: *mut c_void, params: *const u8) {
        let p = super::driver_mem::copy3d_params(params)?;
        rt(g::cudaGraphMemcpyNodeSetParams(node, p.as_ptr()))
    }
    fn cuGraphExecMemcpyNodeSetParams(exec: *mut c_void, node: *mut c_void, params: *const u8, ctx: usize) {
        node_ctx(ctx)?;
        let p = super::driver_mem::copy3d_params(params)?;
        rt(g::cudaGraphExecMemcpyNodeSetParams(exec, node, p.as_ptr()))
    }
    fn cuGraphMemsetNodeGetParams(node: *mut c_void, params: *mut u8) {
        rt(g::cudaGraphMemsetNodeGetParams(node, params))
    }
    fn cuGraphMemsetNodeSetParams(node: *mut c_void, params: *const u8) {
        rt(g::cudaGraphMemsetNodeSetParams(node, params))
    }
    fn cuGraphExecMemsetNodeSetParams(exec: *mut c_void, node: *mut c_void, params: *const u8, ctx: usize) {
        node_ctx(ctx)?;
        rt(g::cudaGraphExecMemsetNodeSetParams(exec, node, params))
    }
    fn cuGraphHostNodeGetParams(node: *mut c_void, params: *mut u8) {
        rt(g::cudaGraphHostNodeGetParams(node, params))
    }
    fn cuGraphHostNodeSetParams(node: *mut c_void, params: *const u8) {
        rt(g::cudaGraphHostNodeSetParams(node, params))
    }
    fn cuGraphExecHostNodeSetParams(exec: *mut c_void, node: *mut c_void, params: *const u8) {
        rt(g::cudaGraphExecHostNodeSetParams(exec, node, params))
    }
    fn cuGraphChildGraphNodeGetGraph(node: *mut c_void, graph: *mut *mut c_void) {
        rt(g::cudaGraphChildGraphNodeGetGraph(node, graph))
    }
    fn cuGraphExecChildGraphNodeSetParams(exec: *mut c_void, node: *mut c_void, child: *mut c_void) {
        rt(g::cudaGraphExecChildGraphNodeSetParams(exec, node, child))
    }
    fn cuGraphEventRecordNodeGetEvent(node: *mut c_void, event: *mut *mut c_void) {
        rt(g::cudaGraphEventRecordNodeGetEvent(node, event))
    }
    fn cuGraphEventRecordNodeSetEvent(node: *mut c_void, event: *mut c_void) {
        rt(g::cudaGraphEventRecordNodeSetEvent(node, event))
    }
    fn cuGraphEventWaitNodeGetEvent(node: *mut c_void, event: *mut *mut c_void) {
        rt(g::cudaGraphEventWaitNodeGetEvent(node, event))
    }
    fn cuGraphEventWaitNodeSetEvent(node: *mut c_void, event: *mut c_void) {
        rt(g::cudaGraphEventWaitNodeSetEvent(node, event))
    }
    fn cuGraphExecEventRecordNodeSetEvent(exec: *mut c_void, node: *mut c_void, event: *mut c_void) {
        rt(g::cudaGraphExecEventRecordNodeSetEvent(exec, node, event))
    }
    fn cuGraphExecEventWaitNodeSetEvent(exec: *mut c_void, node: *mut c_void, event: *mut c_void) {
        rt(g::cudaGraphExecEventWaitNodeSetEvent(exec, node, event))
    }
    fn cuGraphNodeGetDependencies_v2(node: *mut c_void, list: *mut u64, edge_data: *mut u64, count: *mut usize) {
        rt(g::cudaGraphNodeGetDependencies(node, list, edge_data, count))
    }
    fn cuGraphNodeGetDependentNodes_v2(node: *mut c_void, list: *mut u64, edge_data: *mut u64, count: *mut usize) {
        rt(g::cudaGraphNodeGetDependentNodes(node, list, edge_data, count))
    }
    fn cuGraphRemoveDependencies_v2(graph: *mut c_void, from: *const u64, to: *const u64, edge_data: *const u64, n: usize) {
        rt(g::cudaGraphRemoveDependencies(graph, from, to, edge_data, n))
    }
    fn cuGraphNodeFindInClone(node: *mut *mut c_void, original: *mut c_void, clone: *mut c_void) {
        rt(g::cudaGraphNodeFindInClone(node, original, clone))
    }
    fn cuGraphUpload(exec: *mut c_void, stream: *mut c_void) {
        rt(g::cudaGraphUpload(exec, stream))
    }
    fn cuGraphNodeSetEnabled(exec: *mut c_void, node: *mut c_void, enabled: u32) {
        rt(g::cudaGraphNodeSetEnabled(exec, node, enabled))
    }
    fn cuGraphNodeGetEnabled(exec: *mut c_void, node: *mut c_void, enabled: *mut u32) {
        rt(g::cudaGraphNodeGetEnabled(exec, node, enabled))
    }
    fn cuGraphExecGetFlags(exec: *mut c_void, flags: *mut u64) {
        rt(g::cudaGraphExecGetFlags(exec, flags))
    }
    fn cuLaunchHostFunc(stream: *mut c_void, func: *const c_void, data: *mut c_void) {
        rt(super::stream::cudaLaunchHostFunc(stream, func, data))
    }
    fn cuStreamBeginCaptureToGraph(stream: *mut c_void, graph: *mut c_void, dep: *const u64, edge_data: *const u64, n: usize, mode: u32) {
        rt(g::cudaStreamBeginCaptureToGraph(stream, graph, dep, edge_data, n, mode))
    }
    fn cuStreamBeginRecaptureToGraph(stream: *mut c_void, mode: u32, graph: *mut c_void, callback: *const c_void, data: *mut c_void) {
        let cb = (!callback.is_null()).then_some((callback as u64, data as u64));
        let stream = crate::state::resolve_stream(stream as u64, false)?;
        crate::capture::begin_recapture(stream, mode, graph as u64, cb, crate::capture::Face::Driver)
    }
    fn cuStreamUpdateCaptureDependencies_v2(stream: *mut c_void, dep: *const u64, edge_data: *const u64, n: usize, flags: u32) {
        rt(g::cudaStreamUpdateCaptureDependencies(stream, dep, edge_data, n, flags))
    }
    fn cuGraphKernelNodeGetAttribute(node: *mut c_void, id: u32, value: *mut u8) {
        // CUkernelNodeAttrID and CUkernelNodeAttrValue are the runtime's launch attributes.
        rt(g::cudaGraphKernelNodeGetAttribute(node, id, value))
    }
    fn cuGraphKernelNodeSetAttribute(node: *mut c_void, id: u32, value: *const u8) {
        rt(g::cudaGraphKernelNodeSetAttribute(node, id, value))
    }
    fn cuGraphKernelNodeCopyAttributes(dst: *mut c_void, src: *mut c_void) {
        rt(g::cudaGraphKernelNodeCopyAttributes(dst, src))
    }
    fn cuGraphDebugDotPrint(graph: *mut c_void, path: *const c_char, flags: u32) {
        rt(g::cudaGraphDebugDotPrint(graph, path, flags))
    }
    fn cuUserObjectCreate(obj: *mut *mut c_void, ptr: *mut c_void, destroy: Option<unsafe extern "C" fn(*mut c_void)>, initial: u32, flags: u32) {
        rt(g::cudaUserObjectCreate(obj, ptr, destroy, initial, flags))
    }
    fn cuUserObjectRetain(obj: *mut c_void, count: u32) {
        rt(g::cudaUserObjectRetain(obj, count))
    }
    fn cuUserObjectRelease(obj: *mut c_void, count: u32) {
        rt(g::cudaUserObjectRelease(obj, count))
    }
    fn cuGraphRetainUserObject(graph: *mut c_void, obj: *mut c_void, count: u32, flags: u32) {
        rt(g::cudaGraphRetainUserObject(graph, obj, count, flags))
    }
    fn cuGraphReleaseUserObject(graph: *mut c_void, obj: *mut c_void, count: u32) {
        rt(g::cudaGraphReleaseUserObject(graph, obj, count))
    }
    // The older versions under their plain names (and `cuStreamGetCaptureInfo_v2`,
    // `cuGraphInstantiate_v2`), which `cuGetProcAddress` gives a program that asks for a CUDA
    // version before the newer signature (`RENAMED` in `api::driver`), and which a program
    // built against older headers links to: no edge data, `CUDA_KERNEL_NODE_PARAMS_v1`
    // (the runtime's 56 bytes), the CUDA 10/11 results of an update or an instantiation.
    fn cuGraphGetEdges(graph: *mut c_void, from: *mut u64, to: *mut u64, count: *mut usize) {
        rt(g::cudaGraphGetEdges(graph, from, to, std::ptr::null_mut(), count))
    }
    fn cuGraphNodeGetDependencies(node: *mut c_void, list: *mut u64, count: *mut usize) {
        rt(g::cudaGraphNodeGetDependencies(node, list, std::ptr::null_mut(), count))
    }
    fn cuGraphNodeGetDependentNodes(node: *mut c_void, list: *mut u64, count: *mut usize) {
        rt(g::cudaGraphNodeGetDependentNodes(node, list, std::ptr::null_mut(), count))
    }
    fn cuGraphAddDependencies(graph: *mut c_void, from: *const u64, to: *const u64, n: usize) {
        rt(g::cudaGraphAddDependencies(graph, from, to, std::ptr::null(), n))
    }
    fn cuGraphRemoveDependencies(graph: *mut c_void, from: *const u64, to: *const u64, n: usize) {
        rt(g::cudaGraphRemoveDependencies(graph, from, to, std::ptr::null(), n))
    }
    fn cuStreamGetCaptureInfo(stream: *mut c_void, status: *mut u32, id: *mut u64) {
        let none = std::ptr::null_mut();
        rt(g::cudaStreamGetCaptureInfo(stream, status, id, none, none.cast(), none.cast(), none.cast()))
    }
    fn cuStreamGetCaptureInfo_v2(stream: *mut c_void, status: *mut u32, id: *mut u64, graph: *mut *mut c_void, deps: *mut *const u64, n: *mut usize) {
        rt(g::cudaStreamGetCaptureInfo(stream, status, id, graph, deps, std::ptr::null_mut(), n))
    }
    fn cuStreamUpdateCaptureDependencies(stream: *mut c_void, dep: *const u64, n: usize, flags: u32) {
        rt(g::cudaStreamUpdateCaptureDependencies(stream, dep, std::ptr::null(), n, flags))
    }
    fn cuStreamBeginCapture(stream: *mut c_void) {
        // CUDA 10.0's form: no mode, CU_STREAM_CAPTURE_MODE_GLOBAL.
        rt(g::cudaStreamBeginCapture(stream, 0))
    }
    fn cuGraphAddKernelNode(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize, params: *const u8) {
        context::check_launch(field::<usize>(params, 0)?)?;
        rt(g::cudaGraphAddKernelNode(node, graph, dep, n, params))
    }
    fn cuGraphKernelNodeGetParams(node: *mut c_void, params: *mut u8) {
        rt(g::cudaGraphKernelNodeGetParams(node, params))
    }
    fn cuGraphKernelNodeSetParams(node: *mut c_void, params: *const u8) {
        context::check_launch(field::<usize>(params, 0)?)?;
        rt(g::cudaGraphKernelNodeSetParams(node, params))
    }
    fn cuGraphExecKernelNodeSetParams(exec: *mut c_void, node: *mut c_void, params: *const u8) {
        context::check_launch(field::<usize>(params, 0)?)?;
        rt(g::cudaGraphExecKernelNodeSetParams(exec, node, params))
    }
    fn cuGraphExecUpdate(exec: *mut c_void, graph: *mut c_void, error_node: *mut u64, result: *mut u32) {
        if error_node.is_null() || result.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        exec_exists(exec)?;
        let mut info = [0u8; CUDAGRAPHEXECUPDATERESULTINFO_ST_SIZE];
        let r = rt(g::cudaGraphExecUpdate(exec, graph, info.as_mut_ptr()));
        out(result, field(info.as_ptr(), CUDAGRAPHEXECUPDATERESULTINFO_ST_RESULT)?)?;
        out(error_node, field(info.as_ptr(), CUDAGRAPHEXECUPDATERESULTINFO_ST_ERRORNODE)?)?;
        r
    }
    fn cuGraphInstantiate(exec: *mut *mut c_void, graph: *mut c_void, error_node: *mut u64, log: *mut c_char, size: usize) {
        instantiate_logged(exec, graph, error_node, log, size)
    }
    fn cuGraphInstantiate_v2(exec: *mut *mut c_void, graph: *mut c_void, error_node: *mut u64, log: *mut c_char, size: usize) {
        instantiate_logged(exec, graph, error_node, log, size)
    }
    fn cuGraphAddNode_v2(node: *mut *mut c_void, graph: *mut c_void, dep: *const u64, edge_data: *const u64, n: usize, params: *mut u8) {
        let mut b = node_params(params)?;
        rt(g::cudaGraphAddNode(node, graph, dep, edge_data, n, b.as_mut_ptr()))?;
        // What the runtime wrote back (a conditional node's body graphs, an allocation's
        // address) into the program's structure (kernel and copy members have no outputs).
        if ![TYPE_KERNEL, TYPE_MEMCPY].contains(&field::<u32>(params, NODE_TYPE)?) {
            write_node_params(&b, params)?;
        }
        Ok(())
    }
    fn cuGraphConditionalHandleCreate(handle: *mut u64, graph: *mut c_void, ctx: usize, default: u32, flags: u32) {
        node_ctx(ctx)?;
        rt(g::cudaGraphConditionalHandleCreate_v2(handle, graph, ctx as *mut c_void, default, flags))
    }
    fn cuGraphNodeGetParams(node: *mut c_void, params: *mut u8) {
        let mut r = [0u8; CUDAGRAPHNODEPARAMS_SIZE];
        rt(g::cudaGraphNodeGetParams(node, r.as_mut_ptr()))?;
        write_node_params(&r, params)
    }
    fn cuGraphNodeSetParams(node: *mut c_void, params: *mut u8) {
        let mut b = node_params(params)?;
        rt(g::cudaGraphNodeSetParams(node, b.as_mut_ptr()))
    }
    fn cuGraphExecNodeSetParams(exec: *mut c_void, node: *mut c_void, params: *mut u8) {
        let mut b = node_params(params)?;
        rt(g::cudaGraphExecNodeSetParams(exec, node, b.as_mut_ptr()))
    }
    fn cuGraphAddMemAllocNode(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize, params: *mut u8) {
        // CUDA_MEM_ALLOC_NODE_PARAMS is cudaMemAllocNodeParams (CUmemPoolProps is
        // cudaMemPoolProps, 88 bytes).
        rt(g::cudaGraphAddMemAllocNode(node, graph, dep, n, params))
    }
    fn cuGraphMemAllocNodeGetParams(node: *mut c_void, params: *mut u8) {
        rt(g::cudaGraphMemAllocNodeGetParams(node, params))
    }
    fn cuGraphAddMemFreeNode(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize, dptr: u64) {
        rt(g::cudaGraphAddMemFreeNode(node, graph, dep, n, dptr as *mut c_void))
    }
    fn cuGraphMemFreeNodeGetParams(node: *mut c_void, dptr: *mut u64) {
        rt(g::cudaGraphMemFreeNodeGetParams(node, dptr))
    }
    fn cuDeviceGraphMemTrim(dev: i32) {
        rt(g::cudaDeviceGraphMemTrim(dev))
    }
    fn cuDeviceGetGraphMemAttribute(dev: i32, attr: u32, value: *mut u64) {
        // CUgraphMem_attribute and cudaGraphMemAttributeType have the same values.
        rt(g::cudaDeviceGetGraphMemAttribute(dev, attr, value))
    }
    fn cuDeviceSetGraphMemAttribute(dev: i32, attr: u32, value: *mut u64) {
        rt(g::cudaDeviceSetGraphMemAttribute(dev, attr, value))
    }
}
