// Separate compilation (-rdc=true), file 2 of 2: a kernel calling field.cu's `step_value`
// and reading its variables through `extern`, and the host program, which writes field.cu's
// variables with cudaMemcpyToSymbol from here, launches kernels of both files, checks the
// results against a CPU reference and prints PASS; both files also launch the template
// kernel of shared_kernels.h, which each object carries as a weak definition. GATE(1..3) are the checkpoint points
// (integration-tests/tests/cuda_ckpt.rs); gate 2 comes with kernels and copies still queued.
// Device printf of kernels queued at gate 2 is pending in every image taken there.
#include "../common.h"
#include "shared_kernels.h"
#include <cmath>
#include <vector>

extern __device__ int g_gain;
extern __device__ unsigned long long g_hits;
extern __constant__ int c_coef[4];
extern __device__ int step_value(int x, int i);
void launch_relax(int *a, float *f, int n);
void launch_scatter(int *a, int v, int n);

static __device__ int s_bias = 11;

__global__ void advance(int *a, float *f, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) printf("advance: gain %d bias %d\n", g_gain, s_bias);
    if (i < n) {
        a[i] = step_value(a[i] + s_bias, i + 1) + c_coef[0];
        f[i] = cosf(f[i]) * 0.5f + 0.25f;
        atomicAdd(&g_hits, 1ULL);
    }
}

// The CPU reference of both kernels (field.cu's s_bias is 5, ours 11).
static int coef[4] = {2, 3, 5, 7};
static int gain = 3;
static int step_cpu(int x, int i) { return (x * coef[i & 3] + gain + 5) % 1000003; }
static void advance_cpu(std::vector<int> &a, std::vector<float> &f) {
    for (size_t i = 0; i < a.size(); i++) {
        a[i] = step_cpu(a[i] + 11, (int)i + 1) + coef[0];
        f[i] = cosf(f[i]) * 0.5f + 0.25f;
    }
}
static void scatter_cpu(std::vector<int> &a, int v) {
    for (size_t i = 0; i < a.size(); i++) a[i] = (a[i] * 3 + v + (int)(i & 7)) % 1000003;
}
static void relax_cpu(std::vector<int> &a, std::vector<float> &f) {
    for (size_t i = 0; i < a.size(); i++) {
        a[i] = step_cpu(a[i], (int)i);
        f[i] = sinf(f[i] * 3.0f);
    }
}

int main() {
    const int n = 5000;
    const int blocks = (n + 127) / 128;
    std::vector<int> a(n), ra(n);
    std::vector<float> f(n), rf(n);
    for (int i = 0; i < n; i++) {
        a[i] = ra[i] = (i * 7919) % 100000;
        f[i] = rf[i] = (float)i * 0.001f;
    }
    int *da;
    float *df;
    CK(cudaMalloc(&da, n * sizeof(int)));
    CK(cudaMalloc(&df, n * sizeof(float)));
    CK(cudaMemcpy(da, a.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(df, f.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    // field.cu's variables, written from this file, which only declares them.
    CK(cudaMemcpyToSymbol(g_gain, &gain, sizeof gain));
    CK(cudaMemcpyToSymbol(c_coef, coef, sizeof coef));
    int gain_back = 0;
    CK(cudaMemcpyFromSymbol(&gain_back, g_gain, sizeof gain_back));
    EXPECT(gain_back == gain);

    advance<<<blocks, 128>>>(da, df, n);
    CK(cudaGetLastError());
    advance_cpu(ra, rf);
    CK(cudaDeviceSynchronize());
    printf("phase 1 done\n");
    GATE(1);

    launch_relax(da, df, n);
    relax_cpu(ra, rf);
    gain = 4;
    CK(cudaMemcpyToSymbolAsync(g_gain, &gain, sizeof gain, 0, cudaMemcpyHostToDevice));
    advance<<<blocks, 128>>>(da, df, n);
    advance_cpu(ra, rf);
    GATE(2);

    launch_relax(da, df, n);
    relax_cpu(ra, rf);
    // The template kernel both files instantiate, launched from each.
    launch_scatter(da, 9, n);
    scatter_cpu(ra, 9);
    scatter_mix<int><<<blocks, 128>>>(da, 4, n);
    scatter_cpu(ra, 4);
    CK(cudaDeviceSynchronize());
    printf("phase 2 done\n");
    GATE(3);

    advance<<<blocks, 128>>>(da, df, n);
    advance_cpu(ra, rf);
    CK(cudaMemcpy(a.data(), da, n * sizeof(int), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(f.data(), df, n * sizeof(float), cudaMemcpyDeviceToHost));
    unsigned long long hits = 0;
    CK(cudaMemcpyFromSymbol(&hits, g_hits, sizeof hits));

    int bad = 0;
    long long sum = 0;
    for (int i = 0; i < n; i++) {
        sum += a[i];
        if (a[i] != ra[i] || fabsf(f[i] - rf[i]) > 1e-5f) {
            if (bad++ < 5) printf("mismatch at %d: %d %g, want %d %g\n", i, a[i], f[i], ra[i], rf[i]);
        }
    }
    printf("hits %llu checksum %lld\n", hits, sum);
    EXPECT(hits == 5ULL * n);
    EXPECT(bad == 0);
    CK(cudaFree(da));
    CK(cudaFree(df));
    printf("PASS\n");
    return 0;
}
