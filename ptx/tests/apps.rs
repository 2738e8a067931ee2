//! Small application kernels (sorting, n-body, Mandelbrot, convolution, transpose) built by
//! nvcc and checked against the same computation on the CPU.

mod common;

use std::sync::OnceLock;

use common::*;
use crum_ptx::{HostMemory, LaunchConfig, Module};

fn apps() -> &'static Module {
    static M: OnceLock<Module> = OnceLock::new();
    M.get_or_init(|| module("apps"))
}

fn cfg2(g: [u32; 2], b: [u32; 2]) -> LaunchConfig {
    LaunchConfig { grid: [g[0], g[1], 1], block: [b[0], b[1], 1], dynamic_shared_bytes: 0, cooperative: false }
}

#[test]
fn bitonic_sort_sorts_each_block() {
    let x: Vec<i32> = (0..512).map(|i| (i * 7919 + 13) % 1000 - 500).collect();
    let mut mem = HostMemory::new();
    let p = mem.alloc_bytes(&i32s(&x));
    run(apps(), &mut mem, "bitonic_sort", &cfg(2, 256), &Args::new().ptr(p)).unwrap();
    let got = to_i32s(&mem.read(p, 2048));
    for b in 0..2 {
        let mut want = x[b * 256..(b + 1) * 256].to_vec();
        want.sort();
        assert_eq!(&got[b * 256..(b + 1) * 256], &want[..]);
    }
}

#[test]
fn nbody_accelerations_match_cpu() {
    let n = 128;
    let pos: Vec<f32> = (0..n * 4).map(|i| if i % 4 == 3 { 1.0 + (i % 5) as f32 } else { ((i * 37) % 101) as f32 * 0.1 }).collect();
    let mut mem = HostMemory::new();
    let (pp, pa) = (mem.alloc_bytes(&f32s(&pos)), mem.alloc(12 * n as u64));
    run(apps(), &mut mem, "nbody", &cfg(2, 64), &Args::new().ptr(pp).ptr(pa).i32(n as i32)).unwrap();
    let got = to_f32s(&mem.read(pa, 12 * n));
    for i in 0..n {
        let mut a = [0f64; 3];
        for k in 0..n {
            let d: Vec<f64> = (0..3).map(|c| (pos[4 * k + c] - pos[4 * i + c]) as f64).collect();
            let d2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2] + 0.01;
            let s = pos[4 * k + 3] as f64 / (d2 * d2.sqrt());
            for c in 0..3 {
                a[c] += d[c] * s;
            }
        }
        for c in 0..3 {
            assert!((got[3 * i + c] as f64 - a[c]).abs() <= 1e-3 * a[c].abs().max(1.0), "i={i} c={c}: {} vs {}", got[3 * i + c], a[c]);
        }
    }
}

#[test]
fn mandelbrot_escape_counts_match_cpu() {
    let (w, h, max) = (48, 32, 200);
    let mut mem = HostMemory::new();
    let out = mem.alloc(4 * (w * h) as u64);
    run(apps(), &mut mem, "mandelbrot", &cfg2([3, 4], [16, 8]), &Args::new().ptr(out).i32(w).i32(h).i32(max)).unwrap();
    let got = to_i32s(&mem.read(out, 4 * (w * h) as usize));
    for y in 0..h {
        for x in 0..w {
            let (cr, ci) = (-2.0 + 3.0 * x as f64 / w as f64, -1.5 + 3.0 * y as f64 / h as f64);
            let (mut zr, mut zi, mut it) = (0.0f64, 0.0f64, 0);
            while zr * zr + zi * zi < 4.0 && it < max {
                let t = zr * zr - zi * zi + cr;
                zi = 2.0 * zr * zi + ci;
                zr = t;
                it += 1;
            }
            assert_eq!(got[(y * w + x) as usize], it, "x={x} y={y}");
        }
    }
}

#[test]
fn conv2d_with_constant_filter_matches_cpu() {
    let (w, h) = (40usize, 24usize);
    let img: Vec<f32> = (0..w * h).map(|i| ((i * 31) % 17) as f32).collect();
    let mut mem = HostMemory::new();
    let (pi, po) = (mem.alloc_bytes(&f32s(&img)), mem.alloc(4 * (w * h) as u64));
    run(apps(), &mut mem, "conv2d", &cfg2([3, 3], [16, 8]), &Args::new().ptr(pi).ptr(po).i32(w as i32).i32(h as i32)).unwrap();
    let got = to_f32s(&mem.read(po, 4 * w * h));
    let f = [0.0625f32, 0.125, 0.0625, 0.125, 0.25, 0.125, 0.0625, 0.125, 0.0625];
    for y in 0..h {
        for x in 0..w {
            let mut s = 0.0f32;
            for dy in -1i32..=1 {
                for dx in -1i32..=1 {
                    let xx = (x as i32 + dx).clamp(0, w as i32 - 1) as usize;
                    let yy = (y as i32 + dy).clamp(0, h as i32 - 1) as usize;
                    s = f[((dy + 1) * 3 + dx + 1) as usize].mul_add(img[yy * w + xx], s);
                }
            }
            assert_eq!(got[y * w + x], s, "x={x} y={y}");
        }
    }
}

#[test]
fn shared_memory_transpose_matches_cpu() {
    let (w, h) = (37usize, 21usize);
    let m: Vec<f32> = (0..w * h).map(|i| i as f32).collect();
    let mut mem = HostMemory::new();
    let (pi, po) = (mem.alloc_bytes(&f32s(&m)), mem.alloc(4 * (w * h) as u64));
    run(apps(), &mut mem, "transpose", &cfg2([3, 2], [16, 16]), &Args::new().ptr(pi).ptr(po).i32(w as i32).i32(h as i32)).unwrap();
    let got = to_f32s(&mem.read(po, 4 * w * h));
    for y in 0..h {
        for x in 0..w {
            assert_eq!(got[x * h + y], m[y * w + x]);
        }
    }
}
