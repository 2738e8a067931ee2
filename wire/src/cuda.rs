//! `cudaError_t` values, names and descriptions (as the CUDA 13 runtime reports them), and
//! which of them are sticky (they corrupt the context: every later call returns them).

macro_rules! errors {
    ($($konst:ident = $code:literal, $name:literal, $desc:literal;)*) => {
        $(pub const $konst: u32 = $code;)*
        const TABLE: &[(u32, &str, &str)] = &[$(($code, $name, $desc)),*];
    };
}

errors! {
    SUCCESS = 0, "cudaSuccess", "no error";
    ERROR_INVALID_VALUE = 1, "cudaErrorInvalidValue", "invalid argument";
    ERROR_MEMORY_ALLOCATION = 2, "cudaErrorMemoryAllocation", "out of memory";
    ERROR_INITIALIZATION = 3, "cudaErrorInitializationError", "initialization error";
    ERROR_CUDART_UNLOADING = 4, "cudaErrorCudartUnloading", "driver shutting down";
    ERROR_INVALID_CONFIGURATION = 9, "cudaErrorInvalidConfiguration", "invalid configuration argument";
    ERROR_INVALID_PITCH_VALUE = 12, "cudaErrorInvalidPitchValue", "invalid pitch argument";
    ERROR_INVALID_SYMBOL = 13, "cudaErrorInvalidSymbol", "invalid device symbol";
    ERROR_INVALID_HOST_POINTER = 16, "cudaErrorInvalidHostPointer", "invalid host pointer";
    ERROR_INVALID_DEVICE_POINTER = 17, "cudaErrorInvalidDevicePointer", "invalid device pointer";
    ERROR_INVALID_TEXTURE = 18, "cudaErrorInvalidTexture", "invalid texture reference";
    ERROR_INVALID_CHANNEL_DESCRIPTOR = 20, "cudaErrorInvalidChannelDescriptor", "invalid channel descriptor";
    ERROR_INVALID_MEMCPY_DIRECTION = 21, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy";
    ERROR_DEVICES_UNAVAILABLE = 46, "cudaErrorDevicesUnavailable", "CUDA-capable device(s) is/are busy or unavailable";
    ERROR_MISSING_CONFIGURATION = 52, "cudaErrorMissingConfiguration", "__global__ function call is not configured";
    ERROR_INVALID_RESOURCE_HANDLE_LEGACY = 33, "cudaErrorInvalidResourceHandle", "invalid resource handle";
    ERROR_INSUFFICIENT_DRIVER = 35, "cudaErrorInsufficientDriver", "CUDA driver version is insufficient for CUDA runtime version";
    ERROR_INVALID_DEVICE_FUNCTION = 98, "cudaErrorInvalidDeviceFunction", "invalid device function";
    ERROR_NO_DEVICE = 100, "cudaErrorNoDevice", "no CUDA-capable device is detected";
    ERROR_INVALID_DEVICE = 101, "cudaErrorInvalidDevice", "invalid device ordinal";
    ERROR_DEVICE_NOT_LICENSED = 102, "cudaErrorDeviceNotLicensed", "device doesn't have valid Grid license";
    ERROR_STARTUP_FAILURE = 127, "cudaErrorStartupFailure", "startup failure in cuda runtime";
    ERROR_INVALID_KERNEL_IMAGE = 200, "cudaErrorInvalidKernelImage", "device kernel image is invalid";
    ERROR_DEVICE_UNINITIALIZED = 201, "cudaErrorDeviceUninitialized", "invalid device context";
    ERROR_ALREADY_MAPPED = 208, "cudaErrorAlreadyMapped", "buffer already mapped";
    ERROR_NO_KERNEL_IMAGE = 209, "cudaErrorNoKernelImageForDevice", "no kernel image is available for execution on the device";
    ERROR_PEER_ACCESS_UNSUPPORTED = 217, "cudaErrorPeerAccessUnsupported", "peer access is not supported between these two devices";
    ERROR_INVALID_PTX = 218, "cudaErrorInvalidPtx", "a PTX JIT compilation failed";
    ERROR_UNSUPPORTED_PTX_VERSION = 222, "cudaErrorUnsupportedPtxVersion", "the provided PTX was compiled with an unsupported toolchain.";
    ERROR_INVALID_SOURCE = 300, "cudaErrorInvalidSource", "device kernel image is invalid";
    ERROR_FILE_NOT_FOUND = 301, "cudaErrorFileNotFound", "file not found";
    ERROR_INVALID_RESOURCE_HANDLE = 400, "cudaErrorInvalidResourceHandle", "invalid resource handle";
    ERROR_ILLEGAL_STATE = 401, "cudaErrorIllegalState", "the operation cannot be performed in the present state";
    ERROR_SYMBOL_NOT_FOUND = 500, "cudaErrorSymbolNotFound", "named symbol not found";
    ERROR_NOT_READY = 600, "cudaErrorNotReady", "device not ready";
    ERROR_ILLEGAL_ADDRESS = 700, "cudaErrorIllegalAddress", "an illegal memory access was encountered";
    ERROR_LAUNCH_OUT_OF_RESOURCES = 701, "cudaErrorLaunchOutOfResources", "too many resources requested for launch";
    ERROR_LAUNCH_TIMEOUT = 702, "cudaErrorLaunchTimeout", "the launch timed out and was terminated";
    ERROR_UNSUPPORTED_LIMIT = 215, "cudaErrorUnsupportedLimit", "limit is not supported on this architecture";
    ERROR_PEER_ACCESS_ALREADY_ENABLED = 704, "cudaErrorPeerAccessAlreadyEnabled", "peer access is already enabled";
    ERROR_PEER_ACCESS_NOT_ENABLED = 705, "cudaErrorPeerAccessNotEnabled", "peer access has not been enabled";
    ERROR_SET_ON_ACTIVE_PROCESS = 708, "cudaErrorSetOnActiveProcess", "cannot set while device is active in this process";
    ERROR_CONTEXT_IS_DESTROYED = 709, "cudaErrorContextIsDestroyed", "context is destroyed";
    ERROR_ASSERT = 710, "cudaErrorAssert", "device-side assert triggered";
    ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712, "cudaErrorHostMemoryAlreadyRegistered", "part or all of the requested memory range is already mapped";
    ERROR_HOST_MEMORY_NOT_REGISTERED = 713, "cudaErrorHostMemoryNotRegistered", "pointer does not correspond to a registered memory region";
    ERROR_HARDWARE_STACK = 714, "cudaErrorHardwareStackError", "hardware stack error";
    ERROR_ILLEGAL_INSTRUCTION = 715, "cudaErrorIllegalInstruction", "an illegal instruction was encountered";
    ERROR_MISALIGNED_ADDRESS = 716, "cudaErrorMisalignedAddress", "misaligned address";
    ERROR_INVALID_ADDRESS_SPACE = 717, "cudaErrorInvalidAddressSpace", "operation not supported on global/shared address space";
    ERROR_INVALID_PC = 718, "cudaErrorInvalidPc", "invalid program counter";
    ERROR_LAUNCH_FAILURE = 719, "cudaErrorLaunchFailure", "unspecified launch failure";
    ERROR_COOPERATIVE_LAUNCH_TOO_LARGE = 720, "cudaErrorCooperativeLaunchTooLarge", "too many blocks in cooperative launch";
    ERROR_NOT_PERMITTED = 800, "cudaErrorNotPermitted", "operation not permitted";
    ERROR_NOT_SUPPORTED = 801, "cudaErrorNotSupported", "operation not supported";
    ERROR_STREAM_CAPTURE_UNSUPPORTED = 900, "cudaErrorStreamCaptureUnsupported", "operation not permitted when stream is capturing";
    ERROR_STREAM_CAPTURE_INVALIDATED = 901, "cudaErrorStreamCaptureInvalidated", "operation failed due to a previous error during capture";
    ERROR_STREAM_CAPTURE_MERGE = 902, "cudaErrorStreamCaptureMerge", "operation would result in a merge of separate capture sequences";
    ERROR_STREAM_CAPTURE_UNMATCHED = 903, "cudaErrorStreamCaptureUnmatched", "capture was not ended in the same stream as it began";
    ERROR_STREAM_CAPTURE_UNJOINED = 904, "cudaErrorStreamCaptureUnjoined", "capturing stream has unjoined work";
    ERROR_STREAM_CAPTURE_ISOLATION = 905, "cudaErrorStreamCaptureIsolation", "dependency created on uncaptured work in another stream";
    ERROR_STREAM_CAPTURE_IMPLICIT = 906, "cudaErrorStreamCaptureImplicit", "operation would make the legacy stream depend on a capturing blocking stream";
    ERROR_CAPTURED_EVENT = 907, "cudaErrorCapturedEvent", "operation not permitted on an event last recorded in a capturing stream";
    ERROR_STREAM_CAPTURE_WRONG_THREAD = 908, "cudaErrorStreamCaptureWrongThread", "attempt to terminate a thread-local capture sequence from another thread";
    ERROR_GRAPH_EXEC_UPDATE_FAILURE = 910, "cudaErrorGraphExecUpdateFailure", "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update";
    ERROR_GRAPH_RECAPTURE_FAILURE = 918, "cudaErrorGraphRecaptureFailure", "recapturing to the source graph failed and had to be terminated";
    ERROR_INVALID_RESOURCE_TYPE = 1000, "cudaErrorInvalidResourceType", "invalid resource type";
    ERROR_UNKNOWN = 999, "cudaErrorUnknown", "unknown error";
}

/// The symbolic name (`cudaGetErrorName`).
pub fn name(code: u32) -> &'static str {
    TABLE
        .iter()
        .rev()
        .find(|e| e.0 == code)
        .map_or("cudaErrorUnknown", |e| e.1)
}

/// The description (`cudaGetErrorString`).
pub fn description(code: u32) -> &'static str {
    TABLE
        .iter()
        .rev()
        .find(|e| e.0 == code)
        .map_or("unrecognized error code", |e| e.2)
}

/// Errors after which the context is unusable: every later call returns the same error.
pub fn is_sticky(code: u32) -> bool {
    matches!(code, 700 | 702 | 710 | 714 | 715 | 716 | 717 | 718 | 719)
}

/// (driver `CUresult`, runtime `cudaError_t`). Values from `cuda.h` / `driver_types.h`.
pub const DRIVER_RESULTS: &[(u32, u32)] = &[
    (0, SUCCESS),
    (1, ERROR_INVALID_VALUE),                 // CUDA_ERROR_INVALID_VALUE
    (2, ERROR_MEMORY_ALLOCATION),             // CUDA_ERROR_OUT_OF_MEMORY
    (3, ERROR_INITIALIZATION),                // CUDA_ERROR_NOT_INITIALIZED
    (4, ERROR_CUDART_UNLOADING),              // CUDA_ERROR_DEINITIALIZED
    (34, 34),                                       // CUDA_ERROR_STUB_LIBRARY → cudaErrorStubLibrary
    (46, ERROR_DEVICES_UNAVAILABLE),          // CUDA_ERROR_DEVICE_UNAVAILABLE
    (100, ERROR_NO_DEVICE),                   // CUDA_ERROR_NO_DEVICE
    (101, ERROR_INVALID_DEVICE),              // CUDA_ERROR_INVALID_DEVICE
    (102, ERROR_DEVICE_NOT_LICENSED),         // CUDA_ERROR_DEVICE_NOT_LICENSED
    (200, ERROR_INVALID_KERNEL_IMAGE),        // CUDA_ERROR_INVALID_IMAGE
    (201, ERROR_DEVICE_UNINITIALIZED),        // CUDA_ERROR_INVALID_CONTEXT
    (205, 205),                                     // CUDA_ERROR_MAP_FAILED → cudaErrorMapBufferObjectFailed
    (206, 206),                                     // CUDA_ERROR_UNMAP_FAILED → cudaErrorUnmapBufferObjectFailed
    (208, ERROR_ALREADY_MAPPED),              // CUDA_ERROR_ALREADY_MAPPED
    (209, ERROR_NO_KERNEL_IMAGE),             // CUDA_ERROR_NO_BINARY_FOR_GPU
    (211, 211),                                     // CUDA_ERROR_NOT_MAPPED → cudaErrorNotMapped
    (214, 214),                                     // CUDA_ERROR_ECC_UNCORRECTABLE → cudaErrorECCUncorrectable
    (215, ERROR_UNSUPPORTED_LIMIT),           // CUDA_ERROR_UNSUPPORTED_LIMIT
    (217, ERROR_PEER_ACCESS_UNSUPPORTED),     // CUDA_ERROR_PEER_ACCESS_UNSUPPORTED
    (218, ERROR_INVALID_PTX),                 // CUDA_ERROR_INVALID_PTX
    (220, 220),                                     // CUDA_ERROR_NVLINK_UNCORRECTABLE
    (221, 221),                                     // CUDA_ERROR_JIT_COMPILER_NOT_FOUND
    (222, ERROR_UNSUPPORTED_PTX_VERSION),     // CUDA_ERROR_UNSUPPORTED_PTX_VERSION
    (223, 223),                                     // CUDA_ERROR_JIT_COMPILATION_DISABLED
    (300, ERROR_INVALID_SOURCE),              // CUDA_ERROR_INVALID_SOURCE
    (301, ERROR_FILE_NOT_FOUND),              // CUDA_ERROR_FILE_NOT_FOUND
    (302, 302),                                     // CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND
    (303, 303),                                     // CUDA_ERROR_SHARED_OBJECT_INIT_FAILED
    (304, 304),                                     // CUDA_ERROR_OPERATING_SYSTEM
    (400, ERROR_INVALID_RESOURCE_HANDLE),     // CUDA_ERROR_INVALID_HANDLE
    (401, ERROR_ILLEGAL_STATE),               // CUDA_ERROR_ILLEGAL_STATE
    (500, ERROR_SYMBOL_NOT_FOUND),            // CUDA_ERROR_NOT_FOUND
    (600, ERROR_NOT_READY),                   // CUDA_ERROR_NOT_READY
    (700, ERROR_ILLEGAL_ADDRESS),             // CUDA_ERROR_ILLEGAL_ADDRESS
    (701, ERROR_LAUNCH_OUT_OF_RESOURCES),     // CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
    (702, ERROR_LAUNCH_TIMEOUT),              // CUDA_ERROR_LAUNCH_TIMEOUT
    (703, 703),                                     // CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING
    (704, ERROR_PEER_ACCESS_ALREADY_ENABLED), // CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
    (705, ERROR_PEER_ACCESS_NOT_ENABLED),     // CUDA_ERROR_PEER_ACCESS_NOT_ENABLED
    (708, ERROR_SET_ON_ACTIVE_PROCESS),       // CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE
    (709, ERROR_CONTEXT_IS_DESTROYED),        // CUDA_ERROR_CONTEXT_IS_DESTROYED
    (710, ERROR_ASSERT),                      // CUDA_ERROR_ASSERT
    (711, 711),                                     // CUDA_ERROR_TOO_MANY_PEERS
    (712, ERROR_HOST_MEMORY_ALREADY_REGISTERED),
    (713, ERROR_HOST_MEMORY_NOT_REGISTERED),
    (714, ERROR_HARDWARE_STACK),              // CUDA_ERROR_HARDWARE_STACK_ERROR
    (715, ERROR_ILLEGAL_INSTRUCTION),
    (716, ERROR_MISALIGNED_ADDRESS),
    (717, ERROR_INVALID_ADDRESS_SPACE),
    (718, ERROR_INVALID_PC),
    (719, ERROR_LAUNCH_FAILURE),              // CUDA_ERROR_LAUNCH_FAILED
    (720, ERROR_COOPERATIVE_LAUNCH_TOO_LARGE),
    (800, ERROR_NOT_PERMITTED),
    (801, ERROR_NOT_SUPPORTED),
    (802, 802),                                     // CUDA_ERROR_SYSTEM_NOT_READY
    (803, 803),                                     // CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
    (804, 804),                                     // CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
    (900, ERROR_STREAM_CAPTURE_UNSUPPORTED),
    (901, 901),                                     // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    (909, 909),                                     // CUDA_ERROR_TIMEOUT
    (999, ERROR_UNKNOWN),
];

/// `CUresult` names (cuda.h of CUDA 13).
pub const RESULT_NAMES: &[(u32, &str)] = &[
    (0, "CUDA_SUCCESS"),
    (1, "CUDA_ERROR_INVALID_VALUE"),
    (2, "CUDA_ERROR_OUT_OF_MEMORY"),
    (3, "CUDA_ERROR_NOT_INITIALIZED"),
    (4, "CUDA_ERROR_DEINITIALIZED"),
    (5, "CUDA_ERROR_PROFILER_DISABLED"),
    (6, "CUDA_ERROR_PROFILER_NOT_INITIALIZED"),
    (7, "CUDA_ERROR_PROFILER_ALREADY_STARTED"),
    (8, "CUDA_ERROR_PROFILER_ALREADY_STOPPED"),
    (34, "CUDA_ERROR_STUB_LIBRARY"),
    (36, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER"),
    (46, "CUDA_ERROR_DEVICE_UNAVAILABLE"),
    (47, "CUDA_ERROR_MULTICAST_RESOURCE_FULL"),
    (100, "CUDA_ERROR_NO_DEVICE"),
    (101, "CUDA_ERROR_INVALID_DEVICE"),
    (102, "CUDA_ERROR_DEVICE_NOT_LICENSED"),
    (200, "CUDA_ERROR_INVALID_IMAGE"),
    (201, "CUDA_ERROR_INVALID_CONTEXT"),
    (202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT"),
    (205, "CUDA_ERROR_MAP_FAILED"),
    (206, "CUDA_ERROR_UNMAP_FAILED"),
    (207, "CUDA_ERROR_ARRAY_IS_MAPPED"),
    (208, "CUDA_ERROR_ALREADY_MAPPED"),
    (209, "CUDA_ERROR_NO_BINARY_FOR_GPU"),
    (210, "CUDA_ERROR_ALREADY_ACQUIRED"),
    (211, "CUDA_ERROR_NOT_MAPPED"),
    (212, "CUDA_ERROR_NOT_MAPPED_AS_ARRAY"),
    (213, "CUDA_ERROR_NOT_MAPPED_AS_POINTER"),
    (214, "CUDA_ERROR_ECC_UNCORRECTABLE"),
    (215, "CUDA_ERROR_UNSUPPORTED_LIMIT"),
    (216, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE"),
    (217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"),
    (218, "CUDA_ERROR_INVALID_PTX"),
    (219, "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT"),
    (220, "CUDA_ERROR_NVLINK_UNCORRECTABLE"),
    (221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND"),
    (222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"),
    (223, "CUDA_ERROR_JIT_COMPILATION_DISABLED"),
    (224, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY"),
    (225, "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC"),
    (226, "CUDA_ERROR_CONTAINED"),
    (227, "CUDA_ERROR_INSUFFICIENT_LOADER_VERSION"),
    (300, "CUDA_ERROR_INVALID_SOURCE"),
    (301, "CUDA_ERROR_FILE_NOT_FOUND"),
    (302, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND"),
    (303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED"),
    (304, "CUDA_ERROR_OPERATING_SYSTEM"),
    (400, "CUDA_ERROR_INVALID_HANDLE"),
    (401, "CUDA_ERROR_ILLEGAL_STATE"),
    (402, "CUDA_ERROR_LOSSY_QUERY"),
    (500, "CUDA_ERROR_NOT_FOUND"),
    (600, "CUDA_ERROR_NOT_READY"),
    (700, "CUDA_ERROR_ILLEGAL_ADDRESS"),
    (701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
    (702, "CUDA_ERROR_LAUNCH_TIMEOUT"),
    (703, "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING"),
    (704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"),
    (705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED"),
    (708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE"),
    (709, "CUDA_ERROR_CONTEXT_IS_DESTROYED"),
    (710, "CUDA_ERROR_ASSERT"),
    (711, "CUDA_ERROR_TOO_MANY_PEERS"),
    (712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"),
    (713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"),
    (714, "CUDA_ERROR_HARDWARE_STACK_ERROR"),
    (715, "CUDA_ERROR_ILLEGAL_INSTRUCTION"),
    (716, "CUDA_ERROR_MISALIGNED_ADDRESS"),
    (717, "CUDA_ERROR_INVALID_ADDRESS_SPACE"),
    (718, "CUDA_ERROR_INVALID_PC"),
    (719, "CUDA_ERROR_LAUNCH_FAILED"),
    (720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"),
    (721, "CUDA_ERROR_TENSOR_MEMORY_LEAK"),
    (800, "CUDA_ERROR_NOT_PERMITTED"),
    (801, "CUDA_ERROR_NOT_SUPPORTED"),
    (802, "CUDA_ERROR_SYSTEM_NOT_READY"),
    (803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"),
    (804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"),
    (805, "CUDA_ERROR_MPS_CONNECTION_FAILED"),
    (806, "CUDA_ERROR_MPS_RPC_FAILURE"),
    (807, "CUDA_ERROR_MPS_SERVER_NOT_READY"),
    (808, "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED"),
    (809, "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED"),
    (810, "CUDA_ERROR_MPS_CLIENT_TERMINATED"),
    (811, "CUDA_ERROR_CDP_NOT_SUPPORTED"),
    (812, "CUDA_ERROR_CDP_VERSION_MISMATCH"),
    (900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"),
    (901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"),
    (902, "CUDA_ERROR_STREAM_CAPTURE_MERGE"),
    (903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED"),
    (904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED"),
    (905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION"),
    (906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"),
    (907, "CUDA_ERROR_CAPTURED_EVENT"),
    (908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"),
    (909, "CUDA_ERROR_TIMEOUT"),
    (910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE"),
    (911, "CUDA_ERROR_EXTERNAL_DEVICE"),
    (912, "CUDA_ERROR_INVALID_CLUSTER_SIZE"),
    (913, "CUDA_ERROR_FUNCTION_NOT_LOADED"),
    (914, "CUDA_ERROR_INVALID_RESOURCE_TYPE"),
    (915, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION"),
    (916, "CUDA_ERROR_KEY_ROTATION"),
    (917, "CUDA_ERROR_STREAM_DETACHED"),
    (918, "CUDA_ERROR_GRAPH_RECAPTURE_FAILURE"),
    (919, "CUDA_ERROR_FABRIC_NOT_READY"),
    (999, "CUDA_ERROR_UNKNOWN"),
];


/// The driver API's `CUresult` for runtime error `code` (what crum's driver face returns):
/// the driver code the table maps to it, else the same number where the driver has one,
/// else `CUDA_ERROR_UNKNOWN`.
pub fn driver_result(code: u32) -> u32 {
    if code == SUCCESS {
        return 0;
    }
    if let Some(&(d, _)) = DRIVER_RESULTS.iter().find(|e| e.1 == code) {
        return d;
    }
    if RESULT_NAMES.iter().any(|e| e.0 == code) {
        return code;
    }
    999
}

/// The `CUresult` name of `code` (`CUDA_ERROR_INVALID_VALUE`).
pub fn driver_name(code: u32) -> &'static str {
    RESULT_NAMES.iter().find(|e| e.0 == code).map_or("CUDA_ERROR_UNKNOWN", |e| e.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_codes_have_cuda_names_and_strings() {
        assert_eq!(name(700), "cudaErrorIllegalAddress");
        assert_eq!(description(700), "an illegal memory access was encountered");
        assert_eq!(name(400), "cudaErrorInvalidResourceHandle");
        assert_eq!(description(0), "no error");
    }

    #[test]
    fn unknown_code_is_reported_as_unrecognized() {
        assert_eq!(description(123456), "unrecognized error code");
    }

    #[test]
    fn illegal_address_is_sticky_and_invalid_value_is_not() {
        assert!(is_sticky(ERROR_ILLEGAL_ADDRESS));
        assert!(!is_sticky(ERROR_INVALID_VALUE));
    }
}
