//! Child processes. A child forked under crum is a member of the job and is in its image
//! (`proc_jobs.rs`); one that has exited and is not reaped yet (a zombie) is not: it is named
//! when the image is written (a warning; with `--strict` no image), never dropped silently
//! (its parent's `waitpid` would fail after a restart).
mod proc_common;
use proc_common::*;

#[test]
fn children_and_zombies_are_named_at_checkpoint_and_strict_writes_no_image() {
    let sb = Sandbox::new();
    let prog = build_c("children");
    let mut p = run_under_crum(&sb, &prog, &["4000", "10"], &[], "run.out");
    p.wait_lines(3);
    let first = p.output().lines().next().unwrap_or_default().to_string();
    let pids: Vec<&str> = first.strip_prefix("children ").expect(&first).split(' ').collect();
    let (worker, zombie) = (pids[0], pids[1]);

    let c = checkpoint_output_with(&sb, p.pid(), &[]);
    let err = String::from_utf8_lossy(&c.stderr);
    assert!(c.status.success(), "{err}");
    assert!(!err.contains(&format!("child process {worker}")), "the worker is a member of the job: {err}");
    assert!(err.contains(&format!("child process {zombie} (children) has exited and is not reaped")), "zombie not named: {err}");
    let written = sb.list_images();
    assert_eq!(written.len(), 1);
    let manifest = read(&written[0].join("job.json"));
    assert!(manifest.contains(&format!("\"p-{worker}\"")), "the worker is not in the job image: {manifest}");

    let c = checkpoint_output_with(&sb, p.pid(), &["--strict"]);
    let err = String::from_utf8_lossy(&c.stderr);
    assert!(!c.status.success(), "--strict wrote an image: {err}");
    assert!(err.contains("--strict") && err.contains(&format!("child process {zombie}")), "{err}");
    assert_eq!(sb.list_images(), written, "--strict left something in the image directory");
    // The program goes on.
    let lines = p.lines();
    p.wait_lines(lines + 2);
    p.kill9();
}
