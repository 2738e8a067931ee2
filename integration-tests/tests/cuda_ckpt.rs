//! Checkpoint and restart of CUDA programs (issue 6).
//!
//! Every program of the CUDA corpus (`integration-tests/cuda/*.cu`) has three gates
//! (`GATE(k)` in `cuda/common.h`; without `CRUM_TEST_GATE` they do nothing): points where it
//! holds device memory and often has kernels and copies still queued. `gated_scenario` runs
//! it uninterrupted under `crum run`, then checkpoints it at each gate, SIGKILLs it, restarts
//! it, checkpoints and kills the restarted process, restarts that image (restart of a
//! restart), and restarts the other images too; every chain must print exactly what the
//! uninterrupted run printed, which ends with the program's own check against its CPU
//! reference (`PASS`).

use crum_integration_tests::{gated_scenario, ScenarioOpts};

fn scenario(name: &str, o: ScenarioOpts) {
    if let Err(e) = gated_scenario(name, &o) {
        panic!("{name}: {e:#}");
    }
}

macro_rules! corpus_ckpt {
    ($test:ident, $name:literal $(, $field:ident : $val:expr)*) => {
        #[test]
        fn $test() {
            scenario($name, ScenarioOpts { $($field: $val,)* ..Default::default() });
        }
    };
}

corpus_ckpt!(vector_add_restarts_at_three_points, "vector_add");
corpus_ckpt!(tiled_matmul_restarts_at_three_points, "matmul_tiled");
corpus_ckpt!(reductions_restart_with_kernels_queued, "reduce");
corpus_ckpt!(two_level_scan_restarts_between_passes, "scan");
corpus_ckpt!(histogram_restarts_at_three_points, "histogram");
corpus_ckpt!(
    stream_pipeline_restarts_with_streams_events_and_pinned_copies_queued,
    "streams_pipeline"
);
corpus_ckpt!(pitched_2d_copies_restart_at_three_points, "memcpy2d");
corpus_ckpt!(device_and_constant_symbols_survive_restarts, "symbols");
corpus_ckpt!(
    four_host_threads_restart_while_the_others_run,
    "host_threads"
);
corpus_ckpt!(
    device_printf_of_queued_kernels_appears_once_after_restart,
    "device_printf"
);
corpus_ckpt!(
    freed_pointers_and_sticky_errors_survive_restarts,
    "error_paths"
);
corpus_ckpt!(
    host_functions_callbacks_and_events_queued_at_checkpoint_run_after_restart,
    "events_callbacks"
);
corpus_ckpt!(
    device_properties_and_pointer_kinds_survive_restarts,
    "device_query"
);
corpus_ckpt!(
    managed_memory_read_and_written_by_syscalls_restarts,
    "managed_fileio"
);
corpus_ckpt!(
    registered_and_mapped_host_memory_and_stream_priorities_survive_restarts,
    "host_memory"
);
corpus_ckpt!(
    managed_memory_from_threads_and_sparse_gib_restarts,
    "managed_threads"
);
corpus_ckpt!(
    per_thread_default_streams_and_large_dynamic_shared_memory_restart,
    "per_thread_stream",
    nvcc: vec!["--default-stream", "per-thread"]
);
corpus_ckpt!(
    jacobi_on_managed_memory_restarts_at_quarter_points,
    "jacobi",
    args: vec!["32", "300", "100"]
);

// Programs that fail without checkpoints too (see cuda_corpus.rs).
#[test]
#[ignore = "fails uninterrupted: crum-ptx cannot parse `.attribute(.managed)` of __managed__ variables (cudaErrorInvalidDeviceFunction)"]
fn managed_arrays_and_managed_variable_restart() {
    scenario("managed", ScenarioOpts::default());
}

#[test]
#[ignore = "fails uninterrupted: the interposer segfaults on cudaMemcpy from the wild address 0x10"]
fn wild_pointer_errors_survive_restarts() {
    scenario("invalid_pointer", ScenarioOpts::default());
}
