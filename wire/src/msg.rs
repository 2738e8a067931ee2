//! Requests (interposer → proxy) and replies (proxy → interposer).
//!
//! Encoded with bincode 2's derive (no serde indirection: encoding a launch is a few tens of
//! nanoseconds). Bulk data never travels in messages: requests carry the application's
//! addresses and the proxy moves the bytes with cross-memory attach (`process_vm_readv/writev`)
//! or through a shared mapping, so every message stays small.

use bincode::{Decode, Encode};

/// Direction of a copy, as the interposer resolved it (`cudaMemcpyDefault` is resolved on the
/// application side, which knows which ranges are device allocations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub enum CopyKind {
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
}

/// What kind of memory an allocation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub enum AllocKind {
    /// Device memory: lives only in the proxy; reserved PROT_NONE in the application.
    Device,
    /// Managed memory: visible to both sides at the same address.
    Managed,
    /// Page-locked host memory (`cudaMallocHost`/`cudaHostAlloc`): a shared mapping at the same
    /// address in both processes, so async copies and mapped (zero-copy) access work.
    PinnedHost,
}

/// A 3-D extent (grid or block dimensions).
pub type Dim3 = [u32; 3];

/// One request. `Launch`, async copies/memsets, `EventRecord`, `StreamWaitEvent` and
/// `HostFunc` are pipelined (sent without waiting); everything else waits for its [`Reply`].
#[derive(Debug, Clone, PartialEq, Encode, Decode)]
pub enum Request {
    /// First message of a lane: the application's pid (for cross-memory attach).
    Hello {
        pid: u32,
    },
    /// The thread owning this lane is gone; the proxy frees the lane.
    Close,
    DeviceProps,
    MemGetInfo,
    Malloc {
        size: u64,
        kind: AllocKind,
    },
    Free {
        addr: u64,
    },
    /// Device memory mapped at `addr` (`cuMemMap` of a physical allocation into a range that
    /// `cuMemAddressReserve` took from the VMM range, `VMM_VA_OFFSET`); replies `Alloc`.
    /// `Free` unmaps it.
    MapAt {
        addr: u64,
        size: u64,
    },
    /// `cudaHostRegister`: the application range is page-locked (async copies read it late).
    HostRegister {
        addr: u64,
        len: u64,
    },
    HostUnregister {
        addr: u64,
    },
    /// Load a fat binary that the proxy reads from the application at `addr..addr+len`.
    LoadModule {
        addr: u64,
        len: u64,
    },
    UnloadModule {
        module: u64,
    },
    GetFunction {
        module: u64,
        name: String,
    },
    GetSymbol {
        module: u64,
        name: String,
    },
    /// Turn a module variable into managed memory (`__managed__`); replies `Alloc`.
    ManagedVar {
        module: u64,
        name: String,
    },
    FuncSetAttribute {
        func: u64,
        attr: u32,
        value: i32,
    },
    Launch {
        func: u64,
        grid: Dim3,
        block: Dim3,
        shared: u32,
        stream: u64,
        cooperative: bool,
        params: Vec<u8>,
    },
    /// 1-D copy; `sync` copies complete before the reply (legacy-stream semantics apply).
    Memcpy {
        dst: u64,
        src: u64,
        len: u64,
        kind: CopyKind,
        stream: u64,
        sync: bool,
    },
    Memcpy2D {
        dst: u64,
        dpitch: u64,
        src: u64,
        spitch: u64,
        width: u64,
        height: u64,
        kind: CopyKind,
        stream: u64,
        sync: bool,
    },
    Memset {
        dst: u64,
        value: u8,
        len: u64,
        stream: u64,
        sync: bool,
    },
    Memset2D {
        dst: u64,
        pitch: u64,
        value: u8,
        width: u64,
        height: u64,
        stream: u64,
        sync: bool,
    },
    StreamCreate {
        flags: u32,
        priority: i32,
    },
    StreamDestroy {
        stream: u64,
    },
    StreamQuery {
        stream: u64,
    },
    StreamSync {
        stream: u64,
    },
    StreamWaitEvent {
        stream: u64,
        event: u64,
    },
    EventCreate {
        flags: u32,
    },
    EventDestroy {
        event: u64,
    },
    EventRecord {
        event: u64,
        stream: u64,
    },
    EventQuery {
        event: u64,
    },
    EventSync {
        event: u64,
    },
    EventElapsed {
        start: u64,
        end: u64,
    },
    /// Run `func(data)` in the application when the stream reaches this point.
    HostFunc {
        stream: u64,
        func: u64,
        data: u64,
    },
    /// Sent by the application's callback thread: block until a host function is due.
    WaitCallback,
    CallbackDone {
        id: u64,
    },
    DeviceSync,
    DeviceReset,
    TexCreate {
        desc: TexDesc,
    },
    TexDestroy {
        tex: u64,
    },
    /// At program exit: finish device work, return the deferred error and pending printf
    /// output.
    Flush,
    /// Checkpoint, step 1 (program quiesced): drain every lane and the device, build the
    /// device state; replies `CkptPlan`.
    CheckpointState,
    /// Checkpoint, step 2 (the program's threads stopped): write the encoded
    /// [`crate::ckpt::DeviceState`] of step 1 at `state_addr` and the regions copied at the cut
    /// ([`crate::ckpt::copied_at_cut`]) at `data_addr` in the program, one after the other in
    /// the state's order. With a snapshot, the proxy then forks a copy-on-write holder of device
    /// memory, which lives until every copy of the program's descriptor `hold_fd` (the write
    /// end of a pipe whose read end the proxy opens through `/proc`) is closed; replies
    /// `Value(holder pid)`, 0 without a snapshot.
    CheckpointData {
        state_addr: u64,
        state_len: u64,
        data_addr: u64,
        data_len: u64,
        hold_fd: i32,
    },
    /// Checkpoint, end (in the program that goes on): the device's queues run again and the
    /// calls the checkpoint held go on.
    CheckpointEnd,
    /// After a restart: the answer to call `seq` on `lane` of channel `channel` (the proxy of
    /// before the restart), which a checkpoint cut while the program waited for it. Replies
    /// with that call's reply once due, or `NotCarried` when the checkpoint had not started
    /// it (the program sends it again).
    Resume {
        channel: u64,
        lane: u32,
        seq: u32,
    },
    /// Restart: re-create the device state encoded at `state_addr` (in the program), filling
    /// memory from `data_addr`. Replies `Restored`.
    RestoreDevice {
        state_addr: u64,
        state_len: u64,
        data_addr: u64,
        data_len: u64,
    },
    /// `cudaStreamSetAttribute`: a stream attribute the device's driver takes as a hint
    /// (validated by the interposer, which also remembers it for `cudaStreamGetAttribute`).
    StreamSetAttr {
        stream: u64,
        attr: StreamAttr,
    },
    /// `cudaCtxResetPersistingL2Cache`: persisting L2 lines back to normal.
    ResetPersistingL2,
    /// `cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize)`: the L2 set-aside, already
    /// clamped to [`DeviceProps::max_persisting_l2`].
    SetPersistingL2Limit {
        bytes: u64,
    },
    /// `cudaDeviceSetLimit(cudaLimitMallocHeapSize)`: the size of the device heap (device
    /// `malloc`); before the first kernel that allocates from it, as CUDA requires.
    SetHeapLimit {
        bytes: u64,
    },
    /// The names of a module's kernels (`cudaLibraryGetKernelCount`,
    /// `cudaLibraryEnumerateKernels`): `Body::Names`.
    ModuleKernels {
        module: u64,
    },
}

/// `cudaAccessPolicyWindow`: an L2 persistence hint for accesses to `[base, base+bytes)`.
#[derive(Debug, Clone, Copy, PartialEq, Encode, Decode)]
pub struct AccessPolicy {
    pub base: u64,
    pub bytes: u64,
    pub hit_ratio: f32,
    /// `cudaAccessProperty` of the hit lines (normal, streaming, persisting).
    pub hit_prop: u32,
    /// `cudaAccessProperty` of the others (normal or streaming).
    pub miss_prop: u32,
}

/// The stream attributes a backend is told about (`cudaStreamAttrID`).
#[derive(Debug, Clone, Copy, PartialEq, Encode, Decode)]
pub enum StreamAttr {
    AccessPolicyWindow(AccessPolicy),
    /// `cudaSynchronizationPolicy` of host threads waiting for the stream.
    SyncPolicy(u32),
    /// `cudaLaunchMemSyncDomain` of the stream's kernels.
    MemSyncDomain(u32),
    /// `cudaLaunchMemSyncDomainMap`: (default, remote) domain.
    MemSyncDomainMap(u8, u8),
}

/// Texture object description (the subset of `cudaResourceDesc`/`cudaTextureDesc` the
/// emulated device understands).
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct TexDesc {
    pub base: u64,
    pub width: u64,
    pub height: u64,
    pub depth: u64,
    pub pitch: u64,
    /// Bits per channel (x, y, z, w).
    pub bits: [u32; 4],
    /// `cudaChannelFormatKind`: 0 signed, 1 unsigned, 2 float.
    pub format_kind: u32,
    pub address_mode: [u32; 3],
    pub filter_mode: u32,
    pub read_mode: u32,
    pub normalized: bool,
    /// A texture over a mipmapped array: its levels (the fields above describe level 0).
    pub mip: Option<TexMip>,
}

/// The levels of a mipmapped texture and its level-of-detail sampler state.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct TexMip {
    /// Level 0 first.
    pub levels: Vec<TexLevel>,
    /// `cudaTextureFilterMode` between levels: 0 point, 1 linear.
    pub filter_mode: u32,
    /// `mipmapLevelBias`, `minMipmapLevelClamp`, `maxMipmapLevelClamp` (f32 bits).
    pub bias: u32,
    pub min_clamp: u32,
    pub max_clamp: u32,
}

/// One level's memory: base, extent in elements (rows, slices as the texture reads them),
/// bytes per row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub struct TexLevel {
    pub base: u64,
    pub width: u64,
    pub height: u64,
    pub depth: u64,
    pub pitch: u64,
}

/// Static properties of the device the proxy drives (enough for `cudaDeviceProp` and
/// `cudaDeviceGetAttribute`).
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct DeviceProps {
    pub name: String,
    pub total_mem: u64,
    pub major: i32,
    pub minor: i32,
    pub multiprocessors: i32,
    pub max_threads_per_block: i32,
    pub max_threads_per_sm: i32,
    pub max_blocks_per_sm: i32,
    pub warp_size: i32,
    pub regs_per_block: i32,
    pub regs_per_sm: i32,
    pub shared_per_block: u64,
    pub shared_per_block_optin: u64,
    pub shared_per_sm: u64,
    pub const_mem: u64,
    pub clock_khz: i32,
    pub mem_clock_khz: i32,
    pub mem_bus_width: i32,
    pub l2_bytes: i32,
    pub max_grid: [i32; 3],
    pub max_block: [i32; 3],
    pub managed: bool,
    pub concurrent_kernels: bool,
    pub cooperative_launch: bool,
    pub pci_bus_id: i32,
    pub uuid: [u8; 16],
    /// Most bytes of L2 a program may set aside for persisting accesses
    /// (`cudaDevAttrMaxPersistingL2CacheSize`; 0 where the device has no such feature).
    pub max_persisting_l2: i32,
    /// Largest access policy window (`cudaDevAttrMaxAccessPolicyWindowSize`).
    pub max_access_policy_window: i32,
    /// Kernels can set a graph's conditions (`cudaGraphSetConditional`) as the interposer
    /// hands conditional handles out: the address of the condition's value in device memory.
    /// The emulated device can; a real GPU's `cudaGraphSetConditional` expects the driver's
    /// handles of a driver graph, which crum's graphs are not.
    pub graph_conditionals: bool,
}

/// What the interposer needs about a kernel: attributes and the packed parameter layout.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct FuncInfo {
    pub handle: u64,
    /// (offset, size) of each parameter in the packed block.
    pub params: Vec<(u32, u32)>,
    pub param_bytes: u32,
    pub shared_bytes: u64,
    pub local_bytes: u64,
    pub const_bytes: u64,
    pub max_threads_per_block: i32,
    pub num_regs: i32,
    pub ptx_version: i32,
    pub binary_version: i32,
    pub max_dynamic_shared: i32,
}

/// The body of a reply.
#[derive(Debug, Clone, PartialEq, Encode, Decode)]
pub enum Body {
    None,
    Value(u64),
    Pair(u64, u64),
    Float(f32),
    /// A new allocation; `memfd` is the proxy's descriptor number of the shared mapping behind
    /// managed and pinned memory (opened by the application through `/proc/<proxy>/fd/<n>`).
    Alloc {
        addr: u64,
        memfd: Option<i32>,
    },
    Props(DeviceProps),
    Func(FuncInfo),
    Callback {
        id: u64,
        func: u64,
        data: u64,
    },
    /// Shared mappings re-created by a restore: (address, length, kind, proxy memfd number).
    Restored(Vec<(u64, u64, AllocKind, i32)>),
    /// A checkpoint or restore step failed; the message names the problem.
    Failed(String),
    /// Names (a module's kernels).
    Names(Vec<String>),
    /// Reply to `CheckpointState`: the encoded state's length, the bytes copied at the cut
    /// (step 2's `data_len`) and whether the rest comes from a copy-on-write snapshot.
    CkptPlan {
        state_len: u64,
        copied_len: u64,
        snapshot: bool,
    },
    /// Reply to `Resume`: the checkpoint had not started that call.
    NotCarried,
}

/// A reply to a synchronous request.
#[derive(Debug, Clone, PartialEq, Encode, Decode)]
pub struct Reply {
    /// `cudaError_t` of this call (0 = success).
    pub status: u32,
    /// Error of earlier pipelined work not yet reported (0 = none); reported once.
    pub deferred: u32,
    /// Device printf output produced since the last reply, in order.
    pub printf: Vec<u8>,
    pub body: Body,
}

impl Reply {
    pub fn ok(body: Body) -> Reply {
        Reply {
            status: 0,
            deferred: 0,
            printf: Vec::new(),
            body,
        }
    }
    pub fn err(status: u32) -> Reply {
        Reply {
            status,
            deferred: 0,
            printf: Vec::new(),
            body: Body::None,
        }
    }
}

impl Request {
    /// True for requests sent without waiting for a reply.
    pub fn is_pipelined(&self) -> bool {
        match self {
            Request::Launch { .. }
            | Request::EventRecord { .. }
            | Request::StreamWaitEvent { .. }
            | Request::HostFunc { .. }
            | Request::Close => true,
            Request::Memcpy { sync, .. }
            | Request::Memcpy2D { sync, .. }
            | Request::Memset { sync, .. }
            | Request::Memset2D { sync, .. } => !*sync,
            _ => false,
        }
    }
}

/// Encoding of data kept in images (no size limit: the reader checks sizes itself).
pub(crate) fn config_unlimited() -> impl bincode::config::Config {
    bincode::config::standard()
        .with_little_endian()
        .with_variable_int_encoding()
}

pub(crate) fn config() -> impl bincode::config::Config {
    bincode::config::standard()
        .with_little_endian()
        .with_variable_int_encoding()
        .with_limit::<{ 1 << 24 }>()
}

/// Encode a message into a new buffer.
pub fn encode<T: Encode>(msg: &T) -> Vec<u8> {
    bincode::encode_to_vec(msg, config()).unwrap_or_default()
}

/// Encode into `dst`; returns the length, or None if it does not fit.
pub fn encode_into<T: Encode>(msg: &T, dst: &mut [u8]) -> Option<usize> {
    bincode::encode_into_slice(msg, dst, config()).ok()
}

/// Decode a complete message; trailing bytes or malformed input are an error.
pub fn decode<T: Decode<()>>(src: &[u8]) -> Result<T, crate::ChannelError> {
    match bincode::decode_from_slice::<T, _>(src, config()) {
        Ok((v, n)) if n == src.len() => Ok(v),
        Ok(_) => Err(crate::ChannelError::Malformed("trailing bytes".into())),
        Err(e) => Err(crate::ChannelError::Malformed(e.to_string())),
    }
}
