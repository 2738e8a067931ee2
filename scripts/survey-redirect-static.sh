#!/usr/bin/env bash
# The measurement of docs/driver-api.md § 4.1: every program of the CUDA corpus, built with
# the static runtime, run under `crum run` (emulated device), which redirects NVIDIA's runtime
# inside the executable to libcrum.so (preload/src/static_runtime.c: the survey's experiment,
# now part of crum). Prints one line per program (PASS when it exits 0 with PASS as its last
# line) and a count.
#
#   scripts/survey-redirect-static.sh [PROGRAM...]     # needs `cargo build` (crum, libcrum.so)
#   scripts/survey-redirect-static.sh --ckpt PROGRAM   # checkpoint at GATE(1), restart, checkpoint
#                                                      # the restarted program at GATE(2), restart
#                                                      # that image, expect PASS
set -euo pipefail
ckpt=0
if [ "${1:-}" = --ckpt ]; then ckpt=1; shift; fi
repo=$(cd "$(dirname "$0")/.." && pwd)
out=$repo/integration-tests/build/survey-redirect
mkdir -p "$out"
# managed_nouffd runs managed_cycles.
extra=(); [[ " $* " == *" managed_nouffd "* ]] && extra=(managed_cycles)
"$repo/scripts/survey-build-static.sh" "$@" "${extra[@]}"
crum=${CRUM:-$repo/target/debug/crum}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
progs=("$@")
if [ ${#progs[@]} -eq 0 ]; then
  for f in "$repo"/integration-tests/build/static/*; do
    case $f in *.sum|*.sum.*|*.err|*.err.*|*.tmp|*.tmp.*) continue;; esac
    [ -x "$f" ] && progs+=("$(basename "$f")")
  done
fi
args_of() {
  case $1 in
    ckpt_log_file) echo "$scratch/log";;
    exec_chain) echo "0 $scratch/go";;
    fault_log) echo "10 $scratch/log 1";;
    managed_nouffd) echo "$repo/integration-tests/build/static/managed_cycles 4";;
  esac
}
# The pid of the process under crum running executable $1 (crum ps), waiting up to 120 s.
pid_of() {
  local pid
  for _ in $(seq 1 1200); do
    pid=$("$crum" ps 2>/dev/null | awk -v exe="$1" '$NF == exe { print $1 }' | tail -n 1)
    [ -n "$pid" ] && { echo "$pid"; return 0; }
    sleep 0.1
  done
  return 1
}
# Waits until the program stands at gate $1.
wait_gate() {
  for _ in $(seq 1 1200); do
    [ "$(cat "$scratch/gate/at" 2>/dev/null)" = "$1" ] && return 0
    sleep 0.1
  done
  echo "survey-redirect: gate $1 not reached" >&2
  return 1
}
if [ $ckpt = 1 ]; then
  p=${progs[0]}
  exe=$scratch/$p-redirected   # a name of its own, to find it in `crum ps`
  cp "$repo/integration-tests/build/static/$p" "$exe"
  rm -f "$out/$p.ckpt.out" "$out/$p.ckpt.err"
  mkdir -p "$scratch/gate" "$scratch/img1" "$scratch/img2"
  export CRUM_TEST_GATE=$scratch/gate
  (cd "$scratch" && timeout 300 "$crum" run -- "$exe" \
     >"$out/$p.ckpt.out" 2>"$out/$p.ckpt.err" </dev/null) &
  wait_gate 1
  "$crum" checkpoint "$(pid_of "$exe")" --dir "$scratch/img1" --exit >/dev/null
  wait
  # A restarted program is the `crum restart` process itself.
  cd "$scratch"
  touch "$scratch/gate/go-1"
  "$crum" restart "$scratch"/img1/ckpt-* 2>>"$out/$p.ckpt.err" </dev/null &
  wait_gate 2
  "$crum" checkpoint $! --dir "$scratch/img2" --exit >/dev/null
  wait
  touch "$scratch/gate/go-all"
  timeout 300 "$crum" restart "$scratch"/img2/ckpt-* 2>>"$out/$p.ckpt.err" </dev/null
  # The restored program writes to the stdout it had: $out/$p.ckpt.out.
  if [ "$(tail -n 1 "$out/$p.ckpt.out")" = PASS ]; then
    echo "$p PASS after a restart and a restart of the restart"
    exit 0
  fi
  echo "$p FAIL after restarts"
  echo "--- stdout:"; cat "$out/$p.ckpt.out"
  echo "--- stderr:"; cat "$out/$p.ckpt.err"
  exit 1
fi
pass=0
for p in "${progs[@]}"; do
  read -r -a args <<<"$(args_of "$p")"
  set +e
  (for fd in /proc/self/fd/*; do n=${fd##*/}; [ "$n" -gt 2 ] && eval "exec $n>&-" 2>/dev/null; done
   cd "$scratch" && timeout 120 "$crum" run -- \
     "$repo/integration-tests/build/static/$p" "${args[@]}" >"$out/$p.out" 2>"$out/$p.err" </dev/null)
  rc=$?
  set -e
  if [ $rc = 0 ] && [ "$(tail -n 1 "$out/$p.out")" = PASS ]; then
    pass=$((pass + 1)); echo "$p PASS"
  else
    echo "$p FAIL rc=$rc: $(head -n 1 "$out/$p.err")$(tail -n 1 "$out/$p.out")"
  fi
done
echo "passed: $pass of ${#progs[@]}"
