#!/usr/bin/env bash
# Incremental images (issue 15): bytes written and time taken by a checkpoint after the
# program changed a little of its memory, and restart of a chain against a full image.
#
# A program (integration-tests/c/bench_inc.c) fills SIZE MiB with noise; under `crum run`:
#   full          the first image (everything)
#   contig 5%     after rewriting 5 % of its memory as one stretch: bytes stored, ratio to full
#   scatter 5%    after rewriting 5 % as 64 KiB blocks at random places (most 4 MiB chunks
#                 touched: chunks are the unit an image keeps or stores)
#   chain of 10   ten more images, 1 % contiguous changed before each (--full-every 16), then
#                 `crum restart` of the tenth (a chain of eleven images) against `crum restart`
#                 of a full image of the same memory (--full-every 1), and `cat` of that
#                 image's files (warm page cache): restart = until the restored program exits.
# Every figure is measured in this run; ratios are against baselines of the same run.
#
# Usage: scripts/bench-incremental.sh [SIZE_MIB (default 1024)]
# Env: BENCH_DIR (default a temporary directory under ./target).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SIZE=${1:-1024}
(cd "$ROOT" && cargo build -q --release -p crum-cli -p crum-interpose -p crum-preload)
CRUM=$ROOT/target/release/crum
BENCH_DIR=${BENCH_DIR:-$(mktemp -d "$ROOT/target/bench-incremental.XXXX")}
mkdir -p "$BENCH_DIR"
PROG=$BENCH_DIR/bench_inc
cc -O2 -o "$PROG" "$ROOT/integration-tests/c/bench_inc.c"
export CRUM_CONTROL_DIR=$BENCH_DIR/sock
mkdir -p "$CRUM_CONTROL_DIR" && chmod 700 "$CRUM_CONTROL_DIR"

now() { date +%s.%N; }
secs() { echo "$2 - $1" | bc -l | xargs printf '%.3f'; }
mib() { echo "$1 / 1048576" | bc -l | xargs printf '%.1f'; }
wait_line() { # file pattern
    local t=0
    while ! grep -q "$2" "$1" 2>/dev/null; do
        sleep 0.01; t=$((t + 1))
        [ $t -gt 60000 ] && { echo "timeout waiting for $2 in $1" >&2; exit 1; }
    done
}
# Image bytes on disk (what this image adds; its chain's images are separate directories).
bytes() { du -sb "$1" | cut -f1; }
run_prog() { # workdir full_every
    mkdir -p "$1"
    (cd "$1" && exec "$CRUM" run --device emu --full-every "$2" --dir "$1/imgs" -- "$PROG" "$SIZE" > "$1/out" 2>&1) &
    wait_line "$1/out" ready
}
prog_pid() { pgrep -f "^$PROG $SIZE" | while read -r p; do [ "$(readlink /proc/$p/cwd)" = "$1" ] && echo "$p"; done | head -n 1; }
ckpt() { # workdir pid -> prints "path seconds"
    local t0 t1 img
    t0=$(now)
    img=$("$CRUM" checkpoint "$2" --dir "$1/imgs")
    t1=$(now)
    echo "$img $(secs "$t0" "$t1")"
}
cmd() { # workdir n command...
    local d=$1 n=$2
    shift 2
    echo "$*" > "$d/cmd.tmp" && mv "$d/cmd.tmp" "$d/cmd"
    wait_line "$d/out" "done $1 .* $n\$"
}
restart_time() { # workdir image -> seconds until the restored program exits (it finds `stop`)
    local t0 t1
    echo stop > "$1/cmd"
    t0=$(now)
    (cd "$1" && "$CRUM" restart "$2" > "$1/restart.out" 2>&1)
    t1=$(now)
    grep -q "done stop" "$1/out" "$1/restart.out" || { echo "restart of $2 did not finish" >&2; cat "$1/restart.out" >&2; exit 1; }
    secs "$t0" "$t1"
}

echo "== incremental images, ${SIZE} MiB of noise, release build, $(nproc) cores"
W=$BENCH_DIR/inc
run_prog "$W" 16
pid=$(prog_pid "$W")
read -r full tfull < <(ckpt "$W" "$pid")
fb=$(bytes "$full")
printf '%-12s %10s MiB %8s s\n' "full" "$(mib "$fb")" "$tfull"
cmd "$W" 1 contig 5 1
read -r img t < <(ckpt "$W" "$pid")
b=$(bytes "$img")
printf '%-12s %10s MiB %8s s   %.3f of full (goal <= 0.10)\n' "contig 5%" "$(mib "$b")" "$t" "$(echo "$b / $fb" | bc -l)"
cmd "$W" 2 scatter 5 2
read -r img t < <(ckpt "$W" "$pid")
b=$(bytes "$img")
printf '%-12s %10s MiB %8s s   %.3f of full\n' "scatter 5%" "$(mib "$b")" "$t" "$(echo "$b / $fb" | bc -l)"
last=$img
for i in $(seq 3 10); do
    cmd "$W" "$i" contig 1 "$i"
    read -r last t < <(ckpt "$W" "$pid")
done
links=$("$CRUM" inspect --json "$last" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["chain"]) + 1)')
kill -9 "$pid"; wait 2>/dev/null || true
tchain=$(restart_time "$W" "$last")

F=$BENCH_DIR/full
run_prog "$F" 1
fpid=$(prog_pid "$F")
read -r fimg _ < <(ckpt "$F" "$fpid")
kill -9 "$fpid"; wait 2>/dev/null || true
cat "$fimg"/* > /dev/null
t0=$(now); cat "$fimg"/* > /dev/null; t1=$(now)
tcat=$(secs "$t0" "$t1")
tfullr=$(restart_time "$F" "$fimg")
printf '%-12s %8s s   (chain of %s images)\n' "restart" "$tchain" "$links"
printf '%-12s %8s s   chain/full %.2f (goal <= 1.2)\n' "restart full" "$tfullr" "$(echo "$tchain / $tfullr" | bc -l)"
printf '%-12s %8s s   full restart/cat %.2f\n' "cat image" "$tcat" "$(echo "$tfullr / $tcat" | bc -l)"
rm -rf "$BENCH_DIR"
