//! CUDA graphs and stream capture: the exported entry points. Graphs live in this process
//! (`crate::graph`); launching an executable graph queues its nodes, in one topological
//! order, as ordinary requests on the launch stream (`run_node`), so they are stream-ordered
//! with the stream's other work and need nothing new from the proxy. A conditional node is
//! the exception: its condition is read (a synchronous 4-byte copy on the launch stream, so
//! the launch waits there for the nodes before it) and the body it selects is queued, again
//! and again for WHILE (`run_nodes`). Stream capture is in `crate::capture`.
#![allow(unsafe_code, non_upper_case_globals)]

use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crum_wire::{cuda, AllocKind, Body, Request};

use crate::abi_gen::*;
use crate::api::memory::{D2H, H2D};
use crate::capture;
use crate::client::{call, send};
use crate::errors::CudaResult;
use crate::ffi::*;
use crate::graph::{store, CondHandle, CondNode, ExecNode, GraphAlloc, KernelNode, MemsetNode, NodeKind, Store};
use crate::state::*;

/// A `cudaMemcpy3DParms` for a plain (pitched) copy: what a captured copy or a 1-D copy
/// node keeps.
pub fn copy_params(
    dst: u64,
    dpitch: u64,
    src: u64,
    spitch: u64,
    width: u64,
    height: u64,
    kind: u32,
) -> Box<[u8; CUDAMEMCPY3DPARMS_SIZE]> {
    let mut p = Box::new([0u8; CUDAMEMCPY3DPARMS_SIZE]);
    let b = p.as_mut_ptr();
    let ptr = |off: usize, a: u64, pitch: u64| {
        set_field(b, off + CUDAPITCHEDPTR_PTR, a);
        set_field(b, off + CUDAPITCHEDPTR_PITCH, pitch);
        set_field(b, off + CUDAPITCHEDPTR_XSIZE, width);
        set_field(b, off + CUDAPITCHEDPTR_YSIZE, height);
    };
    ptr(CUDAMEMCPY3DPARMS_SRCPTR, src, spitch);
    ptr(CUDAMEMCPY3DPARMS_DSTPTR, dst, dpitch);
    set_field(b, CUDAMEMCPY3DPARMS_EXTENT + CUDAEXTENT_WIDTH, width);
    set_field(b, CUDAMEMCPY3DPARMS_EXTENT + CUDAEXTENT_HEIGHT, height);
    set_field(b, CUDAMEMCPY3DPARMS_EXTENT + CUDAEXTENT_DEPTH, 1u64);
    set_field(b, CUDAMEMCPY3DPARMS_KIND, kind);
    p
}

/// A program's `cudaMemcpy3DParms`, copied.
fn read_copy3d(p: *const u8) -> CudaResult<Box<[u8; CUDAMEMCPY3DPARMS_SIZE]>> {
    let kind: u32 = field(p, CUDAMEMCPY3DPARMS_KIND)?;
    if kind > 4 {
        return Err(cuda::ERROR_INVALID_MEMCPY_DIRECTION);
    }
    let mut out = Box::new([0u8; CUDAMEMCPY3DPARMS_SIZE]);
    out.copy_from_slice(bytes(p, CUDAMEMCPY3DPARMS_SIZE)?);
    Ok(out)
}

fn copy1d(dst: u64, src: u64, count: u64, kind: u32) -> CudaResult<NodeKind> {
    if kind > 4 {
        return Err(cuda::ERROR_INVALID_MEMCPY_DIRECTION);
    }
    Ok(NodeKind::Memcpy(copy_params(dst, count, src, count, count, 1, kind)))
}

fn read_kernel(p: *const u8) -> CudaResult<KernelNode> {
    let func: usize = field(p, CUDAKERNELNODEPARAMS_FUNC)?;
    let grid: Dim3 = field(p, CUDAKERNELNODEPARAMS_GRIDDIM)?;
    let block: Dim3 = field(p, CUDAKERNELNODEPARAMS_BLOCKDIM)?;
    let shared: u32 = field(p, CUDAKERNELNODEPARAMS_SHAREDMEMBYTES)?;
    let args: *mut *mut c_void = field(p, CUDAKERNELNODEPARAMS_KERNELPARAMS)?;
    let extra: *mut *mut c_void = field(p, CUDAKERNELNODEPARAMS_EXTRA)?;
    crate::api::launch::kernel_node(func, grid, block, args, extra, shared as usize, false)
}

/// A kernel node launch attribute (`cudaLaunchAttributeID`) a node keeps.
enum KernelAttr {
    Window([u8; CUDAACCESSPOLICYWINDOW_SIZE]),
    Cooperative(bool),
    Priority(i32),
}

/// Decode and check a kernel node attribute value: the access policy window as for streams,
/// cooperative, and a priority (clamped to the device's range, as for streams).
fn kernel_attr_decode(id: u32, v: *const u8) -> CudaResult<KernelAttr> {
    if v.is_null() {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    match id {
        cudaLaunchAttributeAccessPolicyWindow => {
            let w = crate::api::stream_attrs::read_window(v)?;
            crate::api::stream_attrs::check_window(&w)?;
            let mut raw = [0u8; CUDAACCESSPOLICYWINDOW_SIZE];
            for (i, b) in raw.iter_mut().enumerate() {
                *b = field(v, i)?;
            }
            Ok(KernelAttr::Window(raw))
        }
        cudaLaunchAttributeCooperative => Ok(KernelAttr::Cooperative(field::<i32>(v, 0)? != 0)),
        cudaLaunchAttributePriority => {
            let (least, greatest) = crate::api::stream::PRIORITY_RANGE;
            Ok(KernelAttr::Priority(field::<i32>(v, 0)?.clamp(greatest, least)))
        }
        _ => Err(cuda::ERROR_INVALID_VALUE),
    }
}

/// A kernel node's attribute `id` into the `cudaLaunchAttributeValue` at `v`.
fn kernel_attr_get(k: &KernelNode, id: u32, v: *mut u8) -> CudaResult<()> {
    if !matches!(id, cudaLaunchAttributeAccessPolicyWindow | cudaLaunchAttributeCooperative | cudaLaunchAttributePriority) {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    zero(v, CUDALAUNCHATTRIBUTE_ST_SIZE - CUDALAUNCHATTRIBUTE_ST_VAL)?;
    match id {
        // Never set: an empty window.
        cudaLaunchAttributeAccessPolicyWindow => {
            for (i, &b) in k.access_window.iter().flatten().enumerate() {
                set_field(v, i, b);
            }
        }
        cudaLaunchAttributeCooperative => set_field(v, 0, k.cooperative as i32),
        _ => set_field(v, 0, k.priority),
    }
    Ok(())
}

fn read_memset(p: *const u8) -> CudaResult<MemsetNode> {
    let m = MemsetNode {
        dst: field(p, CUDAMEMSETPARAMS_DST)?,
        pitch: field(p, CUDAMEMSETPARAMS_PITCH)?,
        value: field(p, CUDAMEMSETPARAMS_VALUE)?,
        elem: field(p, CUDAMEMSETPARAMS_ELEMENTSIZE)?,
        width: field(p, CUDAMEMSETPARAMS_WIDTH)?,
        height: field(p, CUDAMEMSETPARAMS_HEIGHT)?,
    };
    if !matches!(m.elem, 1 | 2 | 4) || m.width == 0 || m.height == 0 {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let row = m.width * m.elem as u64;
    let pitch = if m.height == 1 { row } else { m.pitch };
    if pitch < row {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    crate::api::memory::check_device_range(m.dst, pitch * (m.height - 1) + row)?;
    Ok(MemsetNode { pitch, ..m })
}

fn read_host(p: *const u8) -> CudaResult<NodeKind> {
    let func: u64 = field(p, CUDAHOSTNODEPARAMS_FN)?;
    let data: u64 = field(p, CUDAHOSTNODEPARAMS_USERDATA)?;
    if func == 0 {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    Ok(NodeKind::Host { func, data })
}

fn deps(p: *const u64, n: usize) -> CudaResult<Vec<u64>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() || n > 1 << 20 {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    (0..n).map(|i| read(p.wrapping_add(i))).collect()
}

/// Only default edges (no ports, no programmatic edges): `edge_data` NULL or all zero.
fn check_edge_data(edge_data: *const u64, n: usize) -> CudaResult<()> {
    if edge_data.is_null() {
        return Ok(());
    }
    for i in 0..n {
        if read(edge_data.wrapping_add(i))? != 0 {
            return Err(cuda::ERROR_NOT_SUPPORTED);
        }
    }
    Ok(())
}

fn add(
    node_out: *mut *mut c_void,
    graph: *mut c_void,
    dep: *const *mut c_void,
    n: usize,
    kind: NodeKind,
) -> CudaResult<()> {
    if node_out.is_null() {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let d = deps(dep as *const u64, n)?;
    let h = store().add_node(graph as u64, &d, kind)?;
    out(node_out, h as *mut c_void)
}

/// Write a list of handles the CUDA way: with `items` NULL only the count; else up to
/// `*count` entries (the rest NULL when there are fewer) and the real count.
fn write_list(items: *mut u64, edge_data: *mut u64, count: *mut usize, list: &[u64]) -> CudaResult<()> {
    let cap = read(count as *const usize)?;
    if !items.is_null() {
        for i in 0..cap {
            out(items.wrapping_add(i), list.get(i).copied().unwrap_or(0))?;
            if !edge_data.is_null() {
                out(edge_data.wrapping_add(i), 0u64)?;
            }
        }
    }
    out(count, list.len())
}

fn set_kind(node: *mut c_void, f: impl FnOnce(&NodeKind) -> CudaResult<NodeKind>) -> CudaResult<()> {
    let mut s = store();
    let n = s.node_mut(node as u64)?;
    n.kind = f(&n.kind)?;
    n.argv.clear();
    Ok(())
}

/// Replace the parameters of `node` in executable graph `exec` (same node type only).
fn exec_set(exec: *mut c_void, node: *mut c_void, kind: NodeKind) -> CudaResult<()> {
    let mut s = store();
    let e = s.exec_mut(exec as u64)?;
    let &pos = e.index.get(&(node as u64)).ok_or(cuda::ERROR_INVALID_VALUE)?;
    let nodes = Arc::make_mut(&mut e.nodes);
    if nodes[pos].kind.type_code() != kind.type_code() {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    if let (NodeKind::Kernel(old), NodeKind::Kernel(new)) = (&nodes[pos].kind, &kind) {
        if old.host_fun != new.host_fun {
            // A different function needs cudaGraphExecUpdate's checks; not here.
            return Err(cuda::ERROR_INVALID_VALUE);
        }
    }
    nodes[pos].kind = kind;
    Ok(())
}

/// Queue the enabled nodes of `nodes` on `stream` (resolved), in order; a conditional node
/// reads its condition when its turn comes and runs the body it selects.
fn run_nodes(nodes: &[ExecNode], stream: u64) -> CudaResult<()> {
    for n in nodes.iter().filter(|n| n.enabled) {
        match &n.kind {
            NodeKind::Conditional(c) => run_conditional(c, &n.bodies, stream)?,
            k => run_node(k, stream)?,
        }
    }
    Ok(())
}

/// Most iterations of a WHILE node's body in one launch: a kernel that never clears the
/// condition would otherwise hang the launching thread forever.
const MAX_WHILE_ITERATIONS: u64 = 1 << 32;

/// Conditional node `c`: its condition once the nodes before it have run, then the body it
/// selects (IF: 0 when non-zero, else 1 if there is one; SWITCH: the value's; WHILE: body 0
/// until the condition is 0).
fn run_conditional(c: &CondNode, bodies: &[Vec<ExecNode>], stream: u64) -> CudaResult<()> {
    let value = read_condition(c.handle, stream)?;
    match c.ty {
        cudaGraphCondTypeIf => {
            let body = if value != 0 { bodies.first() } else { bodies.get(1) };
            body.map_or(Ok(()), |b| run_nodes(b, stream))
        }
        cudaGraphCondTypeWhile => {
            let body = bodies.first().ok_or(cuda::ERROR_INVALID_VALUE)?;
            let (mut value, mut n) = (value, 0u64);
            while value != 0 {
                n += 1;
                if n > MAX_WHILE_ITERATIONS {
                    return Err(cuda::ERROR_LAUNCH_TIMEOUT);
                }
                run_nodes(body, stream)?;
                value = read_condition(c.handle, stream)?;
            }
            Ok(())
        }
        cudaGraphCondTypeSwitch => bodies.get(value as usize).map_or(Ok(()), |b| run_nodes(b, stream)),
        _ => Err(cuda::ERROR_INVALID_VALUE),
    }
}

/// The condition at `handle` once the work queued on `stream` before now has run.
fn read_condition(handle: u64, stream: u64) -> CudaResult<u32> {
    let mut v = [0u8; 4];
    crate::api::memory::copy(v.as_mut_ptr() as u64, 4, handle, 4, 4, 1, D2H, stream, true)?;
    Ok(u32::from_le_bytes(v))
}

/// Write `value` to the condition at `handle`, in order on `stream` (from pageable memory:
/// the proxy takes the bytes before the call returns).
fn write_condition(handle: u64, value: u32, stream: u64) -> CudaResult<()> {
    let v = value.to_le_bytes();
    crate::api::memory::copy(handle, 4, v.as_ptr() as u64, 4, 4, 1, H2D, stream, false)
}

/// `cudaGraphConditionalHandleCreate[_v2]`: 4 bytes of device memory (in a 512-byte block)
/// that hold the condition, set to the default now.
fn conditional_handle_create(out_handle: *mut u64, graph: u64, default: u32, flags: u32) -> CudaResult<()> {
    if out_handle.is_null() || flags & !cudaGraphCondAssignDefault != 0 {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    store().graph(graph)?;
    if !props()?.graph_conditionals {
        // A real GPU's cudaGraphSetConditional needs the driver's own graphs.
        return Err(crate::errors::unsupported("cudaGraphConditionalHandleCreate on this device"));
    }
    let addr = crate::api::memory::alloc_any(crate::pool::BLOCK_ALIGN, AllocKind::Device, MemKind::Device, 0)?;
    let h = CondHandle { graph, default, assign_default: flags & cudaGraphCondAssignDefault != 0 };
    let r = write_condition(addr, default, resolve_stream(0, false)?);
    if let Err(e) = r {
        let _ = crate::api::memory::free_any(addr, false);
        return Err(e);
    }
    store().handles.insert(addr, h);
    out(out_handle, addr)
}

/// Give back the memory of the conditional handles whose graph is gone.
fn free_orphan_handles() {
    let gone = store().orphan_handles();
    for a in gone {
        if crate::api::memory::free_any(a, false).is_err() {
            tracing::warn!(addr = a, "could not free a conditional handle's memory");
        }
    }
}

/// A conditional node (`cudaGraphAddNode` with `cudaGraphNodeTypeConditional`): checks the
/// kind and size, makes the empty body graphs and hands them out in `phGraph_out`.
fn add_conditional(node_out: *mut *mut c_void, graph: u64, d: &[u64], u: *mut u8) -> CudaResult<()> {
    let handle: u64 = field(u, CUDACONDITIONALNODEPARAMS_HANDLE)?;
    let ty: u32 = field(u, CUDACONDITIONALNODEPARAMS_TYPE)?;
    let size: u32 = field(u, CUDACONDITIONALNODEPARAMS_SIZE_FIELD)?;
    let size_ok = match ty {
        cudaGraphCondTypeIf => matches!(size, 1 | 2),
        cudaGraphCondTypeWhile => size == 1,
        cudaGraphCondTypeSwitch => (1..=1024).contains(&size),
        _ => false,
    };
    if !size_ok {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let mut s = store();
    if !s.handles.contains_key(&handle) {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let h = s.add_node(graph, d, NodeKind::Empty)?;
    let mut bodies = Vec::with_capacity(size as usize);
    for _ in 0..size {
        let b = s.create_graph();
        s.graphs.get_mut(&b).ok_or(cuda::ERROR_INVALID_VALUE)?.owner = Some(h);
        bodies.push(b);
    }
    let node = s.node_mut(h)?;
    node.kind = NodeKind::Conditional(CondNode { handle, ty, bodies });
    let NodeKind::Conditional(c) = &node.kind else { return Err(cuda::ERROR_UNKNOWN) };
    // The array stays where it is for the life of the node (CUDA owns it, the program reads it).
    set_field(u, CUDACONDITIONALNODEPARAMS_PHGRAPH_OUT, c.bodies.as_ptr() as u64);
    out(node_out, h as *mut c_void)
}

/// Queue one node on `stream` (resolved).
fn run_node(kind: &NodeKind, stream: u64) -> CudaResult<()> {
    match kind {
        NodeKind::Empty | NodeKind::Child(_) => Ok(()),
        // Run by `run_nodes`, which has its bodies.
        NodeKind::Conditional(_) => Err(cuda::ERROR_INVALID_VALUE),
        NodeKind::Kernel(k) => crate::api::launch::issue(k, stream),
        NodeKind::Memcpy(p) => crate::api::array::memcpy3d(p.as_ptr(), stream, false),
        NodeKind::Memset(m) => run_memset(m, stream),
        NodeKind::Host { func, data } => crate::api::stream::host_func_on(stream, *func, *data),
        NodeKind::EventRecord(e) => send(&Request::EventRecord { event: *e, stream }),
        NodeKind::EventWait(e) => send(&Request::StreamWaitEvent { stream, event: *e }),
        // The memory was allocated with the node and stays at its address.
        NodeKind::MemAlloc(a) => {
            crate::graph::GraphMem::launched(a);
            Ok(())
        }
        NodeKind::MemFree(addr) => {
            let s = store();
            if let Some(a) = s.nodes.values().find_map(|n| match &n.kind {
                NodeKind::MemAlloc(a) if a.addr == *addr => Some(a.clone()),
                _ => None,
            }) {
                drop(s);
                crate::graph::GraphMem::freed(&a);
            }
            Ok(())
        }
    }
}

/// A graph allocation of `size` bytes (device memory, 512-byte granularity).
pub fn graph_alloc(size: u64) -> CudaResult<Arc<GraphAlloc>> {
    if size == 0 {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let size = size.checked_next_multiple_of(crate::pool::BLOCK_ALIGN).ok_or(cuda::ERROR_MEMORY_ALLOCATION)?;
    let addr = crate::api::memory::alloc_any(size, AllocKind::Device, MemKind::Device, 0)?;
    Ok(Arc::new(GraphAlloc {
        addr,
        size,
        freed_in_graph: AtomicBool::new(false),
        release: Some(release_graph_alloc),
        counted: Default::default(),
    }))
}

/// `cudaDeviceReset`: no graph memory is left.
pub fn reset_graph_mem() {
    crate::graph::GraphMem::reset();
}

fn release_graph_alloc(addr: u64, _size: u64) {
    if crate::api::memory::free_any(addr, false).is_err() {
        tracing::warn!(addr, "could not free a graph allocation");
    }
}

/// `cudaFree`/`cudaFreeAsync` of a graph allocation the graph does not free: counted as graph
/// memory until a trim.
pub fn forget_graph_alloc(addr: u64) {
    if crate::graph::GraphMem::current() == 0 {
        return;
    }
    let s = store();
    let hit = s.nodes.values().find_map(|n| match &n.kind {
        NodeKind::MemAlloc(a) if a.addr == addr && !a.freed_in_graph.load(Ordering::Acquire) => Some(a.clone()),
        _ => None,
    });
    drop(s);
    if let Some(a) = hit {
        crate::graph::GraphMem::freed(&a);
    }
}

/// A free node for `addr` in graph `g`: only the graph's own allocations.
fn free_node(s: &Store, g: u64, addr: u64) -> CudaResult<NodeKind> {
    let a = s.graph_alloc(g, addr).ok_or(cuda::ERROR_INVALID_VALUE)?;
    if a.freed_in_graph.swap(true, Ordering::AcqRel) {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    Ok(NodeKind::MemFree(addr))
}

/// A `cudaMemAllocNodeParams[V2]`: device memory of device 0, no IPC handles.
fn read_alloc(p: *const u8) -> CudaResult<u64> {
    let ty: u32 = field(p, CUDAMEMALLOCNODEPARAMS_POOLPROPS + CUDAMEMPOOLPROPS_ALLOCTYPE)?;
    let handles: u32 = field(p, CUDAMEMALLOCNODEPARAMS_POOLPROPS + CUDAMEMPOOLPROPS_HANDLETYPES)?;
    let loc = CUDAMEMALLOCNODEPARAMS_POOLPROPS + CUDAMEMPOOLPROPS_LOCATION;
    let lt: u32 = field(p, loc + CUDAMEMLOCATION_TYPE)?;
    let id: i32 = field(p, loc + CUDAMEMLOCATION_ID)?;
    if ty != 1 || lt != 1 || handles != 0 {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    if id != 0 {
        return Err(cuda::ERROR_INVALID_DEVICE);
    }
    field(p, CUDAMEMALLOCNODEPARAMS_BYTESIZE)
}

fn write_alloc(p: *mut u8, a: &GraphAlloc) -> CudaResult<()> {
    zero(p, CUDAMEMALLOCNODEPARAMS_SIZE)?;
    set_field(p, CUDAMEMALLOCNODEPARAMS_POOLPROPS + CUDAMEMPOOLPROPS_ALLOCTYPE, 1u32);
    let loc = CUDAMEMALLOCNODEPARAMS_POOLPROPS + CUDAMEMPOOLPROPS_LOCATION;
    set_field(p, loc + CUDAMEMLOCATION_TYPE, 1u32);
    set_field(p, CUDAMEMALLOCNODEPARAMS_BYTESIZE, a.size);
    set_field(p, CUDAMEMALLOCNODEPARAMS_DPTR, a.addr);
    Ok(())
}

/// Add a mem alloc node: the memory is allocated now; its address goes to `params.dptr`.
fn add_alloc_node(node_out: *mut *mut c_void, graph: u64, d: &[u64], params: *mut u8) -> CudaResult<()> {
    if node_out.is_null() {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let size = read_alloc(params)?;
    store().graph(graph)?;
    let a = graph_alloc(size)?;
    let addr = a.addr;
    let h = store().add_node(graph, d, NodeKind::MemAlloc(a))?;
    set_field(params, CUDAMEMALLOCNODEPARAMS_DPTR, addr);
    out(node_out, h as *mut c_void)
}

/// `cudaGraphNodeParams`: the node kind it describes (`graph`: where the node goes, for a
/// free node's check; child graphs and allocations are made by the caller).
fn read_generic(p: *const u8) -> CudaResult<(u32, *const u8)> {
    let ty: u32 = field(p, CUDAGRAPHNODEPARAMS_TYPE)?;
    Ok((ty, p.wrapping_add(CUDAGRAPHNODEPARAMS_KERNEL)))
}

fn decode_generic(ty: u32, u: *const u8) -> CudaResult<NodeKind> {
    Ok(match ty {
        cudaGraphNodeTypeKernel => {
            // Every function type (an entry function, a cudaKernel_t, a driver CUfunction) is
            // a kernel handle here (`api::driver`).
            let func: usize = field(u, CUDAKERNELNODEPARAMSV2_FUNC)?;
            let grid: Dim3 = field(u, CUDAKERNELNODEPARAMSV2_GRIDDIM)?;
            let block: Dim3 = field(u, CUDAKERNELNODEPARAMSV2_BLOCKDIM)?;
            let shared: u32 = field(u, CUDAKERNELNODEPARAMSV2_SHAREDMEMBYTES)?;
            let args: *mut *mut c_void = field(u, CUDAKERNELNODEPARAMSV2_KERNELPARAMS)?;
            let extra: *mut *mut c_void = field(u, CUDAKERNELNODEPARAMSV2_EXTRA)?;
            NodeKind::Kernel(crate::api::launch::kernel_node(func, grid, block, args, extra, shared as usize, false)?)
        }
        cudaGraphNodeTypeMemcpy => NodeKind::Memcpy(read_copy3d(u.wrapping_add(CUDAMEMCPYNODEPARAMS_COPYPARAMS))?),
        cudaGraphNodeTypeMemset => NodeKind::Memset(read_memset(u)?),
        cudaGraphNodeTypeHost => read_host(u)?,
        cudaGraphNodeTypeEmpty => NodeKind::Empty,
        cudaGraphNodeTypeWaitEvent | cudaGraphNodeTypeEventRecord => {
            let e: u64 = field(u, CUDAEVENTWAITNODEPARAMS_EVENT)?;
            if e == 0 {
                return Err(cuda::ERROR_INVALID_RESOURCE_HANDLE);
            }
            if ty == cudaGraphNodeTypeWaitEvent {
                NodeKind::EventWait(e)
            } else {
                NodeKind::EventRecord(e)
            }
        }
        _ => return Err(cuda::ERROR_NOT_SUPPORTED),
    })
}

/// Write `kind` as a `cudaGraphNodeParams`.
fn write_generic(p: *mut u8, kind: &NodeKind, argv: u64) -> CudaResult<()> {
    zero(p, CUDAGRAPHNODEPARAMS_SIZE)?;
    set_field(p, CUDAGRAPHNODEPARAMS_TYPE, kind.type_code());
    let u = p.wrapping_add(CUDAGRAPHNODEPARAMS_KERNEL);
    match kind {
        NodeKind::Kernel(k) => {
            set_field(u, CUDAKERNELNODEPARAMSV2_FUNC, k.host_fun);
            set_field(u, CUDAKERNELNODEPARAMSV2_GRIDDIM, k.grid);
            set_field(u, CUDAKERNELNODEPARAMSV2_BLOCKDIM, k.block);
            set_field(u, CUDAKERNELNODEPARAMSV2_SHAREDMEMBYTES, k.shared);
            set_field(u, CUDAKERNELNODEPARAMSV2_KERNELPARAMS, argv);
            set_field(u, CUDAKERNELNODEPARAMSV2_FUNCTIONTYPE, cudaKernelFunctionTypeDeviceEntry);
        }
        NodeKind::Memcpy(c) => {
            for (i, b) in c.iter().enumerate() {
                set_field(u, CUDAMEMCPYNODEPARAMS_COPYPARAMS + i, *b);
            }
        }
        NodeKind::Memset(m) => {
            set_field(u, CUDAMEMSETPARAMSV2_DST, m.dst);
            set_field(u, CUDAMEMSETPARAMSV2_PITCH, m.pitch);
            set_field(u, CUDAMEMSETPARAMSV2_VALUE, m.value);
            set_field(u, CUDAMEMSETPARAMSV2_ELEMENTSIZE, m.elem);
            set_field(u, CUDAMEMSETPARAMSV2_WIDTH, m.width);
            set_field(u, CUDAMEMSETPARAMSV2_HEIGHT, m.height);
        }
        NodeKind::Host { func, data } => {
            set_field(u, CUDAHOSTNODEPARAMSV2_FN, *func);
            set_field(u, CUDAHOSTNODEPARAMSV2_USERDATA, *data);
        }
        NodeKind::Child(g) => set_field(u, CUDACHILDGRAPHNODEPARAMS_GRAPH, *g),
        NodeKind::EventRecord(e) | NodeKind::EventWait(e) => set_field(u, CUDAEVENTWAITNODEPARAMS_EVENT, *e),
        NodeKind::MemAlloc(a) => {
            set_field(u, CUDAMEMALLOCNODEPARAMSV2_POOLPROPS + CUDAMEMPOOLPROPS_ALLOCTYPE, 1u32);
            set_field(u, CUDAMEMALLOCNODEPARAMSV2_POOLPROPS + CUDAMEMPOOLPROPS_LOCATION + CUDAMEMLOCATION_TYPE, 1u32);
            set_field(u, CUDAMEMALLOCNODEPARAMSV2_BYTESIZE, a.size);
            set_field(u, CUDAMEMALLOCNODEPARAMSV2_DPTR, a.addr);
        }
        NodeKind::MemFree(a) => set_field(u, CUDAMEMFREENODEPARAMS_DPTR, *a),
        NodeKind::Conditional(c) => {
            set_field(u, CUDACONDITIONALNODEPARAMS_HANDLE, c.handle);
            set_field(u, CUDACONDITIONALNODEPARAMS_TYPE, c.ty);
            set_field(u, CUDACONDITIONALNODEPARAMS_SIZE_FIELD, c.bodies.len() as u32);
            set_field(u, CUDACONDITIONALNODEPARAMS_PHGRAPH_OUT, c.bodies.as_ptr() as u64);
        }
        NodeKind::Empty => {}
    }
    Ok(())
}

/// The `kernelParams` array of a kernel node (pointers into its parameter block), kept in
/// the node for the program to read.
fn kernel_argv(node: u64) -> CudaResult<u64> {
    let host_fun = match store().node(node)?.kind {
        NodeKind::Kernel(ref k) => k.host_fun,
        _ => return Ok(0),
    };
    // The parameter layout (resolved when the node was made, so no proxy call here).
    let (_, info) = function(host_fun)?;
    let mut s = store();
    let n = s.node_mut(node)?;
    let NodeKind::Kernel(k) = &n.kind else { return Ok(0) };
    let base = k.params.as_ptr() as u64;
    n.argv = info.params.iter().map(|&(o, _)| base + o as u64).collect();
    Ok(n.argv.as_ptr() as u64)
}

fn add_generic(node_out: *mut *mut c_void, graph: u64, d: &[u64], params: *mut u8) -> CudaResult<()> {
    if node_out.is_null() {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let (ty, u) = read_generic(params)?;
    let u = u as *mut u8;
    match ty {
        cudaGraphNodeTypeGraph => {
            let child: u64 = field(u, CUDACHILDGRAPHNODEPARAMS_GRAPH)?;
            let own: u32 = field(u, CUDACHILDGRAPHNODEPARAMS_OWNERSHIP)?;
            let h = add_child(graph, d, child, own == cudaGraphChildGraphOwnershipMove)?;
            out(node_out, h as *mut c_void)
        }
        cudaGraphNodeTypeMemAlloc => add_alloc_node(node_out, graph, d, u),
        cudaGraphNodeTypeConditional => add_conditional(node_out, graph, d, u),
        cudaGraphNodeTypeMemFree => {
            let addr: u64 = field(u, CUDAMEMFREENODEPARAMS_DPTR)?;
            let mut s = store();
            let k = free_node(&s, graph, addr)?;
            let h = s.add_node(graph, d, k)?;
            out(node_out, h as *mut c_void)
        }
        _ => {
            let k = decode_generic(ty, u)?;
            let h = store().add_node(graph, d, k)?;
            out(node_out, h as *mut c_void)
        }
    }
}

/// A child graph node: a copy of `child`, or `child` itself when it is moved in.
fn add_child(graph: u64, d: &[u64], child: u64, moved: bool) -> CudaResult<u64> {
    let mut s = store();
    if s.has_uncopyable_nodes(child)? {
        return Err(cuda::ERROR_NOT_SUPPORTED);
    }
    if moved && s.graph(child)?.owner.is_some() {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let h = s.add_node(graph, d, NodeKind::Child(0))?;
    if moved {
        s.graphs.get_mut(&child).ok_or(cuda::ERROR_INVALID_VALUE)?.owner = Some(h);
        s.node_mut(h)?.kind = NodeKind::Child(child);
        return Ok(h);
    }
    match s.clone_graph(child, Some(h)) {
        Ok(c) => s.node_mut(h)?.kind = NodeKind::Child(c),
        Err(e) => {
            s.destroy_node(h)?;
            return Err(e);
        }
    }
    Ok(h)
}

/// A memset of 1-, 2- or 4-byte elements: a byte memset when every byte of the value is
/// the same, else a copy of the pattern (from pageable memory, so the copy is waited for
/// before the buffer goes; not a synchronous copy, which a capture elsewhere would refuse).
/// On a capturing stream (a driver memset, `cuMemsetD32Async`) it is a memset node: a
/// captured copy would read the pattern's buffer after it is gone.
pub(crate) fn run_memset(m: &MemsetNode, stream: u64) -> CudaResult<()> {
    if capture::record(stream, || Ok(NodeKind::Memset(*m)))? {
        return Ok(());
    }
    let val = m.value.to_le_bytes();
    let pat = &val[..m.elem as usize];
    let row = m.width * m.elem as u64;
    if pat.iter().all(|&b| b == pat[0]) {
        return crate::api::memory::memset(m.dst, m.pitch, pat[0] as i32, row, m.height, stream);
    }
    let n = usize::try_from(row * m.height).map_err(|_| cuda::ERROR_INVALID_VALUE)?;
    let buf: Vec<u8> = pat.iter().copied().cycle().take(n).collect();
    crate::api::memory::copy(m.dst, m.pitch, buf.as_ptr() as u64, row, row, m.height, 1, stream, false)
}

/// `cudaGraphLaunch`: the nodes in order on `stream`; a launch on another stream than the
/// previous one waits for it (CUDA orders launches of one executable graph).
fn launch(exec: *mut c_void, stream: *mut c_void, ptsz: bool) -> CudaResult<()> {
    let s = resolve_stream(stream as u64, ptsz)?;
    let nodes = store()
        .execs
        .get(&(exec as u64))
        .ok_or(cuda::ERROR_INVALID_VALUE)?
        .nodes
        .clone();
    // Launched into a capturing stream: the graph becomes a child node of the capture (not
    // one with conditional nodes, which CUDA does not allow in a child graph).
    if capture::record(s, || {
        if nodes.iter().any(|n| matches!(n.kind, NodeKind::Conditional(_))) {
            return Err(cuda::ERROR_NOT_SUPPORTED);
        }
        let mut st = store();
        let g = st.create_graph();
        let mut prev: Vec<u64> = Vec::new();
        for n in nodes.iter().filter(|n| n.enabled) {
            prev = vec![st.add_node(g, &prev, n.kind.clone())?];
        }
        Ok(NodeKind::Child(g))
    })? {
        return Ok(());
    }
    let (last, mut ev, defaults) = {
        let mut st = store();
        let e = st.exec_mut(exec as u64)?;
        (e.last_stream.replace(s), e.done_event, e.defaults.clone())
    };
    if let Some(prev) = last.filter(|&l| l != s) {
        if ev == 0 {
            let Body::Value(h) = call(&Request::EventCreate { flags: 2 })? else {
                return Err(cuda::ERROR_UNKNOWN);
            };
            ev = h;
            store().exec_mut(exec as u64)?.done_event = h;
        }
        send(&Request::EventRecord { event: ev, stream: prev })?;
        send(&Request::StreamWaitEvent { stream: s, event: ev })?;
    }
    for (h, v) in defaults {
        write_condition(h, v, s)?;
    }
    run_nodes(&nodes, s)
}

fn instantiate_with_params(exec: *mut *mut c_void, graph: *mut c_void, params: *mut u8, ptsz: bool) -> CudaResult<()> {
    let flags: u64 = field(params, CUDAGRAPHINSTANTIATEPARAMS_ST_FLAGS)?;
    let upload: u64 = field(params, CUDAGRAPHINSTANTIATEPARAMS_ST_UPLOADSTREAM)?;
    if flags & cudaGraphInstantiateFlagUpload as u64 != 0 {
        resolve_stream(upload, ptsz)?;
    }
    let r = instantiate(exec, graph, flags);
    let result = match r {
        Ok(()) => cudaGraphInstantiateSuccess,
        Err(cuda::ERROR_INVALID_VALUE) => cudaGraphInstantiateInvalidStructure,
        Err(_) => cudaGraphInstantiateError,
    };
    set_field(params, CUDAGRAPHINSTANTIATEPARAMS_ST_ERRNODE_OUT, 0u64);
    set_field(params, CUDAGRAPHINSTANTIATEPARAMS_ST_RESULT_OUT, result);
    r
}

fn instantiate(exec_out: *mut *mut c_void, graph: *mut c_void, flags: u64) -> CudaResult<()> {
    if exec_out.is_null() {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let h = store().instantiate(graph as u64, flags)?;
    out(exec_out, h as *mut c_void)
}

fn with_node<T>(node: *mut c_void, f: impl FnOnce(&Store, &crate::graph::Node) -> CudaResult<T>) -> CudaResult<T> {
    let s = store();
    let n = s.node(node as u64)?;
    f(&s, n)
}

fn dot(graph: u64, path: &str) -> CudaResult<()> {
    use std::fmt::Write;
    let s = store();
    let g = s.graph(graph)?;
    let mut t = format!("digraph graph_{} {{\n", g.id);
    for &n in &g.nodes {
        let node = s.node(n)?;
        let label = match &node.kind {
            NodeKind::Kernel(k) => {
                let name = state()
                    .funcs
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&k.host_fun)
                    .map_or_else(|| "?".to_string(), |f| f.name.clone());
                format!("kernel {name} <<<{:?}, {:?}>>>", k.grid, k.block)
            }
            NodeKind::Memcpy(_) => "memcpy".into(),
            NodeKind::Memset(m) => format!("memset {:#x} {}x{}", m.dst, m.width, m.height),
            NodeKind::Host { .. } => "host".into(),
            NodeKind::Child(_) => "child graph".into(),
            NodeKind::Empty => "empty".into(),
            NodeKind::EventRecord(e) => format!("event record {e:#x}"),
            NodeKind::EventWait(e) => format!("event wait {e:#x}"),
            NodeKind::MemAlloc(a) => format!("mem alloc {:#x} {} bytes", a.addr, a.size),
            NodeKind::MemFree(a) => format!("mem free {a:#x}"),
            NodeKind::Conditional(c) => format!("conditional type {} handle {:#x} {} bodies", c.ty, c.handle, c.bodies.len()),
        };
        let _ = writeln!(t, "  n{} [label=\"{} {}\"];", node.local_id, node.local_id, label);
        for d in &node.deps {
            let _ = writeln!(t, "  n{} -> n{};", s.node(*d)?.local_id, node.local_id);
        }
    }
    t.push_str("}\n");
    std::fs::write(path, t).map_err(|_| cuda::ERROR_INVALID_VALUE)
}

crate::export! {
    fn cudaGraphCreate(graph: *mut *mut c_void, flags: u32) {
        if graph.is_null() || flags != 0 {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let h = store().create_graph();
        out(graph, h as *mut c_void)
    }
    fn cudaGraphDestroy(graph: *mut c_void) {
        store().destroy_graph(graph as u64)?;
        free_orphan_handles();
        Ok(())
    }
    fn cudaGraphConditionalHandleCreate(handle: *mut u64, graph: *mut c_void, default: u32, flags: u32) {
        conditional_handle_create(handle, graph as u64, default, flags)
    }
    fn cudaGraphConditionalHandleCreate_v2(handle: *mut u64, graph: *mut c_void, _ctx: *mut c_void, default: u32, flags: u32) {
        // The execution context (NULL: the current one) is always the device's one context.
        conditional_handle_create(handle, graph as u64, default, flags)
    }
    fn cudaGraphClone(clone: *mut *mut c_void, graph: *mut c_void) {
        if clone.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let h = store().clone_graph(graph as u64, None)?;
        out(clone, h as *mut c_void)
    }
    fn cudaGraphNodeFindInClone(node: *mut *mut c_void, original: *mut c_void, clone: *mut c_void) {
        let s = store();
        let &n = s.graph(clone as u64)?.cloned_from.get(&(original as u64)).ok_or(cuda::ERROR_INVALID_VALUE)?;
        out(node, n as *mut c_void)
    }
    fn cudaGraphAddKernelNode(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize, params: *const u8) {
        let k = read_kernel(params)?;
        add(node, graph, dep, n, NodeKind::Kernel(k))
    }
    fn cudaGraphKernelNodeGetParams(node: *mut c_void, params: *mut u8) {
        zero(params, CUDAKERNELNODEPARAMS_SIZE)?;
        let argv = kernel_argv(node as u64)?;
        with_node(node, |_, n| match &n.kind {
            NodeKind::Kernel(k) => {
                set_field(params, CUDAKERNELNODEPARAMS_FUNC, k.host_fun);
                set_field(params, CUDAKERNELNODEPARAMS_GRIDDIM, k.grid);
                set_field(params, CUDAKERNELNODEPARAMS_BLOCKDIM, k.block);
                set_field(params, CUDAKERNELNODEPARAMS_SHAREDMEMBYTES, k.shared);
                set_field(params, CUDAKERNELNODEPARAMS_KERNELPARAMS, argv);
                Ok(())
            }
            _ => Err(cuda::ERROR_INVALID_VALUE),
        })
    }
    fn cudaGraphKernelNodeSetParams(node: *mut c_void, params: *const u8) {
        let k = read_kernel(params)?;
        // New parameters keep the node's launch attributes.
        set_kind(node, |old| match old {
            NodeKind::Kernel(o) => Ok(NodeKind::Kernel(KernelNode {
                cooperative: o.cooperative,
                access_window: o.access_window,
                priority: o.priority,
                ..k
            })),
            _ => Err(cuda::ERROR_INVALID_VALUE),
        })
    }
    fn cudaGraphExecChildGraphNodeSetParams(exec: *mut c_void, node: *mut c_void, child: *mut c_void) {
        store().exec_set_child(exec as u64, node as u64, child as u64)
    }
    fn cudaGraphKernelNodeGetAttribute(node: *mut c_void, id: u32, value: *mut u8) {
        with_node(node, |_, n| match &n.kind {
            NodeKind::Kernel(k) => kernel_attr_get(k, id, value),
            _ => Err(cuda::ERROR_INVALID_VALUE),
        })
    }
    fn cudaGraphKernelNodeSetAttribute(node: *mut c_void, id: u32, value: *const u8) {
        let a = kernel_attr_decode(id, value)?;
        set_kind(node, |old| match old {
            NodeKind::Kernel(k) => {
                let mut k = k.clone();
                match a {
                    KernelAttr::Window(w) => k.access_window = Some(w),
                    KernelAttr::Cooperative(c) => k.cooperative = c,
                    KernelAttr::Priority(p) => k.priority = p,
                }
                Ok(NodeKind::Kernel(k))
            }
            _ => Err(cuda::ERROR_INVALID_VALUE),
        })
    }
    fn cudaGraphKernelNodeCopyAttributes(dst: *mut c_void, src: *mut c_void) {
        let from = with_node(src, |_, n| match &n.kind {
            NodeKind::Kernel(k) => Ok((k.access_window, k.cooperative, k.priority)),
            _ => Err(cuda::ERROR_INVALID_VALUE),
        })?;
        set_kind(dst, |old| match old {
            NodeKind::Kernel(k) => {
                let (access_window, cooperative, priority) = from;
                Ok(NodeKind::Kernel(KernelNode { access_window, cooperative, priority, ..k.clone() }))
            }
            _ => Err(cuda::ERROR_INVALID_VALUE),
        })
    }
    fn cudaGraphExecKernelNodeSetParams(exec: *mut c_void, node: *mut c_void, params: *const u8) {
        let k = read_kernel(params)?;
        exec_set(exec, node, NodeKind::Kernel(k))
    }
    fn cudaGraphAddMemcpyNode(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize, params: *const u8) {
        let p = read_copy3d(params)?;
        add(node, graph, dep, n, NodeKind::Memcpy(p))
    }
    fn cudaGraphAddMemcpyNode1D(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize, dst: *mut c_void, src: *const c_void, count: usize, kind: u32) {
        let k = copy1d(dst as u64, src as u64, count as u64, kind)?;
        add(node, graph, dep, n, k)
    }
    fn cudaGraphAddMemcpyNodeToSymbol(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize, sym: *const c_void, src: *const c_void, count: usize, offset: usize, kind: u32) {
        let d = crate::api::memory::symbol_range(sym, count, offset)?;
        let k = copy1d(d, src as u64, count as u64, crate::api::memory::to_symbol_kind(kind))?;
        add(node, graph, dep, n, k)
    }
    fn cudaGraphAddMemcpyNodeFromSymbol(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize, dst: *mut c_void, sym: *const c_void, count: usize, offset: usize, kind: u32) {
        let s = crate::api::memory::symbol_range(sym, count, offset)?;
        let k = copy1d(dst as u64, s, count as u64, crate::api::memory::from_symbol_kind(kind))?;
        add(node, graph, dep, n, k)
    }
    fn cudaGraphMemcpyNodeGetParams(node: *mut c_void, params: *mut u8) {
        with_node(node, |_, n| match &n.kind {
            NodeKind::Memcpy(p) => {
                zero(params, CUDAMEMCPY3DPARMS_SIZE)?;
                for (i, b) in p.iter().enumerate() {
                    set_field(params, i, *b);
                }
                Ok(())
            }
            _ => Err(cuda::ERROR_INVALID_VALUE),
        })
    }
    fn cudaGraphMemcpyNodeSetParams(node: *mut c_void, params: *const u8) {
        let p = read_copy3d(params)?;
        set_kind(node, |old| match old {
            NodeKind::Memcpy(_) => Ok(NodeKind::Memcpy(p)),
            _ => Err(cuda::ERROR_INVALID_VALUE),
        })
    }
    fn cudaGraphMemcpyNodeSetParams1D(node: *mut c_void, dst: *mut c_void, src: *const c_void, count: usize, kind: u32) {
        let k = copy1d(dst as u64, src as u64, count as u64, kind)?;
        set_kind(node, |old| match old {
            NodeKind::Memcpy(_) => Ok(k),
            _ => Err(cuda::ERROR_INVALID_VALUE),
        })
    }
    fn cudaGraphExecMemcpyNodeSetParams(exec: *mut c_void, node: *mut c_void, params: *const u8) {
        let p = read_copy3d(params)?;
        exec_set(exec, node, NodeKind::Memcpy(p))
    }
    fn cudaGraphExecMemcpyNodeSetParams1D(exec: *mut c_void, node: *mut c_void, dst: *mut c_void, src: *const c_void, count: usize, kind: u32) {
        let k = copy1d(dst as u64, src as u64, count as u64, kind)?;
        exec_set(exec, node, k)
    }
    fn cudaGraphAddMemsetNode(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize, params: *const u8) {
        let m = read_memset(params)?;
        add(node, graph, dep, n, NodeKind::Memset(m))
    }
    fn cudaGraphMemsetNodeGetParams(node: *mut c_void, params: *mut u8) {
        with_node(node, |_, n| match &n.kind {
            NodeKind::Memset(m) => {
                zero(params, CUDAMEMSETPARAMS_SIZE)?;
                set_field(params, CUDAMEMSETPARAMS_DST, m.dst);
                set_field(params, CUDAMEMSETPARAMS_PITCH, m.pitch);
                set_field(params, CUDAMEMSETPARAMS_VALUE, m.value);
                set_field(params, CUDAMEMSETPARAMS_ELEMENTSIZE, m.elem);
                set_field(params, CUDAMEMSETPARAMS_WIDTH, m.width);
                set_field(params, CUDAMEMSETPARAMS_HEIGHT, m.height);
                Ok(())
            }
            _ => Err(cuda::ERROR_INVALID_VALUE),
        })
    }
    fn cudaGraphMemsetNodeSetParams(node: *mut c_void, params: *const u8) {
        let m = read_memset(params)?;
        set_kind(node, |old| match old {
            NodeKind::Memset(_) => Ok(NodeKind::Memset(m)),
            _ => Err(cuda::ERROR_INVALID_VALUE),
        })
    }
    fn cudaGraphExecMemsetNodeSetParams(exec: *mut c_void, node: *mut c_void, params: *const u8) {
        let m = read_memset(params)?;
        exec_set(exec, node, NodeKind::Memset(m))
    }
    fn cudaGraphAddHostNode(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize, params: *const u8) {
        let h = read_host(params)?;
        add(node, graph, dep, n, h)
    }
    fn cudaGraphHostNodeGetParams(node: *mut c_void, params: *mut u8) {
        with_node(node, |_, n| match n.kind {
            NodeKind::Host { func, data } => {
                zero(params, CUDAHOSTNODEPARAMS_SIZE)?;
                set_field(params, CUDAHOSTNODEPARAMS_FN, func);
                set_field(params, CUDAHOSTNODEPARAMS_USERDATA, data);
                Ok(())
            }
            _ => Err(cuda::ERROR_INVALID_VALUE),
        })
    }
    fn cudaGraphHostNodeSetParams(node: *mut c_void, params: *const u8) {
        let h = read_host(params)?;
        set_kind(node, |old| match old {
            NodeKind::Host { .. } => Ok(h),
            _ => Err(cuda::ERROR_INVALID_VALUE),
        })
    }
    fn cudaGraphExecHostNodeSetParams(exec: *mut c_void, node: *mut c_void, params: *const u8) {
        let h = read_host(params)?;
        exec_set(exec, node, h)
    }
    fn cudaGraphAddEmptyNode(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize) {
        add(node, graph, dep, n, NodeKind::Empty)
    }
    fn cudaGraphAddEventRecordNode(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize, event: *mut c_void) {
        if event.is_null() {
            return Err(cuda::ERROR_INVALID_RESOURCE_HANDLE);
        }
        add(node, graph, dep, n, NodeKind::EventRecord(event as u64))
    }
    fn cudaGraphAddEventWaitNode(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize, event: *mut c_void) {
        if event.is_null() {
            return Err(cuda::ERROR_INVALID_RESOURCE_HANDLE);
        }
        add(node, graph, dep, n, NodeKind::EventWait(event as u64))
    }
    fn cudaGraphEventRecordNodeGetEvent(node: *mut c_void, event: *mut *mut c_void) {
        with_node(node, |_, n| match n.kind {
            NodeKind::EventRecord(e) => out(event, e as *mut c_void),
            _ => Err(cuda::ERROR_INVALID_VALUE),
        })
    }
    fn cudaGraphEventWaitNodeGetEvent(node: *mut c_void, event: *mut *mut c_void) {
        with_node(node, |_, n| match n.kind {
            NodeKind::EventWait(e) => out(event, e as *mut c_void),
            _ => Err(cuda::ERROR_INVALID_VALUE),
        })
    }
    fn cudaGraphEventRecordNodeSetEvent(node: *mut c_void, event: *mut c_void) {
        set_kind(node, |old| match old {
            NodeKind::EventRecord(_) if !event.is_null() => Ok(NodeKind::EventRecord(event as u64)),
            _ => Err(cuda::ERROR_INVALID_VALUE),
        })
    }
    fn cudaGraphEventWaitNodeSetEvent(node: *mut c_void, event: *mut c_void) {
        set_kind(node, |old| match old {
            NodeKind::EventWait(_) if !event.is_null() => Ok(NodeKind::EventWait(event as u64)),
            _ => Err(cuda::ERROR_INVALID_VALUE),
        })
    }
    fn cudaGraphExecEventRecordNodeSetEvent(exec: *mut c_void, node: *mut c_void, event: *mut c_void) {
        exec_set(exec, node, NodeKind::EventRecord(event as u64))
    }
    fn cudaGraphExecEventWaitNodeSetEvent(exec: *mut c_void, node: *mut c_void, event: *mut c_void) {
        exec_set(exec, node, NodeKind::EventWait(event as u64))
    }
    fn cudaGraphAddChildGraphNode(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize, child: *mut c_void) {
        if node.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let d = deps(dep as *const u64, n)?;
        let h = add_child(graph as u64, &d, child as u64, false)?;
        out(node, h as *mut c_void)
    }
    fn cudaGraphChildGraphNodeGetGraph(node: *mut c_void, graph: *mut *mut c_void) {
        with_node(node, |_, n| match n.kind {
            NodeKind::Child(g) => out(graph, g as *mut c_void),
            _ => Err(cuda::ERROR_INVALID_VALUE),
        })
    }
    fn cudaGraphNodeGetType(node: *mut c_void, ty: *mut u32) {
        with_node(node, |_, n| out(ty, n.kind.type_code()))
    }
    fn cudaGraphNodeGetContainingGraph(node: *mut c_void, graph: *mut *mut c_void) {
        with_node(node, |_, n| out(graph, n.graph as *mut c_void))
    }
    fn cudaGraphNodeGetLocalId(node: *mut c_void, id: *mut u32) {
        with_node(node, |_, n| out(id, n.local_id))
    }
    fn cudaGraphNodeGetToolsId(node: *mut c_void, id: *mut u64) {
        with_node(node, |_, _| out(id, node as u64))
    }
    fn cudaGraphGetId(graph: *mut c_void, id: *mut u32) {
        let s = store();
        out(id, s.graph(graph as u64)?.id)
    }
    fn cudaGraphExecGetId(exec: *mut c_void, id: *mut u32) {
        let mut s = store();
        let e = s.exec_mut(exec as u64)?;
        out(id, e.id)
    }
    fn cudaGraphExecGetFlags(exec: *mut c_void, flags: *mut u64) {
        let mut s = store();
        let e = s.exec_mut(exec as u64)?;
        out(flags, e.flags)
    }
    fn cudaGraphGetNodes(graph: *mut c_void, nodes: *mut u64, count: *mut usize) {
        let list = store().graph(graph as u64)?.nodes.clone();
        write_list(nodes, std::ptr::null_mut(), count, &list)
    }
    fn cudaGraphGetRootNodes(graph: *mut c_void, nodes: *mut u64, count: *mut usize) {
        let s = store();
        let list: Vec<u64> = s.graph(graph as u64)?.nodes.iter().copied().filter(|n| s.nodes[n].deps.is_empty()).collect();
        drop(s);
        write_list(nodes, std::ptr::null_mut(), count, &list)
    }
    fn cudaGraphGetEdges(graph: *mut c_void, from: *mut u64, to: *mut u64, edge_data: *mut u64, count: *mut usize) {
        let e = store().edges(graph as u64)?;
        if from.is_null() != to.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let f: Vec<u64> = e.iter().map(|x| x.0).collect();
        let t: Vec<u64> = e.iter().map(|x| x.1).collect();
        let cap = read(count as *const usize)?;
        write_list(from, edge_data, count, &f)?;
        out(count, cap)?;
        write_list(to, std::ptr::null_mut(), count, &t)
    }
    fn cudaGraphNodeGetDependencies(node: *mut c_void, list: *mut u64, edge_data: *mut u64, count: *mut usize) {
        let d = store().node(node as u64)?.deps.clone();
        write_list(list, edge_data, count, &d)
    }
    fn cudaGraphNodeGetDependentNodes(node: *mut c_void, list: *mut u64, edge_data: *mut u64, count: *mut usize) {
        let s = store();
        let g = s.node(node as u64)?.graph;
        let d: Vec<u64> = s.graph(g)?.nodes.iter().copied().filter(|m| s.nodes[m].deps.contains(&(node as u64))).collect();
        drop(s);
        write_list(list, edge_data, count, &d)
    }
    fn cudaGraphAddDependencies(graph: *mut c_void, from: *const u64, to: *const u64, edge_data: *const u64, n: usize) {
        check_edge_data(edge_data, n)?;
        let (f, t) = (deps(from, n)?, deps(to, n)?);
        let mut s = store();
        for (a, b) in f.iter().zip(&t) {
            if s.node(*a)?.graph != graph as u64 || s.node(*b)?.graph != graph as u64 || a == b {
                return Err(cuda::ERROR_INVALID_VALUE);
            }
            if s.node(*b)?.deps.contains(a) {
                return Err(cuda::ERROR_INVALID_VALUE);
            }
        }
        for (a, b) in f.iter().zip(&t) {
            s.node_mut(*b)?.deps.push(*a);
        }
        Ok(())
    }
    fn cudaGraphRemoveDependencies(graph: *mut c_void, from: *const u64, to: *const u64, edge_data: *const u64, n: usize) {
        check_edge_data(edge_data, n)?;
        let (f, t) = (deps(from, n)?, deps(to, n)?);
        let mut s = store();
        for (a, b) in f.iter().zip(&t) {
            let node = s.node(*b)?;
            if node.graph != graph as u64 || !node.deps.contains(a) {
                return Err(cuda::ERROR_INVALID_VALUE);
            }
        }
        for (a, b) in f.iter().zip(&t) {
            s.node_mut(*b)?.deps.retain(|d| d != a);
        }
        Ok(())
    }
    fn cudaGraphDestroyNode(node: *mut c_void) {
        let mut s = store();
        let g = s.node(node as u64)?.graph;
        if s.graph(g)?.owner.is_some() {
            // A node of a child graph belongs to its parent.
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        s.destroy_node(node as u64)
    }
    fn cudaGraphInstantiate(exec: *mut *mut c_void, graph: *mut c_void, flags: u64) {
        instantiate(exec, graph, flags)
    }
    fn cudaGraphInstantiateWithFlags(exec: *mut *mut c_void, graph: *mut c_void, flags: u64) {
        instantiate(exec, graph, flags)
    }
    fn cudaGraphExecDestroy(exec: *mut c_void) {
        let e = store().execs.remove(&(exec as u64)).ok_or(cuda::ERROR_INVALID_VALUE)?;
        if e.done_event != 0 {
            let _ = call(&Request::EventDestroy { event: e.done_event });
        }
        crate::user_object::release_after(e.last_stream, e.user_objects)
    }
    fn cudaUserObjectCreate(obj: *mut *mut c_void, ptr: *mut c_void, destroy: Option<unsafe extern "C" fn(*mut c_void)>, initial: u32, flags: u32) {
        if obj.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let h = crate::user_object::create(ptr as u64, destroy, initial, flags)?;
        out(obj, h as *mut c_void)
    }
    fn cudaUserObjectRetain(obj: *mut c_void, count: u32) {
        crate::user_object::retain(obj as u64, count)
    }
    fn cudaUserObjectRelease(obj: *mut c_void, count: u32) {
        crate::user_object::release(obj as u64, count)
    }
    fn cudaGraphRetainUserObject(graph: *mut c_void, obj: *mut c_void, count: u32, flags: u32) {
        if count == 0 || flags & !crate::user_object::GRAPH_MOVE != 0 || !crate::user_object::exists(obj as u64) {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let mut s = store();
        let g = s.graphs.get_mut(&(graph as u64)).ok_or(cuda::ERROR_INVALID_VALUE)?;
        // With cudaGraphUserObjectMove the caller's references move to the graph.
        if flags & crate::user_object::GRAPH_MOVE == 0 {
            crate::user_object::retain(obj as u64, count)?;
        }
        *g.user_objects.entry(obj as u64).or_insert(0) += count;
        Ok(())
    }
    fn cudaGraphReleaseUserObject(graph: *mut c_void, obj: *mut c_void, count: u32) {
        if count == 0 {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let mut s = store();
        let g = s.graphs.get_mut(&(graph as u64)).ok_or(cuda::ERROR_INVALID_VALUE)?;
        let held = g.user_objects.get_mut(&(obj as u64)).ok_or(cuda::ERROR_INVALID_VALUE)?;
        if *held < count {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        *held -= count;
        if *held == 0 {
            g.user_objects.remove(&(obj as u64));
        }
        drop(s);
        crate::user_object::release(obj as u64, count)
    }
    fn cudaGraphLaunch(exec: *mut c_void, stream: *mut c_void) {
        launch(exec, stream, false)
    }
    fn cudaGraphLaunch_ptsz(exec: *mut c_void, stream: *mut c_void) {
        launch(exec, stream, true)
    }
    fn cudaGraphUpload(exec: *mut c_void, stream: *mut c_void) {
        // Nothing to upload: the nodes are queued at launch. Check the arguments only.
        store().exec_mut(exec as u64)?;
        resolve_stream(stream as u64, false).map(|_| ())
    }
    fn cudaGraphUpload_ptsz(exec: *mut c_void, stream: *mut c_void) {
        store().exec_mut(exec as u64)?;
        resolve_stream(stream as u64, true).map(|_| ())
    }
    fn cudaGraphNodeSetEnabled(exec: *mut c_void, node: *mut c_void, enabled: u32) {
        let mut s = store();
        let e = s.exec_mut(exec as u64)?;
        let &pos = e.index.get(&(node as u64)).ok_or(cuda::ERROR_INVALID_VALUE)?;
        let nodes = Arc::make_mut(&mut e.nodes);
        if !matches!(nodes[pos].kind, NodeKind::Kernel(_) | NodeKind::Memcpy(_) | NodeKind::Memset(_)) {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        nodes[pos].enabled = enabled != 0;
        Ok(())
    }
    fn cudaGraphNodeGetEnabled(exec: *mut c_void, node: *mut c_void, enabled: *mut u32) {
        let mut s = store();
        let e = s.exec_mut(exec as u64)?;
        let &pos = e.index.get(&(node as u64)).ok_or(cuda::ERROR_INVALID_VALUE)?;
        out(enabled, e.nodes[pos].enabled as u32)
    }
    fn cudaGraphExecUpdate(exec: *mut c_void, graph: *mut c_void, info: *mut u8) {
        let r = store().update(exec as u64, graph as u64);
        if !info.is_null() {
            zero(info, CUDAGRAPHEXECUPDATERESULTINFO_ST_SIZE)?;
            let (code, node) = r.err().unwrap_or((cudaGraphExecUpdateSuccess, 0));
            set_field(info, CUDAGRAPHEXECUPDATERESULTINFO_ST_RESULT, code);
            set_field(info, CUDAGRAPHEXECUPDATERESULTINFO_ST_ERRORNODE, node);
        }
        r.map_err(|_| cuda::ERROR_GRAPH_EXEC_UPDATE_FAILURE)
    }
    fn cudaGraphDebugDotPrint(graph: *mut c_void, path: *const c_char, _flags: u32) {
        let p = cstr(path).ok_or(cuda::ERROR_INVALID_VALUE)?;
        dot(graph as u64, &p)
    }
    fn cudaGraphAddNode(node: *mut *mut c_void, graph: *mut c_void, dep: *const u64, edge_data: *const u64, n: usize, params: *mut u8) {
        check_edge_data(edge_data, n)?;
        let d = deps(dep, n)?;
        add_generic(node, graph as u64, &d, params)
    }
    fn cudaGraphNodeGetParams(node: *mut c_void, params: *mut u8) {
        let argv = kernel_argv(node as u64)?;
        with_node(node, |_, n| write_generic(params, &n.kind, argv))
    }
    fn cudaGraphNodeSetParams(node: *mut c_void, params: *mut u8) {
        let (ty, u) = read_generic(params)?;
        let k = decode_generic(ty, u)?;
        set_kind(node, |old| {
            if old.type_code() != ty {
                return Err(cuda::ERROR_INVALID_VALUE);
            }
            Ok(k)
        })
    }
    fn cudaGraphExecNodeSetParams(exec: *mut c_void, node: *mut c_void, params: *mut u8) {
        let (ty, u) = read_generic(params)?;
        exec_set(exec, node, decode_generic(ty, u)?)
    }
    fn cudaGraphAddMemAllocNode(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize, params: *mut u8) {
        let d = deps(dep as *const u64, n)?;
        add_alloc_node(node, graph as u64, &d, params)
    }
    fn cudaGraphMemAllocNodeGetParams(node: *mut c_void, params: *mut u8) {
        with_node(node, |_, n| match &n.kind {
            NodeKind::MemAlloc(a) => write_alloc(params, a),
            _ => Err(cuda::ERROR_INVALID_VALUE),
        })
    }
    fn cudaGraphAddMemFreeNode(node: *mut *mut c_void, graph: *mut c_void, dep: *const *mut c_void, n: usize, dptr: *mut c_void) {
        if node.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let d = deps(dep as *const u64, n)?;
        let mut s = store();
        let k = free_node(&s, graph as u64, dptr as u64)?;
        let h = s.add_node(graph as u64, &d, k)?;
        out(node, h as *mut c_void)
    }
    fn cudaGraphMemFreeNodeGetParams(node: *mut c_void, dptr: *mut u64) {
        with_node(node, |_, n| match n.kind {
            NodeKind::MemFree(a) => out(dptr, a),
            _ => Err(cuda::ERROR_INVALID_VALUE),
        })
    }
    fn cudaDeviceGetGraphMemAttribute(dev: i32, attr: u32, value: *mut u64) {
        if dev != 0 {
            return Err(cuda::ERROR_INVALID_DEVICE);
        }
        // Graph memory is allocated when the node is made: reserved equals used.
        let v = match attr {
            cudaGraphMemAttrUsedMemCurrent | cudaGraphMemAttrReservedMemCurrent => crate::graph::GraphMem::current(),
            cudaGraphMemAttrUsedMemHigh | cudaGraphMemAttrReservedMemHigh => crate::graph::GraphMem::high(),
            _ => return Err(cuda::ERROR_INVALID_VALUE),
        };
        out(value, v)
    }
    fn cudaDeviceSetGraphMemAttribute(dev: i32, attr: u32, value: *mut u64) {
        if dev != 0 {
            return Err(cuda::ERROR_INVALID_DEVICE);
        }
        match (attr, read(value as *const u64)?) {
            (cudaGraphMemAttrUsedMemHigh | cudaGraphMemAttrReservedMemHigh, 0) => {
                crate::graph::GraphMem::reset_high();
                Ok(())
            }
            _ => Err(cuda::ERROR_INVALID_VALUE),
        }
    }
    fn cudaDeviceGraphMemTrim(dev: i32) {
        // Freed graph memory stops counting (its memory went back at the free).
        if dev != 0 {
            return Err(cuda::ERROR_INVALID_DEVICE);
        }
        let s = store();
        let freed: Vec<Arc<GraphAlloc>> = s
            .nodes
            .values()
            .filter_map(|n| match &n.kind {
                NodeKind::MemAlloc(a) => Some(a.clone()),
                _ => None,
            })
            .collect();
        drop(s);
        for a in freed {
            crate::graph::GraphMem::trim(&a);
        }
        Ok(())
    }
    fn cudaGraphInstantiateWithParams(exec: *mut *mut c_void, graph: *mut c_void, params: *mut u8) {
        instantiate_with_params(exec, graph, params, false)
    }
    fn cudaGraphInstantiateWithParams_ptsz(exec: *mut *mut c_void, graph: *mut c_void, params: *mut u8) {
        instantiate_with_params(exec, graph, params, true)
    }
    fn cudaGraphMemcpyNodeSetParamsToSymbol(node: *mut c_void, sym: *const c_void, src: *const c_void, count: usize, offset: usize, kind: u32) {
        let d = crate::api::memory::symbol_range(sym, count, offset)?;
        let k = copy1d(d, src as u64, count as u64, crate::api::memory::to_symbol_kind(kind))?;
        set_kind(node, |old| match old {
            NodeKind::Memcpy(_) => Ok(k),
            _ => Err(cuda::ERROR_INVALID_VALUE),
        })
    }
    fn cudaGraphMemcpyNodeSetParamsFromSymbol(node: *mut c_void, dst: *mut c_void, sym: *const c_void, count: usize, offset: usize, kind: u32) {
        let s = crate::api::memory::symbol_range(sym, count, offset)?;
        let k = copy1d(dst as u64, s, count as u64, crate::api::memory::from_symbol_kind(kind))?;
        set_kind(node, |old| match old {
            NodeKind::Memcpy(_) => Ok(k),
            _ => Err(cuda::ERROR_INVALID_VALUE),
        })
    }
    fn cudaGraphExecMemcpyNodeSetParamsToSymbol(exec: *mut c_void, node: *mut c_void, sym: *const c_void, src: *const c_void, count: usize, offset: usize, kind: u32) {
        let d = crate::api::memory::symbol_range(sym, count, offset)?;
        exec_set(exec, node, copy1d(d, src as u64, count as u64, crate::api::memory::to_symbol_kind(kind))?)
    }
    fn cudaGraphExecMemcpyNodeSetParamsFromSymbol(exec: *mut c_void, node: *mut c_void, dst: *mut c_void, sym: *const c_void, count: usize, offset: usize, kind: u32) {
        let s = crate::api::memory::symbol_range(sym, count, offset)?;
        exec_set(exec, node, copy1d(dst as u64, s, count as u64, crate::api::memory::from_symbol_kind(kind))?)
    }
    fn cudaStreamBeginCapture(stream: *mut c_void, mode: u32) {
        capture::begin(resolve_stream(stream as u64, false)?, mode, None)
    }
    fn cudaStreamBeginCapture_ptsz(stream: *mut c_void, mode: u32) {
        capture::begin(resolve_stream(stream as u64, true)?, mode, None)
    }
    fn cudaStreamBeginCaptureToGraph(stream: *mut c_void, graph: *mut c_void, dep: *const u64, edge_data: *const u64, n: usize, mode: u32) {
        check_edge_data(edge_data, n)?;
        let d = deps(dep, n)?;
        capture::begin(resolve_stream(stream as u64, false)?, mode, Some((graph as u64, d)))
    }
    fn cudaStreamBeginCaptureToGraph_ptsz(stream: *mut c_void, graph: *mut c_void, dep: *const u64, edge_data: *const u64, n: usize, mode: u32) {
        check_edge_data(edge_data, n)?;
        let d = deps(dep, n)?;
        capture::begin(resolve_stream(stream as u64, true)?, mode, Some((graph as u64, d)))
    }
    fn cudaStreamBeginRecaptureToGraph(stream: *mut c_void, mode: u32, graph: *mut c_void, callback: *const u64) {
        let cb = recapture_data(callback)?;
        capture::begin_recapture(resolve_stream(stream as u64, false)?, mode, graph as u64, cb, capture::Face::Runtime)
    }
    fn cudaStreamBeginRecaptureToGraph_ptsz(stream: *mut c_void, mode: u32, graph: *mut c_void, callback: *const u64) {
        let cb = recapture_data(callback)?;
        capture::begin_recapture(resolve_stream(stream as u64, true)?, mode, graph as u64, cb, capture::Face::Runtime)
    }
    fn cudaStreamEndCapture(stream: *mut c_void, graph: *mut *mut c_void) {
        end_capture(stream, graph, false)
    }
    fn cudaStreamEndCapture_ptsz(stream: *mut c_void, graph: *mut *mut c_void) {
        end_capture(stream, graph, true)
    }
    fn cudaStreamGetCaptureInfo(stream: *mut c_void, status: *mut u32, id: *mut u64, graph: *mut *mut c_void, deps_out: *mut *const u64, edge_out: *mut *const u64, n: *mut usize) {
        capture_info(stream, status, id, graph, deps_out, edge_out, n, false)
    }
    fn cudaStreamGetCaptureInfo_ptsz(stream: *mut c_void, status: *mut u32, id: *mut u64, graph: *mut *mut c_void, deps_out: *mut *const u64, edge_out: *mut *const u64, n: *mut usize) {
        capture_info(stream, status, id, graph, deps_out, edge_out, n, true)
    }
    fn cudaStreamUpdateCaptureDependencies(stream: *mut c_void, dep: *const u64, edge_data: *const u64, n: usize, flags: u32) {
        update_capture(stream, dep, edge_data, n, flags, false)
    }
    fn cudaStreamUpdateCaptureDependencies_ptsz(stream: *mut c_void, dep: *const u64, edge_data: *const u64, n: usize, flags: u32) {
        update_capture(stream, dep, edge_data, n, flags, true)
    }
    fn cudaThreadExchangeStreamCaptureMode(mode: *mut u32) {
        let m = read(mode as *const u32)?;
        let old = capture::exchange_mode(m)?;
        out(mode, old)
    }
}

/// A `cudaGraphRecaptureCallbackData` (callback function, user data), optional; a null
/// function is no callback.
fn recapture_data(p: *const u64) -> CudaResult<Option<(u64, u64)>> {
    if p.is_null() {
        return Ok(None);
    }
    let func = read(p)?;
    let data = read(p.wrapping_add(1))?;
    Ok((func != 0).then_some((func, data)))
}

/// Call a recapture callback (`cudaGraphRecaptureCallback_t`) for `node`, whose parameters
/// changed from `old` to `new`; its answer.
pub(crate) fn recapture_callback(func: u64, data: u64, node: u64, old: &NodeKind, new: &NodeKind, status: u32) -> u32 {
    type Callback = unsafe extern "C" fn(*mut c_void, *mut c_void, *const u8, *const u8, u32) -> u32;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let (Ok(o), Ok(n)) = (recapture_params(old, &mut a), recapture_params(new, &mut b)) else {
        return cuda::ERROR_UNKNOWN;
    };
    // SAFETY: the program passed this function as a `cudaGraphRecaptureCallback_t`; both
    // parameter blocks (and the kernel argument arrays they point to) live across the call.
    let f: Callback = unsafe { std::mem::transmute::<usize, Callback>(func as usize) };
    // SAFETY: as above.
    unsafe { f(data as *mut c_void, node as *mut c_void, o.as_ptr(), n.as_ptr(), status) }
}

/// A node's parameters as a `cudaGraphNodeParams`, for a recapture callback; a kernel's
/// argument pointers are put in `argv`, which must live as long as the parameters are used.
pub(crate) fn recapture_params(kind: &NodeKind, argv: &mut Vec<u64>) -> CudaResult<[u8; CUDAGRAPHNODEPARAMS_SIZE]> {
    if let NodeKind::Kernel(k) = kind {
        let (_, info) = function(k.host_fun)?;
        let base = k.params.as_ptr() as u64;
        *argv = info.params.iter().map(|&(o, _)| base + o as u64).collect();
    }
    let mut buf = [0u8; CUDAGRAPHNODEPARAMS_SIZE];
    write_generic(buf.as_mut_ptr(), kind, if argv.is_empty() { 0 } else { argv.as_ptr() as u64 })?;
    Ok(buf)
}

fn end_capture(stream: *mut c_void, graph: *mut *mut c_void, ptsz: bool) -> CudaResult<()> {
    if graph.is_null() {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let s = resolve_stream(stream as u64, ptsz)?;
    match capture::end(s) {
        Ok(g) => out(graph, g as *mut c_void),
        Err(e) => {
            let _ = out(graph, std::ptr::null_mut());
            Err(e)
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn capture_info(
    stream: *mut c_void,
    status: *mut u32,
    id: *mut u64,
    graph: *mut *mut c_void,
    deps_out: *mut *const u64,
    edge_out: *mut *const u64,
    n: *mut usize,
    ptsz: bool,
) -> CudaResult<()> {
    if status.is_null() {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let s = resolve_stream(stream as u64, ptsz)?;
    let (st, cid, g, d, e, count) = capture::info(s)?;
    out(status, st)?;
    if st != cudaStreamCaptureStatusActive {
        return Ok(());
    }
    if !id.is_null() {
        out(id, cid)?;
    }
    if !graph.is_null() {
        out(graph, g as *mut c_void)?;
    }
    if !deps_out.is_null() {
        out(deps_out, d)?;
    }
    if !edge_out.is_null() {
        out(edge_out, e)?;
    }
    if !n.is_null() {
        out(n, count)?;
    }
    Ok(())
}

fn update_capture(
    stream: *mut c_void,
    dep: *const u64,
    edge_data: *const u64,
    n: usize,
    flags: u32,
    ptsz: bool,
) -> CudaResult<()> {
    check_edge_data(edge_data, n)?;
    if flags > cudaStreamSetCaptureDependencies {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let d = deps(dep, n)?;
    let s = resolve_stream(stream as u64, ptsz)?;
    capture::update_deps(s, &d, flags == cudaStreamSetCaptureDependencies)
}
