// Surface objects (cudaCreateSurfaceObject over a cudaArraySurfaceLoadStore array, surf2Dwrite
// and surf2Dread in kernels, surf1Dwrite on a 1-D array) beside a texture object over another
// array; the objects are created before a gate, so their handles must work after a restart.
// Checked against the CPU; PASS.
#include "common.h"
__global__ void scale(cudaTextureObject_t src, cudaSurfaceObject_t dst, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    float v = tex2D<float>(src, x + 0.5f, y + 0.5f);
    surf2Dwrite(v * 2.0f + 1.0f, dst, x * (int)sizeof(float), y);
}
__global__ void gather(cudaSurfaceObject_t s, float *out, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    float a = surf2Dread<float>(s, x * (int)sizeof(float), y);
    // A clamped read one element past the right edge reads the edge.
    float b = surf2Dread<float>(s, (x + 1) * (int)sizeof(float), y, cudaBoundaryModeClamp);
    out[y * w + x] = a + b;
}
__global__ void ramp(cudaSurfaceObject_t s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) surf1Dwrite((unsigned)(i * i), s, i * 4);
}
// Reads texel (x, y) of every face through texCubemap, at the direction of its centre.
__global__ void cube_read(cudaTextureObject_t t, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= 6 * n * n) return;
    int face = i / (n * n), y = (i / n) % n, x = i % n;
    float s = (x + 0.5f) / n * 2 - 1, u = (y + 0.5f) / n * 2 - 1;
    float dx, dy, dz;  // the inverse of the programming guide's cubemap table
    switch (face) {
    case 0: dx = 1; dz = -s; dy = -u; break;
    case 1: dx = -1; dz = s; dy = -u; break;
    case 2: dy = 1; dx = s; dz = u; break;
    case 3: dy = -1; dx = s; dz = -u; break;
    case 4: dz = 1; dx = s; dy = -u; break;
    default: dz = -1; dx = -s; dy = -u; break;
    }
    out[i] = texCubemap<float>(t, dx * 3.0f, dy * 3.0f, dz * 3.0f);  // any length points the same way
}
// The same for cube map `layer` of a layered cube map (texCubemapLayered: tex.acube).
__global__ void cube_layer_read(cudaTextureObject_t t, float *out, int n, int layer) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= 6 * n * n) return;
    int face = i / (n * n), y = (i / n) % n, x = i % n;
    float s = (x + 0.5f) / n * 2 - 1, u = (y + 0.5f) / n * 2 - 1;
    float dx, dy, dz;
    switch (face) {
    case 0: dx = 1; dz = -s; dy = -u; break;
    case 1: dx = -1; dz = s; dy = -u; break;
    case 2: dy = 1; dx = s; dz = u; break;
    case 3: dy = -1; dx = s; dz = -u; break;
    case 4: dz = 1; dx = s; dy = -u; break;
    default: dz = -1; dx = -s; dy = -u; break;
    }
    out[i] = texCubemapLayered<float>(t, dx, dy, dz, layer);
}
int main() {
    const int w = 37, h = 23, n = 300;
    float in[h][w], back[h][w], got[h * w];
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) in[y][x] = (float)((x * 7 + y * 13) % 29) - 9.0f;
    cudaChannelFormatDesc f = cudaCreateChannelDesc<float>();
    cudaArray_t a_src, a_dst, a_plain, a_line;
    CK(cudaMallocArray(&a_src, &f, w, h));
    CK(cudaMallocArray(&a_dst, &f, w, h, cudaArraySurfaceLoadStore));
    CK(cudaMallocArray(&a_plain, &f, w, h));
    cudaChannelFormatDesc u = cudaCreateChannelDesc<unsigned>();
    CK(cudaMallocArray(&a_line, &u, n, 0, cudaArraySurfaceLoadStore));
    CK(cudaMemcpy2DToArray(a_src, 0, 0, in, w * sizeof(float), w * sizeof(float), h, cudaMemcpyHostToDevice));

    cudaResourceDesc r = {};
    r.resType = cudaResourceTypeArray;
    r.res.array.array = a_src;
    cudaTextureDesc td = {};
    td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    cudaTextureObject_t tex;
    CK(cudaCreateTextureObject(&tex, &r, &td, nullptr));
    r.res.array.array = a_dst;
    cudaSurfaceObject_t surf, line;
    CK(cudaCreateSurfaceObject(&surf, &r));
    r.res.array.array = a_line;
    CK(cudaCreateSurfaceObject(&line, &r));
    cudaResourceDesc q = {};
    CK(cudaGetSurfaceObjectResourceDesc(&q, surf));
    EXPECT(q.resType == cudaResourceTypeArray && q.res.array.array == a_dst);
    // The documentation asks for arrays made for surface load/store; CUDA 13 takes any array
    // (an H200 answered cudaSuccess), and the surface covers it.
    r.res.array.array = a_plain;
    cudaSurfaceObject_t plain_surf;
    CK(cudaCreateSurfaceObject(&plain_surf, &r));
    CK(cudaDestroySurfaceObject(plain_surf));
    // Not an array: refused.
    cudaResourceDesc lin = {};
    lin.resType = cudaResourceTypeLinear;
    lin.res.linear.devPtr = nullptr;
    cudaSurfaceObject_t bad;
    EXPECT(cudaCreateSurfaceObject(&bad, &lin) == cudaErrorInvalidValue);
    cudaGetLastError();
    GATE(1);  // the objects were created before the checkpoint

    dim3 blk(16, 8), grd((w + 15) / 16, (h + 7) / 8);
    scale<<<grd, blk>>>(tex, surf, w, h);
    ramp<<<(n + 127) / 128, 128>>>(line, n);
    CK(cudaGetLastError());
    float *d_out;
    CK(cudaMalloc(&d_out, sizeof got));
    GATE(2);  // kernels queued
    gather<<<grd, blk>>>(surf, d_out, w, h);
    CK(cudaMemcpy2DFromArray(back, w * sizeof(float), a_dst, 0, 0, w * sizeof(float), h, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(got, d_out, sizeof got, cudaMemcpyDeviceToHost));
    unsigned lv[n];
    CK(cudaMemcpy2DFromArray(lv, sizeof lv, a_line, 0, 0, sizeof lv, 1, cudaMemcpyDeviceToHost));
    double sum = 0;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            float want = in[y][x] * 2.0f + 1.0f;
            EXPECT(back[y][x] == want);
            float right = in[y][x + 1 < w ? x + 1 : w - 1] * 2.0f + 1.0f;
            EXPECT(got[y * w + x] == want + right);
            sum += got[y * w + x];
        }
    for (int i = 0; i < n; i++) EXPECT(lv[i] == (unsigned)(i * i));
    printf("surfaces %dx%d and %d: sum %.1f\n", w, h, n, sum);

    // A cube map: six square faces, each texel read back through texCubemap.
    const int cn = 8;
    float faces[6 * cn * cn], fr[6 * cn * cn];
    for (int i = 0; i < 6 * cn * cn; i++) faces[i] = (float)(i / (cn * cn) * 100 + i % (cn * cn));
    cudaArray_t cube;
    CK(cudaMalloc3DArray(&cube, &f, make_cudaExtent(cn, cn, 6), cudaArrayCubemap));
    cudaMemcpy3DParms cp = {};
    cp.srcPtr = make_cudaPitchedPtr(faces, cn * sizeof(float), cn, cn);
    cp.dstArray = cube;
    cp.extent = make_cudaExtent(cn, cn, 6);
    cp.kind = cudaMemcpyHostToDevice;
    CK(cudaMemcpy3D(&cp));
    cudaResourceDesc rc = {};
    rc.resType = cudaResourceTypeArray;
    rc.res.array.array = cube;
    cudaTextureDesc tc = {};
    tc.addressMode[0] = tc.addressMode[1] = tc.addressMode[2] = cudaAddressModeClamp;
    tc.filterMode = cudaFilterModePoint;
    tc.readMode = cudaReadModeElementType;
    tc.normalizedCoords = 1;
    cudaTextureObject_t ctex;
    CK(cudaCreateTextureObject(&ctex, &rc, &tc, nullptr));
    float *d_c;
    CK(cudaMalloc(&d_c, sizeof fr));
    cube_read<<<(6 * cn * cn + 127) / 128, 128>>>(ctex, d_c, cn);
    CK(cudaMemcpy(fr, d_c, sizeof fr, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 6 * cn * cn; i++) EXPECT(fr[i] == faces[i]);
    printf("cube map %dx%d: every texel of the six faces read by direction\n", cn, cn);
    CK(cudaDestroyTextureObject(ctex));
    CK(cudaFreeArray(cube));

    // A layered cube map of three cube maps (18 faces), each read back by direction and layer.
    const int nl = 3;
    static float lfaces[nl * 6 * cn * cn], lfr[6 * cn * cn];
    for (int i = 0; i < nl * 6 * cn * cn; i++) lfaces[i] = (float)(i / (cn * cn) * 100 + i % (cn * cn));
    cudaArray_t lcube;
    CK(cudaMalloc3DArray(&lcube, &f, make_cudaExtent(cn, cn, 6 * nl), cudaArrayCubemap | cudaArrayLayered));
    cudaMemcpy3DParms lcp = {};
    lcp.srcPtr = make_cudaPitchedPtr(lfaces, cn * sizeof(float), cn, cn);
    lcp.dstArray = lcube;
    lcp.extent = make_cudaExtent(cn, cn, 6 * nl);
    lcp.kind = cudaMemcpyHostToDevice;
    CK(cudaMemcpy3D(&lcp));
    rc.res.array.array = lcube;
    cudaTextureObject_t ltex;
    CK(cudaCreateTextureObject(&ltex, &rc, &tc, nullptr));
    for (int l = 0; l < nl; l++) {
        cube_layer_read<<<(6 * cn * cn + 127) / 128, 128>>>(ltex, d_c, cn, l);
        CK(cudaMemcpy(lfr, d_c, sizeof lfr, cudaMemcpyDeviceToHost));
        for (int i = 0; i < 6 * cn * cn; i++) EXPECT(lfr[i] == lfaces[l * 6 * cn * cn + i]);
    }
    printf("layered cube map %dx%d x %d: every texel read by direction and layer\n", cn, cn, nl);
    CK(cudaDestroyTextureObject(ltex));
    CK(cudaFreeArray(lcube));
    GATE(3);
    CK(cudaDestroySurfaceObject(surf));
    CK(cudaDestroySurfaceObject(line));
    CK(cudaDestroyTextureObject(tex));
    EXPECT(cudaDestroySurfaceObject(surf) != cudaSuccess);
    printf("PASS\n");
    return 0;
}
