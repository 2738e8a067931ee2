#!/usr/bin/env bash
# GPU smoke test of the `cuda` backend (run on a machine with an NVIDIA GPU and driver).
#
# For every program of the CUDA test corpus (integration-tests/cuda/*.cu):
#   1. build it with nvcc (-cudart shared, so crum can interpose the runtime);
#   2. run it natively and under `crum run --device cuda`, compare the outputs;
#   3. if `crum checkpoint` works: start it under crum, checkpoint it half-way with --exit,
#      restart the image on the cuda backend, and compare the joined output with the native one;
#   4. print the runtime overhead of crum per program (best of $REPS runs each way).
# Targets (issue 7): <= 1% for programs with few long kernels, <= 3% with many tiny ones.
#
#   scripts/gpu-smoke.sh                 # whole corpus
#   scripts/gpu-smoke.sh vector_add      # programs whose name contains the argument
#   REPS=5 ARCH=sm_90 scripts/gpu-smoke.sh
#
# Exit status: 0 all passed (or no GPU here: prints why and does nothing), 1 a check failed.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
REPS=${REPS:-3}
ARCH=${ARCH:-sm_80}
filter=${1:-}
work=${CRUM_SMOKE_DIR:-$(mktemp -d /tmp/crum-gpu-smoke.XXXXXX)}

if ! { ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1' || [ -e /usr/lib/x86_64-linux-gnu/libcuda.so.1 ] || [ -e /usr/lib64/libcuda.so.1 ]; }; then
  echo "gpu-smoke: skipped: no CUDA driver library (libcuda.so.1) on this machine" >&2
  exit 0
fi
if [ ! -e /dev/nvidiactl ]; then
  echo "gpu-smoke: skipped: no NVIDIA device nodes (/dev/nvidiactl)" >&2
  exit 0
fi

eval "$(scripts/setup-cuda.sh --env)" || { echo "gpu-smoke: cannot set up nvcc" >&2; exit 1; }
export LD_LIBRARY_PATH="$CRUM_CUDA_HOME/lib:${LD_LIBRARY_PATH:-}"
cargo build --release -q -p crum-cli -p crum-interpose || { echo "gpu-smoke: build failed" >&2; exit 1; }
crum="$repo/target/release/crum"
have_ckpt=0
"$crum" checkpoint --help >/dev/null 2>&1 && "$crum" restart --help >/dev/null 2>&1 && have_ckpt=1
restart_dev=()
"$crum" restart --help 2>/dev/null | grep -q -- '--device' && restart_dev=(--device cuda)

# The proxy must be able to open the GPU, or every crum run below would measure nothing.
if ! "$crum" run --device cuda -- /bin/true 2>"$work/probe.err"; then
  echo "gpu-smoke: crum cannot open the GPU:" >&2
  cat "$work/probe.err" >&2
  exit 1
fi

now() { date +%s.%N; }
# Best wall time (seconds) of $REPS runs of "$@"; stdout of the last run in $out_file.
best_time() {
  local best="" t0 t1 dt
  for _ in $(seq "$REPS"); do
    t0=$(now)
    "$@" >"$out_file" 2>>"$err_file" || return 1
    t1=$(now)
    dt=$(echo "$t1 - $t0" | bc -l)
    if [ -z "$best" ] || [ "$(echo "$dt < $best" | bc -l)" = 1 ]; then best=$dt; fi
  done
  echo "$best"
}

shopt -s nullglob
sources=(integration-tests/cuda/*.cu)
if [ ${#sources[@]} -eq 0 ]; then
  echo "gpu-smoke: no programs in integration-tests/cuda/*.cu" >&2
  exit 1
fi

fail=0
printf '%-28s %10s %10s %9s  %-6s %-10s\n' program native_s crum_s overhead output ckpt/rst
for src in "${sources[@]}"; do
  name=$(basename "$src" .cu)
  [ -n "$filter" ] && [[ "$name" != *"$filter"* ]] && continue
  bin="$work/$name"
  args=()
  [ -f "${src%.cu}.args" ] && read -r -a args <"${src%.cu}.args"
  if ! nvcc -cudart shared -arch="$ARCH" -O2 "$src" -o "$bin" 2>"$work/$name.build.err"; then
    printf '%-28s build failed (see %s)\n' "$name" "$work/$name.build.err"
    fail=1
    continue
  fi
  err_file="$work/$name.err"
  out_file="$work/$name.native.out"
  tn=$(best_time "$bin" "${args[@]}") || { printf '%-28s native run failed\n' "$name"; fail=1; continue; }
  out_file="$work/$name.crum.out"
  tc=$(best_time "$crum" run --device cuda -- "$bin" "${args[@]}") || { printf '%-28s crum run failed (see %s)\n' "$name" "$err_file"; fail=1; continue; }
  same=ok
  cmp -s "$work/$name.native.out" "$work/$name.crum.out" || { same=DIFF; fail=1; }
  overhead=$(echo "($tc - $tn) * 100 / $tn" | bc -l)

  ck=n/a
  if [ "$have_ckpt" = 1 ]; then
    ck=FAIL
    img="$work/$name.images"
    rm -rf "$img" && mkdir -p "$img"
    "$crum" run --device cuda --dir "$img" -- "$bin" "${args[@]}" >"$work/$name.part1.out" 2>>"$err_file" &
    runner=$!
    # Checkpoint half-way through the native run time (at least 0.2 s in).
    sleep "$(echo "if ($tn / 2 > 0.2) $tn / 2 else 0.2" | bc -l)"
    if "$crum" checkpoint --all --exit --dir "$img" 2>>"$err_file"; then
      wait "$runner"
      if "$crum" restart "$img" "${restart_dev[@]}" >"$work/$name.part2.out" 2>>"$err_file"; then
        cat "$work/$name.part1.out" "$work/$name.part2.out" >"$work/$name.joined.out"
        cmp -s "$work/$name.native.out" "$work/$name.joined.out" && ck=ok
      fi
    else
      # The program may have finished before the checkpoint: that is not a restart test.
      wait "$runner" && ck=late
    fi
    [ "$ck" = FAIL ] && fail=1
  fi
  printf '%-28s %10.3f %10.3f %8.2f%%  %-6s %-10s\n' "$name" "$tn" "$tc" "$overhead" "$same" "$ck"
done
echo "gpu-smoke: outputs and logs in $work" >&2
exit $fail
