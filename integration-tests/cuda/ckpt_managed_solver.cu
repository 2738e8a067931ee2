// A long iterative heat-equation solver on managed memory, for periodic checkpoints
// (`crum run --interval`): explicit 5-point stencil steps on cudaMallocManaged grids, and every
// EVERY steps the CPU reads the grid (residual, printed as a progress line) and writes to it
// (the heat source moves), so the checkpoints see managed pages dirty on the host side.
// Usage: ckpt_managed_solver [N=64] [STEPS=5000] [EVERY=100]. Ends with the CPU reference check
// (same float operations in the same order), a checksum line and PASS.
#include "common.h"
#include <cmath>
__global__ void step(const float *u, float *v, int n, float k) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x <= 0 || y <= 0 || x >= n - 1 || y >= n - 1) return;
    float c = u[y * n + x];
    float s = u[y * n + x - 1] + u[y * n + x + 1] + u[(y - 1) * n + x] + u[(y + 1) * n + x];
    // _rn intrinsics: no fused multiply-add, so the CPU reference computes the same floats.
    v[y * n + x] = __fadd_rn(c, __fmul_rn(k, __fsub_rn(s, __fmul_rn(4.0f, c))));
}
static void init(float *u, int n) {
    for (int y = 0; y < n; y++)
        for (int x = 0; x < n; x++) u[y * n + x] = (x == 0 || y == 0) ? 1.0f : 0.0f;
}
// The CPU's part between kernels: a heat source that moves with the step number.
static void source(float *u, int n, int it) {
    int p = 1 + (it / 7) % (n - 2);
    u[p * n + n / 2] += 2.0f;
}
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 64, steps = argc > 2 ? atoi(argv[2]) : 5000;
    int every = argc > 3 ? atoi(argv[3]) : 100;
    const float k = 0.2f;
    float *u, *v;
    CK(cudaMallocManaged(&u, n * n * 4)); CK(cudaMallocManaged(&v, n * n * 4));
    init(u, n); init(v, n);
    dim3 blk(16, 16), grd((n + 15) / 16, (n + 15) / 16);
    for (int it = 1; it <= steps; it++) {
        step<<<grd, blk>>>(u, v, n, k);
        float *t = u; u = v; v = t;
        if (it % every == 0) {
            CK(cudaDeviceSynchronize());
            double r = 0;
            for (int i = 0; i < n * n; i++) r += fabs((double)u[i] - v[i]);
            source(u, n, it);
            printf("step %d residual %.6f\n", it, r);
            fflush(stdout);
        }
    }
    CK(cudaDeviceSynchronize());
    float *a = (float *)malloc(n * n * 4), *b = (float *)malloc(n * n * 4);
    init(a, n); init(b, n);
    for (int it = 1; it <= steps; it++) {
        for (int y = 1; y < n - 1; y++)
            for (int x = 1; x < n - 1; x++) {
                float c = a[y * n + x];
                float s = a[y * n + x - 1] + a[y * n + x + 1] + a[(y - 1) * n + x] + a[(y + 1) * n + x];
                b[y * n + x] = c + k * (s - 4.0f * c);
            }
        float *t = a; a = b; b = t;
        if (it % every == 0) source(a, n, it);
    }
    double sum = 0;
    for (int i = 0; i < n * n; i++) { EXPECT(u[i] == a[i]); sum += u[i]; }
    printf("n %d steps %d sum %.6f center %.6f\n", n, steps, sum, u[(n / 2) * n + n / 2]);
    printf("PASS\n");
    return 0;
}
