//! Helpers for the integration tests: building CUDA test programs with the real nvcc and running
//! them under `crum run`, plus the checkpoint helpers (background run, `crum checkpoint`,
//! SIGKILL, `crum restart`) the checkpoint tests use.
//!
//! Binaries: `CRUM_BIN` (default `target/debug/crum`); they are built with cargo when missing.
//! CUDA compiler: `CRUM_CUDA_HOME`, else `scripts/setup-cuda.sh --env` (installs on first use).
#![deny(unsafe_code)]

use std::collections::hash_map::DefaultHasher;
use std::ffi::OsStr;
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
        let shim = target_dir().join("debug/libcrum_libc.so");
        if !bin.exists() || !lib.exists() || !shim.exists() {
            // The whole workspace, as scripts/test.sh builds it: a build of some packages only
            // unifies dependency features otherwise and relinks libcrum.so, which programs of a
            // copy of the suite running beside this one may be loading at that moment.
            let st = Command::new(env!("CARGO"))
                .args(["build", "-q", "--workspace"])
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

/// A temporary name in `dir` for building `name`, then renamed into place: unique per process
/// and thread, since tests running in parallel (threads of one binary, several binaries)
/// may build the same program at once.
pub fn build_tmp(dir: &Path, name: &str) -> PathBuf {
    let thread = format!("{:?}", std::thread::current().id()).replace(|c: char| !c.is_ascii_alphanumeric(), "");
    dir.join(format!("{name}.tmp{}-{thread}", std::process::id()))
}

/// Compile `integration-tests/cuda/<name>.cu` with `nvcc -cudart shared -arch=sm_80` into
/// `integration-tests/build/`, cached by source, local headers, flags and nvcc version. Safe under parallel
/// tests: each build writes a unique temporary file and renames it into place atomically.
pub fn build_cuda(name: &str) -> Result<PathBuf> {
    build_cuda_with(name, &[])
}

/// The sources of program `name`: `cuda/<name>.cu`, or every `.cu` file of the folder
/// `cuda/<name>/` (a program of several files, built with separate compilation), sorted.
fn cuda_sources(name: &str) -> Result<Vec<PathBuf>> {
    let dir = cuda_dir().join(name);
    if !dir.is_dir() {
        return Ok(vec![cuda_dir().join(format!("{name}.cu"))]);
    }
    let mut srcs: Vec<PathBuf> = fs::read_dir(&dir)
        .with_context(|| format!("read {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "cu"))
        .collect();
    srcs.sort();
    if srcs.is_empty() {
        bail!("{} holds no .cu files", dir.display());
    }
    Ok(srcs)
}

/// [`build_cuda`] with extra nvcc flags (e.g. `-lpthread`). A program that is a folder
/// `cuda/<name>/` of several `.cu` files is built with separate compilation (`-rdc=true`:
/// relocatable device code per file, one device-link step), as CMake's
/// `CUDA_SEPARABLE_COMPILATION ON` builds it.
///
/// Compiling and linking are two steps, each cached: the objects by source, local headers,
/// compile flags and nvcc version, the executable by those and the link flags. The runtime
/// is chosen at link time only (`-cudart static` in `extra`, else `-cudart shared`), so the
/// static build of a program whose shared build exists costs one link (the corpus runs
/// twice, issue 13: `tests/cuda_static.rs`).
pub fn build_cuda_with(name: &str, extra: &[&str]) -> Result<PathBuf> {
    let srcs = cuda_sources(name)?;
    let home = cuda_home()?;
    let nvcc = home.join("bin/nvcc");
    let mut h = DefaultHasher::new();
    for src in &srcs {
        src.file_name().hash(&mut h);
        fs::read(src).with_context(|| format!("read {}", src.display()))?.hash(&mut h);
    }
    let rdc: &[&str] = if cuda_dir().join(name).is_dir() { &["-rdc=true"] } else { &[] };
    // The local headers (common.h, and those of a program's own folder) are part of it.
    let own = cuda_dir().join(name);
    let folders = if own.is_dir() { vec![cuda_dir(), own] } else { vec![cuda_dir()] };
    let mut headers: Vec<PathBuf> = folders
        .iter()
        .map(fs::read_dir)
        .collect::<std::io::Result<Vec<_>>>()?
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "h"))
        .collect();
    headers.sort();
    for hdr in headers {
        fs::read(&hdr)?.hash(&mut h);
    }
    // `extra` may choose the runtime (`-cudart static`): a link flag; the rest go to both steps.
    let (cudart, flags): (Vec<&str>, Vec<&str>) = match extra.iter().position(|&f| f == "-cudart") {
        Some(i) => (
            extra[i..(i + 2).min(extra.len())].to_vec(),
            extra[..i].iter().chain(extra.get(i + 2..).unwrap_or_default()).copied().collect(),
        ),
        None => (vec!["-cudart", "shared"], extra.to_vec()),
    };
    flags.hash(&mut h);
    nvcc_version(&nvcc)?.hash(&mut h);
    let objects_key = h.finish();
    cudart.hash(&mut h);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("build");
    fs::create_dir_all(&dir)?;
    let exe = dir.join(format!("{name}-{:016x}", h.finish()));
    if exe.exists() {
        return Ok(exe);
    }
    let path = format!(
        "{}:{}",
        home.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = |args: &[&OsStr], what: &str| -> Result<()> {
        let out = Command::new(&nvcc).args(args).env("PATH", &path).output().context("run nvcc")?;
        if !out.status.success() {
            bail!("nvcc ({what}) failed:\n{}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    };
    let mut objects = Vec::new();
    for src in &srcs {
        let stem = src.file_stem().and_then(|s| s.to_str()).unwrap_or("src");
        let obj = dir.join(format!("{name}-{objects_key:016x}-{stem}.o"));
        if !obj.exists() {
            let tmp = build_tmp(&dir, &format!("{name}-{stem}.o"));
            let mut args: Vec<&OsStr> = ["-arch=sm_80", "-O2"].iter().chain(rdc).map(OsStr::new).collect();
            args.extend([OsStr::new("-c"), OsStr::new("-o"), tmp.as_os_str(), src.as_os_str()]);
            args.extend(flags.iter().map(OsStr::new));
            if let Err(e) = run(&args, &src.display().to_string()) {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
            install_new(&tmp, &obj)?;
        }
        objects.push(obj);
    }
    let tmp = build_tmp(&dir, name);
    let mut args: Vec<&OsStr> = cudart.iter().chain(&["-arch=sm_80", "-O2"]).chain(rdc).map(OsStr::new).collect();
    args.extend([OsStr::new("-o"), tmp.as_os_str()]);
    args.extend(objects.iter().map(|o| o.as_os_str()));
    args.extend(flags.iter().map(OsStr::new));
    if let Err(e) = run(&args, &format!("linking {name}")) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    install_new(&tmp, &exe)?;
    Ok(exe)
}

/// A stripped copy of the executable `exe` (`strip`: no symbol table, as most binaries users
/// have), beside it as `<exe>-stripped`, made once.
pub fn stripped_copy(exe: &Path) -> Result<PathBuf> {
    let mut name = exe.as_os_str().to_owned();
    name.push("-stripped");
    let out = PathBuf::from(name);
    if out.exists() {
        return Ok(out);
    }
    let tmp = build_tmp(exe.parent().context("executable without a folder")?, "stripped");
    let st = Command::new("strip").arg("-o").arg(&tmp).arg(exe).status().context("run strip")?;
    if !st.success() {
        let _ = fs::remove_file(&tmp);
        bail!("strip {} failed: {st}", exe.display());
    }
    install_new(&tmp, &out)?;
    Ok(out)
}

/// Puts the freshly built `tmp` at `exe` unless another test (or another copy of the suite
/// sharing this tree) got there first: an executable in place is never replaced, since a
/// program running it would find `/proc/self/exe` deleted (and fail to execute itself).
pub fn install_new(tmp: &Path, exe: &Path) -> Result<()> {
    let r = fs::hard_link(tmp, exe);
    let _ = fs::remove_file(tmp);
    match r {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e).with_context(|| format!("install {}", exe.display())),
        _ => Ok(()),
    }
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
    // A guard against a hang only: the heaviest programs (cg_tiles) took over 120 s with
    // three copies of the suite and two busy loops on 2 cores.
    let r = crum_run(&exe, args, Duration::from_secs(600)).expect("crum run");
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
        find_program(self.pid(), prog).with_context(|| {
            format!("no process running {} under crum run (pid {})", prog.display(), self.pid())
        })
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

/// Every descendant of `pid` (children first, then theirs).
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for c in children(p) {
            out.push(c);
            todo.push(c);
        }
    }
    out
}

/// SIGKILL to `root` and every descendant, stopped first from the top down (SIGSTOP), so
/// that no process of the tree makes a new child while the others die (python3's
/// multiprocessing pool replaces a worker that dies: the new one outlived the kill).
/// Returns every pid killed.
pub fn kill_tree(root: u32) -> Vec<u32> {
    use nix::sys::signal::{kill, Signal};
    let signal = |p: u32, sig: Signal| {
        let _ = kill(nix::unistd::Pid::from_raw(p as i32), sig);
    };
    signal(root, Signal::SIGSTOP);
    let mut all = vec![root];
    let mut i = 0;
    while i < all.len() {
        // A stopped process makes no more children: its list is final once it is stopped.
        for c in children(all[i]) {
            if !all.contains(&c) {
                signal(c, Signal::SIGSTOP);
                all.push(c);
            }
        }
        i += 1;
    }
    for &p in &all {
        signal(p, Signal::SIGKILL);
    }
    all
}

/// Waits until none of `pids` runs any more (gone, or a zombie), up to 60 s.
pub fn wait_gone(pids: &[u32]) {
    let t0 = std::time::Instant::now();
    let running = |p: &u32| {
        let Ok(stat) = fs::read_to_string(format!("/proc/{p}/stat")) else { return false };
        stat.rsplit_once(") ").and_then(|(_, r)| r.split(' ').next()).is_some_and(|s| s != "Z" && s != "X")
    };
    while pids.iter().any(running) {
        if t0.elapsed() > std::time::Duration::from_secs(60) {
            let left: Vec<String> = pids.iter().filter(|p| running(p)).map(|p| describe_tree(*p)).collect();
            eprintln!("still running 60 s after SIGKILL: {}", left.join(""));
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// What `pid` and its descendants are doing, thread by thread (name, state, wait channel,
/// system call and kernel stack where readable): put into a test's failure message when a
/// process did not finish, so a hang seen once can be understood.
pub fn describe_tree(pid: u32) -> String {
    let mut out = String::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let cmd = fs::read(format!("/proc/{p}/cmdline"))
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " ").trim().to_string())
            .unwrap_or_default();
        out.push_str(&format!("process {p}: {cmd}\n"));
        let Ok(tasks) = fs::read_dir(format!("/proc/{p}/task")) else { continue };
        for t in tasks.flatten() {
            let read = |f: &str| fs::read_to_string(t.path().join(f)).unwrap_or_default().trim().to_string();
            let stat = read("stat");
            let state = stat.rsplit(") ").next().and_then(|r| r.split(' ').next()).unwrap_or("?").to_string();
            out.push_str(&format!(
                "  task {} ({}): state {state}, wchan {}, syscall {}\n",
                t.file_name().to_string_lossy(),
                read("comm"),
                read("wchan"),
                read("syscall")
            ));
            for l in read("stack").lines().take(12) {
                out.push_str(&format!("      {l}\n"));
            }
        }
        todo.extend(children(p));
    }
    // A restarted program's proxy is not its child: it watches the program (`--watch-pid`).
    let mut procs: Vec<u32> = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        procs.push(p);
        todo.extend(children(p));
    }
    let watch = format!("--watch-pid\0{pid}\0");
    if let Ok(all) = fs::read_dir("/proc") {
        for e in all.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            if fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(&watch)) {
                out.push_str(&format!("process {p} is the proxy watching {pid}\n"));
                procs.push(p);
            }
        }
    }
    // User-space stacks of every thread, where gdb is installed (a hang seen once under load
    // can then be read, not guessed).
    for p in procs {
        let Ok(o) = Command::new("timeout")
            .args(["60", "gdb", "-p", &p.to_string(), "-batch", "-nx", "-ex", "thread apply all bt 30"])
            .stdin(Stdio::null())
            .output()
        else {
            break;
        };
        if !o.status.success() && o.stdout.is_empty() {
            break;
        }
        out.push_str(&format!("--- gdb backtraces of {p}:\n"));
        for l in String::from_utf8_lossy(&o.stdout).lines().filter(|l| l.starts_with('#') || l.starts_with("Thread")) {
            out.push_str(&format!("{l}\n"));
        }
    }
    out
}

/// The child of `parent` (a `crum run`) whose command line starts with `prog`: the program,
/// not the proxy. Waits up to 10 s for it to appear.
fn find_program(parent: u32, prog: &Path) -> Result<u32> {
    let start = Instant::now();
    loop {
        if let Some(p) = children(parent).into_iter().find(|&c| {
            fs::read(format!("/proc/{c}/cmdline"))
                .map(|cl| cl.split(|&b| b == 0).next() == Some(prog.as_os_str().as_encoded_bytes()))
                .unwrap_or(false)
        }) {
            return Ok(p);
        }
        if start.elapsed() > Duration::from_secs(10) {
            bail!("not found within 10 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
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

/// Closes every fd above 2 in the child: descriptors leaked by whatever started the tests
/// (pipes to other processes, e.g. a jobserver) would make restarts fail, by design.
#[allow(unsafe_code)]
fn close_inherited(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only calls close_range,
    // which is async-signal-safe, allocates nothing and touches only the child's fd table.
    unsafe {
        cmd.pre_exec(|| {
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            Ok(())
        });
    }
}

/// What a child writes to one of its standard streams, through a pipe: a test reads it while
/// the child runs, and everything the child wrote before it died is there once it is reaped
/// (the pipe is drained on every read, under the lock the collecting thread reads with). A
/// pipe and not a file because a restart gives a program back the regular files its
/// standard streams were; a pipe is the restarting process's own, like a terminal. A copy
/// goes to a file for post-mortems.
pub struct Capture {
    inner: std::sync::Arc<CaptureInner>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct CaptureInner {
    read: std::io::PipeReader,
    buf: std::sync::Mutex<(Vec<u8>, Option<fs::File>)>,
    stop: std::sync::atomic::AtomicBool,
}

impl CaptureInner {
    /// Moves whatever the pipe holds into the buffer; false at end of file.
    fn drain(&self) -> bool {
        use std::io::Write;
        let mut g = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        let mut chunk = [0u8; 65536];
        loop {
            match (&self.read).read(&mut chunk) {
                Ok(0) => return false,
                Ok(n) => {
                    g.0.extend_from_slice(&chunk[..n]);
                    if let Some(f) = &mut g.1 {
                        let _ = f.write_all(&chunk[..n]);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return true,
            }
        }
    }
}

impl Capture {
    /// A pipe whose write end is for the child (`Stdio::from`), copied to `copy` too.
    pub fn new(copy: &Path) -> Result<(Capture, std::io::PipeWriter)> {
        let (read, write) = std::io::pipe().context("pipe")?;
        set_nonblocking(&read)?;
        let file = fs::File::create(copy).with_context(|| format!("create {}", copy.display()))?;
        let inner = std::sync::Arc::new(CaptureInner {
            read,
            buf: std::sync::Mutex::new((Vec::new(), Some(file))),
            stop: std::sync::atomic::AtomicBool::new(false),
        });
        let i = inner.clone();
        let thread = std::thread::spawn(move || {
            while !i.stop.load(std::sync::atomic::Ordering::Relaxed) {
                if !poll_in(&i.read, 50) {
                    continue;
                }
                if !i.drain() {
                    break;
                }
            }
        });
        Ok((Capture { inner, thread: Some(thread) }, write))
    }

    /// Everything written so far.
    pub fn bytes(&self) -> Vec<u8> {
        self.inner.drain();
        self.inner.buf.lock().unwrap_or_else(|e| e.into_inner()).0.clone()
    }

    /// Everything written so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes()).into_owned()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.inner.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[allow(unsafe_code)]
fn set_nonblocking(fd: &impl std::os::fd::AsRawFd) -> Result<()> {
    // SAFETY: fcntl on a descriptor we own; no memory is passed.
    let r = unsafe {
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK)
    };
    if r < 0 {
        bail!("fcntl O_NONBLOCK: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `fd` is readable (or at end of file) within `ms` milliseconds.
#[allow(unsafe_code)]
fn poll_in(fd: &impl std::os::fd::AsRawFd, ms: i32) -> bool {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one live pollfd.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

/// Spawns `cmd` with stdin from /dev/null and stdout, stderr captured ([`Capture`]; copies
/// in `out` and `out` with the extension `err`).
pub fn spawn_captured(cmd: &mut Command, out: &Path) -> Result<(Child, Capture, Capture)> {
    let (o, ow) = Capture::new(out)?;
    let (e, ew) = Capture::new(&out.with_extension("err"))?;
    let child = cmd.stdin(Stdio::null()).stdout(ow).stderr(ew).spawn()?;
    // The write ends must not stay open here (a child's exit would not end the stream).
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    Ok((child, o, e))
}

/// The least time [`Proc::wait`] gives a program before it counts as hung.
pub const HANG_GUARD: Duration = Duration::from_secs(600);

/// A program under `crum run` or `crum restart` with stdout and stderr captured, so a test
/// can see how much it printed before a checkpoint and stitch the outputs of a chain of
/// restarts together ([`Proc::stdout_prefix`]).
pub struct Proc {
    pub child: Child,
    /// Copy of stdout (stderr's is next to it, `.err`).
    pub out: PathBuf,
    stdout: Capture,
    stderr: Capture,
    /// The program's executable when `child` is `crum run` (the program is its child); None
    /// when `child` is `crum restart` (which becomes the program).
    prog: Option<PathBuf>,
    what: String,
}

impl Proc {
    fn spawn(mut cmd: Command, out: &Path, prog: Option<&Path>, what: String) -> Result<Proc> {
        close_inherited(&mut cmd);
        let (child, stdout, stderr) = spawn_captured(&mut cmd, out).with_context(|| format!("spawn {what}"))?;
        Ok(Proc {
            child,
            out: out.to_path_buf(),
            stdout,
            stderr,
            prog: prog.map(Path::to_path_buf),
            what,
        })
    }

    /// `crum run [--device D] [extra crum run options] -- prog args`, environment `env` added,
    /// stdout to `out`.
    pub fn run(
        prog: &Path,
        args: &[&str],
        crum_opts: &[&str],
        env: &[(&str, &OsStr)],
        out: &Path,
    ) -> Result<Proc> {
        let mut c = Command::new(crum_bin());
        c.arg("run").args(crum_opts).arg("--").arg(prog).args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        let what = format!("crum run {} {}", prog.display(), args.join(" "));
        Proc::spawn(c, out, Some(prog), what)
    }

    /// `crum restart [--device D] image` (an image or a directory of images), stdout to `out`.
    pub fn restart(image: &Path, device: Option<&str>, out: &Path) -> Result<Proc> {
        let mut c = Command::new(crum_bin());
        c.arg("restart");
        if let Some(d) = device {
            c.args(["--device", d]);
        }
        c.arg(image);
        let what = format!("crum restart {}", image.display());
        Proc::spawn(c, out, None, what)
    }

    /// Pid of the program: the child of `crum run` running the program, or the restarted
    /// process itself.
    pub fn app_pid(&self) -> Result<u32> {
        let Some(prog) = &self.prog else {
            return Ok(self.child.id());
        };
        find_program(self.child.id(), prog).with_context(|| format!("{}: no program process found", self.what))
    }

    /// Everything printed on stdout so far.
    pub fn stdout(&self) -> String {
        self.stdout.text()
    }

    /// Everything printed on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.text()
    }

    /// Bytes on stdout now.
    pub fn stdout_len(&self) -> u64 {
        self.stdout.bytes().len() as u64
    }

    /// The first `len` bytes of stdout.
    pub fn stdout_prefix(&self, len: u64) -> String {
        let s = self.stdout.bytes();
        String::from_utf8_lossy(&s[..(len as usize).min(s.len())]).into_owned()
    }

    /// A description for failure messages: command, stdout, stderr.
    pub fn report(&self) -> String {
        format!(
            "{}\n--- stdout:\n{}--- stderr:\n{}",
            self.what,
            self.stdout(),
            self.stderr()
        )
    }

    /// `crum checkpoint <program>` into `dir`: the image path.
    pub fn checkpoint(&self, dir: &Path) -> Result<PathBuf> {
        checkpoint(self.app_pid()?, dir).with_context(|| self.report())
    }

    /// Has the process ended? (reaps it)
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// SIGKILL the program (as in a crash) and reap it; `crum run` then ends by itself.
    pub fn kill9(&mut self) -> Result<()> {
        if self.exited() {
            bail!("{} ended before it could be killed", self.report());
        }
        let pid = self.app_pid()?;
        // SIGKILL through kill(1): no unsafe needed.
        let st = Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()?;
        if !st.success() {
            bail!("kill -9 {pid} failed");
        }
        let start = Instant::now();
        while !self.exited() {
            if start.elapsed() > Duration::from_secs(30) {
                let _ = self.child.kill();
                bail!("{} did not end after its program was killed", self.what);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// Wait for the end: the exit code (None: killed by a signal). `timeout` guards against
    /// hangs only, never measures speed: it is at least [`HANG_GUARD`], since three copies of
    /// the suite and two busy loops on 2 cores make programs many times slower (a checkpoint
    /// test's program took over 180 s that way).
    pub fn wait(&mut self, timeout: Duration) -> Result<Option<i32>> {
        let timeout = timeout.max(HANG_GUARD);
        let start = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait()? {
                return Ok(st.code());
            }
            if start.elapsed() > timeout {
                let state = describe_tree(self.child.id());
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!(
                    "{} did not finish within {timeout:?}:\n{}\n{state}",
                    self.what,
                    self.report()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Wait for a successful end (exit 0), at most `timeout`; stdout.
    pub fn success(&mut self, timeout: Duration) -> Result<String> {
        let code = self.wait(timeout)?;
        if code != Some(0) {
            bail!("exit {code:?}: {}", self.report());
        }
        Ok(self.stdout())
    }
}

impl Drop for Proc {
    /// A failing test must not leave programs behind: kill what still runs.
    fn drop(&mut self) {
        if !self.exited() {
            if self.prog.is_some() {
                for c in children(self.child.id()) {
                    let _ = Command::new("kill").args(["-9", &c.to_string()]).status();
                }
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The test side of `GATE(k)` in `cuda/common.h`: the program announces gate k by writing k
/// to `<dir>/at` and waits there until `<dir>/go-<k>` (or `<dir>/go-all`) exists. Set
/// `CRUM_TEST_GATE` to [`Gate::dir`] in the program's environment ([`Gate::env`]).
pub struct Gate {
    pub dir: PathBuf,
}

impl Gate {
    /// A gate directory that lets no gate pass yet.
    pub fn new(dir: &Path) -> Result<Gate> {
        fs::create_dir_all(dir)?;
        let g = Gate {
            dir: dir.to_path_buf(),
        };
        g.reset(0)?;
        Ok(g)
    }

    /// The environment entry that turns the gates on.
    pub fn env(&self) -> (&'static str, &OsStr) {
        ("CRUM_TEST_GATE", self.dir.as_os_str())
    }

    /// Let gates up to `k` pass (`i64::MAX`: all of them).
    pub fn open_to(&self, k: i64) -> Result<()> {
        if k == i64::MAX {
            fs::write(self.dir.join("go-all"), "")?;
            return Ok(());
        }
        for g in 1..=k {
            fs::write(self.dir.join(format!("go-{g}")), "")?;
        }
        Ok(())
    }

    /// Forget which gate was reached and which were open (before a restart), then let gates
    /// up to `k` pass.
    pub fn reset(&self, k: i64) -> Result<()> {
        for e in fs::read_dir(&self.dir)?.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name == "at" || name.starts_with("go-") {
                fs::remove_file(e.path())?;
            }
        }
        self.open_to(k)
    }

    /// The gate last reached.
    pub fn at(&self) -> Option<i64> {
        fs::read_to_string(self.dir.join("at"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// Wait until `p` reaches gate `k` (error if it ends first or takes over 2 minutes).
    pub fn wait_at(&self, k: i64, p: &mut Proc) -> Result<()> {
        let start = Instant::now();
        while self.at() != Some(k) {
            if p.exited() {
                bail!("ended before gate {k}: {}", p.report());
            }
            if start.elapsed() > Duration::from_secs(120) {
                bail!(
                    "gate {k} not reached in 2 minutes (at {:?}): {}",
                    self.at(),
                    p.report()
                );
            }
            std::thread::sleep(Duration::from_millis(3));
        }
        Ok(())
    }
}

/// How [`gated_scenario`] runs a program.
#[derive(Clone, Debug)]
pub struct ScenarioOpts {
    /// nvcc flags.
    pub nvcc: Vec<&'static str>,
    /// Program arguments.
    pub args: Vec<&'static str>,
    /// Compare the uninterrupted run with `cuda/expected/<name>.out`.
    pub expected: bool,
    /// Also restart from the second and third image, each to the end.
    pub every_image: bool,
    /// `--device` of every `crum restart` (None: the default).
    pub restart_device: Option<&'static str>,
    /// Options of `crum run` (e.g. `--managed uffd`).
    pub run_opts: Vec<&'static str>,
    /// Run a stripped copy of the program ([`stripped_copy`]).
    pub strip: bool,
}

impl Default for ScenarioOpts {
    fn default() -> Self {
        ScenarioOpts {
            nvcc: Vec::new(),
            args: Vec::new(),
            expected: true,
            every_image: true,
            restart_device: None,
            run_opts: Vec::new(),
            strip: false,
        }
    }
}

/// What [`gated_scenario`] measured, for tests that look further.
pub struct ScenarioOutcome {
    /// The uninterrupted run's stdout.
    pub reference: String,
    /// The three images of the first run (gates 1, 2, 3) and the image of the restarted
    /// process (gate 2).
    pub images: Vec<PathBuf>,
    /// The scenario's directory (images, outputs); removed when dropped.
    pub dir: tempfile::TempDir,
}

/// The zdtm-style scenario for a CUDA program with gates 1..3 (`GATE` in `cuda/common.h`):
///
/// 1. an uninterrupted run under `crum run`: exit 0, last line `PASS` (the program checked its
///    results against its CPU reference), stdout as `cuda/expected/<name>.out`;
/// 2. a run with the gates on: checkpointed at gates 1, 2 and 3 (images I1–I3), SIGKILLed at
///    gate 3;
/// 3. restart from I1, checkpointed at gate 2 (image J2), going on to the end;
/// 4. restart of that restart from J2, to the end;
/// 5. with `every_image`, restarts from I2 and from I3, each to the end.
///
/// Every chain's stdout — the part each process had printed when its image was taken, then
/// the last process's — must equal the uninterrupted run's.
pub fn gated_scenario(name: &str, o: &ScenarioOpts) -> Result<ScenarioOutcome> {
    let mut exe = build_cuda_with(name, &o.nvcc)?;
    if o.strip {
        exe = stripped_copy(&exe)?;
    }
    let tmp = tempfile::Builder::new()
        .prefix(&format!("crum-{name}-"))
        .tempdir()?;
    let t = tmp.path();
    let images = t.join("images");
    fs::create_dir_all(&images)?;
    let limit = Duration::from_secs(180);

    let mut reference = Proc::run(&exe, &o.args, &o.run_opts, &[], &t.join("reference.out"))?;
    let want = reference.success(limit).context("uninterrupted run")?;
    if want.lines().last() != Some("PASS") {
        bail!(
            "uninterrupted run did not end with PASS:\n{}",
            reference.report()
        );
    }
    if o.expected {
        check_expected(name, &want);
    }

    let gate = Gate::new(&t.join("gate"))?;
    let genv = gate.env();
    let mut first = Proc::run(&exe, &o.args, &o.run_opts, &[genv], &t.join("first.out"))?;
    let mut imgs = Vec::new();
    let mut printed = Vec::new();
    for k in 1..=3 {
        gate.wait_at(k, &mut first)?;
        printed.push(first.stdout_len());
        imgs.push(
            first
                .checkpoint(&images)
                .with_context(|| format!("checkpoint at gate {k}"))?,
        );
        if k < 3 {
            gate.open_to(k)?;
        }
    }
    first.kill9()?;
    let before = first.stdout();
    if !want.starts_with(&before) {
        bail!("{name}: output before the kill is not the uninterrupted run's:\n{before}\n--- want:\n{want}");
    }

    let dev = o.restart_device;
    let check = |what: &str, got: String| -> Result<()> {
        if got != want {
            bail!("{name}: {what}: output differs from the uninterrupted run\n--- got:\n{got}--- want:\n{want}");
        }
        Ok(())
    };

    // Restart from I1, checkpoint the restarted process at gate 2; it goes on to the end.
    gate.reset(1)?;
    let mut r1 = Proc::restart(&imgs[0], dev, &t.join("r1.out"))?;
    gate.wait_at(2, &mut r1).context("restart from gate 1")?;
    let r1_printed = r1.stdout_len();
    let j2 = r1
        .checkpoint(&images)
        .context("checkpoint of the restarted process")?;
    gate.open_to(i64::MAX)?;
    let tail = r1
        .success(limit)
        .context("restarted process after its checkpoint")?;
    check(
        "restart from gate 1, checkpointed at gate 2, to the end",
        first.stdout_prefix(printed[0]) + &tail,
    )?;

    // Restart of the restart, to the end.
    gate.reset(i64::MAX)?;
    let mut r2 = Proc::restart(&j2, dev, &t.join("r2.out"))?;
    let tail = r2.success(limit).context("restart of a restart")?;
    check(
        "restart of a restart (gate 1 → restart → gate 2 → restart)",
        first.stdout_prefix(printed[0]) + &r1.stdout_prefix(r1_printed) + &tail,
    )?;

    if o.every_image {
        for (i, img) in imgs.iter().enumerate().skip(1) {
            gate.reset(i64::MAX)?;
            let mut r = Proc::restart(img, dev, &t.join(format!("from{}.out", i + 1)))?;
            let tail = r
                .success(limit)
                .with_context(|| format!("restart from gate {}", i + 1))?;
            check(
                &format!("restart from gate {}", i + 1),
                first.stdout_prefix(printed[i]) + &tail,
            )?;
        }
    }
    imgs.push(j2);
    Ok(ScenarioOutcome {
        reference: want,
        images: imgs,
        dir: tmp,
    })
}

/// Checks that `after`, the output of a process restarted from an image taken at an unknown
/// moment while a process printed `before` (flushed lines, from line `before_at` of
/// `expected` on), continues it: `before` is `expected` from `before_at` on, and `after` is a
/// run of consecutive lines of `expected` that starts within `before`'s lines and, when
/// `finished`, ends where `expected` ends. Returns the line of `expected` where `after` starts.
pub fn continues(
    expected: &str,
    before_at: usize,
    before: &str,
    after: &str,
    finished: bool,
) -> Result<usize> {
    let e: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = before.lines().collect();
    let a: Vec<&str> = after.lines().collect();
    if e.len() < before_at + b.len() || e[before_at..before_at + b.len()] != b[..] {
        bail!("the output before the kill is not the uninterrupted run's (from line {before_at}):\n{before}");
    }
    (before_at..=before_at + b.len())
        .find(|&s| {
            s + a.len() <= e.len() && e[s..s + a.len()] == a[..] && (!finished || s + a.len() == e.len())
        })
        .ok_or_else(|| {
            anyhow::anyhow!(
                "the restarted output does not continue the run before it (finished: {finished}):\n--- before (from line {before_at}):\n{before}--- after:\n{after}--- want:\n{expected}"
            )
        })
}

/// Complete images in `dir` (`ckpt-<stamp>-<pid>-<seq>` with an inventory): (seq, path).
pub fn images_in(dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut v: Vec<(u64, PathBuf)> = fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    let seq = name
                        .strip_prefix("ckpt-")?
                        .rsplit('-')
                        .next()?
                        .parse()
                        .ok()?;
                    e.path()
                        .join("inventory")
                        .is_file()
                        .then(|| (seq, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The `checkpoint pause` lines of a `CRUM_LOG=crum_ckpt=info` log, as `key -> value` maps of
/// their numeric fields (`quiesce_us`, `drain_us`, `device_us`, `stop_us`, `fork_us`,
/// `pause_us`, `device_bytes`, ...).
pub fn pause_lines(log: &str) -> Vec<std::collections::BTreeMap<String, u64>> {
    log.lines()
        .filter(|l| l.contains("checkpoint pause"))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|w| {
                    let (k, v) = w.split_once('=')?;
                    Some((k.to_string(), v.parse().ok()?))
                })
                .collect()
        })
        .collect()
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

    #[test]
    fn describe_tree_names_a_sleeping_child_and_its_state() {
        // Long enough to outlive gdb's backtraces of this process under load (it is killed).
        let mut c = Command::new("sleep").arg("600").spawn().unwrap();
        let me = std::process::id();
        let mut d = String::new();
        for _ in 0..2000 {
            d = describe_tree(me);
            if d.contains("(sleep): state S") {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // With gdb installed, the user-space stack of every thread comes too.
        let gdb = Command::new("gdb").arg("--version").output().is_ok_and(|o| o.status.success());
        let sleeper = if gdb { describe_tree(c.id()) } else { String::new() };
        c.kill().unwrap();
        c.wait().unwrap();
        assert!(d.contains(&format!("process {me}:")), "{d}");
        assert!(d.contains("sleep 600") && d.contains("(sleep): state S"), "{d}");
        assert!(!gdb || sleeper.contains(&format!("--- gdb backtraces of {}:", c.id())) && sleeper.contains("#0 "), "{sleeper}");
    }
}
