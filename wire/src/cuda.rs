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
