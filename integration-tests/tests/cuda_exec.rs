//! A CUDA program that executes a program in its own process (exec without fork: a
//! launcher, `exec` in a wrapper) stays under `crum run`: the new image gets the device,
//! through every function of the exec family, forty times over (more images than the
//! channel has lanes), with nothing of the old image's device state left, and again after a
//! restart; a forked child's
//! exec gets no channel. `cuda/exec_chain.cu` checks it from inside.

use std::time::{Duration, Instant};

use crum_integration_tests::{build_cuda, Proc};

#[test]
fn a_program_executed_in_the_same_process_keeps_the_device_through_every_exec_function_and_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = build_cuda("exec_chain").expect("nvcc builds exec_chain");
    let go = tmp.path().join("go");
    let go_arg = go.to_str().unwrap();
    let mut p = Proc::run(&prog, &["0", go_arg], &[], &[], &tmp.path().join("run.out")).expect("crum run");
    let t0 = Instant::now();
    while !p.stdout().contains("ready") {
        assert!(!p.exited(), "the program ended before the last exec:\n{}", p.report());
        assert!(t0.elapsed() < Duration::from_secs(180), "no ready:\n{}", p.report());
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = p.stdout();
    for k in 0..=40 {
        assert!(out.contains(&format!("stage {k}: ok\n")), "stage {k} missing:\n{}", p.report());
    }
    assert!(out.contains("child: no channel\n"), "{}", p.report());

    let image = p.checkpoint(&tmp.path().join("images")).expect("checkpoint");
    p.kill9().expect("kill");
    std::fs::write(&go, b"").unwrap();
    let mut r = Proc::restart(&image, None, &tmp.path().join("restart.out")).expect("crum restart");
    let out = r.success(Duration::from_secs(180)).expect("the restarted program ends well");
    assert!(out.contains("after: ok\nPASS\n"), "{}", r.report());
}
