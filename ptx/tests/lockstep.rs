//! Warp lockstep: the threads of a warp execute each instruction together (SIMT) and
//! reconverge after divergent code, so warp-synchronous code (`ptx/tests/kernels/lockstep.cu`,
//! built by nvcc) gives a GPU's results; a lane waiting for another lane of its warp still
//! completes.

mod common;

use common::*;
use crum_ptx::HostMemory;

#[test]
fn legacy_warp_synchronous_reduction_sums_right() {
    let m = module("lockstep");
    let mut mem = HostMemory::new();
    let blocks = 8;
    let input: Vec<i32> = (0..256 * blocks).map(|i| (i * 7919 % 1000) as i32 - 300).collect();
    let inp = mem.alloc_bytes(&i32s(&input));
    let out = mem.alloc(4 * blocks as u64);
    run(&m, &mut mem, "legacy_reduce", &cfg(blocks as u32, 256), &Args::new().ptr(inp).ptr(out)).unwrap();
    let got = to_i32s(&mem.read(out, 4 * blocks));
    let want: Vec<i32> = input.chunks(256).map(|c| c.iter().sum()).collect();
    assert_eq!(got, want);
}

#[test]
fn a_warp_reads_what_its_lanes_stored_without_a_barrier() {
    let m = module("lockstep");
    let mut mem = HostMemory::new();
    let out = mem.alloc(4 * 32);
    run(&m, &mut mem, "neighbour_no_barrier", &cfg(1, 32), &Args::new().ptr(out)).unwrap();
    let want: Vec<i32> = (0..32).map(|t| ((t + 1) % 32) * 3 + 1).collect();
    assert_eq!(to_i32s(&mem.read(out, 4 * 32)), want);
}

#[test]
fn lanes_reconverge_after_a_divergent_loop() {
    let m = module("lockstep");
    let mut mem = HostMemory::new();
    let out = mem.alloc(4 * 32);
    run(&m, &mut mem, "reconverge", &cfg(1, 32), &Args::new().ptr(out)).unwrap();
    let v = |t: i32| {
        let mut v = t;
        for _ in 0..t {
            v = v.wrapping_mul(3).wrapping_add(1);
        }
        if t & 1 == 1 { v.wrapping_add(1000) } else { v.wrapping_sub(1000) }
    };
    let want: Vec<i32> = (0..32).map(|t| v(t ^ 1)).collect();
    assert_eq!(to_i32s(&mem.read(out, 4 * 32)), want);
}

#[test]
fn a_lane_waiting_for_another_lane_of_its_warp_completes() {
    let m = module("lockstep");
    let mut mem = HostMemory::new();
    let flag = mem.alloc_bytes(&i32s(&[0]));
    let out = mem.alloc(4);
    run(&m, &mut mem, "lane_waits_for_lane", &cfg(1, 32), &Args::new().ptr(flag).ptr(out)).unwrap();
    assert_eq!(to_i32s(&mem.read(out, 4)), vec![1]);
}
