//! The decoded form of a module: one flat instruction array for every function, operands
//! with registers resolved to frame-relative indices, labels to instruction indices and
//! symbols to state-space offsets (or to a per-launch table for module variables).
//! Opcode, type and modifiers are separate fields so one handler serves every type.

use crate::api::{GlobalVar, KernelInfo};

/// Scalar types of PTX instructions and registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    B8,
    B16,
    B32,
    B64,
    B128,
    U8,
    U16,
    U32,
    U64,
    S8,
    S16,
    S32,
    S64,
    F16,
    F16x2,
    Bf16,
    Bf16x2,
    F32,
    F64,
    Pred,
}

impl Ty {
    pub(crate) fn parse(s: &str) -> Option<Ty> {
        Some(match s {
            "b8" => Ty::B8,
            "b16" => Ty::B16,
            "b32" => Ty::B32,
            "b64" => Ty::B64,
            "b128" => Ty::B128,
            "u8" => Ty::U8,
            "u16" => Ty::U16,
            "u32" => Ty::U32,
            "u64" => Ty::U64,
            "s8" => Ty::S8,
            "s16" => Ty::S16,
            "s32" => Ty::S32,
            "s64" => Ty::S64,
            "f16" => Ty::F16,
            "f16x2" => Ty::F16x2,
            "bf16" => Ty::Bf16,
            "bf16x2" => Ty::Bf16x2,
            "f32" => Ty::F32,
            "f64" => Ty::F64,
            "pred" => Ty::Pred,
            _ => return None,
        })
    }
    /// Size in bytes (predicates count as 1 when stored).
    pub(crate) fn size(self) -> u32 {
        match self {
            Ty::B8 | Ty::U8 | Ty::S8 | Ty::Pred => 1,
            Ty::B16 | Ty::U16 | Ty::S16 | Ty::F16 | Ty::Bf16 => 2,
            Ty::B32 | Ty::U32 | Ty::S32 | Ty::F32 | Ty::F16x2 | Ty::Bf16x2 => 4,
            Ty::B64 | Ty::U64 | Ty::S64 | Ty::F64 => 8,
            Ty::B128 => 16,
        }
    }
    pub(crate) fn bits(self) -> u32 {
        self.size() * 8
    }
    pub(crate) fn is_signed(self) -> bool {
        matches!(self, Ty::S8 | Ty::S16 | Ty::S32 | Ty::S64)
    }
    pub(crate) fn is_float(self) -> bool {
        matches!(self, Ty::F16 | Ty::F32 | Ty::F64 | Ty::Bf16 | Ty::F16x2 | Ty::Bf16x2)
    }
}

/// State spaces of memory operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Space {
    Generic,
    Global,
    Const,
    Shared,
    Local,
    Param,
}

/// Rounding modifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rnd {
    None,
    Rn,
    Rz,
    Rm,
    Rp,
    /// Round to integral (cvt `.rni/.rzi/.rmi/.rpi`).
    Rni,
    Rzi,
    Rmi,
    Rpi,
}

/// Comparison of `setp`/`set`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Lo,
    Ls,
    Hi,
    Hs,
    Equ,
    Neu,
    Ltu,
    Leu,
    Gtu,
    Geu,
    Num,
    Nan,
}

/// The combining or read-modify-write operation of `setp`/`atom`/`red`/`redux`/`vote`/...
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sub {
    None,
    And,
    Or,
    Xor,
    Add,
    Min,
    Max,
    Inc,
    Dec,
    Exch,
    Cas,
    // vote
    All,
    Any,
    Uni,
    Ballot,
    // shfl
    Up,
    Down,
    Bfly,
    Idx,
}

/// `mul`/`mad` result part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    Lo,
    Hi,
    Wide,
}

/// Decoded opcodes; the type and modifiers live beside them in [`Inst`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Mov,
    Add,
    Sub,
    Mul,
    Mad,
    Fma,
    Div,
    Rem,
    Abs,
    Neg,
    Min,
    Max,
    And,
    Or,
    Xor,
    Not,
    Cnot,
    Shl,
    Shr,
    Selp,
    Slct,
    Setp,
    Set,
    Cvt,
    Cvta,
    Ld,
    St,
    Bra,
    Ret,
    Exit,
    Call,
    Bar,
    /// `bar.red.{popc,and,or}`: barrier plus a block-wide reduction of a predicate.
    BarRed,
    /// `bar.arrive id, count`: count toward a barrier without waiting.
    BarArrive,
    BarWarp,
    Atom,
    Red,
    Vote,
    Shfl,
    Activemask,
    Match,
    Redux,
    Rcp,
    Sqrt,
    Rsqrt,
    Ex2,
    Lg2,
    Sin,
    Cos,
    Tanh,
    Copysign,
    Clz,
    Popc,
    Brev,
    Bfind,
    Bfe,
    Bfi,
    Prmt,
    Shf,
    Addc,
    Subc,
    Madc,
    Testp,
    Tex,
    Trap,
    Nop,
    Lop3,
    Mul24,
    Mad24,
    Sad,
    Dp4a,
    Dp2a,
    Isspacep,
    /// `cp.async` (performed at once; commit/wait groups are no-ops).
    CpAsync,
    /// Surface load/store (`suld.b` / `sust.b`), byte-addressed x.
    Suld,
    Sust,
    /// `mbarrier.*`; the variant is in `Inst::aux` (see `MB_*`).
    Mbarrier,
    Unsupported,
}

/// Special registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sreg {
    Tid(u8),
    Ntid(u8),
    Ctaid(u8),
    Nctaid(u8),
    Laneid,
    Warpid,
    Nwarpid,
    Smid,
    Nsmid,
    Gridid,
    LanemaskEq,
    LanemaskLt,
    LanemaskLe,
    LanemaskGt,
    LanemaskGe,
    Clock,
    Clock64,
    Globaltimer,
    Envreg(u8),
    DynSmemSize,
    TotalSmemSize,
    /// `%aggr_smem_size`: user shared memory plus the reserved region.
    AggrSmemSize,
    /// `%reserved_smem_offset_begin/_end/_cap`: the region reserved for system software
    /// (cooperative groups keep their multi-warp tile scratch there).
    ReservedBegin,
    ReservedEnd,
    ReservedCap,
    /// `%reserved_smem_offset_<n>` (n = 0, 1).
    ReservedOffset(u8),
}

/// Where an address operand's base comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Base {
    /// A plain number (the offset alone).
    None,
    Reg(u32),
    /// Module `.global`/`.const` variable: index into the launch's symbol table.
    Global(u32),
    /// A `.shared` variable: index into [`Program::shared_vars`]; its offset comes from the
    /// launched kernel's layout ([`Program::kernel_shared`]), so each kernel has its own.
    Shared(u32),
    /// The current call's `.local` frame (offset relative to it).
    Local,
}

/// Operands.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Opd {
    None,
    Reg(u32),
    /// Negated predicate register (`!%p`).
    NotReg(u32),
    Imm(u64),
    Sreg(Sreg),
    /// Address of a module variable (value of `mov %rd, sym`).
    GlobalSym(u32),
    /// Shared-space offset of a `.shared` variable (value of `mov %r, sym`).
    SharedSym(u32),
    /// `[base + off]`.
    Addr(Base, i64),
    Vec(Vec<Opd>),
    /// Sink `_`.
    Sink,
    /// Branch/call target: instruction index.
    Target(u32),
    /// `[texobj, {coords}]`.
    Tex(Box<Opd>, Box<Opd>),
}

/// Extern functions a kernel may call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Extern {
    Vprintf,
    AssertFail,
    Malloc,
    Free,
    /// `cudaGraphSetConditional(handle, value)`: the handle is the device address of the
    /// condition's 32-bit value (as the runtime hands handles out on the emulated device).
    GraphSetConditional,
}

/// A call site: arguments and return slots are offsets in the caller's param frame.
#[derive(Debug, Clone)]
pub(crate) struct CallSite {
    pub(crate) target: CallTarget,
    pub(crate) rets: Vec<(u32, u32)>,
    pub(crate) args: Vec<(u32, u32)>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum CallTarget {
    Func(u32),
    Extern(Extern),
    /// `call %rd, (args), prototype`: the function whose address ([`func_addr`]) the register
    /// holds (device function pointers, virtual functions).
    Indirect(u32),
}

/// The value of a device function's address (`mov.u64 %rd, f`, a vtable entry): never a
/// memory address, so a call through anything else, or a load from it, fails.
pub(crate) const FUNC_ADDR_BASE: u64 = 0xffff_ff00_0000_0000;

/// The address value of function `f` (see [`FUNC_ADDR_BASE`]).
pub(crate) fn func_addr(f: u32) -> u64 {
    FUNC_ADDR_BASE + (u64::from(f) << 4)
}

/// The function whose address value `v` is, if `v` is one of `nfuncs` functions'.
pub(crate) fn addr_func(v: u64, nfuncs: usize) -> Option<u32> {
    let off = v.checked_sub(FUNC_ADDR_BASE)?;
    let f = off >> 4;
    (off & 15 == 0 && (f as usize) < nfuncs).then_some(f as u32)
}

/// Modifiers, decoded once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mods {
    pub(crate) rnd: Rnd,
    pub(crate) ftz: bool,
    pub(crate) sat: bool,
    pub(crate) cc: bool,
    pub(crate) space: Space,
    pub(crate) cmp: Cmp,
    pub(crate) sub: Sub,
    pub(crate) part: Part,
    /// Vector width of ld/st/tex (1, 2, 4).
    pub(crate) vec: u8,
    /// cvta `.to`; shf `.l`; bar with `.aligned` etc. use other fields.
    pub(crate) to: bool,
    /// shf `.wrap` (else clamp); bfind `.shiftamt`; testp kind in `cmp`.
    pub(crate) flag: bool,
    /// Geometry of tex (1, 2, 3 dims; 4 = array 2d, 5 = array 1d, 6 = cube, 7 = array cube).
    pub(crate) geom: u8,
    /// suld/sust `.clamp`: out-of-range coordinates are clamped to the surface's edge.
    pub(crate) clamp: bool,
    /// tex: 0 plain (level 0 of a mipmapped texture), 1 `.level` (explicit level of detail),
    /// 2 `.grad` (level from the coordinate gradients).
    pub(crate) lod: u8,
}

impl Default for Mods {
    fn default() -> Self {
        Mods {
            rnd: Rnd::None,
            ftz: false,
            sat: false,
            cc: false,
            space: Space::Generic,
            cmp: Cmp::Eq,
            sub: Sub::None,
            part: Part::Lo,
            vec: 1,
            to: false,
            flag: false,
            geom: 1,
            clamp: false,
            lod: 0,
        }
    }
}

/// One decoded instruction.
#[derive(Debug, Clone)]
pub(crate) struct Inst {
    pub(crate) op: Op,
    /// Operation type (destination type for `cvt`).
    pub(crate) ty: Ty,
    /// Second type: source type of `cvt`, coordinate type of `tex`.
    pub(crate) ty2: Ty,
    pub(crate) m: Mods,
    /// Guard predicate register, and whether it is negated.
    pub(crate) guard: Option<(u32, bool)>,
    pub(crate) d: Opd,
    /// Second destination (`setp` `|q`).
    pub(crate) d2: Opd,
    pub(crate) a: Opd,
    pub(crate) b: Opd,
    pub(crate) c: Opd,
    pub(crate) e: Opd,
    /// Index into [`Program::calls`] (call) or [`Program::messages`] (unsupported).
    pub(crate) aux: u32,
    /// Source line, for errors.
    pub(crate) line: u32,
}

/// A function or kernel body.
#[derive(Debug, Clone)]
pub(crate) struct Func {
    pub(crate) name: String,
    pub(crate) entry: u32,
    pub(crate) nregs: u32,
    /// Bytes of this function's param frame (formals, then call-sequence params).
    pub(crate) frame_bytes: u32,
    /// Bytes of this function's `.local` frame (its depots), allocated per call.
    pub(crate) local_bytes: u64,
    /// Offsets in the frame of the formal return values and parameters.
    pub(crate) ret_offs: Vec<(u32, u32)>,
    pub(crate) param_offs: Vec<(u32, u32)>,
    /// Why the body was rejected (a form the decoder does not know), with its PTX line;
    /// the body is then a single `Unsupported` instruction and kernels that reach this
    /// function fail at launch.
    pub(crate) rejected: Option<String>,
}

/// A `.shared` variable (module scope or function scope); index 0 is the dynamic part
/// (every `.extern .shared` array names it).
#[derive(Debug, Clone)]
pub(crate) struct SharedVar {
    pub(crate) size: u64,
    pub(crate) align: u64,
}

/// Index of the dynamic shared memory in [`Program::shared_vars`].
pub(crate) const DYN_SHARED: u32 = 0;

/// Bytes at the start of every block's shared memory reserved for system software, as on
/// sm_80 and later GPUs (`cudaDevAttrReservedSharedMemoryPerBlock`); user variables follow.
pub(crate) const RESERVED_SMEM: u64 = 1024;
/// `%reserved_smem_offset_0` and `_1` within the reserved region.
pub(crate) const RESERVED_SMEM_OFFSETS: [u64; 2] = [0, 512];

/// A whole decoded module.
#[derive(Debug, Default)]
pub(crate) struct Program {
    pub(crate) code: Vec<Inst>,
    pub(crate) funcs: Vec<Func>,
    pub(crate) kernels: Vec<KernelInfo>,
    /// Function index of each kernel in `kernels`.
    pub(crate) kernel_funcs: Vec<u32>,
    pub(crate) globals: Vec<GlobalVar>,
    /// Names of module variables referenced by code (index = `Base::Global`).
    pub(crate) symbols: Vec<String>,
    pub(crate) calls: Vec<CallSite>,
    pub(crate) messages: Vec<String>,
    /// Every `.shared` variable; [`DYN_SHARED`] first.
    pub(crate) shared_vars: Vec<SharedVar>,
    /// Per kernel (same index as `kernels`): the shared-space offset of every variable in
    /// `shared_vars` (0 for those the kernel cannot reach), after the reserved region.
    pub(crate) kernel_shared: Vec<Vec<u64>>,
    /// Per kernel: why it cannot run (a function it can reach was rejected), if so.
    pub(crate) kernel_rejected: Vec<Option<String>>,
    /// `.version major.minor` of the PTX text.
    pub(crate) version: Option<(u32, u32)>,
    /// `.target sm_XX` number (e.g. 80).
    pub(crate) target: Option<u32>,
    /// Per-thread local bytes of all functions together (a bound without recursion).
    pub(crate) local_bytes: u64,
    /// Shared names declared and defined by no module (`link`): functions, then variables.
    pub(crate) unresolved: Vec<String>,
}

/// `mbarrier` variants (`Inst::aux`).
pub(crate) const MB_INIT: u32 = 0;
pub(crate) const MB_ARRIVE: u32 = 1;
pub(crate) const MB_ARRIVE_DROP: u32 = 2;
pub(crate) const MB_TEST_WAIT: u32 = 3;
pub(crate) const MB_TEST_WAIT_PARITY: u32 = 4;
pub(crate) const MB_INVAL: u32 = 5;
pub(crate) const MB_PENDING_COUNT: u32 = 6;
/// `cp.async.mbarrier.arrive.noinc`: an arrive on the barrier.
pub(crate) const MB_CP_ARRIVE_NOINC: u32 = 7;
/// `cp.async.mbarrier.arrive` (without `.noinc`): pending +1 then arrive, i.e. no change.
pub(crate) const MB_NOP: u32 = 8;
