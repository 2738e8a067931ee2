//! Managed memory (`cudaMallocManaged`, `__managed__`), simplest correct form: the proxy backs
//! each managed allocation with a memfd that both processes map at the same address, so the
//! application and the (emulated) device always see the same bytes and no synchronization of
//! contents is needed. The shadow-page mechanism (CRUM Algorithm 1: the application holds a
//! protected shadow, dirty pages are flushed before device calls) replaces this module when a
//! backend cannot share memory with the application (a real GPU).
//!
//! A backend that cannot share (it answers a managed allocation without a memfd, as the
//! cuda backend does) gets `cudaErrorNotSupported` from `cudaMallocManaged` for now.
//!
//! The allocation and mapping live in `api::memory` (`cudaMallocManaged`) and
//! `api::launch` (`__cudaRegisterManagedVar`) through [`crate::client::map_shared`]; this
//! module is where the shadow-page machinery will go.
