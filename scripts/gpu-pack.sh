#!/usr/bin/env bash
# Prepares, on a machine without a GPU, everything `scripts/gpu-smoke.sh` needs on a GPU
# machine that has no Rust toolchain and no network: release builds of crum (stripped), the
# backend conformance test binary, the CUDA corpus built with nvcc for the GPU's architecture
# (SASS) and for the emulated device (PTX, so an image taken on the GPU can restart on the
# emulated device), and the shared CUDA runtime the native runs use.
#
#   scripts/gpu-pack.sh [DIR]        # default .gpu/ (ignored by git)
#   SM=sm_90 scripts/gpu-pack.sh     # the GPU's architecture (default sm_90: H100, H200)
#   PROFILE=dev scripts/gpu-pack.sh  # the dev build that `cargo build --workspace` and the
#                                    # test suite made (optimized here too), as it is: no
#                                    # build (one with other features could replace the
#                                    # libraries a running test suite uses)
#
# Then, on the GPU machine, in a copy of this tree holding DIR:
#   CRUM_GPU_PACK=DIR scripts/gpu-smoke.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
pack=${1:-.gpu}
SM=${SM:-sm_90}
eval "$(scripts/setup-cuda.sh --env)"
PROFILE=${PROFILE:-release}
case $PROFILE in
  release) cargo_profile=(--release); out=target/release ;;
  dev) cargo_profile=(); out=target/debug ;;
  *) echo "gpu-pack: PROFILE is release or dev, not $PROFILE" >&2; exit 2 ;;
esac
if [ "$PROFILE" = release ]; then
  cargo build "${cargo_profile[@]}" --locked -q -p crum-cli -p crum-interpose -p crum-preload
  cargo test "${cargo_profile[@]}" --locked -q -p crum-proxy --test conformance --no-run 2>/dev/null
  conf=$(cargo test "${cargo_profile[@]}" --locked -p crum-proxy --test conformance --no-run --message-format=json 2>/dev/null \
    | sed -n 's/.*"executable":"\([^"]*conformance-[^"]*\)".*/\1/p' | tail -1)
else
  conf=$(ls -t "$out"/deps/conformance-* 2>/dev/null | grep -v '\.d$' | head -1)
fi
[ -x "$conf" ] || { echo "gpu-pack: conformance test binary not found" >&2; exit 1; }
rm -rf "$pack"
mkdir -p "$pack/bin" "$pack/corpus" "$pack/lib"
for f in crum libcrum.so libcrum_libc.so; do
  strip -o "$pack/bin/$f" "$out/$f"
done
strip -o "$pack/bin/conformance" "$conf"
cp -L "$CRUM_CUDA_HOME/lib/libcudart.so.13" "$pack/lib/"
sm=${SM#sm_}
gencode=(-gencode "arch=compute_$sm,code=sm_$sm" -gencode arch=compute_80,code=compute_80)
built=0
for src in integration-tests/cuda/*.cu integration-tests/cuda/*/; do
  name=$(basename "${src%/}" .cu)
  case $name in bench_* | expected) continue ;; esac
  flags=(-cudart shared -O2)
  if [ -d "$src" ]; then
    srcs=("$src"*.cu)
    flags+=(-rdc=true)
  else
    srcs=("$src")
  fi
  [ "$name" = per_thread_stream ] && flags+=(--default-stream per-thread)
  nvcc "${flags[@]}" "${gencode[@]}" -o "$pack/corpus/$name" "${srcs[@]}" -lpthread &
  # Two compilers at a time.
  if (( ++built % 2 == 0 )); then wait -n || true; fi
done
wait
n=$(ls "$pack/corpus" | wc -l)
echo "gpu-pack: $n programs for $SM (+ compute_80 PTX), crum and the conformance tests in $pack ($(du -sh "$pack" | cut -f1))" >&2
