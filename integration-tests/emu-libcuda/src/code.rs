//! `CUresult` values the emulated driver answers (numbers from `cuda.h`).

/// A driver result: `Err` holds the `CUresult` number.
pub type CuResult<T> = Result<T, u32>;

pub const SUCCESS: u32 = 0;
pub const INVALID_VALUE: u32 = 1;
pub const OUT_OF_MEMORY: u32 = 2;
pub const NOT_INITIALIZED: u32 = 3;
pub const INVALID_DEVICE: u32 = 101;
pub const INVALID_IMAGE: u32 = 200;
pub const INVALID_CONTEXT: u32 = 201;
pub const NO_BINARY_FOR_GPU: u32 = 209;
pub const INVALID_PTX: u32 = 218;
pub const INVALID_HANDLE: u32 = 400;
pub const NOT_FOUND: u32 = 500;
pub const NOT_READY: u32 = 600;
pub const ILLEGAL_ADDRESS: u32 = 700;
pub const LAUNCH_OUT_OF_RESOURCES: u32 = 701;
pub const ASSERT: u32 = 710;
pub const HOST_MEMORY_ALREADY_REGISTERED: u32 = 712;
pub const HOST_MEMORY_NOT_REGISTERED: u32 = 713;
pub const MISALIGNED_ADDRESS: u32 = 716;
pub const LAUNCH_FAILED: u32 = 719;
pub const COOPERATIVE_LAUNCH_TOO_LARGE: u32 = 720;
pub const NOT_SUPPORTED: u32 = 801;
pub const UNKNOWN: u32 = 999;

/// Errors that leave the context unusable: every later call returns them (the driver's
/// "sticky" errors, documented with each code).
pub fn is_sticky(code: u32) -> bool {
    matches!(code, 700 | 710 | 714 | 715 | 716 | 717 | 718 | 719)
}

/// The driver's code for a failed launch of the PTX engine (which speaks `cudaError_t`).
pub fn from_launch(e: &crum_ptx::LaunchError) -> u32 {
    match e.cuda_error() {
        700 => ILLEGAL_ADDRESS,
        716 => MISALIGNED_ADDRESS,
        719 => LAUNCH_FAILED,
        710 => ASSERT,
        701 => LAUNCH_OUT_OF_RESOURCES,
        720 => COOPERATIVE_LAUNCH_TOO_LARGE,
        9 => INVALID_VALUE,
        98 => NOT_FOUND,
        801 => NOT_SUPPORTED,
        _ => UNKNOWN,
    }
}
