#!/usr/bin/env python3
"""Generates interpose/src/abi_gen.rs: struct offsets and enum values of the CUDA 13 runtime
ABI, measured by compiling a C program against the toolkit headers (run once per CUDA major
version: `python3 interpose/abi/gen.py $CRUM_CUDA_HOME/include > interpose/src/abi_gen.rs`)."""
import re, subprocess, sys, tempfile, os
inc = sys.argv[1]
fields = {
 'cudaDeviceProp': '''name uuid totalGlobalMem sharedMemPerBlock regsPerBlock warpSize memPitch maxThreadsPerBlock
  maxThreadsDim maxGridSize totalConstMem major minor textureAlignment texturePitchAlignment multiProcessorCount
  integrated canMapHostMemory maxTexture1D maxTexture2D maxTexture3D concurrentKernels ECCEnabled pciBusID pciDeviceID
  pciDomainID asyncEngineCount unifiedAddressing memoryBusWidth l2CacheSize persistingL2CacheMaxSize
  maxThreadsPerMultiProcessor streamPrioritiesSupported globalL1CacheSupported localL1CacheSupported
  sharedMemPerMultiprocessor regsPerMultiprocessor managedMemory isMultiGpuBoard hostNativeAtomicSupported
  pageableMemoryAccess concurrentManagedAccess computePreemptionSupported canUseHostPointerForRegisteredMem
  cooperativeLaunch sharedMemPerBlockOptin directManagedMemAccessFromHost maxBlocksPerMultiProcessor
  accessPolicyMaxWindowSize reservedSharedMemPerBlock hostRegisterSupported memoryPoolsSupported''',
 'cudaFuncAttributes': '''sharedSizeBytes constSizeBytes localSizeBytes maxThreadsPerBlock numRegs ptxVersion binaryVersion
  cacheModeCA maxDynamicSharedSizeBytes preferredShmemCarveout''',
 'cudaPointerAttributes': 'type device devicePointer hostPointer',
 'cudaLaunchConfig_t': 'gridDim blockDim dynamicSmemBytes stream attrs numAttrs',
 'cudaLaunchAttribute_st': 'id val',
 'cudaResourceDesc': 'resType res.linear.devPtr res.linear.desc res.linear.sizeInBytes res.pitch2D.devPtr res.pitch2D.desc res.pitch2D.width res.pitch2D.height res.pitch2D.pitchInBytes res.array.array res.mipmap.mipmap',
 'cudaTextureDesc': 'addressMode filterMode readMode normalizedCoords maxAnisotropy mipmapFilterMode mipmapLevelBias minMipmapLevelClamp maxMipmapLevelClamp',
 'cudaMemcpy3DParms': 'srcArray srcPos srcPtr dstArray dstPos dstPtr extent kind',
 'cudaPitchedPtr': 'ptr pitch xsize ysize',
 'cudaPos': 'x y z',
 'cudaExtent': 'width height depth',
 'cudaKernelNodeParams': 'func gridDim blockDim sharedMemBytes kernelParams extra',
 'cudaMemsetParams': 'dst pitch value elementSize width height',
 'cudaHostNodeParams': 'fn userData',
 'cudaGraphEdgeData_st': 'from_port to_port type reserved',
 'cudaGraphExecUpdateResultInfo_st': 'result errorNode errorFromNode',
 'cudaMemPoolProps': 'allocType handleTypes location maxSize usage',
 'cudaMemLocation': 'type id',
 'cudaGraphNodeParams': 'type kernel memcpy memset host graph eventWait eventRecord alloc free conditional reserved2',
 'cudaConditionalNodeParams': 'handle type size phGraph_out ctx',
 'cudaKernelNodeParamsV2': 'func gridDim blockDim sharedMemBytes kernelParams extra ctx functionType',
 'cudaMemcpyNodeParams': 'flags reserved ctx copyParams',
 'cudaMemsetParamsV2': 'dst pitch value elementSize width height ctx',
 'cudaHostNodeParamsV2': 'fn userData syncMode ctx',
 'cudaChildGraphNodeParams': 'graph ownership',
 'cudaEventRecordNodeParams': 'event ctx',
 'cudaEventWaitNodeParams': 'event',
 'cudaMemAllocNodeParams': 'poolProps accessDescs accessDescCount bytesize dptr',
 'cudaMemAllocNodeParamsV2': 'poolProps accessDescs accessDescCount bytesize dptr',
 'cudaMemFreeNodeParams': 'dptr',
 'cudaGraphInstantiateParams_st': 'flags uploadStream errNode_out result_out',
 'cudaAccessPolicyWindow': 'base_ptr num_bytes hitRatio hitProp missProp',
 'cudaResourceViewDesc': 'format width height depth',
 'cudaMemcpy3DPeerParms': 'srcArray srcPos srcPtr srcDevice dstArray dstPos dstPtr dstDevice extent',
 'cudaMemcpyAttributes': 'srcAccessOrder srcLocHint dstLocHint flags',
 'cudaMemcpy3DOperand': 'type op.ptr.ptr op.ptr.rowLength op.ptr.layerHeight op.array.array op.array.offset',
 'cudaMemcpy3DBatchOp': 'src dst extent srcAccessOrder flags',
}
enums = ['cudaDeviceAttr', 'cudaLimit', 'cudaFuncAttribute', 'cudaLaunchAttributeID',
         'cudaMemPoolAttr', 'cudaGraphNodeType', 'cudaGraphExecUpdateResult',
         'cudaStreamCaptureMode', 'cudaStreamCaptureStatus', 'cudaGraphInstantiateFlags',
         'cudaStreamUpdateCaptureDependenciesFlags', 'cudaKernelFunctionType',
         'cudaGraphChildGraphNodeOwnership', 'cudaGraphInstantiateResult',
         'cudaGraphMemAttributeType', 'cudaAccessProperty', 'cudaSynchronizationPolicy',
         'cudaLaunchMemSyncDomain', 'cudaMemcpy3DOperandType', 'cudaGraphConditionalNodeType',
         'cudaGraphConditionalHandleFlags']
src = '#include <stddef.h>\n#include <stdio.h>\n#include <cuda_runtime_api.h>\nint main(void){\n'
for s, fs in fields.items():
    t = s if s.endswith('_t') else 'struct ' + s
    src += f'printf("pub const {s.upper()}_SIZE: usize = %zu;\\n", sizeof({t}));\n'
    for f in fs.split():
        name = f.replace('.', '_').upper()
        # A field called `size` would collide with the struct's own size.
        name = 'SIZE_FIELD' if name == 'SIZE' else name
        src += f'printf("pub const {s.upper()}_{name}: usize = %zu;\\n", offsetof({t}, {f}));\n'
src += 'return 0;}\n'
d = tempfile.mkdtemp()
open(f'{d}/g.c', 'w').write(src)
subprocess.check_call(['gcc', '-I', inc, f'{d}/g.c', '-o', f'{d}/g'])
print('//! Generated by interpose/abi/gen.py from the CUDA 13 headers: struct layouts and enum')
print('//! values of the runtime ABI. Do not edit by hand.')
print('#![allow(dead_code, non_upper_case_globals)]')
print(subprocess.check_output([f'{d}/g']).decode(), end='')
text = open(f'{inc}/driver_types.h').read()
for e in enums:
    m = re.search(r'enum (?:__device_builtin__ +)?' + e + r'\s*\{(.*?)\}', text, re.S)
    body = re.sub(r'/\*.*?\*/', '', m.group(1), flags=re.S)
    for name, val in re.findall(r'(\w+)\s*=\s*(0x[0-9a-fA-F]+|\d+)', body):
        print(f'pub const {name}: u32 = {val};')
