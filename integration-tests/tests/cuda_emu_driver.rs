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

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crum_integration_tests::{
    build_cuda, build_cuda_with, check_expected, crum_bin, crum_run_command, cuda_dir, gated_scenario, wait_with_timeout,
    workspace, Gate, Proc, ScenarioOpts,
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

/// From every gate, and the restarted process's image (taken on cuda) again: the emulated
/// device's images from gates 2 and 3 hold its grid stopped at a block boundary (policy
/// auto), whose rest the cuda backend runs in the kernel's preemptible form
/// (`Cuda::launch_rest`, issue 16).
#[test]
fn image_taken_on_the_emulated_device_restarts_on_the_cuda_backend() {
    scenario("vector_add", "emu", "cuda", true);
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

/// Issue 16 on the cuda backend: the proxy gives the driver a few operations per stream ahead
/// and holds the rest, so a checkpoint waits only for those. `ckpt_queue_cut` (a long kernel,
/// 1000 launches behind it on two streams with an event wait between them, a second thread
/// inside `cudaDeviceSynchronize`) is checkpointed at its first gate: the image holds nearly
/// all of the 1000 launches unstarted (`crum inspect` lists them) and the waiting call. Killed
/// and restarted on the cuda backend, the program gets the uninterrupted run's results; the
/// restarted process checkpointed at once (its queue replayed, most of it held again) and
/// restarted gives them too (restart of a restart). Returns the first image.
fn queue_cut_on(run_device: &str, restart_device: &str, env: &[(&str, &OsStr)]) -> (tempfile::TempDir, PathBuf) {
    emulated_driver();
    let exe = build_cuda("ckpt_queue_cut").unwrap();
    let want = std::fs::read_to_string(cuda_dir().join("expected/ckpt_queue_cut.out")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let images = tmp.path().join("images");
    let gate = Gate::new(&tmp.path().join("gate")).unwrap();
    let mut envs = vec![gate.env(), ("CRUM_LOG", OsStr::new("crum_proxy::parked=debug"))];
    envs.extend_from_slice(env);
    // A shorter long kernel than the corpus's: the emulated driver runs it on the interpreter.
    let args = ["1000", "2000000"];
    let mut p = Proc::run(&exe, &args, &["--device", run_device], &envs, &tmp.path().join("out")).unwrap();
    gate.wait_at(1, &mut p).unwrap();
    let start = Instant::now();
    while !p.stderr().contains("a call waits on the device") {
        assert!(start.elapsed() < Duration::from_secs(300), "no call waits: {}", p.report());
        std::thread::sleep(Duration::from_millis(10));
    }
    let img = p.checkpoint(&images).unwrap();
    p.kill9().unwrap();
    let dev = device_json(&img);
    assert_eq!(dev["backend"], run_device, "{dev}");
    let launches = dev["queue"].as_array().unwrap().iter().filter(|w| w["op"] == "launch").count();
    assert!(launches >= 900, "only {launches} launches saved unstarted: {dev}");
    let calls = dev["carried_calls"].as_array().unwrap();
    assert!(calls.iter().any(|c| c["what"].as_str().unwrap().starts_with("waiting")), "no waiting call saved: {calls:?}");
    let text = Command::new(crum_bin()).arg("inspect").arg(&img).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("queued device work") && text.contains("calls cut by the checkpoint"), "{text}");

    gate.reset(i64::MAX).unwrap();
    let mut r = Proc::restart(&img, Some(restart_device), &tmp.path().join("r1.out")).unwrap();
    assert_eq!(r.success(Duration::from_secs(600)).unwrap(), want, "restart on {restart_device}");

    // Restart of a restart: the restarted process checkpointed at once, at gate 1 again.
    gate.reset(0).unwrap();
    let mut r = Proc::restart(&img, Some(restart_device), &tmp.path().join("r2.out")).unwrap();
    wait_agent(&mut r);
    let img2 = r.checkpoint(&images).unwrap();
    r.kill9().unwrap();
    assert_eq!(device_json(&img2)["backend"], restart_device);
    gate.reset(i64::MAX).unwrap();
    let mut r = Proc::restart(&img2, Some(restart_device), &tmp.path().join("r3.out")).unwrap();
    assert_eq!(r.success(Duration::from_secs(600)).unwrap(), want, "restart of a restart on {restart_device}");
    (tmp, img)
}

#[test]
fn queued_launches_and_a_thread_in_device_synchronize_are_saved_on_the_cuda_backend() {
    queue_cut_on("cuda", "cuda", &[]);
}

/// The cuda backend's saved queue and waiting call restart on the emulated device, and the
/// emulated device's (its long kernel drained: the cuda backend cannot run the rest of a
/// grid stopped part-way) on the cuda backend.
#[test]
fn queued_work_restarts_across_backends_both_ways() {
    queue_cut_on("cuda", "emu", &[]);
    queue_cut_on("emu", "cuda", &[("CRUM_CKPT_KERNEL", OsStr::new("drain"))]);
}

/// The image's device part as `crum inspect --json` gives it.
fn device_json(img: &Path) -> serde_json::Value {
    let o = Command::new(crum_bin()).args(["inspect", "--json"]).arg(img).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["device"].clone()
}

/// Wait until a restarted process's agent answers.
fn wait_agent(p: &mut Proc) {
    let pid = p.child.id();
    let t0 = Instant::now();
    while !crum_ckpt::control::agent_running(&crum_ckpt::control::socket_dir(), pid) {
        assert!(!p.exited(), "{}", p.report());
        assert!(t0.elapsed() < Duration::from_secs(120), "the program's agent never answered: {}", p.report());
        std::thread::sleep(Duration::from_millis(3));
    }
}
