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

use crate::errors::CudaResult;

/// Make `[addr, addr+len)` safe for a system call: every shadow page of managed memory in the
/// range becomes readable with current data (`write == false`: the kernel will read it, as in
/// write(2)) or writable and dirty (`write == true`: the kernel will write it, as in read(2)).
/// Addresses outside managed memory are ignored; cheap when the program has none.
pub fn prepare_range(_addr: u64, _len: u64, _write: bool) {}

/// Called by [`crate::client::call`] and [`crate::client::send`] before every request: with
/// shadow pages, dirty pages are flushed to the proxy before any request that lets the device
/// touch memory. (The shared-mapping scheme needs nothing.)
#[inline]
pub fn before_request(_req: &crum_wire::Request) {}

/// Checkpoint hook, from `quiesce` (new CUDA calls are held, none in flight, the program's
/// threads still run): bring the proxy's copy of every managed region up to date.
pub fn checkpoint_flush() -> Result<(), String> {
    Ok(())
}

/// Restart hook (the program's threads are stopped): the new proxy re-created the managed
/// region `[addr, addr+len)` behind its shared memory `memfd` (a descriptor number in the
/// proxy) and filled it with the checkpointed contents.
pub fn restored(addr: u64, len: u64, memfd: i32) -> CudaResult<()> {
    crate::client::map_shared(addr, len, memfd)
}

/// Restart hook, after every managed region is [`restored`].
pub fn after_restore() -> Result<(), String> {
    Ok(())
}
