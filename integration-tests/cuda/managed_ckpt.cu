// Checkpoint/restart of managed memory in every state a shadow page can be in. At each gate
// (GATE(1..3), see common.h) the CPU has just written pages it had not flushed yet (dirty),
// some of them pages the kernel wrote and the CPU never read (a partial-page write next to
// device data), other pages it only read (clean copies), and others the kernel wrote that the
// CPU has not touched since (protected, not fetched); a `__managed__` counter likewise.
// After the gate the program goes on: kernels, CPU checks against its reference, PASS.
#include "common.h"

__managed__ int kernels_run;
__global__ void step(int *a, int na, unsigned char *b, int nb, int r) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < na) a[i] = a[i] * 3 + r + (i & 15);
    if (i < nb) b[i] = (unsigned char)(b[i] * 7 + r);
    if (i == 0) kernels_run += 1;
}
static void step_cpu(int *a, int na, unsigned char *b, int nb, int r) {
    for (int i = 0; i < na; i++) a[i] = a[i] * 3 + r + (i & 15);
    for (int i = 0; i < nb; i++) b[i] = (unsigned char)(b[i] * 7 + r);
}

int main() {
    const int na = 16 * 1024, nb = 5000;  // 16 pages of ints, an odd-sized byte array
    int *a, *ra = (int *)malloc(na * 4);
    unsigned char *b, *rb = (unsigned char *)malloc(nb);
    CK(cudaMallocManaged(&a, na * 4));
    CK(cudaMallocManaged(&b, nb));
    for (int i = 0; i < na; i++) a[i] = ra[i] = i % 1000;
    for (int i = 0; i < nb; i++) b[i] = rb[i] = (unsigned char)i;
    int rk = 0;
    for (int r = 1; r <= 4; r++) {
        step<<<(na + 255) / 256, 256>>>(a, na, b, nb, r);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        step_cpu(ra, na, rb, nb, r);
        rk++;
        // Read pages 0..5 of a (clean copies) and all of b, and the counter.
        for (int i = 0; i < 6 * 1024; i++) EXPECT(a[i] == ra[i]);
        for (int i = 0; i < nb; i++) EXPECT(b[i] == rb[i]);
        EXPECT(kernels_run == rk);
        // Write: into pages read above, into pages 8..15 never read since the kernel (one
        // int each, the kernel's other ints in those pages must survive), b, the counter.
        for (int i = 0; i < 6 * 1024; i += 512) a[i] = ra[i] = -r * 100000 - i;
        for (int p = 8; p < 16; p++) a[p * 1024 + r * 7] = ra[p * 1024 + r * 7] = r * 11 + p;
        b[r * 999] = rb[r * 999] = (unsigned char)(200 + r);
        kernels_run = rk = rk + 100;
        long long s = 0;
        for (int i = 0; i < na; i++) s += ra[i];
        for (int i = 0; i < nb; i++) s += rb[i];
        printf("round %d ref sum %lld\n", r, s);
        if (r <= 3) GATE(r);  // checkpoint here: dirty, clean and protected pages
    }
    step<<<(na + 255) / 256, 256>>>(a, na, b, nb, 9);
    CK(cudaDeviceSynchronize());
    step_cpu(ra, na, rb, nb, 9);
    rk++;
    for (int i = 0; i < na; i++) EXPECT(a[i] == ra[i]);
    for (int i = 0; i < nb; i++) EXPECT(b[i] == rb[i]);
    EXPECT(kernels_run == rk);
    printf("kernels %d\n", kernels_run);
    CK(cudaFree(a));
    CK(cudaFree(b));
    printf("PASS\n");
    return 0;
}
