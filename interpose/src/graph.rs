//! CUDA graphs as the interposer keeps them: a graph is a recorded DAG of nodes (kernel
//! launches with their argument bytes copied at creation, copies, memsets, host functions,
//! event records and waits, child graphs, empty nodes); an executable graph is a flattened
//! copy in one topological order. Launching one (`api::graph`) queues its nodes as ordinary
//! pipelined requests on the launch stream, so the proxy needs nothing new, and everything
//! here lives in the program's memory: a checkpoint saves graphs with the process image and
//! they launch again after a restart (the stream, event and kernel handles they name are
//! re-created behind the same values).
//!
//! Conditional nodes (IF with an optional else body, WHILE, SWITCH) own their body graphs;
//! their condition is a 32-bit value in device memory that kernels set with
//! `cudaGraphSetConditional` (a conditional handle is its address, [`CondHandle`]), read by
//! the launch when the node's turn comes (`api::graph`).
//!
//! This module is plain data and the graph algorithms (topological order, clone, flatten,
//! the update check); it never talks to the proxy.
#![allow(non_upper_case_globals)]

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crum_wire::cuda;

use crate::abi_gen::*;
use crate::errors::CudaResult;

/// A kernel launch with its parameter block (copied from `kernelParams` at creation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelNode {
    /// The host stub the program names the kernel by.
    pub host_fun: usize,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared: u32,
    pub cooperative: bool,
    pub params: Vec<u8>,
    /// Launch attributes set on the node (`cudaGraphKernelNodeSetAttribute`): the access
    /// policy window as the program gave it (a `cudaAccessPolicyWindow`, checked), and the
    /// priority. Both are hints for the device's cache and scheduler; results never depend
    /// on them.
    pub access_window: Option<[u8; CUDAACCESSPOLICYWINDOW_SIZE]>,
    pub priority: i32,
}

/// `cudaMemsetParams` (width in elements of `elem` bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemsetNode {
    pub dst: u64,
    pub pitch: u64,
    pub value: u32,
    pub elem: u32,
    pub width: u64,
    pub height: u64,
}

/// Memory a mem alloc node (or a `cudaMallocAsync` in a capture) allocated when the node
/// was made: its address is fixed for the life of the graph, as CUDA promises, and every
/// launch uses it. When a free node of the same graph frees it, the device gets it back once
/// the last graph or executable graph naming it is gone; otherwise the program frees it
/// (`cudaFree`/`cudaFreeAsync`), as CUDA requires.
#[derive(Debug)]
pub struct GraphAlloc {
    pub addr: u64,
    pub size: u64,
    pub freed_in_graph: AtomicBool,
    /// What gives the memory back (the device, through the proxy); `None` in unit tests.
    pub release: Option<fn(u64, u64)>,
    /// Whether it counts as graph memory ([`GraphMem`]): from the first launch of its node until
    /// a trim after it was freed, or until it goes.
    pub counted: AtomicU8,
}

/// Graph memory as `cudaDeviceGetGraphMemAttribute` reports it, as CUDA 13 does (an H200,
/// `cuda_facts.cu`): an allocation node counts from its graph's first launch (not when it is
/// added or instantiated), and stays counted after it is freed, until
/// `cudaDeviceGraphMemTrim` (or its memory goes with its graph).
pub struct GraphMem;

/// `GraphAlloc::counted` states.
const UNCOUNTED: u8 = 0;
const COUNTED: u8 = 1;
const FREED: u8 = 2;
const GONE: u8 = 3;
static GRAPH_MEM: AtomicU64 = AtomicU64::new(0);
static GRAPH_MEM_HIGH: AtomicU64 = AtomicU64::new(0);

impl GraphMem {
    /// Bytes counted now, and the most there were.
    pub fn current() -> u64 {
        GRAPH_MEM.load(Ordering::SeqCst)
    }
    pub fn high() -> u64 {
        GRAPH_MEM_HIGH.load(Ordering::SeqCst)
    }
    /// `cudaDeviceSetGraphMemAttribute`: the high-water mark back to the current amount.
    pub fn reset_high() {
        GRAPH_MEM_HIGH.store(GRAPH_MEM.load(Ordering::SeqCst), Ordering::SeqCst);
    }
    /// `cudaDeviceReset`: nothing is left.
    pub fn reset() {
        GRAPH_MEM.store(0, Ordering::SeqCst);
        GRAPH_MEM_HIGH.store(0, Ordering::SeqCst);
    }
    /// Its allocation node ran.
    pub fn launched(a: &GraphAlloc) {
        if a.counted.compare_exchange(UNCOUNTED, COUNTED, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            let now = GRAPH_MEM.fetch_add(a.size, Ordering::SeqCst) + a.size;
            GRAPH_MEM_HIGH.fetch_max(now, Ordering::SeqCst);
        }
    }
    /// Freed (a free node ran, or `cudaFree[Async]`): counted until a trim.
    pub fn freed(a: &GraphAlloc) {
        let _ = a.counted.compare_exchange(COUNTED, FREED, Ordering::AcqRel, Ordering::Acquire);
    }
    /// `cudaDeviceGraphMemTrim`: what was freed stops counting.
    pub fn trim(a: &GraphAlloc) {
        if a.counted.compare_exchange(FREED, GONE, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            GRAPH_MEM.fetch_sub(a.size, Ordering::SeqCst);
        }
    }
    /// Its memory went back to the device.
    fn gone(a: &GraphAlloc) {
        if matches!(a.counted.swap(GONE, Ordering::AcqRel), COUNTED | FREED) {
            GRAPH_MEM.fetch_sub(a.size, Ordering::SeqCst);
        }
    }
}

impl PartialEq for GraphAlloc {
    fn eq(&self, o: &Self) -> bool {
        self.addr == o.addr
    }
}

impl Eq for GraphAlloc {}

impl Drop for GraphAlloc {
    fn drop(&mut self) {
        // Its graph is gone: the memory stops counting (and goes back, if the graph freed it).
        GraphMem::gone(self);
        if let (true, Some(f)) = (self.freed_in_graph.load(Ordering::Acquire), self.release) {
            f(self.addr, self.size);
        }
    }
}

/// What a node does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeKind {
    Empty,
    Kernel(KernelNode),
    /// A `cudaMemcpy3DParms` as the program gave it (arrays by handle, pointers by value).
    Memcpy(Box<[u8; CUDAMEMCPY3DPARMS_SIZE]>),
    Memset(MemsetNode),
    Host { func: u64, data: u64 },
    /// A child graph: a graph of the store owned by this node (a clone of the one given).
    Child(u64),
    EventRecord(u64),
    EventWait(u64),
    MemAlloc(Arc<GraphAlloc>),
    /// Frees a graph allocation of the same graph (at the end of the graph's life here).
    MemFree(u64),
    Conditional(CondNode),
}

/// A conditional node: which condition, what kind (`cudaGraphCondTypeIf/While/Switch`), and
/// its body graphs (owned by the node, like a child graph; `phGraph_out` points at `bodies`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CondNode {
    pub handle: u64,
    pub ty: u32,
    pub bodies: Vec<u64>,
}

/// A conditional handle (`cudaGraphConditionalHandleCreate`): the handle value is the device
/// address of the condition's 32-bit value, so a kernel's `cudaGraphSetConditional` is a
/// store there and the value is device memory, saved and restored with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CondHandle {
    /// The graph it was created for; it goes with that graph.
    pub graph: u64,
    pub default: u32,
    /// `cudaGraphCondAssignDefault`: the default is written at the start of every launch.
    pub assign_default: bool,
}

impl NodeKind {
    /// The `cudaGraphNodeType`.
    pub fn type_code(&self) -> u32 {
        match self {
            NodeKind::Empty => cudaGraphNodeTypeEmpty,
            NodeKind::Kernel(_) => cudaGraphNodeTypeKernel,
            NodeKind::Memcpy(_) => cudaGraphNodeTypeMemcpy,
            NodeKind::Memset(_) => cudaGraphNodeTypeMemset,
            NodeKind::Host { .. } => cudaGraphNodeTypeHost,
            NodeKind::Child(_) => cudaGraphNodeTypeGraph,
            NodeKind::EventRecord(_) => cudaGraphNodeTypeEventRecord,
            NodeKind::EventWait(_) => cudaGraphNodeTypeWaitEvent,
            NodeKind::MemAlloc(_) => cudaGraphNodeTypeMemAlloc,
            NodeKind::MemFree(_) => cudaGraphNodeTypeMemFree,
            NodeKind::Conditional(_) => cudaGraphNodeTypeConditional,
        }
    }
}

pub struct Node {
    pub graph: u64,
    pub kind: NodeKind,
    /// Incoming edges, in the order they were added.
    pub deps: Vec<u64>,
    /// Index of the node in its graph at creation (`cudaGraphNodeGetLocalId`).
    pub local_id: u32,
    /// `kernelParams` handed out by `cudaGraphKernelNodeGetParams` (pointers into `params`).
    pub argv: Vec<u64>,
}

#[derive(Default)]
pub struct Graph {
    /// Nodes in creation order.
    pub nodes: Vec<u64>,
    pub next_local: u32,
    /// Owned by a child-graph node: destroyed with it, not by `cudaGraphDestroy`.
    pub owner: Option<u64>,
    /// `cudaGraphClone`: original node → its copy here.
    pub cloned_from: HashMap<u64, u64>,
    pub id: u32,
    /// User object → references this graph holds (`cudaGraphRetainUserObject`).
    pub user_objects: HashMap<u64, u32>,
}

/// One node of an executable graph.
#[derive(Debug, Clone)]
pub struct ExecNode {
    pub kind: NodeKind,
    pub enabled: bool,
    /// A conditional node's bodies, flattened like the graph (empty for other nodes).
    pub bodies: Vec<Vec<ExecNode>>,
}

/// The shape of a graph for `cudaGraphExecUpdate`: per node in topological order, its type
/// (a conditional's with its kind and condition), its dependencies (positions) and, for a
/// child graph or a conditional node, the shapes of the graphs in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape(pub Vec<(u64, Vec<usize>, Vec<Shape>)>);

pub struct Exec {
    /// Nodes in launch order (child graphs expanded in place). Copied on write, so a launch
    /// takes it without holding the store.
    pub nodes: Arc<Vec<ExecNode>>,
    /// Graph node (of the instantiated graph, or of a graph it was updated from) → position.
    pub index: HashMap<u64, usize>,
    pub shape: Shape,
    pub flags: u64,
    pub id: u32,
    /// Stream of the last launch and an event recorded after it: a launch on another
    /// stream is ordered behind the previous launch, as CUDA orders launches of one exec.
    pub last_stream: Option<u64>,
    pub done_event: u64,
    /// References to user objects taken from the graph (and its child graphs) at
    /// instantiation; released after the last launch when the exec is destroyed.
    pub user_objects: Vec<(u64, u32)>,
    /// Conditions written at the start of every launch (handles made with
    /// `cudaGraphCondAssignDefault`): (address, default value).
    pub defaults: Vec<(u64, u32)>,
}

#[derive(Default)]
pub struct Store {
    /// One counter for graphs, nodes and execs, so no handle names two kinds of object.
    next: u64,
    next_graph_id: u32,
    pub graphs: HashMap<u64, Graph>,
    pub nodes: HashMap<u64, Node>,
    pub execs: HashMap<u64, Exec>,
    /// Conditional handles by value (the address of their condition).
    pub handles: HashMap<u64, CondHandle>,
}

/// The store of graphs, nodes and executable graphs.
pub fn store() -> MutexGuard<'static, Store> {
    static S: OnceLock<Mutex<Store>> = OnceLock::new();
    S.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// `cudaDeviceReset`: every graph and executable graph goes; their memory went with the
/// device's, so it is not freed again.
pub fn reset() {
    let mut s = store();
    for n in s.nodes.values() {
        if let NodeKind::MemAlloc(a) = &n.kind {
            a.freed_in_graph.store(false, Ordering::Release);
        }
    }
    // The graphs' and executable graphs' references to user objects go with them (the
    // device's work is gone, so an exec's are released at once).
    let mut refs: Vec<(u64, u32)> = s.graphs.values().flat_map(|g| g.user_objects.iter().map(|(&o, &n)| (o, n))).collect();
    refs.extend(s.execs.values().flat_map(|e| e.user_objects.iter().copied()));
    s.graphs.clear();
    s.nodes.clear();
    s.execs.clear();
    s.handles.clear();
    drop(s);
    crate::user_object::release_all(&refs);
}

/// First handle value: small enough to print, far from NULL.
const HANDLE_BASE: u64 = 0x6a_0000;
const HANDLE_STEP: u64 = 0x10;

impl Store {
    fn handle(&mut self) -> u64 {
        self.next += 1;
        HANDLE_BASE + self.next * HANDLE_STEP
    }

    pub fn create_graph(&mut self) -> u64 {
        let h = self.handle();
        self.next_graph_id += 1;
        let id = self.next_graph_id;
        self.graphs.insert(h, Graph { id, ..Default::default() });
        h
    }

    pub fn graph(&self, g: u64) -> CudaResult<&Graph> {
        self.graphs.get(&g).ok_or(cuda::ERROR_INVALID_VALUE)
    }

    pub fn node(&self, n: u64) -> CudaResult<&Node> {
        self.nodes.get(&n).ok_or(cuda::ERROR_INVALID_VALUE)
    }

    pub fn node_mut(&mut self, n: u64) -> CudaResult<&mut Node> {
        self.nodes.get_mut(&n).ok_or(cuda::ERROR_INVALID_VALUE)
    }

    pub fn exec_mut(&mut self, e: u64) -> CudaResult<&mut Exec> {
        self.execs.get_mut(&e).ok_or(cuda::ERROR_INVALID_VALUE)
    }

    /// Add a node to graph `g` after `deps` (nodes of the same graph, no duplicates).
    pub fn add_node(&mut self, g: u64, deps: &[u64], kind: NodeKind) -> CudaResult<u64> {
        self.graph(g)?;
        let mut seen = BTreeSet::new();
        for d in deps {
            if self.node(*d)?.graph != g || !seen.insert(*d) {
                return Err(cuda::ERROR_INVALID_VALUE);
            }
        }
        let h = self.handle();
        let gr = self.graphs.get_mut(&g).ok_or(cuda::ERROR_INVALID_VALUE)?;
        let local_id = gr.next_local;
        gr.next_local += 1;
        gr.nodes.push(h);
        self.nodes.insert(
            h,
            Node {
                graph: g,
                kind,
                deps: deps.to_vec(),
                local_id,
                argv: Vec::new(),
            },
        );
        Ok(h)
    }

    /// A deep copy of graph `g` (child graphs copied too); `owner`: the child node that will
    /// own the copy.
    pub fn clone_graph(&mut self, g: u64, owner: Option<u64>) -> CudaResult<u64> {
        if self.has_uncopyable_nodes(g)? {
            return Err(cuda::ERROR_NOT_SUPPORTED);
        }
        let order = self.graph(g)?.nodes.clone();
        let new = self.create_graph();
        let mut map = HashMap::new();
        for n in order {
            let (kind, deps) = {
                let node = self.node(n)?;
                (node.kind.clone(), node.deps.clone())
            };
            let deps: Vec<u64> = deps.iter().map(|d| map[d]).collect();
            // A child graph's own copy is made below, once the node exists.
            let copy = self.add_node(new, &deps, kind)?;
            if let NodeKind::Child(c) = self.node(copy)?.kind {
                let cc = self.clone_graph(c, Some(copy))?;
                self.node_mut(copy)?.kind = NodeKind::Child(cc);
            }
            map.insert(n, copy);
        }
        // The clone holds references of its own to the user objects the original holds.
        let refs = self.graph(g)?.user_objects.clone();
        for (&o, &n) in &refs {
            crate::user_object::retain(o, n)?;
        }
        let gr = self.graphs.get_mut(&new).ok_or(cuda::ERROR_INVALID_VALUE)?;
        gr.owner = owner;
        gr.cloned_from = map;
        gr.user_objects = refs;
        Ok(new)
    }

    /// Whether graph `g` has mem alloc, mem free or conditional nodes (such a graph cannot
    /// be a child graph or be cloned, as in CUDA).
    pub fn has_uncopyable_nodes(&self, g: u64) -> CudaResult<bool> {
        Ok(self.graph(g)?.nodes.iter().any(|n| {
            matches!(
                self.nodes.get(n).map(|x| &x.kind),
                Some(NodeKind::MemAlloc(_) | NodeKind::MemFree(_) | NodeKind::Conditional(_))
            )
        }))
    }

    /// The conditions of `g`'s conditional nodes, their bodies' included.
    pub fn condition_handles(&self, g: u64, out: &mut Vec<u64>) -> CudaResult<()> {
        for n in &self.graph(g)?.nodes {
            if let NodeKind::Conditional(c) = &self.node(*n)?.kind {
                out.push(c.handle);
                for &b in &c.bodies {
                    self.condition_handles(b, out)?;
                }
            }
        }
        Ok(())
    }

    /// Take out the conditional handles whose graph is gone (for the caller to free their
    /// memory).
    pub fn orphan_handles(&mut self) -> Vec<u64> {
        let gone: Vec<u64> = self.handles.iter().filter(|(_, h)| !self.graphs.contains_key(&h.graph)).map(|(&a, _)| a).collect();
        for a in &gone {
            self.handles.remove(a);
        }
        gone
    }

    /// The allocation node of graph `g` at `addr`.
    pub fn graph_alloc(&self, g: u64, addr: u64) -> Option<Arc<GraphAlloc>> {
        self.graphs.get(&g)?.nodes.iter().find_map(|n| match &self.nodes.get(n)?.kind {
            NodeKind::MemAlloc(a) if a.addr == addr => Some(a.clone()),
            _ => None,
        })
    }

    /// Remove node `n` and every edge to or from it (its child graph too).
    pub fn destroy_node(&mut self, n: u64) -> CudaResult<()> {
        let node = self.nodes.remove(&n).ok_or(cuda::ERROR_INVALID_VALUE)?;
        if let Some(gr) = self.graphs.get_mut(&node.graph) {
            gr.nodes.retain(|&x| x != n);
            for m in gr.nodes.clone() {
                if let Some(o) = self.nodes.get_mut(&m) {
                    o.deps.retain(|&d| d != n);
                }
            }
        }
        match node.kind {
            NodeKind::Child(c) => self.destroy_graph_inner(c)?,
            NodeKind::Conditional(c) => {
                for b in c.bodies {
                    self.destroy_graph_inner(b)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Give node `n` new parameters of the same type (a recapture): a child graph it owned
    /// goes, the new one becomes its own. The old parameters.
    pub fn replace_kind(&mut self, n: u64, kind: NodeKind) -> CudaResult<NodeKind> {
        if let NodeKind::Child(c) = kind {
            self.graphs.get_mut(&c).ok_or(cuda::ERROR_INVALID_VALUE)?.owner = Some(n);
        }
        let node = self.node_mut(n)?;
        node.argv.clear();
        let old = std::mem::replace(&mut node.kind, kind);
        if let NodeKind::Child(c) = old {
            self.destroy_graph_inner(c)?;
        }
        Ok(old)
    }

    fn destroy_graph_inner(&mut self, g: u64) -> CudaResult<()> {
        let gr = self.graphs.remove(&g).ok_or(cuda::ERROR_INVALID_VALUE)?;
        let refs: Vec<(u64, u32)> = gr.user_objects.into_iter().collect();
        crate::user_object::release_all(&refs);
        for n in gr.nodes {
            if let Some(node) = self.nodes.remove(&n) {
                match node.kind {
                    NodeKind::Child(c) => self.destroy_graph_inner(c)?,
                    NodeKind::Conditional(c) => {
                        for b in c.bodies {
                            self.destroy_graph_inner(b)?;
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// The user object references of `g` and of its child graphs.
    fn user_object_refs(&self, g: u64) -> CudaResult<Vec<(u64, u32)>> {
        let gr = self.graph(g)?;
        let mut refs: Vec<(u64, u32)> = gr.user_objects.iter().map(|(&o, &n)| (o, n)).collect();
        for n in &gr.nodes {
            match &self.node(*n)?.kind {
                NodeKind::Child(c) => refs.extend(self.user_object_refs(*c)?),
                NodeKind::Conditional(c) => {
                    for &b in &c.bodies {
                        refs.extend(self.user_object_refs(b)?);
                    }
                }
                _ => {}
            }
        }
        Ok(refs)
    }

    /// `cudaGraphDestroy`: a graph that a child node owns cannot be destroyed on its own.
    pub fn destroy_graph(&mut self, g: u64) -> CudaResult<()> {
        if self.graph(g)?.owner.is_some() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        self.destroy_graph_inner(g)
    }

    /// The nodes of `g` in a topological order (ties by creation order); a cycle is
    /// `cudaErrorInvalidValue`.
    pub fn topo_order(&self, g: u64) -> CudaResult<Vec<u64>> {
        let nodes = &self.graph(g)?.nodes;
        let pos: HashMap<u64, usize> = nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        let mut indeg = vec![0usize; nodes.len()];
        let mut out: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        for (i, n) in nodes.iter().enumerate() {
            for d in &self.node(*n)?.deps {
                let j = *pos.get(d).ok_or(cuda::ERROR_INVALID_VALUE)?;
                indeg[i] += 1;
                out[j].push(i);
            }
        }
        let mut ready: BTreeSet<usize> = (0..nodes.len()).filter(|&i| indeg[i] == 0).collect();
        let mut order = Vec::with_capacity(nodes.len());
        while let Some(i) = ready.pop_first() {
            order.push(nodes[i]);
            for &k in &out[i] {
                indeg[k] -= 1;
                if indeg[k] == 0 {
                    ready.insert(k);
                }
            }
        }
        if order.len() != nodes.len() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        Ok(order)
    }

    /// Flatten `g` for execution: nodes in launch order with child graphs expanded, the
    /// position of every graph node (children's included), and the graph's shape.
    pub fn flatten(
        &self,
        g: u64,
        out: &mut Vec<ExecNode>,
        index: &mut HashMap<u64, usize>,
    ) -> CudaResult<Shape> {
        let order = self.topo_order(g)?;
        let pos: HashMap<u64, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        let mut shape = Vec::with_capacity(order.len());
        for n in order {
            let node = self.node(n)?;
            let mut deps: Vec<usize> = node.deps.iter().map(|d| pos[d]).collect();
            deps.sort_unstable();
            let mut code = node.kind.type_code() as u64;
            let child = match &node.kind {
                NodeKind::Child(c) => {
                    index.insert(n, out.len());
                    vec![self.flatten(*c, out, index)?]
                }
                NodeKind::Conditional(c) => {
                    // The bodies run as the condition says, so they stay apart; their
                    // nodes are not in `index` (an exec update of one is not supported).
                    index.insert(n, out.len());
                    code |= (c.ty as u64) << 8 | c.handle << 16;
                    let mut bodies = Vec::new();
                    let mut shapes = Vec::new();
                    for &b in &c.bodies {
                        let mut body = Vec::new();
                        shapes.push(self.flatten(b, &mut body, &mut HashMap::new())?);
                        bodies.push(body);
                    }
                    out.push(ExecNode { kind: node.kind.clone(), enabled: true, bodies });
                    shapes
                }
                k => {
                    index.insert(n, out.len());
                    out.push(ExecNode {
                        kind: k.clone(),
                        enabled: true,
                        bodies: Vec::new(),
                    });
                    Vec::new()
                }
            };
            shape.push((code, deps, child));
        }
        Ok(Shape(shape))
    }

    /// `cudaGraphInstantiate`.
    pub fn instantiate(&mut self, g: u64, flags: u64) -> CudaResult<u64> {
        let mut nodes = Vec::new();
        let mut index = HashMap::new();
        let shape = self.flatten(g, &mut nodes, &mut index)?;
        let user_objects = self.user_object_refs(g)?;
        let defaults = self.launch_defaults(g)?;
        for &(o, n) in &user_objects {
            crate::user_object::retain(o, n)?;
        }
        let h = self.handle();
        self.next_graph_id += 1;
        let id = self.next_graph_id;
        self.execs.insert(
            h,
            Exec {
                nodes: Arc::new(nodes),
                index,
                shape,
                flags,
                id,
                last_stream: None,
                done_event: 0,
                user_objects,
                defaults,
            },
        );
        Ok(h)
    }

    /// The conditions of `g` that a launch sets to their default first.
    fn launch_defaults(&self, g: u64) -> CudaResult<Vec<(u64, u32)>> {
        let mut handles = Vec::new();
        self.condition_handles(g, &mut handles)?;
        handles.sort_unstable();
        handles.dedup();
        Ok(handles
            .into_iter()
            .filter_map(|h| self.handles.get(&h).filter(|c| c.assign_default).map(|c| (h, c.default)))
            .collect())
    }

    /// `cudaGraphExecUpdate` for graphs of the same shape: every node takes the parameters
    /// of its counterpart in `g`. Otherwise (result code, node of `g` at fault).
    pub fn update(&mut self, e: u64, g: u64) -> Result<(), (u32, u64)> {
        let mut nodes = Vec::new();
        let mut index = HashMap::new();
        let shape = self
            .flatten(g, &mut nodes, &mut index)
            .map_err(|_| (cudaGraphExecUpdateError, 0))?;
        let exec = self.execs.get(&e).ok_or((cudaGraphExecUpdateError, 0))?;
        if shape != exec.shape {
            let same_topology = shape.0.len() == exec.shape.0.len()
                && shape.0.iter().zip(&exec.shape.0).all(|(a, b)| a.1 == b.1);
            let code = if same_topology {
                cudaGraphExecUpdateErrorNodeTypeChanged
            } else {
                cudaGraphExecUpdateErrorTopologyChanged
            };
            return Err((code, 0));
        }
        // A kernel node may not move between cooperative and plain launches.
        for (i, (new, old)) in nodes.iter().zip(exec.nodes.iter()).enumerate() {
            if let (NodeKind::Kernel(a), NodeKind::Kernel(b)) = (&new.kind, &old.kind) {
                if a.cooperative != b.cooperative {
                    let culprit = index.iter().find(|(_, &p)| p == i).map_or(0, |(&n, _)| n);
                    return Err((cudaGraphExecUpdateErrorParametersChanged, culprit));
                }
            }
        }
        let defaults = self.launch_defaults(g).map_err(|_| (cudaGraphExecUpdateError, 0))?;
        let exec = self.execs.get_mut(&e).ok_or((cudaGraphExecUpdateError, 0))?;
        exec.defaults = defaults;
        let enabled: Vec<bool> = exec.nodes.iter().map(|n| n.enabled).collect();
        for (n, en) in nodes.iter_mut().zip(enabled) {
            n.enabled = en;
        }
        exec.nodes = Arc::new(nodes);
        exec.index.extend(index);
        Ok(())
    }

    /// `cudaGraphExecChildGraphNodeSetParams`: the nodes that child-graph node `node` put
    /// into exec `e` take the parameters of `child`'s nodes, which must have the topology and
    /// node order of the node's own child graph (else `cudaErrorInvalidValue`, as must a
    /// kernel node that would move between cooperative and plain launches).
    pub fn exec_set_child(&mut self, e: u64, node: u64, child: u64) -> CudaResult<()> {
        let &NodeKind::Child(own) = &self.node(node)?.kind else {
            return Err(cuda::ERROR_INVALID_VALUE);
        };
        let (mut old, mut new) = (Vec::new(), Vec::new());
        let old_shape = self.flatten(own, &mut old, &mut HashMap::new())?;
        let new_shape = self.flatten(child, &mut new, &mut HashMap::new())?;
        if old_shape != new_shape {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let exec = self.execs.get_mut(&e).ok_or(cuda::ERROR_INVALID_VALUE)?;
        let &start = exec.index.get(&node).ok_or(cuda::ERROR_INVALID_VALUE)?;
        let segment = exec.nodes.get(start..start + new.len()).ok_or(cuda::ERROR_INVALID_VALUE)?;
        for (n, cur) in new.iter().zip(segment) {
            match (&n.kind, &cur.kind) {
                (NodeKind::Kernel(a), NodeKind::Kernel(b)) if a.cooperative != b.cooperative => {
                    return Err(cuda::ERROR_INVALID_VALUE)
                }
                (a, b) if a.type_code() != b.type_code() => return Err(cuda::ERROR_INVALID_VALUE),
                _ => {}
            }
        }
        let nodes = Arc::make_mut(&mut exec.nodes);
        for (i, n) in new.into_iter().enumerate() {
            nodes[start + i].kind = n.kind;
            nodes[start + i].bodies = n.bodies;
        }
        Ok(())
    }

    /// Edges of `g` as (from, to), in node creation order.
    pub fn edges(&self, g: u64) -> CudaResult<Vec<(u64, u64)>> {
        let mut e = Vec::new();
        for &n in &self.graph(g)?.nodes {
            for &d in &self.node(n)?.deps {
                e.push((d, n));
            }
        }
        Ok(e)
    }

    /// Whether `to` depends (transitively) on `from`, or is it.
    pub fn reaches(&self, from: u64, to: u64) -> bool {
        let mut stack = vec![to];
        let mut seen = BTreeSet::new();
        while let Some(n) = stack.pop() {
            if n == from {
                return true;
            }
            if seen.insert(n) {
                if let Some(node) = self.nodes.get(&n) {
                    stack.extend(node.deps.iter().copied());
                }
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(i: u64) -> NodeKind {
        NodeKind::Host { func: 1, data: i }
    }

    fn data_of(n: &ExecNode) -> u64 {
        match n.kind {
            NodeKind::Host { data, .. } => data,
            _ => u64::MAX,
        }
    }

    #[test]
    fn topological_order_respects_edges_added_after_the_nodes() {
        let mut s = Store::default();
        let g = s.create_graph();
        let a = s.add_node(g, &[], host(0)).unwrap();
        let b = s.add_node(g, &[], host(1)).unwrap();
        let c = s.add_node(g, &[], host(2)).unwrap();
        // c → a → b
        s.node_mut(a).unwrap().deps.push(c);
        s.node_mut(b).unwrap().deps.push(a);
        assert_eq!(s.topo_order(g).unwrap(), vec![c, a, b]);
        s.node_mut(c).unwrap().deps.push(b);
        assert_eq!(s.topo_order(g), Err(cuda::ERROR_INVALID_VALUE), "a cycle");
    }

    #[test]
    fn child_graphs_are_copied_at_creation_and_expanded_in_place() {
        let mut s = Store::default();
        let child = s.create_graph();
        let x = s.add_node(child, &[], host(10)).unwrap();
        s.add_node(child, &[x], host(11)).unwrap();
        let g = s.create_graph();
        let a = s.add_node(g, &[], host(0)).unwrap();
        let node = s.add_node(g, &[a], NodeKind::Child(0)).unwrap();
        let copy = s.clone_graph(child, Some(node)).unwrap();
        s.node_mut(node).unwrap().kind = NodeKind::Child(copy);
        s.add_node(g, &[node], host(1)).unwrap();
        // Changing the original child afterwards does not change the parent.
        s.add_node(child, &[], host(99)).unwrap();
        let e = s.instantiate(g, 0).unwrap();
        let order: Vec<u64> = s.execs[&e].nodes.iter().map(data_of).collect();
        assert_eq!(order, vec![0, 10, 11, 1]);
        assert_eq!(s.destroy_graph(copy), Err(cuda::ERROR_INVALID_VALUE));
        s.destroy_graph(g).unwrap();
        assert!(!s.graphs.contains_key(&copy), "the child went with its parent");
    }

    #[test]
    fn clone_maps_nodes_and_keeps_edges() {
        let mut s = Store::default();
        let g = s.create_graph();
        let a = s.add_node(g, &[], host(0)).unwrap();
        let b = s.add_node(g, &[a], host(1)).unwrap();
        let c = s.clone_graph(g, None).unwrap();
        let map = &s.graphs[&c].cloned_from;
        let (a2, b2) = (map[&a], map[&b]);
        assert_eq!(s.edges(c).unwrap(), vec![(a2, b2)]);
        assert_ne!(a2, a);
    }

    #[test]
    fn exec_update_takes_new_parameters_only_for_the_same_shape() {
        let mut s = Store::default();
        let g = s.create_graph();
        let a = s.add_node(g, &[], host(0)).unwrap();
        s.add_node(g, &[a], host(1)).unwrap();
        let e = s.instantiate(g, 0).unwrap();
        let g2 = s.create_graph();
        let a2 = s.add_node(g2, &[], host(5)).unwrap();
        s.add_node(g2, &[a2], host(6)).unwrap();
        s.update(e, g2).unwrap();
        let order: Vec<u64> = s.execs[&e].nodes.iter().map(data_of).collect();
        assert_eq!(order, vec![5, 6]);
        let g3 = s.create_graph();
        s.add_node(g3, &[], host(7)).unwrap();
        s.add_node(g3, &[], host(8)).unwrap();
        assert_eq!(
            s.update(e, g3).map_err(|e| e.0),
            Err(cudaGraphExecUpdateErrorTopologyChanged)
        );
    }

    /// A conditional node of `g` with `n` empty bodies (what `api::graph` builds).
    fn conditional(s: &mut Store, g: u64, deps: &[u64], handle: u64, ty: u32, n: usize) -> (u64, Vec<u64>) {
        let node = s.add_node(g, deps, NodeKind::Empty).unwrap();
        let bodies: Vec<u64> = (0..n).map(|_| s.create_graph()).collect();
        for b in &bodies {
            s.graphs.get_mut(b).unwrap().owner = Some(node);
        }
        s.node_mut(node).unwrap().kind = NodeKind::Conditional(CondNode { handle, ty, bodies: bodies.clone() });
        (node, bodies)
    }

    #[test]
    fn conditional_bodies_stay_apart_in_the_exec_and_defaults_are_collected() {
        let mut s = Store::default();
        let g = s.create_graph();
        s.handles.insert(0x100, CondHandle { graph: g, default: 1, assign_default: true });
        s.handles.insert(0x200, CondHandle { graph: g, default: 0, assign_default: false });
        let a = s.add_node(g, &[], host(0)).unwrap();
        let (c, bodies) = conditional(&mut s, g, &[a], 0x100, cudaGraphCondTypeIf, 2);
        s.add_node(bodies[0], &[], host(10)).unwrap();
        s.add_node(bodies[1], &[], host(20)).unwrap();
        // A WHILE nested in the IF's first body.
        let (_, inner) = conditional(&mut s, bodies[0], &[], 0x200, cudaGraphCondTypeWhile, 1);
        s.add_node(inner[0], &[], host(30)).unwrap();
        s.add_node(g, &[c], host(1)).unwrap();
        let e = s.instantiate(g, 0).unwrap();
        let ex = &s.execs[&e];
        let top: Vec<u64> = ex.nodes.iter().map(data_of).collect();
        assert_eq!(top, vec![0, u64::MAX, 1], "the bodies are not in the launch order");
        let cond = &ex.nodes[1];
        assert_eq!(cond.bodies.len(), 2);
        assert_eq!(data_of(&cond.bodies[0][0]), 10);
        assert_eq!(cond.bodies[0][1].bodies[0].iter().map(data_of).collect::<Vec<_>>(), vec![30]);
        assert_eq!(ex.defaults, vec![(0x100, 1)], "only handles with cudaGraphCondAssignDefault");
        // Such a graph is neither cloned nor copied into another.
        assert_eq!(s.clone_graph(g, None), Err(cuda::ERROR_NOT_SUPPORTED));
        // The same graph updates the exec; another handle is another shape.
        s.update(e, g).unwrap();
        let g2 = s.create_graph();
        let a2 = s.add_node(g2, &[], host(0)).unwrap();
        let (c2, b2) = conditional(&mut s, g2, &[a2], 0x200, cudaGraphCondTypeIf, 2);
        s.add_node(b2[0], &[], host(10)).unwrap();
        s.add_node(b2[1], &[], host(20)).unwrap();
        s.add_node(g2, &[c2], host(1)).unwrap();
        assert!(s.update(e, g2).is_err());
        // Destroying the graph takes the bodies (nested ones too) and orphans its handles.
        s.destroy_graph(g).unwrap();
        assert!(!s.graphs.contains_key(&bodies[0]) && !s.graphs.contains_key(&inner[0]));
        let mut gone = s.orphan_handles();
        gone.sort_unstable();
        assert_eq!(gone, vec![0x100, 0x200]);
    }

    #[test]
    fn duplicate_or_foreign_dependencies_are_invalid() {
        let mut s = Store::default();
        let g = s.create_graph();
        let h = s.create_graph();
        let a = s.add_node(g, &[], NodeKind::Empty).unwrap();
        let x = s.add_node(h, &[], NodeKind::Empty).unwrap();
        assert_eq!(s.add_node(g, &[a, a], NodeKind::Empty), Err(cuda::ERROR_INVALID_VALUE));
        assert_eq!(s.add_node(g, &[x], NodeKind::Empty), Err(cuda::ERROR_INVALID_VALUE));
        assert!(s.reaches(a, a));
    }
}
