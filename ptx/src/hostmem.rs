//! [`HostMemory`]: a simple [`DeviceMemory`] backed by heap buffers, for tests, benchmarks
//! and tools that run kernels without the proxy.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::api::{DeviceMemory, Region, TextureDesc};

/// Device memory made of heap allocations at made-up device addresses.
#[derive(Debug, Default)]
pub struct HostMemory {
    allocs: Vec<(u64, u64, Box<[AtomicU64]>)>,
    next: u64,
    textures: HashMap<u64, TextureDesc>,
    surfaces: HashMap<u64, TextureDesc>,
    /// Device heap for kernel `malloc`: (base, size, next free offset); bump allocation.
    heap: Option<(u64, u64, Mutex<u64>)>,
}

impl HostMemory {
    pub fn new() -> HostMemory {
        HostMemory { allocs: Vec::new(), next: 0x7000_0000_0000, textures: HashMap::new(), surfaces: HashMap::new(), heap: None }
    }

    /// Allocate `len` zeroed bytes; returns the device address (256-byte aligned, with an
    /// unmapped gap after each allocation so overruns fault).
    pub fn alloc(&mut self, len: u64) -> u64 {
        let base = self.next;
        let words = len.div_ceil(8).max(1);
        let buf: Box<[AtomicU64]> = (0..words).map(|_| AtomicU64::new(0)).collect();
        self.allocs.push((base, len.max(1), buf));
        self.next = base + (words * 8).div_ceil(256) * 256 + 4096;
        base
    }

    /// Allocate and fill.
    pub fn alloc_bytes(&mut self, data: &[u8]) -> u64 {
        let a = self.alloc(data.len() as u64);
        self.write(a, data);
        a
    }

    fn find(&self, addr: u64) -> Option<&(u64, u64, Box<[AtomicU64]>)> {
        self.allocs.iter().find(|(b, l, _)| addr >= *b && addr < b + l)
    }

    /// Copy bytes in. Panics if the range is not inside one allocation (test helper).
    pub fn write(&self, addr: u64, data: &[u8]) {
        let (b, l, buf) = self.find(addr).expect("write to unallocated memory");
        assert!(addr - b + data.len() as u64 <= *l, "write past the allocation");
        for (k, &byte) in data.iter().enumerate() {
            let o = (addr - b) as usize + k;
            let w = &buf[o / 8];
            let sh = (o % 8) * 8;
            let v = w.load(Ordering::Relaxed);
            w.store((v & !(0xff << sh)) | ((byte as u64) << sh), Ordering::Relaxed);
        }
    }

    /// Copy bytes out.
    pub fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        let (b, l, buf) = self.find(addr).expect("read of unallocated memory");
        assert!(addr - b + len as u64 <= *l, "read past the allocation");
        (0..len)
            .map(|k| {
                let o = (addr - b) as usize + k;
                (buf[o / 8].load(Ordering::Relaxed) >> ((o % 8) * 8)) as u8
            })
            .collect()
    }

    /// Register a texture object under `handle`.
    pub fn add_texture(&mut self, handle: u64, desc: TextureDesc) {
        self.textures.insert(handle, desc);
    }

    /// Give kernels a device heap of `size` bytes for `malloc` (bump allocation; `free`
    /// does not reuse memory).
    pub fn enable_device_heap(&mut self, size: u64) {
        let base = self.alloc(size);
        self.heap = Some((base, size, Mutex::new(0)));
    }

    /// Register a surface object under `handle`.
    pub fn add_surface(&mut self, handle: u64, desc: TextureDesc) {
        self.surfaces.insert(handle, desc);
    }
}

impl DeviceMemory for HostMemory {
    fn region(&self, addr: u64) -> Option<Region> {
        self.find(addr).map(|(b, l, buf)| Region { base: *b, len: *l, host: buf.as_ptr() as *mut u8, read_only: false })
    }
    fn texture(&self, handle: u64) -> Option<TextureDesc> {
        self.textures.get(&handle).cloned()
    }
    fn surface(&self, handle: u64) -> Option<TextureDesc> {
        self.surfaces.get(&handle).cloned()
    }
    fn malloc(&self, size: u64) -> Option<u64> {
        let (base, len, next) = self.heap.as_ref()?;
        let mut n = next.lock().unwrap_or_else(|e| e.into_inner());
        let off = n.div_ceil(16) * 16;
        if off.checked_add(size)? > *len {
            return None;
        }
        *n = off + size;
        Some(base + off)
    }
}
