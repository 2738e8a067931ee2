//! The agent's triggers and policies as `crum run` sets them (environment variables):
//! periodic checkpoints (`--interval`), rotation (`--keep`), the checkpoint signal
//! (`--on-signal`) and ending the program after a checkpoint (`crum checkpoint --exit`).
mod proc_common;
use proc_common::*;
use std::time::{Duration, Instant};


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
        seen.extend(sb.list_images());
        seen.len() >= 4
    });
    // An image is complete before older ones are removed: briefly there are three.
    wait_for("--keep 2 to leave two images", || sb.list_images().len() <= 2);
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
    wait_for("an image after SIGUSR1", || !sb.list_images().is_empty());
    p.wait_lines(p.lines() + 2);
    p.kill9();
    let expected = expected_output(&sb, &prog, &["300", "10"]);
    let mut r = restart(&sb, &sb.list_images()[0], "restart.out");
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
    assert_eq!(p.wait_exit(), 75, "the program did not end with 75 (checkpointed and stopped) after --exit");
    let expected = expected_output(&sb, &prog, &["100", "10"]);
    assert!(p.lines() < expected.lines().count(), "the program ran to its end despite --exit");
    let mut r = restart(&sb, &img, "restart.out");
    assert_eq!(r.wait_exit(), 0, "{}", r.stderr());
    assert_continues(&expected, 0, &p.output(), &r.output(), true, "restart after --exit");
    assert_eq!(format!("{}{}", p.output(), r.output()), expected, "output around --exit doubled or lost");
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
    let mut run = crum_run(&sb, &["--interval", "150ms", "--keep", "2", "--on-signal", "USR1"], &prog, &["300", "10"], "run.out");
    run.wait_lines(3);
    let pid = program_child(run.pid(), &prog).expect("the program is a child of crum run");
    let mut seen = std::collections::BTreeSet::new();
    wait_for("three periodic images", || {
        seen.extend(sb.list_images());
        seen.len() >= 3
    });
    wait_for("--keep 2 to leave two images", || sb.list_images().len() <= 2);
    send_signal(pid, libc::SIGUSR1);
    let n = run.lines();
    run.wait_lines(n + 3);
    send_signal(pid, libc::SIGKILL);
    run.wait_exit();
    let newest = sb.list_images().pop().unwrap();
    let expected = expected_output(&sb, &prog, &["300", "10"]);
    let mut r = restart(&sb, &newest, "restart.out");
    assert_eq!(r.wait_exit(), 0, "{}", r.stderr());
    assert_continues(&expected, 0, &run.output(), &r.output(), true, "restart of an image taken under crum run");
}

/// The batch-job pattern (Slurm `--signal=B:USR1@60`, then requeue): `crum run --on-signal
/// USR1 --exit` ends with 75 once the signal's image is written, not 0 as when the program
/// finishes; `crum checkpoint` takes `crum run`'s pid (what a job script has in `$!`).
#[test]
fn on_signal_exit_stops_with_75_after_the_image_and_checkpoint_takes_crum_runs_pid() {
    let sb = Sandbox::new();
    let prog = build_c("counter");
    let mut run = crum_run(&sb, &["--on-signal", "USR1", "--exit"], &prog, &["300", "10"], "run.out");
    run.wait_lines(3);
    // crum run's own pid: the program below it is checkpointed (and goes on).
    let out = std::process::Command::new(crum_bin())
        .args(["checkpoint", &run.pid().to_string(), "--dir"])
        .arg(sb.images())
        .env("CRUM_CONTROL_DIR", sb.sock())
        .output()
        .unwrap();
    assert!(out.status.success(), "checkpoint of crum run's pid: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(sb.list_images().len(), 1);
    let n = run.lines();
    run.wait_lines(n + 2);
    let pid = program_child(run.pid(), &prog).expect("the program is a child of crum run");
    send_signal(pid, libc::SIGUSR1);
    assert_eq!(run.wait_exit(), 75, "crum run --exit: {}", run.stderr());
    assert!(run.stderr().contains("stopping (exit 75)"), "{}", run.stderr());
    let all = sb.list_images();
    assert_eq!(all.len(), 2, "{all:?}");
    let expected = expected_output(&sb, &prog, &["300", "10"]);
    assert!(run.lines() < expected.lines().count(), "the program ran to its end");
    let mut r = restart(&sb, &all[1], "restart.out");
    assert_eq!(r.wait_exit(), 0, "{}", r.stderr());
    assert_continues(&expected, 0, &run.output(), &r.output(), true, "restart of the image --exit stopped at");
    // The image was written with the program stopped, and it ended there: nothing it printed
    // before the end is printed again by the restart.
    assert_eq!(format!("{}{}", run.output(), r.output()), expected, "output around --exit doubled or lost");
}

#[test]
fn exit_needs_on_signal() {
    let out = std::process::Command::new(crum_bin()).args(["run", "--exit", "--", "true"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--on-signal"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `crum restart` with extra arguments before the image, in the sandbox's run directory.
fn restart_args(sb: &Sandbox, args: &[&str], image: &std::path::Path, name: &str) -> Proc {
    let mut cmd = std::process::Command::new(crum_bin());
    cmd.arg("restart").args(args).arg(image).current_dir(sb.path("run")).env("CRUM_CONTROL_DIR", sb.sock());
    spawn_cmd(&mut cmd, sb.path(name))
}

#[test]
fn restart_from_a_directory_skips_a_newest_image_that_does_not_verify_and_says_which_it_took() {
    let sb = Sandbox::new();
    let prog = build_c("counter");
    let mut p = run_under_crum(&sb, &prog, &["4000", "10"], &[], "run.out");
    p.wait_lines(3);
    let older = checkpoint(&sb, p.pid());
    let n = p.lines();
    p.wait_lines(n + 2);
    let newest = checkpoint(&sb, p.pid());
    p.kill9();
    // The newest image is damaged (as by a node dying while a disk wrote it back).
    let inv = newest.join("inventory");
    let mut bytes = std::fs::read(&inv).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&inv, bytes).unwrap();
    let mut r = restart_args(&sb, &[], &sb.images(), "restart.out");
    r.wait_lines(2);
    let err = r.stderr();
    r.kill9();
    let name = |p: &std::path::Path| p.file_name().unwrap().to_string_lossy().into_owned();
    assert!(err.contains("skipping") && err.contains(&name(&newest)), "the damaged image is not named: {err}");
    assert!(err.contains(&format!("restarting {}", older.canonicalize().unwrap().display())), "the image taken is not named: {err}");
}

#[test]
fn restart_dir_sends_the_restarted_programs_images_elsewhere_and_it_stays_so() {
    let sb = Sandbox::new();
    let prog = build_c("counter");
    let mut p = run_under_crum(&sb, &prog, &["4000", "10"], &[], "run.out");
    p.wait_lines(3);
    let img = checkpoint(&sb, p.pid());
    p.kill9();
    let moved = sb.path("moved");
    let mut r = restart_args(&sb, &["--dir", moved.to_str().unwrap()], &img, "restart.out");
    r.wait_lines(3);
    // A checkpoint that names no directory goes to the new one.
    let plain = |pid: u32| {
        let out = std::process::Command::new(crum_bin()).args(["checkpoint", &pid.to_string()]).env("CRUM_CONTROL_DIR", sb.sock()).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        std::path::PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    };
    let img2 = plain(r.pid());
    r.kill9();
    assert_eq!(img2.parent().unwrap(), moved.canonicalize().unwrap(), "{}", img2.display());
    // Restarted again without --dir, it keeps writing there.
    let mut r2 = restart_args(&sb, &[], &img2, "restart2.out");
    r2.wait_lines(3);
    let img3 = plain(r2.pid());
    r2.kill9();
    assert_eq!(img3.parent().unwrap(), moved.canonicalize().unwrap(), "{}", img3.display());
}

#[test]
fn a_program_taking_the_checkpoint_signal_for_itself_is_told_and_gets_it() {
    let sb = Sandbox::new();
    let prog = build_c("own_usr1");
    let mut p = run_under_crum(&sb, &prog, &["4000", "10"], &[("CRUM_CKPT_SIGNAL", "10")], "run.out");
    // Until the program takes it, the signal is crum's: an image.
    p.wait_lines(2);
    send_signal(p.pid(), libc::SIGUSR1);
    wait_for("an image after SIGUSR1", || !sb.list_images().is_empty());
    assert!(!p.stderr().contains("installs its own handler"), "{}", p.stderr());
    std::fs::write(sb.path("run/take-usr1"), "").unwrap();
    wait_for("the warning", || p.stderr().contains("installs its own handler for SIGUSR1"));
    assert_eq!(p.stderr().matches("installs its own handler").count(), 1, "{}", p.stderr());
    // From then on it is the program's.
    let n = sb.list_images().len();
    send_signal(p.pid(), libc::SIGUSR1);
    wait_for("the program's handler", || p.output().contains("usr1 1"));
    assert_eq!(sb.list_images().len(), n, "crum still checkpointed on the program's signal");
    p.kill9();
}
