// Fault-injection subject (scripts/fault-inject.sh): a loop of kernels over device and
// managed memory that appends one line per step to a log file kept open with O_APPEND, and
// holds BALLAST MiB of random host memory so that an image takes a while to write.
//
//   fault_log STEPS LOGFILE BALLAST_MIB
//
// At every step the program checks the device's and managed memory's contents against the
// step number; at the end it reads its log back and checks that it holds exactly the lines
// "step 1" .. "step STEPS", each once and in order, and that the ballast is unchanged. A
// restart that lost or duplicated state, or a log cut wrongly, prints FAIL and exits 1.
#include "common.h"
#include <cstring>
#include <cstdint>
#include <unistd.h>
#include <fcntl.h>

__global__ void bump(int *d, int *m, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { d[i] += 1; m[i] += 2; }
}

static uint64_t mix(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
    return x;
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: fault_log STEPS LOGFILE BALLAST_MIB\n"); return 2; }
    const int steps = atoi(argv[1]);
    const char *logpath = argv[2];
    const size_t ballast_words = (size_t)atoi(argv[3]) << 17;  // MiB / 8 bytes
    const int n = 1 << 16;

    uint64_t *ballast = (uint64_t *)malloc(ballast_words * 8 + 8);
    EXPECT(ballast != nullptr);
    for (size_t i = 0; i < ballast_words; i++) ballast[i] = mix(i);

    int log = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    EXPECT(log >= 0);
    int *d, *m, *h = (int *)malloc(n * sizeof(int));
    CK(cudaMalloc(&d, n * sizeof(int)));
    CK(cudaMallocManaged(&m, n * sizeof(int)));
    CK(cudaMemset(d, 0, n * sizeof(int)));
    memset(m, 0, n * sizeof(int));
    printf("ready\n");
    fflush(stdout);
    for (int s = 1; s <= steps; s++) {
        bump<<<(n + 255) / 256, 256>>>(d, m, n);
        CK(cudaGetLastError());
        CK(cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost));
        CK(cudaDeviceSynchronize());
        for (int i = 0; i < n; i += 97) {
            if (h[i] != s || m[i] != 2 * s) {
                printf("FAIL step %d: device %d managed %d at %d\n", s, h[i], m[i], i);
                return 1;
            }
        }
        char line[64];
        int len = snprintf(line, sizeof line, "step %d\n", s);
        EXPECT(write(log, line, len) == len);
        printf("step %d\n", s);
        fflush(stdout);
        usleep(5000);
    }
    close(log);
    for (size_t i = 0; i < ballast_words; i++) {
        if (ballast[i] != mix(i)) { printf("FAIL ballast word %zu\n", i); return 1; }
    }
    FILE *f = fopen(logpath, "r");
    EXPECT(f != nullptr);
    char line[64];
    int want = 1;
    while (fgets(line, sizeof line, f)) {
        int got = -1;
        if (sscanf(line, "step %d", &got) != 1 || got != want) {
            printf("FAIL log line %d reads \"%.*s\"\n", want, (int)strcspn(line, "\n"), line);
            return 1;
        }
        want++;
    }
    fclose(f);
    if (want != steps + 1) { printf("FAIL log has %d lines, want %d\n", want - 1, steps); return 1; }
    CK(cudaFree(d));
    CK(cudaFree(m));
    printf("PASS\n");
    return 0;
}
