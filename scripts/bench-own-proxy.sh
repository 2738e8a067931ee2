#!/usr/bin/env bash
# What a CUDA program started as a child of a job's process pays for its own device proxy
# (issue 17, `interpose/src/own_proxy.rs`): the wall time of `crum run -- job_device x 1 0`
# (the program `crum run` starts, on crum run's proxy) against `crum run -- sh -c
# 'job_device x 1 0; true'` (a shell's child: the interposer starts a proxy for it on its
# first CUDA call), each ROUNDS times, on the emulated device. Prints each run and the means.
#
# Usage: scripts/bench-own-proxy.sh [ROUNDS]   (default 10)
# Env: CRUM_BIN (default target/release/crum, built if missing), CRUM_CUDA_HOME (else
#      scripts/setup-cuda.sh finds the toolkit), DEVICE (default emu).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${1:-10}
DEVICE=${DEVICE:-emu}
if [ -z "${CRUM_BIN:-}" ]; then
    (cd "$ROOT" && cargo build -q --release -p crum-cli -p crum-interpose -p crum-preload)
fi
CRUM=${CRUM_BIN:-$ROOT/target/release/crum}
if [ -z "${CRUM_CUDA_HOME:-}" ]; then
    eval "$("$ROOT/scripts/setup-cuda.sh" | grep '^export CRUM_CUDA_HOME=')"
fi
DIR=$(mktemp -d "${TMPDIR:-/tmp}/bench-own-proxy.XXXX")
trap 'rm -rf "$DIR"' EXIT
PROG=$DIR/job_device
"$CRUM_CUDA_HOME/bin/nvcc" -cudart shared -arch=sm_80 -o "$PROG" "$ROOT/integration-tests/cuda/job_device.cu"
export CRUM_CONTROL_DIR=$DIR/sock
mkdir -p "$CRUM_CONTROL_DIR" && chmod 700 "$CRUM_CONTROL_DIR"

ms() { # command...: wall milliseconds of one run (it must pass)
    local t0 t1
    t0=$(date +%s%N)
    "$@" > "$DIR/out" 2>&1 || { cat "$DIR/out" >&2; echo "failed: $*" >&2; exit 1; }
    grep -q PASS "$DIR/out" || { cat "$DIR/out" >&2; exit 1; }
    t1=$(date +%s%N)
    echo $(( (t1 - t0) / 1000000 ))
}

root=0; child=0
for i in $(seq 1 "$ROUNDS"); do
    a=$(ms "$CRUM" run --device "$DEVICE" --dir "$DIR/img" -- "$PROG" x 1 0)
    b=$(ms "$CRUM" run --device "$DEVICE" --dir "$DIR/img" -- sh -c "$PROG x 1 0; true")
    echo "round $i: crum run's program ${a} ms, a shell's child (own proxy) ${b} ms"
    root=$((root + a)); child=$((child + b))
done
echo "mean over $ROUNDS: crum run's program $((root / ROUNDS)) ms, a shell's child with its own proxy $((child / ROUNDS)) ms (difference $(((child - root) / ROUNDS)) ms)"
