//! The driver API's memory beyond 1-D allocations and copies (issue 13): host registration,
//! stream-ordered allocation and pools, 2-D and 3-D copies (`CUDA_MEMCPY2D`,
//! `CUDA_MEMCPY3D`) and 2-D memsets, CUDA arrays (`cuArrayCreate`, `cuArray3DCreate`) and
//! texture objects over linear, pitched and array memory. Each goes through the runtime's
//! implementation (the same requests to the proxy, the same records): the driver's
//! structures are decoded here into the runtime's calls. Layouts (offsets) measured from
//! CUDA 13's `cuda.h`.
//!
//! # Safety
//! The only unsafe code is the `#[no_mangle]` exports of `driver!`; application pointers are
//! read and written through `ffi` (`read`, `field`, `out`), under its contract.
#![allow(unsafe_code, non_snake_case)]

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use crum_wire::cuda;

use super::array::Extent;
use super::device::ChannelFormatDesc;
use super::driver::{driver, rt};
use crate::abi_gen::{
    CUDAEXTENT_DEPTH, CUDAEXTENT_HEIGHT, CUDAEXTENT_WIDTH, CUDAMEMCPY3DPARMS_DSTARRAY, CUDAMEMCPY3DPARMS_DSTPOS,
    CUDAMEMCPY3DPARMS_DSTPTR, CUDAMEMCPY3DPARMS_EXTENT, CUDAMEMCPY3DPARMS_KIND, CUDAMEMCPY3DPARMS_SIZE,
    CUDAMEMCPY3DPARMS_SRCARRAY, CUDAMEMCPY3DPARMS_SRCPOS, CUDAMEMCPY3DPARMS_SRCPTR, CUDAPITCHEDPTR_PITCH,
    CUDAPITCHEDPTR_PTR, CUDAPITCHEDPTR_YSIZE, CUDAPOS_X, CUDAPOS_Y, CUDAPOS_Z,
};
use crate::errors::CudaResult;
use crate::ffi::*;

/// `CUmemorytype`.
const MEM_HOST: u32 = 1;
const MEM_DEVICE: u32 = 2;
const MEM_ARRAY: u32 = 3;
const MEM_UNIFIED: u32 = 4;

/// One side of a copy: its address at the copy's origin, row pitch, slice pitch, and whether
/// it is host memory (None: unified, direction inferred).
struct Side {
    at: u64,
    pitch: u64,
    slice: u64,
    host: Option<bool>,
}

/// Offsets of one side's fields in `CUDA_MEMCPY2D` / `CUDA_MEMCPY3D`.
struct SideAt {
    x: usize,
    y: usize,
    z: Option<usize>,
    ty: usize,
    host: usize,
    device: usize,
    array: usize,
    pitch: usize,
    height: Option<usize>,
}

fn side(p: *const u8, l: &SideAt) -> CudaResult<Side> {
    let x: u64 = field(p, l.x)?;
    let y: u64 = field(p, l.y)?;
    let z: u64 = match l.z {
        Some(o) => field(p, o)?,
        None => 0,
    };
    let ty: u32 = field(p, l.ty)?;
    if ty == MEM_ARRAY {
        let a = super::array::array(field::<u64>(p, l.array)? as *const c_void)?;
        if z >= a.depth || y >= a.height || x >= a.width * a.elem {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        return Ok(Side { at: a.base + z * a.slice + y * a.pitch + x, pitch: a.pitch, slice: a.slice, host: Some(false) });
    }
    let (base, host): (u64, Option<bool>) = match ty {
        MEM_HOST => (field(p, l.host)?, Some(true)),
        MEM_DEVICE => (field(p, l.device)?, Some(false)),
        MEM_UNIFIED => (field(p, l.device)?, None),
        _ => return Err(cuda::ERROR_INVALID_VALUE),
    };
    let pitch: u64 = field(p, l.pitch)?;
    let rows: u64 = match l.height {
        Some(o) => field(p, o)?,
        None => 0,
    };
    let slice = pitch * rows;
    Ok(Side { at: base + z * slice + y * pitch + x, pitch, slice, host })
}

/// The runtime's `cudaMemcpyKind` for two sides.
fn kind(src: &Side, dst: &Side) -> u32 {
    match (src.host, dst.host) {
        (Some(true), Some(true)) => 0,
        (Some(true), Some(false)) => 1,
        (Some(false), Some(true)) => 2,
        (Some(false), Some(false)) => 3,
        _ => 4,
    }
}

const SRC_2D: SideAt =
    SideAt { x: 0, y: 8, z: None, ty: 16, host: 24, device: 32, array: 40, pitch: 48, height: None };
const DST_2D: SideAt =
    SideAt { x: 56, y: 64, z: None, ty: 72, host: 80, device: 88, array: 96, pitch: 104, height: None };
const SRC_3D: SideAt =
    SideAt { x: 0, y: 8, z: Some(16), ty: 32, host: 40, device: 48, array: 56, pitch: 72, height: Some(80) };
const DST_3D: SideAt =
    SideAt { x: 88, y: 96, z: Some(104), ty: 120, host: 128, device: 136, array: 144, pitch: 160, height: Some(168) };

/// `cuMemcpy2D[Async]`: `CUDA_MEMCPY2D` (WidthInBytes at 112, Height at 120).
fn memcpy2d(p: *const u8, stream: u64, sync: bool) -> CudaResult<()> {
    let (s, d) = (side(p, &SRC_2D)?, side(p, &DST_2D)?);
    let (w, h): (u64, u64) = (field(p, 112)?, field(p, 120)?);
    let stream = crate::state::resolve_stream(stream, false)?;
    super::memory::copy(d.at, d.pitch, s.at, s.pitch, w, h, kind(&s, &d), stream, sync)
}

/// `cuMemcpy3D[Async]`: `CUDA_MEMCPY3D` (WidthInBytes at 176, Height 184, Depth 192); LOD
/// (mipmap level) must be 0.
fn memcpy3d(p: *const u8, stream: u64, sync: bool) -> CudaResult<()> {
    let (slod, dlod): (u64, u64) = (field(p, 24)?, field(p, 112)?);
    if slod != 0 || dlod != 0 {
        return Err(crate::errors::unsupported("cuMemcpy3D (mipmap levels)"));
    }
    let (s, d) = (side(p, &SRC_3D)?, side(p, &DST_3D)?);
    let (w, h, depth): (u64, u64, u64) = (field(p, 176)?, field(p, 184)?, field(p, 192)?);
    let stream = crate::state::resolve_stream(stream, false)?;
    for z in 0..depth.max(1) {
        super::memory::copy(d.at + z * d.slice, d.pitch, s.at + z * s.slice, s.pitch, w, h.max(1), kind(&s, &d), stream, sync)?;
    }
    Ok(())
}

/// A `CUDA_MEMCPY3D` as the runtime's `cudaMemcpy3DParms` over pitched pointers (a memcpy
/// node of `cuGraphAddMemcpyNode`; an array side is the array's memory at the origin). LOD
/// must be 0, as for `cuMemcpy3D`.
pub(crate) fn copy3d_params(p: *const u8) -> CudaResult<Box<[u8; CUDAMEMCPY3DPARMS_SIZE]>> {
    let (slod, dlod): (u64, u64) = (field(p, 24)?, field(p, 112)?);
    if slod != 0 || dlod != 0 {
        return Err(crate::errors::unsupported("cuGraphAddMemcpyNode (mipmap levels)"));
    }
    let (s, d) = (side(p, &SRC_3D)?, side(p, &DST_3D)?);
    let (w, h, depth): (u64, u64, u64) = (field(p, 176)?, field(p, 184)?, field(p, 192)?);
    let h = h.max(1);
    let mut b = super::graph::copy_params(d.at, d.pitch, s.at, s.pitch, w, h, kind(&s, &d));
    // A side's rows per slice: its slice pitch over its row pitch (the copy's height where
    // it gives none).
    let rows = |x: &Side| if x.pitch > 0 && x.slice > 0 { (x.slice / x.pitch).max(h) } else { h };
    set_field(b.as_mut_ptr(), CUDAMEMCPY3DPARMS_SRCPTR + CUDAPITCHEDPTR_YSIZE, rows(&s));
    set_field(b.as_mut_ptr(), CUDAMEMCPY3DPARMS_DSTPTR + CUDAPITCHEDPTR_YSIZE, rows(&d));
    set_field(b.as_mut_ptr(), CUDAMEMCPY3DPARMS_EXTENT + CUDAEXTENT_DEPTH, depth.max(1));
    Ok(b)
}

/// The runtime's `cudaMemcpy3DParms` `r` (a memcpy node's) as a `CUDA_MEMCPY3D` at `p`
/// (`cuGraphMemcpyNodeGetParams`): memory types from the copy's kind (host, device, or
/// unified for `cudaMemcpyDefault`), an array side as `CU_MEMORYTYPE_ARRAY` with its
/// position in bytes. A node added through the driver with an array side holds the array's
/// memory at the origin, so it reads back as device memory.
pub(crate) fn write_copy3d(r: &[u8; CUDAMEMCPY3DPARMS_SIZE], p: *mut u8) -> CudaResult<()> {
    zero(p, 200)?;
    let r = r.as_ptr();
    let kind: u32 = field(r, CUDAMEMCPY3DPARMS_KIND)?;
    let (src_host, dst_host) = match kind {
        0 => (Some(true), Some(true)),
        1 => (Some(true), Some(false)),
        2 => (Some(false), Some(true)),
        3 => (Some(false), Some(false)),
        _ => (None, None),
    };
    let mut elem = 1u64;
    let mut one = |l: &SideAt, array_at: usize, pos_at: usize, ptr_at: usize, host: Option<bool>| -> CudaResult<()> {
        let array: u64 = field(r, array_at)?;
        let (x, y, z): (u64, u64, u64) = (field(r, pos_at + CUDAPOS_X)?, field(r, pos_at + CUDAPOS_Y)?, field(r, pos_at + CUDAPOS_Z)?);
        if array != 0 {
            let a = super::array::array(array as *const c_void)?;
            elem = a.elem;
            set_field(p, l.ty, MEM_ARRAY);
            set_field(p, l.array, array);
            set_field(p, l.x, x * a.elem);
        } else {
            let (ty, at) = match host {
                Some(true) => (MEM_HOST, l.host),
                Some(false) => (MEM_DEVICE, l.device),
                None => (MEM_UNIFIED, l.device),
            };
            set_field(p, l.ty, ty);
            set_field(p, at, field::<u64>(r, ptr_at + CUDAPITCHEDPTR_PTR)?);
            set_field(p, l.pitch, field::<u64>(r, ptr_at + CUDAPITCHEDPTR_PITCH)?);
            if let Some(h) = l.height {
                set_field(p, h, field::<u64>(r, ptr_at + CUDAPITCHEDPTR_YSIZE)?);
            }
            set_field(p, l.x, x);
        }
        set_field(p, l.y, y);
        if let Some(o) = l.z {
            set_field(p, o, z);
        }
        Ok(())
    };
    one(&SRC_3D, CUDAMEMCPY3DPARMS_SRCARRAY, CUDAMEMCPY3DPARMS_SRCPOS, CUDAMEMCPY3DPARMS_SRCPTR, src_host)?;
    one(&DST_3D, CUDAMEMCPY3DPARMS_DSTARRAY, CUDAMEMCPY3DPARMS_DSTPOS, CUDAMEMCPY3DPARMS_DSTPTR, dst_host)?;
    // The extent's width is in elements where a side is an array.
    let w: u64 = field(r, CUDAMEMCPY3DPARMS_EXTENT + CUDAEXTENT_WIDTH)?;
    set_field(p, 176, w * elem);
    set_field(p, 184, field::<u64>(r, CUDAMEMCPY3DPARMS_EXTENT + CUDAEXTENT_HEIGHT)?);
    set_field(p, 192, field::<u64>(r, CUDAMEMCPY3DPARMS_EXTENT + CUDAEXTENT_DEPTH)?);
    Ok(())
}

/// `CUarray_format` and a channel count as the runtime's channel descriptor.
fn channel_desc(format: u32, channels: u32) -> CudaResult<ChannelFormatDesc> {
    // cudaChannelFormatKind: 0 signed, 1 unsigned, 2 float.
    let (bits, kind) = match format {
        0x01 => (8, 1),
        0x02 => (16, 1),
        0x03 => (32, 1),
        0x08 => (8, 0),
        0x09 => (16, 0),
        0x0a => (32, 0),
        0x10 => (16, 2),
        0x20 => (32, 2),
        _ => return Err(crate::errors::unsupported("CUarray_format other than 8/16/32-bit integers, half and float")),
    };
    if !matches!(channels, 1 | 2 | 4) {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let c = |i: u32| if i < channels { bits } else { 0 };
    Ok(ChannelFormatDesc { x: c(0), y: c(1), z: c(2), w: c(3), f: kind })
}

/// The runtime's channel descriptor as (`CUarray_format`, channels).
fn array_format(d: &ChannelFormatDesc) -> (u32, u32) {
    let channels = [d.x, d.y, d.z, d.w].iter().filter(|&&b| b > 0).count() as u32;
    let format = match (d.f, d.x) {
        (1, 8) => 0x01,
        (1, 16) => 0x02,
        (1, _) => 0x03,
        (0, 8) => 0x08,
        (0, 16) => 0x09,
        (0, _) => 0x0a,
        (_, 16) => 0x10,
        _ => 0x20,
    };
    (format, channels)
}

/// The driver's resource descriptions of live texture objects (`cuTexObjectGetResourceDesc`).
static TEX_RES: Mutex<Option<HashMap<u64, [u8; RES_SIZE]>>> = Mutex::new(None);
/// `CUDA_RESOURCE_DESC`'s size.
const RES_SIZE: usize = 144;

/// A runtime `cudaResourceDesc` (offsets: `abi_gen`) for a driver `CUDA_RESOURCE_DESC`.
fn runtime_res(res: *const u8) -> CudaResult<[u8; crate::abi_gen::CUDARESOURCEDESC_SIZE]> {
    use crate::abi_gen::*;
    let mut r = [0u8; CUDARESOURCEDESC_SIZE];
    let put = |r: &mut [u8], off: usize, v: &[u8]| r[off..off + v.len()].copy_from_slice(v);
    let chan = |d: ChannelFormatDesc| [d.x, d.y, d.z, d.w, d.f as i32].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
    let ty: u32 = field(res, 0)?;
    put(&mut r, CUDARESOURCEDESC_RESTYPE, &ty.to_le_bytes());
    match ty {
        // CU_RESOURCE_TYPE_ARRAY: the handle at the union's start in both.
        0 => put(&mut r, CUDARESOURCEDESC_RES_LINEAR_DEVPTR, &field::<u64>(res, 8)?.to_le_bytes()),
        2 => {
            put(&mut r, CUDARESOURCEDESC_RES_LINEAR_DEVPTR, &field::<u64>(res, 8)?.to_le_bytes());
            put(&mut r, CUDARESOURCEDESC_RES_LINEAR_DESC, &chan(channel_desc(field(res, 16)?, field(res, 20)?)?));
            put(&mut r, CUDARESOURCEDESC_RES_LINEAR_SIZEINBYTES, &field::<u64>(res, 24)?.to_le_bytes());
        }
        3 => {
            put(&mut r, CUDARESOURCEDESC_RES_PITCH2D_DEVPTR, &field::<u64>(res, 8)?.to_le_bytes());
            put(&mut r, CUDARESOURCEDESC_RES_PITCH2D_DESC, &chan(channel_desc(field(res, 16)?, field(res, 20)?)?));
            put(&mut r, CUDARESOURCEDESC_RES_PITCH2D_WIDTH, &field::<u64>(res, 24)?.to_le_bytes());
            put(&mut r, CUDARESOURCEDESC_RES_PITCH2D_HEIGHT, &field::<u64>(res, 32)?.to_le_bytes());
            put(&mut r, CUDARESOURCEDESC_RES_PITCH2D_PITCHINBYTES, &field::<u64>(res, 40)?.to_le_bytes());
        }
        _ => return Err(crate::errors::unsupported("cuTexObjectCreate (mipmapped arrays)")),
    }
    Ok(r)
}

/// A runtime `cudaTextureDesc` for a driver `CUDA_TEXTURE_DESC` (address modes, filter mode,
/// flags: `CU_TRSF_READ_AS_INTEGER` 1, `CU_TRSF_NORMALIZED_COORDINATES` 2, `CU_TRSF_SRGB` 0x10;
/// border color).
fn runtime_tex(tex: *const u8, res: *const u8) -> CudaResult<[u8; crate::abi_gen::CUDATEXTUREDESC_SIZE]> {
    use crate::abi_gen::*;
    let mut t = [0u8; CUDATEXTUREDESC_SIZE];
    let modes: [u32; 3] = field(tex, 0)?;
    let filter: u32 = field(tex, 12)?;
    let flags: u32 = field(tex, 16)?;
    let border: [f32; 4] = field(tex, 40)?;
    // Integer data is read as normalized floats unless CU_TRSF_READ_AS_INTEGER; float data as
    // it is (cudaReadModeElementType).
    let ty: u32 = field(res, 0)?;
    let float_data = match ty {
        2 | 3 => matches!(field::<u32>(res, 16)?, 0x10 | 0x20),
        _ => super::array::array(field::<u64>(res, 8)? as *const c_void).is_ok_and(|a| a.desc.f == 2),
    };
    let read_mode: u32 = if flags & 1 != 0 || float_data { 0 } else { 1 };
    for (i, m) in modes.iter().enumerate() {
        t[CUDATEXTUREDESC_ADDRESSMODE + 4 * i..][..4].copy_from_slice(&m.to_le_bytes());
    }
    t[CUDATEXTUREDESC_FILTERMODE..][..4].copy_from_slice(&filter.to_le_bytes());
    t[CUDATEXTUREDESC_READMODE..][..4].copy_from_slice(&read_mode.to_le_bytes());
    // sRGB at 20, borderColor at 24 (cudaTextureDesc's layout, driver_types.h).
    t[20..24].copy_from_slice(&((flags & 0x10 != 0) as i32).to_le_bytes());
    for (i, c) in border.iter().enumerate() {
        t[24 + 4 * i..][..4].copy_from_slice(&c.to_le_bytes());
    }
    t[CUDATEXTUREDESC_NORMALIZEDCOORDS..][..4].copy_from_slice(&((flags & 2 != 0) as i32).to_le_bytes());
    Ok(t)
}

/// `cuMemsetD2D*`: `height` rows of `width` elements of `elem` bytes, `pitch` apart.
#[allow(clippy::too_many_arguments)]
fn memset2d(dst: u64, pitch: usize, value: u32, elem: u32, width: usize, height: usize, stream: u64, sync: bool) -> CudaResult<()> {
    let stream = crate::state::resolve_stream(stream, false)?;
    let m = crate::graph::MemsetNode { dst, pitch: pitch as u64, value, elem, width: width as u64, height: height as u64 };
    super::graph::run_memset(&m, stream)?;
    if sync {
        rt(super::stream::cudaStreamSynchronize(stream as *mut c_void))?;
    }
    Ok(())
}

driver! {
    fn cuMemHostRegister_v2(p: *mut c_void, bytes: usize, flags: u32) {
        rt(super::memory::cudaHostRegister(p, bytes, flags))
    }
    fn cuMemHostUnregister(p: *mut c_void) {
        rt(super::memory::cudaHostUnregister(p))
    }
    fn cuMemHostGetFlags(flags: *mut u32, p: *mut c_void) {
        rt(super::memory::cudaHostGetFlags(flags, p))
    }
    fn cuMemGetAddressRange_v2(base: *mut u64, size: *mut usize, dptr: u64) {
        let (b, len) = match super::vmm::mapping_of(dptr) {
            Some(m) => m,
            None => crate::state::find_alloc(dptr)
                .filter(|(_, r)| r.kind != crate::state::MemKind::Registered)
                .map(|(b, r)| (b, r.len))
                .ok_or(cuda::ERROR_INVALID_VALUE)?,
        };
        if !base.is_null() {
            out(base, b)?;
        }
        if !size.is_null() {
            out(size, len as usize)?;
        }
        Ok(())
    }
    fn cuMemAllocAsync(dptr: *mut u64, bytes: usize, stream: *mut c_void) {
        rt(super::pool::cudaMallocAsync(dptr.cast(), bytes, stream))
    }
    fn cuMemAllocFromPoolAsync(dptr: *mut u64, bytes: usize, pool: *mut c_void, stream: *mut c_void) {
        rt(super::pool::cudaMallocFromPoolAsync(dptr.cast(), bytes, pool, stream))
    }
    fn cuMemFreeAsync(dptr: u64, stream: *mut c_void) {
        rt(super::pool::cudaFreeAsync(dptr as *mut c_void, stream))
    }
    // CUmemPoolProps, CUmemAccessDesc, CUmemLocation and the pool attributes have the
    // runtime's layouts and values.
    fn cuMemPoolCreate(pool: *mut *mut c_void, props: *const u8) {
        rt(super::pool::cudaMemPoolCreate(pool, props))
    }
    fn cuMemPoolDestroy(pool: *mut c_void) {
        rt(super::pool::cudaMemPoolDestroy(pool))
    }
    fn cuMemPoolTrimTo(pool: *mut c_void, keep: usize) {
        rt(super::pool::cudaMemPoolTrimTo(pool, keep))
    }
    fn cuMemPoolSetAttribute(pool: *mut c_void, attr: u32, value: *mut c_void) {
        rt(super::pool::cudaMemPoolSetAttribute(pool, attr, value))
    }
    fn cuMemPoolGetAttribute(pool: *mut c_void, attr: u32, value: *mut c_void) {
        rt(super::pool::cudaMemPoolGetAttribute(pool, attr, value))
    }
    fn cuMemPoolSetAccess(pool: *mut c_void, descs: *const u8, count: usize) {
        rt(super::pool::cudaMemPoolSetAccess(pool, descs, count))
    }
    fn cuMemPoolGetAccess(flags: *mut u32, pool: *mut c_void, loc: *const u8) {
        rt(super::pool::cudaMemPoolGetAccess(flags, pool, loc))
    }
    fn cuDeviceGetDefaultMemPool(pool: *mut *mut c_void, dev: i32) {
        rt(super::pool::cudaDeviceGetDefaultMemPool(pool, dev))
    }
    fn cuDeviceGetMemPool(pool: *mut *mut c_void, dev: i32) {
        rt(super::pool::cudaDeviceGetMemPool(pool, dev))
    }
    fn cuDeviceSetMemPool(dev: i32, pool: *mut c_void) {
        rt(super::pool::cudaDeviceSetMemPool(dev, pool))
    }
    fn cuMemcpy2D_v2(p: *const u8) {
        memcpy2d(p, 0, true)
    }
    fn cuMemcpy2DUnaligned_v2(p: *const u8) {
        memcpy2d(p, 0, true)
    }
    fn cuMemcpy2DAsync_v2(p: *const u8, stream: *mut c_void) {
        memcpy2d(p, stream as u64, false)
    }
    fn cuMemcpy3D_v2(p: *const u8) {
        memcpy3d(p, 0, true)
    }
    fn cuMemcpy3DAsync_v2(p: *const u8, stream: *mut c_void) {
        memcpy3d(p, stream as u64, false)
    }
    fn cuMemsetD2D8_v2(dst: u64, pitch: usize, v: u8, width: usize, height: usize) {
        memset2d(dst, pitch, v as u32, 1, width, height, 0, true)
    }
    fn cuMemsetD2D16_v2(dst: u64, pitch: usize, v: u16, width: usize, height: usize) {
        memset2d(dst, pitch, v as u32, 2, width, height, 0, true)
    }
    fn cuMemsetD2D32_v2(dst: u64, pitch: usize, v: u32, width: usize, height: usize) {
        memset2d(dst, pitch, v, 4, width, height, 0, true)
    }
    fn cuMemsetD2D8Async(dst: u64, pitch: usize, v: u8, width: usize, height: usize, stream: *mut c_void) {
        memset2d(dst, pitch, v as u32, 1, width, height, stream as u64, false)
    }
    fn cuMemsetD2D16Async(dst: u64, pitch: usize, v: u16, width: usize, height: usize, stream: *mut c_void) {
        memset2d(dst, pitch, v as u32, 2, width, height, stream as u64, false)
    }
    fn cuMemsetD2D32Async(dst: u64, pitch: usize, v: u32, width: usize, height: usize, stream: *mut c_void) {
        memset2d(dst, pitch, v, 4, width, height, stream as u64, false)
    }
    fn cuArrayCreate_v2(handle: *mut *mut c_void, desc: *const u8) {
        let (w, h): (usize, usize) = (field(desc, 0)?, field(desc, 8)?);
        let cd = channel_desc(field(desc, 16)?, field(desc, 20)?)?;
        rt(super::array::cudaMallocArray(handle, &cd, w, h, 0))
    }
    fn cuArray3DCreate_v2(handle: *mut *mut c_void, desc: *const u8) {
        let extent = Extent { width: field(desc, 0)?, height: field(desc, 8)?, depth: field(desc, 16)? };
        let cd = channel_desc(field(desc, 24)?, field(desc, 28)?)?;
        // CUDA_ARRAY3D_LAYERED, _SURFACE_LDST, _CUBEMAP, _TEXTURE_GATHER: the runtime's values.
        rt(super::array::cudaMalloc3DArray(handle, &cd, extent, field(desc, 32)?))
    }
    fn cuArrayDestroy(handle: *mut c_void) {
        if handle.is_null() {
            return Err(cuda::ERROR_INVALID_RESOURCE_HANDLE);
        }
        rt(super::array::cudaFreeArray(handle))
    }
    fn cuArrayGetDescriptor_v2(desc: *mut [u64; 3], handle: *mut c_void) {
        let a = super::array::array(handle)?;
        let (format, channels) = array_format(&a.desc);
        out(desc, [a.extent[0] as u64, a.extent[1] as u64, format as u64 | (channels as u64) << 32])
    }
    fn cuArray3DGetDescriptor_v2(desc: *mut [u64; 5], handle: *mut c_void) {
        let a = super::array::array(handle)?;
        let (format, channels) = array_format(&a.desc);
        let e = a.extent;
        out(desc, [e[0] as u64, e[1] as u64, e[2] as u64, format as u64 | (channels as u64) << 32, a.flags as u64])
    }
    fn cuTexObjectCreate(tex: *mut u64, res: *const u8, tdesc: *const u8, view: *const u8) {
        if !view.is_null() {
            return Err(crate::errors::unsupported("cuTexObjectCreate (resource views)"));
        }
        let r = runtime_res(res)?;
        let t = runtime_tex(tdesc, res)?;
        rt(super::device::cudaCreateTextureObject(tex, r.as_ptr(), t.as_ptr(), std::ptr::null()))?;
        let kept: [u8; RES_SIZE] = read(res.cast())?;
        TEX_RES.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(HashMap::new).insert(read(tex)?, kept);
        Ok(())
    }
    fn cuTexObjectDestroy(tex: u64) {
        rt(super::device::cudaDestroyTextureObject(tex))?;
        if let Some(m) = TEX_RES.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            m.remove(&tex);
        }
        Ok(())
    }
    fn cuTexObjectGetResourceDesc(res: *mut [u8; RES_SIZE], tex: u64) {
        let r = TEX_RES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .and_then(|m| m.get(&tex).copied())
            .ok_or(cuda::ERROR_INVALID_VALUE)?;
        out(res, r)
    }
}
