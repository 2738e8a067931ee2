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

/// Processes a restart would not bring back refuse the checkpoint (no image, without
/// --strict too), naming them, and the program runs on: a stopped child without an agent
/// (its parent's waitpid failed with ECHILD after a restart: CRIU's stopped, stopped01,
/// stopped02, stopped12), a running copy of the program made by a raw clone (CRIU's
/// session02, session03) and a process of the job's session reparented outside the job
/// (CRIU's child_subreaper_and_reparent and session01 hung after a restart), an exited child
/// in a process group of its own (CRIU's zombie01).
#[test]
fn processes_a_restart_would_not_bring_back_refuse_the_checkpoint_and_the_program_goes_on() {
    let cases: [(&str, &str); 4] = [
        ("stopped", "(stopped_child) is stopped (state T)"),
        ("zombie", "of process"),
        ("raw", "(stopped_child) is a copy of this program made without the C library's fork"),
        ("escaped", "(stopped_child) is in the session"),
    ];
    let prog = build_c("stopped_child");
    for (mode, want) in cases {
        let sb = Sandbox::new();
        let mut p = run_under_crum(&sb, &prog, &[mode], &[], "run.out");
        p.wait_lines(1);
        let first = p.output().lines().next().unwrap_or_default().to_string();
        let pid = first.strip_prefix(&format!("{mode} ")).expect(&first).trim().to_string();

        let c = checkpoint_output_with(&sb, p.pid(), &[]);

        let err = String::from_utf8_lossy(&c.stderr);
        assert!(!c.status.success(), "{mode}: the checkpoint cannot succeed: {err}");
        let want = if mode == "zombie" {
            format!("exited child process {pid} of process {} is in process group {pid}, not its parent's", p.pid())
        } else {
            format!("process {pid} {want}")
        };
        assert!(err.contains(&want), "{mode}: expected `{want}` in: {err}");
        assert_eq!(sb.list_images().len(), 0, "{mode}: an image was written");
        std::fs::write(sb.path("run/go"), b"").unwrap();
        assert_eq!(p.wait_exit(), 0, "{mode}: {}{}", p.output(), p.stderr());
        assert!(p.output().ends_with("done 5\n"), "{mode}: {}", p.output());
    }
}
