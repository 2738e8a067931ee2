//! Driver contexts (issue 13): the primary context, and contexts a program creates
//! (`cuCtxCreate`), each thread with its own stack of current contexts (`cuCtxPushCurrent`,
//! `cuCtxPopCurrent`, `cuCtxSetCurrent`).
//!
//! The emulated device is one device with one address space (unified addressing), so every
//! context shares the proxy's device: a pointer allocated in one context may be used from
//! another, as on one GPU with unified addressing. What a created context owns is kept by
//! context: the modules loaded, the memory allocated (`cuMemAlloc*`, `cuMemAllocHost`,
//! `cuMemHostAlloc`), the streams and events created through the driver face while it was
//! current (the runtime's own calls belong to the primary context, as in CUDA); `cuCtxDestroy`
//! synchronizes the device and frees all of it. A kernel is launched only in the context its
//! module was loaded in (otherwise `CUDA_ERROR_INVALID_HANDLE`). `cuCtxSynchronize`
//! synchronizes the whole device (a superset of the context's work).
//!
//! The tables are the program's memory: a checkpoint saves them with it, and the objects they
//! name come back at their handles and addresses (`docs/driver-api.md` § 5).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crum_wire::cuda;

use crate::errors::CudaResult;

/// The primary context's handle (a value, never dereferenced).
pub(crate) const PRIMARY: usize = 0xc0de_c700;
/// Handles of created contexts: from here, 0x100 apart.
static NEXT: AtomicUsize = AtomicUsize::new(0xc0de_c800);

/// What a created context owns.
#[derive(Default)]
pub(crate) struct Owned {
    pub flags: u32,
    pub id: u64,
    pub modules: Vec<usize>,
    pub device: Vec<u64>,
    pub host: Vec<u64>,
    pub streams: Vec<u64>,
    pub events: Vec<u64>,
}

#[derive(Default)]
struct Contexts {
    created: BTreeMap<usize, Owned>,
    /// Module → the context it was loaded in.
    module_ctx: HashMap<usize, usize>,
    /// Kernel handle → the context of its module.
    func_ctx: HashMap<usize, usize>,
}

static CONTEXTS: Mutex<Option<Contexts>> = Mutex::new(None);

fn contexts() -> MutexGuard<'static, Option<Contexts>> {
    CONTEXTS.lock().unwrap_or_else(|p| p.into_inner())
}

fn with<R>(f: impl FnOnce(&mut Contexts) -> R) -> R {
    f(contexts().get_or_insert_with(Contexts::default))
}

thread_local! {
    /// This thread's context stack; its top is current.
    static STACK: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Whether `ctx` is a live context.
pub(crate) fn valid(ctx: usize) -> bool {
    ctx == PRIMARY || with(|c| c.created.contains_key(&ctx))
}

/// `ctx` as a live context, or `CUDA_ERROR_INVALID_CONTEXT`.
pub(crate) fn check(ctx: usize) -> CudaResult<()> {
    if valid(ctx) {
        Ok(())
    } else {
        Err(cuda::ERROR_DEVICE_UNINITIALIZED)
    }
}

/// This thread's current context: the top of its stack, else the primary context once the
/// runtime has used it (the runtime's implicit context is the primary one), else none (0).
pub(crate) fn current() -> usize {
    STACK.with(|s| s.borrow().last().copied()).unwrap_or(if crate::client::connected() { PRIMARY } else { 0 })
}

pub(crate) fn push(ctx: usize) {
    STACK.with(|s| s.borrow_mut().push(ctx));
}

pub(crate) fn pop() -> Option<usize> {
    STACK.with(|s| s.borrow_mut().pop())
}

/// `cuCtxSetCurrent`: the top of the stack replaced (0: popped).
pub(crate) fn set_current(ctx: usize) {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        s.pop();
        if ctx != 0 {
            s.push(ctx);
        }
    });
}

/// `ctx` off this thread's stack (the primary context "destroyed": it is only released).
pub(crate) fn leave(ctx: usize) {
    STACK.with(|s| s.borrow_mut().retain(|&x| x != ctx));
}

/// A new context, current to this thread.
pub(crate) fn create(flags: u32) -> usize {
    let h = NEXT.fetch_add(0x100, Ordering::Relaxed);
    with(|c| c.created.insert(h, Owned { flags, id: (h as u64 - PRIMARY as u64) >> 8, ..Default::default() }));
    push(h);
    h
}

/// The flags a context was created with (the primary context: 0).
pub(crate) fn flags(ctx: usize) -> u32 {
    with(|c| c.created.get(&ctx).map_or(0, |o| o.flags))
}

/// A context's unique id (`cuCtxGetId`): the primary context's is 1... created ones count on.
pub(crate) fn id(ctx: usize) -> u64 {
    with(|c| c.created.get(&ctx).map_or(1, |o| o.id + 1))
}

/// Records `f`'s change in what the current context owns (nothing for the primary context,
/// whose objects live as long as the program).
pub(crate) fn own(f: impl FnOnce(&mut Owned)) {
    let ctx = current();
    with(|c| {
        if let Some(o) = c.created.get_mut(&ctx) {
            f(o)
        }
    })
}

/// Forgets `x` in every created context's list that `pick` chooses (a freed object).
pub(crate) fn disown(pick: impl Fn(&mut Owned) -> &mut Vec<u64>, x: u64) {
    with(|c| {
        for o in c.created.values_mut() {
            pick(o).retain(|&y| y != x);
        }
    })
}

/// The context that allocated the memory at `base` (`cuMemAlloc*`, `cuMemAllocHost`,
/// `cuMemHostAlloc` in a created context), else the primary context (the runtime's memory,
/// registered memory, pools, VMM mappings).
pub(crate) fn owner_of(base: u64) -> usize {
    with(|c| c.created.iter().find(|(_, o)| o.device.contains(&base) || o.host.contains(&base)).map_or(PRIMARY, |(&h, _)| h))
}

/// A module loaded in the current context.
pub(crate) fn module_loaded(module: usize) {
    let ctx = current();
    with(|c| {
        c.module_ctx.insert(module, ctx);
        if let Some(o) = c.created.get_mut(&ctx) {
            o.modules.push(module);
        }
    });
}

/// A kernel handle of `module`'s.
pub(crate) fn function_of(f: usize, module: usize) {
    with(|c| {
        let ctx = c.module_ctx.get(&module).copied().unwrap_or(PRIMARY);
        c.func_ctx.insert(f, ctx);
    });
}

/// Kernels are launched in their module's context only.
pub(crate) fn check_launch(f: usize) -> CudaResult<()> {
    let cur = current();
    match with(|c| c.func_ctx.get(&f).copied()) {
        Some(ctx) if ctx != cur && !(ctx == PRIMARY && cur == 0) => Err(cuda::ERROR_INVALID_RESOURCE_HANDLE),
        _ => Ok(()),
    }
}

/// `cuCtxDestroy` of a created context: the device drained, then everything it owns freed,
/// and it leaves this thread's stack.
pub(crate) fn destroy(ctx: usize) -> CudaResult<()> {
    let Some(owned) = with(|c| c.created.remove(&ctx)) else {
        return Err(cuda::ERROR_DEVICE_UNINITIALIZED);
    };
    leave(ctx);
    let rt = |code: u32| if code == 0 { Ok(()) } else { Err(code) };
    rt(super::device::cudaDeviceSynchronize())?;
    for s in owned.streams {
        rt(super::stream::cudaStreamDestroy(s as *mut c_void))?;
    }
    for e in owned.events {
        rt(super::stream::cudaEventDestroy(e as *mut c_void))?;
    }
    for m in &owned.modules {
        // Unloaded already by the program: nothing left to do.
        let _ = super::library::unload(*m as *mut c_void);
    }
    with(|c| {
        c.module_ctx.retain(|_, x| *x != ctx);
        c.func_ctx.retain(|_, x| *x != ctx);
    });
    for p in owned.device {
        rt(super::memory::cudaFree(p as *mut c_void))?;
    }
    for p in owned.host {
        rt(super::memory::cudaFreeHost(p as *mut c_void))?;
    }
    Ok(())
}
