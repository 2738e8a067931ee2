//! stdin, stdout and stderr redirected to regular files (`prog < in > out 2>> err`, a batch
//! system's log, `gzip -c < big > out.gz`) are those files again after a restart: cut back to
//! their size at the checkpoint and at the same offset, so output written after the
//! checkpoint is not written twice. One whose file shrank falls back to `crum restart`'s own
//! stream with a warning. The program checks its own offsets (`c/stdio_files.c`).
mod proc_common;
use proc_common::*;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A program under crum with its standard streams on files; killed when dropped.
struct Redirected(Child);

impl Drop for Redirected {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns `cmd` with stdin from `input`, stdout to `out` (truncated) and stderr appended to
/// `err`, descriptors above 2 closed.
fn spawn_redirected(mut cmd: Command, input: &Path, out: &Path, err: &Path) -> Redirected {
    close_inherited(&mut cmd);
    let i = fs::File::open(input).unwrap();
    let o = fs::File::create(out).unwrap();
    let e = fs::OpenOptions::new().append(true).create(true).open(err).unwrap();
    Redirected(cmd.stdin(i).stdout(o).stderr(e).spawn().unwrap())
}

/// The step the program last wrote to its step file (-1: none yet).
fn step(p: &Path) -> i64 {
    fs::read_to_string(p).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(-1)
}

/// Waits until the step file says at least `n`; panics if `alive` says the program ended.
fn wait_step(p: &Path, n: i64, mut alive: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while step(p) < n {
        assert!(alive(), "the program ended before step {n}");
        assert!(t0.elapsed() < Duration::from_secs(60), "timed out waiting for step {n} (at {})", step(p));
        std::thread::sleep(Duration::from_millis(5));
    }
}

struct Setup {
    sb: Sandbox,
    prog: PathBuf,
    input: PathBuf,
    out: PathBuf,
    err: PathBuf,
    stepf: PathBuf,
    n: i64,
}

impl Setup {
    fn new() -> Setup {
        let sb = Sandbox::new();
        let n = 300;
        let input = sb.path("in.txt");
        fs::write(&input, (0..n).map(|i| format!("in {i}\n")).collect::<String>()).unwrap();
        Setup { prog: build_c("stdio_files"), out: sb.path("out.txt"), err: sb.path("err.txt"), stepf: sb.path("step"), input, n, sb }
    }
    fn expected_out(&self) -> String {
        (0..self.n).map(|i| format!("out {i}\n")).collect::<String>() + "done\n"
    }
    fn expected_err(&self) -> String {
        (0..self.n).map(|i| format!("err {i}\n")).collect()
    }
    /// Runs the program under crum, checkpoints it at about a quarter and a half of its
    /// steps, goes on a little and kills it: the two images.
    fn run_and_kill(&self) -> (PathBuf, PathBuf, i64) {
        let cmd = under_crum(&self.sb, &self.prog, &["300", "15", self.stepf.to_str().unwrap()]);
        let mut p = spawn_redirected(cmd, &self.input, &self.out, &self.err);
        wait_step(&self.stepf, self.n / 4, || p.0.try_wait().unwrap().is_none());
        let s1 = step(&self.stepf);
        let img1 = checkpoint(&self.sb, p.0.id());
        wait_step(&self.stepf, self.n / 2, || p.0.try_wait().unwrap().is_none());
        let img2 = checkpoint(&self.sb, p.0.id());
        let s2 = step(&self.stepf);
        wait_step(&self.stepf, s2 + 3, || p.0.try_wait().unwrap().is_none());
        drop(p);
        (img1, img2, s1)
    }
    fn assert_files_exact(&self, what: &str) {
        assert_eq!(read(&self.out), self.expected_out(), "{what}: stdout file");
        assert_eq!(read(&self.err), self.expected_err(), "{what}: stderr file");
    }
}

#[test]
fn redirected_stdin_stdout_and_stderr_continue_in_their_files_after_restart_and_restart_of_restart() {
    let s = Setup::new();
    let (img1, img2, s1) = s.run_and_kill();

    // The killed run wrote past the second checkpoint; the restart cuts that back.
    let mut r = restart(&s.sb, &img2, "restart2.out");
    assert_eq!(r.wait_exit(), 0, "restart: {}{}", r.stderr(), read(&s.err));
    assert_eq!(r.output(), "", "crum restart's own stdout got the program's output");
    assert_eq!(r.stderr(), "", "crum restart's own stderr got something");
    s.assert_files_exact("restart from the second image");

    // From the first image (the files are complete now: they are cut back to that image's
    // sizes), checkpointed again, killed, restarted again.
    fs::remove_file(&s.stepf).unwrap();
    let mut r1 = restart(&s.sb, &img1, "restart1.out");
    wait_step(&s.stepf, s1 + 3, || r1.child.try_wait().unwrap().is_none());
    let img3 = checkpoint(&s.sb, r1.pid());
    let s3 = step(&s.stepf);
    wait_step(&s.stepf, s3 + 3, || r1.child.try_wait().unwrap().is_none());
    r1.kill9();
    assert_eq!(r1.output(), "");
    let mut r3 = restart(&s.sb, &img3, "restart3.out");
    assert_eq!(r3.wait_exit(), 0, "restart of a restart: {}", r3.stderr());
    assert_eq!(r3.output(), "");
    s.assert_files_exact("restart of a restart");
}

#[test]
fn a_stdout_file_truncated_before_the_restart_falls_back_to_crum_restarts_stdout_with_a_warning() {
    let s = Setup::new();
    let (_, img2, _) = s.run_and_kill();
    // `crum restart ... > out.txt` truncates it: the program's offset is past its end now.
    fs::write(&s.out, "").unwrap();
    let mut r = restart(&s.sb, &img2, "restart.out");
    assert_eq!(r.wait_exit(), 0, "restart: {}{}", r.stderr(), read(&s.err));
    let warn = r.stderr();
    assert!(
        warn.contains("warning: the program's stdout was the file") && warn.contains("out.txt") && warn.contains("shrank"),
        "no warning naming stdout and its file: {warn}"
    );
    assert_eq!(read(&s.out), "", "the truncated file was written to");
    let got = r.output();
    assert!(got.ends_with("out 299\ndone\n") && s.expected_out().ends_with(&got), "crum restart's stdout: {got}");
    // stderr's file was intact: it came back.
    assert_eq!(read(&s.err), s.expected_err());
}

/// Pseudo-random text (words of a fixed vocabulary), `mib` MiB.
fn text(mib: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let words: Vec<String> = (0..4000).map(|_| (0..2 + next() % 8).map(|_| (b'a' + (next() % 26) as u8) as char).collect()).collect();
    let mut v = Vec::with_capacity(mib << 20);
    while v.len() < mib << 20 {
        v.extend_from_slice(words[(next() % 4000) as usize].as_bytes());
        v.push(if next() % 12 == 0 { b'\n' } else { b' ' });
    }
    v
}

/// Offset of fd 1 of `pid` (0 when unreadable).
fn stdout_pos(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/fdinfo/1"))
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("pos:").and_then(|v| v.trim().parse().ok())))
        .unwrap_or(0)
}

/// Waits until the process writes `pos` bytes of stdout; false if it ended first.
fn wait_pos(pid: u32, pos: u64, mut alive: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while stdout_pos(pid) < pos {
        if !alive() {
            return false;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "gzip did not get to {pos} bytes");
        std::thread::sleep(Duration::from_millis(2));
    }
    true
}

/// `crum checkpoint`, or None when it failed because the program had ended.
fn try_checkpoint(sb: &Sandbox, pid: u32, mut alive: impl FnMut() -> bool) -> Option<PathBuf> {
    let out = checkpoint_output(sb, pid);
    if !out.status.success() {
        assert!(!alive(), "crum checkpoint failed: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    Some(PathBuf::from(String::from_utf8_lossy(&out.stdout).lines().last().unwrap().trim()))
}

/// One try with `mib` MiB of input; false when gzip finished before a checkpoint got it.
fn gzip_attempt(mib: usize) -> bool {
    let sb = Sandbox::new();
    let input = sb.path("big.txt");
    let data = text(mib);
    fs::write(&input, &data).unwrap();
    let out = sb.path("big.txt.gz");
    let gzip = PathBuf::from("/bin/gzip");
    let cmd = under_crum(&sb, &gzip, &["-9", "-c"]);
    let mut p = spawn_redirected(cmd, &input, &out, &sb.path("gzip.err"));
    let pid = p.0.id();
    let step = 64 << 10;
    if !wait_pos(pid, step, || p.0.try_wait().unwrap().is_none()) {
        return false;
    }
    let Some(img1) = try_checkpoint(&sb, pid, || p.0.try_wait().unwrap().is_none()) else { return false };
    let at1 = fs::metadata(&out).unwrap().len();
    drop(p);

    // Restart, checkpoint the restarted gzip further on, kill it, restart that image.
    let mut r1 = restart(&sb, &img1, "r1.out");
    if !wait_pos(r1.pid(), at1 + step, || r1.child.try_wait().unwrap().is_none()) {
        // Done before a second checkpoint: what it wrote must be right all the same.
        assert_eq!(r1.wait_exit(), 0, "{}", r1.stderr());
        verify_archive(&out, &data);
        return false;
    }
    let Some(img2) = try_checkpoint(&sb, r1.pid(), || r1.child.try_wait().unwrap().is_none()) else { return false };
    r1.kill9();
    let mut r2 = restart(&sb, &img2, "r2.out");
    assert_eq!(r2.wait_exit(), 0, "restarted gzip failed: {}", r2.stderr());
    assert_eq!(r2.output(), "", "gzip's output went to crum restart's stdout");
    verify_archive(&out, &data);
    true
}

/// `gzip -t` passes and the archive holds `data`.
fn verify_archive(out: &Path, data: &[u8]) {
    let t = Command::new("/bin/gzip").arg("-t").arg(out).output().unwrap();
    assert!(t.status.success(), "gzip -t: {}", String::from_utf8_lossy(&t.stderr));
    let d = Command::new("/bin/gzip").arg("-dc").arg(out).stderr(Stdio::inherit()).output().unwrap();
    assert!(d.stdout == data, "the archive does not hold the input ({} of {} bytes)", d.stdout.len(), data.len());
}

/// A real program: `gzip -9 -c < big > big.gz` under crum, checkpointed, killed, restarted,
/// checkpointed again, killed, restarted: the archive is valid and holds the input. gzip's
/// speed is not ours to pace, so a gzip that ends before a checkpoint gets it is tried again
/// with four times the input.
#[test]
fn gzip_into_a_redirected_file_restarts_into_a_valid_archive() {
    if !Path::new("/bin/gzip").exists() {
        eprintln!("skipped: no /bin/gzip");
        return;
    }
    let mut mib = 24;
    while !gzip_attempt(mib) {
        assert!(mib < 1536, "gzip always finished before its checkpoint");
        mib *= 4;
    }
}

/// A pseudo-terminal the program made and took as the controlling terminal of its own
/// session (CRIU's `pty03`, `tty00`) cannot be made again: the checkpoint names the master
/// side and the controlling terminal (warnings; `--strict` writes no image), a restart of the
/// image is refused naming the master side (before, the program came back with a new,
/// unrelated pty and no controlling terminal), and the program goes on with its terminal.
#[test]
fn a_pseudo_terminal_the_program_made_is_named_at_checkpoint_and_its_restart_refused() {
    let sb = Sandbox::new();
    let prog = build_c("pty_session");
    let mut p = run_under_crum(&sb, &prog, &[], &[], "run.out");
    p.wait_lines(1);
    let c = checkpoint_output(&sb, p.pid());
    let err = String::from_utf8_lossy(&c.stderr);
    assert!(c.status.success(), "{err}");
    assert!(
        err.contains("master side of pseudo-terminal /dev/pts/") && err.contains("with controlling terminal /dev/pts/"),
        "the pty and the controlling terminal are not named: {err}"
    );
    let img = PathBuf::from(String::from_utf8_lossy(&c.stdout).trim());
    let c = checkpoint_output_with(&sb, p.pid(), &["--strict"]);
    assert!(!c.status.success(), "--strict wrote an image");
    // The program goes on with its terminal as it was.
    fs::write(sb.path("run/go"), "").unwrap();
    assert_eq!(p.wait_exit(), 0, "{}", p.output());
    assert!(p.output().ends_with("PASS\n"), "{}", p.output());
    // The image is not restarted with a terminal other than the program's.
    let mut r = restart(&sb, &img, "restart.out");
    let code = r.wait_exit();
    assert_ne!(code, 0, "the restart ran: {}", r.output());
    assert!(r.stderr().contains("master side of pseudo-terminal"), "the refusal does not name the pty: {}", r.stderr());
    assert!(!r.output().contains("PASS"), "{}", r.output());
}
