//! Forty threads allocating and freeing without pause: checkpoints stop threads inside
//! malloc, and the agent (which then allocates only from its own arena and lists
//! directories with raw system calls) must neither deadlock nor corrupt the heap.
mod proc_common;
use proc_common::*;

#[test]
fn threads_stopped_inside_malloc_neither_deadlock_the_agent_nor_break_restart() {
    let prog = build_c("malloc_storm");
    let sb = Sandbox::new();
    let args = ["100000", "10"];
    let expected: String = (0..100000).map(|i| format!("step {i}\n")).collect();
    let mut p = run_under_crum(&sb, &prog, &args, &[], "run.out");
    p.wait_lines(3);
    let mut img = None;
    for _ in 0..4 {
        img = Some(checkpoint(&sb, p.pid()));
    }
    let n = p.lines();
    p.wait_lines(n + 2);
    p.kill9();
    let before = p.output();

    let mut r = restart(&sb, &img.unwrap(), "restart.out");
    r.wait_lines(5);
    let img2 = checkpoint(&sb, r.pid());
    let n = r.lines();
    r.wait_lines(n + 2);
    r.kill9();
    let out_r = r.output();
    let s = assert_continues(&expected, 0, &before, &out_r, false, "restart after checkpoints under malloc load");

    let mut r2 = restart(&sb, &img2, "restart2.out");
    r2.wait_lines(5);
    r2.kill9();
    assert_continues(&expected, s, &out_r, &r2.output(), false, "restart of a restart under malloc load");
}
