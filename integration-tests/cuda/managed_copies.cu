// Copies, memsets and host functions on managed memory while the CPU holds dirty pages or the
// device wrote pages the CPU has not read: every call that lets the device (or the runtime)
// touch memory must see the CPU's latest writes, and the CPU must see what they wrote.
#include "common.h"
#include <cstring>

__global__ void twice(const int *in, int *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * 2;
}
__global__ void addk(int *x, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += k;
}

struct HostArg {
    int *x, n, seen;
};
// Runs on a runtime thread between two kernels of one stream: reads what the first kernel
// wrote, writes what the second one reads.
static void CUDART_CB host_fn(void *p) {
    HostArg *a = (HostArg *)p;
    long long s = 0;
    for (int i = 0; i < a->n; i++) s += a->x[i];
    a->seen = (int)(s % 1000003);
    for (int i = 0; i < a->n; i += 100) a->x[i] = -i;
}

int main() {
    const int n = 6 * 1024 + 3;  // 6 pages and a bit
    int *a, *b, *d, *h = (int *)malloc(n * 4), ref[n];
    CK(cudaMallocManaged(&a, n * 4));
    CK(cudaMallocManaged(&b, n * 4));
    CK(cudaMalloc(&d, n * 4));

    // CPU writes (dirty) -> copy to device memory -> kernel into managed b -> CPU reads b.
    for (int i = 0; i < n; i++) a[i] = ref[i] = i * 3;
    CK(cudaMemcpy(d, a, n * 4, cudaMemcpyDefault));
    twice<<<(n + 255) / 256, 256>>>(d, b, n);
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) EXPECT(b[i] == ref[i] * 2);
    printf("managed -> device copy ok\n");

    // The kernel wrote b, the CPU reads a (clean); a copy from host memory into the middle of
    // a (odd offset, across pages), then a memset of part of b; the CPU reads both.
    for (int i = 0; i < n; i++) EXPECT(a[i] == ref[i]);
    for (int i = 0; i < 2000; i++) h[i] = 100000 + i;
    CK(cudaMemcpy(a + 1500, h, 2000 * 4, cudaMemcpyHostToDevice));
    for (int i = 0; i < 2000; i++) ref[1500 + i] = 100000 + i;
    CK(cudaMemset((char *)b + 4090, 0x5A, 4100));
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) EXPECT(a[i] == ref[i]);
    for (int i = 0; i < n; i++) {
        int want = i * 6;
        if (i * 4 + 3 >= 4090 && i * 4 < 4090 + 4100) {
            unsigned char bytes[4];
            memcpy(bytes, &want, 4);
            for (int k = 0; k < 4; k++)
                if (i * 4 + k >= 4090 && i * 4 + k < 4090 + 4100) bytes[k] = 0x5A;
            memcpy(&want, bytes, 4);
        }
        EXPECT(b[i] == want);
    }
    printf("host -> managed copy and memset ok\n");

    // CPU writes a (dirty) -> copy managed -> host (the copy must see them) and managed ->
    // managed (b takes a's bytes).
    for (int i = 0; i < n; i += 7) a[i] = ref[i] = -i;
    CK(cudaMemcpy(h, a, n * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) EXPECT(h[i] == ref[i]);
    CK(cudaMemcpy(b, a, n * 4, cudaMemcpyDefault));
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) EXPECT(b[i] == ref[i]);
    printf("managed -> host and managed -> managed copies ok\n");

    // A host function between two kernels on one stream.
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    HostArg arg = {a, n, -1};
    addk<<<(n + 255) / 256, 256, 0, s>>>(a, n, 5);
    CK(cudaLaunchHostFunc(s, host_fn, &arg));
    addk<<<(n + 255) / 256, 256, 0, s>>>(a, n, 1);
    CK(cudaStreamSynchronize(s));
    long long sum = 0;
    for (int i = 0; i < n; i++) sum += ref[i] + 5;
    EXPECT(arg.seen == (int)(sum % 1000003));
    for (int i = 0; i < n; i++) ref[i] = (i % 100 == 0 ? -i : ref[i] + 5) + 1;
    long long total = 0;
    for (int i = 0; i < n; i++) { EXPECT(a[i] == ref[i]); total += a[i]; }
    printf("host function ok seen %d total %lld\n", arg.seen, total);
    CK(cudaStreamDestroy(s));
    CK(cudaFree(a));
    CK(cudaFree(b));
    CK(cudaFree(d));
    printf("PASS\n");
    return 0;
}
