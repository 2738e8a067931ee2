// A 100x37 float matrix into pitched device memory (cudaMallocPitch / cudaMemcpy2D), transposed
// on the device into another pitched buffer, and copied back through cudaMemcpy2D.
#include "common.h"
__global__ void transpose(const char *src, size_t sp, char *dst, size_t dp, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) ((float *)(dst + x * dp))[y] = ((const float *)(src + y * sp))[x];
}
int main() {
    const int w = 100, h = 37;
    static float a[h][w], t[w][h];
    for (int y = 0; y < h; y++) for (int x = 0; x < w; x++) a[y][x] = (float)(y * 1000 + x);
    char *ds, *dd; size_t sp, dp;
    CK(cudaMallocPitch((void **)&ds, &sp, w * 4, h));
    CK(cudaMallocPitch((void **)&dd, &dp, h * 4, w));
    EXPECT(sp >= w * 4 && dp >= h * 4);
    CK(cudaMemset2D(dd, dp, 0, h * 4, w));
    CK(cudaMemcpy2D(ds, sp, a, w * 4, w * 4, h, cudaMemcpyHostToDevice));
    GATE(1);
    transpose<<<dim3((w + 15) / 16, (h + 15) / 16), dim3(16, 16)>>>(ds, sp, dd, dp, w, h);
    CK(cudaGetLastError());
    GATE(2);
    CK(cudaMemcpy2D(t, h * 4, dd, dp, h * 4, w, cudaMemcpyDeviceToHost));
    for (int y = 0; y < h; y++) for (int x = 0; x < w; x++) EXPECT(t[x][y] == a[y][x]);
    // Round trip of a sub-rectangle device->device.
    CK(cudaMemcpy2D(dd, dp, ds + 4 * sp, sp, 10 * 4, 5, cudaMemcpyDeviceToDevice));
    GATE(3);
    static float back[5][10];
    CK(cudaMemcpy2D(back, 40, dd, dp, 40, 5, cudaMemcpyDeviceToHost));
    for (int y = 0; y < 5; y++) for (int x = 0; x < 10; x++) EXPECT(back[y][x] == a[y + 4][x]);
    printf("t[99][36]=%.0f\n", t[99][36]);
    printf("PASS\n");
    return 0;
}
