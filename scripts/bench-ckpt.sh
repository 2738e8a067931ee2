#!/usr/bin/env bash
# Checkpoint/restart benchmark for processes of 256 MiB to 4 GiB (issue 5).
#
# For each size, with random (incompressible) data:
#   - the program-visible pause of a forked checkpoint and of a synchronous one (the image
#     written while the threads are stopped: CRUM_CKPT_SYNC=1), measured by the program
#     itself as its longest gap between loop iterations, against the cost of a bare fork;
#   - the time until the image is complete and its write throughput, against dd to the
#     same disk;
#   - restart time (to the restored program's first heartbeat) against reading the image
#     files (both from a cold page cache when we may drop it).
# And image size against memory for random, compressible and sparse data.
#
# Usage: scripts/bench-ckpt.sh [SIZES_MIB...]   (default: 256 1024 2048 4096)
# Env: CRUM_BIN, CRUM_PRELOAD (default target/release/{crum,libcrum.so}, built if missing),
#      BENCH_DIR (default a temporary directory on the disk under ./target).
# Output: a table on stdout; bench-ckpt.tsv and bench-ckpt.svg (a plot) in BENCH_DIR.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SIZES=("$@")
[ ${#SIZES[@]} -eq 0 ] && SIZES=(256 1024 2048 4096)
if [ -z "${CRUM_BIN:-}" ] || [ -z "${CRUM_PRELOAD:-}" ]; then
    (cd "$ROOT" && cargo build -q --release -p crum-cli -p crum-interpose)
fi
CRUM=${CRUM_BIN:-$ROOT/target/release/crum}
PRELOAD=${CRUM_PRELOAD:-$ROOT/target/release/libcrum.so}
BENCH_DIR=${BENCH_DIR:-$(mktemp -d "$ROOT/target/bench-ckpt.XXXX")}
mkdir -p "$BENCH_DIR"
PROG=$BENCH_DIR/bench_mem
cc -O2 -o "$PROG" "$ROOT/integration-tests/c/bench_mem.c"
export CRUM_CONTROL_DIR=$BENCH_DIR/sock
mkdir -p "$CRUM_CONTROL_DIR" && chmod 700 "$CRUM_CONTROL_DIR"

now() { date +%s.%N; }
elapsed() { echo "$2 - $1" | bc -l; }
drop_caches() { sync; if [ -w /proc/sys/vm/drop_caches ]; then echo 3 > /proc/sys/vm/drop_caches; echo cold; else echo warm; fi; }
wait_line() { # file pattern [timeout_s]
    local t=0
    while ! grep -q "$2" "$1" 2>/dev/null; do
        sleep 0.01; t=$((t+1))
        if [ $t -gt $((${3:-300}*100)) ]; then echo "timeout waiting for $2 in $1" >&2; return 1; fi
    done
    return 0
}
start_prog() { # size kind sync out -> pid
    # Close descriptors inherited from whatever runs us (a restart refuses unknown pipes).
    ( set +x
      for fd in $(ls /proc/$BASHPID/fd); do if [ "$fd" -gt 2 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi; done
      CRUM_RUN=1 CRUM_CKPT_DIR=$BENCH_DIR/imgs CRUM_CKPT_SYNC=$3 LD_PRELOAD=$PRELOAD exec "$PROG" "$1" "$2" ) > >(cat > "$4") 2>&1 &
    echo $!
}
maxgap() { # pid out -> µs
    local before; before=$(grep -c maxgap_us "$2" || true)
    kill -USR2 "$1"
    local t=0
    while [ "$(grep -c maxgap_us "$2" || true)" -le "$before" ]; do
        sleep 0.01; t=$((t+1))
        if [ $t -gt 3000 ]; then echo "no pause report from $1" >&2; return 1; fi
    done
    grep maxgap_us "$2" | tail -1 | awk '{print $2}'
}

# dd to the same disk, for the write-throughput comparison (1 GiB, fsynced).
dd if=/dev/zero of="$BENCH_DIR/dd.bin" bs=4M count=256 conv=fsync status=none
DD_T0=$(now); dd if=/dev/zero of="$BENCH_DIR/dd.bin" bs=4M count=256 conv=fsync status=none; DD_T1=$(now)
DD_MBS=$(echo "1024 * 1.048576 / ($DD_T1 - $DD_T0)" | bc -l)
rm -f "$BENCH_DIR/dd.bin"

TSV=$BENCH_DIR/bench-ckpt.tsv
printf "size_mib\tfork_ms\tforked_pause_ms\tsync_pause_ms\tratio\twrite_s\twrite_MBps\timage_MiB\trestart_s\tread_s\tcache\n" > "$TSV"
for S in "${SIZES[@]}"; do
    rm -rf "$BENCH_DIR/imgs"
    out=$BENCH_DIR/run-$S.out
    pid=$(start_prog "$S" random 0 "$out")
    wait_line "$out" ready
    fork_us=$(awk '/ready/{print $3}' "$out")
    maxgap "$pid" "$out" >/dev/null
    t0=$(now); img=$("$CRUM" checkpoint "$pid"); t1=$(now)
    forked=$(maxgap "$pid" "$out")
    kill -9 "$pid"; wait "$pid" 2>/dev/null || true
    write_s=$(elapsed "$t0" "$t1")
    img_bytes=$(du -sb "$img" | awk '{print $1}')
    # Synchronous baseline.
    out2=$BENCH_DIR/sync-$S.out
    pid=$(start_prog "$S" random 1 "$out2")
    wait_line "$out2" ready
    maxgap "$pid" "$out2" >/dev/null
    simg=$("$CRUM" checkpoint "$pid")
    sync_us=$(maxgap "$pid" "$out2")
    kill -9 "$pid"; wait "$pid" 2>/dev/null || true
    rm -rf "$simg"
    # Restart vs reading the image.
    cache=$(drop_caches)
    rout=$BENCH_DIR/restart-$S.out
    t0=$(now)
    ( exec "$CRUM" restart "$img" ) > "$rout" 2>&1 &
    rpid=$!
    wait_line "$rout" "^hb"
    t1=$(now)
    kill -9 "$rpid"; wait "$rpid" 2>/dev/null || true
    restart_s=$(elapsed "$t0" "$t1")
    drop_caches >/dev/null
    t0=$(now); cat "$img"/* > /dev/null; t1=$(now)
    read_s=$(elapsed "$t0" "$t1")
    printf "%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%.0f\t%.0f\t%.2f\t%.2f\t%s\n" "$S" \
        "$(echo "$fork_us/1000" | bc -l)" "$(echo "$forked/1000" | bc -l)" "$(echo "$sync_us/1000" | bc -l)" \
        "$(echo "$sync_us/$forked" | bc -l)" "$write_s" "$(echo "$img_bytes/1048576/$write_s" | bc -l)" \
        "$(echo "$img_bytes/1048576" | bc -l)" "$restart_s" "$read_s" "$cache" >> "$TSV"
done

# Image size against memory for the three kinds of data (at the largest size ≤ 1 GiB).
KS=1024; for S in "${SIZES[@]}"; do [ "$S" -le 1024 ] && KS=$S; done
SIZES_TSV=$BENCH_DIR/bench-ckpt-sizes.tsv
printf "kind\tmemory_MiB\timage_MiB\n" > "$SIZES_TSV"
for K in random compressible sparse; do
    rm -rf "$BENCH_DIR/imgs"
    out=$BENCH_DIR/kind-$K.out
    pid=$(start_prog "$KS" "$K" 0 "$out")
    wait_line "$out" ready
    img=$("$CRUM" checkpoint "$pid")
    kill -9 "$pid"; wait "$pid" 2>/dev/null || true
    printf "%s\t%s\t%.1f\n" "$K" "$KS" "$(echo "$(du -sb "$img" | awk '{print $1}')/1048576" | bc -l)" >> "$SIZES_TSV"
done

echo "Checkpoint/restart benchmark ($(uname -r), $(nproc) cores); dd to the same disk: $(printf %.0f "$DD_MBS") MB/s"
echo
column -t -s $'\t' "$TSV"
echo
column -t -s $'\t' "$SIZES_TSV"
echo
echo "ratio = synchronous pause / forked pause (target >= 40 at 4 GiB); restart_s vs read_s: restart"
echo "time to the first heartbeat vs reading the image files (cache: cold = page cache dropped)."

# A small SVG plot: pauses (log scale) against size.
SVG=$BENCH_DIR/bench-ckpt.svg
awk -F'\t' 'NR>1 { s[NR]=$1; f[NR]=$3; y[NR]=$4; k[NR]=$2; n=NR }
END {
  W=640; H=400; L=70; B=340; T=30; R=600
  maxs=0; for (i=2;i<=n;i++) if (s[i]>maxs) maxs=s[i]
  lo=log(0.1); hi=log(100000)
  printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H
  printf "<text x=\"%d\" y=\"18\">Program-visible pause vs memory (ms, log scale)</text>\n", L
  printf "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/><line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", L,B,R,B, L,B,L,T
  for (e=-1;e<=5;e++) { yy=B-(log(10^e)-lo)/(hi-lo)*(B-T); printf "<text x=\"5\" y=\"%.0f\">%g</text><line x1=\"%d\" x2=\"%d\" y1=\"%.0f\" y2=\"%.0f\" stroke=\"#ddd\"/>\n", yy, 10^e, L, R, yy, yy }
  split("sync:4:red forked:3:blue fork:2:gray", series, " ")
  for (j=1;j<=3;j++) { split(series[j], p, ":"); pts=""
    for (i=2;i<=n;i++) { v=(p[2]==4?y[i]:(p[2]==3?f[i]:k[i])); if (v<0.1) v=0.1
      xx=L+s[i]/maxs*(R-L); yy=B-(log(v)-lo)/(hi-lo)*(B-T); pts=pts sprintf("%.0f,%.0f ", xx, yy)
      printf "<circle cx=\"%.0f\" cy=\"%.0f\" r=\"3\" fill=\"%s\"/>\n", xx, yy, p[3] }
    printf "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\"/><text x=\"%d\" y=\"%d\" fill=\"%s\">%s</text>\n", pts, p[3], R-80, T+15*j, p[3], p[1] }
  for (i=2;i<=n;i++) printf "<text x=\"%.0f\" y=\"%d\">%s MiB</text>\n", L+s[i]/maxs*(R-L)-20, B+18, s[i]
  print "</svg>" }' "$TSV" > "$SVG"
command -v rsvg-convert >/dev/null && rsvg-convert -o "${SVG%.svg}.png" "$SVG" || true
echo "data: $TSV, $SIZES_TSV; plot: $SVG"
