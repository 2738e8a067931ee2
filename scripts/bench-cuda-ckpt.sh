#!/usr/bin/env bash
# Checkpoint pause of a CUDA program against its device footprint (issues 6 and 15).
#
# For each footprint, integration-tests/cuda/bench_footprint.cu runs under `crum run` (default
# device) with that much device memory plus managed memory (MANAGED_MIB, default 1/8 of the
# device footprint), all holding incompressible data, and a small kernel looping. One
# `crum checkpoint` is taken in each mode (MODES, default "snapshot copy"):
#   snapshot  device memory is read by the image writer from the proxy's copy-on-write
#             snapshot after the program runs again (the default);
#   copy      all device memory is copied out of the proxy during the pause
#             (CRUM_CKPT_DEVICE=copy, the design before issue 15).
# Its `checkpoint pause` log line (CRUM_LOG=crum_ckpt=info) gives the program-visible pause
# broken into phases:
#   quiesce   new CUDA calls held, calls in flight finished (less the device drain)
#   drain     the proxy finishing all queued device work
#   stop      stopping the program's threads
#   device    device data copied out of the proxy in the pause (copied: how many bytes; with a
#             snapshot only managed and pinned memory), and the proxy's fork
#   fork      capture, writer preparation and fork
#   pause     all of it: what the program's threads see
# plus the time `crum checkpoint` took until the image was complete (the forked child writes
# it while the program runs on), the program's largest gap between two heartbeats (loop
# iterations) while the image was written, against its median gap before (copy-on-write
# faults slow it), the image's size on disk, and the time `crum restart` takes until the
# restarted program's first heartbeat (a fresh proxy, device memory re-created at its
# addresses and uploaded; page cache warm). Last, each mode's pause against its pause at the
# smallest footprint.
#
# Usage: scripts/bench-cuda-ckpt.sh [FOOTPRINTS_MIB...]   (default: 64 256 1024 2048)
# Env: MODES, MANAGED_MIB, CRUM_BIN (default target/release/crum, built with libcrum.so if missing),
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
more_lines() { # file pattern count pid: wait until more than count lines match
    local t=0
    while [ "$(grep -c "$2" "$1" 2>/dev/null)" -le "$3" ]; do
        kill -0 "$4" 2>/dev/null || { echo "the program ended: $(tail -n 3 "$1")" >&2; return 1; }
        sleep 0.02; t=$((t+1))
        if [ $t -gt 30000 ]; then echo "timeout waiting for $2 in $1" >&2; return 1; fi
    done
}
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
MODES=${MODES:-snapshot copy}
printf "footprint\tmode\tdevice_data\tcopied\tquiesce_ms\tdrain_ms\tstop_ms\tdevice_ms\tfork_ms\tpause_ms\twritten_s\tgap_ms\tgap_before_ms\timage\trestart_s\n" > "$TSV"
# Largest and median gap (ms) between heartbeats in $1 with times in [$2, $3] (seconds).
gaps() {
    awk -v a="$2" -v b="$3" '$1 == "hb" { t = $3 / 1e6; if (t >= a && t <= b && p) { g = (t - p) * 1000; if (g > m) m = g }; p = t }
        END { printf "%.1f", m }' "$1"
}
median_gap() {
    awk -v a="$2" '$1 == "hb" { t = $3 / 1e6; if (t < a && p) printf "%.3f\n", (t - p) * 1000; p = t }' "$1" |
        sort -n | awk '{ g[NR] = $1 } END { if (NR) printf "%.1f", g[int((NR + 1) / 2)]; else printf "-" }'
}
for S in "${SIZES[@]}"; do
  for MODE in $MODES; do
    case $MODE in snapshot) dev_env=snapshot ;; copy) dev_env=copy ;; *) echo "unknown mode $MODE" >&2; exit 2 ;; esac
    imgs=$BENCH_DIR/imgs-$S; rm -rf "$imgs"
    out=$BENCH_DIR/run-$S-$MODE.out; log=$BENCH_DIR/ckpt-$S-$MODE.log; rm -f "$log"
    # Descriptors inherited from whatever runs us stay out of the program.
    ( for fd in $(ls /proc/$BASHPID/fd); do [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null; done
      CRUM_CKPT_DEVICE=$dev_env CRUM_LOG=crum_ckpt=info CRUM_LOG_FILE=$log exec "$CRUM" run -- "$PROG" "$S" ${MANAGED_MIB:+"$MANAGED_MIB"} ) > "$out" 2> "$out.err" &
    runpid=$!
    wait_line "$out" '^ready' "$runpid"
    app=$(pgrep -P "$runpid" -f "^$PROG" | head -n 1)
    sleep 0.5   # a few loop iterations: kernels queued and running
    t0=$(now)
    img=$("$CRUM" checkpoint "$app" --dir "$imgs" | tail -n 1)
    t1=$(now)
    sleep 0.2   # a heartbeat after the image is complete
    kill -9 "$app"; wait "$runpid" 2>/dev/null || true; runpid=""
    line=$(grep 'checkpoint pause' "$log" | tail -n 1)
    [ -n "$line" ] || { echo "no 'checkpoint pause' line in $log" >&2; exit 1; }
    resumed=$(awk -v a="$t0" -v p="$(field "$line" pause_us)" 'BEGIN { printf "%.6f", a + p / 1e6 }')
    bytes=$(du -sb "$img" | awk '{print $1}')
    # Before the restart, which cuts the output file back to where the image has it.
    gap=$(gaps "$out" "$resumed" "$t1"); gap_before=$(median_gap "$out" "$t0")
    rout=$BENCH_DIR/restart-$S-$MODE.out
    # The restarted program writes on in the file its stdout was (crum restores it).
    hbs=$(grep -c '^hb' "$out")
    r0=$(now)
    ( for fd in $(ls /proc/$BASHPID/fd); do [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null; done
      exec "$CRUM" restart "$img" ) > "$rout" 2> "$rout.err" &
    runpid=$!
    more_lines "$out" '^hb' "$hbs" "$runpid"
    r1=$(now)
    kill -9 "$runpid"; wait "$runpid" 2>/dev/null || true; runpid=""
    copied=$(field "$line" device_copied_bytes); copied=${copied:-$(field "$line" device_bytes)}
    printf "%s MiB\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%s\t%s\t%s\t%.2f\n" "$S" "$MODE" \
        "$(numfmt --to=iec-i --suffix=B "$(field "$line" device_bytes)")" \
        "$(numfmt --to=iec-i --suffix=B "$copied")" \
        "$(ms "$(field "$line" quiesce_us)")" "$(ms "$(field "$line" drain_us)")" \
        "$(ms "$(field "$line" stop_us)")" "$(ms "$(field "$line" device_us)")" \
        "$(ms "$(field "$line" fork_us)")" "$(ms "$(field "$line" pause_us)")" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
        "$gap" "$gap_before" \
        "$(numfmt --to=iec-i --suffix=B "$bytes")" \
        "$(awk -v a="$r0" -v b="$r1" 'BEGIN { print b - a }')" >> "$TSV"
    rm -rf "$imgs"
  done
done

managed_desc="1/8 of the device footprint"; [ -n "${MANAGED_MIB:-}" ] && managed_desc="$MANAGED_MIB MiB"
echo "CUDA checkpoint pause by phase ($(uname -r), $(nproc) cores, $("$CRUM" --version 2>/dev/null || echo crum); default device; managed = $managed_desc on top)"
echo
column -t -s $'\t' "$TSV"
echo
echo "pause against the smallest footprint's pause, per mode:"
awk -F'\t' 'NR > 1 { if (!($2 in base)) base[$2] = $10; printf "  %-9s %-10s pause %8.1f ms  %.2fx\n", $2, $1, $10, (base[$2] > 0 ? $10 / base[$2] : 0) }' "$TSV"
echo
echo "pause = quiesce + drain + stop + device + fork (ms, what the program sees); written_s = until"
echo "\`crum checkpoint\` returned with the complete image; image = its size on disk (data is random);"
echo "restart_s = \`crum restart\` to the restarted program's first heartbeat; gap_ms = the program's"
echo "largest time for one loop iteration from the pause to the complete image, the pause included (gap_before_ms: median before)."
