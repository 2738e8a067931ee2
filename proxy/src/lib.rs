//! The proxy: the process that owns the device. Server loop ([`server`]), the device
//! [`backend`] trait with its probing factory, the `emu` backend ([`emu`]: the PTX
//! interpreter on the CPU), and cross-memory access to the application ([`hostmem`]).
#![deny(unsafe_code)]

pub mod backend;
pub mod conformance;
pub mod cuda;
pub mod emu;
pub mod hostmem;
pub mod server;

pub use backend::{open, Backend, BackendError, Capabilities, DeviceChoice};
pub use server::serve;
