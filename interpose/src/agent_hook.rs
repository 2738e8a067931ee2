//! Starts the checkpoint agent from the library's constructor, for every program run under
//! `crum run` (`CRUM_RUN=1`) — CUDA or not. Device state plugs into checkpoints through
//! `crum_ckpt::agent::set_hooks`.
//!
//! # Safety
//! The constructor is a plain `extern "C" fn` placed in `.init_array`; it runs once, on the
//! main thread, after libc is initialised and before `main`.
#![allow(unsafe_code)]

extern "C" fn crum_agent_ctor() {
    // A panic must not unwind into the dynamic loader.
    let _ = std::panic::catch_unwind(|| {
        crate::ckpt::install();
        crum_ckpt::agent::start_from_env();
    });
}

#[used]
#[link_section = ".init_array"]
static AGENT_CTOR: extern "C" fn() = crum_agent_ctor;

/// libcrum's allocator: the system's, except for the checkpoint agent while the program's
/// threads are stopped (see `crum_ckpt::alloc`: a stopped thread may hold a malloc lock).
#[global_allocator]
static CRUM_ALLOC: crum_ckpt::alloc::CrumAlloc = crum_ckpt::alloc::CrumAlloc;
