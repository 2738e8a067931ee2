// Iterative Jacobi solver for a 2D Laplace problem on managed memory, long enough to be
// checkpointed. Usage: jacobi [N=64] [ITERS=2000] [EVERY=200]. Prints "step I residual R" every
// EVERY iterations, then the CPU check and "PASS". The result is deterministic (same float ops
// in the same order on the device and in the CPU reference).
#include "common.h"
#include <cmath>
#include <unistd.h>
__global__ void sweep(const float *u, float *v, int n) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x <= 0 || y <= 0 || x >= n - 1 || y >= n - 1) return;
    v[y * n + x] = 0.25f * (u[y * n + x - 1] + u[y * n + x + 1] + u[(y - 1) * n + x] + u[(y + 1) * n + x]);
}
static void init(float *u, int n) {
    for (int y = 0; y < n; y++)
        for (int x = 0; x < n; x++) u[y * n + x] = (y == 0) ? 100.0f : (x == 0 ? 50.0f : 0.0f);
}
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 64, iters = argc > 2 ? atoi(argv[2]) : 2000;
    int every = argc > 3 ? atoi(argv[3]) : 200;
    float *u, *v;
    CK(cudaMallocManaged(&u, n * n * 4)); CK(cudaMallocManaged(&v, n * n * 4));
    init(u, n); init(v, n);
    dim3 blk(16, 16), grd((n + 15) / 16, (n + 15) / 16);
    for (int it = 1; it <= iters; it++) {
        sweep<<<grd, blk>>>(u, v, n);
        float *t = u; u = v; v = t;
        if (it * 4 % iters == 0 && it < iters) GATE(it * 4 / iters);
        if (it % every == 0) {
            CK(cudaDeviceSynchronize());
            double r = 0;
            for (int i = 0; i < n * n; i++) r += fabs((double)u[i] - v[i]);
            printf("step %d residual %.6f\n", it, r);
            fflush(stdout);
        }
    }
    CK(cudaDeviceSynchronize());
    float *a = (float *)malloc(n * n * 4), *b = (float *)malloc(n * n * 4);
    init(a, n); init(b, n);
    for (int it = 1; it <= iters; it++) {
        for (int y = 1; y < n - 1; y++)
            for (int x = 1; x < n - 1; x++)
                b[y * n + x] = 0.25f * (a[y * n + x - 1] + a[y * n + x + 1] + a[(y - 1) * n + x] + a[(y + 1) * n + x]);
        float *t = a; a = b; b = t;
    }
    double sum = 0;
    for (int i = 0; i < n * n; i++) { EXPECT(u[i] == a[i]); sum += u[i]; }
    printf("n %d iters %d sum %.4f center %.6f\n", n, iters, sum, u[(n / 2) * n + n / 2]);
    printf("PASS\n");
    return 0;
}
