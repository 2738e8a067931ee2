// Shared helpers for the crum CUDA test corpus: error checking that exits nonzero.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_)); exit(1); } } while (0)
#define EXPECT(c) do { if (!(c)) { printf("FAIL %s:%d %s\n", __FILE__, __LINE__, #c); exit(1); } } while (0)

// Checkpoint test gates (integration-tests/tests/cuda_ckpt.rs). With CRUM_TEST_GATE=<dir>,
// GATE(k) writes k to <dir>/at and waits until <dir>/go holds a number >= k, so a test can
// checkpoint the program at a known point (CUDA work possibly still queued), let it go on, or
// kill it there. Without the variable GATE does nothing; it never prints.
#include <fcntl.h>
#include <unistd.h>
static inline long gate_read_(const char *path) {
    char b[32] = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, b, sizeof b - 1);
    close(fd);
    return n > 0 ? atol(b) : -1;
}
static inline void GATE(int k) {
    const char *dir = getenv("CRUM_TEST_GATE");
    if (!dir) return;
    char at[4096], tmp[4096], go[4096], b[32];
    snprintf(at, sizeof at, "%s/at", dir);
    snprintf(tmp, sizeof tmp, "%s/at.tmp", dir);
    snprintf(go, sizeof go, "%s/go", dir);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) { perror("GATE"); exit(3); }
    int n = snprintf(b, sizeof b, "%d\n", k);
    if (write(fd, b, n) != n) { perror("GATE"); exit(3); }
    close(fd);
    rename(tmp, at);
    while (gate_read_(go) < k) usleep(2000);
}
