//! The preloaded library (`libcrum.so`, SONAME `libcudart.so.13`): the CUDA runtime API as
//! the application sees it, forwarded to the proxy over the shared-memory channel.
//!
//! - [`api`]: the exported entry points (registration, launches, memory, streams, events,
//!   device management); generated stubs return `cudaErrorNotSupported` for the rest.
//! - [`client`]: the channel, per-thread lanes, shared mappings, the host-callback thread.
//! - [`state`]: registered kernels/variables, allocations, per-thread launch configurations.
//! - [`graph`], [`capture`]: CUDA graphs (recorded DAGs launched as ordinary requests) and
//!   stream capture; [`pool`]: memory pools and the stream-ordered allocator.
//! - [`user_object`]: reference-counted user objects held by the program and by graphs.
//! - [`own_proxy`]: the device proxy a job's process that executed a CUDA program without
//!   `crum run`'s channel starts for itself on its first CUDA call.
//! - [`ckpt`]: the checkpoint gate and hooks (device state in images, restart on a new proxy).
//! - [`errors`]: `cudaError_t` handling (last error, sticky errors, the panic guard).
//! - [`ffi`]: raw argument decoding.
#![deny(unsafe_code)]

mod abi_gen;
pub(crate) mod agent_hook;
pub mod api;
pub mod capture;
pub mod ckpt;
pub mod client;
pub mod errors;
pub mod ffi;
pub mod graph;
pub mod managed;
pub mod own_proxy;
pub mod pool;
pub mod state;
pub mod user_object;
