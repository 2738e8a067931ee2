#!/usr/bin/env bash
# Channel benchmarks for `crum run` (emulated device): the cost of a pipelined call, of a
# synchronous round trip, and host<->device copy bandwidth for 64 MiB against plain memcpy
# of the same size, all measured in one run by a small CUDA program built with nvcc.
#
#   scripts/bench-channel.sh            # release build, prints a table
#
# Targets (issue 3): pipelined call <= 0.15 us, round trip <= 2 us, copies >= 80% of memcpy.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
eval "$(scripts/setup-cuda.sh --env)"
cargo build --release -q -p crum-cli -p crum-interpose
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/bench.cu" <<'CU'
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
#define CK(x) do { cudaError_t e = (x); if (e) { printf("error %s at %d\n", cudaGetErrorName(e), __LINE__); return 1; } } while (0)
int main() {
  cudaStream_t s; CK(cudaStreamCreate(&s));
  cudaEvent_t ev; CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  // Warm up: connect, create the proxy-side objects.
  for (int i = 0; i < 1000; i++) { CK(cudaEventRecord(ev, s)); CK(cudaStreamQuery(s) == cudaErrorNotReady ? cudaSuccess : cudaSuccess); }
  CK(cudaStreamSynchronize(s));
  // Pipelined: event records are sent without waiting. Batches of 1000 (the ring holds
  // them all), then drained outside the timed region.
  const int batch = 1000, rounds = 200;
  double piped = 0;
  for (int r = 0; r < rounds; r++) {
    double t0 = now();
    for (int i = 0; i < batch; i++) cudaEventRecord(ev, s);
    piped += now() - t0;
    CK(cudaStreamSynchronize(s));
  }
  double piped_us = piped / (batch * rounds) * 1e6;
  // Synchronous round trip: cudaStreamQuery on an idle stream waits for the proxy's answer.
  const int rt = 100000;
  double t0 = now();
  for (int i = 0; i < rt; i++) CK(cudaStreamQuery(s));
  double rt_us = (now() - t0) / rt * 1e6;
  // Bandwidth: 64 MiB, pageable host memory, repeated; memcpy baseline on the same buffers.
  size_t n = 64u << 20;
  char *h = (char*)malloc(n), *h2 = (char*)malloc(n);
  memset(h, 1, n); memset(h2, 2, n);
  void *d; CK(cudaMalloc(&d, n));
  CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice)); CK(cudaMemcpy(h2, d, n, cudaMemcpyDeviceToHost));
  const int reps = 20;
  t0 = now(); for (int i = 0; i < reps; i++) memcpy(h2, h, n); double mc = (now() - t0) / reps;
  t0 = now(); for (int i = 0; i < reps; i++) CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice)); double h2d = (now() - t0) / reps;
  t0 = now(); for (int i = 0; i < reps; i++) CK(cudaMemcpy(h2, d, n, cudaMemcpyDeviceToHost)); double d2h = (now() - t0) / reps;
  double gb = n / 1e9;
  printf("| measure | value | target |\n|---|---|---|\n");
  printf("| pipelined call (cudaEventRecord) | %.3f us | <= 0.15 us |\n", piped_us);
  printf("| sync round trip (cudaStreamQuery) | %.3f us | <= 2 us |\n", rt_us);
  printf("| memcpy 64 MiB (baseline) | %.2f GB/s | |\n", gb / mc);
  printf("| H2D 64 MiB | %.2f GB/s (%.0f%% of memcpy) | >= 80%% |\n", gb / h2d, 100 * mc / h2d);
  printf("| D2H 64 MiB | %.2f GB/s (%.0f%% of memcpy) | >= 80%% |\n", gb / d2h, 100 * mc / d2h);
  return 0;
}
CU
nvcc -cudart shared -O2 -arch=sm_80 "$work/bench.cu" -o "$work/bench"
target/release/crum run --device emu -- "$work/bench"
# Spinning waits need a free core on each side: figures taken on a busy machine are worse.
echo "(load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores)"
