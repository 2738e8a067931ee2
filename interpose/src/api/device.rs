//! Device management, versions, errors, limits and texture objects. The device is the one the
//! proxy drives (device 0; properties from the proxy).
#![allow(unsafe_code, non_upper_case_globals)]

use std::ffi::{c_char, c_void};

use crum_wire::{cuda, Body, Request, TexDesc, TexMip};

use crate::abi_gen::*;
use crate::client::call;
use crate::errors::{self, CudaResult};
use crate::ffi::*;
use crate::state::*;

/// The CUDA version this runtime implements (CUDART_VERSION of the 13.x headers).
pub const RUNTIME_VERSION: i32 = 13050;

fn check_device(dev: i32) -> CudaResult<()> {
    if dev == 0 {
        Ok(())
    } else {
        Err(cuda::ERROR_INVALID_DEVICE)
    }
}

/// `cudaDeviceGetAttribute` for the device in use.
fn attribute(attr: u32) -> CudaResult<i32> {
    let p = props()?;
    let b = |x: bool| x as i32;
    Ok(match attr {
        cudaDevAttrMaxThreadsPerBlock => p.max_threads_per_block,
        cudaDevAttrMaxBlockDimX => p.max_block[0],
        cudaDevAttrMaxBlockDimY => p.max_block[1],
        cudaDevAttrMaxBlockDimZ => p.max_block[2],
        cudaDevAttrMaxGridDimX => p.max_grid[0],
        cudaDevAttrMaxGridDimY => p.max_grid[1],
        cudaDevAttrMaxGridDimZ => p.max_grid[2],
        cudaDevAttrMaxSharedMemoryPerBlock => p.shared_per_block as i32,
        cudaDevAttrTotalConstantMemory => p.const_mem as i32,
        cudaDevAttrWarpSize => p.warp_size,
        cudaDevAttrMaxPitch => i32::MAX,
        cudaDevAttrMaxRegistersPerBlock => p.regs_per_block,
        cudaDevAttrClockRate => p.clock_khz,
        cudaDevAttrTextureAlignment => 512,
        cudaDevAttrGpuOverlap => 1,
        cudaDevAttrMultiProcessorCount => p.multiprocessors,
        cudaDevAttrKernelExecTimeout => 0,
        cudaDevAttrIntegrated => 0,
        cudaDevAttrCanMapHostMemory => 1,
        cudaDevAttrComputeMode => 0,
        cudaDevAttrConcurrentKernels => b(p.concurrent_kernels),
        cudaDevAttrEccEnabled => 0,
        cudaDevAttrPciBusId => p.pci_bus_id,
        cudaDevAttrPciDeviceId => 0,
        cudaDevAttrPciDomainId => 0,
        cudaDevAttrTccDriver => 0,
        cudaDevAttrMemoryClockRate => p.mem_clock_khz,
        cudaDevAttrGlobalMemoryBusWidth => p.mem_bus_width,
        cudaDevAttrL2CacheSize => p.l2_bytes,
        cudaDevAttrMaxThreadsPerMultiProcessor => p.max_threads_per_sm,
        cudaDevAttrAsyncEngineCount => 2,
        cudaDevAttrUnifiedAddressing => 1,
        cudaDevAttrComputeCapabilityMajor => p.major,
        cudaDevAttrComputeCapabilityMinor => p.minor,
        cudaDevAttrStreamPrioritiesSupported => 1,
        cudaDevAttrGlobalL1CacheSupported => 1,
        cudaDevAttrLocalL1CacheSupported => 1,
        cudaDevAttrMaxSharedMemoryPerMultiprocessor => p.shared_per_sm as i32,
        cudaDevAttrMaxRegistersPerMultiprocessor => p.regs_per_sm,
        cudaDevAttrManagedMemory => b(p.managed),
        cudaDevAttrIsMultiGpuBoard => 0,
        cudaDevAttrHostNativeAtomicSupported => 0,
        cudaDevAttrPageableMemoryAccess => 0,
        cudaDevAttrComputePreemptionSupported => 1,
        cudaDevAttrCanUseHostPointerForRegisteredMem => 1,
        cudaDevAttrCooperativeLaunch => b(p.cooperative_launch),
        cudaDevAttrMaxSharedMemoryPerBlockOptin => p.shared_per_block_optin as i32,
        cudaDevAttrDirectManagedMemAccessFromHost => 1,
        cudaDevAttrMaxBlocksPerMultiprocessor => p.max_blocks_per_sm,
        cudaDevAttrReservedSharedMemoryPerBlock => 1024,
        cudaDevAttrHostRegisterSupported => 1,
        cudaDevAttrMemoryPoolsSupported => 1,
        cudaDevAttrMaxTexture1DWidth => 131072,
        cudaDevAttrMaxTexture2DWidth | cudaDevAttrMaxTexture2DHeight => 131072,
        cudaDevAttrMaxTexture3DWidth
        | cudaDevAttrMaxTexture3DHeight
        | cudaDevAttrMaxTexture3DDepth => 16384,
        // Mipmapped arrays (`api::mipmap`), with an A100's limits.
        cudaDevAttrMaxTexture1DMipmappedWidth
        | cudaDevAttrMaxTexture2DMipmappedWidth
        | cudaDevAttrMaxTexture2DMipmappedHeight => 32768,
        cudaDevAttrSingleToDoublePrecisionPerfRatio => 2,
        // Texture and surface limits (those of an sm_80 device; the emulated device has no
        // smaller ones). Before, these valid attributes answered cudaErrorInvalidValue.
        cudaDevAttrMaxTexture1DLayeredWidth
        | cudaDevAttrMaxTexture2DLayeredWidth
        | cudaDevAttrMaxTexture2DLayeredHeight
        | cudaDevAttrMaxTexture2DGatherWidth
        | cudaDevAttrMaxTexture2DGatherHeight
        | cudaDevAttrMaxTextureCubemapWidth
        | cudaDevAttrMaxTextureCubemapLayeredWidth
        | cudaDevAttrMaxSurface1DWidth
        | cudaDevAttrMaxSurface1DLayeredWidth
        | cudaDevAttrMaxSurface2DLayeredWidth
        | cudaDevAttrMaxSurface2DLayeredHeight
        | cudaDevAttrMaxSurfaceCubemapWidth
        | cudaDevAttrMaxSurfaceCubemapLayeredWidth
        | cudaDevAttrMaxTexture3DDepthAlt => 32768,
        cudaDevAttrMaxTexture1DLayeredLayers
        | cudaDevAttrMaxTexture2DLayeredLayers
        | cudaDevAttrMaxSurface1DLayeredLayers
        | cudaDevAttrMaxSurface2DLayeredLayers => 2048,
        cudaDevAttrMaxTextureCubemapLayeredLayers | cudaDevAttrMaxSurfaceCubemapLayeredLayers => 2046,
        cudaDevAttrMaxTexture3DWidthAlt | cudaDevAttrMaxTexture3DHeightAlt => 8192,
        cudaDevAttrMaxSurface2DWidth | cudaDevAttrMaxTexture2DLinearWidth => 131072,
        cudaDevAttrMaxSurface2DHeight => 65536,
        cudaDevAttrMaxTexture2DLinearHeight => 65000,
        cudaDevAttrMaxTexture2DLinearPitch => 2097120,
        cudaDevAttrMaxSurface3DWidth | cudaDevAttrMaxSurface3DHeight | cudaDevAttrMaxSurface3DDepth => 16384,
        cudaDevAttrMaxTexture1DLinearWidth => TEXTURE_1D_LINEAR_MAX,
        cudaDevAttrSurfaceAlignment => 512,
        cudaDevAttrTexturePitchAlignment => 32,
        // One device, one board, one locality domain holding every multiprocessor, one
        // memory synchronization domain; no NUMA node of its own.
        cudaDevAttrMultiGpuBoardGroupID | cudaDevAttrGpuPciDeviceId | cudaDevAttrGpuPciSubsystemId => 0,
        cudaDevAttrMemSyncDomainCount | cudaDevAttrLocalityDomainCount => 1,
        cudaDevAttrLocalityDomainMultiprocessorCount => p.multiprocessors,
        cudaDevAttrNumaConfig => 0,
        cudaDevAttrNumaId | cudaDevAttrHostNumaId => -1,
        cudaDevAttrOversizedSharedMemoryPerBlock => 0,
        // No TMA "large tensor" distinction: CUDA documents INT_MAX for such devices.
        cudaDevAttrTensorMapLargeTensorMinSize => i32::MAX,
        a if ABSENT_FEATURES.contains(&a) => 0,
        cudaDevAttrMaxPersistingL2CacheSize => p.max_persisting_l2,
        cudaDevAttrMaxAccessPolicyWindowSize => p.max_access_policy_window,
        _ => return Err(cuda::ERROR_INVALID_VALUE),
    })
}

fn fill_props(prop: *mut u8) -> CudaResult<()> {
    let p = props()?;
    zero(prop, CUDADEVICEPROP_SIZE)?;
    let name = p.name.as_bytes();
    for (i, &c) in name.iter().take(255).enumerate() {
        set_field(prop, CUDADEVICEPROP_NAME + i, c);
    }
    set_field(prop, CUDADEVICEPROP_UUID, p.uuid);
    set_field(prop, CUDADEVICEPROP_TOTALGLOBALMEM, p.total_mem as usize);
    set_field(
        prop,
        CUDADEVICEPROP_SHAREDMEMPERBLOCK,
        p.shared_per_block as usize,
    );
    set_field(prop, CUDADEVICEPROP_REGSPERBLOCK, p.regs_per_block);
    set_field(prop, CUDADEVICEPROP_WARPSIZE, p.warp_size);
    set_field(prop, CUDADEVICEPROP_MEMPITCH, i32::MAX as usize);
    set_field(
        prop,
        CUDADEVICEPROP_MAXTHREADSPERBLOCK,
        p.max_threads_per_block,
    );
    set_field(prop, CUDADEVICEPROP_MAXTHREADSDIM, p.max_block);
    set_field(prop, CUDADEVICEPROP_MAXGRIDSIZE, p.max_grid);
    set_field(prop, CUDADEVICEPROP_TOTALCONSTMEM, p.const_mem as usize);
    set_field(prop, CUDADEVICEPROP_MAJOR, p.major);
    set_field(prop, CUDADEVICEPROP_MINOR, p.minor);
    set_field(prop, CUDADEVICEPROP_TEXTUREALIGNMENT, 512usize);
    set_field(prop, CUDADEVICEPROP_TEXTUREPITCHALIGNMENT, 32usize);
    set_field(prop, CUDADEVICEPROP_MULTIPROCESSORCOUNT, p.multiprocessors);
    set_field(prop, CUDADEVICEPROP_CANMAPHOSTMEMORY, 1i32);
    set_field(prop, CUDADEVICEPROP_MAXTEXTURE1D, 131072i32);
    set_field(prop, CUDADEVICEPROP_MAXTEXTURE2D, [131072i32, 65536]);
    set_field(prop, CUDADEVICEPROP_MAXTEXTURE3D, [16384i32, 16384, 16384]);
    set_field(
        prop,
        CUDADEVICEPROP_CONCURRENTKERNELS,
        p.concurrent_kernels as i32,
    );
    set_field(prop, CUDADEVICEPROP_PCIBUSID, p.pci_bus_id);
    set_field(prop, CUDADEVICEPROP_ASYNCENGINECOUNT, 2i32);
    set_field(prop, CUDADEVICEPROP_UNIFIEDADDRESSING, 1i32);
    set_field(prop, CUDADEVICEPROP_MEMORYBUSWIDTH, p.mem_bus_width);
    set_field(prop, CUDADEVICEPROP_L2CACHESIZE, p.l2_bytes);
    set_field(prop, CUDADEVICEPROP_PERSISTINGL2CACHEMAXSIZE, p.max_persisting_l2);
    set_field(prop, CUDADEVICEPROP_ACCESSPOLICYMAXWINDOWSIZE, p.max_access_policy_window);
    set_field(
        prop,
        CUDADEVICEPROP_MAXTHREADSPERMULTIPROCESSOR,
        p.max_threads_per_sm,
    );
    set_field(prop, CUDADEVICEPROP_STREAMPRIORITIESSUPPORTED, 1i32);
    set_field(prop, CUDADEVICEPROP_GLOBALL1CACHESUPPORTED, 1i32);
    set_field(prop, CUDADEVICEPROP_LOCALL1CACHESUPPORTED, 1i32);
    set_field(
        prop,
        CUDADEVICEPROP_SHAREDMEMPERMULTIPROCESSOR,
        p.shared_per_sm as usize,
    );
    set_field(prop, CUDADEVICEPROP_REGSPERMULTIPROCESSOR, p.regs_per_sm);
    set_field(prop, CUDADEVICEPROP_MANAGEDMEMORY, p.managed as i32);
    set_field(prop, CUDADEVICEPROP_CONCURRENTMANAGEDACCESS, 0i32);
    set_field(prop, CUDADEVICEPROP_COMPUTEPREEMPTIONSUPPORTED, 1i32);
    set_field(prop, CUDADEVICEPROP_CANUSEHOSTPOINTERFORREGISTEREDMEM, 1i32);
    set_field(
        prop,
        CUDADEVICEPROP_COOPERATIVELAUNCH,
        p.cooperative_launch as i32,
    );
    set_field(
        prop,
        CUDADEVICEPROP_SHAREDMEMPERBLOCKOPTIN,
        p.shared_per_block_optin as usize,
    );
    set_field(prop, CUDADEVICEPROP_DIRECTMANAGEDMEMACCESSFROMHOST, 1i32);
    set_field(
        prop,
        CUDADEVICEPROP_MAXBLOCKSPERMULTIPROCESSOR,
        p.max_blocks_per_sm,
    );
    set_field(prop, CUDADEVICEPROP_RESERVEDSHAREDMEMPERBLOCK, 1024usize);
    set_field(prop, CUDADEVICEPROP_HOSTREGISTERSUPPORTED, 1i32);
    set_field(prop, CUDADEVICEPROP_MEMORYPOOLSSUPPORTED, 1i32);
    Ok(())
}

/// Attributes of features crum does not offer, reported 0 (absent) so programs that check
/// skip them; their entry points return the documented error (`abi/unsupported.txt`,
/// docs/runtime-api-coverage.md; a test checks that every attribute named there is here).
pub const ABSENT_FEATURES: &[u32] = &[
    // Shadow pages: the host must not touch managed memory while kernels run.
    cudaDevAttrConcurrentManagedAccess,
    cudaDevAttrIpcEventSupport,
    // No IPC handle types (cudaMemHandleTypeNone).
    cudaDevAttrMemoryPoolSupportedHandleTypes,
    cudaDevAttrSparseCudaArraySupported,
    cudaDevAttrDeferredMappingCudaArraySupported,
    cudaDevAttrTimelineSemaphoreInteropSupported,
    cudaDevAttrGPUDirectRDMASupported,
    cudaDevAttrGPUDirectRDMAFlushWritesOptions,
    cudaDevAttrGPUDirectRDMAWritesOrdering,
    cudaDevAttrClusterLaunch,
    cudaDevAttrCanFlushRemoteWrites,
    cudaDevAttrPageableMemoryAccessUsesHostPageTables,
    // Pools hold device memory only.
    cudaDevAttrHostMemoryPoolsSupported,
    cudaDevAttrHostNumaMemoryPoolsSupported,
    cudaDevAttrHostNumaMultinodeIpcSupported,
    // No graphics API shares a context with the proxy's device.
    cudaDevAttrD3D12CigSupported,
    cudaDevAttrVulkanCigSupported,
    cudaDevAttrCigStreamsSupported,
    // The proxy is the device's only client process, not an MPS server's.
    cudaDevAttrMpsEnabled,
    // `cudaHostRegisterReadOnly` is not accepted; host atomics are all or none; no stream
    // batch memory operations.
    cudaDevAttrHostRegisterReadOnlySupported,
    cudaDevAttrOnlyPartialHostNativeAtomicSupported,
    cudaDevAttrAtomicReductionSupported,
];

/// Elements of a 1-D texture over linear memory (`cudaDevAttrMaxTexture1DLinearWidth`,
/// `cudaDeviceGetTexture1DLinearMaxWidth`): 2^28, as on sm_80.
const TEXTURE_1D_LINEAR_MAX: i32 = 1 << 28;

/// The last `cudaAtomicOperation` (cudaAtomicOperationFloatMax).
const ATOMIC_OP_LAST: u32 = 12;

/// The device heap size the program set (`cudaLimitMallocHeapSize`), if it did.
pub(crate) fn heap_limit() -> Option<u64> {
    state().limits.lock().unwrap_or_else(|p| p.into_inner()).get(&cudaLimitMallocHeapSize).copied()
}

/// Default limits (`cudaLimit`): stack size, printf FIFO, malloc heap.
fn default_limit(limit: u32) -> Option<u64> {
    match limit {
        cudaLimitStackSize => Some(1024),
        // What CUDA 13 reports before any printf (an H200: 8.25 MiB; the documentation's 1 MiB
        // is older drivers').
        cudaLimitPrintfFifoSize => Some(8_650_752),
        cudaLimitMallocHeapSize => Some(8 << 20),
        cudaLimitDevRuntimeSyncDepth => Some(2),
        cudaLimitDevRuntimePendingLaunchCount => Some(2048),
        cudaLimitMaxL2FetchGranularity => Some(64),
        cudaLimitPersistingL2CacheSize => Some(0),
        _ => None,
    }
}

#[no_mangle]
pub extern "C" fn cudaGetErrorString(code: u32) -> *const c_char {
    static STRINGS: std::sync::OnceLock<std::collections::HashMap<u32, std::ffi::CString>> =
        std::sync::OnceLock::new();
    intern(&STRINGS, code, cuda::description)
}

#[no_mangle]
pub extern "C" fn cudaGetErrorName(code: u32) -> *const c_char {
    static NAMES: std::sync::OnceLock<std::collections::HashMap<u32, std::ffi::CString>> =
        std::sync::OnceLock::new();
    intern(&NAMES, code, cuda::name)
}

/// C strings for every known code, built once (the pointers stay valid forever).
fn intern(
    cell: &'static std::sync::OnceLock<std::collections::HashMap<u32, std::ffi::CString>>,
    code: u32,
    f: fn(u32) -> &'static str,
) -> *const c_char {
    let map = cell.get_or_init(|| {
        (0..1100u32)
            .chain([u32::MAX])
            .map(|c| (c, std::ffi::CString::new(f(c)).unwrap_or_default()))
            .collect()
    });
    map.get(&code)
        .or_else(|| map.get(&u32::MAX))
        .map_or(std::ptr::null(), |s| s.as_ptr())
}

#[no_mangle]
pub extern "C" fn cudaGetLastError() -> u32 {
    errors::take_last()
}

#[no_mangle]
pub extern "C" fn cudaPeekAtLastError() -> u32 {
    errors::peek_last()
}

/// `cudaChannelFormatDesc`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelFormatDesc {
    pub x: i32,
    pub y: i32,
    pub z: i32,
    pub w: i32,
    pub f: u32,
}

#[no_mangle]
pub extern "C" fn cudaCreateChannelDesc(
    x: i32,
    y: i32,
    z: i32,
    w: i32,
    f: u32,
) -> ChannelFormatDesc {
    ChannelFormatDesc { x, y, z, w, f }
}

crate::export! {
    fn cudaGetDeviceCount(count: *mut i32) {
        crate::client::ensure()?;
        out(count, 1)
    }
    fn cudaGetDevice(dev: *mut i32) {
        out(dev, 0)
    }
    fn cudaSetDevice(dev: i32) {
        check_device(dev)?;
        crate::client::ensure()
    }
    fn cudaInitDevice(dev: i32, _device_flags: u32, _flags: u32) {
        check_device(dev)?;
        crate::client::ensure()
    }
    fn cudaChooseDevice(dev: *mut i32, _prop: *const c_void) {
        out(dev, 0)
    }
    fn cudaSetValidDevices(_list: *mut i32, _len: i32) {
        Ok(())
    }
    fn cudaGetDeviceProperties(prop: *mut u8, dev: i32) {
        check_device(dev)?;
        fill_props(prop)
    }
    fn cudaDeviceGetTexture1DLinearMaxWidth(max_width: *mut usize, desc: *const ChannelFormatDesc, dev: i32) {
        check_device(dev)?;
        // The format must be one a texture can have; the limit is in elements of any size.
        super::array::elem_bytes(&read(desc)?)?;
        out(max_width, TEXTURE_1D_LINEAR_MAX as usize)
    }
    fn cudaDeviceGetAttribute(value: *mut i32, attr: u32, dev: i32) {
        check_device(dev)?;
        out(value, attribute(attr)?)
    }
    fn cudaDeviceGetPCIBusId(buf: *mut c_char, len: i32, dev: i32) {
        check_device(dev)?;
        let s = b"0000:00:00.0\0";
        if buf.is_null() || (len as usize) < s.len() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        for (i, &c) in s.iter().enumerate() {
            set_field(buf as *mut u8, i, c);
        }
        Ok(())
    }
    fn cudaDeviceGetByPCIBusId(dev: *mut i32, _bus: *const c_char) {
        out(dev, 0)
    }
    fn cudaDeviceSynchronize() {
        crate::capture::forbid_unsafe()?;
        call(&Request::DeviceSync)?;
        crate::pool::after_sync();
        Ok(())
    }
    fn cudaDeviceReset() {
        call(&Request::DeviceReset)?;
        errors::clear_sticky();
        let s = state();
        let shared: Vec<(u64, u64)> = {
            let mut g = s.allocs.write().unwrap_or_else(|p| p.into_inner());
            let v = g.iter().filter(|(_, r)| r.kind == MemKind::Pinned).map(|(&a, r)| (a, r.len)).collect();
            g.retain(|_, r| r.kind == MemKind::Registered);
            v
        };
        for (a, l) in shared {
            crate::client::unmap_shared(a, l);
        }
        crate::managed::unregister_all();
        crate::managed::advice::clear();
        s.streams.lock().unwrap_or_else(|p| p.into_inner()).clear();
        s.limits.lock().unwrap_or_else(|p| p.into_inner()).remove(&cudaLimitPersistingL2CacheSize);
        super::stream_attrs::reset();
        // The device's memory is gone: so are its pools' blocks, graphs and captures.
        crate::capture::reset();
        crate::graph::reset();
        crate::api::graph::reset_graph_mem();
        crate::pool::reset();
        with_textures(|m| m.clear());
        Ok(())
    }
    fn cudaThreadSynchronize() {
        crate::capture::forbid_unsafe()?;
        call(&Request::DeviceSync)?;
        crate::pool::after_sync();
        Ok(())
    }
    fn cudaDeviceSetLimit(limit: u32, value: usize) {
        default_limit(limit).ok_or(cuda::ERROR_UNSUPPORTED_LIMIT)?;
        let value = if limit == cudaLimitPersistingL2CacheSize {
            super::stream_attrs::set_persisting_limit(value as u64)?
        } else if limit == cudaLimitMallocHeapSize {
            // The device makes its heap at the first kernel that allocates, of this size.
            crate::client::call(&crum_wire::Request::SetHeapLimit { bytes: value as u64 })?;
            value as u64
        } else {
            value as u64
        };
        state().limits.lock().unwrap_or_else(|p| p.into_inner()).insert(limit, value);
        Ok(())
    }
    fn cudaDeviceGetLimit(value: *mut usize, limit: u32) {
        let d = default_limit(limit).ok_or(cuda::ERROR_UNSUPPORTED_LIMIT)?;
        let v = state().limits.lock().unwrap_or_else(|p| p.into_inner()).get(&limit).copied().unwrap_or(d);
        out(value, v as usize)
    }
    fn cudaSetDeviceFlags(flags: u32) {
        *state().device_flags.lock().unwrap_or_else(|p| p.into_inner()) = flags;
        Ok(())
    }
    fn cudaGetDeviceFlags(flags: *mut u32) {
        // cudaDeviceMapHost is always on with unified addressing.
        out(flags, *state().device_flags.lock().unwrap_or_else(|p| p.into_inner()) | 0x08)
    }
    fn cudaDeviceSetCacheConfig(_config: u32) {
        Ok(())
    }
    fn cudaDeviceGetCacheConfig(config: *mut u32) {
        out(config, 0)
    }
    fn cudaDeviceSetSharedMemConfig(_config: u32) {
        Ok(())
    }
    fn cudaDeviceGetSharedMemConfig(config: *mut u32) {
        out(config, 1)
    }
    fn cudaDeviceCanAccessPeer(can: *mut i32, dev: i32, peer: i32) {
        check_device(dev)?;
        check_device(peer).map_err(|_| cuda::ERROR_INVALID_DEVICE)?;
        out(can, 0)
    }
    // One device: every pair a peer query can name is the same device or not a device,
    // which CUDA answers with cudaErrorInvalidDevice.
    fn cudaDeviceGetP2PAttribute(_value: *mut i32, _attr: u32, _src: i32, _dst: i32) {
        Err(cuda::ERROR_INVALID_DEVICE)
    }
    fn cudaDeviceGetP2PAtomicCapabilities(_caps: *mut u32, _ops: *const u32, _count: u32, _src: i32, _dst: i32) {
        Err(cuda::ERROR_INVALID_DEVICE)
    }
    fn cudaDeviceGetHostAtomicCapabilities(caps: *mut u32, ops: *const u32, count: u32, dev: i32) {
        check_device(dev)?;
        if caps.is_null() || ops.is_null() || count == 0 {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        // Check every operation (cudaAtomicOperation 0..=12) before writing anything.
        for i in 0..count as usize {
            if read(ops.wrapping_add(i))? > ATOMIC_OP_LAST {
                return Err(cuda::ERROR_INVALID_VALUE);
            }
        }
        // No operation is native over the link to the host (cudaDevAttrHostNativeAtomicSupported
        // is 0): the host and the device never touch managed memory at the same time here.
        for i in 0..count as usize {
            out(caps.wrapping_add(i), 0u32)?;
        }
        Ok(())
    }
    fn cudaDeviceEnablePeerAccess(_peer: i32, _flags: u32) {
        Err(cuda::ERROR_INVALID_DEVICE)
    }
    fn cudaDeviceDisablePeerAccess(_peer: i32) {
        Err(cuda::ERROR_PEER_ACCESS_NOT_ENABLED)
    }
    fn cudaDriverGetVersion(v: *mut i32) {
        out(v, RUNTIME_VERSION)
    }
    fn cudaRuntimeGetVersion(v: *mut i32) {
        out(v, RUNTIME_VERSION)
    }
    fn cudaProfilerStart() {
        Ok(())
    }
    fn cudaProfilerStop() {
        Ok(())
    }
    fn cudaCreateTextureObject(tex: *mut u64, res: *const u8, tdesc: *const u8, view: *const u8) {
        if tex.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let desc = texture_desc(res, tdesc)?;
        let kept = TexDescriptors {
            res: copy_in(res, CUDARESOURCEDESC_SIZE)?,
            tex: copy_in(tdesc, CUDATEXTUREDESC_SIZE)?,
            view: if view.is_null() { None } else { Some(copy_in(view, CUDARESOURCEVIEWDESC_SIZE)?) },
        };
        let Body::Value(h) = call(&Request::TexCreate { desc })? else { return Err(cuda::ERROR_UNKNOWN) };
        with_textures(|m| m.insert(h, kept));
        out(tex, h)
    }
    fn cudaDestroyTextureObject(tex: u64) {
        call(&Request::TexDestroy { tex })?;
        with_textures(|m| m.remove(&tex));
        Ok(())
    }
    fn cudaCreateSurfaceObject(surf: *mut u64, res: *const u8) {
        let (desc, array) = surface_desc(res)?;
        let Body::Value(h) = call(&Request::TexCreate { desc })? else { return Err(cuda::ERROR_UNKNOWN) };
        SURFACES.lock().unwrap_or_else(|p| p.into_inner()).insert(h, array);
        out(surf, h)
    }
    fn cudaDestroySurfaceObject(surf: u64) {
        if SURFACES.lock().unwrap_or_else(|p| p.into_inner()).remove(&surf).is_none() {
            return Err(cuda::ERROR_INVALID_RESOURCE_HANDLE);
        }
        call(&Request::TexDestroy { tex: surf }).map(|_| ())
    }
    fn cudaGetSurfaceObjectResourceDesc(res: *mut u8, surf: u64) {
        let array = SURFACES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&surf)
            .copied()
            .ok_or(cuda::ERROR_INVALID_RESOURCE_HANDLE)?;
        zero(res, CUDARESOURCEDESC_SIZE)?;
        set_field(res, CUDARESOURCEDESC_RESTYPE, 0u32);
        // res.array.array sits at the start of the union, like res.linear.devPtr.
        set_field(res, CUDARESOURCEDESC_RES_LINEAR_DEVPTR, array);
        Ok(())
    }
    fn cudaGetTextureObjectResourceDesc(res: *mut u8, tex: u64) {
        let d = with_textures(|m| m.get(&tex).map(|d| d.res.clone())).ok_or(cuda::ERROR_INVALID_VALUE)?;
        copy_out(res, &d)
    }
    fn cudaGetTextureObjectTextureDesc(tdesc: *mut u8, tex: u64) {
        let d = with_textures(|m| m.get(&tex).map(|d| d.tex.clone())).ok_or(cuda::ERROR_INVALID_VALUE)?;
        copy_out(tdesc, &d)
    }
    fn cudaGetTextureObjectResourceViewDesc(view: *mut u8, tex: u64) {
        // A texture created without a view has none to report (CUDA: invalid value).
        let d = with_textures(|m| m.get(&tex).and_then(|d| d.view.clone())).ok_or(cuda::ERROR_INVALID_VALUE)?;
        copy_out(view, &d)
    }
}


/// Live surface objects: handle (the proxy's, shared with textures) → the array they cover.
static SURFACES: std::sync::Mutex<std::collections::BTreeMap<u64, u64>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// A surface object's memory, from its `cudaResourceDesc`: an array (any other resource is
/// cudaErrorInvalidValue). The documentation asks for arrays made with
/// `cudaArraySurfaceLoadStore`, but CUDA 13 takes any array (measured on an H200,
/// `cuda_facts.cu`), and so does crum. Returns the description (sampling fields unused:
/// `suld`/`sust` carry their own boundary mode) and the array handle.
fn surface_desc(res: *const u8) -> CudaResult<(TexDesc, u64)> {
    let ty: u32 = field(res, CUDARESOURCEDESC_RESTYPE)?;
    if ty != 0 {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let handle: u64 = field(res, CUDARESOURCEDESC_RES_LINEAR_DEVPTR)?;
    let a = super::array::array(handle as *const c_void)?;
    if a.layered() {
        return Err(crate::errors::unsupported("cudaCreateSurfaceObject (layered arrays)"));
    }
    let d = a.desc;
    // 1-D, 2-D and 3-D arrays: slices of `height` rows, `pitch * height` bytes apart, as the
    // engine addresses a surface's z.
    let desc = TexDesc {
        base: a.base,
        width: a.width,
        height: a.height,
        depth: a.depth.max(1),
        pitch: a.pitch,
        bits: [d.x as u32, d.y as u32, d.z as u32, d.w as u32],
        format_kind: d.f,
        address_mode: [0; 3],
        filter_mode: 0,
        read_mode: 0,
        normalized: false,
        mip: None,
    };
    Ok((desc, handle))
}


/// The descriptors a texture object was created from, as the program gave them (what
/// `cudaGetTextureObject*Desc` report). Kept in the interposer, so they survive a restart
/// with the program's memory; the proxy re-creates the object behind the same handle.
struct TexDescriptors {
    res: Vec<u8>,
    tex: Vec<u8>,
    view: Option<Vec<u8>>,
}

static TEXTURES: std::sync::Mutex<Option<std::collections::HashMap<u64, TexDescriptors>>> =
    std::sync::Mutex::new(None);

fn with_textures<R>(f: impl FnOnce(&mut std::collections::HashMap<u64, TexDescriptors>) -> R) -> R {
    let mut g = TEXTURES.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(Default::default))
}

/// A copy of the `len`-byte struct the program passed at `p`.
fn copy_in(p: *const u8, len: usize) -> CudaResult<Vec<u8>> {
    (0..len).map(|i| field::<u8>(p, i)).collect()
}

/// Write `bytes` to the program's out-struct at `p` (of that size).
fn copy_out(p: *mut u8, bytes: &[u8]) -> CudaResult<()> {
    zero(p, bytes.len())?;
    for (i, &b) in bytes.iter().enumerate() {
        set_field(p, i, b);
    }
    Ok(())
}

/// `cudaResourceDesc` + `cudaTextureDesc` → the wire description (linear and pitch-2D
/// memory, arrays, mipmapped arrays: level 0 as the texture, every level in `mip`).
fn texture_desc(res: *const u8, tdesc: *const u8) -> CudaResult<TexDesc> {
    let ty: u32 = field(res, CUDARESOURCEDESC_RESTYPE)?;
    // cudaResourceType: 0 array, 1 mipmapped array, 2 linear, 3 pitch2D.
    let mut depth = 1;
    let mut mip = None;
    let mut array_handle = 0u64;
    if ty == 1 {
        let handle: u64 = field(res, CUDARESOURCEDESC_RES_MIPMAP_MIPMAP)?;
        let levels = super::mipmap::texture_levels(handle)?;
        array_handle = *super::mipmap::mipmap(handle)?.levels.first().ok_or(cuda::ERROR_INVALID_VALUE)?;
        mip = Some(TexMip {
            levels,
            filter_mode: field(tdesc, CUDATEXTUREDESC_MIPMAPFILTERMODE)?,
            bias: field(tdesc, CUDATEXTUREDESC_MIPMAPLEVELBIAS)?,
            min_clamp: field(tdesc, CUDATEXTUREDESC_MINMIPMAPLEVELCLAMP)?,
            max_clamp: field(tdesc, CUDATEXTUREDESC_MAXMIPMAPLEVELCLAMP)?,
        });
    } else if ty == 0 {
        array_handle = field(res, CUDARESOURCEDESC_RES_ARRAY_ARRAY)?;
    }
    let (base, chan, width, height, pitch) = match ty {
        2 => {
            let base: u64 = field(res, CUDARESOURCEDESC_RES_LINEAR_DEVPTR)?;
            let chan: [i32; 5] = field(res, CUDARESOURCEDESC_RES_LINEAR_DESC)?;
            let size: u64 = field(res, CUDARESOURCEDESC_RES_LINEAR_SIZEINBYTES)?;
            let bytes = (chan[..4].iter().map(|&b| b.max(0) as u64).sum::<u64>() / 8).max(1);
            (base, chan, size / bytes, 1, size)
        }
        3 => {
            let base: u64 = field(res, CUDARESOURCEDESC_RES_PITCH2D_DEVPTR)?;
            let chan: [i32; 5] = field(res, CUDARESOURCEDESC_RES_PITCH2D_DESC)?;
            let w: u64 = field(res, CUDARESOURCEDESC_RES_PITCH2D_WIDTH)?;
            let h: u64 = field(res, CUDARESOURCEDESC_RES_PITCH2D_HEIGHT)?;
            let p: u64 = field(res, CUDARESOURCEDESC_RES_PITCH2D_PITCHINBYTES)?;
            (base, chan, w, h, p)
        }
        0 | 1 => {
            let a = super::array::array(array_handle as *const c_void)?;
            let d = a.desc;
            // A layered 1-D array is read as rows of layers, every other array as slices
            // (3-D) or layers (layered 2-D) of rows.
            let rows = if a.layered() && a.extent[1] == 0 {
                a.depth
            } else {
                depth = a.depth;
                a.height
            };
            (
                a.base,
                [d.x, d.y, d.z, d.w, d.f as i32],
                a.width,
                rows,
                a.pitch,
            )
        }
        _ => return Err(cuda::ERROR_INVALID_VALUE),
    };
    if !is_device_visible(base, 1) {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    Ok(TexDesc {
        base,
        width,
        height,
        depth,
        pitch,
        bits: [
            chan[0] as u32,
            chan[1] as u32,
            chan[2] as u32,
            chan[3] as u32,
        ],
        format_kind: chan[4] as u32,
        address_mode: field(tdesc, CUDATEXTUREDESC_ADDRESSMODE)?,
        filter_mode: field(tdesc, CUDATEXTUREDESC_FILTERMODE)?,
        read_mode: field(tdesc, CUDATEXTUREDESC_READMODE)?,
        normalized: field::<i32>(tdesc, CUDATEXTUREDESC_NORMALIZEDCOORDS)? != 0,
        mip,
    })
}
