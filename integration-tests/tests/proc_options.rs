//! The agent's triggers and policies as `crum run` sets them (environment variables):
//! periodic checkpoints (`--interval`), rotation (`--keep`), the checkpoint signal
//! (`--on-signal`) and ending the program after a checkpoint (`crum checkpoint --exit`).
mod proc_common;
use proc_common::*;
use std::time::{Duration, Instant};

fn images(sb: &Sandbox) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(sb.images())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("ckpt-"))
        .collect();
    v.sort();
    v
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(20), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn interval_writes_images_periodically_and_keep_removes_older_ones() {
    let sb = Sandbox::new();
    let prog = build_c("counter");
    let mut p = run_under_crum(&sb, &prog, &["300", "10"], &[("CRUM_CKPT_INTERVAL", "0.15"), ("CRUM_CKPT_KEEP", "2")], "run.out");
    let mut seen = std::collections::BTreeSet::new();
    wait_for("four periodic images", || {
        seen.extend(images(&sb));
        seen.len() >= 4
    });
    // An image is complete before older ones are removed: briefly there are three.
    wait_for("--keep 2 to leave two images", || images(&sb).len() <= 2);
    p.kill9();
    let expected = expected_output(&sb, &prog, &["300", "10"]);
    // Given the image directory, `crum restart` takes the newest complete image.
    let mut r = restart(&sb, &sb.images(), "restart.out");
    assert_eq!(r.wait_exit(), 0, "{}", r.stderr());
    assert_continues(&expected, 0, &p.output(), &r.output(), true, "restart from a periodic image");
}

#[test]
fn checkpoint_signal_triggers_an_image() {
    let sb = Sandbox::new();
    let prog = build_c("counter");
    let mut p = run_under_crum(&sb, &prog, &["300", "10"], &[("CRUM_CKPT_SIGNAL", "10")], "run.out");
    p.wait_lines(3);
    send_signal(p.pid(), libc::SIGUSR1);
    wait_for("an image after SIGUSR1", || !images(&sb).is_empty());
    p.wait_lines(p.lines() + 2);
    p.kill9();
    let expected = expected_output(&sb, &prog, &["300", "10"]);
    let mut r = restart(&sb, &images(&sb)[0], "restart.out");
    assert_eq!(r.wait_exit(), 0, "{}", r.stderr());
    assert_continues(&expected, 0, &p.output(), &r.output(), true, "restart from a signal-triggered image");
}

fn send_signal(pid: u32, sig: i32) {
    let st = std::process::Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status().unwrap();
    assert!(st.success(), "kill -{sig} {pid} failed");
}

#[test]
fn checkpoint_exit_ends_the_program_and_the_image_continues_it() {
    let sb = Sandbox::new();
    let prog = build_c("counter");
    let mut p = run_under_crum(&sb, &prog, &["100", "10"], &[], "run.out");
    p.wait_lines(5);
    let out = std::process::Command::new(crum_bin())
        .args(["checkpoint", &p.pid().to_string(), "--exit", "--dir"])
        .arg(sb.images())
        .env("CRUM_CONTROL_DIR", sb.sock())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let img = std::path::PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    assert_eq!(p.wait_exit(), 0, "the program did not end after --exit");
    let expected = expected_output(&sb, &prog, &["100", "10"]);
    assert!(p.lines() < expected.lines().count(), "the program ran to its end despite --exit");
    let mut r = restart(&sb, &img, "restart.out");
    assert_eq!(r.wait_exit(), 0, "{}", r.stderr());
    assert_continues(&expected, 0, &p.output(), &r.output(), true, "restart after --exit");
}

/// The program started by `crum run` (a child of it whose executable is `prog`).
fn program_child(run_pid: u32, prog: &std::path::Path) -> Option<u32> {
    let kids = std::fs::read_to_string(format!("/proc/{run_pid}/task/{run_pid}/children")).ok()?;
    kids.split_whitespace()
        .filter_map(|k| k.parse::<u32>().ok())
        .find(|k| std::fs::read_link(format!("/proc/{k}/exe")).ok().as_deref() == Some(prog))
}

#[test]
fn crum_run_flags_reach_the_agent_and_its_images_restart() {
    let sb = Sandbox::new();
    let prog = build_c("counter");
    let mut cmd = std::process::Command::new(crum_bin());
    cmd.args(["run", "--device", "emu", "--interval", "150ms", "--keep", "2", "--on-signal", "USR1", "--dir"])
        .arg(sb.images())
        .arg("--")
        .arg(&prog)
        .args(["300", "10"])
        .current_dir(sb.path("run"))
        .env("CRUM_CONTROL_DIR", sb.sock());
    let mut run = spawn_cmd(&mut cmd, sb.path("run.out"));
    run.wait_lines(3);
    let pid = program_child(run.pid(), &prog).expect("the program is a child of crum run");
    let mut seen = std::collections::BTreeSet::new();
    wait_for("three periodic images", || {
        seen.extend(images(&sb));
        seen.len() >= 3
    });
    wait_for("--keep 2 to leave two images", || images(&sb).len() <= 2);
    send_signal(pid, libc::SIGUSR1);
    let n = run.lines();
    run.wait_lines(n + 3);
    send_signal(pid, libc::SIGKILL);
    run.wait_exit();
    let newest = images(&sb).pop().unwrap();
    let expected = expected_output(&sb, &prog, &["300", "10"]);
    let mut r = restart(&sb, &newest, "restart.out");
    assert_eq!(r.wait_exit(), 0, "{}", r.stderr());
    assert_continues(&expected, 0, &run.output(), &r.output(), true, "restart of an image taken under crum run");
}
