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

/// (driver `CUresult`, runtime `cudaError_t`): `crum_wire::cuda::DRIVER_RESULTS`.
const TABLE: &[(u32, u32)] = cuda::DRIVER_RESULTS;

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

/// The driver's symbolic name of a result (for messages).
pub fn driver_name(code: u32) -> &'static str {
    cuda::driver_name(code)
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
