// read(2) from a file straight into managed memory, a kernel transforms it, and write(2) writes
// the managed buffer out; the file written is checked against the CPU transform.
#include "common.h"
#include <fcntl.h>
#include <unistd.h>
__global__ void rot(unsigned char *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = x[i] + 13; }
int main() {
    const int n = 1 << 16;
    // Gated checkpoint tests keep the files (in the gate directory): every image refers to them.
    const char *keep = getenv("CRUM_TEST_GATE");
    char in[4096], out[4096];
    snprintf(in, sizeof in, "%s/crum-fileio-in-XXXXXX", keep ? keep : "/tmp");
    snprintf(out, sizeof out, "%s/crum-fileio-out-XXXXXX", keep ? keep : "/tmp");
    int fi = mkstemp(in), fo = mkstemp(out);
    EXPECT(fi >= 0 && fo >= 0);
    unsigned char *src = (unsigned char *)malloc(n);
    for (int i = 0; i < n; i++) src[i] = (unsigned char)(i * 7 + (i >> 8));
    EXPECT(write(fi, src, n) == n);
    EXPECT(lseek(fi, 0, SEEK_SET) == 0);
    GATE(1);
    unsigned char *m;
    CK(cudaMallocManaged(&m, n));
    // Touch it on the device first so the shadow pages are protected when read(2) fills them.
    CK(cudaMemset(m, 0, n));
    CK(cudaDeviceSynchronize());
    EXPECT(read(fi, m, n) == n);
    rot<<<n / 256, 256>>>(m, n);
    GATE(2);
    CK(cudaDeviceSynchronize());
    EXPECT(write(fo, m, n) == n);  // write(2) straight from managed memory after a kernel
    EXPECT(lseek(fo, 0, SEEK_SET) == 0);
    GATE(3);
    unsigned char *back = (unsigned char *)malloc(n);
    EXPECT(read(fo, back, n) == n);
    unsigned sum = 0;
    for (int i = 0; i < n; i++) { EXPECT(back[i] == (unsigned char)(src[i] + 13)); sum += back[i]; }
    close(fi); close(fo);
    if (!keep) { unlink(in); unlink(out); }
    CK(cudaFree(m));
    printf("bytes %d sum %u\n", n, sum);
    printf("PASS\n");
    return 0;
}
