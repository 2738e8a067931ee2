//! Driver API results (`CUresult`) translated to the runtime API's `cudaError_t`, as
//! `libcudart` reports them to the application.
//!
//! Most driver codes have the same number in the runtime API (NVIDIA aligned the two enums),
//! but not all do, and a few driver codes mean something more specific depending on the call
//! that produced them (`CUDA_ERROR_NOT_FOUND` from a function lookup is
//! `cudaErrorInvalidDeviceFunction`, from a symbol lookup `cudaErrorInvalidSymbol`). The table
//! is explicit so that every code the backend can see is a decision, and codes outside it
//! become `cudaErrorUnknown` rather than a number the application cannot decode.

use crum_wire::cuda;

/// (driver `CUresult`, runtime `cudaError_t`). Values from `cuda.h` / `driver_types.h`.
const TABLE: &[(u32, u32)] = &[
    (0, cuda::SUCCESS),
    (1, cuda::ERROR_INVALID_VALUE),                 // CUDA_ERROR_INVALID_VALUE
    (2, cuda::ERROR_MEMORY_ALLOCATION),             // CUDA_ERROR_OUT_OF_MEMORY
    (3, cuda::ERROR_INITIALIZATION),                // CUDA_ERROR_NOT_INITIALIZED
    (4, cuda::ERROR_CUDART_UNLOADING),              // CUDA_ERROR_DEINITIALIZED
    (34, 34),                                       // CUDA_ERROR_STUB_LIBRARY → cudaErrorStubLibrary
    (46, cuda::ERROR_DEVICES_UNAVAILABLE),          // CUDA_ERROR_DEVICE_UNAVAILABLE
    (100, cuda::ERROR_NO_DEVICE),                   // CUDA_ERROR_NO_DEVICE
    (101, cuda::ERROR_INVALID_DEVICE),              // CUDA_ERROR_INVALID_DEVICE
    (102, cuda::ERROR_DEVICE_NOT_LICENSED),         // CUDA_ERROR_DEVICE_NOT_LICENSED
    (200, cuda::ERROR_INVALID_KERNEL_IMAGE),        // CUDA_ERROR_INVALID_IMAGE
    (201, cuda::ERROR_DEVICE_UNINITIALIZED),        // CUDA_ERROR_INVALID_CONTEXT
    (205, 205),                                     // CUDA_ERROR_MAP_FAILED → cudaErrorMapBufferObjectFailed
    (206, 206),                                     // CUDA_ERROR_UNMAP_FAILED → cudaErrorUnmapBufferObjectFailed
    (208, cuda::ERROR_ALREADY_MAPPED),              // CUDA_ERROR_ALREADY_MAPPED
    (209, cuda::ERROR_NO_KERNEL_IMAGE),             // CUDA_ERROR_NO_BINARY_FOR_GPU
    (211, 211),                                     // CUDA_ERROR_NOT_MAPPED → cudaErrorNotMapped
    (214, 214),                                     // CUDA_ERROR_ECC_UNCORRECTABLE → cudaErrorECCUncorrectable
    (215, cuda::ERROR_UNSUPPORTED_LIMIT),           // CUDA_ERROR_UNSUPPORTED_LIMIT
    (217, cuda::ERROR_PEER_ACCESS_UNSUPPORTED),     // CUDA_ERROR_PEER_ACCESS_UNSUPPORTED
    (218, cuda::ERROR_INVALID_PTX),                 // CUDA_ERROR_INVALID_PTX
    (220, 220),                                     // CUDA_ERROR_NVLINK_UNCORRECTABLE
    (221, 221),                                     // CUDA_ERROR_JIT_COMPILER_NOT_FOUND
    (222, cuda::ERROR_UNSUPPORTED_PTX_VERSION),     // CUDA_ERROR_UNSUPPORTED_PTX_VERSION
    (223, 223),                                     // CUDA_ERROR_JIT_COMPILATION_DISABLED
    (300, cuda::ERROR_INVALID_SOURCE),              // CUDA_ERROR_INVALID_SOURCE
    (301, cuda::ERROR_FILE_NOT_FOUND),              // CUDA_ERROR_FILE_NOT_FOUND
    (302, 302),                                     // CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND
    (303, 303),                                     // CUDA_ERROR_SHARED_OBJECT_INIT_FAILED
    (304, 304),                                     // CUDA_ERROR_OPERATING_SYSTEM
    (400, cuda::ERROR_INVALID_RESOURCE_HANDLE),     // CUDA_ERROR_INVALID_HANDLE
    (401, cuda::ERROR_ILLEGAL_STATE),               // CUDA_ERROR_ILLEGAL_STATE
    (500, cuda::ERROR_SYMBOL_NOT_FOUND),            // CUDA_ERROR_NOT_FOUND
    (600, cuda::ERROR_NOT_READY),                   // CUDA_ERROR_NOT_READY
    (700, cuda::ERROR_ILLEGAL_ADDRESS),             // CUDA_ERROR_ILLEGAL_ADDRESS
    (701, cuda::ERROR_LAUNCH_OUT_OF_RESOURCES),     // CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
    (702, cuda::ERROR_LAUNCH_TIMEOUT),              // CUDA_ERROR_LAUNCH_TIMEOUT
    (703, 703),                                     // CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING
    (704, cuda::ERROR_PEER_ACCESS_ALREADY_ENABLED), // CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
    (705, cuda::ERROR_PEER_ACCESS_NOT_ENABLED),     // CUDA_ERROR_PEER_ACCESS_NOT_ENABLED
    (708, cuda::ERROR_SET_ON_ACTIVE_PROCESS),       // CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE
    (709, cuda::ERROR_CONTEXT_IS_DESTROYED),        // CUDA_ERROR_CONTEXT_IS_DESTROYED
    (710, cuda::ERROR_ASSERT),                      // CUDA_ERROR_ASSERT
    (711, 711),                                     // CUDA_ERROR_TOO_MANY_PEERS
    (712, cuda::ERROR_HOST_MEMORY_ALREADY_REGISTERED),
    (713, cuda::ERROR_HOST_MEMORY_NOT_REGISTERED),
    (714, cuda::ERROR_HARDWARE_STACK),              // CUDA_ERROR_HARDWARE_STACK_ERROR
    (715, cuda::ERROR_ILLEGAL_INSTRUCTION),
    (716, cuda::ERROR_MISALIGNED_ADDRESS),
    (717, cuda::ERROR_INVALID_ADDRESS_SPACE),
    (718, cuda::ERROR_INVALID_PC),
    (719, cuda::ERROR_LAUNCH_FAILURE),              // CUDA_ERROR_LAUNCH_FAILED
    (720, cuda::ERROR_COOPERATIVE_LAUNCH_TOO_LARGE),
    (800, cuda::ERROR_NOT_PERMITTED),
    (801, cuda::ERROR_NOT_SUPPORTED),
    (802, 802),                                     // CUDA_ERROR_SYSTEM_NOT_READY
    (803, 803),                                     // CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
    (804, 804),                                     // CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
    (900, cuda::ERROR_STREAM_CAPTURE_UNSUPPORTED),
    (901, 901),                                     // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    (909, 909),                                     // CUDA_ERROR_TIMEOUT
    (999, cuda::ERROR_UNKNOWN),
];

/// The call a driver error came from, for the codes whose runtime meaning depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Other,
    /// `cuModuleGetFunction`.
    FunctionLookup,
    /// `cuModuleGetGlobal`.
    SymbolLookup,
    /// `cuLaunchKernel` / `cuLaunchCooperativeKernel`.
    Launch,
    /// `cuModuleLoadData`.
    ModuleLoad,
}

/// The `cudaError_t` the runtime reports for driver result `code` from an operation `op`.
pub fn runtime_error(op: Op, code: u32) -> u32 {
    match (op, code) {
        (Op::FunctionLookup, 500) => cuda::ERROR_INVALID_DEVICE_FUNCTION,
        (Op::SymbolLookup, 500) => cuda::ERROR_INVALID_SYMBOL,
        (Op::Launch, 400) => cuda::ERROR_INVALID_RESOURCE_HANDLE,
        (Op::ModuleLoad, 500) => cuda::ERROR_INVALID_KERNEL_IMAGE,
        _ => TABLE.iter().find(|e| e.0 == code).map_or(cuda::ERROR_UNKNOWN, |e| e.1),
    }
}

/// The driver's symbolic name of a result (for messages), from our table of known names.
pub fn driver_name(code: u32) -> &'static str {
    match code {
        0 => "CUDA_SUCCESS",
        1 => "CUDA_ERROR_INVALID_VALUE",
        2 => "CUDA_ERROR_OUT_OF_MEMORY",
        3 => "CUDA_ERROR_NOT_INITIALIZED",
        4 => "CUDA_ERROR_DEINITIALIZED",
        34 => "CUDA_ERROR_STUB_LIBRARY",
        46 => "CUDA_ERROR_DEVICE_UNAVAILABLE",
        100 => "CUDA_ERROR_NO_DEVICE",
        101 => "CUDA_ERROR_INVALID_DEVICE",
        200 => "CUDA_ERROR_INVALID_IMAGE",
        201 => "CUDA_ERROR_INVALID_CONTEXT",
        209 => "CUDA_ERROR_NO_BINARY_FOR_GPU",
        218 => "CUDA_ERROR_INVALID_PTX",
        222 => "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
        304 => "CUDA_ERROR_OPERATING_SYSTEM",
        400 => "CUDA_ERROR_INVALID_HANDLE",
        500 => "CUDA_ERROR_NOT_FOUND",
        600 => "CUDA_ERROR_NOT_READY",
        700 => "CUDA_ERROR_ILLEGAL_ADDRESS",
        719 => "CUDA_ERROR_LAUNCH_FAILED",
        801 => "CUDA_ERROR_NOT_SUPPORTED",
        803 => "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        804 => "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
        999 => "CUDA_ERROR_UNKNOWN",
        _ => "CUDA_ERROR (unlisted)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_codes_map_to_themselves() {
        for code in [1, 2, 100, 209, 400, 600, 700, 719, 801] {
            assert_eq!(runtime_error(Op::Other, code), code, "driver code {code}");
        }
    }

    #[test]
    fn every_table_entry_has_a_runtime_name_or_keeps_its_number() {
        for &(drv, rt) in TABLE {
            assert!(drv == rt || cuda::name(rt) != "cudaErrorUnknown" || rt == cuda::ERROR_UNKNOWN, "{drv}→{rt}");
        }
    }

    #[test]
    fn table_has_no_duplicate_driver_codes() {
        let mut seen: Vec<u32> = TABLE.iter().map(|e| e.0).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), TABLE.len());
    }

    #[test]
    fn not_found_depends_on_the_call() {
        assert_eq!(runtime_error(Op::FunctionLookup, 500), cuda::ERROR_INVALID_DEVICE_FUNCTION);
        assert_eq!(runtime_error(Op::SymbolLookup, 500), cuda::ERROR_INVALID_SYMBOL);
        assert_eq!(runtime_error(Op::Other, 500), cuda::ERROR_SYMBOL_NOT_FOUND);
    }

    #[test]
    fn invalid_value_at_launch_is_invalid_configuration() {
        // CUDA 13's runtime reports a bad launch geometry as the driver does (an H200).
        assert_eq!(runtime_error(Op::Launch, 1), cuda::ERROR_INVALID_VALUE);
        assert_eq!(runtime_error(Op::Other, 1), cuda::ERROR_INVALID_VALUE);
    }

    #[test]
    fn driver_specific_codes_get_runtime_numbers() {
        assert_eq!(runtime_error(Op::Other, 3), cuda::ERROR_INITIALIZATION);
        assert_eq!(runtime_error(Op::Other, 201), cuda::ERROR_DEVICE_UNINITIALIZED);
        assert_eq!(runtime_error(Op::Other, 708), cuda::ERROR_SET_ON_ACTIVE_PROCESS);
    }

    #[test]
    fn unlisted_code_is_unknown() {
        assert_eq!(runtime_error(Op::Other, 12345), cuda::ERROR_UNKNOWN);
    }

    #[test]
    fn sticky_driver_errors_stay_sticky_in_runtime_terms() {
        for drv in [700, 710, 714, 715, 716, 717, 718, 719] {
            assert!(cuda::is_sticky(runtime_error(Op::Other, drv)), "{drv}");
        }
    }
}
