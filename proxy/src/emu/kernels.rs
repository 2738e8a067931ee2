//! Modules and kernels on the emulated device: PTX from the fat binary, parsed once by
//! `crum-ptx`; module-scope variables allocated in device memory with their initializers;
//! launches validated like the CUDA runtime does and run by the interpreter.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

use crum_ptx::{DeviceMemory, LaunchConfig, Region};
use crum_wire::{cuda, AllocKind, DeviceProps, FuncInfo, TexDesc};

use super::memory::Vram;
use super::stream::{Desc, Ran};
use super::Shared;
use crum_wire::ckpt::QueuedOp;
use crate::backend::{Allocation, BackendError, LaunchDims, Result};

struct Loaded {
    module: crum_ptx::Module,
    /// name → (device address, size)
    symbols: Mutex<HashMap<String, (u64, u64)>>,
}

pub struct Func {
    module: Arc<Loaded>,
    name: String,
    info: FuncInfo,
    max_dynamic_shared: AtomicI32,
    /// Its global-memory accesses (analysed the first time a checkpoint asks).
    accesses: std::sync::OnceLock<Option<crum_ptx::analysis::Accesses>>,
}

/// A validated launch, ready to run on a stream.
pub struct Job {
    func: Arc<Func>,
    cfg: LaunchConfig,
    params: Vec<u8>,
}

/// Loaded modules and their kernels.
pub struct Kernels {
    modules: Mutex<HashMap<u64, Arc<Loaded>>>,
    funcs: Mutex<HashMap<u64, Arc<Func>>>,
    by_name: Mutex<HashMap<(u64, String), u64>>,
    globals: Mutex<HashSet<u64>>,
    pool: Mutex<Option<crum_ptx::Pool>>,
}

fn err(code: u32) -> BackendError {
    BackendError::Cuda(code)
}

/// `cudaFuncAttributeMaxDynamicSharedMemorySize`.
const ATTR_MAX_DYNAMIC_SHARED: u32 = 8;
/// `cudaFuncAttributePreferredSharedMemoryCarveout`.
const ATTR_CARVEOUT: u32 = 9;

impl Default for Kernels {
    fn default() -> Self {
        Kernels::new()
    }
}

impl Kernels {
    pub fn new() -> Kernels {
        Kernels {
            modules: Mutex::default(),
            funcs: Mutex::default(),
            by_name: Mutex::default(),
            globals: Mutex::default(),
            pool: Mutex::new(None),
        }
    }

    /// The names of module `id`'s kernels.
    pub fn kernel_names(&self, id: u64) -> Result<Vec<String>> {
        let m = self.modules.lock().unwrap().get(&id).cloned().ok_or(err(cuda::ERROR_INVALID_RESOURCE_HANDLE))?;
        Ok(m.module.kernels().map(|k| k.name.clone()).collect())
    }

    /// Load a module as handle `id`. `placement` (a restart) puts named module variables at
    /// their checkpointed addresses and kinds instead of the first free ones.
    pub fn load(
        &self,
        id: u64,
        image: &[u8],
        vram: &Vram,
        placement: Option<&HashMap<String, (u64, AllocKind)>>,
    ) -> Result<()> {
        // One PTX per fat binary of the image: one for a plain module; one per object for a
        // program built with `-rdc=true` (the interposer appends every object's relocatable
        // fat binary), linked into one module here.
        // A module the program loads itself (`cudaLibraryLoadData`) may be PTX text; a cubin
        // (ELF) holds only machine code for a GPU.
        if image.starts_with(b"\x7fELF") {
            tracing::error!("a cubin (ELF) holds no PTX: the emulated device runs PTX; load PTX or a fat binary with PTX");
            return Err(err(cuda::ERROR_NO_KERNEL_IMAGE));
        }
        let text_ptx = (!image.starts_with(&0xBA55ED50u32.to_le_bytes()))
            .then(|| {
                let end = image.iter().position(|&c| c == 0).unwrap_or(image.len());
                std::str::from_utf8(&image[..end]).ok().filter(|t| t.contains(".version") && t.contains(".target"))
            })
            .flatten();
        let images = match text_ptx {
            Some(t) => vec![crum_ptx::fatbin::PtxImage { arch: 0, ptx: t.to_string() }],
            None => crum_ptx::fatbin::program_ptx(image).map_err(|e| {
                tracing::error!("cannot load the program's kernels: {e}");
                err(cuda::ERROR_NO_KERNEL_IMAGE)
            })?,
        };
        if images.is_empty() {
            tracing::error!("the program carries no PTX; rebuild with PTX, e.g. -arch=sm_80");
            return Err(err(cuda::ERROR_NO_KERNEL_IMAGE));
        }
        let texts: Vec<&str> = images.iter().map(|i| i.ptx.as_str()).collect();
        let module = crum_ptx::Module::link(&texts).map_err(|e| {
            tracing::error!("cannot parse the program's PTX: {e}");
            err(cuda::ERROR_INVALID_PTX)
        })?;
        if !module.unresolved().is_empty() {
            tracing::warn!(
                symbols = ?module.unresolved(),
                "no PTX module of the program defines these; kernels that use them cannot run"
            );
        }
        let mut symbols = HashMap::new();
        for g in module.globals() {
            let (addr, _) = match placement.and_then(|p| p.get(&g.name)) {
                Some(&(at, kind)) => vram.alloc_at(at, g.size.max(1), kind).map_err(|e| {
                    tracing::error!(symbol = %g.name, "cannot place the module variable at {at:#x} again");
                    err(e)
                })?,
                None => vram.alloc(g.size.max(1), AllocKind::Device).map_err(err)?,
            };
            // SAFETY: `addr` is a fresh allocation of at least `g.size` bytes, mapped RW here;
            // `init.len() == size` per the crum-ptx contract (checked by `min`).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    g.init.as_ptr(),
                    addr as *mut u8,
                    g.init.len().min(g.size as usize),
                )
            };
            self.globals.lock().unwrap().insert(addr);
            symbols.insert(g.name.clone(), (addr, g.size));
        }
        self.modules.lock().unwrap().insert(
            id,
            Arc::new(Loaded {
                module,
                symbols: Mutex::new(symbols),
            }),
        );
        Ok(())
    }

    pub fn unload(&self, id: u64, vram: &Vram) -> Result<()> {
        let m = self
            .modules
            .lock()
            .unwrap()
            .remove(&id)
            .ok_or(err(cuda::ERROR_INVALID_RESOURCE_HANDLE))?;
        self.funcs
            .lock()
            .unwrap()
            .retain(|_, f| !Arc::ptr_eq(&f.module, &m));
        self.by_name
            .lock()
            .unwrap()
            .retain(|(mid, _), _| *mid != id);
        for &(addr, _) in m.symbols.lock().unwrap().values() {
            self.globals.lock().unwrap().remove(&addr);
            let _ = vram.free(addr);
        }
        Ok(())
    }

    /// Every module variable: (address, module, name).
    pub fn globals_named(&self) -> Vec<(u64, u64, String)> {
        let mods = self.modules.lock().unwrap();
        let mut v = Vec::new();
        for (&id, m) in mods.iter() {
            for (name, &(addr, _)) in m.symbols.lock().unwrap().iter() {
                v.push((addr, id, name.clone()));
            }
        }
        v
    }

    pub fn is_global(&self, addr: u64) -> bool {
        self.globals.lock().unwrap().contains(&addr)
    }

    fn module(&self, id: u64) -> Result<Arc<Loaded>> {
        self.modules
            .lock()
            .unwrap()
            .get(&id)
            .cloned()
            .ok_or(err(cuda::ERROR_INVALID_RESOURCE_HANDLE))
    }

    pub fn function(
        &self,
        module: u64,
        name: &str,
        new_handle: impl FnOnce() -> u64,
        props: &DeviceProps,
    ) -> Result<FuncInfo> {
        if let Some(h) = self
            .by_name
            .lock()
            .unwrap()
            .get(&(module, name.to_string()))
        {
            if let Some(f) = self.funcs.lock().unwrap().get(h) {
                let mut info = f.info.clone();
                info.max_dynamic_shared = f.max_dynamic_shared.load(Ordering::Relaxed);
                return Ok(info);
            }
        }
        let m = self.module(module)?;
        let k = m
            .module
            .kernel(name)
            .ok_or(err(cuda::ERROR_INVALID_DEVICE_FUNCTION))?;
        let handle = new_handle();
        let max_threads = k
            .max_threads_per_block
            .map_or(props.max_threads_per_block, |t| {
                (t as i32).min(props.max_threads_per_block)
            });
        let default_dyn =
            (props.shared_per_block as i64 - k.static_shared_bytes as i64).max(0) as i32;
        let info = FuncInfo {
            handle,
            params: k.params.iter().map(|p| (p.offset, p.size)).collect(),
            param_bytes: k.param_bytes,
            shared_bytes: k.static_shared_bytes,
            local_bytes: k.local_bytes,
            const_bytes: 0,
            max_threads_per_block: max_threads,
            num_regs: k.num_regs as i32,
            ptx_version: 80,
            binary_version: 80,
            max_dynamic_shared: default_dyn,
        };
        let f = Func {
            accesses: std::sync::OnceLock::new(),
            module: m,
            name: name.to_string(),
            info: info.clone(),
            max_dynamic_shared: AtomicI32::new(default_dyn),
        };
        self.funcs.lock().unwrap().insert(handle, Arc::new(f));
        self.by_name
            .lock()
            .unwrap()
            .insert((module, name.to_string()), handle);
        Ok(info)
    }

    pub fn symbol(&self, module: u64, name: &str) -> Result<(u64, u64)> {
        let m = self.module(module)?;
        let s = m.symbols.lock().unwrap();
        s.get(name).copied().ok_or(err(cuda::ERROR_INVALID_SYMBOL))
    }

    /// Re-home a module variable in managed memory, keeping its current contents.
    pub fn make_managed(&self, module: u64, name: &str, vram: &Vram) -> Result<Allocation> {
        let m = self.module(module)?;
        // Only a variable declared managed (`__managed__`, `.attribute(.managed)`) is one.
        if !m.module.globals().iter().any(|g| g.name == name && g.managed) {
            return Err(err(cuda::ERROR_INVALID_SYMBOL));
        }
        let mut s = m.symbols.lock().unwrap();
        let (old, size) = *s.get(name).ok_or(err(cuda::ERROR_INVALID_SYMBOL))?;
        if vram
            .lookup(old)
            .is_some_and(|r| r.kind == AllocKind::Managed)
        {
            return Err(err(cuda::ERROR_INVALID_VALUE));
        }
        let (addr, memfd) = vram.alloc(size.max(1), AllocKind::Managed).map_err(err)?;
        // SAFETY: both are live allocations of at least `size` bytes mapped here; distinct.
        unsafe { std::ptr::copy_nonoverlapping(old as *const u8, addr as *mut u8, size as usize) };
        let mut g = self.globals.lock().unwrap();
        g.remove(&old);
        g.insert(addr);
        let _ = vram.free(old);
        s.insert(name.to_string(), (addr, size));
        Ok(Allocation { addr, memfd })
    }

    pub fn set_attribute(
        &self,
        func: u64,
        attr: u32,
        value: i32,
        props: &DeviceProps,
    ) -> Result<()> {
        let f = self
            .funcs
            .lock()
            .unwrap()
            .get(&func)
            .cloned()
            .ok_or(err(cuda::ERROR_INVALID_DEVICE_FUNCTION))?;
        match attr {
            ATTR_MAX_DYNAMIC_SHARED => {
                let limit = props.shared_per_block_optin as i64 - f.info.shared_bytes as i64;
                if value < 0 || value as i64 > limit {
                    return Err(err(cuda::ERROR_INVALID_VALUE));
                }
                f.max_dynamic_shared.store(value, Ordering::Relaxed);
                Ok(())
            }
            ATTR_CARVEOUT => Ok(()),
            _ => Err(err(cuda::ERROR_INVALID_VALUE)),
        }
    }

    /// Validate a launch as the runtime does before anything is queued.
    pub fn prepare(
        &self,
        func: u64,
        dims: LaunchDims,
        params: Vec<u8>,
        props: &DeviceProps,
    ) -> Result<Job> {
        let f = self
            .funcs
            .lock()
            .unwrap()
            .get(&func)
            .cloned()
            .ok_or(err(cuda::ERROR_INVALID_DEVICE_FUNCTION))?;
        let threads = dims.block.iter().map(|&d| d as u64).product::<u64>();
        let bad_block = dims
            .block
            .iter()
            .zip(props.max_block)
            .any(|(&d, m)| d == 0 || d as i64 > m as i64);
        let bad_grid = dims
            .grid
            .iter()
            .zip(props.max_grid)
            .any(|(&d, m)| d == 0 || d as i64 > m as i64);
        if bad_block || bad_grid || threads > f.info.max_threads_per_block as u64 {
            // As CUDA 13's runtime answers (the interposer checks first, `api::launch`).
            return Err(err(cuda::ERROR_INVALID_VALUE));
        }
        if dims.shared as i64 > f.max_dynamic_shared.load(Ordering::Relaxed) as i64 {
            return Err(err(cuda::ERROR_INVALID_VALUE));
        }
        if params.len() != f.info.param_bytes as usize {
            return Err(err(cuda::ERROR_INVALID_VALUE));
        }
        let cfg = LaunchConfig {
            grid: dims.grid,
            block: dims.block,
            dynamic_shared_bytes: dims.shared,
            cooperative: dims.cooperative,
        };
        Ok(Job {
            func: f,
            cfg,
            params,
        })
    }

    fn with_pool<R>(&self, f: impl FnOnce(&crum_ptx::Pool) -> R) -> R {
        // Launches are serialized: the interpreter already uses every core for one grid.
        let mut g = self.pool.lock().unwrap();
        f(g.get_or_insert_with(crum_ptx::Pool::for_machine))
    }
}

/// The device memory as the interpreter sees it.
struct Mem<'a> {
    shared: &'a Shared,
    textures: &'a HashMap<u64, TexDesc>,
}

impl DeviceMemory for Mem<'_> {
    fn region(&self, addr: u64) -> Option<Region> {
        let (base, len, read_only) = self.shared.vram.kernel_range(addr)?;
        Some(Region {
            base,
            len,
            host: base as *mut u8,
            read_only,
        })
    }

    fn texture(&self, handle: u64) -> Option<crum_ptx::TextureDesc> {
        self.textures.get(&handle).map(super::kernels::texture_desc)
    }

    /// Surface objects share the texture table: both describe an array's memory (base,
    /// extent, pitch, channel format); `suld`/`sust` ignore the sampling fields.
    fn surface(&self, handle: u64) -> Option<crum_ptx::TextureDesc> {
        self.textures.get(&handle).map(super::kernels::texture_desc)
    }

    fn malloc(&self, size: u64) -> Option<u64> {
        self.shared.heap.malloc(&self.shared.vram, size)
    }

    fn free(&self, addr: u64) {
        self.shared.heap.free(&self.shared.vram, addr)
    }
}

/// Wire texture description → the interpreter's.
pub(crate) fn texture_desc(d: &TexDesc) -> crum_ptx::TextureDesc {
    let mut t = crum_ptx::TextureDesc::from_parts(
        d.base,
        d.width,
        d.height,
        d.depth,
        d.pitch,
        d.bits,
        d.format_kind,
        d.address_mode,
        d.filter_mode,
        d.read_mode,
        d.normalized,
    );
    t.mip = d.mip.as_ref().map(|m| crum_ptx::Mipmap {
        levels: m
            .levels
            .iter()
            .map(|l| crum_ptx::MipLevel { base: l.base, width: l.width, height: l.height, depth: l.depth, pitch: l.pitch })
            .collect(),
        linear: m.filter_mode == 1,
        bias: f32::from_bits(m.bias),
        min_clamp: f32::from_bits(m.min_clamp),
        max_clamp: f32::from_bits(m.max_clamp),
    });
    t
}

impl Job {
    /// The saved form of this launch from block `first_block` on, with blocks saved in the
    /// middle.
    pub fn desc(&self, first_block: u64, contexts: &[crum_ptx::BlockContext]) -> QueuedOp {
        QueuedOp::Launch {
            func: self.func.info.handle,
            grid: self.cfg.grid,
            block: self.cfg.block,
            shared: self.cfg.dynamic_shared_bytes,
            cooperative: self.cfg.cooperative,
            params: self.params.clone(),
            first_block,
            contexts: contexts.iter().map(|c| c.encode()).collect(),
        }
    }
}

/// The launch running now, as a checkpoint's cut sees it.
pub struct RunningLaunch {
    pub ctl: crum_ptx::LaunchCtl,
    pub name: String,
    pub started: std::time::Instant,
    pub first_block: u64,
    pub total_blocks: u64,
    pub grid_sync: bool,
    func: Arc<Func>,
    params: Vec<u8>,
    syms: HashMap<String, (u64, u64)>,
}

impl RunningLaunch {
    /// Whether running it again from `first_block` is safe (the idempotence analysis of its
    /// kernel with its pointer arguments mapped to allocations), or why not.
    pub fn idempotence(&self, shared: &Shared) -> std::result::Result<(), String> {
        let m = &self.func.module.module;
        let acc = self
            .func
            .accesses
            .get_or_init(|| m.kernel_accesses(&self.func.name))
            .as_ref()
            .ok_or("kernel not found")?;
        let info = m.kernel(&self.func.name).ok_or("kernel not found")?;
        crum_ptx::analysis::idempotent_launch(
            acc,
            info,
            &self.params,
            &|a| shared.vram.lookup(a).map(|r| r.base),
            &|n| self.syms.get(n).map(|s| s.0),
        )
    }
}

/// Launches run one at a time (the interpreter uses every core for one grid): the one running
/// and whether a cut is on (a launch that starts during a cut stops before its first block).
#[derive(Default)]
pub struct Running {
    pub cutting: bool,
    pub current: Option<Arc<RunningLaunch>>,
}

/// Run a prepared launch from block `first_block` on (on a stream worker), under the control
/// of a checkpoint's cut ([`Running`]): stopped at a block boundary or flushed, it returns the
/// rest of the grid (or all of it again, from `first_block`) as resumable work.
pub fn run(
    shared: Arc<Shared>,
    job: Job,
    textures: Arc<HashMap<u64, TexDesc>>,
    first_block: u64,
    contexts: Vec<crum_ptx::BlockContext>,
) -> Ran {
    let mem = Mem { shared: &shared, textures: &textures };
    let syms = job.func.module.symbols.lock().unwrap().clone();
    let lookup = |name: &str| syms.get(name).map(|s| s.0);
    let total = job.cfg.grid.iter().map(|&d| d as u64).product::<u64>();
    let r = shared.kernels.with_pool(|pool| {
        let me = {
            let mut run = shared.running.lock().unwrap();
            let m = &job.func.module.module;
            let me = Arc::new(RunningLaunch {
                ctl: crum_ptx::LaunchCtl::default(),
                name: job.func.name.clone(),
                started: std::time::Instant::now(),
                first_block,
                total_blocks: total,
                grid_sync: m.kernel(&job.func.name).is_some_and(|k| k.uses_grid_sync),
                func: job.func.clone(),
                params: job.params.clone(),
                syms: syms.clone(),
            });
            if run.cutting {
                me.ctl.mode.store(crum_ptx::LaunchCtl::STOP, Ordering::SeqCst);
            }
            run.current = Some(me.clone());
            me
        };
        let r = crum_ptx::launch_resume(
            &job.func.module.module,
            &job.func.name,
            &job.cfg,
            &job.params,
            &lookup,
            &mem,
            pool,
            first_block,
            Some(&me.ctl),
            contexts.clone(),
        );
        shared.running.lock().unwrap().current = None;
        r
    });
    let again = |job: Job, at: u64, saved: Vec<crum_ptx::BlockContext>| {
        let desc = Desc::op(job.desc(at, &saved));
        let (sh, tx) = (shared.clone(), textures.clone());
        Ran::Stopped { rest: Box::new(move || run(sh, job, tx, at, saved)), desc }
    };
    Ran::Done(match r {
        Ok(out) => {
            shared.append_printf(&out.printf);
            if let Some(at) = out.stopped_at {
                return again(job, at, out.contexts);
            }
            Ok(())
        }
        // Flushed: its printf output is dropped (the run again prints it once).
        Err(e) if *e.kind() == crum_ptx::LaunchError::Flushed => return again(job, first_block, contexts),
        Err(e) => {
            shared.append_printf(e.printf());
            if let crum_ptx::LaunchError::IllegalAddress { addr } = e.kind() {
                let strict = if shared.vram.strict() { " (--strict-memory)" } else { "" };
                tracing::warn!(
                    kernel = %job.func.name,
                    "illegal address{strict}: {}",
                    shared.vram.describe(*addr)
                );
            }
            tracing::debug!(kernel = %job.func.name, "kernel failed: {e}");
            Err(e.cuda_error())
        }
    })
}
