// Several pthreads touching managed memory concurrently between kernels.
//
// Part 1, shared phases: every round a kernel updates a disjoint array per thread (each
// thread's region is 3.5 pages, so neighbours share pages) and a shared array; then T threads
// at once read-check their own region and the whole shared array (concurrent read faults on
// the same pages), wait at a barrier, and write their own region and interleaved elements of
// the shared array (concurrent write faults on the same pages). Reads always come before
// writes between two CUDA calls.
//
// Part 2, own streams: each thread launches kernels on its own stream on its own region and
// reads and writes it between its kernels while the other threads' launches and
// synchronizations (which flush and protect managed memory) happen at any moment.
#include "common.h"
#include <pthread.h>

#define T 4
static const int REG = 3584;              // ints per thread region (3.5 pages)
static const int SH = 8192;               // ints in the shared array (8 pages)
static int *own, *sh, *ref_own, *ref_sh;
static pthread_barrier_t bar;
static int round_no, fails[T];
/* The first mismatch each thread saw, printed when a check fails. */
static char why[T][160];
#define MISMATCH(t, what, i, got, want) do { if (!fails[t]++) snprintf(why[t], sizeof why[t], \
    "thread %d round %d: %s[%d] = %d, expected %d", t, round_no, what, (int)(i), got, want); } while (0)
static void check_fails(void) {
    for (int t = 0; t < T; t++) if (fails[t]) printf("mismatch: %s (%d in all)\n", why[t], fails[t]);
}

__global__ void upd(int *x, int n, int r) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = (int)((unsigned)x[i] * 7u + r + (i % 5));
}
static void upd_cpu(int *x, int n, int r) { for (int i = 0; i < n; i++) x[i] = (int)((unsigned)x[i] * 7u + r + (i % 5)); }

static void *phase(void *arg) {
    int t = (int)(long)arg, r = round_no;
    int *mine = own + t * REG, *rmine = ref_own + t * REG;
    for (int i = 0; i < REG; i++) if (mine[i] != rmine[i]) MISMATCH(t, "own", t * REG + i, mine[i], rmine[i]);
    // Read the shared array from a different starting point in each thread.
    for (int j = 0; j < SH; j++) {
        int i = (j + t * SH / T) % SH;
        if (sh[i] != ref_sh[i]) MISMATCH(t, "sh", i, sh[i], ref_sh[i]);
    }
    pthread_barrier_wait(&bar);
    for (int i = 0; i < REG; i += 3) mine[i] = rmine[i] = t * 1000 + r * 10 + i;
    for (int i = t; i < SH; i += T * 5) sh[i] = ref_sh[i] = -(t + 1) * 100000 - r * 100 - i;
    return nullptr;
}

static void *own_stream(void *arg) {
    int t = (int)(long)arg;
    int *x;
    const int n = 5000;
    int ref[n];
    cudaStream_t s;
    if (cudaStreamCreate(&s) != cudaSuccess || cudaMallocManaged(&x, n * 4) != cudaSuccess) {
        fails[t]++;
        return nullptr;
    }
    for (int i = 0; i < n; i++) x[i] = ref[i] = i + t;
    for (int r = 0; r < 8; r++) {
        upd<<<(n + 127) / 128, 128, 0, s>>>(x, n, r);
        upd_cpu(ref, n, r);
        if (cudaStreamSynchronize(s) != cudaSuccess) fails[t]++;
        for (int i = 0; i < n; i++) if (x[i] != ref[i]) MISMATCH(t, "x", i, x[i], ref[i]);
        for (int i = r; i < n; i += 97) x[i] = ref[i] = r * 31 + i;
    }
    if (cudaStreamSynchronize(s) != cudaSuccess) fails[t]++;
    cudaStreamDestroy(s);
    for (int i = 0; i < n; i++) if (x[i] != ref[i]) MISMATCH(t, "x end", i, x[i], ref[i]);
    cudaFree(x);
    return nullptr;
}

int main() {
    CK(cudaMallocManaged(&own, T * REG * 4));
    CK(cudaMallocManaged(&sh, SH * 4));
    ref_own = (int *)malloc(T * REG * 4);
    ref_sh = (int *)malloc(SH * 4);
    for (int i = 0; i < T * REG; i++) own[i] = ref_own[i] = i;
    for (int i = 0; i < SH; i++) sh[i] = ref_sh[i] = 3 * i;
    pthread_barrier_init(&bar, nullptr, T);
    for (round_no = 0; round_no < 6; round_no++) {
        upd<<<(T * REG + 255) / 256, 256>>>(own, T * REG, round_no);
        upd<<<(SH + 255) / 256, 256>>>(sh, SH, round_no);
        upd_cpu(ref_own, T * REG, round_no);
        upd_cpu(ref_sh, SH, round_no);
        CK(cudaDeviceSynchronize());
        pthread_t th[T];
        for (long t = 0; t < T; t++) EXPECT(pthread_create(&th[t], nullptr, phase, (void *)t) == 0);
        for (int t = 0; t < T; t++) pthread_join(th[t], nullptr);
        check_fails();
        for (int t = 0; t < T; t++) EXPECT(fails[t] == 0);
    }
    upd<<<(T * REG + 255) / 256, 256>>>(own, T * REG, 99);
    upd<<<(SH + 255) / 256, 256>>>(sh, SH, 99);
    upd_cpu(ref_own, T * REG, 99);
    upd_cpu(ref_sh, SH, 99);
    CK(cudaDeviceSynchronize());
    long long s = 0;
    for (int i = 0; i < T * REG; i++) { EXPECT(own[i] == ref_own[i]); s += own[i]; }
    for (int i = 0; i < SH; i++) { EXPECT(sh[i] == ref_sh[i]); s += sh[i]; }
    printf("shared phases sum %lld\n", s);

    pthread_t th[T];
    for (long t = 0; t < T; t++) EXPECT(pthread_create(&th[t], nullptr, own_stream, (void *)t) == 0);
    for (int t = 0; t < T; t++) pthread_join(th[t], nullptr);
    check_fails();
    for (int t = 0; t < T; t++) EXPECT(fails[t] == 0);
    printf("own streams ok\n");
    CK(cudaFree(own));
    CK(cudaFree(sh));
    printf("PASS\n");
    return 0;
}
