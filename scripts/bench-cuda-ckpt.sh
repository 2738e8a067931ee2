#!/usr/bin/env bash
# Checkpoint pause of a CUDA program against its device footprint (issue 6).
#
# For each footprint, integration-tests/cuda/bench_footprint.cu runs under `crum run` (default
# device) with that much device memory plus 1/8 of it in managed memory, all holding
# incompressible data, and a small kernel looping. One `crum checkpoint` is taken; its
# `checkpoint pause` log line (CRUM_LOG=crum_ckpt=info) gives the program-visible pause broken
# into phases:
#   quiesce   new CUDA calls held, calls in flight finished (less the device drain)
#   drain     the proxy finishing all queued device work
#   stop      stopping the program's threads
#   device    device and managed memory copied out of the proxy for the image
#   fork      capture, writer preparation and fork
#   pause     all of it: what the program's threads see
# plus the time `crum checkpoint` took until the image was complete (the forked child writes
# it while the program runs on), the image's size on disk, and the time `crum restart` takes
# until the restarted program's first heartbeat (a fresh proxy, device memory re-created at
# its addresses and uploaded; page cache warm).
#
# Usage: scripts/bench-cuda-ckpt.sh [FOOTPRINTS_MIB...]   (default: 64 256 1024 2048)
# Env: CRUM_BIN (default target/release/crum, built with libcrum.so if missing),
#      BENCH_DIR (default a temporary directory under ./target, removed at the end unless set).
# Output: a table on stdout; bench-cuda-ckpt.tsv in BENCH_DIR.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SIZES=("$@")
[ ${#SIZES[@]} -eq 0 ] && SIZES=(64 256 1024 2048)
if [ -z "${CRUM_BIN:-}" ]; then
    (cd "$ROOT" && cargo build -q --release -p crum-cli -p crum-interpose)
fi
CRUM=${CRUM_BIN:-$ROOT/target/release/crum}
KEEP=${BENCH_DIR:+1}
BENCH_DIR=${BENCH_DIR:-$(mktemp -d "$ROOT/target/bench-cuda-ckpt.XXXX")}
mkdir -p "$BENCH_DIR"
eval "$("$ROOT/scripts/setup-cuda.sh" --env)"
PROG=$BENCH_DIR/bench_footprint
nvcc -cudart shared -arch=sm_80 -O2 -o "$PROG" "$ROOT/integration-tests/cuda/bench_footprint.cu"

runpid=""
cleanup() {
    if [ -n "$runpid" ]; then pkill -9 -P "$runpid" -f "^$PROG" 2>/dev/null; kill -9 "$runpid" 2>/dev/null; fi
    [ -z "$KEEP" ] && rm -rf "$BENCH_DIR"
    return 0
}
trap cleanup EXIT

now() { date +%s.%N; }
wait_line() { # file pattern pid [timeout_s]
    local t=0
    while ! grep -q "$2" "$1" 2>/dev/null; do
        kill -0 "$3" 2>/dev/null || { echo "the program ended: $(cat "$1" "$1.err")" >&2; return 1; }
        sleep 0.02; t=$((t+1))
        if [ $t -gt $((${4:-600}*50)) ]; then echo "timeout waiting for $2 in $1" >&2; return 1; fi
    done
}
field() { # line name -> value
    sed -n "s/.* $2=\([0-9]*\).*/\1/p" <<< "$1"
}
ms() { awk -v us="$1" 'BEGIN { printf "%.1f", us / 1000 }'; }

TSV=$BENCH_DIR/bench-cuda-ckpt.tsv
printf "footprint\tdevice_data\tquiesce_ms\tdrain_ms\tstop_ms\tdevice_ms\tfork_ms\tpause_ms\twritten_s\timage\trestart_s\n" > "$TSV"
for S in "${SIZES[@]}"; do
    imgs=$BENCH_DIR/imgs-$S; rm -rf "$imgs"
    out=$BENCH_DIR/run-$S.out; log=$BENCH_DIR/ckpt-$S.log; rm -f "$log"
    # Descriptors inherited from whatever runs us stay out of the program.
    ( for fd in $(ls /proc/$BASHPID/fd); do [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null; done
      CRUM_LOG=crum_ckpt=info CRUM_LOG_FILE=$log exec "$CRUM" run -- "$PROG" "$S" ) > "$out" 2> "$out.err" &
    runpid=$!
    wait_line "$out" '^ready' "$runpid"
    app=$(pgrep -P "$runpid" -f "^$PROG" | head -n 1)
    sleep 0.5   # a few loop iterations: kernels queued and running
    t0=$(now)
    img=$("$CRUM" checkpoint "$app" --dir "$imgs" | tail -n 1)
    t1=$(now)
    kill -9 "$app"; wait "$runpid" 2>/dev/null || true; runpid=""
    line=$(grep 'checkpoint pause' "$log" | tail -n 1)
    [ -n "$line" ] || { echo "no 'checkpoint pause' line in $log" >&2; exit 1; }
    bytes=$(du -sb "$img" | awk '{print $1}')
    rout=$BENCH_DIR/restart-$S.out
    r0=$(now)
    ( for fd in $(ls /proc/$BASHPID/fd); do [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null; done
      exec "$CRUM" restart "$img" ) > "$rout" 2> "$rout.err" &
    runpid=$!
    wait_line "$rout" '^hb' "$runpid"
    r1=$(now)
    kill -9 "$runpid"; wait "$runpid" 2>/dev/null || true; runpid=""
    printf "%s MiB\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%s\t%.2f\n" "$S" \
        "$(numfmt --to=iec-i --suffix=B "$(field "$line" device_bytes)")" \
        "$(ms "$(field "$line" quiesce_us)")" "$(ms "$(field "$line" drain_us)")" \
        "$(ms "$(field "$line" stop_us)")" "$(ms "$(field "$line" device_us)")" \
        "$(ms "$(field "$line" fork_us)")" "$(ms "$(field "$line" pause_us)")" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
        "$(numfmt --to=iec-i --suffix=B "$bytes")" \
        "$(awk -v a="$r0" -v b="$r1" 'BEGIN { print b - a }')" >> "$TSV"
    rm -rf "$imgs"
done

echo "CUDA checkpoint pause by phase ($(uname -r), $(nproc) cores, $("$CRUM" --version 2>/dev/null || echo crum); default device; managed = 1/8 of the device footprint on top)"
echo
column -t -s $'\t' "$TSV"
echo
echo "pause = quiesce + drain + stop + device + fork (ms, what the program sees); written_s = until"
echo "\`crum checkpoint\` returned with the complete image; image = its size on disk (data is random);"
echo "restart_s = \`crum restart\` to the restarted program's first heartbeat."
