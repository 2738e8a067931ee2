//! Child processes. A child forked under crum is a member of the job and is in its image
//! (`proc_jobs.rs`); one that has exited and is not reaped yet (a zombie) is in the job's
//! manifest with its wait status and made again by the restart, so that its parent's
//! `waitpid` by its pid finds it and how it ended.
mod proc_common;
use proc_common::*;

#[test]
fn children_and_zombies_are_in_the_job_image_and_come_back() {
    let sb = Sandbox::new();
    let prog = build_c("children");
    let mut p = run_under_crum(&sb, &prog, &["60", "20"], &[], "run.out");
    p.wait_lines(3);
    let first = p.output().lines().next().unwrap_or_default().to_string();
    let pids: Vec<&str> = first.strip_prefix("children ").expect(&first).split(' ').collect();
    let (worker, zombie) = (pids[0], pids[1]);

    let c = checkpoint_output_with(&sb, p.pid(), &["--strict"]);
    let err = String::from_utf8_lossy(&c.stderr);
    assert!(c.status.success(), "{err}");
    assert!(!err.contains("child process"), "a child is named as lost: {err}");
    let image = std::path::PathBuf::from(String::from_utf8_lossy(&c.stdout).trim());
    let manifest = read(&image.join("job.json"));
    assert!(manifest.contains(&format!("\"p-{worker}\"")), "the worker is not in the job image: {manifest}");
    assert!(manifest.contains(&format!("\"pid\": {zombie}")), "the zombie is not in the job image: {manifest}");
    let before = p.output();
    p.kill9();
    // SAFETY: kill of a test's own process.
    unsafe { libc::kill(worker.parse().unwrap(), libc::SIGKILL) };
    let mut r = restart(&sb, &image, "restart.out");
    assert_eq!(r.wait_exit(), 0, "{before}{}{}", r.output(), r.stderr());
    assert!(r.output().ends_with("done\n"), "{}", r.output());
}

#[test]
fn a_stopped_child_without_an_agent_refuses_the_checkpoint_and_the_program_goes_on() {
    let sb = Sandbox::new();
    let prog = build_c("stopped_child");
    let mut p = run_under_crum(&sb, &prog, &[], &[], "run.out");
    p.wait_lines(1);
    let first = p.output().lines().next().unwrap_or_default().to_string();
    let child = first.strip_prefix("stopped ").expect(&first).trim().to_string();

    // Without --strict: a restart would lose the child silently (its parent's waitpid
    // failed with ECHILD after it: CRIU's stopped, stopped01, stopped02, stopped12).
    let c = checkpoint_output_with(&sb, p.pid(), &[]);

    let err = String::from_utf8_lossy(&c.stderr);
    assert!(!c.status.success(), "the checkpoint cannot succeed: {err}");
    let want = format!("child process {child} (stopped_child) is stopped (state T)");
    assert!(err.contains(&want), "expected `{want}` in: {err}");
    std::fs::write(sb.path("run/go"), b"").unwrap();
    assert_eq!(p.wait_exit(), 0, "{}{}", p.output(), p.stderr());
    assert!(p.output().ends_with("done 5\n"), "{}", p.output());
}
