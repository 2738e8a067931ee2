//! The exported CUDA runtime API, grouped by area. Every function decodes its arguments,
//! calls safe code and returns a `cudaError_t` (see `ffi::export!`).

pub mod array;
pub mod context;
pub mod copy_batch;
pub mod device;
pub mod driver;
pub mod driver_graph;
pub mod driver_mem;
pub mod driver_ptr;
pub mod driver_ptsz;
pub mod graph;
pub mod launch;
pub mod library;
pub mod memory;
pub mod mipmap;
pub mod pool;
pub mod stream;
pub mod stream_attrs;
pub mod vmm;

/// Generated stubs for the runtime entry points crum does not implement (see build.rs).
#[allow(unsafe_code, non_snake_case, clippy::missing_safety_doc)]
mod unsupported {
    include!(concat!(env!("OUT_DIR"), "/unsupported.rs"));
}
