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

use std::ffi::OsStr;
use std::fs;
use std::time::{Duration, Instant};

use std::process::Command;

use crum_integration_tests::{
    build_cuda, continues, crum_bin, cuda_dir, gated_scenario, images_in, pause_lines, Gate, Proc,
    ScenarioOpts,
};

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
    separately_compiled_program_restarts_with_its_linked_module_and_symbols,
    "rdc_linked"
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
    stream_attributes_ids_textures_and_user_objects_survive_restarts,
    "stream_attrs"
);
corpus_ckpt!(
    batched_3d_copies_queued_at_a_checkpoint_complete_after_restart,
    "copy_batch_3d"
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
corpus_ckpt!(
    graphs_built_and_instantiated_before_a_checkpoint_launch_after_restart,
    "graph_explicit"
);
corpus_ckpt!(
    captured_graphs_launch_after_restart,
    "graph_capture"
);
corpus_ckpt!(
    recaptured_graphs_and_their_updated_execs_survive_restarts,
    "graph_recapture"
);
corpus_ckpt!(
    pool_blocks_in_use_and_cached_survive_restarts_at_their_addresses,
    "mem_pools"
);
corpus_ckpt!(
    graph_allocations_keep_their_addresses_across_restarts,
    "graph_mem_nodes"
);
corpus_ckpt!(
    conditional_nodes_and_handles_of_a_graph_instantiated_before_a_checkpoint_work_after_restart,
    "graph_conditional"
);
corpus_ckpt!(
    mipmapped_levels_and_their_textures_survive_restarts_at_the_same_handles,
    "mipmap_tex"
);
corpus_ckpt!(
    out_of_bounds_reads_next_to_allocations_read_the_same_after_restart,
    "oob_near"
);
corpus_ckpt!(
    system_scope_atomics_on_pinned_memory_work_after_restart,
    "system_atomics"
);
corpus_ckpt!(
    surface_and_texture_objects_made_before_a_checkpoint_work_after_restart,
    "surfaces"
);
corpus_ckpt!(
    an_occupancy_sized_cooperative_grid_runs_after_restart,
    "cg_grid_sync"
);
corpus_ckpt!(
    function_pointers_from_the_host_and_device_heap_blocks_survive_restarts,
    "indirect_calls"
);
corpus_ckpt!(
    libraries_loaded_at_run_time_from_a_freed_buffer_and_a_deleted_file_survive_restarts,
    "library_api"
);
corpus_ckpt!(
    driver_api_modules_launches_and_events_survive_restarts,
    "driver_api"
);
corpus_ckpt!(
    created_driver_contexts_their_modules_memory_and_streams_survive_restarts,
    "driver_contexts"
);
corpus_ckpt!(
    vmm_mappings_come_back_at_their_addresses_with_their_bytes_after_restarts,
    "driver_vmm"
);
corpus_ckpt!(
    driver_arrays_pitched_pooled_and_host_memory_and_textures_survive_restarts,
    "driver_memory"
);
corpus_ckpt!(
    driver_graphs_captures_and_library_kernels_launch_at_their_handles_after_restarts,
    "driver_graphs"
);
corpus_ckpt!(
    driver_pointer_attributes_buffer_ids_advice_and_per_thread_streams_survive_restarts,
    "driver_pointers"
);
/// Checkpoints no longer fail "lane busy" while threads beyond the 64 lanes hold the overflow
/// lane (the agent has its own lane; this test failed every run before). Its restarts failed
/// now and then, for three reasons, each fixed — "cannot connect to the new device
/// proxy" when the image was taken during the first connection (the device window reserved
/// twice; fixed since), and once, after a restart of a restart, threads on the overflow lane
/// found their call cut twice (a channel from two restarts ago read as "starting"; zeroed
/// channels seen ready now count as retired), and a cut taken while a thread made the
/// process's first connection (it counted as waiting for the proxy while it said Hello): the
/// restarted thread said Hello to the new proxy, which dropped the restored device state
/// (cudaErrorInvalidResourceHandle; 2 failures in 24 runs under load before, 25 of 25 after).
/// And a fourth: at a restart of a restart (checkpointed while its threads made their first
/// calls), six threads' first call answered cudaErrorDevicesUnavailable — a thread stopped
/// between reading the connection and its generation claimed a lane of the retired channel
/// and its call was cut twice under one name (`client::with_lane` reads the pair
/// consistently now; a retired channel has no lane to claim).
#[test]
fn checkpoints_succeed_while_threads_beyond_the_lanes_hold_the_overflow_lane() {
    scenario("many_threads", ScenarioOpts::default());
}

// Programs that fail without checkpoints too (see cuda_corpus.rs).
#[test]
fn managed_arrays_and_managed_variable_restart() {
    scenario("managed", ScenarioOpts::default());
}

#[test]
fn wild_pointer_errors_survive_restarts() {
    scenario("invalid_pointer", ScenarioOpts::default());
}

/// Kernels, copies and event waits on four streams queued at every gate, a second thread
/// blocked in `cudaStreamSynchronize`: the checkpoint waits for the work in flight.
///
/// `crum inspect` of the restarted process's image shows its device part: four streams with
/// their flags and priorities, eight events, both kernels, eight device buffers, four pinned.
#[test]
fn queued_launches_copies_events_and_a_thread_inside_a_cuda_call_restart() {
    let o = gated_scenario("ckpt_async_flood", &ScenarioOpts::default())
        .unwrap_or_else(|e| panic!("ckpt_async_flood: {e:#}"));
    let out = Command::new(crum_bin())
        .arg("inspect")
        .arg(&o.images[3])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "memory     device 8 (128.00 KiB), managed 0 (0 B), pinned 4 (64.00 KiB)",
        "2 kernels, 4 streams, 8 events",
        "non-blocking",
        "disable-timing",
        "mix",
        "fold",
    ] {
        assert!(text.contains(want), "`{want}` missing from:\n{text}");
    }
    // The stream table: two non-blocking streams, two priorities.
    let streams: Vec<Vec<&str>> = text
        .split("\nstreams\n")
        .nth(1)
        .unwrap()
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(streams.len(), 4, "{text}");
    assert_eq!(
        streams.iter().filter(|r| r[1] == "non-blocking").count(),
        2,
        "{text}"
    );
    let prios: Vec<&str> = streams.iter().map(|r| r[2]).collect();
    assert!(prios.iter().any(|p| *p != prios[0]), "{text}");
}

/// An image taken on the default device restarts on the emulated one.
#[test]
fn image_from_the_default_device_restarts_with_device_emu() {
    scenario(
        "ckpt_async_flood",
        ScenarioOpts {
            restart_device: Some("emu"),
            every_image: false,
            ..Default::default()
        },
    );
}

/// The checkpoint's log line (`CRUM_LOG=crum_ckpt=info`) names its phases and the device
/// bytes saved; the checkpoint with a batch in flight waits for it (quiesce), and the program
/// goes on to the right result.
#[test]
fn checkpoint_log_names_pause_phases_and_device_bytes() {
    let exe = build_cuda("ckpt_async_flood").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("ckpt.log");
    let gate = Gate::new(&tmp.path().join("gate")).unwrap();
    let env = [
        gate.env(),
        ("CRUM_LOG", OsStr::new("crum_ckpt=info")),
        ("CRUM_LOG_FILE", log.as_os_str()),
    ];
    let mut p = Proc::run(&exe, &[], &[], &env, &tmp.path().join("out")).unwrap();
    for k in 1..=3 {
        gate.wait_at(k, &mut p).unwrap();
        p.checkpoint(&tmp.path().join("images")).unwrap();
        gate.open_to(k).unwrap();
    }
    let out = p.success(Duration::from_secs(120)).unwrap();
    let want = fs::read_to_string(cuda_dir().join("expected/ckpt_async_flood.out")).unwrap();
    assert_eq!(out, want);
    let text = fs::read_to_string(&log).unwrap();
    let lines = pause_lines(&text);
    assert_eq!(lines.len(), 3, "{text}");
    for l in &lines {
        for f in [
            "quiesce_us",
            "drain_us",
            "device_us",
            "stop_us",
            "fork_us",
            "pause_us",
            "device_bytes",
            "device_copied_bytes",
        ] {
            assert!(l.contains_key(f), "no {f} in {l:?}\n{text}");
        }
        // 8 device buffers of 16 KiB at least (plus pinned memory).
        assert!(l["device_bytes"] >= 8 * 16384, "{l:?}");
        // Device memory comes from the proxy's copy-on-write snapshot, not copied in the
        // pause: only pinned memory is.
        assert!(l["device_copied_bytes"] + 8 * 16384 <= l["device_bytes"], "{l:?}");
        assert!(l["pause_us"] >= l["fork_us"], "{l:?}");
    }
    // The proxy channel (80 MiB of shared memory) is in each image without its bytes: it
    // is neither copied during the pause nor written.
    for (_, img) in images_in(&tmp.path().join("images")) {
        let r = crum_ckpt::image::ImageReader::open(&img).unwrap();
        let chan: Vec<_> = r.regions().iter().filter(|g| g.name_lossy().contains("crum-channel")).collect();
        assert!(!chan.is_empty(), "no channel mapping in {}", img.display());
        for g in chan {
            assert!(!g.has_data, "the channel mapping {:#x} (+{}) is saved with its bytes", g.start, g.len);
        }
    }
}

/// `crum run --interval 1s --keep 2` on a long managed-memory solver (CPU reads and writes
/// between kernels): periodic images appear and old ones go; SIGKILL; `crum restart <dir>`
/// continues from the newest image; that process is checkpointed, killed and restarted again;
/// the result equals the uninterrupted run's (`expected/ckpt_managed_solver.out`).
#[test]
fn managed_solver_with_interval_checkpoints_restarts_from_the_newest_image() {
    let exe = build_cuda("ckpt_managed_solver").unwrap();
    let want = fs::read_to_string(cuda_dir().join("expected/ckpt_managed_solver.out")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let images = tmp.path().join("images");
    let dir = images.to_str().unwrap();
    let opts = ["--interval", "1s", "--keep", "2", "--dir", dir];
    let mut p = Proc::run(&exe, &[], &opts, &[], &tmp.path().join("first.out")).unwrap();
    // Wait for the fourth periodic image and the rotation after it. With --keep 2 an image
    // keeps unchanged memory in at most one earlier image (images 1 and 3 are full, 2 and 4
    // incremental): rotation after the fourth removes the first two, which 3 and 4 do not
    // need (after the third, image 1 stayed: image 2 needs it).
    let start = Instant::now();
    let rotated = |v: &[(u64, std::path::PathBuf)]| v.last().is_some_and(|(seq, _)| *seq >= 4) && v[0].0 != 1;
    while !rotated(&images_in(&images)) {
        assert!(
            !p.exited(),
            "ended before 4 periodic checkpoints: {}",
            p.report()
        );
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no 4th image, or image 1 not removed: {:?}",
            images_in(&images)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    p.kill9().unwrap();
    let seqs: Vec<u64> = images_in(&images).iter().map(|(s, _)| *s).collect();
    assert!(
        !seqs.contains(&1) && seqs.len() <= 3,
        "--keep 2 left {seqs:?}"
    );
    let before = p.stdout();
    assert!(!before.contains("PASS"), "{before}");

    let mut r = Proc::restart(&images, None, &tmp.path().join("r1.out")).unwrap();
    let start = Instant::now();
    while r.stdout().lines().count() < 2 {
        assert!(!r.exited(), "restart from the newest image: {}", r.report());
        assert!(start.elapsed() < Duration::from_secs(120), "{}", r.report());
        std::thread::sleep(Duration::from_millis(10));
    }
    let again = tmp.path().join("again");
    let img = r.checkpoint(&again).unwrap();
    r.kill9().unwrap();
    let r1 = r.stdout();
    assert!(
        !r1.contains("PASS"),
        "the restarted run ended before it was killed: {r1}"
    );
    let s = continues(&want, 0, &before, &r1, false).unwrap_or_else(|e| panic!("{e:#}"));

    let mut r2 = Proc::restart(&img, None, &tmp.path().join("r2.out")).unwrap();
    let tail = r2.success(Duration::from_secs(180)).unwrap();
    continues(&want, s, &r1, &tail, true).unwrap_or_else(|e| panic!("restart of a restart: {e:#}"));
    assert!(s > 0, "the restart began at the start: {r1}");
}

corpus_ckpt!(
    queued_launches_restart_from_every_gate_after_a_cut_without_draining,
    "ckpt_queue_cut",
    args: vec!["1000", "300000"]
);

/// Issue 16: a checkpoint does not wait for the queue. The program has a kernel of seconds
/// running, 1000 launches queued behind it and a thread inside `cudaDeviceSynchronize`: the
/// image holds the 1000 launches unstarted and the waiting call (`crum inspect`), the kernel
/// running is waited for (policy drain). Killed and restarted, the launches run, the waiting
/// thread gets its answer and the results are right; a checkpoint of the restarted process
/// taken at once (its queue replayed) restarts right too (restart of a restart).
#[test]
fn queued_launches_and_a_thread_in_device_synchronize_are_saved_not_waited_for() {
    let exe = build_cuda("ckpt_queue_cut").unwrap();
    let want = fs::read_to_string(cuda_dir().join("expected/ckpt_queue_cut.out")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let images = tmp.path().join("images");
    let gate = Gate::new(&tmp.path().join("gate")).unwrap();
    let log = [("CRUM_LOG", OsStr::new("crum_proxy::parked=debug"))];
    let mut p = Proc::run(&exe, &[], &[], &[gate.env(), log[0]], &tmp.path().join("out")).unwrap();
    gate.wait_at(1, &mut p).unwrap();
    // The second thread's cudaDeviceSynchronize may reach the proxy after the gate (a loaded
    // machine): checkpoint once the proxy says the call waits on the device.
    let start = Instant::now();
    while !p.stderr().contains("a call waits on the device") {
        assert!(start.elapsed() < Duration::from_secs(120), "no call waits: {}", p.report());
        std::thread::sleep(Duration::from_millis(10));
    }
    let img = p.checkpoint(&images).unwrap();
    p.kill9().unwrap();
    let dev = &device_json(&img);
    let launches = dev["queue"].as_array().unwrap().iter().filter(|w| w["op"] == "launch").count();
    assert!(launches >= 1000, "only {launches} launches saved unstarted: {dev}");
    let calls = dev["carried_calls"].as_array().unwrap();
    assert!(
        calls.iter().any(|c| c["what"].as_str().unwrap().starts_with("waiting")),
        "no waiting call saved: {calls:?}"
    );
    let text = Command::new(crum_bin()).arg("inspect").arg(&img).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("queued device work") && text.contains("calls cut by the checkpoint"), "{text}");

    gate.reset(i64::MAX).unwrap();
    let mut r = Proc::restart(&img, None, &tmp.path().join("r1.out")).unwrap();
    assert_eq!(r.success(Duration::from_secs(120)).unwrap(), want, "restart");

    // Restart of a restart: checkpoint the restarted process at once, at gate 1 again.
    restart_of_restart(&img, &images, &gate, tmp.path(), &want);
}

/// A thread inside `cudaFree` (which synchronizes the device) when the checkpoint comes, with
/// a kernel running and launches queued: the image holds the free as a call to resume
/// (`crum inspect`: "cudaFree(…) waiting"); after a restart the free happens once (the
/// program checks a second free fails and the memory is back) and the results are right.
/// Before, the free's own device synchronization waited on the queues the cut held and the
/// checkpoint failed after 120 s (`four_host_threads_restart_while_the_others_run`, now and
/// then, where threads free while the others are checkpointed).
#[test]
fn a_thread_inside_cuda_free_at_the_cut_frees_once_after_restart() {
    let exe = build_cuda("ckpt_free_cut").unwrap();
    let want = fs::read_to_string(cuda_dir().join("expected/ckpt_free_cut.out")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let images = tmp.path().join("images");
    let gate = Gate::new(&tmp.path().join("gate")).unwrap();
    let log = [("CRUM_LOG", OsStr::new("crum_proxy::parked=debug"))];
    let mut p = Proc::run(&exe, &["3000000"], &[], &[gate.env(), log[0]], &tmp.path().join("out")).unwrap();
    gate.wait_at(1, &mut p).unwrap();
    let start = Instant::now();
    while !p.stderr().contains("a call waits on the device") {
        assert!(start.elapsed() < Duration::from_secs(120), "the free never waits: {}", p.report());
        std::thread::sleep(Duration::from_millis(10));
    }
    let img = p.checkpoint(&images).unwrap();
    p.kill9().unwrap();
    let dev = &device_json(&img);
    let calls = dev["carried_calls"].as_array().unwrap();
    assert!(
        calls.iter().any(|c| c["what"].as_str().unwrap().starts_with("cudaFree(")),
        "no cudaFree saved: {calls:?}"
    );
    gate.reset(i64::MAX).unwrap();
    let mut r = Proc::restart(&img, None, &tmp.path().join("r1.out")).unwrap();
    assert_eq!(r.success(Duration::from_secs(180)).unwrap(), want, "restart");
}

/// Issue 16: a module unload and a device reset — calls that synchronize the device and then
/// change it — caught waiting by a checkpoint's cut (a second thread's call behind a kernel of
/// seconds and 200 queued launches). The image saves each as a call to resume; after the
/// restart it happens once: an image taken at gate 2 no longer holds the library's module
/// (unload) or the old buffers (reset), and the program's own checks pass. Before, the call's
/// synchronization inside its handler waited for ever on the queues the cut held.
fn sync_then_cut(mode: &str, saved: &str, check: &dyn Fn(&serde_json::Value, &serde_json::Value)) {
    let exe = build_cuda("ckpt_sync_then_cut").unwrap();
    let want = fs::read_to_string(cuda_dir().join(format!("expected/ckpt_sync_then_cut.{mode}.out"))).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let images = tmp.path().join("images");
    let gate = Gate::new(&tmp.path().join("gate")).unwrap();
    let log = [("CRUM_LOG", OsStr::new("crum_proxy::parked=debug"))];
    let mut p = Proc::run(&exe, &[mode, "3000000"], &[], &[gate.env(), log[0]], &tmp.path().join("out")).unwrap();
    gate.wait_at(1, &mut p).unwrap();
    let start = Instant::now();
    while !p.stderr().contains("a call waits on the device") {
        assert!(start.elapsed() < Duration::from_secs(120), "the {mode} never waits: {}", p.report());
        std::thread::sleep(Duration::from_millis(10));
    }
    let img = p.checkpoint(&images).unwrap();
    p.kill9().unwrap();
    let before = device_json(&img);
    let calls = before["carried_calls"].as_array().unwrap();
    assert!(
        calls.iter().any(|c| c["what"].as_str().unwrap().starts_with(saved)),
        "no {saved} saved: {calls:?}"
    );
    // To gate 2 (after the call), checkpointed there: the device without what it removed.
    gate.reset(1).unwrap();
    let mut r = Proc::restart(&img, None, &tmp.path().join("r1.out")).unwrap();
    gate.wait_at(2, &mut r).unwrap();
    let img2 = r.checkpoint(&images).unwrap();
    check(&before, &device_json(&img2));
    gate.open_to(i64::MAX).unwrap();
    assert_eq!(r.success(Duration::from_secs(180)).unwrap(), want, "restart");
    // And a restart of that image (the call done, nothing of it carried) to the end.
    gate.reset(i64::MAX).unwrap();
    let mut r2 = Proc::restart(&img2, None, &tmp.path().join("r2.out")).unwrap();
    let out = r2.success(Duration::from_secs(180)).unwrap();
    assert!(out.ends_with("PASS\n"), "restart of the gate-2 image: {out}");
}

#[test]
fn a_module_unload_waiting_at_the_cut_unloads_once_after_restart() {
    sync_then_cut("unload", "module ", &|before, after| {
        let n = |v: &serde_json::Value| v["modules"].as_array().unwrap().len();
        assert_eq!(n(after) + 1, n(before), "modules before {before:#}\nafter {after:#}");
        assert!(after["carried_calls"].as_array().unwrap().is_empty(), "{after:#}");
    });
}

#[test]
fn a_device_reset_waiting_at_the_cut_resets_once_after_restart() {
    sync_then_cut("reset", "cudaDeviceReset", &|before, after| {
        let device = |v: &serde_json::Value| {
            v["regions"].as_array().unwrap().iter().filter(|r| r["kind"] == "device").count()
        };
        assert_eq!(device(before), 3, "{before:#}");
        assert_eq!(device(after), 1, "only the buffer made after the reset: {after:#}");
        assert!(after["carried_calls"].as_array().unwrap().is_empty(), "{after:#}");
    });
}

/// Wait until a restarted process's agent answers (until then `crum restart` may still be the
/// test's own child before its exec, or the restore may not be complete).
fn wait_agent(p: &mut Proc) {
    let pid = p.child.id();
    let t0 = Instant::now();
    while !crum_ckpt::control::agent_running(&crum_ckpt::control::socket_dir(), pid) {
        assert!(!p.exited(), "{}", p.report());
        assert!(t0.elapsed() < Duration::from_secs(120), "the program's agent never answered: {}", p.report());
        std::thread::sleep(Duration::from_millis(3));
    }
}

/// Restart `img` with every gate closed, checkpoint the restarted program at once (its saved
/// work running again), kill it, and restart that image to the end: the output must be `want`.
fn restart_of_restart(img: &std::path::Path, images: &std::path::Path, gate: &Gate, tmp: &std::path::Path, want: &str) {
    gate.reset(0).unwrap();
    let mut r = Proc::restart(img, None, &tmp.join("r2.out")).unwrap();
    wait_agent(&mut r);
    let img2 = r.checkpoint(images).unwrap();
    r.kill9().unwrap();
    gate.reset(i64::MAX).unwrap();
    let mut r = Proc::restart(&img2, None, &tmp.join("r3.out")).unwrap();
    assert_eq!(r.success(Duration::from_secs(300)).unwrap(), want, "restart of a restart");
}

/// The device part of an image as `crum inspect --json` gives it.
fn device_json(img: &std::path::Path) -> serde_json::Value {
    let o = Command::new(crum_bin()).args(["inspect", "--json"]).arg(img).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["device"].clone()
}

/// Issue 16, the kernel running at the cut, under each policy (`CRUM_CKPT_KERNEL`): a grid of
/// 512 blocks, idempotent (it only writes), running when the checkpoint comes is
/// - `block`: stopped at a block boundary (the image holds the rest, "from block N");
/// - `flush`: abandoned, to run again from its start (the image holds the whole launch);
/// - `save`: its running blocks saved where they are (context save) with the rest of the grid;
/// - `drain`: waited for (nothing of it saved);
/// - `auto` (the default): its blocks are short, so stopped at a block boundary (flushed if a
///   loaded machine made them look long).
///
/// The image names the choice and why. Killed and restarted, every image gives the
/// uninterrupted run's result; the block image's restart is checkpointed at once, killed and
/// restarted again.
#[test]
fn a_running_grid_is_stopped_flushed_saved_or_drained_by_policy_and_restarts_right() {
    let exe = build_cuda("ckpt_long_grid").unwrap();
    let want = fs::read_to_string(cuda_dir().join("expected/ckpt_long_grid.out")).unwrap();
    for policy in ["block", "flush", "save", "drain", "auto"] {
        let tmp = tempfile::tempdir().unwrap();
        let images = tmp.path().join("images");
        let gate = Gate::new(&tmp.path().join("gate")).unwrap();
        let env = [gate.env(), ("CRUM_CKPT_KERNEL", OsStr::new(policy))];
        let mut p = Proc::run(&exe, &[], &[], &env, &tmp.path().join("out")).unwrap();
        gate.wait_at(1, &mut p).unwrap();
        let img = p.checkpoint(&images).unwrap();
        p.kill9().unwrap();
        let dev = device_json(&img);
        let launches: Vec<String> = dev["queue"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|w| w["op"] == "launch")
            .map(|w| w["detail"].as_str().unwrap().to_string())
            .collect();
        let notes = dev["cut_notes"].to_string();
        let grind: Vec<&String> = launches.iter().filter(|l| l.contains("grid 512x1x1")).collect();
        match policy {
            "auto" if notes.contains("flushed") => {
                // Its blocks looked long on a loaded machine: flushed (it is idempotent).
                assert!(grind.len() == 1 && !grind[0].contains("from block"), "{launches:?}");
                assert!(notes.contains("policy auto") && notes.contains("idempotent"), "{notes}");
            }
            "block" | "auto" => {
                assert!(
                    grind.len() == 1 && grind[0].contains("from block"),
                    "{policy}: the running grid was not saved stopped at a block boundary: {launches:?}"
                );
                assert!(notes.contains("stopped at a block boundary") && notes.contains(&format!("policy {policy}")), "{notes}");
            }
            "save" => {
                // Its blocks are short (each thread runs its loop in one go): a save finds
                // them between rounds only by chance; a block finished meanwhile is done.
                assert!(
                    grind.len() == 1 && (grind[0].contains("saved in the middle") || grind[0].contains("from block")),
                    "save: the running grid was not saved: {launches:?}"
                );
                assert!(notes.contains("context save"), "{notes}");
            }
            "flush" => {
                assert!(
                    grind.len() == 1 && !grind[0].contains("from block"),
                    "flush: the running grid was not saved whole: {launches:?}"
                );
                assert!(notes.contains("flushed") && notes.contains("idempotent"), "{notes}");
            }
            _ => {
                assert!(grind.is_empty(), "drain saved the running grid: {launches:?}");
                assert!(notes.contains("drained"), "{notes}");
            }
        }
        gate.reset(i64::MAX).unwrap();
        let mut r = Proc::restart(&img, None, &tmp.path().join("r1.out")).unwrap();
        assert_eq!(r.success(Duration::from_secs(300)).unwrap(), want, "{policy}: restart");
        if policy == "block" || policy == "save" {
            // Restart of a restart, checkpointed while the rest of the grid runs.
            restart_of_restart(&img, &images, &gate, tmp.path(), &want);
        }
    }
}

/// Issue 16, context save: a kernel of one long block that no block boundary can cut, saved in
/// the middle (`CRUM_CKPT_KERNEL=save`): the image holds its block's context (registers,
/// shared memory, pc of every thread); the restart resumes it there, with the CPU-checked
/// result, and so does a restart of a restart.
#[test]
fn a_kernel_of_one_long_block_is_saved_in_the_middle_and_resumed_after_restart() {
    let exe = build_cuda("ckpt_long_kernel").unwrap();
    let want = fs::read_to_string(cuda_dir().join("expected/ckpt_long_kernel.out")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let images = tmp.path().join("images");
    let gate = Gate::new(&tmp.path().join("gate")).unwrap();
    let env = [gate.env(), ("CRUM_CKPT_KERNEL", OsStr::new("save"))];
    let mut p = Proc::run(&exe, &[], &[], &env, &tmp.path().join("out")).unwrap();
    gate.wait_at(1, &mut p).unwrap();
    let img = p.checkpoint(&images).unwrap();
    p.kill9().unwrap();
    let dev = device_json(&img);
    let notes = dev["cut_notes"].to_string();
    let launches: Vec<String> = dev["queue"].as_array().unwrap().iter().map(|w| w["detail"].to_string()).collect();
    if notes.contains("_Z4spin") {
        // Running at the cut: saved in the middle.
        assert!(notes.contains("context save"), "{notes}");
        assert!(
            launches.len() == 1 && launches[0].contains("1 blocks saved in the middle"),
            "{launches:?}"
        );
    } else {
        assert_eq!(launches.len(), 1, "not started at the cut, saved whole: {launches:?}");
    }
    gate.reset(i64::MAX).unwrap();
    let mut r = Proc::restart(&img, None, &tmp.path().join("r1.out")).unwrap();
    assert_eq!(r.success(Duration::from_secs(300)).unwrap(), want, "restart");
    // Restart of a restart, checkpointed while the resumed block runs (at gate 1 again).
    restart_of_restart(&img, &images, &gate, tmp.path(), &want);
}

/// A checkpoint requested while the main thread waits in `cudaDeviceSynchronize` for a kernel
/// of seconds (on the emulated device), under policy drain (`CRUM_CKPT_KERNEL=drain`; the
/// default would flush this write-only kernel): the cut waits for the running kernel and
/// names it drained in the image, saves nothing of it to run again, and saves the waiting
/// call itself; the program finishes correctly, and so does a restart of the image, twice.
/// (It decided by how long the checkpoint took before, which a loaded machine stretches.)
#[test]
fn checkpoint_during_a_long_kernel_waits_for_it_and_restarts() {
    let exe = build_cuda("ckpt_long_kernel").unwrap();
    let want = fs::read_to_string(cuda_dir().join("expected/ckpt_long_kernel.out")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("ckpt.log");
    let images = tmp.path().join("images");
    let gate = Gate::new(&tmp.path().join("gate")).unwrap();
    let env = [
        gate.env(),
        ("CRUM_CKPT_KERNEL", OsStr::new("drain")),
        ("CRUM_LOG", OsStr::new("crum_ckpt=info,crum=info")),
        ("CRUM_LOG_FILE", log.as_os_str()),
    ];
    let mut p = Proc::run(&exe, &[], &[], &env, &tmp.path().join("out")).unwrap();
    gate.wait_at(1, &mut p).unwrap();
    gate.open_to(1).unwrap();
    std::thread::sleep(Duration::from_millis(300)); // most likely into cudaDeviceSynchronize
    let img = p.checkpoint(&images).unwrap();
    gate.open_to(i64::MAX).unwrap();
    assert_eq!(p.success(Duration::from_secs(120)).unwrap(), want);

    let text = fs::read_to_string(&log).unwrap();
    assert_eq!(pause_lines(&text).len(), 1, "{text}");
    let dev = device_json(&img);
    if dev["backend"] == "emu" {
        let notes = dev["cut_notes"].to_string();
        let queue = dev["queue"].to_string();
        // Nothing of the kernel is saved to run again: it ran to its end before the cut.
        assert!(!queue.contains("spin"), "drain saved the running kernel: {queue}");
        if notes.contains("spin") {
            assert!(notes.contains("drained (waited for), policy drain"), "{notes}");
        }
    }

    for round in 0..2 {
        let mut r = Proc::restart(&img, None, &tmp.path().join(format!("r{round}.out"))).unwrap();
        assert_eq!(
            r.success(Duration::from_secs(120)).unwrap(),
            want,
            "restart {round}"
        );
    }
}

/// `crum run --on-signal USR1`: SIGUSR1 sent to `crum run` (forwarded to the program) while
/// the flood program has a batch queued writes an image; killed at the next gate, the program
/// restarts from that image and ends as the uninterrupted run.
#[test]
fn on_signal_checkpoint_of_a_cuda_program_restarts() {
    let exe = build_cuda("ckpt_async_flood").unwrap();
    let want = fs::read_to_string(cuda_dir().join("expected/ckpt_async_flood.out")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let images = tmp.path().join("images");
    let gate = Gate::new(&tmp.path().join("gate")).unwrap();
    let opts = ["--on-signal", "USR1", "--dir", images.to_str().unwrap()];
    let mut p = Proc::run(&exe, &[], &opts, &[gate.env()], &tmp.path().join("out")).unwrap();
    gate.wait_at(1, &mut p).unwrap();
    let st = Command::new("kill")
        .args(["-USR1", &p.child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let start = Instant::now();
    while images_in(&images).is_empty() {
        assert!(!p.exited(), "{}", p.report());
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no image after SIGUSR1: {}",
            p.report()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    gate.open_to(1).unwrap();
    gate.wait_at(2, &mut p).unwrap();
    p.kill9().unwrap();
    let img = &images_in(&images)[0].1;
    gate.reset(i64::MAX).unwrap();
    let mut r = Proc::restart(&images, None, &tmp.path().join("r.out")).unwrap();
    assert_eq!(
        r.success(Duration::from_secs(120)).unwrap(),
        want,
        "restart of {}",
        img.display()
    );
}

/// Checkpoints back to back, at whatever moment they land (inside calls, between pipelined
/// launches, while the CPU writes managed memory), over a whole run of the managed solver;
/// images spread over the run each restart and finish as the uninterrupted run.
#[test]
fn back_to_back_checkpoints_at_arbitrary_moments_all_restart() {
    let exe = build_cuda("ckpt_managed_solver").unwrap();
    let args = ["48", "2500", "50"];
    let tmp = tempfile::tempdir().unwrap();
    let images = tmp.path().join("images");
    let mut reference = Proc::run(&exe, &args, &[], &[], &tmp.path().join("ref.out")).unwrap();
    let want = reference.success(Duration::from_secs(120)).unwrap();
    assert!(want.ends_with("PASS\n"), "{want}");

    let mut p = Proc::run(&exe, &args, &[], &[], &tmp.path().join("out")).unwrap();
    let pid = p.app_pid().unwrap();
    // (image, bytes printed before it was asked for, bytes printed when it was done)
    let mut taken = Vec::new();
    while !p.exited() {
        let before = p.stdout_len();
        // A checkpoint may race with the end of the program: only successes count.
        if let Ok(img) = crum_integration_tests::checkpoint(pid, &images) {
            taken.push((img, before as usize, p.stdout_len() as usize));
        }
    }
    assert_eq!(p.stdout(), want);
    let n = taken.len();
    assert!(n >= 4, "only {n} checkpoints during the run");
    let mut picks = vec![0, n / 3, 2 * n / 3, n - 1];
    picks.dedup();
    for i in picks {
        let (img, lo, hi) = &taken[i];
        let mut r = Proc::restart(img, None, &tmp.path().join(format!("r{i}.out"))).unwrap();
        let got = r.success(Duration::from_secs(120)).unwrap();
        // The image was taken after the program had printed between `lo` and `hi` bytes.
        let printed = want.len().checked_sub(got.len());
        assert!(
            want.ends_with(&got) && printed.is_some_and(|k| (*lo..=*hi).contains(&k)),
            "restart of image {i} of {n} (taken after {lo}..{hi} bytes):\n{got}"
        );
    }
}

/// `crum restart --device cuda` needs a usable GPU: without one it fails before the program
/// runs, naming the reason; with one the program ends as the uninterrupted run.
#[test]
fn restart_on_device_cuda_runs_or_fails_cleanly_without_a_gpu() {
    let o = gated_scenario(
        "vector_add",
        &ScenarioOpts {
            every_image: false,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("vector_add: {e:#}"));
    let mut r = Proc::restart(&o.images[3], Some("cuda"), &o.dir.path().join("cuda.out")).unwrap();
    let code = r.wait(Duration::from_secs(120)).unwrap();
    if code == Some(0) {
        assert!(o.reference.ends_with(&r.stdout()), "{}", r.report());
    } else {
        assert!(r.stdout().is_empty(), "the program ran: {}", r.report());
        assert!(r.stderr().contains("no usable GPU"), "{}", r.report());
    }
}

/// State letter of a process (`/proc/<pid>/stat`), None once it is gone.
fn proc_state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next())
}

/// Checkpoints the program `p` (at gate `at`) with its image writer held before it writes the
/// device data (`CRUM_TEST_STOP_WRITER`, set in the program's environment): lets the program
/// go on to gate `at + 1` (changing its device memory), then lets the writer finish. Returns
/// the image; checks that the proxy's snapshot process is gone once the image is complete.
fn checkpoint_while_device_memory_changes(p: &mut Proc, gate: &Gate, at: i64, images: &std::path::Path) -> std::path::PathBuf {
    gate.wait_at(at, p).unwrap();
    let pid = p.app_pid().unwrap();
    // A restarted program waiting in the gate since before its image: its agent answers once
    // the restart is complete.
    let t0 = Instant::now();
    while !crum_ckpt::control::agent_running(&crum_ckpt::control::socket_dir(), pid) {
        assert!(!p.exited(), "{}", p.report());
        assert!(t0.elapsed() < Duration::from_secs(120), "the program's agent never answered: {}", p.report());
        std::thread::sleep(Duration::from_millis(3));
    }
    let dir = images.to_path_buf();
    let ckpt = std::thread::spawn(move || crum_integration_tests::checkpoint(pid, &dir));
    let t0 = Instant::now();
    let writer = loop {
        if let Some(w) = crum_integration_tests::children(pid).into_iter().find(|&c| proc_state(c) == Some('T')) {
            break w;
        }
        assert!(!ckpt.is_finished(), "the checkpoint ended before its writer stopped: {:?}", ckpt.join());
        assert!(t0.elapsed() < Duration::from_secs(120), "the image writer never stopped: {}", p.report());
        std::thread::sleep(Duration::from_millis(3));
    };
    // The proxy's snapshot of device memory is its child while the writer needs it.
    let proxy = proxy_of(p, pid);
    assert!(!crum_integration_tests::children(proxy).is_empty(), "no snapshot process under the proxy {proxy}");
    gate.open_to(at).unwrap();
    gate.wait_at(at + 1, p).unwrap();
    assert!(p.stdout().ends_with("device memory changed\n"), "{}", p.report());
    let st = Command::new("kill").args(["-CONT", &writer.to_string()]).status().unwrap();
    assert!(st.success());
    let image = ckpt.join().unwrap().unwrap_or_else(|e| panic!("{e:#}"));
    // Let go with the writer's end.
    let t0 = Instant::now();
    while !crum_integration_tests::children(proxy).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(60), "the proxy's snapshot outlived the image writer");
        std::thread::sleep(Duration::from_millis(3));
    }
    image
}

/// The proxy serving program `app` run by `p`: `crum run`'s `crum proxy` child, or the
/// `crum proxy --watch-pid <app>` a restart started.
fn proxy_of(p: &Proc, app: u32) -> u32 {
    let cmdline = |q: u32| fs::read(format!("/proc/{q}/cmdline")).unwrap_or_default();
    let is_proxy = |c: &[u8]| c.split(|&b| b == 0).nth(1) == Some(b"proxy");
    if let Some(q) = crum_integration_tests::children(p.child.id()).into_iter().find(|&q| q != app && is_proxy(&cmdline(q))) {
        return q;
    }
    let watch = app.to_string();
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|&q| {
            let c = cmdline(q);
            is_proxy(&c) && c.split(|&b| b == 0).skip_while(|a| *a != b"--watch-pid").nth(1) == Some(watch.as_bytes())
        })
        .unwrap_or_else(|| panic!("no proxy for program {app}"))
}

/// Device memory leaves the checkpoint's pause (issue 15): the proxy keeps a copy-on-write
/// snapshot of it for the image writer. The writer is held before it writes the device data
/// while the program rewrites every byte of its device memory (kernel, memset, copy); the
/// image still holds memory as it was at the cut — the restarted program checks that itself —
/// in a restart and in a restart of that restart; the snapshot ends with the writer.
#[test]
fn device_memory_changed_while_the_image_is_written_restarts_as_at_the_cut() {
    let exe = build_cuda("ckpt_cow").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let gate = Gate::new(&tmp.path().join("gate")).unwrap();
    let images = tmp.path().join("images");
    let env = [gate.env(), ("CRUM_TEST_STOP_WRITER", OsStr::new("1"))];
    let mut p = Proc::run(&exe, &[], &[], &env, &tmp.path().join("out")).unwrap();
    let first = checkpoint_while_device_memory_changes(&mut p, &gate, 1, &images);
    p.kill9().unwrap();

    // The restart is held in gate 1 again (it was saved waiting there): checkpoint it there
    // the same way.
    gate.reset(0).unwrap();
    fs::write(gate.dir.join("at"), "1\n").unwrap();
    let mut r1 = Proc::restart(&first, None, &tmp.path().join("out1")).unwrap();
    let second = checkpoint_while_device_memory_changes(&mut r1, &gate, 1, &images);
    r1.kill9().unwrap();
    assert_eq!(r1.stdout(), "device memory as at the cut\ndevice memory changed\n");

    gate.reset(i64::MAX).unwrap();
    let mut r2 = Proc::restart(&second, None, &tmp.path().join("out2")).unwrap();
    let out = r2.success(Duration::from_secs(120)).unwrap();
    assert_eq!(out, "device memory as at the cut\ndevice memory changed\nPASS\n");
}
