//! The CUDA corpus, listed once for the two test binaries that run it (issue 13: "the corpus
//! runs twice, once with shared and once with static runtime builds"): `cuda_corpus.rs`
//! builds each program with `-cudart shared`, `cuda_static.rs` with `-cudart static` (the
//! objects are compiled once, so the second build is a link). Each program checks its GPU
//! results against a CPU computation, exits 0 with a final `PASS`, and its stdout must equal
//! `cuda/expected/<name>.out` where that file exists.

/// One test: `$run(program, nvcc flags, program arguments)` returns its stdout.
macro_rules! corpus_test {
    ($run:ident, $test:ident, $name:literal $(, nvcc: [$($flag:literal),*])? $(, args: [$($arg:literal),*])?) => {
        #[test]
        fn $test() {
            let out = $run($name, &[$($($flag),*)?], &[$($($arg),*)?]);
            crum_integration_tests::check_expected($name, &out);
        }
    };
}
pub(crate) use corpus_test;

/// Every program of the corpus as a test, run by `$run`.
macro_rules! corpus {
    ($run:ident) => {
        $crate::cuda_corpus_list::corpus_test!($run, vector_add_matches_cpu, "vector_add");
        $crate::cuda_corpus_list::corpus_test!($run, tiled_matmul_in_shared_memory_matches_cpu, "matmul_tiled");
        $crate::cuda_corpus_list::corpus_test!($run, shuffle_and_atomic_reductions_match_cpu, "reduce");
        $crate::cuda_corpus_list::corpus_test!($run, two_level_scan_matches_cpu, "scan");
        $crate::cuda_corpus_list::corpus_test!($run, privatized_histogram_matches_cpu, "histogram");
        $crate::cuda_corpus_list::corpus_test!($run, multi_stream_pinned_pipeline_with_events_matches_cpu, "streams_pipeline");
        $crate::cuda_corpus_list::corpus_test!($run, pitched_memcpy2d_transpose_matches_cpu, "memcpy2d");
        $crate::cuda_corpus_list::corpus_test!($run, device_and_constant_symbols_round_trip, "symbols");
        $crate::cuda_corpus_list::corpus_test!($run, managed_memory_cpu_kernel_cycles_and_managed_variable_match_cpu, "managed");
        $crate::cuda_corpus_list::corpus_test!($run, four_host_threads_with_own_streams_all_correct, "host_threads");
        $crate::cuda_corpus_list::corpus_test!($run, device_printf_reaches_stdout_in_order, "device_printf");
        $crate::cuda_corpus_list::corpus_test!($run, error_codes_and_sticky_illegal_address_match_cuda, "error_paths");
        $crate::cuda_corpus_list::corpus_test!($run, wild_pointer_copy_returns_invalid_value, "invalid_pointer");
        $crate::cuda_corpus_list::corpus_test!($run, host_functions_and_callbacks_run_in_stream_order, "events_callbacks");
        $crate::cuda_corpus_list::corpus_test!($run, device_properties_and_pointer_attributes_are_consistent, "device_query");
        $crate::cuda_corpus_list::corpus_test!($run, stream_attributes_persisting_l2_and_former_stubs_behave_as_cuda_documents, "stream_attrs");
        $crate::cuda_corpus_list::corpus_test!($run, batched_3d_copies_between_pointers_and_arrays_match_cpu, "copy_batch_3d");
        $crate::cuda_corpus_list::corpus_test!($run, conditional_if_while_switch_nodes_set_from_kernels_match_cpu, "graph_conditional");
        $crate::cuda_corpus_list::corpus_test!($run, mipmapped_array_levels_sampled_with_lod_and_grad_match_cpu, "mipmap_tex");
        $crate::cuda_corpus_list::corpus_test!($run, read_and_write_syscalls_on_managed_memory_match_cpu, "managed_fileio");
        $crate::cuda_corpus_list::corpus_test!($run, registered_mapped_host_memory_default_copies_and_priorities_work, "host_memory");
        $crate::cuda_corpus_list::corpus_test!($run, managed_memory_from_threads_write_then_read_and_sparse_gib_match_cpu, "managed_threads");
        $crate::cuda_corpus_list::corpus_test!($run, warp_size_loop_bound_matches_cpu, "warp_size_loop");
        $crate::cuda_corpus_list::corpus_test!($run, corner_case_answers_and_device_facts_are_printed, "cuda_facts");
        $crate::cuda_corpus_list::corpus_test!($run, multi_warp_tiles_use_reserved_shared_memory_and_match_cpu, "cg_tiles");
        $crate::cuda_corpus_list::corpus_test!($run, grid_sync_in_a_cooperative_launch_matches_cpu, "cg_grid_sync");
        $crate::cuda_corpus_list::corpus_test!($run, static_shared_memory_is_per_kernel, "static_shared_per_kernel");
        $crate::cuda_corpus_list::corpus_test!($run, unsupported_form_fails_only_its_own_kernel, "unsupported_form");
        $crate::cuda_corpus_list::corpus_test!($run, explicit_graph_nodes_launch_update_and_clone_match_cpu, "graph_explicit");
        $crate::cuda_corpus_list::corpus_test!($run, stream_capture_with_fork_join_modes_and_errors_matches_cpu, "graph_capture");
        $crate::cuda_corpus_list::corpus_test!($run, recapture_into_an_existing_graph_updates_its_nodes_in_place, "graph_recapture");
        $crate::cuda_corpus_list::corpus_test!($run, memory_pools_reuse_release_trim_and_attributes_match_cpu, "mem_pools");
        $crate::cuda_corpus_list::corpus_test!($run, graph_memory_nodes_and_generic_node_api_match_cpu, "graph_mem_nodes");
        $crate::cuda_corpus_list::corpus_test!($run, small_out_of_bounds_reads_next_to_allocations_read_memory_as_on_a_gpu, "oob_near");
        $crate::cuda_corpus_list::corpus_test!($run, system_scope_atomics_on_pinned_memory_with_host_atomics_are_exact, "system_atomics");
        $crate::cuda_corpus_list::corpus_test!($run, surface_objects_over_arrays_write_read_and_clamp_as_cuda, "surfaces");
        $crate::cuda_corpus_list::corpus_test!($run, separately_compiled_files_share_device_functions_and_variables_and_match_cpu, "rdc_linked");
        $crate::cuda_corpus_list::corpus_test!($run, more_host_threads_than_channel_lanes_share_the_overflow_lane, "many_threads");
        $crate::cuda_corpus_list::corpus_test!($run, function_pointers_virtual_functions_and_device_new_delete_match_cpu, "indirect_calls");
        $crate::cuda_corpus_list::corpus_test!($run, library_api_loads_ptx_from_a_buffer_and_a_file_and_launches_its_kernels, "library_api");
        $crate::cuda_corpus_list::corpus_test!($run, driver_api_through_dlopen_shares_context_memory_and_streams_with_the_runtime, "driver_api");
        $crate::cuda_corpus_list::corpus_test!($run, jacobi_solver_short_run_matches_cpu, "jacobi", args: ["32", "300", "100"]);
        $crate::cuda_corpus_list::corpus_test!(
            $run,
            per_thread_default_streams_with_large_dynamic_shared_memory_match_cpu,
            "per_thread_stream",
            nvcc: ["--default-stream", "per-thread"]
        );
        $crate::cuda_corpus_list::corpus_test!(
            $run,
            created_contexts_push_pop_own_modules_memory_streams_and_events,
            "driver_contexts"
        );
        $crate::cuda_corpus_list::corpus_test!(
            $run,
            vmm_two_physical_allocations_mapped_side_by_side_written_and_read,
            "driver_vmm"
        );
        $crate::cuda_corpus_list::corpus_test!(
            $run,
            driver_memory_of_every_kind_arrays_2d_3d_copies_and_textures_match_cpu,
            "driver_memory"
        );
        $crate::cuda_corpus_list::corpus_test!(
            $run,
            driver_graphs_captures_and_libraries_mix_with_the_runtime_and_match_cpu,
            "driver_graphs"
        );
        $crate::cuda_corpus_list::corpus_test!(
            $run,
            driver_graphs_conditional_nodes_and_unknown_or_destroyed_handles_through_the_driver,
            "driver_graphs",
            args: ["crum-checks"]
        );
        $crate::cuda_corpus_list::corpus_test!(
            $run,
            driver_pointer_attributes_advice_recapture_and_per_thread_variants_match_cpu,
            "driver_pointers"
        );
    };
}
pub(crate) use corpus;
