//! The preemptible form (`crum_ptx::preempt`) on real nvcc kernels: ptxas assembles the
//! transformed PTX for sm_80 (what a GPU would load), and it runs on the engine and must leave memory bit for bit as the original kernel does, whole or
//! stopped at a block boundary and launched again from there; kernels that cannot be made
//! preemptible are refused with the reason. `instruction_overhead_of_the_preemptible_form`
//! prints the overhead figures of docs/ptx-engine.md:
//! `cargo test -p crum-ptx --release --test preempt -- --nocapture instruction_overhead`.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use common::*;
use crum_ptx::preempt::{self, ControlBlock, PreemptibleModule, Reason, CTL_BYTES};
use crum_ptx::{launch, HostMemory, LaunchConfig, LaunchOutput, Module, Pool};

/// The original module, its transformation and the transformed module, per kernel file.
struct Forms {
    original: Module,
    report: PreemptibleModule,
    transformed: Module,
}

fn forms(file: &'static str) -> &'static Forms {
    static CACHE: OnceLock<Mutex<HashMap<&'static str, &'static Forms>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(f) = cache.lock().unwrap().get(file) {
        return f;
    }
    let text = ptx_text(file);
    let report = preempt::transform(&text).unwrap_or_else(|e| panic!("transform {file}: {e}"));
    let transformed = Module::parse(&report.ptx).unwrap_or_else(|e| panic!("the transformed {file} does not parse: {e}\n{}", report.ptx));
    assemble(&format!("{file}-preemptible"), &report.ptx);
    let f: &'static Forms = Box::leak(Box::new(Forms { original: module(file), report, transformed }));
    cache.lock().unwrap().insert(file, f);
    f
}

/// Device memory with a module's variables allocated after the test's own buffers.
struct Dev {
    mem: HostMemory,
    syms: Vec<(String, u64)>,
}

impl Dev {
    fn launch(&self, m: &Module, kernel: &str, c: &LaunchConfig, params: &[u8], pool: &Pool) -> LaunchOutput {
        let lookup = |s: &str| self.syms.iter().find(|(n, _)| n == s).map(|x| x.1);
        launch(m, kernel, c, params, &lookup, &self.mem, pool).unwrap_or_else(|e| panic!("{kernel}: {e}"))
    }
    fn ctl(&self, addr: u64) -> ControlBlock {
        ControlBlock::decode(&self.mem.read(addr, CTL_BYTES)).unwrap()
    }
}

/// One kernel of the corpus with its inputs.
struct Case {
    file: &'static str,
    kernel: &'static str,
    cfg: LaunchConfig,
    /// Allocates and fills the buffers; returns the arguments and the buffers to compare.
    setup: fn(&mut HostMemory) -> (Args, Buffers),
}

/// Device buffers to compare: (address, bytes).
type Buffers = Vec<(u64, usize)>;

fn grid(g: [u32; 3], b: [u32; 3]) -> LaunchConfig {
    LaunchConfig { grid: g, block: b, dynamic_shared_bytes: 0, cooperative: false }
}

fn floats(n: usize, k: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * k + 3) % 97) as f32 * 0.37 - 9.0).collect()
}

fn corpus() -> Vec<Case> {
    vec![
        Case { file: "basic", kernel: "vector_add", cfg: grid([4, 1, 1], [256, 1, 1]), setup: |m| {
            let (a, b, c) = (m.alloc_bytes(&f32s(&floats(1000, 7))), m.alloc_bytes(&f32s(&floats(1000, 11))), m.alloc(4000));
            (Args::new().ptr(a).ptr(b).ptr(c).i32(1000), vec![(c, 4000)])
        } },
        Case { file: "basic", kernel: "matmul_tiled", cfg: grid([3, 3, 1], [16, 16, 1]), setup: |m| {
            let n = 40;
            let (a, b, c) = (m.alloc_bytes(&f32s(&floats(n * n, 7))), m.alloc_bytes(&f32s(&floats(n * n, 5))), m.alloc(4 * (n * n) as u64));
            (Args::new().ptr(a).ptr(b).ptr(c).i32(n as i32), vec![(c, 4 * n * n)])
        } },
        Case { file: "basic", kernel: "stencil_f64", cfg: grid([3, 1, 1], [128, 1, 1]), setup: |m| {
            let x: Vec<f64> = (0..300).map(|i| (i as f64 * 0.1).sin()).collect();
            let (i, o) = (m.alloc_bytes(&f64s(&x)), m.alloc(8 * 300));
            (Args::new().ptr(i).ptr(o).i32(300), vec![(o, 2400)])
        } },
        Case { file: "basic", kernel: "const_table", cfg: grid([3, 1, 1], [32, 1, 1]), setup: |m| {
            let o = m.alloc(4 * 96);
            (Args::new().ptr(o).i32(90), vec![(o, 4 * 96)])
        } },
        Case { file: "basic", kernel: "dyn_shared", cfg: LaunchConfig { grid: [4, 1, 1], block: [64, 1, 1], dynamic_shared_bytes: 256, cooperative: false }, setup: |m| {
            let x: Vec<i32> = (0..256).map(|i| i * 3 - 100).collect();
            let (i, o) = (m.alloc_bytes(&i32s(&x)), m.alloc(4 * 256));
            (Args::new().ptr(i).ptr(o), vec![(o, 1024)])
        } },
        Case { file: "reduce", kernel: "reduce_shfl", cfg: grid([4, 1, 1], [256, 1, 1]), setup: |m| {
            let x: Vec<f32> = floats(1000, 13);
            let (i, o) = (m.alloc_bytes(&f32s(&x)), m.alloc(16));
            (Args::new().ptr(i).ptr(o).i32(1000), vec![(o, 16)])
        } },
        Case { file: "reduce", kernel: "reduce_atomic", cfg: grid([20, 1, 1], [256, 1, 1]), setup: |m| {
            let x: Vec<i32> = (0..5000).map(|i| (i * 37) % 101 - 50).collect();
            let (i, s) = (m.alloc_bytes(&i32s(&x)), m.alloc(4));
            (Args::new().ptr(i).ptr(s).i32(5000), vec![(s, 4)])
        } },
        Case { file: "reduce", kernel: "scan_block", cfg: grid([1, 1, 1], [256, 1, 1]), setup: |m| {
            let x: Vec<i32> = (0..256).map(|i| (i * 13) % 7 - 3).collect();
            let (i, o) = (m.alloc_bytes(&i32s(&x)), m.alloc(1024));
            (Args::new().ptr(i).ptr(o).i32(250), vec![(o, 1024)])
        } },
        Case { file: "reduce", kernel: "histogram", cfg: grid([8, 1, 1], [128, 1, 1]), setup: |m| {
            let d: Vec<u8> = (0..10000u32).map(|i| (i.wrapping_mul(2654435761) >> 24) as u8).collect();
            let (p, b) = (m.alloc_bytes(&d), m.alloc(4 * 64));
            (Args::new().ptr(p).ptr(b).i32(10000), vec![(b, 256)])
        } },
        Case { file: "apps", kernel: "bitonic_sort", cfg: grid([4, 1, 1], [256, 1, 1]), setup: |m| {
            let x: Vec<i32> = (0..1024).map(|i| (i * 7919 + 13) % 1000 - 500).collect();
            let p = m.alloc_bytes(&i32s(&x));
            (Args::new().ptr(p), vec![(p, 4096)])
        } },
        Case { file: "apps", kernel: "nbody", cfg: grid([2, 1, 1], [64, 1, 1]), setup: |m| {
            let n = 128;
            let pos: Vec<f32> = (0..n * 4).map(|i| if i % 4 == 3 { 1.0 + (i % 5) as f32 } else { ((i * 37) % 101) as f32 * 0.1 }).collect();
            let (pp, pa) = (m.alloc_bytes(&f32s(&pos)), m.alloc(12 * n as u64));
            (Args::new().ptr(pp).ptr(pa).i32(n as i32), vec![(pa, 12 * n)])
        } },
        Case { file: "apps", kernel: "mandelbrot", cfg: grid([3, 4, 1], [16, 8, 1]), setup: |m| {
            let o = m.alloc(4 * 48 * 32);
            (Args::new().ptr(o).i32(48).i32(32).i32(200), vec![(o, 4 * 48 * 32)])
        } },
        Case { file: "apps", kernel: "conv2d", cfg: grid([3, 3, 1], [16, 8, 1]), setup: |m| {
            let (i, o) = (m.alloc_bytes(&f32s(&floats(40 * 24, 3))), m.alloc(4 * 40 * 24));
            (Args::new().ptr(i).ptr(o).i32(40).i32(24), vec![(o, 4 * 40 * 24)])
        } },
        Case { file: "apps", kernel: "transpose", cfg: grid([3, 2, 1], [16, 16, 1]), setup: |m| {
            let (i, o) = (m.alloc_bytes(&f32s(&floats(37 * 21, 9))), m.alloc(4 * 37 * 21));
            (Args::new().ptr(i).ptr(o).i32(37).i32(21), vec![(o, 4 * 37 * 21)])
        } },
        Case { file: "reduce", kernel: "warp_ops", cfg: grid([2, 1, 1], [64, 1, 1]), setup: |m| {
            let x: Vec<i32> = (0..64).map(|i| (i * 7919) % 201 - 100).collect();
            let (i, o) = (m.alloc_bytes(&i32s(&x)), m.alloc(64 * 9 * 4));
            (Args::new().ptr(i).ptr(o), vec![(o, 64 * 9 * 4)])
        } },
        Case { file: "preempt", kernel: "warp_sums", cfg: grid([3, 2, 1], [64, 1, 1]), setup: |m| {
            let x: Vec<i32> = (0..384).map(|i| (i * 31) % 1000 - 400).collect();
            let (i, o) = (m.alloc_bytes(&i32s(&x)), m.alloc(4 * 12));
            (Args::new().ptr(i).i32(370).ptr(o), vec![(o, 48)])
        } },
        Case { file: "preempt", kernel: "grid3d", cfg: grid([3, 2, 4], [32, 1, 1]), setup: |m| {
            let o = m.alloc(4 * 24 * 32);
            (Args::new().ptr(o), vec![(o, 4 * 24 * 32)])
        } },
        Case { file: "preempt", kernel: "uniform_exit_then_barrier", cfg: grid([3, 2, 1], [64, 1, 1]), setup: |m| {
            let x: Vec<i32> = (0..400).map(|i| i * 5 - 7).collect();
            let (i, o) = (m.alloc_bytes(&i32s(&x)), m.alloc(4 * 400));
            (Args::new().ptr(i).ptr(o).i32(350).i32(0), vec![(o, 1600)])
        } },
    ]
}

/// Fresh memory with the case's buffers and the module's variables.
fn device(c: &Case, m: &Module) -> (Dev, Args, Vec<(u64, usize)>) {
    let mut mem = HostMemory::new();
    let (args, outs) = (c.setup)(&mut mem);
    let syms = m.globals().iter().map(|g| (g.name.clone(), mem.alloc_bytes(&g.init))).collect();
    (Dev { mem, syms }, args, outs)
}

fn snapshot(d: &Dev, outs: &[(u64, usize)]) -> Vec<Vec<u8>> {
    outs.iter().map(|&(a, n)| d.mem.read(a, n)).collect()
}

/// The original kernel's results and instruction count.
fn run_original(c: &Case, pool: &Pool) -> (Vec<Vec<u8>>, u64) {
    let f = forms(c.file);
    let (d, args, outs) = device(c, &f.original);
    let o = d.launch(&f.original, c.kernel, &c.cfg, &args.0, pool);
    (snapshot(&d, &outs), o.instructions)
}

/// The transformed kernel run in launches of at most `ends` logical blocks each (the control
/// block's `end` moved forward between them, as a host resumes a stopped grid), on
/// `physical` blocks: results, instructions of all launches, the final control block.
fn run_transformed(c: &Case, pool: &Pool, physical: u32, ends: &[u32]) -> (Vec<Vec<u8>>, u64, ControlBlock) {
    let f = forms(c.file);
    let (mut d, args, outs) = device(c, &f.transformed);
    let flag = d.mem.alloc(4);
    let mut ctl = ControlBlock::new(c.cfg.grid, 0, flag).unwrap();
    let at = d.mem.alloc(CTL_BYTES as u64);
    let params = preempt::params_with_ctl(&args.0, at);
    let pc = preempt::physical_config(&c.cfg, physical);
    let mut instructions = 0;
    for &end in ends {
        ctl.end = end;
        ctl.rearm();
        d.mem.write(at, &ctl.encode());
        instructions += d.launch(&f.transformed, c.kernel, &pc, &params, pool).instructions;
        ctl = d.ctl(at);
        assert_eq!(ctl.resume_point(), end.min(ctl.total()), "{}: blocks done after a launch up to {end}", c.kernel);
    }
    (snapshot(&d, &outs), instructions, ctl)
}

#[test]
fn every_kernel_of_the_test_corpus_is_made_preemptible() {
    let mut refused = Vec::new();
    for file in ["basic", "reduce", "apps"] {
        for k in &forms(file).report.kernels {
            if let Err(e) = &k.result {
                refused.push(e.to_string());
            }
        }
        // Kernels left alone are still in the module, unchanged.
        let f = forms(file);
        assert_eq!(f.original.kernels().count(), f.transformed.kernels().count());
    }
    assert!(refused.is_empty(), "{refused:#?}");
    for c in corpus() {
        let r = &forms(c.file).report.outcome(c.kernel).unwrap().result;
        assert!(r.as_ref().is_ok_and(|k| k.fits(c.cfg.block)), "{}: {r:?}", c.kernel);
    }
    // reduce_shfl leaves warps other than warp 0 (threadIdx.x / 32 != 0) before warp 0's
    // shuffles: safe when a block's rows are whole warps.
    let k = forms("reduce").report.outcome("reduce_shfl").unwrap().result.clone().unwrap();
    assert!(k.warp_rows && k.fits([256, 1, 1]) && k.fits([64, 4, 1]) && !k.fits([48, 2, 1]));
}

#[test]
fn transformed_corpus_kernels_leave_memory_bit_identical_whole_and_resumed() {
    let pool = Pool::new(2);
    for c in corpus() {
        let total = c.cfg.grid.iter().product::<u32>();
        let (want, _) = run_original(&c, &pool);
        for physical in [1, 2, total] {
            let (got, _, ctl) = run_transformed(&c, &pool, physical, &[total]);
            assert_eq!(got, want, "{} on {physical} physical blocks", c.kernel);
            assert_eq!((ctl.done, ctl.resume_point()), (total, total), "{}", c.kernel);
        }
        // Stopped after about half the grid, then launched again from where it stopped.
        let (got, _, ctl) = run_transformed(&c, &pool, 2, &[total / 2, total]);
        assert_eq!(got, want, "{} resumed at block {}", c.kernel, total / 2);
        assert_eq!(ctl.done, total);
    }
}

/// A grid stopped on the transformed kernel and finished by the original one from the
/// resume point (`launch_from`, as the emulated device does after a restart): the logical
/// block numbering is the engine's.
#[test]
fn the_original_kernel_finishes_a_grid_the_transformed_one_started() {
    let pool = Pool::new(2);
    for c in corpus().into_iter().filter(|c| ["matmul_tiled", "grid3d", "histogram"].contains(&c.kernel)) {
        let total = c.cfg.grid.iter().product::<u32>();
        let (want, _) = run_original(&c, &pool);
        let f = forms(c.file);
        let (mut d, args, outs) = device(&c, &f.transformed);
        let flag = d.mem.alloc(4);
        let mut ctl = ControlBlock::new(c.cfg.grid, 0, flag).unwrap();
        ctl.end = total / 3 + 1;
        let at = d.mem.alloc_bytes(&ctl.encode());
        d.launch(&f.transformed, c.kernel, &preempt::physical_config(&c.cfg, 2), &preempt::params_with_ctl(&args.0, at), &pool);
        let first = d.ctl(at).resume_point();
        assert_eq!(first, total / 3 + 1);
        let lookup = |s: &str| d.syms.iter().find(|(n, _)| n == s).map(|x| x.1);
        crum_ptx::launch_from(&f.original, c.kernel, &c.cfg, &args.0, &lookup, &d.mem, &pool, u64::from(first), None).unwrap();
        assert_eq!(snapshot(&d, &outs), want, "{}", c.kernel);
    }
}

/// `raise_flag_at` with the flag word of the control block as its argument: the grid stops
/// right after logical block `stop` on one physical block (blocks run in order), and after
/// at most one more block per other physical block on more.
#[test]
fn a_raised_flag_stops_the_grid_at_a_block_boundary_and_the_rest_runs_after_a_relaunch() {
    let f = forms("preempt");
    assert!(f.report.outcome("raise_flag_at").unwrap().result.is_ok());
    let cfg = grid([5, 4, 1], [32, 1, 1]);
    let (total, stop) = (20u32, 7u32);
    let pool = Pool::new(2);
    // Uninterrupted original.
    let mut mem = HostMemory::new();
    let (out, flag) = (mem.alloc(4 * 640), mem.alloc(4));
    let orig = Dev { mem, syms: Vec::new() };
    orig.launch(&f.original, "raise_flag_at", &cfg, &Args::new().ptr(out).ptr(flag).i32(stop as i32).0, &pool);
    let want = orig.mem.read(out, 4 * 640);

    for physical in [1u32, 2] {
        let mut mem = HostMemory::new();
        let (out, flag, at) = (mem.alloc(4 * 640), mem.alloc(4), mem.alloc(CTL_BYTES as u64));
        let d = Dev { mem, syms: Vec::new() };
        let mut ctl = ControlBlock::new(cfg.grid, 0, flag).unwrap();
        d.mem.write(at, &ctl.encode());
        let params = preempt::params_with_ctl(&Args::new().ptr(out).ptr(flag).i32(stop as i32).0, at);
        let pc = preempt::physical_config(&cfg, physical);
        d.launch(&f.transformed, "raise_flag_at", &pc, &params, &pool);
        ctl = d.ctl(at);
        let done = ctl.resume_point();
        if physical == 1 {
            assert_eq!(ctl.done, stop + 1, "one physical block stops right after the block that raised the flag");
        } else {
            assert!(ctl.done > stop && ctl.done <= stop + physical, "done {}", ctl.done);
        }
        // Exactly the blocks before the resume point wrote their part; none after it did.
        let got = to_i32s(&d.mem.read(out, 4 * 640));
        for (i, v) in got.iter().enumerate() {
            let b = i as u32 / 32;
            assert_eq!(*v != 0, b < done, "element {i} of block {b} (done {done})");
        }
        // Relaunch from there with the flag lowered: the same memory as the uninterrupted run.
        d.mem.write(flag, &0u32.to_le_bytes());
        ctl.rearm();
        d.mem.write(at, &ctl.encode());
        d.launch(&f.transformed, "raise_flag_at", &pc, &params, &pool);
        let ctl = d.ctl(at);
        assert_eq!((ctl.done, ctl.finished()), (total, true));
        assert_eq!(d.mem.read(out, 4 * 640), want);
    }
}

#[test]
fn a_flag_raised_before_the_launch_runs_no_block() {
    let c = &corpus()[0];
    let f = forms(c.file);
    let (mut d, args, outs) = device(c, &f.transformed);
    let flag = d.mem.alloc_bytes(&1u32.to_le_bytes());
    let ctl = ControlBlock::new(c.cfg.grid, 0, flag).unwrap();
    let at = d.mem.alloc_bytes(&ctl.encode());
    let before = snapshot(&d, &outs);
    d.launch(&f.transformed, c.kernel, &preempt::physical_config(&c.cfg, 2), &preempt::params_with_ctl(&args.0, at), &Pool::new(2));
    let after = d.ctl(at);
    assert_eq!((after.done, after.next, after.resume_point()), (0, 0, 0));
    assert_eq!(snapshot(&d, &outs), before);
}

/// Another thread raises the flag while the grid runs (what a checkpoint does): wherever it
/// stopped, the blocks before the resume point are complete and the relaunch finishes the job.
#[test]
fn a_flag_raised_by_another_thread_during_the_launch_leaves_a_resumable_grid() {
    let c = Case { file: "basic", kernel: "vector_add", cfg: grid([512, 1, 1], [32, 1, 1]), setup: |m| {
        let n = 512 * 32;
        let (a, b, c) = (m.alloc_bytes(&f32s(&floats(n, 7))), m.alloc_bytes(&f32s(&floats(n, 11))), m.alloc(4 * n as u64));
        (Args::new().ptr(a).ptr(b).ptr(c).i32(n as i32), vec![(c, 4 * n)])
    } };
    let pool = Pool::new(2);
    let (want, _) = run_original(&c, &pool);
    let f = forms(c.file);
    let (mut d, args, outs) = device(&c, &f.transformed);
    let flag = d.mem.alloc(4);
    let mut ctl = ControlBlock::new(c.cfg.grid, 0, flag).unwrap();
    let at = d.mem.alloc_bytes(&ctl.encode());
    let params = preempt::params_with_ctl(&args.0, at);
    let pc = preempt::physical_config(&c.cfg, 2);
    let finished = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            // Wait for a few blocks to be done (or the launch to end), then raise the flag.
            while !finished.load(Ordering::Acquire) && d.ctl(at).done < 3 {
                std::thread::yield_now();
            }
            d.mem.write(flag, &1u32.to_le_bytes());
        });
        d.launch(&f.transformed, c.kernel, &pc, &params, &pool);
        finished.store(true, Ordering::Release);
    });
    ctl = d.ctl(at);
    let done = ctl.resume_point() as usize;
    eprintln!("stopped with {done} of 512 logical blocks done");
    assert!(done >= 3);
    let got = snapshot(&d, &outs);
    assert_eq!(got[0][..done * 128], want[0][..done * 128]);
    assert!(got[0][done * 128..].iter().all(|&b| b == 0), "no block after the resume point ran");
    d.mem.write(flag, &0u32.to_le_bytes());
    ctl.rearm();
    d.mem.write(at, &ctl.encode());
    d.launch(&f.transformed, c.kernel, &pc, &params, &pool);
    assert_eq!(snapshot(&d, &outs), want);
    assert!(d.ctl(at).finished());
}

#[test]
fn unsafe_kernels_are_refused_with_the_kernel_and_the_reason() {
    let r = &forms("preempt").report;
    let reason = |k: &str| r.outcome(k).unwrap().result.clone().unwrap_err();
    let e = reason("early_exit_then_barrier");
    assert!(matches!(e.reason, Reason::ExitBeforeBarrier { .. }), "{e}");
    assert!(e.to_string().contains("kernel `early_exit_then_barrier` cannot be made preemptible"), "{e}");
    let e = reason("block_id_in_function");
    assert!(matches!(&e.reason, Reason::BlockIdInFunction { func, reg } if func.contains("block_of") && reg == "%ctaid.x"), "{e}");
    for k in ["warp_exit_then_barrier", "lane_exit_then_shuffle"] {
        assert!(matches!(reason(k).reason, Reason::ExitBeforeBarrier { .. }), "{k}: {}", reason(k));
    }
    let e = reason("grid_synced");
    assert!(matches!(e.reason, Reason::GridSync(_)), "{e}");
    eprintln!("{}\n{}", reason("early_exit_then_barrier"), reason("grid_synced"));
}

/// The overhead figure: instructions executed by the transformed kernel (the whole grid on
/// two physical blocks, and on one physical block per logical block) against the original.
#[test]
fn instruction_overhead_of_the_preemptible_form() {
    let pool = Pool::new(2);
    println!("{:<28} {:>7} {:>7} {:>12} {:>12} {:>7} {:>12} {:>7}", "kernel", "blocks", "threads", "original", "P=2", "ratio", "P=blocks", "ratio");
    let (mut so, mut s2) = (0u64, 0u64);
    let mut cases = corpus();
    // A grid of realistic size for the smallest body: the per-block cost dominates.
    cases.push(Case { file: "basic", kernel: "vector_add", cfg: grid([1024, 1, 1], [256, 1, 1]), setup: |m| {
        let n = 1024 * 256;
        let (a, b, c) = (m.alloc_bytes(&f32s(&floats(n, 7))), m.alloc_bytes(&f32s(&floats(n, 11))), m.alloc(4 * n as u64));
        (Args::new().ptr(a).ptr(b).ptr(c).i32(n as i32), vec![(c, 4 * n)])
    } });
    for c in cases {
        let total = c.cfg.grid.iter().product::<u32>();
        let (want, orig) = run_original(&c, &pool);
        let (got2, i2, _) = run_transformed(&c, &pool, 2, &[total]);
        let (gotn, inn, _) = run_transformed(&c, &pool, total, &[total]);
        assert!(got2 == want && gotn == want, "{}", c.kernel);
        assert!(i2 > orig && inn > orig, "{}: the transformed kernel runs the original's instructions and more", c.kernel);
        so += orig;
        s2 += i2;
        let threads = c.cfg.block.iter().product::<u32>();
        println!(
            "{:<28} {:>7} {:>7} {:>12} {:>12} {:>7.3} {:>12} {:>7.3}",
            c.kernel,
            total,
            threads,
            orig,
            i2,
            i2 as f64 / orig as f64,
            inn,
            inn as f64 / orig as f64
        );
    }
    println!("all kernels: {so} → {s2} instructions on P=2 ({:.3}x)", s2 as f64 / so as f64);
}

/// Every kernel of the CUDA corpus (`integration-tests/cuda/*.cu`): the transformed module
/// parses, ptxas assembles it for sm_80, it offers the same kernels (the transformed ones with the control block as one more
/// parameter), and each kernel left alone says why.
#[test]
fn the_whole_cuda_corpus_transforms_into_modules_that_parse() {
    let dir = repo_root().join("integration-tests/cuda");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "cu")).collect();
    files.sort();
    let (mut made, mut refused) = (0, Vec::new());
    for src in &files {
        let file = src.file_name().unwrap().to_string_lossy().into_owned();
        let text = ptx_of(&compile_source(src, &["-arch=sm_80"], false));
        let original = Module::parse(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        let report = preempt::transform(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        let transformed = Module::parse(&report.ptx).unwrap_or_else(|e| panic!("{file}: the transformed module does not parse: {e}\n{}", report.ptx));
        assert_eq!(report.kernels.len(), original.kernels().count(), "{file}");
        assemble(&format!("{file}-preemptible"), &report.ptx);
        for k in &report.kernels {
            let (o, t) = (original.kernel(&k.name).unwrap(), transformed.kernel(&k.name).unwrap());
            match &k.result {
                Ok(_) => {
                    made += 1;
                    assert_eq!(t.params.len(), o.params.len() + 1, "{file}: {}", k.name);
                    assert_eq!(t.params.last().unwrap().offset as usize, (o.param_bytes as usize).next_multiple_of(8), "{file}: {}", k.name);
                }
                Err(e) => {
                    assert_eq!(t, o, "{file}: a refused kernel is left as it was");
                    refused.push(format!("{file}: {e}"));
                }
            }
        }
    }
    eprintln!("{made} kernels made preemptible; refused:\n{}", refused.join("\n"));
    assert!(made > 0);
    assert!(refused.iter().any(|r| r.starts_with("cg_grid_sync.cu") && r.contains("grid-wide")), "{refused:#?}");
}
