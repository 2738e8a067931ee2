//! Modules, kernels and launches of the emulated driver, on `crum-ptx`: a module is the PTX of
//! the image (`cuModuleLoadData`: a fat binary, as the emulated device reads it; PTX text), its
//! module variables are driver memory ([`crate::mem`]) with their initializers, and a launch
//! runs the interpreter on the stream's thread, one grid at a time.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

use crum_ptx::{DeviceMemory, LaunchConfig, Region};

use crate::code::*;
use crate::mem::Memory;

/// A loaded module.
pub struct Loaded {
    ptx: crum_ptx::Module,
    /// Module variables: name → (address, size).
    globals: HashMap<String, (u64, u64)>,
    /// Kernel handles handed out, in the module's order of kernels once enumerated.
    funcs: Mutex<HashMap<String, u64>>,
}

/// A kernel handle's target.
pub struct Func {
    pub module: u64,
    module_ref: Arc<Loaded>,
    pub name: CString,
    pub info: crum_ptx::KernelInfo,
    max_dynamic_shared: AtomicI32,
    carveout: AtomicI32,
}

/// The device's limits that launches are checked against (those of the emulated device).
pub struct Limits {
    pub max_threads: u32,
    pub max_block: [u32; 3],
    pub max_grid: [u32; 3],
    pub shared_per_block: u64,
    pub shared_optin: u64,
    pub sms: u64,
    pub blocks_per_sm: u64,
    pub threads_per_sm: u64,
}

impl Limits {
    pub fn of_emulated_device() -> Limits {
        let p = crum_proxy::emu::emu_props();
        Limits {
            max_threads: p.max_threads_per_block as u32,
            max_block: p.max_block.map(|d| d as u32),
            max_grid: p.max_grid.map(|d| d as u32),
            shared_per_block: p.shared_per_block,
            shared_optin: p.shared_per_block_optin,
            sms: p.multiprocessors as u64,
            blocks_per_sm: p.max_blocks_per_sm as u64,
            threads_per_sm: p.max_threads_per_sm as u64,
        }
    }
}

/// Loaded modules and kernel handles.
pub struct Modules {
    modules: Mutex<HashMap<u64, Arc<Loaded>>>,
    funcs: Mutex<HashMap<u64, Arc<Func>>>,
    next: Mutex<u64>,
    pool: Mutex<Option<crum_ptx::Pool>>,
    pub limits: Limits,
}

/// The PTX of a module image: fat binaries back to back (the real driver reads the first
/// only; a program built with `-rdc=true` comes as the device-link fat binary, machine code
/// only, followed by each object's, whose PTX is linked here as the emulated device does), or
/// NUL-terminated PTX text. A cubin holds machine code only: not for this device.
pub fn image_ptx(image: &[u8]) -> CuResult<Vec<String>> {
    if image.starts_with(b"\x7fELF") {
        eprintln!("crum emulated driver: a cubin holds no PTX; load PTX or a fat binary with PTX");
        return Err(NO_BINARY_FOR_GPU);
    }
    if image.starts_with(&0xBA55_ED50u32.to_le_bytes()) {
        return match crum_ptx::fatbin::program_ptx(image) {
            Ok(v) if !v.is_empty() => Ok(v.into_iter().map(|i| i.ptx).collect()),
            Ok(_) => Err(NO_BINARY_FOR_GPU),
            Err(e) => {
                eprintln!("crum emulated driver: no PTX in the fat binary: {e}");
                Err(NO_BINARY_FOR_GPU)
            }
        };
    }
    let end = image.iter().position(|&c| c == 0).unwrap_or(image.len());
    match std::str::from_utf8(&image[..end]) {
        Ok(t) if t.contains(".version") && t.contains(".target") => Ok(vec![t.to_string()]),
        _ => Err(INVALID_IMAGE),
    }
}

struct Mem<'a>(&'a Memory);

impl DeviceMemory for Mem<'_> {
    fn region(&self, addr: u64) -> Option<Region> {
        self.0.region(addr)
    }
    fn malloc(&self, size: u64) -> Option<u64> {
        self.0.heap_alloc(size)
    }
    fn free(&self, addr: u64) {
        self.0.heap_free(addr)
    }
}

/// `CU_FUNC_ATTRIBUTE_*`
pub mod attr {
    pub const MAX_THREADS_PER_BLOCK: u32 = 0;
    pub const SHARED_SIZE_BYTES: u32 = 1;
    pub const CONST_SIZE_BYTES: u32 = 2;
    pub const LOCAL_SIZE_BYTES: u32 = 3;
    pub const NUM_REGS: u32 = 4;
    pub const PTX_VERSION: u32 = 5;
    pub const BINARY_VERSION: u32 = 6;
    pub const CACHE_MODE_CA: u32 = 7;
    pub const MAX_DYNAMIC_SHARED_SIZE_BYTES: u32 = 8;
    pub const PREFERRED_SHARED_MEMORY_CARVEOUT: u32 = 9;
    /// The cluster attributes (10..=15), all 0 on an sm_80 device.
    pub const LAST: u32 = 15;
}

impl Modules {
    pub fn new() -> Modules {
        Modules {
            modules: Mutex::default(),
            funcs: Mutex::default(),
            next: Mutex::new(0x7000),
            pool: Mutex::new(None),
            limits: Limits::of_emulated_device(),
        }
    }

    fn handle(&self) -> u64 {
        let mut n = self.next.lock().unwrap();
        *n += 0x10;
        *n
    }

    /// `cuModuleLoadData`
    pub fn load(&self, image: &[u8], mem: &Memory) -> CuResult<u64> {
        let texts = image_ptx(image)?;
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let ptx = crum_ptx::Module::link(&refs).map_err(|e| {
            eprintln!("crum emulated driver: cannot parse the module's PTX: {e}");
            INVALID_PTX
        })?;
        let mut globals = HashMap::new();
        for g in ptx.globals() {
            let addr = match mem.global_alloc(g.size.max(1), g.align as u64) {
                Ok(a) => a,
                Err(e) => {
                    for &(a, _) in globals.values() {
                        mem.global_free(a);
                    }
                    return Err(e);
                }
            };
            // The initializer into the block just allocated (at least `size` bytes; arena
            // memory is zero).
            crate::mem::write(addr, &g.init[..g.init.len().min(g.size as usize)]);
            globals.insert(g.name.clone(), (addr, g.size));
        }
        let h = self.handle();
        self.modules.lock().unwrap().insert(h, Arc::new(Loaded { ptx, globals, funcs: Mutex::default() }));
        Ok(h)
    }

    /// `cuModuleUnload`: its variables are freed and its kernel handles invalid.
    pub fn unload(&self, h: u64, mem: &Memory) -> CuResult<()> {
        let m = self.modules.lock().unwrap().remove(&h).ok_or(INVALID_HANDLE)?;
        self.funcs.lock().unwrap().retain(|_, f| f.module != h);
        for &(a, _) in m.globals.values() {
            mem.global_free(a);
        }
        Ok(())
    }

    fn module(&self, h: u64) -> CuResult<Arc<Loaded>> {
        self.modules.lock().unwrap().get(&h).cloned().ok_or(INVALID_HANDLE)
    }

    /// `cuModuleGetFunction`
    pub fn function(&self, module: u64, name: &str) -> CuResult<u64> {
        let m = self.module(module)?;
        let info = m.ptx.kernel(name).ok_or(NOT_FOUND)?.clone();
        let mut by_name = m.funcs.lock().unwrap();
        if let Some(&f) = by_name.get(name) {
            return Ok(f);
        }
        let h = self.handle();
        let default_dyn = self.limits.shared_per_block.saturating_sub(info.static_shared_bytes) as i32;
        let f = Func {
            module,
            module_ref: m.clone(),
            name: CString::new(name).map_err(|_| NOT_FOUND)?,
            info,
            max_dynamic_shared: AtomicI32::new(default_dyn),
            carveout: AtomicI32::new(-1),
        };
        self.funcs.lock().unwrap().insert(h, Arc::new(f));
        by_name.insert(name.to_string(), h);
        Ok(h)
    }

    /// `cuModuleGetFunctionCount` / `cuModuleEnumerateFunctions`: every kernel, in the
    /// module's order.
    pub fn functions(&self, module: u64) -> CuResult<Vec<u64>> {
        let m = self.module(module)?;
        let names: Vec<String> = m.ptx.kernels().map(|k| k.name.clone()).collect();
        names.iter().map(|n| self.function(module, n)).collect()
    }

    /// A kernel handle's target.
    pub fn func(&self, h: u64) -> CuResult<Arc<Func>> {
        self.funcs.lock().unwrap().get(&h).cloned().ok_or(INVALID_HANDLE)
    }

    /// `cuModuleGetGlobal`: (address, size).
    pub fn global(&self, module: u64, name: &str) -> CuResult<(u64, u64)> {
        self.module(module)?.globals.get(name).copied().ok_or(NOT_FOUND)
    }

    /// `cuFuncGetAttribute`
    pub fn attribute(&self, f: &Func, a: u32) -> CuResult<i32> {
        let k = &f.info;
        let max_threads = k.max_threads_per_block.map_or(self.limits.max_threads, |t| t.min(self.limits.max_threads));
        let arch = f.module_ref.ptx.target_arch().unwrap_or(80) as i32;
        Ok(match a {
            attr::MAX_THREADS_PER_BLOCK => max_threads as i32,
            attr::SHARED_SIZE_BYTES => k.static_shared_bytes as i32,
            attr::CONST_SIZE_BYTES => 0,
            attr::LOCAL_SIZE_BYTES => k.local_bytes as i32,
            attr::NUM_REGS => k.num_regs as i32,
            attr::PTX_VERSION | attr::BINARY_VERSION => arch,
            attr::CACHE_MODE_CA => 0,
            attr::MAX_DYNAMIC_SHARED_SIZE_BYTES => f.max_dynamic_shared.load(Ordering::Relaxed),
            attr::PREFERRED_SHARED_MEMORY_CARVEOUT => f.carveout.load(Ordering::Relaxed),
            a if a <= attr::LAST => 0,
            _ => return Err(INVALID_VALUE),
        })
    }

    /// `cuFuncSetAttribute`: the maximum dynamic shared memory (up to the opt-in limit less the
    /// static shared memory) and the carveout (-1 or a percentage).
    pub fn set_attribute(&self, f: &Func, a: u32, v: i32) -> CuResult<()> {
        match a {
            attr::MAX_DYNAMIC_SHARED_SIZE_BYTES => {
                let limit = self.limits.shared_optin as i64 - f.info.static_shared_bytes as i64;
                if v < 0 || v as i64 > limit {
                    return Err(INVALID_VALUE);
                }
                f.max_dynamic_shared.store(v, Ordering::Relaxed);
            }
            attr::PREFERRED_SHARED_MEMORY_CARVEOUT => {
                if !(-1..=100).contains(&v) {
                    return Err(INVALID_VALUE);
                }
                f.carveout.store(v, Ordering::Relaxed);
            }
            _ => return Err(INVALID_VALUE),
        }
        Ok(())
    }

    /// Check a launch as the driver does before queuing it.
    pub fn check_launch(&self, f: &Func, cfg: &LaunchConfig) -> CuResult<()> {
        let l = &self.limits;
        let threads: u64 = cfg.block.iter().map(|&d| d as u64).product();
        let max_threads = f.info.max_threads_per_block.map_or(l.max_threads, |t| t.min(l.max_threads));
        if cfg.grid.iter().zip(l.max_grid).any(|(&d, m)| d == 0 || d > m)
            || cfg.block.iter().zip(l.max_block).any(|(&d, m)| d == 0 || d > m)
            || threads > max_threads as u64
            || cfg.dynamic_shared_bytes as i64 > f.max_dynamic_shared.load(Ordering::Relaxed) as i64
        {
            return Err(INVALID_VALUE);
        }
        if cfg.cooperative {
            let blocks: u64 = cfg.grid.iter().map(|&d| d as u64).product();
            let per_sm = l.blocks_per_sm.min(l.threads_per_sm / threads.max(1)).max(1);
            if blocks > l.sms * per_sm {
                return Err(COOPERATIVE_LAUNCH_TOO_LARGE);
            }
        }
        Ok(())
    }

    /// Run a launch (on a stream's thread): device printf to this process's stdout (the
    /// driver's), an error as the driver's code.
    pub fn run(&self, f: &Func, cfg: &LaunchConfig, params: &[u8], mem: &Memory) -> CuResult<()> {
        let m = &f.module_ref;
        let lookup = |n: &str| m.globals.get(n).map(|g| g.0);
        let name = f.name.to_str().unwrap_or_default();
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        let pool = pool.get_or_insert_with(crum_ptx::Pool::for_machine);
        let r = crum_ptx::launch(&m.ptx, name, cfg, params, &lookup, &Mem(mem), pool);
        match r {
            Ok(out) => {
                print_device(&out.printf);
                Ok(())
            }
            Err(e) => {
                print_device(e.printf());
                if std::env::var_os("CRUM_EMU_LIBCUDA_LOG").is_some() {
                    eprintln!("crum emulated driver: kernel {name} failed: {e}");
                }
                Err(from_launch(&e))
            }
        }
    }
}

/// Device printf goes to the standard output of the process that owns the context, as the
/// driver's does.
fn print_device(text: &[u8]) {
    use std::io::Write;
    if !text.is_empty() {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text);
        let _ = out.flush();
    }
}
