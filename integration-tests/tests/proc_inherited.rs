//! Descriptors a program inherited when it was started under crum (a pipe from the shell or
//! batch system that launched it) are not the program's to restore: `crum restart` passes
//! its own descriptor of the same number, or /dev/null with a warning, and restart of a
//! restart works the same. What a restart cannot restore and the program made itself is
//! named when the image is written, and `--strict` refuses to write that image.
mod proc_common;
use proc_common::*;

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A pipe, close-on-exec in this process: (read end, write end).
fn pipe() -> (std::fs::File, OwnedFd) {
    let mut p = [0i32; 2];
    // SAFETY: pipe2 writes two new descriptors into the live array; each is owned once below.
    assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: as above.
    unsafe { (std::fs::File::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) }
}

/// `cmd` with fds above 2 closed and `fd7` (if any) as its fd 7.
fn with_fd7(cmd: &mut Command, fd7: Option<&OwnedFd>) {
    let raw = fd7.map_or(-1, |f| f.as_raw_fd());
    // SAFETY: dup2/close_range are async-signal-safe and touch only the child's table.
    unsafe {
        cmd.pre_exec(move || {
            if raw >= 0 {
                let hi = libc::fcntl(raw, libc::F_DUPFD, 100);
                libc::syscall(libc::SYS_close_range, 3u32, 99u32, 0u32);
                libc::dup2(hi, 7);
                libc::syscall(libc::SYS_close_range, 8u32, u32::MAX, 0u32);
            } else {
                libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            }
            Ok(())
        });
    }
}

fn spawn_with_fd7(sb: &Sandbox, mut cmd: Command, fd7: Option<&OwnedFd>, name: &str) -> Proc {
    with_fd7(&mut cmd, fd7);
    Proc::captured(&mut cmd, sb.path(name))
}

fn run_with_fd7(sb: &Sandbox, args: &[&str], fd7: &OwnedFd, env: &[(&str, &str)]) -> Proc {
    let mut cmd = under_crum(sb, &build_c("inherited_fd"), args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    spawn_with_fd7(sb, cmd, Some(fd7), "run.out")
}

fn restart_with_fd7(sb: &Sandbox, image: &Path, fd7: Option<&OwnedFd>, name: &str) -> Proc {
    let mut cmd = Command::new(crum_bin());
    cmd.arg("restart").arg(image).current_dir(sb.path("run")).env("CRUM_CONTROL_DIR", sb.sock());
    spawn_with_fd7(sb, cmd, fd7, name)
}

/// Everything written into the pipe until every writer closed it.
fn drain(mut r: std::fs::File) -> String {
    let mut s = String::new();
    r.read_to_string(&mut s).unwrap();
    s
}

/// Lines "step a" .. "step b-1".
fn steps(a: usize, b: usize) -> String {
    (a..b).map(|i| format!("step {i}\n")).collect()
}

/// The first step number in `out` (lines "step N").
fn first_step(out: &str) -> usize {
    out.lines().next().and_then(|l| l.strip_prefix("step ")).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("no step in {out:?}"))
}

#[test]
fn an_inherited_pipe_is_the_restarting_processs_fd_or_dev_null_with_a_warning() {
    let sb = Sandbox::new();
    let n = 60;
    let (r1, w1) = pipe();
    let mut p = run_with_fd7(&sb, &[&n.to_string(), "20"], &w1, &[]);
    drop(w1);
    p.wait_lines(5);
    let c = checkpoint_output_with(&sb, p.pid(), &[]);
    let err = String::from_utf8_lossy(&c.stderr);
    assert!(c.status.success(), "checkpoint failed: {err}");
    assert!(!err.contains("warning"), "an inherited pipe is no problem: {err}");
    let img = PathBuf::from(String::from_utf8_lossy(&c.stdout).trim());
    p.kill9();
    let before = drain(r1);
    assert!(before.starts_with("step 0\n"), "{before}");

    // Restarted with a pipe of its own at fd 7: the program writes on there.
    let (r2, w2) = pipe();
    let mut r = restart_with_fd7(&sb, &img, Some(&w2), "restart1.out");
    drop(w2);
    r.wait_lines(3);
    // Restart of a restart: the new fd 7 is inherited just the same.
    let c = checkpoint_output_with(&sb, r.pid(), &[]);
    let err = String::from_utf8_lossy(&c.stderr);
    assert!(c.status.success() && !err.contains("warning"), "checkpoint of the restarted program: {err}");
    let img2 = PathBuf::from(String::from_utf8_lossy(&c.stdout).trim());
    assert_eq!(r.wait_exit(), 0, "{}{}", r.output(), r.stderr());
    let via_pipe = drain(r2);
    let s = first_step(&via_pipe);
    assert!(s <= before.lines().count(), "the restart skipped steps: {before} / {via_pipe}");
    assert_eq!(via_pipe, steps(s, n), "fd 7 of the restarted program is not crum restart's pipe");
    assert_eq!(r.output(), format!("{}done\n", steps(s, n)));
    assert!(!r.stderr().contains("warning"), "{}", r.stderr());

    let (r3, w3) = pipe();
    let mut rr = restart_with_fd7(&sb, &img2, Some(&w3), "restart2.out");
    drop(w3);
    assert_eq!(rr.wait_exit(), 0, "{}{}", rr.output(), rr.stderr());
    let via_pipe = drain(r3);
    assert_eq!(via_pipe, steps(first_step(&via_pipe), n), "restart of a restart: {via_pipe}");

    // Restarted without an fd 7: /dev/null, said on stderr; the program runs to its end.
    let mut r = restart_with_fd7(&sb, &img, None, "restart3.out");
    assert_eq!(r.wait_exit(), 0, "{}{}", r.output(), r.stderr());
    let err = r.stderr();
    assert!(err.contains("warning: fd 7") && err.contains("/dev/null") && err.contains("pipe:["), "{err}");
    assert!(r.output().ends_with("done\n"), "{}", r.output());
}

#[test]
fn a_socket_the_program_made_is_named_at_checkpoint_and_strict_writes_no_image() {
    let sb = Sandbox::new();
    let prog = build_c("socket_fd");
    let mut p = run_under_crum(&sb, &prog, &["2000", "10"], &[], "run.out");
    p.wait_lines(3);
    let c = checkpoint_output_with(&sb, p.pid(), &[]);
    let err = String::from_utf8_lossy(&c.stderr);
    assert!(c.status.success(), "{err}");
    assert!(err.contains("warning") && err.contains("socket:[") && err.contains("cannot be restored"), "not named: {err}");
    let written = sb.list_images();
    assert_eq!(written.len(), 1);

    let c = checkpoint_output_with(&sb, p.pid(), &["--strict"]);
    let err = String::from_utf8_lossy(&c.stderr);
    assert!(!c.status.success(), "--strict wrote an image: {err}");
    assert!(err.contains("--strict") && err.contains("socket:["), "{err}");
    assert_eq!(sb.list_images(), written, "--strict left something in the image directory");
    // The program goes on, and a plain checkpoint still works.
    let lines = p.lines();
    p.wait_lines(lines + 2);
    assert!(checkpoint_output_with(&sb, p.pid(), &[]).status.success());
    p.kill9();
}

#[test]
fn crum_strict_in_the_environment_makes_every_checkpoint_strict() {
    let sb = Sandbox::new();
    let prog = build_c("socket_fd");
    let mut p = run_under_crum(&sb, &prog, &["2000", "10"], &[("CRUM_STRICT", "1")], "run.out");
    p.wait_lines(3);
    let c = checkpoint_output_with(&sb, p.pid(), &[]);
    let err = String::from_utf8_lossy(&c.stderr);
    assert!(!c.status.success() && err.contains("socket:["), "{err}");
    assert!(sb.list_images().is_empty());
    // The program goes on.
    let lines = p.lines();
    p.wait_lines(lines + 2);
    p.kill9();
}
