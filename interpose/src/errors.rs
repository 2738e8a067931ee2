//! Errors as the application sees them: one conversion to `cudaError_t`, the per-thread
//! last error (`cudaGetLastError`/`cudaPeekAtLastError`), sticky errors, the panic guard every
//! export runs under, and "not supported" logged once per name.

use std::cell::Cell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use crum_wire::cuda;

/// A `cudaError_t` (never 0 inside an `Err`).
pub type CudaResult<T> = Result<T, u32>;

thread_local! {
    static LAST: Cell<u32> = const { Cell::new(0) };
}

/// The first sticky error seen: every later call fails with it (the context is corrupt).
static STICKY: AtomicU32 = AtomicU32::new(0);

/// Record an error as this thread's last error (and as sticky when it is).
pub fn record(code: u32) {
    // cudaErrorNotReady (a query's "not yet") is a result, not an error: CUDA does not
    // make it the last error.
    if code == 0 || code == cuda::ERROR_NOT_READY {
        return;
    }
    if cuda::is_sticky(code) {
        let _ = STICKY.compare_exchange(0, code, Ordering::SeqCst, Ordering::SeqCst);
    }
    let _ = LAST.try_with(|l| l.set(code));
}

/// `cudaGetLastError`: the last error, reset to success unless it is sticky.
pub fn take_last() -> u32 {
    let sticky = STICKY.load(Ordering::SeqCst);
    let last = LAST.try_with(|l| l.replace(0)).unwrap_or(0);
    if sticky != 0 {
        sticky
    } else {
        last
    }
}

/// `cudaPeekAtLastError`.
pub fn peek_last() -> u32 {
    let sticky = STICKY.load(Ordering::SeqCst);
    if sticky != 0 {
        sticky
    } else {
        LAST.try_with(|l| l.get()).unwrap_or(0)
    }
}

/// `Err` with the context's sticky error once one was seen.
pub fn sticky() -> CudaResult<()> {
    match STICKY.load(Ordering::SeqCst) {
        0 => Ok(()),
        c => Err(c),
    }
}

/// Clear the sticky error (cudaDeviceReset).
pub fn clear_sticky() {
    STICKY.store(0, Ordering::SeqCst);
}

/// Run an export's body: a panic becomes `cudaErrorUnknown` plus one log line (it must never
/// unwind into C); an error is recorded as the thread's last error.
pub fn guard(name: &'static str, f: impl FnOnce() -> CudaResult<()>) -> u32 {
    // A checkpoint holds new calls here; the whole call is one step for it.
    let counted = crate::ckpt::enter();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    crate::ckpt::leave(counted);
    match r {
        Ok(Ok(())) => 0,
        Ok(Err(code)) => {
            record(code);
            tracing::debug!(api = name, code, "{}", cuda::name(code));
            code
        }
        Err(_) => {
            tracing::error!(api = name, "internal error (panic) in crum");
            record(cuda::ERROR_UNKNOWN);
            cuda::ERROR_UNKNOWN
        }
    }
}

/// [`guard`] for the driver API's face (`api::driver`): the `cudaError_t` of the call,
/// without touching the runtime's last error (the driver API has none).
pub fn guard_driver(name: &'static str, f: impl FnOnce() -> CudaResult<()>) -> u32 {
    let counted = crate::ckpt::enter();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    crate::ckpt::leave(counted);
    match r {
        Ok(Ok(())) => 0,
        Ok(Err(code)) => {
            tracing::debug!(api = name, code, "{}", cuda::name(code));
            code
        }
        Err(_) => {
            tracing::error!(api = name, "internal error (panic) in crum");
            cuda::ERROR_UNKNOWN
        }
    }
}

/// Whether `name` is reported for the first time (entry points crum lacks log once each).
fn first_time(name: &'static str) -> bool {
    static SEEN: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    SEEN.lock()
        .map(|mut g| g.get_or_insert_with(HashSet::new).insert(name))
        .unwrap_or(false)
}

/// An API crum does not implement: `cudaErrorNotSupported`, its name logged once.
pub fn unsupported(name: &'static str) -> u32 {
    if first_time(name) {
        crate::client::init_logging();
        tracing::warn!(api = name, "CUDA runtime API not supported by crum");
    }
    record(cuda::ERROR_NOT_SUPPORTED);
    cuda::ERROR_NOT_SUPPORTED
}

/// A generated stub (`abi/unsupported.txt`): the entry point is not offered; it returns
/// `code` (the error CUDA documents for a device without the feature, or
/// cudaErrorNotSupported) and logs its name and `reason` once.
pub fn not_offered(name: &'static str, code: u32, reason: &'static str) -> u32 {
    if first_time(name) {
        crate::client::init_logging();
        tracing::warn!(api = name, error = cuda::name(code), "CUDA runtime API not offered by crum: {reason}");
    }
    record(code);
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_turns_panic_into_unknown_error() {
        let code = guard("test", || panic!("boom"));
        assert_eq!(code, cuda::ERROR_UNKNOWN);
        assert_eq!(take_last(), cuda::ERROR_UNKNOWN);
    }

    #[test]
    fn last_error_is_reset_by_get_but_not_by_peek() {
        record(cuda::ERROR_INVALID_VALUE);
        assert_eq!(peek_last(), cuda::ERROR_INVALID_VALUE);
        assert_eq!(take_last(), cuda::ERROR_INVALID_VALUE);
        assert_eq!(take_last(), 0);
    }

    #[test]
    fn not_ready_is_not_recorded_as_last_error() {
        take_last();
        assert_eq!(
            guard("cudaStreamQuery", || Err(cuda::ERROR_NOT_READY)),
            cuda::ERROR_NOT_READY
        );
        assert_eq!(take_last(), 0);
    }

    #[test]
    fn unsupported_returns_not_supported_every_time() {
        assert_eq!(unsupported("cudaGraphCreate"), cuda::ERROR_NOT_SUPPORTED);
        assert_eq!(unsupported("cudaGraphCreate"), cuda::ERROR_NOT_SUPPORTED);
    }
}
