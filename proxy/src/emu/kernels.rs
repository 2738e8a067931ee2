//! Modules and kernels on the emulated device — waiting for the `crum-ptx` engine API; until
//! it lands, module loading reports `Unsupported` (the full version is kernels.rs.pending).

use std::collections::HashMap;

use crum_wire::{DeviceProps, FuncInfo, TexDesc};

use super::memory::Vram;
use super::Shared;
use crate::backend::{Allocation, BackendError, LaunchDims, Result};

fn unsupported<T>() -> Result<T> {
    Err(BackendError::Unsupported { backend: "emu", op: "kernels (PTX engine not built yet)" })
}

pub struct Job;

pub struct Kernels;

impl Kernels {
    pub fn new() -> Kernels {
        Kernels
    }
    pub fn load(&self, _id: u64, _image: &[u8], _vram: &Vram) -> Result<()> {
        unsupported()
    }
    pub fn unload(&self, _id: u64, _vram: &Vram) -> Result<()> {
        unsupported()
    }
    pub fn is_global(&self, _addr: u64) -> bool {
        false
    }
    pub fn function(&self, _m: u64, _n: &str, _h: impl FnOnce() -> u64, _p: &DeviceProps) -> Result<FuncInfo> {
        unsupported()
    }
    pub fn symbol(&self, _m: u64, _n: &str) -> Result<(u64, u64)> {
        unsupported()
    }
    pub fn make_managed(&self, _m: u64, _n: &str, _v: &Vram) -> Result<Allocation> {
        unsupported()
    }
    pub fn set_attribute(&self, _f: u64, _a: u32, _v: i32, _p: &DeviceProps) -> Result<()> {
        unsupported()
    }
    pub fn prepare(&self, _f: u64, _d: LaunchDims, _p: Vec<u8>, _pr: &DeviceProps) -> Result<Job> {
        unsupported()
    }
}

pub fn run(_shared: &Shared, _job: Job, _t: &HashMap<u64, TexDesc>) -> std::result::Result<(), u32> {
    Err(crum_wire::cuda::ERROR_NOT_SUPPORTED)
}
