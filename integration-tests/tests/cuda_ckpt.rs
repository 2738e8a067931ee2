//! Checkpoint and restart of CUDA programs (issue 6): the Jacobi solver on managed memory is
//! checkpointed while it runs under `crum run`, killed with SIGKILL, restarted from the image,
//! and must end with the same result as an uninterrupted run.

use std::time::{Duration, Instant};

use crum_integration_tests::{build_cuda, crum_run, restart, result_lines, Background};

#[test]
#[ignore = "crum restart of a CUDA program fails: `cannot restore fd N: pipe:[..] to another process` (the proxy channel)"]
fn jacobi_checkpointed_killed_and_restarted_matches_uninterrupted_run() {
    let exe = build_cuda("jacobi").unwrap();
    let args = ["64", "3000", "150"];
    let reference = crum_run(&exe, &args, Duration::from_secs(300)).unwrap();
    assert_eq!(
        reference.code,
        Some(0),
        "uninterrupted run: {}",
        reference.stderr
    );

    let dir = tempfile::tempdir().unwrap();
    let bg = Background::start(&exe, &args, dir.path()).unwrap();
    // Let it make some progress before the checkpoint, so the image holds device state.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(1500) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let image = bg.checkpoint(&exe).expect("crum checkpoint");
    let app = bg.app_pid(&exe).unwrap();
    // The program (not crum run) dies with SIGKILL, as in a crash.
    let st = std::process::Command::new("kill")
        .args(["-9", &app.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let _ = bg.finish(Duration::from_secs(30));

    let r = restart(&image, Duration::from_secs(300)).unwrap();
    assert_eq!(
        r.code,
        Some(0),
        "restart stdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(result_lines(&r.stdout), result_lines(&reference.stdout));
    assert_eq!(r.stdout.lines().last(), Some("PASS"));
}
