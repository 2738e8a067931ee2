// Large managed regions touched sparsely: one int per MiB written by the CPU, updated by a
// kernel, checked by the CPU, written again next to the kernel's data, updated and checked.
//
// Usage: managed_sparse [TOTAL_MIB=1024|oversub] [CHUNK_MIB=1024]. The total is allocated in
// chunks of CHUNK_MIB (the last one smaller when needed). `oversub` allocates 1 GiB more than
// the device's memory (cudaGetDeviceProperties totalGlobalMem), which CUDA allows for managed
// memory (pages migrate on demand), as long as the pages actually touched fit.
#include "common.h"
#include <cstring>
#include <vector>

__global__ void sparse(int *x, size_t stride, size_t n, int k) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i * stride] = x[i * stride] * 3 + (int)i + k;
        x[i * stride + 2] = (int)i - k;
    }
}

int main(int argc, char **argv) {
    const size_t mib = 1 << 20, stride = mib / sizeof(int);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    size_t total;
    if (argc > 1 && strcmp(argv[1], "oversub") == 0) {
        total = prop.totalGlobalMem + 1024 * mib;
        printf("device memory %zu MiB, managed total %zu MiB\n", prop.totalGlobalMem / mib, total / mib);
    } else {
        total = (argc > 1 ? (size_t)atol(argv[1]) : 1024) * mib;
        printf("managed total %zu MiB\n", total / mib);
    }
    size_t chunk = (argc > 2 ? (size_t)atol(argv[2]) : 1024) * mib;
    std::vector<int *> p;
    std::vector<size_t> len;
    for (size_t done = 0; done < total; done += chunk) {
        size_t l = total - done < chunk ? total - done : chunk;
        int *x;
        CK(cudaMallocManaged(&x, l));
        p.push_back(x);
        len.push_back(l);
    }
    // CPU writes one int per MiB.
    for (size_t c = 0; c < p.size(); c++)
        for (size_t i = 0; i < len[c] / mib; i++) p[c][i * stride] = (int)(i * 5 + c);
    for (int k = 1; k <= 2; k++) {
        for (size_t c = 0; c < p.size(); c++) {
            size_t n = len[c] / mib;
            sparse<<<(unsigned)((n + 127) / 128), 128>>>(p[c], stride, n, k);
        }
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        long long s = 0;
        for (size_t c = 0; c < p.size(); c++)
            for (size_t i = 0; i < len[c] / mib; i++) {
                int base = k == 1 ? (int)(i * 5 + c) : (int)(i * 7 + c);
                EXPECT(p[c][i * stride] == base * 3 + (int)i + k);
                if (k == 2) EXPECT(p[c][i * stride + 1] == (int)i + 1);
                EXPECT(p[c][i * stride + 2] == (int)i - k);
                s += p[c][i * stride];
            }
        printf("pass %d sum %lld\n", k, s);
        // CPU writes next to the kernel's ints, in the same pages.
        for (size_t c = 0; c < p.size(); c++)
            for (size_t i = 0; i < len[c] / mib; i++) {
                p[c][i * stride] = (int)(i * 7 + c);
                p[c][i * stride + 1] = (int)i + 1;
            }
    }
    for (int *x : p) CK(cudaFree(x));
    printf("PASS\n");
    return 0;
}
