// Shared helpers for the crum CUDA test corpus: error checking that exits nonzero.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_)); exit(1); } } while (0)
#define EXPECT(c) do { if (!(c)) { printf("FAIL %s:%d %s\n", __FILE__, __LINE__, #c); exit(1); } } while (0)

// Checkpoint test gates (integration-tests/tests/cuda_ckpt.rs). With CRUM_TEST_GATE=<dir>,
// GATE(k) writes k to <dir>/at and waits until <dir>/go-<k> or <dir>/go-all exists, so a test
// can checkpoint the program at a known point (CUDA work possibly still queued), let it go on,
// or kill it there. The wait only tests for the files (no descriptor stays open that a restart
// would have to reopen). Without the variable GATE does nothing; it never prints.
#include <fcntl.h>
#include <unistd.h>
static inline void GATE(int k) {
    const char *dir = getenv("CRUM_TEST_GATE");
    if (!dir) return;
    char at[4096], tmp[4096], go[4096], all[4096], b[32];
    snprintf(at, sizeof at, "%s/at", dir);
    snprintf(tmp, sizeof tmp, "%s/at.tmp", dir);
    snprintf(go, sizeof go, "%s/go-%d", dir, k);
    snprintf(all, sizeof all, "%s/go-all", dir);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) { perror("GATE"); exit(3); }
    int n = snprintf(b, sizeof b, "%d\n", k);
    if (write(fd, b, n) != n) { perror("GATE"); exit(3); }
    close(fd);
    rename(tmp, at);
    while (access(go, F_OK) != 0 && access(all, F_OK) != 0) usleep(2000);
}
