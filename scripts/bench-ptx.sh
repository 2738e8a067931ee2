#!/usr/bin/env bash
# PTX interpreter throughput: instructions per second on one worker and on every core, for a
# compute-heavy nvcc-compiled kernel (ptx/examples/bench_kernel.cu). A benchmark, not a test.
#
#   scripts/bench-ptx.sh [loop-iterations]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
eval "$("$repo/scripts/setup-cuda.sh" --env)"
cd "$repo"
cargo run --quiet --release -p crum-ptx --example bench -- "$@"
