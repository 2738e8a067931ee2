//! The CUDA test corpus under `crum run` on the default device: each program in
//! `integration-tests/cuda/` is built with the real nvcc (`-cudart shared -arch=sm_80`), checks
//! its GPU results against a CPU computation, and must exit 0 with a final `PASS`; its stdout
//! must equal `cuda/expected/<name>.out` where that file exists. A program that is a folder of
//! several `.cu` files (`cuda/rdc_linked/`) is built with separate compilation (`-rdc=true`).

use crum_integration_tests::{check_expected, run_cuda_pass, run_cuda_pass_with};

fn corpus(name: &str, args: &[&str]) -> String {
    let out = run_cuda_pass(name, args);
    check_expected(name, &out);
    out
}

macro_rules! corpus_test {
    ($test:ident, $name:literal $(, $arg:literal)*) => {
        #[test]
        fn $test() {
            corpus($name, &[$($arg),*]);
        }
    };
    (#[ignore = $why:literal] $test:ident, $name:literal $(, $arg:literal)*) => {
        #[test]
        #[ignore = $why]
        fn $test() {
            corpus($name, &[$($arg),*]);
        }
    };
}

corpus_test!(vector_add_matches_cpu, "vector_add");
corpus_test!(tiled_matmul_in_shared_memory_matches_cpu, "matmul_tiled");
corpus_test!(shuffle_and_atomic_reductions_match_cpu, "reduce");
corpus_test!(two_level_scan_matches_cpu, "scan");
corpus_test!(privatized_histogram_matches_cpu, "histogram");
corpus_test!(
    multi_stream_pinned_pipeline_with_events_matches_cpu,
    "streams_pipeline"
);
corpus_test!(pitched_memcpy2d_transpose_matches_cpu, "memcpy2d");
corpus_test!(device_and_constant_symbols_round_trip, "symbols");
corpus_test!(
    managed_memory_cpu_kernel_cycles_and_managed_variable_match_cpu,
    "managed"
);
corpus_test!(
    four_host_threads_with_own_streams_all_correct,
    "host_threads"
);
corpus_test!(device_printf_reaches_stdout_in_order, "device_printf");
corpus_test!(
    error_codes_and_sticky_illegal_address_match_cuda,
    "error_paths"
);
corpus_test!(
    wild_pointer_copy_returns_invalid_value,
    "invalid_pointer"
);
corpus_test!(
    host_functions_and_callbacks_run_in_stream_order,
    "events_callbacks"
);
corpus_test!(
    device_properties_and_pointer_attributes_are_consistent,
    "device_query"
);
corpus_test!(
    stream_attributes_persisting_l2_and_former_stubs_behave_as_cuda_documents,
    "stream_attrs"
);
corpus_test!(
    read_and_write_syscalls_on_managed_memory_match_cpu,
    "managed_fileio"
);
corpus_test!(
    registered_mapped_host_memory_default_copies_and_priorities_work,
    "host_memory"
);
corpus_test!(
    managed_memory_from_threads_write_then_read_and_sparse_gib_match_cpu,
    "managed_threads"
);

#[test]
fn jacobi_solver_short_run_matches_cpu_and_reports_progress() {
    let out = corpus("jacobi", &["32", "300", "100"]);
    let steps = out.lines().filter(|l| l.starts_with("step ")).count();
    assert_eq!(steps, 3, "one progress line per 100 iterations:\n{out}");
}

#[test]
fn per_thread_default_streams_with_large_dynamic_shared_memory_match_cpu() {
    let out = run_cuda_pass_with(
        "per_thread_stream",
        &["--default-stream", "per-thread"],
        &[],
    );
    check_expected("per_thread_stream", &out);
}

corpus_test!(warp_size_loop_bound_matches_cpu, "warp_size_loop");
corpus_test!(
    corner_case_answers_and_device_facts_are_printed,
    "cuda_facts"
);
corpus_test!(
    multi_warp_tiles_use_reserved_shared_memory_and_match_cpu,
    "cg_tiles"
);
corpus_test!(
    grid_sync_in_a_cooperative_launch_matches_cpu,
    "cg_grid_sync"
);
corpus_test!(
    static_shared_memory_is_per_kernel,
    "static_shared_per_kernel"
);
corpus_test!(
    unsupported_form_fails_only_its_own_kernel,
    "unsupported_form"
);
corpus_test!(
    explicit_graph_nodes_launch_update_and_clone_match_cpu,
    "graph_explicit"
);
corpus_test!(
    stream_capture_with_fork_join_modes_and_errors_matches_cpu,
    "graph_capture"
);
corpus_test!(
    memory_pools_reuse_release_trim_and_attributes_match_cpu,
    "mem_pools"
);
corpus_test!(
    graph_memory_nodes_and_generic_node_api_match_cpu,
    "graph_mem_nodes"
);
corpus_test!(
    small_out_of_bounds_reads_next_to_allocations_read_memory_as_on_a_gpu,
    "oob_near"
);
corpus_test!(
    conditional_if_while_switch_nodes_set_from_kernels_match_cpu,
    "graph_conditional"
);
corpus_test!(
    mipmapped_array_levels_sampled_with_lod_and_grad_match_cpu,
    "mipmap_tex"
);

/// `crum run --strict-memory`: the same reads are illegal addresses, and the log names the
/// allocation each one misses.
#[test]
fn strict_memory_reports_reads_outside_allocations() {
    use crum_integration_tests::{build_cuda, crum_bin, wait_with_timeout};
    use std::process::{Command, Stdio};
    use std::time::Duration;
    let exe = build_cuda("oob_near").unwrap_or_else(|e| panic!("{e:#}"));
    let child = Command::new(crum_bin())
        .args(["run", "--device", "emu", "--strict-memory", "--"])
        .arg(&exe)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn crum run");
    let r = wait_with_timeout(child, Duration::from_secs(120)).expect("crum run");
    assert!(
        r.code != Some(0) && r.stdout.contains("cudaErrorIllegalAddress"),
        "expected the kernel to fail: code {:?}\nstdout:\n{}\nstderr:\n{}",
        r.code,
        r.stdout,
        r.stderr
    );
    assert!(
        r.stderr.contains("illegal address (--strict-memory)")
            && (r.stderr.contains("bytes before the allocation")
                || r.stderr.contains("bytes past the end of the allocation")),
        "the log names the allocation missed:\n{}",
        r.stderr
    );
}
corpus_test!(
    system_scope_atomics_on_pinned_memory_with_host_atomics_are_exact,
    "system_atomics"
);
corpus_test!(
    surface_objects_over_arrays_write_read_and_clamp_as_cuda,
    "surfaces"
);
corpus_test!(
    separately_compiled_files_share_device_functions_and_variables_and_match_cpu,
    "rdc_linked"
);
corpus_test!(
    more_host_threads_than_channel_lanes_share_the_overflow_lane,
    "many_threads"
);
corpus_test!(
    function_pointers_virtual_functions_and_device_new_delete_match_cpu,
    "indirect_calls"
);
corpus_test!(
    library_api_loads_ptx_from_a_buffer_and_a_file_and_launches_its_kernels,
    "library_api"
);
corpus_test!(
    driver_api_through_dlopen_shares_context_memory_and_streams_with_the_runtime,
    "driver_api"
);
