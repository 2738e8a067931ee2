// `__managed__` variables modified by the CPU and by kernels alternately: a scalar counter, a
// double, a struct, a small array and a 5-page array (each CPU write lands in pages a kernel
// wrote before), also reached through pointers the host passes to kernels.
#include "common.h"

struct Acc {
    int count;
    float scale;
    long long total;
};
__managed__ int counter;
__managed__ double dsum = 0.5;
__managed__ Acc acc = {1, 2.0f, 3};
__managed__ int small[7] = {1, 2, 3, 4, 5, 6, 7};
__managed__ int big[5 * 1024];

__global__ void step(int r, int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = p[i] * 2 + r;
    if (i == 0) {
        counter += 10;
        dsum = __dadd_rn(__dmul_rn(dsum, 1.5), (double)r);  // no fused multiply-add
        acc.count += 1;
        acc.total += (long long)acc.scale * r;
        for (int j = 0; j < 7; j++) small[j] += j * r;
    }
}

int main() {
    const int n = 5 * 1024;
    int ref[n], rsmall[7] = {1, 2, 3, 4, 5, 6, 7};
    int rc = 0;
    double rd = 0.5;
    Acc ra = {1, 2.0f, 3};
    EXPECT(counter == 0 && dsum == 0.5 && acc.count == 1 && acc.total == 3 && small[6] == 7);
    for (int i = 0; i < n; i++) big[i] = ref[i] = i % 100;
    for (int r = 0; r < 10; r++) {
        step<<<n / 256, 256>>>(r, big, n);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        for (int i = 0; i < n; i++) ref[i] = ref[i] * 2 + r;
        rc += 10;
        rd = rd * 1.5 + r;
        ra.count += 1;
        ra.total += (long long)ra.scale * r;
        for (int j = 0; j < 7; j++) rsmall[j] += j * r;
        // Read what the kernel wrote ...
        EXPECT(counter == rc);
        EXPECT(dsum == rd);
        EXPECT(acc.count == ra.count && acc.total == ra.total && acc.scale == ra.scale);
        for (int j = 0; j < 7; j++) EXPECT(small[j] == rsmall[j]);
        for (int i = 0; i < n; i += 37) EXPECT(big[i] == ref[i]);
        // ... then write some of it for the next kernel (one element per page of big).
        rc += 1;
        counter = rc;
        if (r % 3 == 0) {
            rd /= 4;
            dsum = rd;
        }
        ra.scale += 1;
        acc.scale = ra.scale;
        rsmall[r % 7] = -r;
        small[r % 7] = -r;
        for (int pg = 0; pg < 5; pg++) {
            ref[pg * 1024 + r * 50] = 1000 + pg;
            big[pg * 1024 + r * 50] = 1000 + pg;
        }
        ref[n - 1] = r;
        big[n - 1] = r;  // the end of the last page
    }
    step<<<n / 256, 256>>>(100, big, n);
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) ref[i] = ref[i] * 2 + 100;
    long long s = 0;
    for (int i = 0; i < n; i++) { EXPECT(big[i] == ref[i]); s += big[i]; }
    printf("counter %d dsum %.6f acc %d %.1f %lld small %d %d big %lld\n", counter, dsum, acc.count,
           acc.scale, acc.total, small[0], small[6], s);
    printf("PASS\n");
    return 0;
}
