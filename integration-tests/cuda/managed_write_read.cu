// A program that breaks CRUM's read-before-write assumption on purpose: after a kernel wrote
// a managed array, the CPU writes one element of a page it has not read since, then reads that
// element back and the kernel's elements around it in the same page, with no CUDA call in
// between. The results must be right in every `--managed` mode; `verify` must report it.
//
// Usage: managed_write_read [write-read|clean]. `clean` does the same work reading each page
// before writing it (nothing to report).
#include "common.h"
#include <cstring>
__global__ void fill(int *x, int n, int r) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = i * 3 + r;
}
__global__ void inc(int *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1;
}
int main(int argc, char **argv) {
    bool clean = argc > 1 && strcmp(argv[1], "clean") == 0;
    const int per_page = 1024, pages = 8, n = per_page * pages;
    int *x;
    CK(cudaMallocManaged(&x, n * sizeof(int)));
    long long total = 0;
    for (int r = 0; r < 4; r++) {
        fill<<<n / 256, 256>>>(x, n, r);
        CK(cudaDeviceSynchronize());
        int p = (r * 3 + 1) % pages;              // a page the kernel wrote, not read since
        int k = p * per_page + 100 + r;           // an element in its middle
        long long s = 0;
        if (clean) {
            // Read the whole page first, then write.
            for (int i = p * per_page; i < (p + 1) * per_page; i++) s += x[i];
            x[k] = -7 - r;
            s += -7 - r - (k * 3 + r);
        } else {
            x[k] = -7 - r;                        // write first ...
            EXPECT(x[k] == -7 - r);               // ... then read it back,
            EXPECT(x[k - 1] == (k - 1) * 3 + r);  // and the kernel's neighbours
            EXPECT(x[k + 1] == (k + 1) * 3 + r);
            for (int i = p * per_page; i < (p + 1) * per_page; i++) s += x[i];
            // A memcpy into the next page, then a read of that page.
            int q = (p + 1) % pages, v[5] = {11, 12, 13, 14, 15};
            memcpy(&x[q * per_page + 500], v, sizeof v);
            for (int i = 0; i < 5; i++) EXPECT(x[q * per_page + 500 + i] == 11 + i);
            EXPECT(x[q * per_page + 499] == (q * per_page + 499) * 3 + r);
            EXPECT(x[q * per_page + 505] == (q * per_page + 505) * 3 + r);
        }
        long long want = 0;
        for (int i = p * per_page; i < (p + 1) * per_page; i++) want += i == k ? -7 - r : i * 3 + r;
        EXPECT(s == want);
        total += s;
        printf("round %d page %d sum %lld\n", r, p, s);
    }
    // The last round's writes reach the device: a kernel adds one to every element.
    int *want = (int *)malloc(n * sizeof(int));
    for (int i = 0; i < n; i++) want[i] = i * 3 + 3;
    int p = (3 * 3 + 1) % pages, k = p * per_page + 103;
    want[k] = -10;
    if (!clean)
        for (int i = 0; i < 5; i++) want[((p + 1) % pages) * per_page + 500 + i] = 11 + i;
    inc<<<n / 256, 256>>>(x, n);
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) EXPECT(x[i] == want[i] + 1);
    CK(cudaFree(x));
    printf("total %lld\n", total);
    printf("PASS\n");
    return 0;
}
