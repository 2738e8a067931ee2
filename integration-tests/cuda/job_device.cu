// A CUDA program meant to be started by a script, a launcher or python's subprocess under
// `crum run` (issue 17): device state that lives across steps, checked against the CPU.
//
// usage: job_device NAME STEPS PACE_MS [fork]
//
// Keeps an array of integers on the device; each step runs a kernel that updates every
// element (a different update per step), synchronizes, and prints `NAME step S` after
// sleeping PACE_MS. At the end the array is copied back and compared with the same updates
// done on the CPU: `NAME PASS checksum C` or `NAME FAIL …` (exit 1). A checkpoint, kill and
// restart anywhere between steps must not change the verdict or the checksum.
//
// With `fork`, after its first CUDA call it forks a child (without exec) that tries CUDA: the
// child must get cudaErrorInitializationError, as under the CUDA runtime (no context after a
// fork); the parent prints `NAME fork child: cudaErrorInitializationError`.
#include "common.h"
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

__global__ void step_kernel(unsigned *x, int n, unsigned s) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * 1664525u + 1013904223u + s * (unsigned)(i & 7);
}

static unsigned seed_of(const char *name) {
    unsigned h = 2166136261u;
    for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
    return h;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        printf("usage: job_device NAME STEPS PACE_MS [fork]\n");
        return 2;
    }
    const char *name = argv[1];
    int steps = atoi(argv[2]);
    int pace = atoi(argv[3]);
    bool fork_child = argc > 4 && strcmp(argv[4], "fork") == 0;
    const int n = 4096;
    std::vector<unsigned> h(n), ref(n);
    unsigned seed = seed_of(name);
    for (int i = 0; i < n; i++) h[i] = ref[i] = seed + (unsigned)i * 2654435761u;
    unsigned *d = nullptr;
    CK(cudaMalloc(&d, n * sizeof(unsigned)));
    CK(cudaMemcpy(d, h.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
    if (fork_child) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            void *p = nullptr;
            cudaError_t e = cudaMalloc(&p, 16);
            _exit(e == cudaErrorInitializationError ? 0 : 10 + (int)(e % 100));
        }
        int st = 0;
        EXPECT(pid > 0 && waitpid(pid, &st, 0) == pid);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            printf("%s FAIL fork child: status %d (want cudaErrorInitializationError)\n", name, st);
            return 1;
        }
        printf("%s fork child: cudaErrorInitializationError\n", name);
    }
    for (int s = 0; s < steps; s++) {
        step_kernel<<<(n + 255) / 256, 256>>>(d, n, (unsigned)s);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        for (int i = 0; i < n; i++) ref[i] = ref[i] * 1664525u + 1013904223u + (unsigned)s * (unsigned)(i & 7);
        printf("%s step %d\n", name, s);
        fflush(stdout);
        if (pace > 0) usleep(pace * 1000);
    }
    CK(cudaMemcpy(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    CK(cudaFree(d));
    unsigned sum = 0;
    for (int i = 0; i < n; i++) {
        if (h[i] != ref[i]) {
            printf("%s FAIL element %d: %u, want %u\n", name, i, h[i], ref[i]);
            return 1;
        }
        sum = sum * 31u + h[i];
    }
    printf("%s PASS checksum %u\n", name, sum);
    return 0;
}
