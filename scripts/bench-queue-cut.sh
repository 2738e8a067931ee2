#!/usr/bin/env bash
# Checkpoint pause of a CUDA program with a long queue of work not started, and with a long
# grid running (issue 16).
#
# integration-tests/cuda/ckpt_queue_cut.cu queues SMALL kernel launches (default 20000, each
# well under a millisecond on the emulated device) and a thread waits in
# cudaDeviceSynchronize; at its first gate one `crum checkpoint` is taken in each mode:
#   cut    the default: the proxy holds its streams, saves the launches not started and the
#          waiting call, and the program goes on at once;
#   drain  CRUM_CKPT_QUEUE=drain: the checkpoint waits for the whole queue (before issue 16).
# Printed per mode: the program-visible pause and its drain phase (the `checkpoint pause` log
# line), the time until the image is complete, the launches saved unstarted (`crum inspect
# --json`), the image size; the program must still end with PASS. Last, drain's pause against
# cut's (measured in the same run).
#
# The same two modes on the cuda backend (`crum run --device cuda`) over the emulated driver
# (integration-tests/emu-libcuda, CRUM_LIBCUDA; built with the workspace), CUDA_SMALL launches
# (default SMALL): before issue 16's cuda part the checkpoint waited for the driver's whole
# queue (drain); now the proxy holds all but a window of a few operations per stream
# (CRUM_CUDA_WINDOW) and saves the rest (cut). Printed the same way, then drain's pause
# against cut's.
#
# Then integration-tests/cuda/ckpt_long_grid.cu (512 blocks, GRID_ITERS loop iterations per
# thread, default 12000) is checkpointed while its grid runs, under each kernel policy
# (CRUM_CKPT_KERNEL):
#   auto   the default (short blocks: stop at a block boundary);
#   block  the grid stops at a block boundary, the rest is saved;
#   flush  the grid (idempotent) is abandoned and saved whole, to run again;
#   drain  the checkpoint waits for the grid.
# Printed: the pause, the block the saved rest starts at, the image size; then each policy's
# pause against drain's.
#
# Usage: scripts/bench-queue-cut.sh [SMALL]
# Env: BENCH_PARTS (default "emu cuda grid": which of the three parts run), CUDA_SMALL,
#      CRUM_BIN (default target/release/crum, built if missing), BENCH_DIR (default a
#      temporary directory under ./target, removed at the end unless set).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SMALL=${1:-20000}
if [ -z "${CRUM_BIN:-}" ]; then
    (cd "$ROOT" && cargo build -q --release -p crum-cli -p crum-interpose)
fi
CRUM=${CRUM_BIN:-$ROOT/target/release/crum}
KEEP=${BENCH_DIR:+1}
BENCH_DIR=${BENCH_DIR:-$(mktemp -d "$ROOT/target/bench-queue-cut.XXXX")}
mkdir -p "$BENCH_DIR"
eval "$("$ROOT/scripts/setup-cuda.sh" --env)"
PROG=$BENCH_DIR/ckpt_queue_cut
nvcc -cudart shared -arch=sm_80 -O2 -o "$PROG" "$ROOT/integration-tests/cuda/ckpt_queue_cut.cu"
GRID=$BENCH_DIR/ckpt_long_grid
nvcc -cudart shared -arch=sm_80 -O2 -o "$GRID" "$ROOT/integration-tests/cuda/ckpt_long_grid.cu"
GRID_ITERS=${GRID_ITERS:-12000}

runpid=""
cleanup() {
    if [ -n "$runpid" ]; then kill -9 "$runpid" 2>/dev/null; fi
    [ -z "$KEEP" ] && rm -rf "$BENCH_DIR"
    return 0
}
trap cleanup EXIT
now() { date +%s.%N; }

PARTS=${BENCH_PARTS:-emu cuda grid}
# queue_modes DEVICE COUNT: the cut and drain modes of ckpt_queue_cut on DEVICE.
queue_modes() {
    local device=$1 count=$2
    echo "ckpt_queue_cut, $count launches queued, --device $device"
    printf "%-6s %12s %12s %14s %10s %10s  %s\n" mode pause_ms drain_ms image_done_ms saved img_MiB result
    declare -A PAUSE
    for mode in cut drain; do
        d=$BENCH_DIR/$device-$mode
        rm -rf "$d"; mkdir -p "$d/gate" "$d/images"
        q=cut; [ "$mode" = drain ] && q=drain
        CRUM_TEST_GATE=$d/gate CRUM_LOG=crum_ckpt=info CRUM_LOG_FILE=$d/log CRUM_CKPT_QUEUE=$q \
            "$CRUM" run --device "$device" -- "$PROG" "$count" 1 > "$d/out" 2> "$d/err" &
        runpid=$!
        until [ "$(cat "$d/gate/at" 2>/dev/null)" = 1 ]; do sleep 0.01; done
        pid=$(pgrep -P "$runpid" -f "^$PROG" | head -1)
        t0=$(now)
        img=$("$CRUM" checkpoint --dir "$d/images" "$pid")
        t1=$(now)
        touch "$d/gate/go-all"
        wait "$runpid" || true
        runpid=""
        line=$(grep "checkpoint pause" "$d/log" | tail -1 | sed 's/\x1b\[[0-9;]*m//g')
        field() { echo "$line" | grep -o "$1=[0-9]*" | cut -d= -f2; }
        pause=$(( $(field pause_us) / 1000 )); drain=$(( $(field drain_us) / 1000 ))
        saved=$("$CRUM" inspect --json "$img" | python3 -c 'import json,sys; d=json.load(sys.stdin)["device"]; print(sum(1 for w in d["queue"] if w["op"]=="launch"))')
        size=$(du -sm "$img" | cut -f1)
        done_ms=$(python3 -c "print(round(($t1-$t0)*1000))")
        PAUSE[$mode]=$pause
        printf "%-6s %12s %12s %14s %10s %10s  %s\n" "$mode" "$pause" "$drain" "$done_ms" "$saved" "$size" "$(tail -1 "$d/out")"
    done
    python3 -c "c=${PAUSE[cut]}; d=${PAUSE[drain]}; print(f'pause ($device): drain {d} ms against cut {c} ms: {d/max(c,1):.1f}x longer with $count launches queued')"
    echo
}
case " $PARTS " in *" emu "*) queue_modes emu "$SMALL" ;; esac
case " $PARTS " in
    *" cuda "*)
        LIB=${CARGO_TARGET_DIR:-$ROOT/target}/debug/libcrum_emu_libcuda.so
        [ -f "$LIB" ] || (cd "$ROOT" && cargo build -q -p crum-emu-libcuda)
        (export CRUM_LIBCUDA=$LIB; queue_modes cuda "${CUDA_SMALL:-$SMALL}")
        ;;
esac
case " $PARTS " in *" grid "*) ;; *) exit 0 ;; esac

printf "%-6s %12s %12s %10s  %s\n" policy pause_ms rest_from img_MiB result
declare -A GP
for policy in auto block flush drain; do
    d=$BENCH_DIR/grid-$policy
    rm -rf "$d"; mkdir -p "$d/gate" "$d/images"
    CRUM_TEST_GATE=$d/gate CRUM_LOG=crum_ckpt=info CRUM_LOG_FILE=$d/log CRUM_CKPT_KERNEL=$policy \
        "$CRUM" run -- "$GRID" "$GRID_ITERS" > "$d/out" 2> "$d/err" &
    runpid=$!
    until [ "$(cat "$d/gate/at" 2>/dev/null)" = 1 ]; do sleep 0.01; done
    pid=$(pgrep -P "$runpid" -f "^$GRID" | head -1)
    img=$("$CRUM" checkpoint --dir "$d/images" "$pid")
    touch "$d/gate/go-all"
    wait "$runpid" || true
    runpid=""
    line=$(grep "checkpoint pause" "$d/log" | tail -1 | sed 's/\x1b\[[0-9;]*m//g')
    pause=$(( $(echo "$line" | grep -o "pause_us=[0-9]*" | cut -d= -f2) / 1000 ))
    from=$("$CRUM" inspect --json "$img" | python3 -c 'import json,sys,re; d=json.load(sys.stdin)["device"]; l=[w["detail"] for w in d["queue"] if w["op"]=="launch" and "from block" in w["detail"]]; print(re.search(r"from block (\d+)", l[0]).group(1) if l else "-")')
    GP[$policy]=$pause
    printf "%-6s %12s %12s %10s  %s\n" "$policy" "$pause" "$from" "$(du -sm "$img" | cut -f1)" "$(tail -1 "$d/out")"
done
for policy in auto block flush; do
    python3 -c "b=${GP[$policy]}; d=${GP[drain]}; print(f'pause with a grid running: drain {d} ms against $policy {b} ms: {d/max(b,1):.1f}x longer')"
done
