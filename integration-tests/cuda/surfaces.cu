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
    // Only arrays made for surface load/store can back a surface.
    r.res.array.array = a_plain;
    cudaSurfaceObject_t bad;
    EXPECT(cudaCreateSurfaceObject(&bad, &r) == cudaErrorInvalidValue);
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
    GATE(3);
    CK(cudaDestroySurfaceObject(surf));
    CK(cudaDestroySurfaceObject(line));
    CK(cudaDestroyTextureObject(tex));
    EXPECT(cudaDestroySurfaceObject(surf) != cudaSuccess);
    printf("PASS\n");
    return 0;
}
