//! The wire protocol between the interposer (in the application) and the proxy (which owns
//! the device): request/response messages ([`msg`]), the shared-memory channel they travel
//! on ([`channel`]), and CUDA's error codes ([`cuda`]) that both sides speak.
//! Neither side links the other; both link this crate.
#![deny(unsafe_code)]

pub mod channel;
pub mod ckpt;
pub mod cuda;
pub mod msg;

pub use channel::{Channel, ClientLane, Incoming, PeerWatch, ServerLane};
pub use msg::{
    AccessPolicy, AllocKind, Body, CopyKind, DeviceProps, FuncInfo, Reply, Request, StreamAttr,
    TexDesc, TexLevel, TexMip,
};

/// Environment variable holding the channel memfd number (set by `crum run`).
pub const ENV_CHANNEL: &str = "CRUM_CHANNEL";
/// Environment variable naming the `crum` binary, set by `crum run` for the program: a
/// process of the job without a channel (a CUDA program a script started) runs
/// `crum proxy` from it for itself (`interpose::own_proxy`).
pub const ENV_EXE: &str = "CRUM_EXE";
/// Environment variable holding `crum run --device`, for the same proxies.
pub const ENV_DEVICE: &str = "CRUM_DEVICE";
/// Base of the device virtual-address window, reserved PROT_NONE in both processes.
pub const DEVICE_VA_BASE: u64 = 0x2000_0000_0000;
/// Size of the device virtual-address window (address space only; nothing is committed).
pub const DEVICE_VA_SIZE: u64 = 1 << 40;
/// The start of the device window that no allocation gets: read-only zeros on every
/// backend, so that reads just below a program's first allocation (a[-1] of a stencil) read
/// memory, as on a GPU, where the runtime's own allocations lie below the program's.
pub const DEVICE_RESERVED: u64 = 2 << 20;
/// Where the driver API's virtual memory management (`cuMemAddressReserve`) reserves address
/// ranges: `[DEVICE_VA_BASE + VMM_VA_OFFSET, + VMM_VA_SIZE)`, the top of the window's device
/// half, which ordinary allocations never take (the emulated device keeps it out of its free
/// list), so a reserved range stays free until the program maps memory into it.
pub const VMM_VA_OFFSET: u64 = 384 << 30;
/// Size of the range of [`VMM_VA_OFFSET`].
pub const VMM_VA_SIZE: u64 = 128 << 30;
/// Granularity of VMM allocations and mappings (`cuMemGetAllocationGranularity`), as on
/// current GPUs.
pub const VMM_GRANULARITY: u64 = 2 << 20;

/// Channel failures (either side).
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("the device proxy is gone")]
    ProxyGone,
    #[error("the channel lane is broken (framing violated)")]
    Broken,
    #[error("message too large for the channel")]
    TooLarge,
    #[error("malformed message: {0}")]
    Malformed(String),
    /// The channel belongs to the proxy of before a restart: the call was cut by the
    /// checkpoint and is resumed on the new channel.
    #[error("the call was cut by a checkpoint (channel retired by the restart)")]
    Retired,
    /// The channel was retired by a restart before the request was written: the old proxy
    /// never saw it (nothing of it was carried across the checkpoint), and it is sent again,
    /// as a new request, on the new channel. Never resumed by name: on the shared overflow
    /// lane that name is the name of the call another thread had in flight at the cut.
    #[error("the request was not sent: the channel was retired by a restart")]
    RetiredUnsent,
    #[error("channel setup: {0}")]
    Setup(String),
}

#[cfg(test)]
mod tests;
