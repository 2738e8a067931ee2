// A CUDA program with a log file it keeps writing (integration-tests/tests/
// cuda_restart_validation.rs): 1 MiB of device memory filled by a kernel (so its image stores
// the device data as a compressed blob), then one line per step appended to LOGFILE, which
// stays open for writing, forever (the test kills it).
//
//   ckpt_log_file LOGFILE
#include "common.h"
#include <cstring>
#include <unistd.h>
#include <fcntl.h>

__global__ void fill(unsigned *d, int n, unsigned step) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) d[i] = (unsigned)i * 2654435761u + step;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: ckpt_log_file LOGFILE\n"); return 2; }
    const int n = 1 << 18;  // 1 MiB
    int log = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    EXPECT(log >= 0);
    unsigned *d;
    CK(cudaMalloc(&d, n * sizeof(unsigned)));
    fill<<<(n + 255) / 256, 256>>>(d, n, 0);
    CK(cudaDeviceSynchronize());
    printf("ready\n");
    fflush(stdout);
    for (unsigned s = 1;; s++) {
        fill<<<(n + 255) / 256, 256>>>(d, n, s);
        CK(cudaDeviceSynchronize());
        char line[64];
        int len = snprintf(line, sizeof line, "step %u\n", s);
        EXPECT(write(log, line, len) == len);
        usleep(2000);
    }
}
