//! Mipmapped arrays (`cudaMallocMipmappedArray`, `cudaGetMipmappedArrayLevel`,
//! `cudaFreeMipmappedArray`): one device allocation holding every level one after the other,
//! each level an ordinary array record of `api::array` (a pitched 1-D, 2-D, 3-D, layered or
//! cube-map array of half the extent of the level before, at least 1), so copies to and from
//! a level and textures over it work as for any array. The records live in this process and
//! the allocation is device memory: a checkpoint saves both, and a restart finds the levels
//! at the same handles and addresses. Texture objects over a mipmapped array
//! (`cudaResourceTypeMipmappedArray`) give the proxy every level ([`texture_levels`]).
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use crum_wire::{cuda, Request, TexLevel};

use super::array::{layout, register, unregister, ArrayRec, Extent};
use super::device::ChannelFormatDesc;
use crate::client::call;
use crate::errors::CudaResult;
use crate::ffi::*;
use crate::state::*;

/// `cudaArrayLayered`, `cudaArrayCubemap`.
const ARRAY_LAYERED: u32 = 0x01;
const ARRAY_CUBEMAP: u32 = 0x04;

/// One mipmapped array: its allocation and its levels' array handles (level 0 first).
#[derive(Debug, Clone)]
pub struct MipmapRec {
    pub base: u64,
    pub levels: Vec<u64>,
}

static MIPMAPS: Mutex<Option<HashMap<u64, MipmapRec>>> = Mutex::new(None);
static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0x5000_0000);

fn with<R>(f: impl FnOnce(&mut HashMap<u64, MipmapRec>) -> R) -> R {
    let mut g = MIPMAPS.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(HashMap::new))
}

/// The mipmapped array behind `handle`.
pub fn mipmap(handle: u64) -> CudaResult<MipmapRec> {
    with(|m| m.get(&handle).cloned()).ok_or(cuda::ERROR_INVALID_RESOURCE_HANDLE)
}

/// How many levels an array of `extent` has at most: down to 1×1×1 (layers and cube faces
/// do not shrink).
fn max_levels(extent: [usize; 3], flags: u32) -> u32 {
    let shrinking_depth = flags & (ARRAY_LAYERED | ARRAY_CUBEMAP) == 0;
    let big = extent[0].max(extent[1]).max(if shrinking_depth { extent[2] } else { 0 }).max(1);
    usize::BITS - big.leading_zeros()
}

/// The extent of level `l`: each dimension present halved `l` times, at least 1; layers and
/// cube faces kept.
fn level_extent(extent: [usize; 3], flags: u32, l: u32) -> [usize; 3] {
    let half = |n: usize| if n == 0 { 0 } else { (n >> l).max(1) };
    let shrinking_depth = flags & (ARRAY_LAYERED | ARRAY_CUBEMAP) == 0;
    [half(extent[0]), half(extent[1]), if shrinking_depth { half(extent[2]) } else { extent[2] }]
}

/// The levels' records (at offsets from 0) and the bytes they need together.
fn levels_layout(desc: ChannelFormatDesc, extent: [usize; 3], levels: u32, flags: u32) -> CudaResult<(Vec<ArrayRec>, u64)> {
    let mut recs = Vec::new();
    let mut off = 0u64;
    for l in 0..levels {
        let (mut rec, size) = layout(desc, level_extent(extent, flags, l), flags)?;
        rec.base = off;
        rec.mip_level = true;
        recs.push(rec);
        // Sizes are whole rows of a 512-byte aligned pitch, so every level starts aligned.
        off = off.checked_add(size).ok_or(cuda::ERROR_MEMORY_ALLOCATION)?;
    }
    Ok((recs, off))
}

fn malloc_mipmapped(out_handle: *mut u64, desc: *const ChannelFormatDesc, extent: Extent, levels: u32, flags: u32) -> CudaResult<()> {
    if out_handle.is_null() {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let desc = read(desc)?;
    let extent = [extent.width, extent.height, extent.depth];
    // CUDA clamps the number of levels to [1, 1 + floor(log2(largest dimension))].
    let levels = levels.clamp(1, max_levels(extent, flags));
    let (recs, size) = levels_layout(desc, extent, levels, flags)?;
    let base = super::array::device_alloc(size)?;
    let handles = recs
        .into_iter()
        .map(|mut r| {
            r.base += base;
            register(r)
        })
        .collect();
    let h = NEXT.fetch_add(0x10, std::sync::atomic::Ordering::Relaxed);
    with(|m| m.insert(h, MipmapRec { base, levels: handles }));
    out(out_handle, h)
}

fn free_mipmapped(handle: u64) -> CudaResult<()> {
    if handle == 0 {
        return Ok(());
    }
    let rec = mipmap(handle)?;
    call(&Request::Free { addr: rec.base })?;
    remove_alloc(rec.base);
    for l in &rec.levels {
        unregister(*l);
    }
    with(|m| m.remove(&handle));
    Ok(())
}

/// The levels of mipmapped array `handle` as a texture reads them (a layered 1-D level's
/// layers as rows; every other level's slices or layers as depth), level 0 first.
pub fn texture_levels(handle: u64) -> CudaResult<Vec<TexLevel>> {
    mipmap(handle)?
        .levels
        .iter()
        .map(|&l| {
            let a = super::array::array(l as *const c_void)?;
            let (height, depth) = if a.layered() && a.extent[1] == 0 { (a.depth, 1) } else { (a.height, a.depth) };
            Ok(TexLevel { base: a.base, width: a.width, height, depth, pitch: a.pitch })
        })
        .collect()
}

crate::export! {
    fn cudaMallocMipmappedArray(handle: *mut u64, desc: *const ChannelFormatDesc, extent: Extent, levels: u32, flags: u32) {
        malloc_mipmapped(handle, desc, extent, levels, flags)
    }
    fn cudaGetMipmappedArrayLevel(level_array: *mut u64, handle: u64, level: u32) {
        if level_array.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let rec = mipmap(handle)?;
        let l = *rec.levels.get(level as usize).ok_or(cuda::ERROR_INVALID_VALUE)?;
        out(level_array, l)
    }
    fn cudaFreeMipmappedArray(handle: u64) {
        free_mipmapped(handle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn float_desc() -> ChannelFormatDesc {
        ChannelFormatDesc { x: 32, y: 0, z: 0, w: 0, f: 2 }
    }

    #[test]
    fn levels_halve_each_dimension_down_to_one() {
        assert_eq!(max_levels([16, 4, 0], 0), 5);
        assert_eq!(max_levels([1, 0, 0], 0), 1);
        assert_eq!(max_levels([8, 8, 6], ARRAY_CUBEMAP), 4, "faces do not shrink");
        assert_eq!(level_extent([16, 4, 0], 0, 3), [2, 1, 0]);
        assert_eq!(level_extent([16, 4, 0], 0, 4), [1, 1, 0]);
        assert_eq!(level_extent([8, 8, 3], ARRAY_LAYERED, 2), [2, 2, 3], "layers are kept");
        assert_eq!(level_extent([8, 8, 4], 0, 1), [4, 4, 2]);
    }

    #[test]
    fn levels_lie_one_after_the_other_at_aligned_offsets() {
        let (recs, size) = levels_layout(float_desc(), [300, 3, 0], 3, 0).unwrap();
        let bases: Vec<u64> = recs.iter().map(|r| r.base).collect();
        // 300 floats = 1200 bytes → pitch 1536, 3 rows; then 150 → 1024 × 1; then 75 → 512 × 1.
        assert_eq!(bases, vec![0, 1536 * 3, 1536 * 3 + 1024]);
        assert_eq!(size, 1536 * 3 + 1024 + 512);
        assert!(recs.iter().all(|r| r.mip_level && r.base % 512 == 0));
        assert_eq!(recs[2].extent, [75, 1, 0]);
    }
}
