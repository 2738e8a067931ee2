//! Interpreter throughput: runs a compute-heavy nvcc-compiled kernel on one worker and on
//! every core and prints PTX instructions per second. Run by `scripts/bench-ptx.sh`.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crum_ptx::{launch, HostMemory, LaunchConfig, Module, Pool};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let nvcc = match std::env::var("CRUM_CUDA_HOME") {
        Ok(h) => Path::new(&h).join("bin/nvcc"),
        Err(_) => {
            let out = Command::new(root.join("scripts/setup-cuda.sh")).output().expect("setup-cuda.sh");
            Path::new(String::from_utf8(out.stdout).unwrap().trim()).join("bin/nvcc")
        }
    };
    let dir = std::env::temp_dir().join(format!("crum-ptx-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ptx_path = dir.join("busy.ptx");
    let st = Command::new(&nvcc)
        .args(["-arch=sm_80", "-ptx"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bench_kernel.cu"))
        .arg("-o")
        .arg(&ptx_path)
        .status()
        .expect("run nvcc");
    assert!(st.success());
    let module = Module::parse(&std::fs::read_to_string(&ptx_path).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let iters: i32 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let blocks = 64u32;
    let threads = 128u32;
    let mut mem = HostMemory::new();
    let out = mem.alloc(4 * (blocks * threads) as u64);
    let mut params = out.to_le_bytes().to_vec();
    params.extend_from_slice(&iters.to_le_bytes());
    let cfg = LaunchConfig { grid: [blocks, 1, 1], block: [threads, 1, 1], dynamic_shared_bytes: 0, cooperative: false };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("kernel: busy, {blocks} blocks x {threads} threads, {iters} loop iterations");
    let mut one = 0.0;
    for workers in [1, cores] {
        let pool = Pool::new(workers);
        // Warm-up, then the best of three.
        let _ = launch(&module, "busy", &cfg, &params, &|_| None, &mem, &pool).unwrap();
        let mut best = f64::MAX;
        let mut n = 0;
        for _ in 0..3 {
            let t = Instant::now();
            let r = launch(&module, "busy", &cfg, &params, &|_| None, &mem, &pool).unwrap();
            best = best.min(t.elapsed().as_secs_f64());
            n = r.instructions;
        }
        let rate = n as f64 / best;
        if workers == 1 {
            one = rate;
        }
        println!(
            "{workers} worker(s): {n} instructions in {:.3} s = {:.1} M instructions/s ({:.1} M/s per core, {:.2}x one worker)",
            best,
            rate / 1e6,
            rate / 1e6 / workers as f64,
            rate / one
        );
    }

    // Launch overhead: many tiny launches (2 blocks x 64 threads).
    let small = LaunchConfig { grid: [2, 1, 1], block: [64, 1, 1], dynamic_shared_bytes: 0, cooperative: false };
    let mut p = out.to_le_bytes().to_vec();
    p.extend_from_slice(&1i32.to_le_bytes());
    for workers in [1, cores] {
        let pool = Pool::new(workers);
        let t = Instant::now();
        for _ in 0..2000 {
            launch(&module, "busy", &small, &p, &|_| None, &mem, &pool).unwrap();
        }
        println!("tiny launches, {workers} worker(s): {:.1} us per launch", t.elapsed().as_secs_f64() / 2000.0 * 1e6);
    }

    // Many small blocks: vector add of 4M floats in blocks of 256 threads.
    let n = 1u32 << 22;
    let bufs: Vec<u64> = (0..3).map(|_| mem.alloc(4 * n as u64)).collect();
    let mut params = Vec::new();
    for b in &bufs {
        params.extend_from_slice(&b.to_le_bytes());
    }
    params.extend_from_slice(&(n as i32).to_le_bytes());
    let cfg = LaunchConfig { grid: [n / 256, 1, 1], block: [256, 1, 1], dynamic_shared_bytes: 0, cooperative: false };
    println!("kernel: vadd, {} blocks x 256 threads", n / 256);
    for workers in [1, cores] {
        let pool = Pool::new(workers);
        let t = Instant::now();
        let r = launch(&module, "vadd", &cfg, &params, &|_| None, &mem, &pool).unwrap();
        let s = t.elapsed().as_secs_f64();
        println!(
            "{workers} worker(s): {:.3} s = {:.1} M elements/s, {:.1} M instructions/s",
            s,
            n as f64 / s / 1e6,
            r.instructions as f64 / s / 1e6
        );
    }
}
