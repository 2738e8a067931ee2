//! Programs linked with the static CUDA runtime (`nvcc -cudart static`, nvcc's and CMake's
//! default; issue 13): at load, libcrum_libc.so redirects the runtime entry points of the
//! executable to libcrum.so (`preload/src/static_runtime.c`), so NVIDIA's runtime never
//! starts. The whole corpus (the list `cuda_corpus_list/`, shared with `cuda_corpus.rs`) runs
//! here built that way, under `crum run` on the emulated device, and must print what its
//! shared-runtime build prints; a program per area is checkpointed and restarted as its shared
//! build is (`cuda_ckpt.rs`). Stripped copies run and restart too, their runtime found by
//! fingerprint; one whose runtime matches no fingerprint is refused, naming why.

mod cuda_corpus_list;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crum_integration_tests::{
    build_cuda_with, check_expected, crum_bin, crum_run_command, cuda_home, gated_scenario, run_cuda_pass_with,
    stripped_copy, wait_with_timeout, workspace, Proc, ScenarioOpts,
};

const STATIC: &[&str] = &["-cudart", "static"];

/// A corpus program built with the static runtime (and its own flags), run to its `PASS`.
fn run_static(name: &str, nvcc: &[&str], args: &[&str]) -> String {
    let flags: Vec<&str> = STATIC.iter().chain(nvcc).copied().collect();
    run_cuda_pass_with(name, &flags, args)
}

cuda_corpus_list::corpus!(run_static);

/// The gated scenario of `cuda_ckpt.rs` (checkpoints at three gates, kill, restarts, a
/// restart of a restart) for a static build.
fn static_scenario(name: &str, o: ScenarioOpts) {
    let mut nvcc = STATIC.to_vec();
    nvcc.extend(o.nvcc.iter().copied());
    if let Err(e) = gated_scenario(name, &ScenarioOpts { nvcc, ..o }) {
        panic!("{name} (-cudart static): {e:#}");
    }
}

#[test]
fn static_managed_memory_restarts_at_three_points() {
    static_scenario("managed", ScenarioOpts::default());
}

#[test]
fn static_captured_graphs_launch_after_restart() {
    static_scenario("graph_capture", ScenarioOpts::default());
}

#[test]
fn static_separately_compiled_program_restarts_with_its_linked_module() {
    static_scenario("rdc_linked", ScenarioOpts::default());
}

#[test]
fn static_libraries_loaded_at_run_time_survive_restarts() {
    static_scenario("library_api", ScenarioOpts::default());
}

#[test]
fn static_driver_api_vmm_mappings_survive_restarts() {
    static_scenario("driver_vmm", ScenarioOpts::default());
}

#[test]
fn static_driver_graphs_survive_restarts_at_their_handles() {
    static_scenario("driver_graphs", ScenarioOpts::default());
}

#[test]
fn static_driver_pointer_attributes_and_advice_survive_restarts() {
    static_scenario("driver_pointers", ScenarioOpts::default());
}

#[test]
fn a_static_runtime_program_restarts_at_three_points_and_restarts_again() {
    static_scenario("streams_pipeline", ScenarioOpts::default());
}

/// A static build, stripped (no `.symtab`, as most binaries users have): `crum run` finds the
/// runtime's entry points by fingerprint (`cli/src/fingerprint.rs`) and the program runs to
/// its `PASS`, printing what the unstripped build prints (`cuda/expected/`). With
/// `CRUM_LOG=info`, the redirection's own line says the entry points were found by
/// fingerprint (457 redirected: all but `__cudaGetProcAddress`, 3 bytes that return 0).
fn run_stripped(name: &str, nvcc: &[&str], args: &[&str]) -> String {
    let flags: Vec<&str> = STATIC.iter().chain(nvcc).copied().collect();
    let exe = build_cuda_with(name, &flags).unwrap_or_else(|e| panic!("{e:#}"));
    let stripped = stripped_copy(&exe).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(!has_symbol_table(&stripped), "strip left a symbol table in {}", stripped.display());
    let child = crum_run_command(Some("emu"), &stripped, args)
        .env("CRUM_LOG", "info")
        .spawn()
        .expect("spawn crum run");
    let r = wait_with_timeout(child, Duration::from_secs(600)).expect("crum run");
    assert!(
        r.code == Some(0) && r.stdout.lines().last() == Some("PASS"),
        "{name} (static, stripped): code {:?}\nstdout:\n{}\nstderr:\n{}",
        r.code,
        r.stdout,
        r.stderr
    );
    assert!(
        r.stderr.contains("static CUDA runtime (found by fingerprint): 457 entry points redirected to libcrum.so, 1 not"),
        "{name}: no redirection by fingerprint logged:\n{}",
        r.stderr
    );
    check_expected(name, &r.stdout);
    r.stdout
}

/// Whether the ELF file has a `.symtab`.
fn has_symbol_table(path: &Path) -> bool {
    use object::Object;
    let data = std::fs::read(path).unwrap();
    object::File::parse(&*data).unwrap().section_by_name(".symtab").is_some()
}

#[test]
fn stripped_static_vector_add_prints_what_its_unstripped_build_prints() {
    run_stripped("vector_add", &[], &[]);
}

#[test]
fn stripped_static_managed_memory_program_prints_what_its_unstripped_build_prints() {
    run_stripped("managed", &[], &[]);
}

#[test]
fn stripped_static_graph_capture_prints_what_its_unstripped_build_prints() {
    run_stripped("graph_capture", &[], &[]);
}

#[test]
fn stripped_static_separately_compiled_program_prints_what_its_unstripped_build_prints() {
    run_stripped("rdc_linked", &[], &[]);
}

#[test]
fn stripped_static_device_printf_prints_what_its_unstripped_build_prints() {
    run_stripped("device_printf", &[], &[]);
}

#[test]
fn stripped_static_driver_api_program_prints_what_its_unstripped_build_prints() {
    run_stripped("driver_api", &[], &[]);
}

/// The gated scenario (checkpoints at three gates, kill, restarts, a restart of a restart)
/// on a stripped static build: the jumps written over the runtime found by fingerprint are
/// in the image like those found by name.
#[test]
fn a_stripped_static_runtime_program_restarts_at_three_points_and_restarts_again() {
    static_scenario("streams_pipeline", ScenarioOpts { strip: true, ..Default::default() });
}

/// A copy of the static vector_add with bytes overwritten, then stripped: the first 32 bytes
/// of function `func` (found by the unstripped build's symbol table), or with `None` its whole
/// `.text`.
fn corrupted_stripped_copy(dir: &Path, name: &str, func: Option<&str>) -> std::path::PathBuf {
    use object::{Object, ObjectSection, ObjectSymbol};
    let exe = build_cuda_with("vector_add", STATIC).unwrap_or_else(|e| panic!("{e:#}"));
    let mut data = std::fs::read(&exe).unwrap();
    let (at, len) = {
        let file = object::File::parse(&*data).unwrap();
        match func {
            Some(func) => {
                let sym = file.symbols().find(|s| s.name() == Ok(func)).expect("the symbol in the unstripped build");
                let sec = file.section_by_index(sym.section_index().unwrap()).unwrap();
                let (sec_off, _) = sec.file_range().unwrap();
                ((sec_off + sym.address() - sec.address()) as usize, 32)
            }
            None => {
                let (off, len) = file.section_by_name(".text").unwrap().file_range().unwrap();
                (off as usize, len as usize)
            }
        }
    };
    data[at..at + len].iter_mut().for_each(|b| *b = 0xcc);
    let copy = dir.join(name);
    std::fs::write(&copy, &data).unwrap();
    assert!(Command::new("strip").arg(&copy).status().expect("strip").success());
    copy
}

/// `crum run` on `exe`, which must be refused: its stderr.
fn refused(exe: &Path) -> String {
    let child = Command::new(crum_bin())
        .args(["run", "--device", "emu", "--"])
        .arg(exe)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn crum run");
    let r = wait_with_timeout(child, Duration::from_secs(60)).expect("crum run");
    assert!(r.code != Some(0) && r.stdout.is_empty(), "a stripped unmatched program ran: {}", r.stdout);
    r.stderr
}

/// A stripped static program whose runtime crum's fingerprints do not match is refused
/// before it starts, with the functions that differ, the version the kernels name, and the
/// advice: one entry point changed (`cudaMalloc`'s first 32 bytes) names that function; all
/// the code changed matches no version.
#[test]
fn a_stripped_static_program_whose_runtime_does_not_match_is_refused_naming_why() {
    let dir = tempfile::tempdir().unwrap();

    let err = refused(&corrupted_stripped_copy(dir.path(), "one-changed", Some("cudaMalloc")));
    assert!(
        err.contains("linked with the static CUDA runtime and stripped (its kernels were compiled by CUDA 13.5")
            && err.contains("looks like CUDA 13.5.37's, but 1 of its 458 entry points differ: cudaMalloc.")
            && err.contains("CRUM_CUDART_STATIC=")
            && err.contains("-cudart shared"),
        "{err}"
    );

    let err = refused(&corrupted_stripped_copy(dir.path(), "all-changed", None));
    assert!(
        err.contains("matches none of crum's fingerprints (of CUDA 13.5.37, 13.4.92,") && err.contains("-cudart shared"),
        "{err}"
    );
}

/// A stripped static program that `crum run` does not start itself — a shell script
/// executes it, as batch scripts do (`exec`: a child process of the script would get no
/// device, docs/checkpoint.md) — has its runtime found by fingerprint as it loads
/// (`preload/src/static_runtime.c`, with the fingerprints `crum run` wrote) and prints what
/// its unstripped build prints; one whose runtime matches no fingerprint ends at load, naming
/// why, instead of failing at its first CUDA call.
#[test]
fn a_stripped_static_program_a_script_executes_is_found_at_load_or_refused_there() {
    let exe = build_cuda_with("vector_add", STATIC).unwrap_or_else(|e| panic!("{e:#}"));
    let stripped = stripped_copy(&exe).unwrap_or_else(|e| panic!("{e:#}"));
    let run_by_script = |prog: &Path| {
        let child = crum_run_command(Some("emu"), Path::new("/bin/sh"), &["-c", "exec \"$0\"", prog.to_str().unwrap()])
            .env("CRUM_LOG", "info")
            .spawn()
            .expect("spawn crum run");
        wait_with_timeout(child, Duration::from_secs(600)).expect("crum run")
    };
    let r = run_by_script(&stripped);
    assert!(
        r.code == Some(0) && r.stdout.lines().last() == Some("PASS"),
        "code {:?}\nstdout:\n{}\nstderr:\n{}",
        r.code,
        r.stdout,
        r.stderr
    );
    assert!(
        r.stderr.contains("static CUDA runtime (found by fingerprint at load): 457 entry points redirected to libcrum.so, 1 not"),
        "no redirection at load logged:\n{}",
        r.stderr
    );
    check_expected("vector_add", &r.stdout);

    let dir = tempfile::tempdir().unwrap();
    let bad = corrupted_stripped_copy(dir.path(), "all-changed", None);
    let mut perms = std::fs::metadata(&bad).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&bad, perms).unwrap();
    let r = run_by_script(&bad);
    assert!(r.code != Some(0) && r.stdout.is_empty(), "a stripped unmatched program ran: {}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("no static CUDA runtime crum knows was found in it: not run") && r.stderr.contains("-cudart shared"),
        "{}",
        r.stderr
    );
}

/// A driver-API program as it is built against NVIDIA's driver library (`-lcuda`: it NEEDs
/// `libcuda.so.1`, linked here against a stand-in with that SONAME) gets crum's under `crum
/// run` (the `libcuda.so.1` first on its library path is libcrum.so) and runs on the device.
#[test]
fn a_program_linked_with_libcuda_gets_crums_driver() {
    let src = workspace().join("integration-tests/c/driver");
    let dir = tempfile::tempdir().unwrap();
    let cc = |args: &[&std::ffi::OsStr]| {
        let o = Command::new("cc").args(args).output().expect("cc");
        assert!(o.status.success(), "cc {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    };
    let stub = dir.path().join("libcuda.so");
    let exe = dir.path().join("linked");
    cc(&["-shared".as_ref(), "-fPIC".as_ref(), "-Wl,-soname,libcuda.so.1".as_ref(), "-o".as_ref(), stub.as_os_str(), src.join("libcuda_stub.c").as_os_str()]);
    let l = format!("-L{}", dir.path().display());
    cc(&["-O2".as_ref(), "-o".as_ref(), exe.as_os_str(), src.join("linked.c").as_os_str(), l.as_ref(), "-lcuda".as_ref()]);
    // It NEEDs libcuda.so.1, as a program built against NVIDIA's does.
    let needed = Command::new("readelf").args(["-d"]).arg(&exe).output().unwrap();
    assert!(String::from_utf8_lossy(&needed.stdout).contains("[libcuda.so.1]"));
    let child = Command::new(crum_bin())
        .args(["run", "--device", "emu", "--"])
        .arg(&exe)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn crum run");
    let r = wait_with_timeout(child, Duration::from_secs(60)).expect("crum run");
    assert!(r.code == Some(0) && r.stdout.ends_with("PASS\n"), "{}\n{}", r.stdout, r.stderr);
}

/// A shared library that carries its own static CUDA runtime (built by nvcc's defaults, as a
/// library or a Python extension is), loaded at the program's start and by `dlopen`: the audit
/// library `crum run` sets (`LD_AUDIT`, `preload/src/audit.c`) redirects its runtime to
/// libcrum.so as it loads, before its constructors register its kernels. The program runs,
/// is checkpointed mid-run, killed and restarted, and ends as the uninterrupted run.
#[test]
fn shared_libraries_with_their_own_static_runtime_run_and_restart() {
    shared_library_scenario(false);
}

/// The same with the library stripped: the audit library finds its runtime by fingerprint
/// (`preload/src/audit.c`, the fingerprints `crum run` hands it in a file); unredirected,
/// NVIDIA's runtime in it would fail every call and no round would pass.
#[test]
fn stripped_shared_libraries_with_their_own_static_runtime_run_and_restart() {
    shared_library_scenario(true);
}

fn shared_library_scenario(strip: bool) {
    let src = workspace().join("integration-tests/c/driver");
    let dir = tempfile::tempdir().unwrap();
    let home = cuda_home().unwrap();
    let lib = dir.path().join("libstatic_kernels.so");
    let path = format!("{}:{}", home.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let o = Command::new(home.join("bin/nvcc"))
        .args(["-arch=sm_80", "-O2", "-shared", "-Xcompiler", "-fPIC", "-o"])
        .arg(&lib)
        .arg(src.join("static_lib.cu"))
        .env("PATH", &path)
        .output()
        .expect("nvcc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    if strip {
        assert!(Command::new("strip").arg(&lib).status().expect("strip").success());
        assert!(!has_symbol_table(&lib), "strip left a symbol table in {}", lib.display());
    }
    // One program linked with the library (loaded at start), one that dlopens it.
    let (linked, loader) = (dir.path().join("linked"), dir.path().join("loader"));
    let rpath = format!("-Wl,-rpath,{}", dir.path().display());
    let l = format!("-L{}", dir.path().display());
    for (exe, extra) in [(&linked, vec!["-DLINKED", l.as_str(), "-lstatic_kernels", rpath.as_str()]), (&loader, vec![])] {
        let o = Command::new("cc")
            .args(["-O2", "-o"])
            .arg(exe)
            .arg(src.join("static_lib_main.c"))
            .args(&extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let lib_arg = lib.to_str().unwrap();
    let want: String = (0..12).map(|k| format!("round {k} ok\n")).collect::<String>() + "PASS\n";
    for (exe, args) in [(&linked, vec!["start", lib_arg, "12"]), (&loader, vec!["dlopen", lib_arg, "12"])] {
        let mut p = Proc::run(exe, &args, &["--device", "emu"], &[], &dir.path().join("run.out")).unwrap();
        assert_eq!(p.success(Duration::from_secs(120)).unwrap(), want, "{args:?}");
    }
    // Checkpointed mid-run (loaded by dlopen), killed, restarted. Enough rounds (40, some
    // seconds) that the program still runs when it is killed after the checkpoint, on a loaded
    // machine too (with 12 it once ended first, the corpus running beside it).
    let want: String = (0..40).map(|k| format!("round {k} ok\n")).collect::<String>() + "PASS\n";
    let images = dir.path().join("images");
    let mut p = Proc::run(&loader, &["dlopen", lib_arg, "40"], &["--device", "emu"], &[], &dir.path().join("first.out")).unwrap();
    let t0 = std::time::Instant::now();
    while p.stdout().lines().count() < 3 {
        assert!(!p.exited() && t0.elapsed() < Duration::from_secs(120), "{}", p.report());
        std::thread::sleep(Duration::from_millis(10));
    }
    let img = p.checkpoint(&images).unwrap();
    p.kill9().unwrap();
    let before = p.stdout();
    let mut r = Proc::restart(&img, None, &dir.path().join("r.out")).unwrap();
    let after = r.success(Duration::from_secs(120)).unwrap();
    // The restart prints what the first run had not printed when the image was taken.
    assert!(want.starts_with(&before), "{before}");
    let taken_at = want.len() - after.len();
    assert!(want.ends_with(&after) && taken_at <= before.len(), "before:\n{before}after:\n{after}");
}
