//! Shared helpers of the integration tests: find nvcc (installing it with
//! `scripts/setup-cuda.sh` if needed), compile a kernel file from `tests/kernels/`, pull the
//! PTX out of the object's `.nv_fatbin` section, and launch kernels on [`HostMemory`].
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crum_ptx::{fatbin, launch, HostMemory, LaunchConfig, LaunchError, LaunchOutput, Module, Pool};
use object::{Object, ObjectSection};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The nvcc binary: `$CRUM_CUDA_HOME/bin/nvcc`, else the one `scripts/setup-cuda.sh` installs.
pub fn nvcc() -> PathBuf {
    static NVCC: OnceLock<PathBuf> = OnceLock::new();
    NVCC.get_or_init(|| {
        if let Ok(h) = std::env::var("CRUM_CUDA_HOME") {
            let p = Path::new(&h).join("bin/nvcc");
            if p.exists() {
                return p;
            }
        }
        let out = Command::new(repo_root().join("scripts/setup-cuda.sh")).output().expect("run scripts/setup-cuda.sh");
        assert!(out.status.success(), "setup-cuda.sh failed: {}", String::from_utf8_lossy(&out.stderr));
        let root = String::from_utf8(out.stdout).unwrap();
        Path::new(root.trim()).join("bin/nvcc")
    })
    .clone()
}

/// ptxas, installed next to nvcc: compiles PTX for a GPU architecture without a GPU.
pub fn ptxas() -> PathBuf {
    let p = nvcc().with_file_name("ptxas");
    assert!(p.exists(), "no ptxas next to {}", nvcc().display());
    p
}

/// Assemble `ptx` with ptxas for sm_80 (what a GPU driver's JIT does with it); panics with
/// ptxas's messages when it is rejected.
pub fn assemble(what: &str, ptx: &str) {
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = out_dir().join(format!("{what}-{}-{seq}.ptx", std::process::id()));
    std::fs::write(&path, ptx).unwrap();
    let r = Command::new(ptxas()).args(["-arch=sm_80", "-o", "/dev/null"]).arg(&path).output().expect("run ptxas");
    let _ = std::fs::remove_file(&path);
    assert!(r.status.success(), "ptxas rejects {what}: {}", String::from_utf8_lossy(&r.stderr));
}

fn out_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("crum-ptx-kernels");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Compile `tests/kernels/<name>.cu` with extra flags; returns the output file. Outputs are
/// cached under the target directory, keyed by the source text, flags and compiler.
pub fn compile(name: &str, flags: &[&str], link: bool) -> PathBuf {
    compile_source(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kernels").join(format!("{name}.cu")), flags, link)
}

/// [`compile`] of any CUDA source file (e.g. the corpus in `integration-tests/cuda/`; its
/// includes are not part of the cache key).
pub fn compile_source(src: &Path, flags: &[&str], link: bool) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let name = src.file_stem().unwrap().to_string_lossy().into_owned();
    let src = src.to_path_buf();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::fs::read(&src).unwrap().hash(&mut h);
    flags.hash(&mut h);
    link.hash(&mut h);
    nvcc().hash(&mut h);
    let file = name.replace('/', "_");
    let out = out_dir().join(format!("{file}-{:016x}{}", h.finish(), if link { "" } else { ".o" }));
    if out.exists() {
        return out;
    }
    // Build under a private name, then rename: concurrent tests never see a partial file.
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = out.with_extension(format!("tmp{}-{seq}", std::process::id()));
    let mut cmd = Command::new(nvcc());
    cmd.args(["-cudart", "shared"]).args(flags);
    if !link {
        cmd.arg("-c");
    }
    cmd.arg(&src).arg("-o").arg(&tmp);
    let r = cmd.output().expect("run nvcc");
    assert!(r.status.success(), "nvcc failed for {name}: {}", String::from_utf8_lossy(&r.stderr));
    // Two tests may build the same file at once; either result is fine.
    std::fs::rename(&tmp, &out).unwrap();
    out
}

/// The `.nv_fatbin` section of a compiled file.
pub fn fatbin_section(path: &Path) -> Vec<u8> {
    let data = std::fs::read(path).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let sec = obj.section_by_name(".nv_fatbin").expect("no .nv_fatbin section");
    sec.data().unwrap().to_vec()
}

/// Compile with `-arch=sm_80` (default compression); the best PTX text of the fat binary.
pub fn ptx_text(name: &str) -> String {
    ptx_of(&compile(name, &["-arch=sm_80"], false))
}

/// The best PTX text of a compiled file's fat binary.
pub fn ptx_of(obj: &Path) -> String {
    let images = fatbin::extract_ptx(&fatbin_section(obj)).expect("extract PTX");
    fatbin::best_ptx(&images).expect("a PTX image").ptx.clone()
}

/// Compile with `-arch=sm_80` (default compression) and parse the best PTX.
pub fn module(name: &str) -> Module {
    Module::parse(&ptx_text(name)).unwrap_or_else(|e| panic!("parse {name}: {e}\n"))
}

/// Packs kernel arguments with their natural alignment.
#[derive(Default)]
pub struct Args(pub Vec<u8>);

impl Args {
    pub fn new() -> Args {
        Args(Vec::new())
    }
    fn put(mut self, b: &[u8], align: usize) -> Args {
        while !self.0.len().is_multiple_of(align) {
            self.0.push(0);
        }
        self.0.extend_from_slice(b);
        self
    }
    pub fn ptr(self, p: u64) -> Args {
        self.put(&p.to_le_bytes(), 8)
    }
    pub fn i32(self, v: i32) -> Args {
        self.put(&v.to_le_bytes(), 4)
    }
    pub fn f32(self, v: f32) -> Args {
        self.put(&v.to_le_bytes(), 4)
    }
    pub fn f64(self, v: f64) -> Args {
        self.put(&v.to_le_bytes(), 8)
    }
    pub fn bytes(self, b: &[u8], align: usize) -> Args {
        self.put(b, align)
    }
}

pub fn cfg(grid: u32, block: u32) -> LaunchConfig {
    LaunchConfig { grid: [grid, 1, 1], block: [block, 1, 1], dynamic_shared_bytes: 0, cooperative: false }
}

/// Launch with module variables allocated (and initialized) in `mem`.
pub fn run(m: &Module, mem: &mut HostMemory, kernel: &str, c: &LaunchConfig, args: &Args) -> Result<LaunchOutput, LaunchError> {
    let name = m.kernels().map(|k| k.name.clone()).find(|n| n == kernel || n.contains(kernel)).unwrap_or_else(|| kernel.to_string());
    let syms: Vec<(String, u64)> = m.globals().iter().map(|g| (g.name.clone(), mem.alloc_bytes(&g.init))).collect();
    let lookup = |s: &str| syms.iter().find(|(n, _)| n == s).map(|x| x.1);
    launch(m, &name, c, &args.0, &lookup, mem, &Pool::new(2))
}

pub fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
pub fn to_f32s(b: &[u8]) -> Vec<f32> {
    b.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}
pub fn i32s(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
pub fn to_i32s(b: &[u8]) -> Vec<i32> {
    b.chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect()
}
pub fn f64s(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
pub fn to_f64s(b: &[u8]) -> Vec<f64> {
    b.chunks(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()
}
