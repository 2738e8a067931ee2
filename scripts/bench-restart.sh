#!/usr/bin/env bash
# Restart benchmark (issue 15, parts 4 and 5): for processes holding 256 MiB, 1 GiB and
# 4 GiB of random data (4 GiB only when memory and disk allow), side by side in one run:
#   cat_s        reading the image's files with `cat > /dev/null`, page cache warm (the goal:
#                an eager restart within 1.2x this)
#   eager_s      `crum restart --eager` until the program's first heartbeat after it (its
#                memory all in place then)
#   lazy_first_s `crum restart --lazy` until the program's first heartbeat
#   lazy_full_s  until the page server has every page in place and ends (its counts in
#                CRUM_LAZY_STATS; the program runs, and touches pages, meanwhile)
#   faults, on_demand, prefetched   the page server's counts (pages of 4 KiB)
#   eager/cat    the ratio of the first two
# Every figure is the best of BENCH_REPS runs (default 3), warm page cache (the image is read
# once before). The restarted program is bench_mem.c, which touches a page every 0.2 ms.
#
# Usage: scripts/bench-restart.sh [SIZES_MIB...]   (default: 256 1024 4096)
# Env: CRUM_BIN, CRUM_PRELOAD (default target/release/{crum,libcrum.so}, built if missing),
#      BENCH_DIR (default a temporary directory under ./target), BENCH_REPS.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SIZES=("$@")
[ ${#SIZES[@]} -eq 0 ] && SIZES=(256 1024 4096)
REPS=${BENCH_REPS:-3}
if [ -z "${CRUM_BIN:-}" ] || [ -z "${CRUM_PRELOAD:-}" ]; then
    (cd "$ROOT" && cargo build -q --release -p crum-cli -p crum-interpose -p crum-preload)
fi
CRUM=${CRUM_BIN:-$ROOT/target/release/crum}
PRELOAD=${CRUM_PRELOAD:-$ROOT/target/release/libcrum.so}
LIBC_PRELOAD=$(dirname "$PRELOAD")/libcrum_libc.so
BENCH_DIR=${BENCH_DIR:-$(mktemp -d "$ROOT/target/bench-restart.XXXX")}
mkdir -p "$BENCH_DIR"
PROG=$BENCH_DIR/bench_mem
cc -O2 -o "$PROG" "$ROOT/integration-tests/c/bench_mem.c"
export CRUM_CONTROL_DIR=$BENCH_DIR/sock
mkdir -p "$CRUM_CONTROL_DIR" && chmod 700 "$CRUM_CONTROL_DIR"

now() { date +%s.%N; }
wait_file_line() { # file pattern [timeout_s]
    local t=0
    while ! grep -q "$2" "$1" 2>/dev/null; do
        sleep 0.005; t=$((t+1))
        if [ $t -gt $((${3:-300}*200)) ]; then echo "timeout waiting for $2 in $1" >&2; return 1; fi
    done
}
closed() { # runs "$@" with descriptors above 2 closed (a restart refuses unknown pipes)
    ( for fd in $(ls /proc/$BASHPID/fd); do if [ "$fd" -gt 2 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi; done
      exec "$@" )
}
min() { awk 'NR==1||$1<m{m=$1} END{printf "%.3f", m}'; }

avail_mib=$(awk '/MemAvailable/{print int($2/1024)}' /proc/meminfo)
disk_mib=$(df -m --output=avail "$BENCH_DIR" | tail -1)
printf "size_mib\tcat_s\teager_s\tlazy_first_s\tlazy_full_s\tfaults\ton_demand\tprefetched\teager/cat\n" > "$BENCH_DIR/restart.tsv"
for S in "${SIZES[@]}"; do
    if [ $((S * 3)) -gt "$avail_mib" ] || [ $((S * 2)) -gt "$disk_mib" ]; then
        echo "skipping $S MiB: $avail_mib MiB of memory, $disk_mib MiB of disk free" >&2
        continue
    fi
    rm -rf "$BENCH_DIR/imgs"
    out=$BENCH_DIR/run-$S.out
    # Its stdout a pipe, not a file: a restart would write to a regular file again.
    closed env CRUM_RUN=1 CRUM_CKPT_DIR="$BENCH_DIR/imgs" LD_PRELOAD="$LIBC_PRELOAD:$PRELOAD" "$PROG" "$S" random > >(cat > "$out") 2>&1 &
    pid=$!
    wait_file_line "$out" ready
    img=$("$CRUM" checkpoint "$pid")
    kill -9 "$pid"; wait "$pid" 2>/dev/null || true
    cat "$img"/* > /dev/null
    cats=(); eagers=(); firsts=(); fulls=(); stats=""
    for _ in $(seq "$REPS"); do
        t0=$(now); cat "$img"/* > /dev/null; t1=$(now)
        cats+=("$(echo "$t1 - $t0" | bc -l)")
        for mode in eager lazy; do
            rout=$BENCH_DIR/restart-$S-$mode.out
            st=$BENCH_DIR/stats-$S
            rm -f "$rout" "$st"
            t0=$(now)
            closed env CRUM_LAZY_STATS="$st" "$CRUM" restart "--$mode" "$img" > >(cat > "$rout") 2>&1 &
            rpid=$!
            wait_file_line "$rout" "^hb"
            t1=$(now)
            if [ "$mode" = eager ]; then
                eagers+=("$(echo "$t1 - $t0" | bc -l)")
            else
                firsts+=("$(echo "$t1 - $t0" | bc -l)")
                while [ ! -s "$st" ]; do sleep 0.005; done
                t2=$(now)
                fulls+=("$(echo "$t2 - $t0" | bc -l)")
                stats=$(cat "$st")
            fi
            kill -9 "$rpid"; wait "$rpid" 2>/dev/null || true
        done
    done
    c=$(printf "%s\n" "${cats[@]}" | min); e=$(printf "%s\n" "${eagers[@]}" | min)
    f=$(printf "%s\n" "${firsts[@]}" | min); u=$(printf "%s\n" "${fulls[@]}" | min)
    kv() { echo "$stats" | tr ' ' '\n' | awk -F= -v k="$1" '$1==k{print $2}'; }
    printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f\n" "$S" "$c" "$e" "$f" "$u" "$(kv faults)" "$(kv on_demand_pages)" \
        "$(kv prefetched_pages)" "$(echo "$e / $c" | bc -l)" >> "$BENCH_DIR/restart.tsv"
    rm -rf "$BENCH_DIR/imgs"
done
echo "Restart benchmark ($(uname -r), $(nproc) cores, best of $REPS, warm page cache)"
column -t -s $'\t' "$BENCH_DIR/restart.tsv"
echo "data: $BENCH_DIR/restart.tsv"
