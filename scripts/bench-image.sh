#!/usr/bin/env bash
# Image benchmark: writes images of random, compressible and sparse memory (256 MiB and
# 1 GiB by default) and prints, per case:
#   image_MB / ratio      image size on disk, and memory size divided by it
#   write_MB/s            memory bytes per second, prepare → fsynced rename
#   plain_MB/s, w/pl      a plain write+fsync of the same bytes to the same disk, and the
#                         ratio of the two times (>1: the image was written faster)
#   restore_MB/s          memory bytes per second decompressed into fresh anonymous memory
#   readf_MB/s, r/rf      reading the image's files into a buffer, and the time ratio (1 = as fast)
#   readm_MB/s, r/rm      reading them into fresh anonymous memory (restart must create the
#                         memory; first-touch faults are slow on virtual machines), and the ratio
#   cold                  whether the page cache was dropped before the reads (needs root)
# Each figure is the best of BENCH_REPS runs (default 2), baseline and image alternating.
# A `dd conv=fsync` to the same directory is printed first for reference.
#
# Usage: scripts/bench-image.sh [SIZES_MIB (default 256,1024)] [DIR (default target/bench-image)]
# Environment: BENCH_REPS, BENCH_LEVEL (zstd level, default 1), BENCH_THREADS (restore threads, default 1).
set -euo pipefail
cd "$(dirname "$0")/.."

sizes="${1:-256,1024}"
dir="${2:-target/bench-image}"
mkdir -p "$dir"
drop=""
if [ "$(id -u)" = 0 ] && [ -w /proc/sys/vm/drop_caches ]; then drop=1; fi

echo "== dd to $dir (reference; 1 GiB of zeros, conv=fsync)"
dd if=/dev/zero of="$dir/dd.bin" bs=4M count=256 conv=fsync 2>&1 | tail -n 1
rm -f "$dir/dd.bin"

echo "== crum image (zstd level ${BENCH_LEVEL:-1}, restore threads ${BENCH_THREADS:-1}, sizes ${sizes} MiB, cold reads: ${drop:-no})"
BENCH_DIR="$dir" BENCH_SIZES_MIB="$sizes" BENCH_DROP_CACHES="${drop}" \
    cargo test --release -q -p crum-ckpt --test image_bench -- --ignored --nocapture --test-threads=1 2>&1 \
    | grep -E '^(data|random|compressible|sparse) ' || { echo "benchmark failed" >&2; exit 1; }
rm -rf "$dir"
