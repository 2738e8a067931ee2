#!/usr/bin/env bash
# Job checkpoint benchmark (issue 17): the pause of a job of PROCS processes × SIZE MiB
# against the pause of one SIZE MiB process, checkpointed the same way in the same run
# (goal: job pause <= 1.5 × single pause), and the restart time of each (until every
# process of it beats again).
#
# Each process measures its own pause (its longest gap between loop iterations,
# integration-tests/c/bench_mem.c); a job's pause is its longest process's.
#
# Usage: scripts/bench-job.sh [SIZE_MIB [PROCS [ROUNDS]]]   (default: 1024 4 3)
# Env: CRUM_BIN, CRUM_PRELOAD (default target/release/{crum,libcrum.so}, built if missing),
#      BENCH_DIR (default a temporary directory under ./target).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SIZE=${1:-1024}
PROCS=${2:-4}
ROUNDS=${3:-3}
if [ -z "${CRUM_BIN:-}" ] || [ -z "${CRUM_PRELOAD:-}" ]; then
    (cd "$ROOT" && cargo build -q --release -p crum-cli -p crum-interpose -p crum-preload)
fi
CRUM=${CRUM_BIN:-$ROOT/target/release/crum}
PRELOAD=${CRUM_PRELOAD:-$ROOT/target/release/libcrum.so}
# The C library shim too (the pids a restarted job knows), as `crum run` preloads it.
LIBC_SHIM=$(dirname "$PRELOAD")/libcrum_libc.so
[ -f "$LIBC_SHIM" ] && PRELOAD=$LIBC_SHIM:$PRELOAD
BENCH_DIR=${BENCH_DIR:-$(mktemp -d "$ROOT/target/bench-job.XXXX")}
mkdir -p "$BENCH_DIR"
PROG=$BENCH_DIR/bench_mem
cc -O2 -o "$PROG" "$ROOT/integration-tests/c/bench_mem.c"
export CRUM_CONTROL_DIR=$BENCH_DIR/sock
mkdir -p "$CRUM_CONTROL_DIR" && chmod 700 "$CRUM_CONTROL_DIR"

now() { date +%s.%N; }
count() { grep -c "$2" "$1" 2>/dev/null || true; }
wait_count() { # file pattern n
    local t=0
    while [ "$(count "$1" "$2")" -lt "$3" ]; do
        sleep 0.01; t=$((t+1))
        if [ $t -gt 60000 ]; then echo "timeout waiting for $3 × $2 in $1" >&2; return 1; fi
    done
}
tree_kill() { # pid: it and every descendant
    local c
    for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do tree_kill "$c"; done
    kill -9 "$1" 2>/dev/null || true
}
start_prog() { # procs out -> pid
    ( for fd in $(ls /proc/$BASHPID/fd); do if [ "$fd" -gt 2 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi; done
      # stdout a pipe (not a file, which a restart would write again): the restarted job's
      # heartbeats go to `crum restart`'s stdout.
      CRUM_RUN=1 CRUM_CKPT_DIR=$BENCH_DIR/imgs LD_PRELOAD=$PRELOAD exec "$PROG" "$SIZE" random "$1" ) > >(cat > "$2") 2>&1 &
    echo $!
}
pause_ms() { # pid out procs -> the longest pause of any process since the last report, in ms
    local before; before=$(count "$2" maxgap_us)
    kill -USR2 "$1"
    wait_count "$2" maxgap_us $((before + $3))
    grep maxgap_us "$2" | tail -n "$3" | awk '{ if ($2 > m) m = $2 } END { printf "%.1f", m / 1000 }'
}

TSV=$BENCH_DIR/bench-job.tsv
printf "what\tprocesses\tMiB_each\tround\tpause_ms\tcheckpoint_s\timage_MiB\trestart_s\n" > "$TSV"
for round in $(seq 1 "$ROUNDS"); do
    for n in 1 "$PROCS"; do
        rm -rf "$BENCH_DIR/imgs"
        out=$BENCH_DIR/run-$n-$round.out
        pid=$(start_prog "$n" "$out")
        wait_count "$out" ready "$n"
        pause_ms "$pid" "$out" "$n" >/dev/null
        t0=$(now); img=$("$CRUM" checkpoint "$pid"); t1=$(now)
        pause=$(pause_ms "$pid" "$out" "$n")
        tree_kill "$pid"; wait "$pid" 2>/dev/null || true
        rout=$BENCH_DIR/restart-$n-$round.out
        t2=$(now)
        ( exec "$CRUM" restart "$img" ) > "$rout" 2>&1 &
        rpid=$!
        for i in $(seq 0 $((n - 1))); do wait_count "$rout" "^hb .* p$i\$" 1; done
        t3=$(now)
        tree_kill "$rpid"; wait "$rpid" 2>/dev/null || true
        what=$([ "$n" = 1 ] && echo process || echo job)
        printf "%s\t%s\t%s\t%s\t%s\t%.2f\t%.0f\t%.2f\n" "$what" "$n" "$SIZE" "$round" "$pause" \
            "$(echo "$t1 - $t0" | bc -l)" "$(echo "$(du -sb "$img" | awk '{print $1}')/1048576" | bc -l)" \
            "$(echo "$t3 - $t2" | bc -l)" >> "$TSV"
        rm -rf "$img"
    done
done

echo "Job checkpoint benchmark ($(uname -r), $(nproc) cores, $(free -g | awk '/Mem/{print $2}') GiB)"
echo
column -t -s $'\t' "$TSV"
echo
awk -F'\t' 'NR > 1 { if ($1 == "job") { j += $5; jr += $8; nj++ } else { p += $5; pr += $8; np++ } }
END { printf "mean over %d rounds: job pause %.1f ms, process pause %.1f ms, ratio %.2f (goal <= 1.5); restart: job %.2f s, process %.2f s\n",
      nj, j / nj, p / np, (j / nj) / (p / np), jr / nj, pr / np }' "$TSV"
echo "data: $TSV"
