//! CUDA arrays (`cudaMallocArray`, copies to and from them, texture and surface objects over
//! them: `api::device`), emulated as pitched device memory: an array handle is a heap record
//! naming the allocation, its element format and its pitch. 1-D, 2-D and 3-D arrays and
//! layered 1-D and 2-D arrays (`cudaMalloc3DArray`): slices (or layers) of `height` rows,
//! `slice` bytes apart; cube maps as six slices (faces), layered cube maps as six slices per
//! cube map. Sparse arrays return cudaErrorNotSupported; mipmapped arrays are in `api::mipmap`,
//! their levels arrays of this kind.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use crum_wire::{cuda, AllocKind, Body, Request};

use super::device::ChannelFormatDesc;
use super::memory::copy;
use crate::client::call;
use crate::errors::CudaResult;
use crate::ffi::*;
use crate::state::*;

/// Row alignment of arrays (as pitched allocations).
const ROW_ALIGN: u64 = 512;

/// One array: `depth` slices (or layers) `slice` bytes apart, each of `height` rows of `width`
/// elements of `elem` bytes, rows `pitch` apart.
#[derive(Debug, Clone, Copy)]
pub struct ArrayRec {
    pub base: u64,
    pub width: u64,
    pub height: u64,
    pub elem: u64,
    pub pitch: u64,
    pub desc: ChannelFormatDesc,
    pub flags: u32,
    pub depth: u64,
    pub slice: u64,
    /// The extent as the program asked for it (what `cudaArrayGetInfo` reports).
    pub extent: [usize; 3],
    /// A level of a mipmapped array (`cudaGetMipmappedArrayLevel`): its memory belongs to
    /// the mipmapped array, so `cudaFreeArray` refuses it.
    pub mip_level: bool,
}

impl ArrayRec {
    /// Whether the array is layered (`cudaArrayLayered`).
    pub fn layered(&self) -> bool {
        self.flags & ARRAY_LAYERED != 0
    }
}

/// `cudaChannelFormatKindNV12`, the multi-planar format.
const CHANNEL_KIND_NV12: u32 = 4;

/// `cudaArrayLayered`, `cudaArraySurfaceLoadStore`, `cudaArrayCubemap`, `cudaArrayTextureGather`.
const ARRAY_LAYERED: u32 = 0x01;
const ARRAY_SURFACE_LOAD_STORE: u32 = 0x02;
const ARRAY_CUBEMAP: u32 = 0x04;
const ARRAY_TEXTURE_GATHER: u32 = 0x08;

/// Live arrays by handle (the handle is the address of a leaked record id; we hand out
/// opaque numbers and look them up here, so a bad handle is an error, not a dereference).
static ARRAYS: Mutex<Option<HashMap<u64, ArrayRec>>> = Mutex::new(None);
static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0x4000_0000);

pub fn array(handle: *const c_void) -> CudaResult<ArrayRec> {
    ARRAYS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .and_then(|m| m.get(&(handle as u64)).copied())
        .ok_or(cuda::ERROR_INVALID_RESOURCE_HANDLE)
}

pub(crate) fn elem_bytes(d: &ChannelFormatDesc) -> CudaResult<u64> {
    let bits = [d.x, d.y, d.z, d.w];
    if bits.iter().any(|&b| b < 0 || b % 8 != 0) || d.x == 0 {
        return Err(cuda::ERROR_INVALID_CHANNEL_DESCRIPTOR);
    }
    Ok(bits.iter().map(|&b| b as u64 / 8).sum())
}

fn malloc_array(
    out_handle: *mut *mut c_void,
    desc: *const ChannelFormatDesc,
    width: usize,
    height: usize,
    flags: u32,
) -> CudaResult<()> {
    alloc_array(out_handle, desc, [width, height, 0], flags)
}

/// An array of `extent` (width in elements, height and depth 0 where absent; for a layered
/// array the depth is the number of layers).
fn alloc_array(
    out_handle: *mut *mut c_void,
    desc: *const ChannelFormatDesc,
    extent: [usize; 3],
    flags: u32,
) -> CudaResult<()> {
    let desc = read(desc)?;
    let (mut rec, size) = layout(desc, extent, flags)?;
    rec.base = device_alloc(size)?;
    out(out_handle, register(rec) as *mut c_void)
}

/// Device memory for arrays: a plain allocation the interposer knows as device memory.
pub(crate) fn device_alloc(size: u64) -> CudaResult<u64> {
    crate::client::ensure()?;
    let Body::Alloc { addr, .. } = call(&Request::Malloc {
        size,
        kind: AllocKind::Device,
    })?
    else {
        return Err(cuda::ERROR_UNKNOWN);
    };
    add_alloc(addr, size, MemKind::Device, 0);
    Ok(addr)
}

/// A new handle for `rec`.
pub(crate) fn register(rec: ArrayRec) -> u64 {
    let h = NEXT.fetch_add(0x10, std::sync::atomic::Ordering::Relaxed);
    ARRAYS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(h, rec);
    h
}

/// Forget array handle `h` (its memory is the caller's to free).
pub(crate) fn unregister(h: u64) {
    if let Some(m) = ARRAYS.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
        m.remove(&h);
    }
}

/// The record (at base 0) and size in bytes of an array of `extent` with `flags`, checked
/// as `cudaMalloc3DArray` checks them.
pub(crate) fn layout(desc: ChannelFormatDesc, extent: [usize; 3], flags: u32) -> CudaResult<(ArrayRec, u64)> {
    if desc.f == CHANNEL_KIND_NV12 {
        // Multi-planar (video) formats: one allocation per plane, not emulated.
        return Err(crate::errors::unsupported("cudaMallocArray (multi-planar NV12 format)"));
    }
    let elem = elem_bytes(&desc)?;
    let [width, height, depth] = extent;
    let layered = flags & ARRAY_LAYERED != 0;
    if flags & ARRAY_CUBEMAP != 0 {
        // Six square faces, stored as six slices (+x, -x, +y, -y, +z, -z), as CUDA requires
        // (width == height, depth 6); a layered cube map is 6 slices per cube map (depth a
        // multiple of 6).
        let faces_ok = if layered { depth > 0 && depth % 6 == 0 } else { depth == 6 };
        if width == 0 || width != height || !faces_ok {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
    }
    if flags & !(ARRAY_LAYERED | ARRAY_SURFACE_LOAD_STORE | ARRAY_TEXTURE_GATHER | ARRAY_CUBEMAP) != 0 {
        // Sparse and deferred-mapping arrays: the device reports both absent.
        return Err(cuda::ERROR_NOT_SUPPORTED);
    }
    // A 3-D extent needs a height; a layered array needs layers.
    if width == 0 || (depth > 0 && height == 0 && !layered) || (layered && depth == 0) {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let rows = height.max(1) as u64;
    let slices = depth.max(1) as u64;
    let pitch = (width as u64 * elem).next_multiple_of(ROW_ALIGN);
    let size = pitch
        .checked_mul(rows)
        .and_then(|b| b.checked_mul(slices))
        .ok_or(cuda::ERROR_MEMORY_ALLOCATION)?;
    let rec = ArrayRec {
        base: 0,
        width: width as u64,
        height: rows,
        elem,
        pitch,
        desc,
        flags,
        depth: slices,
        slice: pitch * rows,
        extent,
        mip_level: false,
    };
    Ok((rec, size))
}

/// Device address of byte `w_offset` in row `h_offset`, checking that `width` bytes of
/// `height` rows fit.
fn at(
    a: &ArrayRec,
    w_offset: usize,
    h_offset: usize,
    width: usize,
    height: usize,
) -> CudaResult<u64> {
    let row_bytes = a.width * a.elem;
    if w_offset as u64 + width as u64 > row_bytes || h_offset as u64 + height as u64 > a.height {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    Ok(a.base + h_offset as u64 * a.pitch + w_offset as u64)
}

#[allow(clippy::too_many_arguments)]
/// A 1-D copy of `count` bytes into an array starting at (w_offset, h_offset), wrapping rows.
fn to_array_linear(
    a: &ArrayRec,
    w_offset: usize,
    h_offset: usize,
    src: u64,
    count: usize,
    kind: u32,
    stream: u64,
    sync: bool,
) -> CudaResult<()> {
    let row_bytes = (a.width * a.elem) as usize;
    let (mut w, mut h, mut done) = (w_offset, h_offset, 0usize);
    while done < count {
        let n = (row_bytes - w.min(row_bytes)).min(count - done);
        let d = at(a, w, h, n, 1)?;
        copy(
            d,
            n as u64,
            src + done as u64,
            n as u64,
            n as u64,
            1,
            kind,
            stream,
            sync,
        )?;
        done += n;
        w = 0;
        h += 1;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn from_array_linear(
    dst: u64,
    a: &ArrayRec,
    w_offset: usize,
    h_offset: usize,
    count: usize,
    kind: u32,
    stream: u64,
    sync: bool,
) -> CudaResult<()> {
    let row_bytes = (a.width * a.elem) as usize;
    let (mut w, mut h, mut done) = (w_offset, h_offset, 0usize);
    while done < count {
        let n = (row_bytes - w.min(row_bytes)).min(count - done);
        let s = at(a, w, h, n, 1)?;
        copy(
            dst + done as u64,
            n as u64,
            s,
            n as u64,
            n as u64,
            1,
            kind,
            stream,
            sync,
        )?;
        done += n;
        w = 0;
        h += 1;
    }
    Ok(())
}

crate::export! {
    fn cudaMallocArray(handle: *mut *mut c_void, desc: *const ChannelFormatDesc, width: usize, height: usize, flags: u32) {
        malloc_array(handle, desc, width, height, flags)
    }
    fn cudaArrayGetPlane(plane: *mut *mut c_void, handle: *mut c_void, _index: u32) {
        if plane.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        // No array here has a multi-planar format (NV12 is refused at allocation), and CUDA
        // answers any plane of such an array with cudaErrorInvalidValue.
        array(handle)?;
        Err(cuda::ERROR_INVALID_VALUE)
    }
    fn cudaMalloc3DArray(handle: *mut *mut c_void, desc: *const ChannelFormatDesc, extent: Extent, flags: u32) {
        alloc_array(handle, desc, [extent.width, extent.height, extent.depth], flags)
    }
    fn cudaFreeArray(handle: *mut c_void) {
        if handle.is_null() {
            return Ok(());
        }
        let a = array(handle)?;
        if a.mip_level {
            // A level's memory is its mipmapped array's (cudaFreeMipmappedArray).
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        call(&Request::Free { addr: a.base })?;
        remove_alloc(a.base);
        if let Some(m) = ARRAYS.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            m.remove(&(handle as u64));
        }
        Ok(())
    }
    fn cudaGetChannelDesc(desc: *mut ChannelFormatDesc, handle: *const c_void) {
        out(desc, array(handle)?.desc)
    }
    fn cudaArrayGetInfo(desc: *mut ChannelFormatDesc, extent: *mut [usize; 3], flags: *mut u32, handle: *mut c_void) {
        let a = array(handle)?;
        if !desc.is_null() {
            out(desc, a.desc)?;
        }
        if !extent.is_null() {
            out(extent, a.extent)?;
        }
        if !flags.is_null() {
            out(flags, a.flags)?;
        }
        Ok(())
    }
    fn cudaMemcpy2DToArray(dst: *mut c_void, w_offset: usize, h_offset: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: u32) {
        let a = array(dst)?;
        let d = at(&a, w_offset, h_offset, width, height)?;
        copy(d, a.pitch, src as u64, spitch as u64, width as u64, height as u64, kind, 0, true)
    }
    fn cudaMemcpy2DToArrayAsync(dst: *mut c_void, w_offset: usize, h_offset: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: u32, stream: *mut c_void) {
        let a = array(dst)?;
        let d = at(&a, w_offset, h_offset, width, height)?;
        let s = resolve_stream(stream as u64, false)?;
        copy(d, a.pitch, src as u64, spitch as u64, width as u64, height as u64, kind, s, false)
    }
    fn cudaMemcpy2DFromArray(dst: *mut c_void, dpitch: usize, src: *const c_void, w_offset: usize, h_offset: usize, width: usize, height: usize, kind: u32) {
        let a = array(src)?;
        let s = at(&a, w_offset, h_offset, width, height)?;
        copy(dst as u64, dpitch as u64, s, a.pitch, width as u64, height as u64, kind, 0, true)
    }
    fn cudaMemcpy2DFromArrayAsync(dst: *mut c_void, dpitch: usize, src: *const c_void, w_offset: usize, h_offset: usize, width: usize, height: usize, kind: u32, stream: *mut c_void) {
        let a = array(src)?;
        let s = at(&a, w_offset, h_offset, width, height)?;
        let st = resolve_stream(stream as u64, false)?;
        copy(dst as u64, dpitch as u64, s, a.pitch, width as u64, height as u64, kind, st, false)
    }
    fn cudaMemcpyToArray(dst: *mut c_void, w_offset: usize, h_offset: usize, src: *const c_void, count: usize, kind: u32) {
        let a = array(dst)?;
        to_array_linear(&a, w_offset, h_offset, src as u64, count, kind, 0, true)
    }
    fn cudaMemcpyToArrayAsync(dst: *mut c_void, w_offset: usize, h_offset: usize, src: *const c_void, count: usize, kind: u32, stream: *mut c_void) {
        let a = array(dst)?;
        let s = resolve_stream(stream as u64, false)?;
        to_array_linear(&a, w_offset, h_offset, src as u64, count, kind, s, false)
    }
    fn cudaMemcpyFromArray(dst: *mut c_void, src: *const c_void, w_offset: usize, h_offset: usize, count: usize, kind: u32) {
        let a = array(src)?;
        from_array_linear(dst as u64, &a, w_offset, h_offset, count, kind, 0, true)
    }
    fn cudaMemcpyFromArrayAsync(dst: *mut c_void, src: *const c_void, w_offset: usize, h_offset: usize, count: usize, kind: u32, stream: *mut c_void) {
        let a = array(src)?;
        let s = resolve_stream(stream as u64, false)?;
        from_array_linear(dst as u64, &a, w_offset, h_offset, count, kind, s, false)
    }
    fn cudaMemcpy2DToArray_ptds(dst: *mut c_void, w_offset: usize, h_offset: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: u32) {
        let a = array(dst)?;
        let d = at(&a, w_offset, h_offset, width, height)?;
        let s = resolve_stream(0, true)?;
        copy(d, a.pitch, src as u64, spitch as u64, width as u64, height as u64, kind, s, true)
    }
    fn cudaMemcpy2DToArrayAsync_ptsz(dst: *mut c_void, w_offset: usize, h_offset: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: u32, stream: *mut c_void) {
        let a = array(dst)?;
        let d = at(&a, w_offset, h_offset, width, height)?;
        let s = resolve_stream(stream as u64, true)?;
        copy(d, a.pitch, src as u64, spitch as u64, width as u64, height as u64, kind, s, false)
    }
    fn cudaMemcpy2DFromArray_ptds(dst: *mut c_void, dpitch: usize, src: *const c_void, w_offset: usize, h_offset: usize, width: usize, height: usize, kind: u32) {
        let a = array(src)?;
        let s = at(&a, w_offset, h_offset, width, height)?;
        let st = resolve_stream(0, true)?;
        copy(dst as u64, dpitch as u64, s, a.pitch, width as u64, height as u64, kind, st, true)
    }
    fn cudaMemcpy2DFromArrayAsync_ptsz(dst: *mut c_void, dpitch: usize, src: *const c_void, w_offset: usize, h_offset: usize, width: usize, height: usize, kind: u32, stream: *mut c_void) {
        let a = array(src)?;
        let s = at(&a, w_offset, h_offset, width, height)?;
        let st = resolve_stream(stream as u64, true)?;
        copy(dst as u64, dpitch as u64, s, a.pitch, width as u64, height as u64, kind, st, false)
    }
    fn cudaMemcpyToArray_ptds(dst: *mut c_void, w_offset: usize, h_offset: usize, src: *const c_void, count: usize, kind: u32) {
        let a = array(dst)?;
        let s = resolve_stream(0, true)?;
        to_array_linear(&a, w_offset, h_offset, src as u64, count, kind, s, true)
    }
    fn cudaMemcpyToArrayAsync_ptsz(dst: *mut c_void, w_offset: usize, h_offset: usize, src: *const c_void, count: usize, kind: u32, stream: *mut c_void) {
        let a = array(dst)?;
        let s = resolve_stream(stream as u64, true)?;
        to_array_linear(&a, w_offset, h_offset, src as u64, count, kind, s, false)
    }
    fn cudaMemcpyFromArray_ptds(dst: *mut c_void, src: *const c_void, w_offset: usize, h_offset: usize, count: usize, kind: u32) {
        let a = array(src)?;
        let s = resolve_stream(0, true)?;
        from_array_linear(dst as u64, &a, w_offset, h_offset, count, kind, s, true)
    }
    fn cudaMemcpyFromArrayAsync_ptsz(dst: *mut c_void, src: *const c_void, w_offset: usize, h_offset: usize, count: usize, kind: u32, stream: *mut c_void) {
        let a = array(src)?;
        let s = resolve_stream(stream as u64, true)?;
        from_array_linear(dst as u64, &a, w_offset, h_offset, count, kind, s, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(width: u64, height: u64, elem: u64) -> ArrayRec {
        let desc = ChannelFormatDesc {
            x: (elem * 8) as i32,
            y: 0,
            z: 0,
            w: 0,
            f: 2,
        };
        ArrayRec {
            base: 0x2300_0000_0000,
            width,
            height,
            elem,
            pitch: (width * elem).next_multiple_of(ROW_ALIGN),
            desc,
            flags: 0,
            depth: 1,
            slice: (width * elem).next_multiple_of(ROW_ALIGN) * height,
            extent: [width as usize, height as usize, 0],
            mip_level: false,
        }
    }

    #[test]
    fn element_size_comes_from_the_channel_bits() {
        let d = ChannelFormatDesc {
            x: 32,
            y: 32,
            z: 0,
            w: 0,
            f: 2,
        };
        assert_eq!(elem_bytes(&d), Ok(8));
        let bad = ChannelFormatDesc {
            x: 12,
            y: 0,
            z: 0,
            w: 0,
            f: 2,
        };
        assert_eq!(
            elem_bytes(&bad),
            Err(cuda::ERROR_INVALID_CHANNEL_DESCRIPTOR)
        );
    }

    #[test]
    fn offsets_address_rows_by_pitch_and_bounds_are_checked() {
        let a = rec(100, 10, 4);
        assert_eq!(at(&a, 8, 2, 16, 1), Ok(a.base + 2 * 512 + 8));
        assert_eq!(at(&a, 0, 0, 400, 10), Ok(a.base));
        assert_eq!(at(&a, 4, 0, 400, 1), Err(cuda::ERROR_INVALID_VALUE));
        assert_eq!(at(&a, 0, 5, 4, 6), Err(cuda::ERROR_INVALID_VALUE));
    }

    #[test]
    fn unknown_array_handle_is_invalid_resource_handle() {
        assert_eq!(
            array(0x1234 as *const c_void).map(|_| ()),
            Err(cuda::ERROR_INVALID_RESOURCE_HANDLE)
        );
    }
}

/// `cudaPitchedPtr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PitchedPtr {
    pub ptr: u64,
    pub pitch: usize,
    pub xsize: usize,
    pub ysize: usize,
}

/// `cudaExtent` (width in bytes for linear memory, in elements for arrays).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Extent {
    pub width: usize,
    pub height: usize,
    pub depth: usize,
}

/// One side of a 3-D copy as (base of slice 0 at the position, row pitch, slice pitch,
/// bytes per width unit).
fn side(
    p: *const u8,
    arr_off: usize,
    pos_off: usize,
    ptr_off: usize,
) -> CudaResult<(u64, u64, u64, u64)> {
    let arr: u64 = field(p, arr_off)?;
    let pos: [usize; 3] = field(p, pos_off)?;
    if arr != 0 {
        let a = array(arr as *const c_void)?;
        if pos[2] as u64 >= a.depth || pos[1] as u64 >= a.height || pos[0] as u64 >= a.width {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let base = a.base + pos[2] as u64 * a.slice + pos[1] as u64 * a.pitch + pos[0] as u64 * a.elem;
        return Ok((base, a.pitch, a.slice, a.elem));
    }
    let pp: PitchedPtr = field(p, ptr_off)?;
    let slice = pp.pitch as u64 * pp.ysize as u64;
    let base = pp.ptr + pos[2] as u64 * slice + pos[1] as u64 * pp.pitch as u64 + pos[0] as u64;
    Ok((base, pp.pitch as u64, slice, 1))
}

pub(crate) fn memcpy3d(p: *const u8, stream: u64, sync: bool) -> CudaResult<()> {
    use crate::abi_gen::*;
    let kind: u32 = field(p, CUDAMEMCPY3DPARMS_KIND)?;
    let layout = Copy3d {
        src: (CUDAMEMCPY3DPARMS_SRCARRAY, CUDAMEMCPY3DPARMS_SRCPOS, CUDAMEMCPY3DPARMS_SRCPTR),
        dst: (CUDAMEMCPY3DPARMS_DSTARRAY, CUDAMEMCPY3DPARMS_DSTPOS, CUDAMEMCPY3DPARMS_DSTPTR),
        extent: CUDAMEMCPY3DPARMS_EXTENT,
    };
    copy3d(p, &layout, kind, stream, sync)
}

/// `cudaMemcpy3DPeer[Async]`: with one device, a copy between device 0 and itself is
/// `cudaMemcpy3D` with the direction inferred (`cudaMemcpyDefault`); any other device is
/// `cudaErrorInvalidDevice`.
fn memcpy3d_peer(p: *const u8, stream: u64, sync: bool) -> CudaResult<()> {
    use crate::abi_gen::*;
    let sdev: i32 = field(p, CUDAMEMCPY3DPEERPARMS_SRCDEVICE)?;
    let ddev: i32 = field(p, CUDAMEMCPY3DPEERPARMS_DSTDEVICE)?;
    if sdev != 0 || ddev != 0 {
        return Err(cuda::ERROR_INVALID_DEVICE);
    }
    let layout = Copy3d {
        src: (CUDAMEMCPY3DPEERPARMS_SRCARRAY, CUDAMEMCPY3DPEERPARMS_SRCPOS, CUDAMEMCPY3DPEERPARMS_SRCPTR),
        dst: (CUDAMEMCPY3DPEERPARMS_DSTARRAY, CUDAMEMCPY3DPEERPARMS_DSTPOS, CUDAMEMCPY3DPEERPARMS_DSTPTR),
        extent: CUDAMEMCPY3DPEERPARMS_EXTENT,
    };
    copy3d(p, &layout, MEMCPY_DEFAULT, stream, sync)
}

/// `cudaMemcpyDefault`.
const MEMCPY_DEFAULT: u32 = 4;

/// Where the fields of a 3-D copy's parameter struct are: (array, position, pitched
/// pointer) of each side, and the extent.
struct Copy3d {
    src: (usize, usize, usize),
    dst: (usize, usize, usize),
    extent: usize,
}

fn copy3d(p: *const u8, l: &Copy3d, kind: u32, stream: u64, sync: bool) -> CudaResult<()> {
    let (s, spitch, sslice, selem) = side(p, l.src.0, l.src.1, l.src.2)?;
    let (d, dpitch, dslice, delem) = side(p, l.dst.0, l.dst.1, l.dst.2)?;
    let ext: Extent = field(p, l.extent)?;
    // Width is in elements when an array is involved, else in bytes.
    let width = ext.width as u64 * selem.max(delem);
    for z in 0..ext.depth.max(1) as u64 {
        copy(
            d + z * dslice,
            dpitch,
            s + z * sslice,
            spitch,
            width,
            ext.height.max(1) as u64,
            kind,
            stream,
            sync,
        )?;
    }
    Ok(())
}

/// `cudaMemcpy2DArrayToArray`: `width` bytes of `height` rows between two arrays (offsets
/// in bytes and rows), device to device.
#[allow(clippy::too_many_arguments)]
fn array_to_array_2d(
    dst: *mut c_void,
    wd: usize,
    hd: usize,
    src: *const c_void,
    ws: usize,
    hs: usize,
    width: usize,
    height: usize,
    kind: u32,
    stream: u64,
) -> CudaResult<()> {
    check_d2d(kind)?;
    let (da, sa) = (array(dst)?, array(src)?);
    if width == 0 || height == 0 {
        return Ok(());
    }
    let d = at(&da, wd, hd, width, height)?;
    let s = at(&sa, ws, hs, width, height)?;
    copy(d, da.pitch, s, sa.pitch, width as u64, height as u64, kind, stream, true)
}

/// `cudaMemcpyArrayToArray`: `count` bytes read row after row from one array from
/// (ws, hs) and written the same way into the other from (wd, hd).
#[allow(clippy::too_many_arguments)]
fn array_to_array(
    dst: *mut c_void,
    wd: usize,
    hd: usize,
    src: *const c_void,
    ws: usize,
    hs: usize,
    count: usize,
    kind: u32,
    stream: u64,
) -> CudaResult<()> {
    check_d2d(kind)?;
    let (da, sa) = (array(dst)?, array(src)?);
    let (drow, srow) = ((da.width * da.elem) as usize, (sa.width * sa.elem) as usize);
    let (mut dw, mut dh, mut sw, mut sh, mut done) = (wd, hd, ws, hs, 0usize);
    // Check the whole range before copying anything.
    let fits = |row: usize, w: usize, h: usize, rows: u64| {
        w <= row && (h as u64 * row as u64 + w as u64 + count as u64) <= rows * row as u64
    };
    if !fits(drow, wd, hd, da.height) || !fits(srow, ws, hs, sa.height) {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    while done < count {
        if dw == drow {
            (dw, dh) = (0, dh + 1);
        }
        if sw == srow {
            (sw, sh) = (0, sh + 1);
        }
        let n = (drow - dw).min(srow - sw).min(count - done);
        let d = at(&da, dw, dh, n, 1)?;
        let s = at(&sa, sw, sh, n, 1)?;
        copy(d, n as u64, s, n as u64, n as u64, 1, kind, stream, true)?;
        done += n;
        dw += n;
        sw += n;
    }
    Ok(())
}

/// Copies between arrays are device to device (`cudaMemcpyDeviceToDevice` or
/// `cudaMemcpyDefault`); another direction is `cudaErrorInvalidMemcpyDirection`.
fn check_d2d(kind: u32) -> CudaResult<()> {
    match kind {
        3 | MEMCPY_DEFAULT => Ok(()),
        _ => Err(cuda::ERROR_INVALID_MEMCPY_DIRECTION),
    }
}

/// `cudaMemset3D[Async]`: one pitched 2-D memset per slice, in stream order (checked and
/// captured like any memset).
fn memset3d(pitched: PitchedPtr, value: i32, extent: Extent, stream: u64) -> CudaResult<()> {
    let slice = pitched.pitch as u64 * pitched.ysize as u64;
    for z in 0..extent.depth as u64 {
        super::memory::memset(
            pitched.ptr + z * slice,
            pitched.pitch as u64,
            value,
            extent.width as u64,
            extent.height as u64,
            stream,
        )?;
    }
    Ok(())
}

crate::export! {
    fn cudaMalloc3D(pitched: *mut PitchedPtr, extent: Extent) {
        let pitch = (extent.width.max(1) as u64).next_multiple_of(ROW_ALIGN);
        let size = pitch * extent.height.max(1) as u64 * extent.depth.max(1) as u64;
        crate::client::ensure()?;
        let Body::Alloc { addr, .. } = call(&Request::Malloc { size, kind: AllocKind::Device })? else {
            return Err(cuda::ERROR_UNKNOWN);
        };
        add_alloc(addr, size, MemKind::Device, 0);
        out(pitched, PitchedPtr { ptr: addr, pitch: pitch as usize, xsize: extent.width, ysize: extent.height })
    }
    fn cudaMemcpy3D(p: *const u8) {
        memcpy3d(p, 0, true)
    }
    fn cudaMemcpy3D_ptds(p: *const u8) {
        let s = resolve_stream(0, true)?;
        memcpy3d(p, s, true)
    }
    fn cudaMemcpy3DAsync(p: *const u8, stream: *mut c_void) {
        let s = resolve_stream(stream as u64, false)?;
        memcpy3d(p, s, false)
    }
    fn cudaMemcpy3DAsync_ptsz(p: *const u8, stream: *mut c_void) {
        let s = resolve_stream(stream as u64, true)?;
        memcpy3d(p, s, false)
    }
    fn cudaMemset3D(pitched: PitchedPtr, value: i32, extent: Extent) {
        memset3d(pitched, value, extent, 0)
    }
    fn cudaMemcpy3DPeer(p: *const u8) {
        memcpy3d_peer(p, 0, true)
    }
    fn cudaMemcpy3DPeer_ptds(p: *const u8) {
        memcpy3d_peer(p, resolve_stream(0, true)?, true)
    }
    fn cudaMemcpy3DPeerAsync(p: *const u8, stream: *mut c_void) {
        memcpy3d_peer(p, resolve_stream(stream as u64, false)?, false)
    }
    fn cudaMemcpy3DPeerAsync_ptsz(p: *const u8, stream: *mut c_void) {
        memcpy3d_peer(p, resolve_stream(stream as u64, true)?, false)
    }
    fn cudaMemcpy2DArrayToArray(dst: *mut c_void, wd: usize, hd: usize, src: *const c_void, ws: usize, hs: usize, width: usize, height: usize, kind: u32) {
        array_to_array_2d(dst, wd, hd, src, ws, hs, width, height, kind, 0)
    }
    fn cudaMemcpy2DArrayToArray_ptds(dst: *mut c_void, wd: usize, hd: usize, src: *const c_void, ws: usize, hs: usize, width: usize, height: usize, kind: u32) {
        array_to_array_2d(dst, wd, hd, src, ws, hs, width, height, kind, resolve_stream(0, true)?)
    }
    fn cudaMemcpyArrayToArray(dst: *mut c_void, wd: usize, hd: usize, src: *const c_void, ws: usize, hs: usize, count: usize, kind: u32) {
        array_to_array(dst, wd, hd, src, ws, hs, count, kind, 0)
    }
    fn cudaMemcpyArrayToArray_ptds(dst: *mut c_void, wd: usize, hd: usize, src: *const c_void, ws: usize, hs: usize, count: usize, kind: u32) {
        array_to_array(dst, wd, hd, src, ws, hs, count, kind, resolve_stream(0, true)?)
    }
    fn cudaMemset3D_ptds(pitched: PitchedPtr, value: i32, extent: Extent) {
        memset3d(pitched, value, extent, resolve_stream(0, true)?)
    }
    fn cudaMemset3DAsync(pitched: PitchedPtr, value: i32, extent: Extent, stream: *mut c_void) {
        memset3d(pitched, value, extent, resolve_stream(stream as u64, false)?)
    }
    fn cudaMemset3DAsync_ptsz(pitched: PitchedPtr, value: i32, extent: Extent, stream: *mut c_void) {
        memset3d(pitched, value, extent, resolve_stream(stream as u64, true)?)
    }
}
