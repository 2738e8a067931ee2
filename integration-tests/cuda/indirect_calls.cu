// Calls through pointers: a table of device function pointers in a __device__ variable, a
// function pointer read by the host (cudaMemcpyFromSymbol) and passed back as a kernel
// argument, and virtual functions of objects made with device-side new/delete (vtables are
// module variables whose initializers name functions), and device heap blocks kept across
// the gates (allocated before a checkpoint, read and freed after the restart, then the heap
// allocates again), with a heap larger than the default 8 MiB (cudaLimitMallocHeapSize: a
// 12 MiB block before and after the restart). Checked against the CPU; PASS.
#include "common.h"
typedef int (*op_t)(int, int);
__device__ int add(int a, int b) { return a + b; }
__device__ int mul(int a, int b) { return a * b; }
__device__ int sub(int a, int b) { return a - b; }
__device__ op_t ops[2] = {add, mul};
__device__ op_t sub_ptr = sub;

struct Shape {
    __device__ virtual float area() const = 0;
    __device__ virtual ~Shape() {}
};
struct Sq : Shape {
    float s;
    __device__ Sq(float x) : s(x) {}
    __device__ float area() const override { return s * s; }
};
struct Ci : Shape {
    float r;
    __device__ Ci(float x) : r(x) {}
    __device__ float area() const override { return 3.0f * r * r; }
};

__device__ int *kept[256];
__device__ char *big;
const size_t BIG = 12 << 20;
__global__ void keep(int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (i == 0) {
        big = (char *)malloc(BIG);
        if (big) big[BIG - 1] = 42;
    }
    int *b = (int *)malloc(64 * sizeof(int));
    if (b) for (int k = 0; k < 64; k++) b[k] = i * 64 + k;
    kept[i] = b;
}
__global__ void use_kept(int *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int *b = kept[i];
    int s = -1;
    if (b) { s = 0; for (int k = 0; k < 64; k++) s += b[k]; }
    free(b);
    int *again = (int *)malloc(16);
    out[i] = again ? s : -2;
    free(again);
    if (i == 0) {
        if (!big || big[BIG - 1] != 42) out[0] = -3;
        free(big);
        char *b2 = (char *)malloc(BIG);
        if (!b2) out[0] = -4;
        free(b2);
    }
}
__global__ void table(int *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = ops[i & 1](i, 3);
}
__global__ void passed(int *out, int n, op_t f) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = f(out[i], i);
}
__global__ void shapes(float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    Shape *s;
    if (i & 1) s = new Sq((float)i); else s = new Ci((float)i);
    out[i] = s ? s->area() : -1.0f;
    delete s;
}

int main() {
    const int n = 256;
    int *d, h[n], hk[n], *dk;
    float *fd, fh[n];
    CK(cudaMalloc(&d, n * sizeof(int)));
    CK(cudaMalloc(&fd, n * sizeof(float)));
    CK(cudaMalloc(&dk, n * sizeof(int)));
    CK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 32 << 20));
    size_t heap = 0;
    CK(cudaDeviceGetLimit(&heap, cudaLimitMallocHeapSize));
    EXPECT(heap == 32 << 20);
    keep<<<2, 128>>>(n);
    CK(cudaGetLastError());
    table<<<2, 128>>>(d, n);
    CK(cudaGetLastError());
    GATE(1);
    op_t f;
    CK(cudaMemcpyFromSymbol(&f, sub_ptr, sizeof f));
    passed<<<2, 128>>>(d, n, f);
    CK(cudaGetLastError());
    GATE(2);
    shapes<<<2, 128>>>(fd, n);
    CK(cudaGetLastError());
    GATE(3);
    use_kept<<<2, 128>>>(dk, n);
    CK(cudaGetLastError());
    CK(cudaMemcpy(hk, dk, sizeof hk, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(fh, fd, sizeof fh, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        int want = ((i & 1) ? i * 3 : i + 3) - i;
        float fw = (i & 1) ? (float)i * (float)i : 3.0f * (float)i * (float)i;
        int kw = 64 * (i * 64) + 63 * 64 / 2;
        if (hk[i] != kw) {
            printf("i=%d: kept block sums to %d (want %d)\n", i, hk[i], kw);
            EXPECT(false);
        }
        if (h[i] != want || fh[i] != fw) {
            printf("i=%d: %d (want %d), %g (want %g)\n", i, h[i], want, fh[i], fw);
            EXPECT(false);
        }
    }
    printf("table, passed pointer and virtual calls, kept heap blocks: %d results match the CPU\n", n);
    printf("PASS\n");
    return 0;
}
