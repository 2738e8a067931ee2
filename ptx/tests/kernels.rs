//! Real CUDA C kernels compiled by nvcc, run through the engine, checked against results
//! computed here on the CPU.

mod common;

use std::sync::OnceLock;

use common::*;
use crum_ptx::{HostMemory, LaunchConfig, LaunchError, Module};

fn basic() -> &'static Module {
    static M: OnceLock<Module> = OnceLock::new();
    M.get_or_init(|| module("basic"))
}
fn reduce() -> &'static Module {
    static M: OnceLock<Module> = OnceLock::new();
    M.get_or_init(|| module("reduce"))
}
fn mathfn() -> &'static Module {
    static M: OnceLock<Module> = OnceLock::new();
    M.get_or_init(|| module("mathfn"))
}

#[test]
fn vector_add_matches_cpu() {
    let n = 1000;
    let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let b: Vec<f32> = (0..n).map(|i| 3.0 - i as f32).collect();
    let mut mem = HostMemory::new();
    let (pa, pb, pc) = (mem.alloc_bytes(&f32s(&a)), mem.alloc_bytes(&f32s(&b)), mem.alloc(4 * n as u64));
    run(basic(), &mut mem, "vector_add", &cfg(4, 256), &Args::new().ptr(pa).ptr(pb).ptr(pc).i32(n)).unwrap();
    let c = to_f32s(&mem.read(pc, 4 * n as usize));
    let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    assert_eq!(c, want);
}

#[test]
fn tiled_matmul_with_shared_memory_matches_cpu() {
    let n = 40usize;
    let a: Vec<f32> = (0..n * n).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
    let b: Vec<f32> = (0..n * n).map(|i| ((i * 5) % 11) as f32 * 0.25).collect();
    let mut mem = HostMemory::new();
    let (pa, pb, pc) = (mem.alloc_bytes(&f32s(&a)), mem.alloc_bytes(&f32s(&b)), mem.alloc(4 * (n * n) as u64));
    let g = n.div_ceil(16) as u32;
    let c = LaunchConfig { grid: [g, g, 1], block: [16, 16, 1], dynamic_shared_bytes: 0, cooperative: false };
    run(basic(), &mut mem, "matmul_tiled", &c, &Args::new().ptr(pa).ptr(pb).ptr(pc).i32(n as i32)).unwrap();
    let got = to_f32s(&mem.read(pc, 4 * n * n));
    for r in 0..n {
        for col in 0..n {
            let want: f32 = (0..n).map(|k| a[r * n + k] * b[k * n + col]).sum();
            assert!((got[r * n + col] - want).abs() < 1e-3, "C[{r}][{col}] = {} want {want}", got[r * n + col]);
        }
    }
}

#[test]
fn f64_stencil_matches_cpu() {
    let n = 300;
    let x: Vec<f64> = (0..n).map(|i| (i as f64 * 0.1).sin()).collect();
    let mut mem = HostMemory::new();
    let (pi, po) = (mem.alloc_bytes(&f64s(&x)), mem.alloc(8 * n as u64));
    run(basic(), &mut mem, "stencil_f64", &cfg(3, 128), &Args::new().ptr(pi).ptr(po).i32(n)).unwrap();
    let got = to_f64s(&mem.read(po, 8 * n as usize));
    for i in 0..n as usize {
        let want = if i > 0 && i < n as usize - 1 { 0.25 * x[i - 1] + 0.5 * x[i] + 0.25 * x[i + 1] } else { x[i] };
        assert_eq!(got[i], want, "i={i}");
    }
}

#[test]
fn struct_passed_by_value_reaches_the_kernel() {
    let mut mem = HostMemory::new();
    let out = mem.alloc(4 * 10);
    let k = basic().kernels().find(|k| k.name == "struct_by_value").unwrap();
    assert_eq!(k.params.len(), 2);
    let mut s = Vec::new();
    s.extend_from_slice(&10i32.to_le_bytes());
    s.extend_from_slice(&1.5f32.to_le_bytes());
    s.extend_from_slice(&0.25f64.to_le_bytes());
    s.extend_from_slice(&i32s(&[0, 0, 4]));
    s.extend_from_slice(&[0; 4]);
    let args = Args::new().bytes(&s, 8).ptr(out);
    assert_eq!(args.0.len() as u32, k.param_bytes);
    run(basic(), &mut mem, "struct_by_value", &cfg(1, 32), &args).unwrap();
    let got = to_f32s(&mem.read(out, 40));
    let want: Vec<f32> = (0..10).map(|i| (i as f32 * 1.5) + 0.25 + 4.0).collect();
    assert_eq!(got, want);
}

#[test]
fn constant_table_and_device_variable_are_read() {
    let mut mem = HostMemory::new();
    let out = mem.alloc(4 * 20);
    run(basic(), &mut mem, "const_table", &cfg(1, 32), &Args::new().ptr(out).i32(20)).unwrap();
    let fib = [1, 1, 2, 3, 5, 8, 13, 21];
    let want: Vec<i32> = (0..20).map(|i| fib[i % 8] + 100).collect();
    assert_eq!(to_i32s(&mem.read(out, 80)), want);
}

#[test]
fn out_of_bounds_store_fails_with_illegal_address() {
    let mut mem = HostMemory::new();
    let out = mem.alloc(64);
    let e = run(basic(), &mut mem, "out_of_bounds", &cfg(1, 32), &Args::new().ptr(out)).unwrap_err();
    assert!(matches!(e.kind(), LaunchError::IllegalAddress { .. }), "{e:?}");
    assert_eq!(e.cuda_error(), 700);
}

#[test]
fn dynamic_shared_memory_reverses_each_block() {
    let n = 128;
    let x: Vec<i32> = (0..n).collect();
    let mut mem = HostMemory::new();
    let (pi, po) = (mem.alloc_bytes(&i32s(&x)), mem.alloc(4 * n as u64));
    let c = LaunchConfig { grid: [2, 1, 1], block: [64, 1, 1], dynamic_shared_bytes: 64 * 4, cooperative: false };
    run(basic(), &mut mem, "dyn_shared", &c, &Args::new().ptr(pi).ptr(po)).unwrap();
    let want: Vec<i32> = (0..n).map(|i| (i / 64) * 64 + 63 - i % 64).collect();
    assert_eq!(to_i32s(&mem.read(po, 4 * n as usize)), want);
}

#[test]
fn dynamic_shared_memory_overrun_is_illegal_address() {
    let mut mem = HostMemory::new();
    let (pi, po) = (mem.alloc(4 * 64), mem.alloc(4 * 64));
    // Too little dynamic shared memory for 64 ints.
    let c = LaunchConfig { grid: [1, 1, 1], block: [64, 1, 1], dynamic_shared_bytes: 16, cooperative: false };
    let e = run(basic(), &mut mem, "dyn_shared", &c, &Args::new().ptr(pi).ptr(po)).unwrap_err();
    assert!(matches!(e.kind(), LaunchError::IllegalAddress { .. }), "{e:?}");
}

#[test]
fn shuffle_reduction_sums_each_block() {
    let n = 1024;
    let x: Vec<f32> = (0..n).map(|i| (i % 17) as f32).collect();
    let mut mem = HostMemory::new();
    let (pi, po) = (mem.alloc_bytes(&f32s(&x)), mem.alloc(4 * 4));
    run(reduce(), &mut mem, "reduce_shfl", &cfg(4, 256), &Args::new().ptr(pi).ptr(po).i32(n)).unwrap();
    let got = to_f32s(&mem.read(po, 16));
    for b in 0..4 {
        let want: f32 = x[b * 256..(b + 1) * 256].iter().sum();
        assert_eq!(got[b], want);
    }
}

#[test]
fn atomic_reduction_sums_across_blocks() {
    let n = 5000;
    let x: Vec<i32> = (0..n).map(|i| i % 97 - 40).collect();
    let mut mem = HostMemory::new();
    let (pi, ps) = (mem.alloc_bytes(&i32s(&x)), mem.alloc(4));
    run(reduce(), &mut mem, "reduce_atomic", &cfg(20, 256), &Args::new().ptr(pi).ptr(ps).i32(n)).unwrap();
    assert_eq!(to_i32s(&mem.read(ps, 4))[0], x.iter().sum::<i32>());
}

#[test]
fn block_prefix_scan_matches_cpu() {
    let n = 256;
    let x: Vec<i32> = (0..n).map(|i| (i * 31 % 7) - 3).collect();
    let mut mem = HostMemory::new();
    let (pi, po) = (mem.alloc_bytes(&i32s(&x)), mem.alloc(4 * n as u64));
    run(reduce(), &mut mem, "scan_block", &cfg(1, 256), &Args::new().ptr(pi).ptr(po).i32(n)).unwrap();
    let want: Vec<i32> = x.iter().scan(0, |s, v| {
        *s += v;
        Some(*s)
    }).collect();
    assert_eq!(to_i32s(&mem.read(po, 4 * n as usize)), want);
}

#[test]
fn shared_memory_histogram_matches_cpu() {
    // Large enough that the pool starts its helper workers: global atomics race for real.
    let n = 200_000;
    let data: Vec<u8> = (0..n).map(|i: usize| (i.wrapping_mul(7919) % 251) as u8).collect();
    let mut mem = HostMemory::new();
    let (pd, pb) = (mem.alloc_bytes(&data), mem.alloc(64 * 4));
    run(reduce(), &mut mem, "histogram", &cfg(8, 128), &Args::new().ptr(pd).ptr(pb).i32(n as i32)).unwrap();
    let mut want = [0i32; 64];
    for d in &data {
        want[(*d % 64) as usize] += 1;
    }
    assert_eq!(to_i32s(&mem.read(pb, 256)), want);
}

#[test]
fn every_atomic_operation_matches_sequential_semantics() {
    let mut mem = HostMemory::new();
    let pi = mem.alloc_bytes(&i32s(&[0, 0, -1, 0, 0, 0, 0]));
    let pu = mem.alloc_bytes(&i32s(&[0, 0]));
    let pf = mem.alloc(4);
    let pd = mem.alloc(8);
    run(reduce(), &mut mem, "atomics_all", &cfg(1, 64), &Args::new().ptr(pi).ptr(pu).ptr(pf).ptr(pd)).unwrap();
    let i = to_i32s(&mem.read(pi, 28));
    assert_eq!(i[0], -63);
    assert_eq!(i[1], 63);
    assert_eq!(i[2], i32::MIN); // every bit 0..30 cleared
    assert_eq!(i[3], i32::MAX);
    assert_eq!(i[4], (0..64).fold(0, |a, t| a ^ t));
    assert_eq!(i[5], 7);
    assert_eq!(i[6], 1); // thread 0 wins the CAS from 0 (threads run in order)
    let u = to_i32s(&mem.read(pu, 8));
    assert_eq!(u[0], 64 % 10); // inc wraps at 9
    // dec from 0: 0→9, then counts down and wraps (64 steps).
    let mut d = 0u32;
    for _ in 0..64 {
        d = if d == 0 || d > 9 { 9 } else { d - 1 };
    }
    assert_eq!(u[1] as u32, d);
    assert_eq!(to_f32s(&mem.read(pf, 4))[0], 32.0);
    assert_eq!(to_f64s(&mem.read(pd, 8))[0], 16.0);
}

#[test]
fn warp_vote_shuffle_match_and_redux_follow_cuda() {
    let x: Vec<i32> = (0..32).map(|i| if i % 3 == 0 { -i } else { i * 2 }).collect();
    let mut mem = HostMemory::new();
    let (pi, po) = (mem.alloc_bytes(&i32s(&x)), mem.alloc(32 * 9 * 4));
    run(reduce(), &mut mem, "warp_ops", &cfg(1, 32), &Args::new().ptr(pi).ptr(po)).unwrap();
    let o: Vec<u32> = to_i32s(&mem.read(po, 32 * 9 * 4)).into_iter().map(|v| v as u32).collect();
    let ballot = (0..32).filter(|&i| x[i] > 0).fold(0u32, |m, i| m | 1 << i);
    let sum = x.iter().fold(0u32, |a, &v| a.wrapping_add(v as u32));
    for t in 0..32usize {
        let r = &o[t * 9..t * 9 + 9];
        assert_eq!(r[0], ballot, "ballot t={t}");
        assert_eq!(r[1], 1);
        assert_eq!(r[2], 0);
        assert_eq!(r[3], if t % 2 == 0 { 0x5555_5555 } else { 0 }, "activemask t={t}");
        let m = (0..32).filter(|&j| x[j] % 4 == x[t] % 4).fold(0u32, |m, j| m | 1 << j);
        assert_eq!(r[4], m, "match t={t}");
        assert_eq!(r[5] as i32, if t >= 3 { x[t - 3] } else { x[t] }, "shfl up t={t}");
        assert_eq!(r[6] as i32, x[t ^ 5]);
        assert_eq!(r[7] as i32, x[7]);
        assert_eq!(r[8], sum);
    }
}

#[test]
fn math_library_calls_match_libm() {
    let n = 64;
    let x: Vec<f64> = (0..n).map(|i| 0.1 + i as f64 * 0.37).collect();
    let mut mem = HostMemory::new();
    let (px, po, pf) = (mem.alloc_bytes(&f64s(&x)), mem.alloc(8 * 3 * n as u64), mem.alloc(4 * 2 * n as u64));
    run(mathfn(), &mut mem, "math_fns", &cfg(2, 32), &Args::new().ptr(px).ptr(po).ptr(pf).i32(n)).unwrap();
    let got = to_f64s(&mem.read(po, 8 * 3 * n as usize));
    let gotf = to_f32s(&mem.read(pf, 4 * 2 * n as usize));
    for i in 0..n as usize {
        let rel = |a: f64, b: f64| (a - b).abs() <= 1e-14 * b.abs().max(1e-300);
        assert!(rel(got[3 * i], x[i].powf(2.5)), "pow {} vs {}", got[3 * i], x[i].powf(2.5));
        assert!((got[3 * i + 1] - (x[i] * 1000.0).sin()).abs() < 1e-14, "sin {} vs {}", got[3 * i + 1], (x[i] * 1000.0).sin());
        assert!(rel(got[3 * i + 2], x[i].exp()));
        let xf = x[i] as f32;
        assert!((gotf[2 * i] - (xf * 100.0).sin()).abs() < 1e-5, "sinf {} vs {}", gotf[2 * i], (xf * 100.0).sin());
        assert!((gotf[2 * i + 1] - xf.powf(1.5)).abs() <= 1e-5 * xf.powf(1.5));
    }
}

#[test]
fn device_printf_formats_like_cuda_in_block_order() {
    let mut mem = HostMemory::new();
    let out = run(mathfn(), &mut mem, "say_hello", &cfg(2, 2), &Args::new().i32(42)).unwrap();
    let text = String::from_utf8(out.printf).unwrap();
    let want: String = (0..2)
        .flat_map(|b| (0..2).map(move |t| format!("block {b} thread {t} k=42 pi=3.142 str 1.2e+04|7   |ff\n")))
        .collect();
    assert_eq!(text, want);
}

#[test]
fn failed_device_assert_reports_assert_error_and_message() {
    let mut mem = HostMemory::new();
    let e = run(mathfn(), &mut mem, "failing_assert", &cfg(1, 1), &Args::new().i32(3)).unwrap_err();
    assert_eq!(e.cuda_error(), 710);
    assert!(String::from_utf8_lossy(e.printf()).contains("Assertion `v > 10` failed"), "{e:?}");
    run(mathfn(), &mut mem, "failing_assert", &cfg(1, 1), &Args::new().i32(30)).unwrap();
}

#[test]
fn trap_fails_the_launch_with_launch_failure() {
    let mut mem = HostMemory::new();
    let e = run(mathfn(), &mut mem, "trapping", &cfg(1, 4), &Args::new().i32(3)).unwrap_err();
    assert_eq!(e.cuda_error(), 719);
    run(mathfn(), &mut mem, "trapping", &cfg(1, 4), &Args::new().i32(2)).unwrap();
}

#[test]
fn syncthreads_count_and_or_reduce_over_the_block() {
    let x: Vec<i32> = (0..64).map(|i| if i % 4 == 0 { i } else { -i }).collect();
    let mut mem = HostMemory::new();
    let (pi, po) = (mem.alloc_bytes(&i32s(&x)), mem.alloc(64 * 4));
    run(reduce(), &mut mem, "bar_red", &cfg(1, 64), &Args::new().ptr(pi).ptr(po)).unwrap();
    let count = x.iter().filter(|&&v| v > 0).count() as i32;
    let or = x.iter().any(|&v| v > 5) as i32;
    assert_eq!(to_i32s(&mem.read(po, 256)), vec![count * 100 + 10 + or; 64]);
}

#[test]
fn clock_advances_and_lane_masks_match_lane() {
    let mut mem = HostMemory::new();
    let po = mem.alloc(64 * 3 * 8);
    run(reduce(), &mut mem, "clocks", &cfg(1, 64), &Args::new().ptr(po)).unwrap();
    let v: Vec<i64> = mem.read(po, 64 * 24).chunks(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
    for t in 0..64usize {
        assert!(v[t * 3] >= 0, "clock went backwards");
        let lane = t % 32;
        assert_eq!(v[t * 3 + 1] as u32, (1u32 << lane) - 1);
        assert_eq!(v[t * 3 + 2] as u32, ((1u64 << (lane + 1)) - 1) as u32);
    }
}

fn intrinsics() -> &'static Module {
    static M: OnceLock<Module> = OnceLock::new();
    M.get_or_init(|| module("intrinsics"))
}

#[test]
fn double_math_library_matches_libm() {
    let n = 64;
    let x: Vec<f64> = (0..n).map(|i| 0.05 + i as f64 * 0.77).collect();
    let mut mem = HostMemory::new();
    let (px, po) = (mem.alloc_bytes(&f64s(&x)), mem.alloc(8 * 12 * n as u64));
    run(intrinsics(), &mut mem, "double_math", &cfg(2, 32), &Args::new().ptr(px).ptr(po).i32(n)).unwrap();
    let got = to_f64s(&mem.read(po, 8 * 12 * n as usize));
    for i in 0..n as usize {
        let v = x[i];
        let want = [
            v.ln(),
            v.atan2(1.5),
            v.cbrt(),
            (v * 7.0) % 3.0,
            (v / 4.0).tanh(),
            erf(v / 32.0),
            v.cos(),
            v.sqrt(),
            (v * 3.3).floor(),
            v / (v + 3.0),
            v.ln_1p(),
            (v / 2.0).exp2(),
        ];
        for k in 0..12 {
            let (g, w) = (got[12 * i + k], want[k]);
            // The erf reference (a power series) is itself good to a few ulp only.
            let tol = if k == 5 { 4e-15 } else { 4e-16 };
            assert!((g - w).abs() <= tol * w.abs().max(1.0), "fn {k} at {v}: {g} vs {w}");
        }
    }
}

/// erf by its series (the reference; |x| < 1.6 here).
fn erf(x: f64) -> f64 {
    let mut sum = 0.0f64;
    let mut term = x;
    let mut k = 0;
    while term.abs() > 1e-18 * sum.abs().max(1e-300) || k < 3 {
        sum += term / (2 * k + 1) as f64;
        k += 1;
        term *= -x * x / k as f64;
        if k > 200 {
            break;
        }
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

#[test]
fn float_math_and_half_match_the_cpu_within_cuda_ulp_bounds() {
    let n = 64;
    let x: Vec<f32> = (0..n).map(|i| 0.1 + i as f32 * 0.61).collect();
    let mut mem = HostMemory::new();
    let (px, po) = (mem.alloc_bytes(&f32s(&x)), mem.alloc(4 * 8 * n as u64));
    run(intrinsics(), &mut mem, "float_math", &cfg(2, 32), &Args::new().ptr(px).ptr(po).i32(n)).unwrap();
    let got = to_f32s(&mem.read(po, 4 * 8 * n as usize));
    for i in 0..n as usize {
        let v = x[i];
        let half = |f: f32| {
            // f16 has 11 significant bits.
            let e = f.abs().log2().floor();
            let q = 2f32.powf(e - 10.0);
            (f / q).round_ties_even() * q
        };
        let want = [v.ln(), (v / 4.0).exp(), (v / 8.0).tan(), v / 3.0, 1.0 / v.sqrt(), (v / 4.0).exp(), v.min(3.0) + v.max(1.0), half(v * 0.5)];
        for k in 0..8 {
            let (g, w) = (got[8 * i + k], want[k]);
            assert!((g - w).abs() <= 4.0 * f32::EPSILON * w.abs().max(1.0), "fn {k} at {v}: {g} vs {w}");
        }
    }
}

#[test]
fn integer_intrinsics_match_rust() {
    let n = 64u32;
    let x: Vec<u32> = (0..n).map(|i| i.wrapping_mul(0x9E37_79B9) ^ (i << 7)).collect();
    let mut mem = HostMemory::new();
    let (px, po) = (mem.alloc_bytes(&i32s(&x.iter().map(|&v| v as i32).collect::<Vec<_>>())), mem.alloc(4 * 10 * n as u64));
    run(intrinsics(), &mut mem, "int_intrinsics", &cfg(2, 32), &Args::new().ptr(px).ptr(po).i32(n as i32)).unwrap();
    let got: Vec<u32> = to_i32s(&mem.read(po, 4 * 10 * n as usize)).into_iter().map(|v| v as u32).collect();
    for i in 0..n as usize {
        let v = x[i];
        let perm = |a: u32, b: u32, s: u32| {
            let bytes = ((b as u64) << 32 | a as u64).to_le_bytes();
            (0..4).fold(0u32, |r, k| r | (bytes[((s >> (4 * k)) & 7) as usize] as u32) << (8 * k))
        };
        let sh = (i % 40) as u32 & 31;
        let fl = ((((0xdead_beefu64) << 32 | v as u64) << sh) >> 32) as u32;
        let d = if i == 7 { 3 } else { i as i64 - 7 };
        let want = [
            v.count_ones(),
            v.leading_zeros(),
            v.reverse_bits(),
            if v == 0 { 0 } else { v.trailing_zeros() + 1 },
            perm(v, 0x0123_4567, 0x5140),
            fl,
            (((v << 8) as i32) >> 8).wrapping_mul(77) as u32, // __mul24 is a signed 24-bit multiply
            ((v as u64 * 0x9e37_79b9) >> 32) as u32,
            ((v as i32 as i64) / d) as u32,
            (v & 0xff).abs_diff(100) + 5,
        ];
        assert_eq!(&got[10 * i..10 * i + 10], &want, "i={i} v={v:#x}");
    }
}

#[test]
fn control_flow_local_arrays_calls_and_recursion_match_cpu() {
    let m = module("control");
    let n = 64;
    let x: Vec<i32> = (0..n).map(|i| (i * 7919) % 1013 - 300).collect();
    let mut mem = HostMemory::new();
    let (pi, po) = (mem.alloc_bytes(&i32s(&x)), mem.alloc(8 * 5 * n as u64));
    run(&m, &mut mem, "control", &cfg(2, 32), &Args::new().ptr(pi).ptr(po).i32(n)).unwrap();
    let got: Vec<i64> = mem.read(po, 8 * 5 * n as usize).chunks(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
    for i in 0..n as usize {
        let v = x[i];
        let arr: Vec<i32> = (0..16).map(|k| v.wrapping_mul(k) - (k >> 1)).collect();
        let mut s = arr[(v & 15) as usize] as i64 + arr[((v >> 4) & 15) as usize] as i64;
        match v % 5 {
            0 => s += 100,
            1 | -1 if v % 5 == 1 => s *= 3,
            2 => s -= 7,
            3 => s = -s,
            _ => s ^= 0x55,
        }
        let k = i as i64 + 1;
        let pa = ((v as i64) << 20) * k + 3;
        let pb = (v ^ (i as i32 + 1)) as i64;
        let q = (v as i64 * 1_000_003) / k % 97;
        let c = (v.wrapping_mul(13) as u8) as i64;
        let h = (v.wrapping_mul(-7) as i16) as i64;
        let fact: u64 = (1..=(i % 15) as u64).product::<u64>().max(1);
        assert_eq!(&got[5 * i..5 * i + 5], &[s, pa + pb, q, c + h, fact as i64], "i={i} v={v}");
    }
}

#[test]
fn divergent_half_warp_shuffles_with_partial_masks_match_cpu() {
    let x: Vec<i32> = (0..64).map(|i| i * 3 - 50).collect();
    let mut mem = HostMemory::new();
    let (pi, po) = (mem.alloc_bytes(&i32s(&x)), mem.alloc(64 * 4));
    run(reduce(), &mut mem, "half_warps", &cfg(1, 64), &Args::new().ptr(pi).ptr(po)).unwrap();
    let got = to_i32s(&mem.read(po, 256));
    for (t, &g) in got.iter().enumerate() {
        let seg = t / 16 * 16;
        let sum: i32 = x[seg..seg + 16].iter().sum();
        // shfl.down within 16 lanes: lane 0 of the segment holds the sum; butterfly: every
        // lane holds it.
        if t % 32 >= 16 || t % 16 == 0 {
            assert_eq!(g, sum, "t={t}");
        }
    }
}

#[test]
fn recursive_function_with_local_array_gets_a_frame_per_call() {
    fn rsum(n: i32, seed: i32) -> i32 {
        let buf: Vec<i32> = (0..8).map(|k| seed.wrapping_mul(k) + n).collect();
        let v = buf[((seed + n) & 7) as usize];
        if n == 0 {
            v
        } else {
            v + rsum(n - 1, seed + 1)
        }
    }
    let m = module("control");
    let x: Vec<i32> = (0..32).map(|i| i * 37 % 101).collect();
    let mut mem = HostMemory::new();
    let (pi, po) = (mem.alloc_bytes(&i32s(&x)), mem.alloc(32 * 4));
    run(&m, &mut mem, "recursive_locals", &cfg(1, 32), &Args::new().ptr(pi).ptr(po)).unwrap();
    let want: Vec<i32> = x.iter().map(|&v| rsum(v & 15, v)).collect();
    assert_eq!(to_i32s(&mem.read(po, 128)), want);
}

#[test]
fn syncwarp_reduction_through_shared_memory_matches_cpu() {
    let x: Vec<i32> = (0..64).map(|i| i * 5 - 77).collect();
    let mut mem = HostMemory::new();
    let (pi, po) = (mem.alloc_bytes(&i32s(&x)), mem.alloc(8));
    run(reduce(), &mut mem, "syncwarp_reduce", &cfg(1, 64), &Args::new().ptr(pi).ptr(po)).unwrap();
    assert_eq!(to_i32s(&mem.read(po, 8)), vec![x[..32].iter().sum::<i32>(), x[32..].iter().sum::<i32>()]);
}

#[test]
fn lineinfo_and_debug_builds_parse_and_run() {
    for flags in [&["-arch=sm_80", "-lineinfo"][..], &["-arch=sm_80", "-G"][..]] {
        let obj = compile("basic", flags, false);
        let images = crum_ptx::fatbin::extract_ptx(&fatbin_section(&obj)).unwrap();
        let m = Module::parse(&crum_ptx::fatbin::best_ptx(&images).unwrap().ptx).unwrap_or_else(|e| panic!("{flags:?}: {e}"));
        let n = 100;
        let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let mut mem = HostMemory::new();
        let (pa, pb, pc) = (mem.alloc_bytes(&f32s(&a)), mem.alloc_bytes(&f32s(&a)), mem.alloc(4 * n as u64));
        run(&m, &mut mem, "vector_add", &cfg(1, 128), &Args::new().ptr(pa).ptr(pb).ptr(pc).i32(n)).unwrap();
        assert_eq!(to_f32s(&mem.read(pc, 4 * n as usize)), a.iter().map(|x| x * 2.0).collect::<Vec<_>>(), "{flags:?}");
    }
}

#[test]
fn other_targets_and_fast_math_builds_run() {
    for flags in [&["-arch=sm_75"][..], &["-arch=sm_90"][..], &["-arch=sm_80", "--use_fast_math"][..]] {
        let obj = compile("basic", flags, false);
        let images = crum_ptx::fatbin::extract_ptx(&fatbin_section(&obj)).unwrap();
        let m = Module::parse(&crum_ptx::fatbin::best_ptx(&images).unwrap().ptx).unwrap_or_else(|e| panic!("{flags:?}: {e}"));
        let n = 300;
        let x: Vec<f64> = (0..n).map(|i| (i as f64 * 0.3).cos()).collect();
        let mut mem = HostMemory::new();
        let (pi, po) = (mem.alloc_bytes(&f64s(&x)), mem.alloc(8 * n as u64));
        run(&m, &mut mem, "stencil_f64", &cfg(3, 128), &Args::new().ptr(pi).ptr(po).i32(n)).unwrap();
        let got = to_f64s(&mem.read(po, 8 * n as usize));
        for i in 1..n as usize - 1 {
            assert_eq!(got[i], 0.25 * x[i - 1] + 0.5 * x[i] + 0.25 * x[i + 1], "{flags:?} i={i}");
        }
    }
    // Fast math: approximate instructions (ex2/lg2/sin .approx.ftz) stay within float accuracy.
    let obj = compile("mathfn", &["-arch=sm_80", "--use_fast_math"], false);
    let images = crum_ptx::fatbin::extract_ptx(&fatbin_section(&obj)).unwrap();
    let m = Module::parse(&crum_ptx::fatbin::best_ptx(&images).unwrap().ptx).unwrap();
    let n = 32;
    let x: Vec<f64> = (0..n).map(|i| 0.1 + i as f64 * 0.37).collect();
    let mut mem = HostMemory::new();
    let (px, po, pf) = (mem.alloc_bytes(&f64s(&x)), mem.alloc(8 * 3 * n as u64), mem.alloc(4 * 2 * n as u64));
    run(&m, &mut mem, "math_fns", &cfg(1, 32), &Args::new().ptr(px).ptr(po).ptr(pf).i32(n)).unwrap();
    let gotf = to_f32s(&mem.read(pf, 4 * 2 * n as usize));
    for i in 0..n as usize {
        let xf = x[i] as f32;
        assert!((gotf[2 * i] - (xf * 100.0).sin()).abs() < 1e-4, "fast sinf {} vs {}", gotf[2 * i], (xf * 100.0).sin());
        assert!((gotf[2 * i + 1] - xf.powf(1.5)).abs() <= 1e-5 * xf.powf(1.5).max(1.0), "fast powf");
    }
}

#[test]
fn sub_warp_shuffles_follow_the_cuda_documentation() {
    let x: Vec<i32> = (0..32).map(|i| 1000 + i * 7).collect();
    for width in [2i32, 4, 8, 16, 32] {
        // (Deltas use 5 bits in hardware, so stay below 32.)
        for delta in [0i32, 1, 3, width - 1, (width + 2).min(31)] {
            let mut mem = HostMemory::new();
            let (pi, po) = (mem.alloc_bytes(&i32s(&x)), mem.alloc(32 * 12));
            run(reduce(), &mut mem, "shfl_width", &cfg(1, 32), &Args::new().ptr(pi).ptr(po).i32(delta).i32(width)).unwrap();
            let got = to_i32s(&mem.read(po, 32 * 12));
            for lane in 0..32i32 {
                let base = lane / width * width;
                let pos = lane % width;
                // __shfl_up: lane - delta within the segment, else own value.
                let up = if pos >= delta { x[(lane - delta) as usize] } else { x[lane as usize] };
                // __shfl_down: lane + delta within the segment, else own value.
                let down = if pos + delta < width { x[(lane + delta) as usize] } else { x[lane as usize] };
                // __shfl: srcLane modulo width, within the segment.
                let idx = x[(base + delta % width) as usize];
                let l = lane as usize;
                assert_eq!(&got[l * 3..l * 3 + 3], &[up, down, idx], "width={width} delta={delta} lane={lane}");
            }
        }
    }
}

#[test]
fn device_malloc_uses_the_heap_or_returns_null() {
    for heap in [true, false] {
        let mut mem = HostMemory::new();
        if heap {
            mem.enable_device_heap(1 << 16);
        }
        let out = mem.alloc(32 * 4);
        run(mathfn(), &mut mem, "device_malloc", &cfg(1, 32), &Args::new().ptr(out)).unwrap();
        let want: Vec<i32> = (0..32).map(|t| if heap { 4 * t } else { -1 }).collect();
        assert_eq!(to_i32s(&mem.read(out, 128)), want, "heap={heap}");
    }
}
