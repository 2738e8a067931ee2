//! Helpers for the integration tests: building CUDA test programs with the real nvcc and running
//! them under `crum run`, plus the checkpoint helpers (background run, `crum checkpoint`,
//! SIGKILL, `crum restart`) the checkpoint tests use.
//!
//! Binaries: `CRUM_BIN` (default `target/debug/crum`); they are built with cargo when missing.
//! CUDA compiler: `CRUM_CUDA_HOME`, else `scripts/setup-cuda.sh --env` (installs on first use).
#![deny(unsafe_code)]

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Root of the cargo workspace.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"))
}

/// Directory of the CUDA programs (`integration-tests/cuda`).
pub fn cuda_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cuda")
}

/// The `crum` binary; built with cargo (once per test process) when absent.
pub fn crum_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("CRUM_BIN") {
            return PathBuf::from(p);
        }
        let bin = target_dir().join("debug/crum");
        let lib = target_dir().join("debug/libcrum.so");
        if !bin.exists() || !lib.exists() {
            let st = Command::new(env!("CARGO"))
                .args(["build", "-q", "-p", "crum-cli", "-p", "crum-interpose"])
                .current_dir(workspace())
                .status()
                .expect("run cargo build");
            assert!(st.success(), "building crum and libcrum.so failed");
        }
        bin
    })
    .clone()
}

/// `CRUM_CUDA_HOME` (the CUDA toolkit root holding bin/nvcc), installing it when missing.
pub fn cuda_home() -> Result<PathBuf> {
    static HOME: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    HOME.get_or_init(|| {
        if let Some(h) = std::env::var_os("CRUM_CUDA_HOME") {
            return Ok(PathBuf::from(h));
        }
        let out = Command::new(workspace().join("scripts/setup-cuda.sh"))
            .arg("--env")
            .output()
            .map_err(|e| format!("running scripts/setup-cuda.sh: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "scripts/setup-cuda.sh --env failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .find_map(|l| l.strip_prefix("export CRUM_CUDA_HOME="))
            .map(|v| PathBuf::from(v.trim_matches(|c| c == '\'' || c == '"')))
            .ok_or_else(|| format!("no CRUM_CUDA_HOME in setup-cuda.sh output: {text}"))
    })
    .clone()
    .map_err(anyhow::Error::msg)
}

fn nvcc_version(nvcc: &Path) -> Result<String> {
    static VER: OnceLock<String> = OnceLock::new();
    if let Some(v) = VER.get() {
        return Ok(v.clone());
    }
    let out = Command::new(nvcc)
        .arg("--version")
        .output()
        .context("nvcc --version")?;
    let v = String::from_utf8_lossy(&out.stdout).into_owned();
    Ok(VER.get_or_init(|| v).clone())
}

/// Compile `integration-tests/cuda/<name>.cu` with `nvcc -cudart shared -arch=sm_80` into
/// `integration-tests/build/`, cached by source, flags and nvcc version. Safe under parallel
/// tests: each build writes a unique temporary file and renames it into place atomically.
pub fn build_cuda(name: &str) -> Result<PathBuf> {
    build_cuda_with(name, &[])
}

/// [`build_cuda`] with extra nvcc flags (e.g. `-lpthread`).
pub fn build_cuda_with(name: &str, extra: &[&str]) -> Result<PathBuf> {
    let src = cuda_dir().join(format!("{name}.cu"));
    let text = fs::read(&src).with_context(|| format!("read {}", src.display()))?;
    let home = cuda_home()?;
    let nvcc = home.join("bin/nvcc");
    let mut h = DefaultHasher::new();
    text.hash(&mut h);
    extra.hash(&mut h);
    nvcc_version(&nvcc)?.hash(&mut h);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("build");
    fs::create_dir_all(&dir)?;
    let exe = dir.join(format!("{name}-{:016x}", h.finish()));
    if exe.exists() {
        return Ok(exe);
    }
    let tmp = dir.join(format!(
        "{name}.tmp{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let tmp = PathBuf::from(tmp.to_string_lossy().replace(['(', ')'], ""));
    let path = format!(
        "{}:{}",
        home.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(&nvcc)
        .args(["-cudart", "shared", "-arch=sm_80", "-O2", "-o"])
        .arg(&tmp)
        .arg(&src)
        .args(extra)
        .env("PATH", path)
        .output()
        .context("run nvcc")?;
    if !out.status.success() {
        let _ = fs::remove_file(&tmp);
        bail!(
            "nvcc {} failed:\n{}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    fs::rename(&tmp, &exe)?;
    Ok(exe)
}

/// What a finished program left behind.
#[derive(Debug)]
pub struct RunResult {
    pub stdout: String,
    pub stderr: String,
    /// Exit code; None when killed by a signal (or by the timeout).
    pub code: Option<i32>,
    pub timed_out: bool,
}

impl RunResult {
    fn from_output(o: Output, timed_out: bool) -> Self {
        RunResult {
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
            code: o.status.code(),
            timed_out,
        }
    }
}

/// The `crum run [--device DEV] -- prog args` command, environment ready (images in `ckpt_dir`).
pub fn crum_run_command(device: Option<&str>, prog: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(crum_bin());
    c.arg("run");
    if let Some(d) = device {
        c.args(["--device", d]);
    }
    c.arg("--").arg(prog).args(args);
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Wait for `child` at most `timeout`, killing it (SIGKILL) when it overruns.
pub fn wait_with_timeout(mut child: Child, timeout: Duration) -> Result<RunResult> {
    // Drain the pipes on threads so a chatty program cannot block on a full pipe.
    let mut so = child.stdout.take();
    let mut se = child.stderr.take();
    let t1 = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(s) = so.as_mut() {
            let _ = s.read_to_end(&mut v);
        }
        v
    });
    let t2 = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(s) = se.as_mut() {
            let _ = s.read_to_end(&mut v);
        }
        v
    });
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if start.elapsed() > timeout {
            timed_out = true;
            let _ = child.kill();
            break child.wait()?;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = t1.join().unwrap_or_default();
    let stderr = t2.join().unwrap_or_default();
    Ok(RunResult::from_output(
        Output {
            status,
            stdout,
            stderr,
        },
        timed_out,
    ))
}

/// Run `prog args` under `crum run` (default device) with a timeout.
pub fn crum_run(prog: &Path, args: &[&str], timeout: Duration) -> Result<RunResult> {
    let child = crum_run_command(None, prog, args)
        .spawn()
        .context("spawn crum run")?;
    wait_with_timeout(child, timeout)
}

/// Build `name` and run it under `crum run`; panics with the full output unless it exits 0
/// with a final `PASS` line. Returns stdout.
pub fn run_cuda_pass(name: &str, args: &[&str]) -> String {
    run_cuda_pass_with(name, &[], args)
}

/// [`run_cuda_pass`] for a program built with extra nvcc flags.
pub fn run_cuda_pass_with(name: &str, nvcc_flags: &[&str], args: &[&str]) -> String {
    let exe = build_cuda_with(name, nvcc_flags).unwrap_or_else(|e| panic!("{e:#}"));
    let r = crum_run(&exe, args, Duration::from_secs(120)).expect("crum run");
    assert!(
        r.code == Some(0) && !r.timed_out && r.stdout.lines().last() == Some("PASS"),
        "{name} under crum run: code {:?} timed_out {}\nstdout:\n{}\nstderr:\n{}",
        r.code,
        r.timed_out,
        r.stdout,
        r.stderr
    );
    r.stdout
}

/// Compare stdout with `cuda/expected/<name>.out` when that file exists.
pub fn check_expected(name: &str, stdout: &str) {
    let p = cuda_dir().join("expected").join(format!("{name}.out"));
    if let Ok(want) = fs::read_to_string(&p) {
        assert_eq!(stdout, want, "{name}: stdout differs from {}", p.display());
    }
}

/// A program running in the background under `crum run`, for checkpoint tests.
pub struct Background {
    pub child: Child,
    pub ckpt_dir: PathBuf,
}

impl Background {
    /// Start `prog args` under `crum run` with checkpoint images going to `ckpt_dir`.
    pub fn start(prog: &Path, args: &[&str], ckpt_dir: &Path) -> Result<Background> {
        fs::create_dir_all(ckpt_dir)?;
        let mut c = crum_run_command(None, prog, args);
        c.env("CRUM_CKPT_DIR", ckpt_dir);
        let child = c.spawn().context("spawn crum run")?;
        Ok(Background {
            child,
            ckpt_dir: ckpt_dir.to_path_buf(),
        })
    }

    /// Pid of the `crum run` process.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Pid of the program itself (a child of `crum run`; the proxy is another child, so the
    /// program is the one whose command line names `prog`), waiting up to 10 s for it.
    pub fn app_pid(&self, prog: &Path) -> Result<u32> {
        let start = Instant::now();
        loop {
            if let Some(p) = children(self.pid()).into_iter().find(|&c| {
                fs::read(format!("/proc/{c}/cmdline"))
                    .map(|cl| {
                        cl.split(|&b| b == 0).next() == Some(prog.as_os_str().as_encoded_bytes())
                    })
                    .unwrap_or(false)
            }) {
                return Ok(p);
            }
            if start.elapsed() > Duration::from_secs(10) {
                bail!(
                    "no process running {} under crum run (pid {})",
                    prog.display(),
                    self.pid()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `crum checkpoint <program pid> --dir <ckpt_dir>`; returns the image path it prints.
    pub fn checkpoint(&self, prog: &Path) -> Result<PathBuf> {
        checkpoint(self.app_pid(prog)?, &self.ckpt_dir)
    }

    /// SIGKILL the program and reap it.
    pub fn kill9(mut self) -> Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// Wait for the end, at most `timeout`.
    pub fn finish(self, timeout: Duration) -> Result<RunResult> {
        wait_with_timeout(self.child, timeout)
    }
}

/// Child pids of `pid` (all its threads' children).
pub fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(s) = fs::read_to_string(t.path().join("children")) {
                out.extend(s.split_whitespace().filter_map(|w| w.parse::<u32>().ok()));
            }
        }
    }
    out
}

/// `crum checkpoint <pid> --dir <dir>`; returns the image path (last line of its stdout).
pub fn checkpoint(pid: u32, dir: &Path) -> Result<PathBuf> {
    let out = Command::new(crum_bin())
        .args(["checkpoint", &pid.to_string(), "--dir"])
        .arg(dir)
        .output()
        .context("run crum checkpoint")?;
    if !out.status.success() {
        bail!(
            "crum checkpoint {pid} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let s = String::from_utf8_lossy(&out.stdout);
    s.lines()
        .last()
        .map(|l| PathBuf::from(l.trim()))
        .context("crum checkpoint printed no image path")
}

/// `crum restart <image>` with a timeout; the restarted program's output.
pub fn restart(image: &Path, timeout: Duration) -> Result<RunResult> {
    let child = Command::new(crum_bin())
        .arg("restart")
        .arg(image)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("spawn crum restart")?;
    wait_with_timeout(child, timeout)
}

/// Lines of `s` without progress lines (those starting with `step `), for comparing an
/// interrupted run's final output with an uninterrupted one.
pub fn result_lines(s: &str) -> Vec<&str> {
    s.lines().filter(|l| !l.starts_with("step ")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_drops_progress_and_keeps_results() {
        assert_eq!(
            result_lines("step 1 r=2\nsum 3\nPASS\n"),
            vec!["sum 3", "PASS"]
        );
    }

    #[test]
    fn wait_with_timeout_kills_overrunning_child() {
        let child = Command::new("sleep")
            .arg("10")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let r = wait_with_timeout(child, Duration::from_millis(200)).unwrap();
        assert!(r.timed_out);
        assert_eq!(r.code, None);
    }

    #[test]
    fn wait_with_timeout_captures_output_and_code() {
        let child = Command::new("sh")
            .args(["-c", "echo out; echo err >&2; exit 3"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let r = wait_with_timeout(child, Duration::from_secs(10)).unwrap();
        assert_eq!(
            (r.stdout.as_str(), r.stderr.as_str(), r.code, r.timed_out),
            ("out\n", "err\n", Some(3), false)
        );
    }
}
