//! CUDA programs that a job's script, launcher or python starts as children (issue 17): each
//! gets a device proxy of its own on its first CUDA call (`interpose::own_proxy`), is
//! checkpointed with its job (its part carries its device state) and restarted on a proxy of
//! its own. The programs (`cuda/job_device.cu`) check their device results against the CPU
//! and print their verdict.
mod proc_common;
use proc_common::*;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The least time a test gives a program before it counts as hung (three copies of the suite
/// and two busy loops on 2 cores make the emulated device many times slower).
const HANG_GUARD: Duration = Duration::from_secs(600);

fn program() -> PathBuf {
    crum_integration_tests::build_cuda("job_device").unwrap_or_else(|e| panic!("{e:#}"))
}

/// The emulated driver for `--device cuda` (`integration-tests/emu-libcuda/`).
fn emulated_driver() -> PathBuf {
    let _ = crum_bin();
    let lib = target_dir().join("debug/libcrum_emu_libcuda.so");
    assert!(lib.exists(), "{} missing (cargo build --workspace)", lib.display());
    lib
}

/// `crum run --device D --dir <images> -- prog args` in the sandbox's `run` directory.
fn run_on(sb: &Sandbox, device: &str, env: &[(&str, &Path)], prog: &Path, args: &[&str], name: &str) -> Proc {
    let mut cmd = Command::new(crum_bin());
    cmd.args(["run", "--device", device, "--dir"])
        .arg(sb.images())
        .arg("--")
        .arg(prog)
        .args(args)
        .current_dir(sb.path("run"))
        .env("CRUM_CONTROL_DIR", sb.sock());
    for (k, v) in env {
        cmd.env(k, v);
    }
    spawn_cmd(&mut cmd, sb.path(name))
}

/// `crum restart --device D image` in the sandbox's `run` directory.
fn restart_on(sb: &Sandbox, device: &str, env: &[(&str, &Path)], image: &Path, name: &str) -> Proc {
    let mut cmd = Command::new(crum_bin());
    cmd.args(["restart", "--device", device]).arg(image).current_dir(sb.path("run")).env("CRUM_CONTROL_DIR", sb.sock());
    for (k, v) in env {
        cmd.env(k, v);
    }
    spawn_cmd(&mut cmd, sb.path(name))
}

/// Waits for `p` to end (a hang guard only): its exit code.
fn finish(p: &mut Proc, sb: &Sandbox) -> i32 {
    let t0 = Instant::now();
    loop {
        if let Some(st) = p.child.try_wait().unwrap() {
            return st.code().unwrap_or(-1);
        }
        assert!(
            t0.elapsed() < HANG_GUARD,
            "did not finish: {}{}\n{}\n{}",
            p.output(),
            p.stderr(),
            crum_integration_tests::describe_tree(p.pid()),
            sb.stderr_files()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What `job_device NAME STEPS` prints when nothing interrupts it, run alone under `crum run`.
fn uninterrupted(sb: &Sandbox, prog: &Path, name: &str, steps: &str) -> String {
    let mut p = run_on(sb, "emu", &[], prog, &[name, steps, "0"], &format!("ref-{name}.out"));
    assert_eq!(finish(&mut p, sb), 0, "{}{}", p.output(), p.stderr());
    let out = p.output();
    assert!(out.contains(&format!("{name} PASS")), "{out}");
    out
}

fn lines_of(p: &Path) -> usize {
    std::fs::read_to_string(p).unwrap_or_default().lines().count()
}

/// Waits until each file has at least `n[i]` lines and none says PASS (both programs run,
/// with device state), failing if `p` ends first.
fn wait_progress(p: &mut Proc, sb: &Sandbox, files: &[PathBuf], n: &[usize]) {
    let t0 = Instant::now();
    while files.iter().zip(n).any(|(f, &k)| lines_of(f) < k) {
        if let Ok(Some(st)) = p.child.try_wait() {
            panic!("ended ({st}) before the programs made progress: {}{}\n{}", p.output(), p.stderr(), sb.stderr_files());
        }
        assert!(t0.elapsed() < HANG_GUARD, "no progress: {}\n{}", p.stderr(), sb.stderr_files());
        std::thread::sleep(Duration::from_millis(10));
    }
    for f in files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        assert!(!text.contains("PASS"), "{} ended before the checkpoint (make it longer): {text}", f.display());
    }
}

/// The processes of a job image whose parts carry device state (`crum inspect --json`).
fn parts_with_device(image: &Path) -> Vec<String> {
    let out = Command::new(crum_bin()).args(["inspect", "--json"]).arg(image).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let procs = v["processes"].as_array().expect("a job image").clone();
    procs
        .iter()
        .filter(|p| !p["device"].is_null())
        .map(|p| p["path"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// A checkpoint of the job of `pid`: the image.
fn checkpoint_job(sb: &Sandbox, pid: u32) -> PathBuf {
    let out = checkpoint_output(sb, pid);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}\n{}", sb.stderr_files());
    let image = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(image.join("job.json").is_file(), "not a job image: {}", image.display());
    image
}

#[test]
fn a_cuda_program_a_shell_starts_as_a_child_gets_a_device() {
    let sb = Sandbox::new();
    let prog = program();
    // `; true`: the shell forks the program instead of executing it in its own process.
    let script = format!("{} one 5 0; {} two 3 0; true", prog.display(), prog.display());
    let mut p = run_on(&sb, "emu", &[], Path::new("/bin/sh"), &["-c", &script], "run.out");
    assert_eq!(finish(&mut p, &sb), 0, "{}", p.stderr());
    let out = p.output();
    assert!(out.contains("one step 4\none PASS") && out.contains("two step 2\ntwo PASS"), "{out}\n{}", p.stderr());
}

#[test]
fn several_threads_making_their_first_cuda_calls_at_once_share_one_proxy() {
    let sb = Sandbox::new();
    let prog = program();
    let script = format!("{} thr 3 0 threads; true", prog.display());
    let mut p = run_on(&sb, "emu", &[], Path::new("/bin/sh"), &["-c", &script], "run.out");
    assert_eq!(finish(&mut p, &sb), 0, "{}", p.stderr());
    let out = p.output();
    assert!(out.contains("thr threads: 8 first calls, one device") && out.contains("thr PASS"), "{out}\n{}", p.stderr());
}

#[test]
fn a_child_forked_without_exec_of_a_cuda_program_gets_an_initialization_error() {
    let sb = Sandbox::new();
    let prog = program();
    // The program `crum run` starts (it has crum run's channel), and one a shell starts (a
    // proxy of its own).
    let mut p = run_on(&sb, "emu", &[], &prog, &["root", "2", "0", "fork"], "root.out");
    assert_eq!(finish(&mut p, &sb), 0, "{}{}", p.output(), p.stderr());
    let out = p.output();
    assert!(out.contains("root fork child: cudaErrorInitializationError") && out.contains("root PASS"), "{out}");
    let script = format!("{} kid 2 0 fork; true", prog.display());
    let mut p = run_on(&sb, "emu", &[], Path::new("/bin/sh"), &["-c", &script], "kid.out");
    assert_eq!(finish(&mut p, &sb), 0, "{}{}", p.output(), p.stderr());
    let out = p.output();
    assert!(out.contains("kid fork child: cudaErrorInitializationError") && out.contains("kid PASS"), "{out}");
}

/// A child forked (without exec) before its parent used CUDA — a shell's CUDA child, or the
/// program `crum run` starts — executed nothing: it gets no device (`cudaErrorNoDevice`),
/// neither a proxy of its own nor its parent's, and the parent goes on with its own.
#[test]
fn a_child_forked_before_any_cuda_call_gets_no_device_of_its_own() {
    let sb = Sandbox::new();
    let prog = program();
    let script = format!("{} early 2 0 forkfirst; true", prog.display());
    let mut p = run_on(&sb, "emu", &[], Path::new("/bin/sh"), &["-c", &script], "run.out");
    assert_eq!(finish(&mut p, &sb), 0, "{}{}", p.output(), p.stderr());
    let out = p.output();
    assert!(out.contains("early forkfirst child: cudaErrorNoDevice") && out.contains("early PASS"), "{out}");
    // The program `crum run` starts (it holds crum run's channel): its forked child does not
    // take the device from it.
    let mut p = run_on(&sb, "emu", &[], &prog, &["rootearly", "2", "0", "forkfirst"], "root.out");
    assert_eq!(finish(&mut p, &sb), 0, "{}{}", p.output(), p.stderr());
    let out = p.output();
    assert!(out.contains("rootearly forkfirst child: cudaErrorNoDevice") && out.contains("rootearly PASS"), "{out}");
}

#[test]
fn python3_subprocess_launching_a_cuda_program_gives_it_a_device() {
    if Command::new("python3").arg("--version").output().map(|o| !o.status.success()).unwrap_or(true) {
        eprintln!("skipped: no python3");
        return;
    }
    let sb = Sandbox::new();
    let prog = program();
    let code = format!(
        "import subprocess, sys\nr = subprocess.run([{:?}, 'py', '4', '0'])\nprint('exit', r.returncode, flush=True)\nsys.exit(r.returncode)\n",
        prog.display().to_string()
    );
    let mut p = run_on(&sb, "emu", &[], Path::new("python3"), &["-c", &code], "run.out");
    assert_eq!(finish(&mut p, &sb), 0, "{}{}", p.output(), p.stderr());
    let out = p.output();
    assert!(out.contains("py step 3\npy PASS") && out.ends_with("exit 0\n"), "{out}\n{}", p.stderr());
}

#[test]
fn a_cuda_program_a_shell_starts_gets_the_cuda_backend_over_the_emulated_driver() {
    let sb = Sandbox::new();
    let prog = program();
    let lib = emulated_driver();
    let script = format!("{} cu 4 0; true", prog.display());
    let mut p = run_on(&sb, "cuda", &[("CRUM_LIBCUDA", &lib)], Path::new("/bin/sh"), &["-c", &script], "run.out");
    assert_eq!(finish(&mut p, &sb), 0, "{}", p.stderr());
    let out = p.output();
    assert!(out.contains("cu step 3\ncu PASS"), "{out}\n{}", p.stderr());
}

/// A bash script running two CUDA programs in the background and waiting for them:
/// checkpointed while both run (each part carries its device state), every process killed,
/// restarted (a proxy per program), the restarted job checkpointed and killed, restarted
/// again to the end: each program's output and verdict are those of an uninterrupted run.
fn background_programs_of_a_script(device: &str, env: &[(&str, &Path)]) {
    let sb = Sandbox::new();
    let prog = program();
    let (sa, sb_steps) = ("80", "70");
    let want = uninterrupted(&sb, &prog, "a", sa) + &uninterrupted(&sb, &prog, "b", sb_steps);
    let script = sb.path("run/job.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/bash\n{p} a {sa} 100 > a.out &\n{p} b {sb_steps} 100 > b.out &\nwait\ncat a.out b.out\n",
            p = prog.display()
        ),
    )
    .unwrap();
    let files = [sb.path("run/a.out"), sb.path("run/b.out")];
    let mut p = run_on(&sb, device, env, Path::new("/bin/bash"), &["./job.sh"], "run.out");
    wait_progress(&mut p, &sb, &files, &[3, 3]);
    let first = checkpoint_job(&sb, p.pid());
    let at: Vec<usize> = files.iter().map(|f| lines_of(f)).collect();
    let with_device = parts_with_device(&first);
    assert_eq!(with_device.len(), 2, "parts with device state: {with_device:?}");
    p.kill_job();

    let mut r = restart_on(&sb, device, env, &first, "r1.out");
    // Progress after the restart (the files were cut back to the checkpoint), both running.
    wait_progress(&mut r, &sb, &files, &[at[0].min(at[1]) + 3, at[0].min(at[1]) + 3]);
    let second = checkpoint_job(&sb, r.pid());
    let with_device = parts_with_device(&second);
    assert_eq!(with_device.len(), 2, "parts with device state of the restarted job: {with_device:?}");
    r.kill_job();

    let mut r2 = restart_on(&sb, device, env, &second, "r2.out");
    assert_eq!(finish(&mut r2, &sb), 0, "{}{}\n{}", r2.output(), r2.stderr(), sb.stderr_files());
    assert_eq!(r2.output(), want, "{}", r2.stderr());
}

#[test]
fn two_background_cuda_programs_of_a_bash_script_restart_with_their_job_twice() {
    background_programs_of_a_script("emu", &[]);
}

#[test]
fn two_background_cuda_programs_of_a_bash_script_restart_with_their_job_on_the_cuda_backend() {
    let lib = emulated_driver();
    background_programs_of_a_script("cuda", &[("CRUM_LIBCUDA", &lib)]);
}
