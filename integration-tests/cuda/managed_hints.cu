// cudaMemPrefetchAsync (to the device and to the host, whole and partial ranges, on streams),
// cudaMemAdvise (read-mostly, preferred location, accessed-by, and their unsets),
// cudaStreamAttachMemAsync (host, single, global) and cudaMallocManaged(cudaMemAttachHost)
// all return cudaSuccess, and the data stays right around them: CPU writes before a hint,
// kernels after it, CPU reads after a prefetch back to the host. cudaMemRangeGetAttribute(s)
// report the advice and prefetch locations per page, as CUDA documents them.
#include "common.h"

__global__ void scale(int *x, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * k + 1;
}
static cudaMemLocation dev0() { cudaMemLocation l = {}; l.type = cudaMemLocationTypeDevice; l.id = 0; return l; }
static cudaMemLocation host() { cudaMemLocation l = {}; l.type = cudaMemLocationTypeHost; l.id = 0; return l; }

int main() {
    const int n = 3 * 1024 + 5;  // a little over 3 pages
    int *a, *b, ref_a[n], ref_b[n];
    CK(cudaMallocManaged(&a, n * 4));
    CK(cudaMallocManaged(&b, n * 4, cudaMemAttachHost));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    int attr = -1;
    // Asked for (programs do), not printed: shadow pages may answer either way.
    CK(cudaDeviceGetAttribute(&attr, cudaDevAttrConcurrentManagedAccess, 0));
    EXPECT(attr == 0 || attr == 1);
    for (int i = 0; i < n; i++) a[i] = ref_a[i] = i, b[i] = ref_b[i] = 2 * i;

    // Prefetch to the device (whole, then part), kernels, prefetch back to the host, read.
    CK(cudaMemPrefetchAsync(a, n * 4, dev0(), 0, s));
    CK(cudaMemPrefetchAsync(b + 1024, 100 * 4, dev0(), 0, s));
    scale<<<(n + 255) / 256, 256, 0, s>>>(a, n, 3);
    for (int i = 0; i < n; i++) ref_a[i] = ref_a[i] * 3 + 1;
    CK(cudaMemPrefetchAsync(a, n * 4, host(), 0, s));
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i++) EXPECT(a[i] == ref_a[i]);
    for (int i = 0; i < n; i++) EXPECT(b[i] == ref_b[i]);  // untouched by the device
    printf("prefetch ok\n");

    // Advice on both arrays, CPU writes, kernels, reads; then unset it all.
    a[5] = ref_a[5] = -5;
    CK(cudaMemAdvise(a, n * 4, cudaMemAdviseSetReadMostly, dev0()));
    CK(cudaMemAdvise(b, n * 4, cudaMemAdviseSetPreferredLocation, dev0()));
    CK(cudaMemAdvise(b, 4096, cudaMemAdviseSetAccessedBy, host()));
    CK(cudaMemAdvise(a + 1024, 4096, cudaMemAdviseSetPreferredLocation, host()));
    int v = -9, ids[3];
    CK(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributeReadMostly, a, n * 4)); EXPECT(v == 1);
    CK(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributeReadMostly, b, n * 4)); EXPECT(v == 0);
    CK(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributePreferredLocation, b, n * 4)); EXPECT(v == 0);
    // Page 1 of a prefers the host, the others nothing: mixed over the whole range.
    CK(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributePreferredLocation, a, n * 4));
    EXPECT(v == cudaInvalidDeviceId);
    CK(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributePreferredLocation, a + 1024, 4096));
    EXPECT(v == cudaCpuDeviceId);
    CK(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributePreferredLocationType, a + 1024, 4096));
    EXPECT(v == cudaMemLocationTypeHost);
    CK(cudaMemRangeGetAttribute(ids, sizeof ids, cudaMemRangeAttributeAccessedBy, b, 4096));
    EXPECT(ids[0] == cudaCpuDeviceId && ids[1] == cudaInvalidDeviceId && ids[2] == cudaInvalidDeviceId);
    CK(cudaMemRangeGetAttribute(ids, sizeof ids, cudaMemRangeAttributeAccessedBy, b, n * 4));
    EXPECT(ids[0] == cudaInvalidDeviceId);
    // a was last prefetched to the host as a whole; only page 1 of b ever was (to the device).
    CK(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributeLastPrefetchLocation, a, n * 4));
    EXPECT(v == cudaCpuDeviceId);
    CK(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributeLastPrefetchLocation, b + 1024, 400));
    EXPECT(v == 0);
    CK(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributeLastPrefetchLocationId, b + 1024, 400));
    EXPECT(v == 0);
    CK(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributeLastPrefetchLocation, b, n * 4));
    EXPECT(v == cudaInvalidDeviceId);
    int rm = -1, pt = -1;
    void *data[] = {&rm, &pt};
    size_t sizes[] = {4, 4};
    cudaMemRangeAttribute which[] = {cudaMemRangeAttributeReadMostly, cudaMemRangeAttributePreferredLocationType};
    CK(cudaMemRangeGetAttributes(data, sizes, which, 2, b, n * 4));
    EXPECT(rm == 0 && pt == cudaMemLocationTypeDevice);
    EXPECT(cudaMemRangeGetAttribute(&v, 8, cudaMemRangeAttributeReadMostly, a, 4) == cudaErrorInvalidValue);
    int on_stack = 0;
    EXPECT(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributeReadMostly, &on_stack, 4) == cudaErrorInvalidValue);
    cudaGetLastError();
    scale<<<(n + 255) / 256, 256>>>(a, n, 2);
    scale<<<(n + 255) / 256, 256>>>(b, n, 5);
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) ref_a[i] = ref_a[i] * 2 + 1, ref_b[i] = ref_b[i] * 5 + 1;
    for (int i = 0; i < n; i++) EXPECT(a[i] == ref_a[i] && b[i] == ref_b[i]);
    b[n - 1] = ref_b[n - 1] = 77;  // a CPU write to a page preferring the device
    CK(cudaMemAdvise(a, n * 4, cudaMemAdviseUnsetReadMostly, dev0()));
    CK(cudaMemAdvise(b, n * 4, cudaMemAdviseUnsetPreferredLocation, dev0()));
    CK(cudaMemAdvise(b, 4096, cudaMemAdviseUnsetAccessedBy, host()));
    CK(cudaMemAdvise(a + 1024, 4096, cudaMemAdviseUnsetPreferredLocation, host()));
    CK(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributeReadMostly, a, n * 4)); EXPECT(v == 0);
    CK(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributePreferredLocation, b, n * 4));
    EXPECT(v == cudaInvalidDeviceId);
    scale<<<(n + 255) / 256, 256>>>(b, n, 1);
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) ref_b[i] = ref_b[i] + 1;
    for (int i = 0; i < n; i++) EXPECT(b[i] == ref_b[i]);
    printf("advise ok\n");

    // Attach to the host, CPU writes; attach to the stream (single), kernel on it; attach
    // globally, kernel on the default stream; read.
    CK(cudaStreamAttachMemAsync(s, b, 0, cudaMemAttachHost));
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i += 10) b[i] = ref_b[i] = i + 7;
    CK(cudaStreamAttachMemAsync(s, b, 0, cudaMemAttachSingle));
    scale<<<(n + 255) / 256, 256, 0, s>>>(b, n, 2);
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i++) ref_b[i] = ref_b[i] * 2 + 1;
    for (int i = 0; i < n; i++) EXPECT(b[i] == ref_b[i]);
    b[1] = ref_b[1] = 1;
    CK(cudaStreamAttachMemAsync(s, b, 0, cudaMemAttachGlobal));
    scale<<<(n + 255) / 256, 256>>>(b, n, 3);
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) ref_b[i] = ref_b[i] * 3 + 1;
    long long sum = 0;
    for (int i = 0; i < n; i++) { EXPECT(a[i] == ref_a[i] && b[i] == ref_b[i]); sum += a[i] + b[i]; }
    printf("attach ok sum %lld\n", sum);
    CK(cudaStreamDestroy(s));
    CK(cudaFree(a));
    CK(cudaFree(b));
    printf("PASS\n");
    return 0;
}
