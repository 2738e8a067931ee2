//! Shared harness of the `proc_*` tests: build a C test program, run it under crum (the
//! agent preloaded, `CRUM_RUN=1`), checkpoint it through its control socket, kill it with
//! SIGKILL, restart it with `crum restart`, and compare outputs with an uninterrupted run.
//!
//! Binaries: `CRUM_BIN` (default `target/debug/crum`) and `CRUM_PRELOAD` (default
//! `target/debug/libcrum.so`); both are built with cargo when missing.
#![allow(dead_code)]

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Once;
use std::time::{Duration, Instant};
use crum_integration_tests::describe_tree;

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace().join("target"))
}

static BUILD: Once = Once::new();

fn build_binaries() {
    BUILD.call_once(|| {
        if std::env::var_os("CRUM_BIN").is_some() && std::env::var_os("CRUM_PRELOAD").is_some() {
            return;
        }
        // The whole workspace, as scripts/test.sh builds it: a build of some packages only
        // unifies dependency features otherwise and relinks libcrum.so, which programs of a
        // copy of the suite running beside this one may be loading at that moment.
        let st = Command::new(env!("CARGO"))
            .args(["build", "-q", "--workspace"])
            .current_dir(workspace())
            .status()
            .expect("run cargo build");
        assert!(st.success(), "building crum and libcrum.so failed");
    });
}

pub fn crum_bin() -> PathBuf {
    build_binaries();
    std::env::var_os("CRUM_BIN").map(PathBuf::from).unwrap_or_else(|| target_dir().join("debug/crum"))
}

pub fn preload() -> PathBuf {
    build_binaries();
    std::env::var_os("CRUM_PRELOAD").map(PathBuf::from).unwrap_or_else(|| target_dir().join("debug/libcrum.so"))
}

/// Compiles `integration-tests/c/<name>.c` (cached by modification time).
pub fn build_c(name: &str) -> PathBuf {
    let src = workspace().join("integration-tests/c").join(format!("{name}.c"));
    let dir = target_dir().join("crum-c-tests");
    fs::create_dir_all(&dir).unwrap();
    let out = dir.join(name);
    let fresh = || match (fs::metadata(&src), fs::metadata(&out)) {
        (Ok(s), Ok(o)) => o.modified().unwrap() >= s.modified().unwrap(),
        _ => false,
    };
    if !fresh() {
        let tmp = crum_integration_tests::build_tmp(&dir, name);
        let st = Command::new("cc")
            .args(["-O1", "-g", "-pthread", "-Wall", "-o"])
            .arg(&tmp)
            .arg(&src)
            .status()
            .expect("run cc");
        assert!(st.success(), "compiling {name}.c failed");
        // Another copy of the suite sharing this tree may have built it meanwhile, and may
        // be running it: that one stays.
        if fresh() {
            let _ = fs::remove_file(&tmp);
        } else {
            fs::rename(&tmp, &out).unwrap();
        }
    }
    out
}

/// A test sandbox: working directory, image directory, control-socket directory.
pub struct Sandbox {
    pub tmp: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let mut tmp = tempfile::tempdir().unwrap();
        // CRUM_TEST_KEEP=1: the sandbox stays after the test (to look at a failure).
        if std::env::var_os("CRUM_TEST_KEEP").is_some() {
            tmp.disable_cleanup(true);
        }
        for d in ["expected", "run", "images", "sock"] {
            fs::create_dir(tmp.path().join(d)).unwrap();
        }
        fs::set_permissions(tmp.path().join("sock"), std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        Sandbox { tmp }
    }
    pub fn path(&self, p: &str) -> PathBuf {
        self.tmp.path().join(p)
    }
    pub fn images(&self) -> PathBuf {
        self.path("images")
    }
    pub fn sock(&self) -> PathBuf {
        self.path("sock")
    }
    /// The images in [`Sandbox::images`], oldest first.
    pub fn list_images(&self) -> Vec<PathBuf> {
        images_in(&self.images())
    }
    /// What the processes of this sandbox wrote to stderr so far (for failure messages).
    pub fn stderr_files(&self) -> String {
        let mut names: Vec<PathBuf> = fs::read_dir(self.tmp.path())
            .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "err")).collect())
            .unwrap_or_default();
        names.sort();
        names
            .iter()
            .map(|p| format!("{}: {}", p.file_name().unwrap_or_default().to_string_lossy(), fs::read_to_string(p).unwrap_or_default()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Output of an uninterrupted run, without crum.
pub fn expected_output(sb: &Sandbox, prog: &Path, args: &[&str]) -> String {
    let out = Command::new(prog).args(args).current_dir(sb.path("expected")).output().unwrap();
    assert!(out.status.success(), "{} failed: {}", prog.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// A process whose stdout and stderr we watch (captured through pipes; copies in `out` and
/// `out.err`).
pub struct Proc {
    pub child: Child,
    pub out: PathBuf,
    stdout: crum_integration_tests::Capture,
    stderr: crum_integration_tests::Capture,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
    pub fn output(&self) -> String {
        self.stdout.text()
    }
    pub fn lines(&self) -> usize {
        self.output().lines().count()
    }
    /// Waits until the output has at least `n` lines.
    pub fn wait_lines(&mut self, n: usize) {
        let t0 = Instant::now();
        while self.lines() < n {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("process exited ({st}) before {n} lines: {}{}", self.output(), self.stderr());
            }
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "timed out waiting for {n} lines: {}\nstderr: {}\n{}",
                self.output(),
                self.stderr(),
                describe_tree(self.pid())
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    /// As [`Proc::wait_lines`], but a process that ended well first is fine too (under load
    /// a short program may reach its end before a test sees one more line).
    pub fn wait_lines_or_end(&mut self, n: usize) {
        let t0 = Instant::now();
        while self.lines() < n {
            if let Ok(Some(st)) = self.child.try_wait() {
                assert!(st.success(), "process failed ({st}) before {n} lines: {}{}", self.output(), self.stderr());
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "timed out waiting for {n} lines: {}\nstderr: {}\n{}",
                self.output(),
                self.stderr(),
                describe_tree(self.pid())
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    pub fn stderr(&self) -> String {
        self.stderr.text()
    }
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
    /// SIGKILL to the process and every descendant (a job), waiting until none runs.
    pub fn kill_job(&mut self) {
        let tree = crum_integration_tests::kill_tree(self.pid());
        self.kill9();
        crum_integration_tests::wait_gone(&tree);
    }
    /// Waits for exit (with a time limit) and returns the exit code.
    pub fn wait_exit(&mut self) -> i32 {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.code().unwrap_or(-1);
            }
            if t0.elapsed() > Duration::from_secs(60) {
                let state = describe_tree(self.pid());
                self.kill9();
                panic!("process did not finish: {}{}\n{state}", self.output(), self.stderr());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// A test that fails leaves no process running behind it (CI would spend its cores on it).
impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Closes every fd above 2 in the child: descriptors leaked by whatever started the tests
/// (pipes to other processes) would make restarts fail, by design.
pub fn close_inherited(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: close_range is async-signal-safe and touches only the child's descriptor table.
    unsafe {
        cmd.pre_exec(|| {
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            Ok(())
        });
    }
}

/// Spawns `cmd` with stdout and stderr captured (copies in `out`, `out.err`), inherited
/// descriptors closed.
pub fn spawn_cmd(cmd: &mut Command, out: PathBuf) -> Proc {
    spawn(cmd, out)
}

fn spawn(cmd: &mut Command, out: PathBuf) -> Proc {
    close_inherited(cmd);
    Proc::captured(cmd, out)
}

impl Proc {
    /// Spawns `cmd` as it is (its descriptors above 2 untouched), stdout and stderr captured.
    pub fn captured(cmd: &mut Command, out: PathBuf) -> Proc {
        let (child, stdout, stderr) = crum_integration_tests::spawn_captured(cmd, &out).unwrap();
        Proc { child, out, stdout, stderr }
    }
}

/// The images (`ckpt-*`) in `dir`, oldest first.
pub fn images_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("ckpt-"))
        .collect();
    v.sort();
    v
}

/// `prog args` set up to run under crum (the agent preloaded) in the sandbox's `run`
/// directory, its images and control socket in the sandbox.
pub fn under_crum(sb: &Sandbox, prog: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .current_dir(sb.path("run"))
        .env("LD_PRELOAD", format!("{}:{}", preload().with_file_name("libcrum_libc.so").display(), preload().display()))
        .env("CRUM_RUN", "1")
        .env("CRUM_CKPT_DIR", sb.images())
        .env("CRUM_CONTROL_DIR", sb.sock());
    cmd
}

/// Starts `prog` under crum in the sandbox's `run` directory.
pub fn run_under_crum(sb: &Sandbox, prog: &Path, args: &[&str], extra_env: &[(&str, &str)], name: &str) -> Proc {
    let mut cmd = under_crum(sb, prog, args);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    spawn(&mut cmd, sb.path(name))
}

/// `crum restart <image>` in the sandbox's `run` directory.
pub fn restart(sb: &Sandbox, image: &Path, name: &str) -> Proc {
    restart_env(sb, image, name, &[])
}

/// [`restart`] with more environment for `crum restart`.
pub fn restart_env(sb: &Sandbox, image: &Path, name: &str, env: &[(&str, &str)]) -> Proc {
    let mut cmd = Command::new(crum_bin());
    cmd.arg("restart").arg(image).current_dir(sb.path("run")).env("CRUM_CONTROL_DIR", sb.sock());
    for (k, v) in env {
        cmd.env(k, v);
    }
    spawn(&mut cmd, sb.path(name))
}

/// `crum run --device emu FLAGS --dir <sandbox images> -- prog args` in the sandbox's `run`
/// directory, output captured (copy in `name`).
pub fn crum_run(sb: &Sandbox, flags: &[&str], prog: &Path, args: &[&str], name: &str) -> Proc {
    let mut cmd = Command::new(crum_bin());
    cmd.args(["run", "--device", "emu"])
        .args(flags)
        .arg("--dir")
        .arg(sb.images())
        .arg("--")
        .arg(prog)
        .args(args)
        .current_dir(sb.path("run"))
        .env("CRUM_CONTROL_DIR", sb.sock());
    spawn_cmd(&mut cmd, sb.path(name))
}

/// `crum checkpoint <pid> --dir <sandbox images>`, as it ended.
pub fn checkpoint_output(sb: &Sandbox, pid: u32) -> std::process::Output {
    checkpoint_output_with(sb, pid, &[])
}

/// [`checkpoint_output`] with more arguments for `crum checkpoint` (`--strict`, …).
pub fn checkpoint_output_with(sb: &Sandbox, pid: u32, extra: &[&str]) -> std::process::Output {
    Command::new(crum_bin())
        .args(["checkpoint", &pid.to_string(), "--dir"])
        .arg(sb.images())
        .args(extra)
        .env("CRUM_CONTROL_DIR", sb.sock())
        .output()
        .unwrap()
}

/// Asks the agent of `pid` for a checkpoint into the sandbox's image directory.
pub fn checkpoint(sb: &Sandbox, pid: u32) -> PathBuf {
    let out = checkpoint_output(sb, pid);
    assert!(
        out.status.success(),
        "crum checkpoint {pid} failed: {}(program alive: {})\n{}",
        String::from_utf8_lossy(&out.stderr),
        Path::new(&format!("/proc/{pid}")).exists(),
        sb.stderr_files()
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// Checks that `after`, the output of a process restarted from an image of a process that
/// printed `before` (from line `before_at` of `expected` on, then was killed), continues it:
/// `after` is a run of consecutive lines of `expected` that starts within `before`'s range
/// (the checkpoint was taken while `before` was being printed) and, when `finished`, ends
/// where `expected` ends. Returns the line of `expected` at which `after` starts.
pub fn assert_continues(expected: &str, before_at: usize, before: &str, after: &str, finished: bool, what: &str) -> usize {
    let e: Vec<&str> = expected.lines().collect();
    let mut b: Vec<&str> = before.lines().collect();
    if !before.is_empty() && !before.ends_with('\n') {
        b.pop();
    }
    let a: Vec<&str> = after.lines().collect();
    assert_eq!(&e[before_at..before_at + b.len()], &b[..], "{what}: output before the kill is not the uninterrupted run's");
    let start = if a.is_empty() {
        assert!(!finished || before_at + b.len() == e.len(), "{what}: the restarted process printed nothing");
        before_at + b.len()
    } else {
        (before_at..=before_at + b.len())
            .find(|&s| s + a.len() <= e.len() && e[s..s + a.len()] == a[..])
            .unwrap_or_else(|| {
                panic!("{what}: restarted output is not the continuation of the run before it:\n--- before (from line {before_at}):\n{before}--- after:\n{after}")
            })
    };
    if finished {
        assert_eq!(start + a.len(), e.len(), "{what}: the restarted process stopped early:\n{after}");
    }
    start
}

/// The full zdtm-style scenario for one program:
/// 1. run under crum, checkpoint after `points[0]` and `points[1]` lines, SIGKILL;
/// 2. restart from each image: output must stitch with the first run's;
/// 3. checkpoint the restarted process (restart of a restart), SIGKILL, restart again.
pub fn scenario(name: &str, args: &[&str]) {
    scenario_with(name, args, |_| {})
}

pub fn scenario_with(name: &str, args: &[&str], check_files: impl Fn(&Sandbox)) {
    scenario_full(name, args, &[], check_files)
}

/// [`scenario_with`], every `crum restart` with `restart_env_` added to its environment.
pub fn scenario_full(name: &str, args: &[&str], restart_env_: &[(&str, &str)], check_files: impl Fn(&Sandbox)) {
    scenario_prog(&build_c(name), name, args, restart_env_, check_files)
}

/// [`scenario_full`] for a program that is not one of the C test programs (`name` labels
/// it in messages).
pub fn scenario_prog(prog: &Path, name: &str, args: &[&str], restart_env_: &[(&str, &str)], check_files: impl Fn(&Sandbox)) {
    let prog = prog.to_path_buf();
    let sb = Sandbox::new();
    let expected = expected_output(&sb, &prog, args);
    let total = expected.lines().count();
    let points = [total / 4, total / 2];

    let mut p = run_under_crum(&sb, &prog, args, &[], "run1.out");
    p.wait_lines(points[0]);
    let img1 = checkpoint(&sb, p.pid());
    p.wait_lines(points[1]);
    let img2 = checkpoint(&sb, p.pid());
    p.wait_lines(points[1] + 2);
    p.kill_job();
    let before = p.output();

    // Restart from the second image; checkpoint the restarted process, kill it and restart
    // that image too (restart of a restart).
    let mut r2 = restart_env(&sb, &img2, "restart2.out", restart_env_);
    r2.wait_lines(3);
    let img3 = checkpoint(&sb, r2.pid());
    let n = r2.lines();
    r2.wait_lines_or_end(n + 1);
    r2.kill_job();
    let out_r2 = r2.output();
    let s2 = assert_continues(&expected, 0, &before, &out_r2, false, &format!("{name}: restart from the second checkpoint"));
    let mut r3 = restart_env(&sb, &img3, "restart3.out", restart_env_);
    let code = r3.wait_exit();
    assert_eq!(code, 0, "{name}: restart of a restart exited with {code}: {}\nits output ends: {}", r3.stderr(), tail(&r3.output()));
    assert_continues(&expected, s2, &out_r2, &r3.output(), true, &format!("{name}: restart of a restart"));
    check_files(&sb);

    // Restart from the first image, to the end.
    let mut r1 = restart_env(&sb, &img1, "restart1.out", restart_env_);
    let code = r1.wait_exit();
    assert_eq!(code, 0, "{name}: restart from the first checkpoint exited with {code}: {}\nits output ends: {}", r1.stderr(), tail(&r1.output()));
    assert_continues(&expected, 0, &before, &r1.output(), true, &format!("{name}: restart from the first checkpoint"));
    check_files(&sb);
}

/// The last 3 lines of an output (a failing program says FAIL there).
pub fn tail(out: &str) -> String {
    let lines: Vec<&str> = out.lines().collect();
    lines[lines.len().saturating_sub(3)..].join(" | ")
}

/// Reads a whole file as a string.
pub fn read(p: &Path) -> String {
    let mut s = String::new();
    fs::File::open(p).unwrap().read_to_string(&mut s).unwrap();
    s
}
