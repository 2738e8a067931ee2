#!/usr/bin/env bash
# Managed-memory (shadow page) costs in each `crum run --managed` mode, side by side (issue 4).
#
# integration-tests/cuda/bench_managed.cu runs under `crum run --managed <mode>` once per mode
# (and REPS times; the median of each figure is shown) and times, inside the program:
#   read_fault         first read of one byte per page, 1024 pages 64 apart, after a kernel
#                      wrote them (read-ahead cannot help), us per fault
#   write_fault        a write to each of those pages (already read), us per fault
#   write_first_fault  a write to pages a kernel wrote and the CPU has not read, us per fault
#   seq_read           sequential read of a 256 MiB managed array after a kernel, GB/s
#                      (target >= 2 GB/s per core with read-ahead)
#   flush              cudaDeviceSynchronize with 4096 dirty pages less one with none, us/page
#   sync_clean         cudaDeviceSynchronize with nothing dirty, us
# and, in the same run on memory crum does not manage, the baselines the ratios divide by:
#   base_touch_fault   first touch of a fresh anonymous page (kernel fault)     -> *_fault
#   base_seq_read      the same loop over malloc'd memory                      -> seq_read
#   base_copy_page     memcpy of one cache-cold 4 KiB page                     -> flush
#   base_sigsegv       a SIGSEGV handled by mprotect in the program (shown, no ratio)
# plus the library's own counters (CRUM_MANAGED_STATS=1) of the last run of each mode.
#
# Usage: scripts/bench-managed.sh [MODES...]   (default: mprotect uffd verify)
# Env: CRUM_BIN (default target/release/crum, built with libcrum.so if missing),
#      REPS (default 3), SEQ_MIB (default 256), BENCH_DIR (default a temporary directory under
#      ./target, removed at the end unless set).
# Output: the table on stdout; bench-managed.tsv (mode, name, value, unit) in BENCH_DIR.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODES=("$@")
[ ${#MODES[@]} -eq 0 ] && MODES=(mprotect uffd verify)
REPS=${REPS:-3}
SEQ_MIB=${SEQ_MIB:-256}
if [ -z "${CRUM_BIN:-}" ]; then
    (cd "$ROOT" && cargo build -q --release -p crum-cli -p crum-interpose -p crum-preload)
fi
CRUM=${CRUM_BIN:-$ROOT/target/release/crum}
KEEP=${BENCH_DIR:+1}
mkdir -p "$ROOT/target"
BENCH_DIR=${BENCH_DIR:-$(mktemp -d "$ROOT/target/bench-managed.XXXX")}
mkdir -p "$BENCH_DIR"
cleanup() {
    [ -z "$KEEP" ] && rm -rf "$BENCH_DIR"
    return 0
}
trap cleanup EXIT
eval "$("$ROOT/scripts/setup-cuda.sh" --env)"
PROG=$BENCH_DIR/bench_managed
nvcc -cudart shared -arch=sm_80 -O2 -o "$PROG" "$ROOT/integration-tests/cuda/bench_managed.cu"

TSV=$BENCH_DIR/bench-managed.tsv
: > "$TSV"
for mode in "${MODES[@]}"; do
    for rep in $(seq "$REPS"); do
        out=$BENCH_DIR/$mode.$rep
        if ! CRUM_MANAGED_STATS=1 "$CRUM" run --managed "$mode" -- "$PROG" "$SEQ_MIB" > "$out" 2> "$out.err" \
            || [ "$(tail -n 1 "$out")" != PASS ]; then
            echo "bench_managed failed in mode $mode:" >&2
            cat "$out" "$out.err" >&2
            exit 1
        fi
        awk -v m="$mode" -v r="$rep" 'NF == 3 { print m "\t" r "\t" $1 "\t" $2 "\t" $3 }' "$out" >> "$TSV"
    done
    # The counters of the last run, when the library prints them.
    sed -n 's/^crum: managed stats //p' "$BENCH_DIR/$mode.$REPS.err" | tr ' ' '\n' \
        | awk -F= -v m="$mode" -v r="$REPS" '$1 != "mode" && NF == 2 { print m "\t" r "\tstat_" $1 "\t" $2 "\tcount" }' >> "$TSV"
done

# The table: one column per mode, each figure the median over REPS runs, and its ratio to the
# median of its baseline over the same runs.
awk -F'\t' -v modes="${MODES[*]}" '
function median(list,   n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n ? a[int((n + 1) / 2)] : ""
}
BEGIN {
    nm = split(modes, M, " ")
    base["read_fault"] = "base_touch_fault"; base["write_fault"] = "base_touch_fault"
    base["write_first_fault"] = "base_touch_fault"; base["seq_read"] = "base_seq_read"
    base["flush"] = "base_copy_page"
    nrows = split("read_fault write_fault write_first_fault seq_read flush sync_clean base_touch_fault base_sigsegv base_seq_read base_copy_page", R, " ")
}
{ v[$1, $2, $3] = $4; unit[$3] = $5; if (!($3 in seen)) { seen[$3] = 1; if ($3 ~ /^stat_/) stats[++ns] = $3 } reps[$1, $3] = reps[$1, $3] " " $2 }
END {
    printf "%-24s %-6s", "figure", "unit"
    for (i = 1; i <= nm; i++) printf " %12s %9s", M[i], "x base"
    printf "\n"
    for (k = 1; k <= nrows + ns; k++) {
        name = k <= nrows ? R[k] : stats[k - nrows]
        if (!(name in unit)) continue
        printf "%-24s %-6s", name, unit[name]
        for (i = 1; i <= nm; i++) {
            m = M[i]; vals = ""; bases = ""
            n = split(reps[m, name], rr, " ")
            for (j = 1; j <= n; j++) {
                vals = vals " " v[m, rr[j], name]
                if (name in base) bases = bases " " v[m, rr[j], base[name]]
            }
            mv = median(vals); mb = median(bases)
            printf " %12s %9s", mv, (mb + 0 > 0 ? sprintf("%.2f", mv / mb) : "")
        }
        printf "\n"
    }
}' "$TSV"
echo "($REPS runs per mode, medians; ${SEQ_MIB} MiB sequential read; $(nproc) cores; crum: $CRUM)"
