//! `crum run` end to end: real CUDA programs built by nvcc (`-cudart shared`) run through the
//! interposer, the channel and the proxy on the emulated device; pass-through of stdio,
//! arguments, exit status and death by signal; refusal of statically linked runtimes (and not
//! of an `-rdc=true` program whose kernels live in a shared library); a dead
//! proxy turning into CUDA errors rather than a hang.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn crum() -> Command {
    // The interposer must sit next to the crum binary.
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        // The whole workspace, as scripts/test.sh builds it: a build of some packages only
        // unifies dependency features otherwise and relinks libcrum.so, which programs of a
        // copy of the suite running beside this one may be loading at that moment.
        let st = Command::new(cargo)
            .args(["build", "-q", "--workspace"])
            .current_dir(repo())
            .status()
            .unwrap();
        assert!(st.success(), "building libcrum.so");
    });
    Command::new(env!("CARGO_BIN_EXE_crum"))
}

/// nvcc from the pip toolkit (installed on first use by scripts/setup-cuda.sh).
fn nvcc() -> PathBuf {
    static NVCC: OnceLock<PathBuf> = OnceLock::new();
    NVCC.get_or_init(|| {
        let out = Command::new(repo().join("scripts/setup-cuda.sh"))
            .output()
            .expect("running setup-cuda.sh");
        assert!(
            out.status.success(),
            "setup-cuda.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()).join("bin/nvcc")
    })
    .clone()
}

fn build(name: &str, extra: &[&str]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("run-smoke");
    std::fs::create_dir_all(&dir).unwrap();
    let tag = if extra.is_empty() {
        String::new()
    } else {
        format!("-{}", extra.join("").replace(['-', ' '], ""))
    };
    let exe = dir.join(format!("{name}{tag}"));
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/cuda")
        .join(format!("{name}.cu"));
    // Built under a name of this process and thread, then renamed into place: copies of the
    // suite running at once must not write a binary another one is executing.
    let thread = format!("{:?}", std::thread::current().id()).replace(|c: char| !c.is_ascii_alphanumeric(), "");
    let tmp = dir.join(format!("{name}{tag}.tmp{}-{thread}", std::process::id()));
    let st = Command::new(nvcc())
        .args(["-arch=sm_80", "-o"])
        .arg(&tmp)
        .arg(&src)
        .args(extra)
        .status()
        .unwrap();
    assert!(st.success(), "nvcc {name}");
    std::fs::rename(&tmp, &exe).unwrap();
    exe
}

#[test]
fn runtime_api_program_passes_on_the_emulated_device() {
    let exe = build("runtime", &["-cudart", "shared"]);
    let out = crum()
        .args(["run", "--device", "emu", "--"])
        .arg(&exe)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("runtime: OK"), "{stdout}");
}

#[test]
fn kernels_run_with_symbols_streams_printf_and_error_codes() {
    let exe = build("kernels", &["-cudart", "shared"]);
    let out = crum()
        .args(["run", "--device", "emu", "--"])
        .arg(&exe)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Device printf arrives at the synchronization, in block order, before later output.
    let hello = stdout.find("hello from block 0 tag 7\nhello from block 1 tag 7\n");
    let ok = stdout.find("kernels: OK");
    assert!(hello.is_some() && ok.is_some() && hello < ok, "{stdout}");
}

#[test]
fn kernels_pass_with_the_per_thread_default_stream() {
    // `--default-stream per-thread` routes through the `_ptsz`/`_ptds` entry points.
    let exe = build(
        "kernels",
        &["-cudart", "shared", "--default-stream", "per-thread"],
    );
    let out = crum()
        .args(["run", "--device", "emu", "--"])
        .arg(&exe)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("kernels: OK"),
        "{stdout}"
    );
}

#[test]
fn device_output_of_unsynchronized_work_appears_at_exit() {
    let exe = build("exit_flush", &["-cudart", "shared"]);
    let out = crum().args(["run", "--device", "emu", "--"]).arg(&exe).output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "host first\ndevice says hi 0\ndevice says hi 1\n"
    );
}

/// A program linked with the static runtime runs on crum's (its entry points redirected at
/// load: preload/src/static_runtime.c), found by its symbol table or, stripped, by
/// fingerprint (cli/src/fingerprint.rs).
#[test]
fn statically_linked_runtime_runs_and_so_does_a_stripped_copy() {
    let exe = build("runtime", &["-cudart", "static"]);
    let out = crum().args(["run", "--device", "emu", "--"]).arg(&exe).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("runtime: OK"), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));

    let stripped = exe.with_file_name(format!("runtime-static-stripped-{}", std::process::id()));
    std::fs::copy(&exe, &stripped).unwrap();
    assert!(Command::new("strip").arg(&stripped).status().unwrap().success());
    let out = crum().args(["run", "--device", "emu", "--"]).arg(&stripped).env("CRUM_LOG", "info").output().unwrap();
    let _ = std::fs::remove_file(&stripped);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stdout.contains("runtime: OK"), "{stdout}\n{stderr}");
    assert!(stderr.contains("static CUDA runtime (found by fingerprint)"), "{stderr}");
}

/// Runs nvcc with `args`, panicking with its output on failure.
fn nvcc_ok(args: &[&std::ffi::OsStr]) {
    let out = Command::new(nvcc()).args(args).output().unwrap();
    assert!(out.status.success(), "nvcc {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn an_rdc_linked_program_whose_kernels_live_in_a_shared_library_is_not_taken_for_a_static_runtime() {
    use object::{Object, ObjectSymbol};
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("rdc-host-only-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cuda");
    let (lib, obj, exe) = (dir.join("libshared_kernels.so"), dir.join("main.o"), dir.join("host_only"));
    let s = |p: &Path| p.as_os_str().to_owned();
    nvcc_ok(&[
        "-cudart".as_ref(), "shared".as_ref(), "-arch=sm_80".as_ref(), "-shared".as_ref(),
        "-Xcompiler".as_ref(), "-fPIC".as_ref(), "-o".as_ref(), &s(&lib), &s(&src.join("shared_kernels.cu")),
    ]);
    nvcc_ok(&["-c".as_ref(), "-o".as_ref(), &s(&obj), &s(&src.join("host_only_main.cpp"))]);
    let rpath = format!("-rpath,{}", dir.display());
    nvcc_ok(&[
        "-cudart".as_ref(), "shared".as_ref(), "-arch=sm_80".as_ref(), "-rdc=true".as_ref(), "-o".as_ref(),
        &s(&exe), &s(&obj), &s(&lib), "-Xlinker".as_ref(), rpath.as_ref(),
    ]);
    // The case at hand: a `.nv_fatbin` (the device-link step's) and no registration import.
    let data = std::fs::read(&exe).unwrap();
    let file = object::File::parse(&*data).unwrap();
    assert!(file.section_by_name(".nv_fatbin").is_some(), "nvcc -rdc=true adds a .nv_fatbin");
    assert!(
        !file.dynamic_symbols().any(|s| s.is_undefined() && s.name() == Ok("__cudaRegisterFatBinary")),
        "the executable registers no fat binary itself"
    );

    let out = crum().args(["run", "--device", "emu", "--"]).arg(&exe).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.ends_with("PASS\n"),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stdio_arguments_environment_and_exit_status_pass_through() {
    let mut child = crum()
        .args([
            "run",
            "--",
            "sh",
            "-c",
            "read x; echo \"$x $1 $CRUM_RUN\"; echo err >&2; exit 7",
            "sh",
            "arg1",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello arg1 1\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("err"));
}

#[test]
fn checkpoint_options_reach_the_program_as_environment() {
    let out = crum()
        .args([
            "run",
            "--interval",
            "10m",
            "--keep",
            "3",
            "--on-signal",
            "USR1",
            "--dir",
            "/tmp/imgs",
            "--",
        ])
        .args([
            "sh",
            "-c",
            "echo $CRUM_CKPT_INTERVAL $CRUM_CKPT_KEEP $CRUM_CKPT_SIGNAL $CRUM_CKPT_DIR",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("600 3 {} /tmp/imgs\n", libc::SIGUSR1)
    );
}

#[test]
fn death_by_signal_is_reraised() {
    use std::os::unix::process::ExitStatusExt;
    let st = crum()
        .args(["run", "--", "sh", "-c", "kill -USR2 $$"])
        .status()
        .unwrap();
    assert_eq!(st.signal(), Some(libc::SIGUSR2));
}

#[test]
fn device_cuda_without_gpu_is_a_clear_error() {
    if Path::new("/dev/nvidiactl").exists() {
        return; // a GPU machine: the cuda backend decides
    }
    let out = crum()
        .args(["run", "--device", "cuda", "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no usable GPU"));
}

#[test]
fn killed_proxy_makes_cuda_calls_fail_instead_of_hanging() {
    let exe = build("spin", &["-cudart", "shared"]);
    let mut child = crum()
        .args(["run", "--device", "emu", "--"])
        .arg(&exe)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    // The proxy is the child of `crum run` whose command line says `proxy`.
    let kids =
        std::fs::read_to_string(format!("/proc/{}/task/{}/children", child.id(), child.id()))
            .unwrap();
    let proxy = kids
        .split_whitespace()
        .find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.contains("proxy"))
        })
        .expect("proxy process");
    Command::new("kill").args(["-9", proxy]).status().unwrap();
    let t0 = Instant::now();
    let line = lines.next().unwrap().unwrap();
    assert_eq!(line, "failed: cudaErrorDevicesUnavailable");
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert!(child.wait().unwrap().success());
}
