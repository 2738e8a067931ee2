//! The engine's public types: modules and kernels as the backend sees them, the device
//! memory interface, launch configuration, and launch errors with their `cudaError_t`.

use crate::ir::Program;

/// Why PTX text could not be parsed or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("PTX line {line}: {msg}")]
pub struct ParseError {
    /// 1-based line in the PTX text (0 when not tied to a line).
    pub line: usize,
    pub msg: String,
}

/// A parsed and decoded PTX module. Immutable after parsing, so launches share it.
#[derive(Debug)]
pub struct Module {
    pub(crate) prog: Program,
}

impl Module {
    /// Parse and decode PTX text once.
    pub fn parse(ptx: &str) -> Result<Module, ParseError> {
        Module::link(&[ptx])
    }

    /// Parse the relocatable PTX of every object of a program built with separate compilation
    /// (`nvcc -rdc=true`) and link it into one module, as nvlink does: `.extern` functions and
    /// variables resolve to the module that defines them, names without linkage stay private
    /// to their module, a `.weak` definition gives way to a `.visible` one. Two `.visible`
    /// definitions of a name fail with an error naming both modules; a name no module defines
    /// is listed by [`Module::unresolved`] and refuses, at launch, the kernels that reach it.
    pub fn link(ptx: &[&str]) -> Result<Module, ParseError> {
        // PTX comes from the application: a parser bug must not take the device process down.
        match std::panic::catch_unwind(|| crate::parse::parse_modules(ptx)) {
            Ok(r) => Ok(Module { prog: r? }),
            Err(_) => Err(ParseError { line: 0, msg: "internal error of the PTX parser".into() }),
        }
    }

    /// Functions and variables declared `.extern` (or otherwise shared) that no module of the
    /// program defines; kernels that call or name one cannot run.
    pub fn unresolved(&self) -> &[String] {
        &self.prog.unresolved
    }

    /// The kernel (`.entry`) called `name` (mangled name, as registered).
    pub fn kernel(&self, name: &str) -> Option<&KernelInfo> {
        self.prog.kernels.iter().find(|k| k.name == name)
    }

    /// Every kernel of the module.
    pub fn kernels(&self) -> impl Iterator<Item = &KernelInfo> {
        self.prog.kernels.iter()
    }

    /// Module-scope `.global` and `.const` variables (the backend allocates them).
    pub fn globals(&self) -> &[GlobalVar] {
        &self.prog.globals
    }

    /// The `.target` architecture, e.g. 80 for `sm_80` (`cudaFuncAttributes::ptxVersion`).
    pub fn target_arch(&self) -> Option<u32> {
        self.prog.target
    }

    /// The PTX ISA version of `.version major.minor`.
    pub fn ptx_isa_version(&self) -> Option<(u32, u32)> {
        self.prog.version
    }
}

/// What a backend needs to know about a kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelInfo {
    pub name: String,
    pub params: Vec<ParamInfo>,
    /// Size of the packed parameter block.
    pub param_bytes: u32,
    pub static_shared_bytes: u64,
    /// Per-thread `.local` bytes (the kernel's and every function it may call).
    pub local_bytes: u64,
    pub max_threads_per_block: Option<u32>,
    /// Estimate: registers declared by the kernel.
    pub num_regs: u32,
    /// Reads `%envreg1/2` (the grid-sync workspace of cooperative groups).
    pub uses_grid_sync: bool,
}

/// One kernel parameter in the packed parameter block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamInfo {
    pub offset: u32,
    pub size: u32,
    pub align: u32,
}

/// State space of a module-scope variable the backend allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateSpace {
    Global,
    Const,
}

/// A module-scope `.global` / `.const` variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalVar {
    pub name: String,
    pub space: StateSpace,
    pub size: u64,
    pub align: u32,
    /// Initializer bytes, zero-filled when none; `init.len() == size`.
    pub init: Vec<u8>,
    /// Declared `.attribute(.managed)` (a `__managed__` variable).
    pub managed: bool,
}

/// A live device allocation: device addresses `base..base+len` live at `host..host+len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    pub base: u64,
    pub len: u64,
    pub host: *mut u8,
    /// Loads only: a store or atomic here is an illegal address (the emulated device's
    /// reserved area before its first allocation reads as zeros and is never written).
    pub read_only: bool,
}

/// The device's memory as the engine sees it.
///
/// The engine caches regions during a launch and bounds-checks every access itself; a
/// region must stay mapped (and `host..host+len` valid for reads, and for writes unless it is
/// `read_only`) for the duration of the launch.
pub trait DeviceMemory: Sync {
    /// The live allocation containing `addr`, or None (→ illegal address).
    fn region(&self, addr: u64) -> Option<Region>;
    /// Texture object lookup; None → invalid texture (illegal address).
    fn texture(&self, handle: u64) -> Option<TextureDesc> {
        let _ = handle;
        None
    }
    /// Device-side `malloc`: a fresh allocation of `size` bytes, or None (the kernel gets
    /// NULL, as when a GPU's device heap is exhausted). The region must be visible to
    /// `region` immediately.
    fn malloc(&self, size: u64) -> Option<u64> {
        let _ = size;
        None
    }
    /// Device-side `free` of a pointer `malloc` returned.
    fn free(&self, addr: u64) {
        let _ = addr;
    }
    /// Surface object lookup (`cudaCreateSurfaceObject` handles), described like a
    /// texture (base, extent, pitch, channel bits); None → illegal address.
    fn surface(&self, handle: u64) -> Option<TextureDesc> {
        let _ = handle;
        None
    }
}

/// Channel kind of a texture's elements (`cudaChannelFormatKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelKind {
    Signed,
    Unsigned,
    Float,
}

/// Out-of-range coordinate handling (`cudaTextureAddressMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressMode {
    Wrap,
    Clamp,
    Mirror,
    Border,
}

/// A texture object: linear, pitch-2D or 3D memory at `base`.
#[derive(Debug, Clone, PartialEq)]
pub struct TextureDesc {
    pub base: u64,
    /// Extent in elements.
    pub width: u64,
    pub height: u64,
    pub depth: u64,
    /// Bytes per row (0: width × element size).
    pub pitch: u64,
    /// Bits per channel (x, y, z, w); 0 = channel absent.
    pub bits: [u32; 4],
    pub kind: ChannelKind,
    pub address_mode: [AddressMode; 3],
    /// Linear filtering (else point).
    pub linear_filter: bool,
    /// `cudaReadModeNormalizedFloat`: integer texels read as [0,1] / [-1,1] floats.
    pub normalized_float: bool,
    /// Coordinates in [0,1).
    pub normalized_coords: bool,
    /// The levels of a mipmapped texture (the fields above describe level 0).
    pub mip: Option<Mipmap>,
}

/// One level of a mipmapped texture: its memory and extent (elements; bytes per row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MipLevel {
    pub base: u64,
    pub width: u64,
    pub height: u64,
    pub depth: u64,
    pub pitch: u64,
}

/// A mipmapped texture's levels and its level-of-detail sampler state (`cudaTextureDesc`'s
/// `mipmapFilterMode`, `mipmapLevelBias`, `min/maxMipmapLevelClamp`).
#[derive(Debug, Clone, PartialEq)]
pub struct Mipmap {
    /// Level 0 first; each level half the extent of the one before (at least 1).
    pub levels: Vec<MipLevel>,
    /// Linear filtering between the two nearest levels (else the nearest level).
    pub linear: bool,
    pub bias: f32,
    pub min_clamp: f32,
    pub max_clamp: f32,
}

impl TextureDesc {
    /// From the CUDA runtime's enums: `format_kind` 0 signed / 1 unsigned / 2 float;
    /// address modes 0 wrap / 1 clamp / 2 mirror / 3 border; `filter_mode` 1 linear;
    /// `read_mode` 1 normalized float.
    #[allow(clippy::too_many_arguments)]
    pub fn from_parts(
        base: u64,
        width: u64,
        height: u64,
        depth: u64,
        pitch: u64,
        bits: [u32; 4],
        format_kind: u32,
        address_mode: [u32; 3],
        filter_mode: u32,
        read_mode: u32,
        normalized: bool,
    ) -> TextureDesc {
        let am = |m: u32| match m {
            0 => AddressMode::Wrap,
            2 => AddressMode::Mirror,
            3 => AddressMode::Border,
            _ => AddressMode::Clamp,
        };
        TextureDesc {
            base,
            width,
            height,
            depth,
            pitch,
            bits,
            kind: match format_kind {
                0 => ChannelKind::Signed,
                2 => ChannelKind::Float,
                _ => ChannelKind::Unsigned,
            },
            address_mode: address_mode.map(am),
            linear_filter: filter_mode == 1,
            normalized_float: read_mode == 1,
            normalized_coords: normalized,
            mip: None,
        }
    }
}

/// Grid and block shape of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub dynamic_shared_bytes: u32,
    /// `cudaLaunchCooperativeKernel`: all blocks must be resident at once.
    pub cooperative: bool,
}

/// Worker threads that run the blocks of a grid.
#[derive(Debug)]
pub struct Pool {
    pub(crate) threads: usize,
}

impl Pool {
    /// A pool of `threads` workers (at least one).
    pub fn new(threads: usize) -> Pool {
        Pool { threads: threads.max(1) }
    }
    /// One worker per available core.
    pub fn for_machine() -> Pool {
        Pool::new(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
    /// Number of workers.
    pub fn threads(&self) -> usize {
        self.threads
    }
}

/// What a successful launch produced besides memory writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchOutput {
    /// Device printf text, in order (blocks in launch order).
    pub printf: Vec<u8>,
    /// Instructions executed (all threads), for benchmarks.
    pub instructions: u64,
    /// Set when [`launch_from`] was stopped: the first block (linear index) not started;
    /// every block before it ran to completion or is in `contexts`.
    pub stopped_at: Option<u64>,
    /// Blocks saved in the middle ([`LaunchCtl::SAVE`]), and saved ones given to the launch
    /// that it did not resume.
    pub contexts: Vec<BlockContext>,
}

/// Why a launch failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    #[error("illegal address {addr:#x}")]
    IllegalAddress { addr: u64 },
    #[error("misaligned address {addr:#x}")]
    MisalignedAddress { addr: u64 },
    #[error("the kernel executed trap")]
    Trap,
    #[error("device-side assert failed")]
    Assert,
    #[error("invalid launch configuration: {0}")]
    InvalidConfig(String),
    #[error("too many resources requested: {0}")]
    TooManyResources(String),
    #[error("cooperative launch too large: not all blocks can be resident at once")]
    CooperativeTooLarge,
    #[error("no kernel named {0}")]
    KernelNotFound(String),
    #[error("not supported by the emulated device: {0}")]
    Unsupported(String),
    /// Abandoned by its controller ([`LaunchCtl::FLUSH`]): to be run again.
    #[error("flushed (to run again)")]
    Flushed,
    /// Threads wait for each other forever (barrier or warp operation that cannot complete).
    #[error("kernel deadlocked: {0}")]
    Deadlock(String),
    /// A failure after the kernel printed something; `printf` is that output.
    #[error("{source}")]
    WithPrintf { source: Box<LaunchError>, printf: Vec<u8> },
}

impl LaunchError {
    /// The `cudaError_t` a GPU reports for this failure.
    pub fn cuda_error(&self) -> u32 {
        match self {
            LaunchError::IllegalAddress { .. } => 700,
            LaunchError::MisalignedAddress { .. } => 716,
            LaunchError::Trap | LaunchError::Deadlock(_) => 719,
            LaunchError::Assert => 710,
            LaunchError::InvalidConfig(_) => 9,
            LaunchError::TooManyResources(_) => 701,
            LaunchError::CooperativeTooLarge => 720,
            LaunchError::KernelNotFound(_) => 98,
            LaunchError::Unsupported(_) | LaunchError::Flushed => 801,
            LaunchError::WithPrintf { source, .. } => source.cuda_error(),
        }
    }

    /// Device printf output captured before the failure.
    pub fn printf(&self) -> &[u8] {
        match self {
            LaunchError::WithPrintf { printf, .. } => printf,
            _ => &[],
        }
    }

    /// The failure itself, without the printf wrapper.
    pub fn kind(&self) -> &LaunchError {
        match self {
            LaunchError::WithPrintf { source, .. } => source.kind(),
            e => e,
        }
    }
}

/// Run `kernel` of `module` over the grid of `cfg`.
///
/// `params`: the packed parameter block (layout from [`KernelInfo::params`]).
/// `symbols`: device address of a module-scope variable by name (the backend allocates them).
pub fn launch(
    module: &Module,
    kernel: &str,
    cfg: &LaunchConfig,
    params: &[u8],
    symbols: &dyn Fn(&str) -> Option<u64>,
    mem: &dyn DeviceMemory,
    pool: &Pool,
) -> Result<LaunchOutput, LaunchError> {
    crate::exec::launch(module, kernel, cfg, params, symbols, mem, pool, 0, None, Vec::new())
}

/// Control of a running launch by another thread (a checkpoint's preemption).
#[derive(Debug, Default)]
pub struct LaunchCtl {
    /// [`LaunchCtl::RUN`], [`LaunchCtl::STOP`] or [`LaunchCtl::FLUSH`].
    pub mode: std::sync::atomic::AtomicU8,
    /// Blocks completed so far (progress, for a policy's estimate).
    pub blocks_done: std::sync::atomic::AtomicU64,
}

impl LaunchCtl {
    /// Run to the end.
    pub const RUN: u8 = 0;
    /// Start no new block: the launch returns with [`LaunchOutput::stopped_at`].
    pub const STOP: u8 = 1;
    /// Abandon the blocks running too: the launch fails with [`LaunchError::Flushed`] (its
    /// memory effects so far stay; only for a launch that may run again from its start).
    pub const FLUSH: u8 = 2;
    /// Start no new block and save the running ones where they are (every thread at an
    /// instruction boundary): the launch returns them in [`LaunchOutput::contexts`], to be
    /// given back to [`launch_from`] later (context save).
    pub const SAVE: u8 = 3;
}

/// A block stopped in the middle ([`LaunchCtl::SAVE`]): its shared memory, barrier
/// arrivals and every thread's registers, parameter and local frames, call stack, state and
/// pc. Opaque outside the engine; [`BlockContext::encode`]/[`BlockContext::decode`] for
/// images (a decoded context is checked against the kernel before it runs).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct BlockContext {
    /// Linear block index.
    pub index: u64,
    pub(crate) shared: Vec<u8>,
    pub(crate) arrivals: [u32; 16],
    pub(crate) threads: Vec<ThreadContext>,
}

#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(crate) struct ThreadContext {
    pub(crate) pc: u32,
    pub(crate) regs: Vec<u64>,
    pub(crate) rb: u64,
    pub(crate) pframe: Vec<u8>,
    pub(crate) fb: u64,
    pub(crate) local: Vec<u8>,
    pub(crate) lb: u64,
    pub(crate) func: u32,
    /// (ret_pc, rb, fb, lb, func, call) of each active call.
    pub(crate) frames: Vec<[u32; 6]>,
    /// 0 run, 1 barrier (a, b), 2 warp, 3 done.
    pub(crate) st: (u8, u32, u32),
    pub(crate) tid: [u32; 3],
    pub(crate) lin: u32,
}

impl BlockContext {
    pub fn encode(&self) -> Vec<u8> {
        bincode::encode_to_vec(self, bincode::config::standard()).unwrap_or_default()
    }

    /// Decode (at most 1 GiB of state); the engine checks it against the kernel at resume.
    pub fn decode(b: &[u8]) -> Result<BlockContext, String> {
        let cfg = bincode::config::standard().with_limit::<{ 1 << 30 }>();
        match bincode::decode_from_slice::<BlockContext, _>(b, cfg) {
            Ok((c, n)) if n == b.len() => Ok(c),
            Ok(_) => Err("a saved block context has trailing bytes".into()),
            Err(e) => Err(format!("a saved block context is corrupt: {e}")),
        }
    }
}

/// [`launch`] of the blocks from `first_block` on (linear index, x fastest), the ones before
/// having run already, under the control of `ctl`: with mode STOP workers start no new block
/// and the launch returns with [`LaunchOutput::stopped_at`] (block-boundary preemption); with
/// FLUSH the running blocks are abandoned too. A kernel that uses grid-wide synchronization
/// needs all its blocks resident: STOP is ignored for it (FLUSH is not), and `first_block`
/// must be 0.
#[allow(clippy::too_many_arguments)]
pub fn launch_from(
    module: &Module,
    kernel: &str,
    cfg: &LaunchConfig,
    params: &[u8],
    symbols: &dyn Fn(&str) -> Option<u64>,
    mem: &dyn DeviceMemory,
    pool: &Pool,
    first_block: u64,
    ctl: Option<&LaunchCtl>,
) -> Result<LaunchOutput, LaunchError> {
    crate::exec::launch(module, kernel, cfg, params, symbols, mem, pool, first_block, ctl, Vec::new())
}

/// [`launch_from`] that first resumes `contexts` (blocks saved by [`LaunchCtl::SAVE`], all
/// of them before `first_block`), then runs the blocks from `first_block` on.
#[allow(clippy::too_many_arguments)]
pub fn launch_resume(
    module: &Module,
    kernel: &str,
    cfg: &LaunchConfig,
    params: &[u8],
    symbols: &dyn Fn(&str) -> Option<u64>,
    mem: &dyn DeviceMemory,
    pool: &Pool,
    first_block: u64,
    ctl: Option<&LaunchCtl>,
    contexts: Vec<BlockContext>,
) -> Result<LaunchOutput, LaunchError> {
    crate::exec::launch(module, kernel, cfg, params, symbols, mem, pool, first_block, ctl, contexts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync<T: Send + Sync>() {}

    #[test]
    fn modules_and_pools_can_be_shared_between_threads() {
        send_sync::<Module>();
        send_sync::<Pool>();
        send_sync::<LaunchError>();
    }

    #[test]
    fn launch_errors_map_to_cuda_error_codes() {
        assert_eq!(LaunchError::IllegalAddress { addr: 1 }.cuda_error(), 700);
        assert_eq!(LaunchError::MisalignedAddress { addr: 1 }.cuda_error(), 716);
        assert_eq!(LaunchError::Trap.cuda_error(), 719);
        assert_eq!(LaunchError::Assert.cuda_error(), 710);
        assert_eq!(LaunchError::InvalidConfig(String::new()).cuda_error(), 9);
        assert_eq!(LaunchError::TooManyResources(String::new()).cuda_error(), 701);
        assert_eq!(LaunchError::CooperativeTooLarge.cuda_error(), 720);
        assert_eq!(LaunchError::KernelNotFound(String::new()).cuda_error(), 98);
        assert_eq!(LaunchError::Unsupported(String::new()).cuda_error(), 801);
        let e = LaunchError::WithPrintf { source: Box::new(LaunchError::Assert), printf: b"x".to_vec() };
        assert_eq!((e.cuda_error(), e.printf(), e.kind()), (710, &b"x"[..], &LaunchError::Assert));
    }
}
