//! The `cuda` backend end to end without a GPU: CUDA programs of the corpus under
//! `crum run --device cuda`, the proxy driving crum's emulated driver
//! (`integration-tests/emu-libcuda`, `libcuda.so.1` on the CPU over `crum-ptx`, loaded
//! through `CRUM_LIBCUDA`). Each must exit 0 with `PASS` and print what it prints on the
//! emulated device (`cuda/expected/<name>.out`). Then checkpoint → SIGKILL → restart, and a
//! restart of the restart, on the cuda backend, and images restarted across backends (taken
//! on cuda, restarted on emu, and the reverse).
//!
//! Programs of the corpus not run here, and why (the emulated driver does not do it, or the
//! cuda backend does not support it, as on a GPU; `docs/gpu-backend.md`):
//! - textures and surfaces (`mipmap_tex`, `surfaces`, `driver_memory`, `stream_attrs`):
//!   `Unsupported` on the cuda backend;
//! - `cuda_facts`: prints the backend's answers, which may differ between backends (over the
//!   emulated driver only the surface line does: surfaces are unsupported on cuda);
//! - `graph_conditional`: conditional nodes set from kernels need the emulated device's
//!   handles (`DeviceProps::graph_conditionals`);
//! - `cg_tiles`: passes (40 s by hand on two busy cores), left to the corpus, which runs it on
//!   the emulated device.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use crum_integration_tests::{
    build_cuda_with, check_expected, crum_run_command, gated_scenario, wait_with_timeout, workspace,
    ScenarioOpts,
};

/// The emulated driver (built with the workspace), named by `CRUM_LIBCUDA` for every proxy
/// this test process starts.
fn emulated_driver() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        // Builds the workspace, this library included, when something is missing.
        let _ = crum_integration_tests::crum_bin();
        let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace().join("target"));
        let lib = target.join("debug/libcrum_emu_libcuda.so");
        if !lib.exists() {
            let st = std::process::Command::new(env!("CARGO"))
                .args(["build", "-q", "--workspace"])
                .current_dir(workspace())
                .status()
                .expect("run cargo build");
            assert!(st.success() && lib.exists(), "building the emulated driver failed");
        }
        // Every test of this binary wants it, and sets the same value.
        std::env::set_var("CRUM_LIBCUDA", &lib);
        lib
    })
}

/// Run `name` under `crum run --device cuda`: exit 0, last line `PASS`, stdout as expected.
fn run_on_cuda(name: &str, nvcc: &[&str], args: &[&str]) {
    emulated_driver();
    let exe = build_cuda_with(name, nvcc).unwrap_or_else(|e| panic!("{e:#}"));
    let child = crum_run_command(Some("cuda"), &exe, args).spawn().expect("spawn crum run");
    let r = wait_with_timeout(child, Duration::from_secs(600)).expect("crum run");
    assert!(
        r.code == Some(0) && !r.timed_out && r.stdout.lines().last() == Some("PASS"),
        "{name} under crum run --device cuda (emulated driver): code {:?} timed_out {}\nstdout:\n{}\nstderr:\n{}",
        r.code,
        r.timed_out,
        r.stdout,
        r.stderr
    );
    check_expected(name, &r.stdout);
}

macro_rules! on_cuda {
    ($test:ident, $name:literal $(, nvcc: [$($flag:literal),*])? $(, args: [$($arg:literal),*])?) => {
        #[test]
        fn $test() {
            run_on_cuda($name, &[$($($flag),*)?], &[$($($arg),*)?]);
        }
    };
}

on_cuda!(vector_add, "vector_add");
on_cuda!(matmul_tiled, "matmul_tiled");
on_cuda!(reduce, "reduce");
on_cuda!(scan, "scan");
on_cuda!(histogram, "histogram");
on_cuda!(streams_pipeline, "streams_pipeline");
on_cuda!(memcpy2d, "memcpy2d");
on_cuda!(symbols, "symbols");
on_cuda!(managed, "managed");
on_cuda!(host_threads, "host_threads");
on_cuda!(device_printf, "device_printf");
on_cuda!(error_paths, "error_paths");
on_cuda!(invalid_pointer, "invalid_pointer");
on_cuda!(events_callbacks, "events_callbacks");
on_cuda!(device_query, "device_query");
on_cuda!(host_memory, "host_memory");
on_cuda!(managed_threads, "managed_threads");
on_cuda!(managed_fileio, "managed_fileio");
on_cuda!(warp_size_loop, "warp_size_loop");
on_cuda!(cg_grid_sync, "cg_grid_sync");
on_cuda!(static_shared_per_kernel, "static_shared_per_kernel");
on_cuda!(unsupported_form, "unsupported_form");
on_cuda!(graph_explicit, "graph_explicit");
on_cuda!(graph_capture, "graph_capture");
on_cuda!(graph_recapture, "graph_recapture");
on_cuda!(mem_pools, "mem_pools");
on_cuda!(graph_mem_nodes, "graph_mem_nodes");
on_cuda!(oob_near, "oob_near");
on_cuda!(system_atomics, "system_atomics");
on_cuda!(rdc_linked, "rdc_linked");
on_cuda!(many_threads, "many_threads");
on_cuda!(indirect_calls, "indirect_calls");
on_cuda!(library_api, "library_api");
on_cuda!(driver_api, "driver_api");
on_cuda!(driver_contexts, "driver_contexts");
on_cuda!(driver_vmm, "driver_vmm");
on_cuda!(copy_batch_3d, "copy_batch_3d");
on_cuda!(jacobi, "jacobi", args: ["32", "300", "100"]);
on_cuda!(per_thread_stream, "per_thread_stream", nvcc: ["--default-stream", "per-thread"]);

/// The zdtm-style scenario (`gated_scenario`: checkpoints at three gates, SIGKILL, restarts,
/// a restart of a restart) with the program run on `run` and restarted on `restart`.
fn scenario(name: &str, run: &'static str, restart: &'static str, every_image: bool) {
    emulated_driver();
    let o = ScenarioOpts {
        run_opts: vec!["--device", run],
        restart_device: Some(restart),
        every_image,
        ..Default::default()
    };
    if let Err(e) = gated_scenario(name, &o) {
        panic!("{name} run on {run}, restarted on {restart}: {e:#}");
    }
}

#[test]
fn vector_add_restarts_on_the_cuda_backend() {
    scenario("vector_add", "cuda", "cuda", true);
}

#[test]
fn streams_events_and_pinned_copies_restart_on_the_cuda_backend() {
    scenario("streams_pipeline", "cuda", "cuda", true);
}

#[test]
fn module_variables_restart_on_the_cuda_backend_at_the_driver_addresses() {
    scenario("symbols", "cuda", "cuda", false);
}

#[test]
fn device_printf_and_host_functions_restart_on_the_cuda_backend() {
    scenario("events_callbacks", "cuda", "cuda", false);
}

#[test]
fn image_taken_on_the_cuda_backend_restarts_on_the_emulated_device() {
    scenario("streams_pipeline", "cuda", "emu", true);
}

/// From the first gate, and the restarted process's image (taken on cuda) again: the
/// emulated device's images from gates 2 and 3 hold queued work, which the cuda backend does
/// not replay yet (issue 16; the restart is refused naming it).
#[test]
fn image_taken_on_the_emulated_device_restarts_on_the_cuda_backend() {
    scenario("vector_add", "emu", "cuda", false);
}

/// `CRUM_LIBCUDA` naming something that is not a driver: `--device cuda` fails at once and
/// says which library and why, and `--device auto` falls back to the emulated device.
#[test]
fn a_bad_crum_libcuda_is_named_and_auto_falls_back_to_the_emulated_device() {
    emulated_driver();
    let exe = build_cuda_with("vector_add", &[]).unwrap_or_else(|e| panic!("{e:#}"));
    let bad = "/nonexistent/libcuda.so.1";
    let child = crum_run_command(Some("cuda"), &exe, &[]).env("CRUM_LIBCUDA", bad).spawn().expect("spawn crum run");
    let r = wait_with_timeout(child, Duration::from_secs(120)).expect("crum run");
    assert!(r.code != Some(0) && r.stderr.contains("CRUM_LIBCUDA") && r.stderr.contains(bad), "{}", r.stderr);
    let child = crum_run_command(Some("auto"), &exe, &[]).env("CRUM_LIBCUDA", bad).spawn().expect("spawn crum run");
    let r = wait_with_timeout(child, Duration::from_secs(120)).expect("crum run");
    assert!(r.code == Some(0) && r.stdout.ends_with("PASS\n"), "{}\n{}", r.stdout, r.stderr);
}
