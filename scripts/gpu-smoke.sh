#!/usr/bin/env bash
# GPU check of the `cuda` backend (run on a machine with an NVIDIA GPU and driver).
#
# For every program of the CUDA test corpus (integration-tests/cuda/):
#   1. run it natively and under `crum run --device cuda`, compare the outputs;
#   2. a program with checkpoint gates (GATE(k), common.h): run it under crum on the GPU,
#      checkpoint it at every gate, let it finish (its output must be the native one), then
#      restart every image on the GPU, the first also on the emulated device, and a restart of
#      the first image checkpointed again at its next gate and restarted (restart of a
#      restart); each restarted output must be the rest of the native output, ending in PASS;
#      then the other way: an image taken on the emulated device restarts on the GPU;
#   3. the overhead of crum per program (best of $REPS runs each way).
# Targets (issue 7): <= 1% for programs with few long kernels, <= 3% with many tiny ones.
#
# Two ways to get the binaries:
#   - here: builds crum with cargo and the corpus with nvcc (-arch=$ARCH);
#   - CRUM_GPU_PACK=DIR: uses what `scripts/gpu-pack.sh DIR` prepared on another machine
#     (crum, the conformance tests, the corpus, the shared CUDA runtime), for a GPU machine
#     without a Rust toolchain or network. Then the backend conformance tests (`gpu::`) run
#     first.
#
#   scripts/gpu-smoke.sh                 # whole corpus
#   scripts/gpu-smoke.sh vector_add      # programs whose name matches the argument (a regex)
#   REPS=5 ARCH=sm_90 scripts/gpu-smoke.sh
#   DEADLINE=300 ...                     # start no new program after 300 s (results so far kept)
#   CRUM_SMOKE_DIR=DIR ...               # logs, outputs, images and summary.txt go there
#
# Exit status: 0 all passed (or no GPU here: prints why and does nothing), 1 a check failed.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
REPS=${REPS:-3}
ARCH=${ARCH:-sm_80}
DEADLINE=${DEADLINE:-0}
# The device the checks run on; emu only to try this script on a machine without a GPU.
DEV=${CRUM_SMOKE_DEVICE:-cuda}
filter=${1:-}
work=${CRUM_SMOKE_DIR:-$(mktemp -d /tmp/crum-gpu-smoke.XXXXXX)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
summary=$work/summary.txt
start=$(date +%s)

if [ "$DEV" = cuda ] && ! { ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1' || [ -e /usr/lib/x86_64-linux-gnu/libcuda.so.1 ] || [ -e /usr/lib64/libcuda.so.1 ]; }; then
  echo "gpu-smoke: skipped: no CUDA driver library (libcuda.so.1) on this machine" >&2
  exit 0
fi
if [ "$DEV" = cuda ] && [ ! -e /dev/nvidiactl ]; then
  echo "gpu-smoke: skipped: no NVIDIA device nodes (/dev/nvidiactl)" >&2
  exit 0
fi

say() { echo "$*" | tee -a "$summary"; }
fail=0
pack=${CRUM_GPU_PACK:-}
if [ -n "$pack" ]; then
  pack=$(cd "$pack" && pwd)
  crum=$pack/bin/crum
  native_env=(env "LD_LIBRARY_PATH=$pack/lib:${LD_LIBRARY_PATH:-}")
  say "# conformance tests (gpu::) on the real driver"
  timeout -k 5 60 "$pack/bin/conformance" gpu:: --test-threads=1 >"$work/conformance.txt" 2>&1
  rc=$?
  grep -E '^test |test result|skipped|panicked' "$work/conformance.txt" | tee -a "$summary"
  [ $rc = 0 ] || { say "conformance: exit $rc"; fail=1; }
else
  eval "$(scripts/setup-cuda.sh --env)" || { echo "gpu-smoke: cannot set up nvcc" >&2; exit 1; }
  native_env=(env "LD_LIBRARY_PATH=$CRUM_CUDA_HOME/lib:${LD_LIBRARY_PATH:-}")
  cargo build --release -q -p crum-cli -p crum-interpose -p crum-preload || { echo "gpu-smoke: build failed" >&2; exit 1; }
  crum="$repo/target/release/crum"
fi

# Without a GPU (trying this script), the reference runs are on the emulated device.
[ "$DEV" = cuda ] || native_env=("$crum" run --device emu --)

# The proxy must be able to open the GPU, or every crum run below would measure nothing.
if ! timeout -k 5 60 "$crum" run --device "$DEV" -- /bin/true 2>"$work/probe.err"; then
  say "gpu-smoke: crum cannot open the GPU: $(cat "$work/probe.err")"
  exit 1
fi

now() { date +%s.%N; }
# Arithmetic on decimals (awk: bc is not everywhere).
calc() { awk "BEGIN { print $1 }"; }
# Best wall time (seconds) of $REPS runs of "$@"; stdout of the last run in $out_file.
best_time() {
  local best="" t0 t1 dt
  for _ in $(seq "$REPS"); do
    t0=$(now)
    timeout -k 5 120 "$@" >"$out_file" 2>>"$err_file" || return 1
    t1=$(now)
    dt=$(calc "$t1 - $t0")
    if [ -z "$best" ] || [ "$(calc "$dt < $best")" = 1 ]; then best=$dt; fi
  done
  echo "$best"
}

# Waits until the gate file $1/at says $2 (0), or process $3 ended (1), or 60 s passed (2).
wait_gate() {
  local t=0
  while [ "$(cat "$1/at" 2>/dev/null)" != "$2" ]; do
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.01
    t=$((t + 1))
    [ $t -lt 6000 ] || return 2
  done
}

# Waits for background process $1 (its exit status), killing it and its children after 120 s.
reap() {
  local t=0
  while kill -0 "$1" 2>/dev/null && [ $t -lt 12000 ]; do sleep 0.01; t=$((t + 1)); done
  if kill -0 "$1" 2>/dev/null; then
    echo "gpu-smoke: process $1 still running after 120 s: killed" >>"$ckpt_log"
    pkill -KILL -P "$1"
    kill -KILL "$1"
  fi
  wait "$1"
}

# Starts "${@:2}" in the background with its stdout a pipe into file $1 (a restart gives a
# program its own stdout only where the checkpointed one was not a file), stderr to its own
# file $1 with .err for .out (a restart rolls back what was appended to the program's files
# after the checkpoint, another process's lines too): its pid in $p, the pipe reader's in $catp.
bg_pipe() {
  local out=$1 fd
  shift
  exec {fd}> >(cat >"$out")
  catp=$!
  "$@" >&$fd 2>"${out%.out}.err" &
  p=$!
  exec {fd}>&-
}

# Checkpoints the program under pid $1 into $2/<timestamp> and prints the image directory.
checkpoint() {
  local t0 t1 img
  t0=$(now)
  img=$(timeout -k 5 120 "$crum" checkpoint "$1" --dir "$2" ${3:+"$3"} 2>>"$ckpt_log") || return 1
  t1=$(now)
  echo "checkpoint of $1: $(calc "int(($t1 - $t0) * 1000)") ms -> $img" >>"$ckpt_log"
  echo "$img"
}

# The size of file $1 once it stops growing (what a program stopped at a gate has printed).
settled_size() {
  local a b=-1 same=0
  while [ $same -lt 3 ]; do
    sleep 0.02
    a=$(stat -c %s "$1" 2>/dev/null || echo 0)
    if [ "$a" = "$b" ]; then same=$((same + 1)); else same=0; fi
    b=$a
  done
  echo "$a"
}

# A program printed the first $1 bytes of its output $3 before its image was taken; its
# restart printed $2: together they must be the native output $4 (nothing lost, nothing
# printed twice). $5 names the check in the log.
rest_ok() {
  if cmp -s "$4" <(head -c "$1" "$3"; cat "$2"); then return 0; fi
  {
    echo "== $5: printed $1 bytes before the image; the restart printed:"
    head -c 2000 "$2"
    echo "== expected (native):"
    head -c 2000 "$4"
  } >>"$ckpt_log"
  return 1
}

# Gated checkpoint/restart scenario of program $name (binary $bin, $ngates gates).
gated() {
  local g=$work/$name.gate img=$work/$name.images res="" i k p n rr
  rm -rf "$g" "$img"
  mkdir -p "$g" "$img"
  bg_pipe "$work/$name.gated.out" env CRUM_TEST_GATE="$g" "$crum" run --device "$DEV" -- "$bin" "${args[@]}"
  local images=() printed=()
  for k in $(seq "$ngates"); do
    wait_gate "$g" "$k" "$p" || { res+="gate$k:never "; break; }
    printed+=("$(settled_size "$work/$name.gated.out")")
    i=$(checkpoint "$p" "$img/g$k") || { res+="ckpt$k:FAIL "; fail=1; touch "$g/go-all"; break; }
    images+=("$i")
    touch "$g/go-$k"
  done
  touch "$g/go-all"
  reap "$p" || { res+="run:exit$? "; fail=1; }
  wait "$catp"
  cmp -s "$work/$name.gated.out" "$work/$name.native.out" || { res+="run:DIFF "; fail=1; }
  n=0
  for i in "${images[@]}"; do
    n=$((n + 1))
    rr=$work/$name.r$n.cuda.out
    timeout -k 5 120 "$crum" restart --device "$DEV" "$i" >"$rr" 2>"${rr%.out}.err"
    rc=$?
    echo "restart of $i on $DEV: exit $rc" >>"$ckpt_log"
    if [ $rc = 0 ] && rest_ok "${printed[n - 1]}" "$rr" "$work/$name.gated.out" "$work/$name.native.out" "r$n"; then res+="r$n:ok "
    elif "$crum" inspect "$i" 2>/dev/null | grep -q '^not saved'; then
      # State the backend cannot save (the driver's device heap), named at the checkpoint:
      # what the rule allows; the restart's output is not expected to match.
      res+="r$n:named-unsaved "
    else res+="r$n:FAIL "; fail=1; fi
  done
  if [ ${#images[@]} -gt 0 ]; then
    rr=$work/$name.r1.emu.out
    CRUM_LOG=debug timeout -k 5 300 "$crum" restart --device emu "${images[0]}" >"$rr" 2>"${rr%.out}.err"
    rc=$?
    echo "restart of ${images[0]} on emu: exit $rc" >>"$ckpt_log"
    if [ $rc = 0 ] && rest_ok "${printed[0]}" "$rr" "$work/$name.gated.out" "$work/$name.native.out" r1emu; then res+="r1emu:ok "; else res+="r1emu:FAIL "; fail=1; fi
  fi
  # Restart of a restart: the restart of image 1 stops at gate 2, is checkpointed there and
  # ended; that image restarts.
  if [ ${#images[@]} -ge 2 ]; then
    rm -f "$g/go-all" "$g/go-2"
    echo 1 >"$g/at"
    bg_pipe "$work/$name.rr.a.out" "$crum" restart --device "$DEV" "${images[0]}"
    if wait_gate "$g" 2 "$p" && i=$(checkpoint "$p" "$img/rr" --exit); then
      reap "$p"
      wait "$catp"
      touch "$g/go-all"
      timeout -k 5 120 "$crum" restart --device "$DEV" "$i" >"$work/$name.rr.b.out" 2>"$work/$name.rr.b.err"
      rc=$?
      echo "restart of $i (a restart's image) on $DEV: exit $rc" >>"$ckpt_log"
      cat "$work/$name.rr.a.out" "$work/$name.rr.b.out" >"$work/$name.rr.out"
      if [ $rc = 0 ] && rest_ok "${printed[0]}" "$work/$name.rr.out" "$work/$name.gated.out" "$work/$name.native.out" rr; then res+="rr:ok "; else res+="rr:FAIL "; fail=1; fi
    else
      touch "$g/go-all"
      reap "$p"
      res+="rr:FAIL "
      fail=1
    fi
  fi
  # An image taken on the emulated device restarts on the GPU.
  rm -rf "$g"
  mkdir -p "$g"
  bg_pipe "$work/$name.emu.out" env CRUM_TEST_GATE="$g" "$crum" run --device emu -- "$bin" "${args[@]}"
  if wait_gate "$g" 1 "$p" && k=$(settled_size "$work/$name.emu.out") && i=$(checkpoint "$p" "$img/emu" --exit); then
    reap "$p"
    wait "$catp"
    touch "$g/go-all"
    rr=$work/$name.e2c.out
    timeout -k 5 120 "$crum" restart --device "$DEV" "$i" >"$rr" 2>"${rr%.out}.err"
    rc=$?
    echo "restart of $i (taken on emu) on $DEV: exit $rc" >>"$ckpt_log"
    if [ $rc = 0 ] && rest_ok "$k" "$rr" "$work/$name.emu.out" "$work/$name.native.out" emu2cuda; then
      res+="emu2cuda:ok"
    elif grep -q "cannot be reproduced" "$work/$name.emu.err"; then
      # The driver places module variables: an image of the emulated device with them cannot
      # come back on a GPU (said so, the restart refused).
      res+="emu2cuda:refused(module variables)"
    elif grep -q "cannot replay them" "$work/$name.emu.err"; then
      # Work the emulated device saved unstarted (issue 16: not on the GPU yet; said so).
      res+="emu2cuda:refused(queued work)"
    else
      res+="emu2cuda:FAIL"
      fail=1
    fi
  else
    touch "$g/go-all"
    reap "$p"
    res+="emu2cuda:noimage"
    fail=1
  fi
  echo "$res"
}

args_of() {
  case $1 in
    jacobi) echo "32 300 100" ;;
    managed_sparse) echo 1024 ;;
    managed_signals) echo after ;;
    *) echo "" ;;
  esac
}

shopt -s nullglob
if [ -n "$pack" ]; then
  programs=("$pack"/corpus/*)
else
  programs=(integration-tests/cuda/*.cu)
fi
say "$(printf '%-26s %9s %9s %8s  %-6s %-7s %s' program native_s crum_s overhead output emu 'checkpoint/restart')"
for src in "${programs[@]}"; do
  name=$(basename "$src" .cu)
  # Programs that need a harness (fault_log, exec_chain, managed_nouffd, ckpt_log_file) or a managed-memory
  # mode other than the default (managed_other_syscalls: uffd).
  case $name in bench_* | fault_log | exec_chain | managed_nouffd | managed_other_syscalls | ckpt_log_file) continue ;; esac
  [ -n "$filter" ] && [[ ! "$name" =~ $filter ]] && continue
  if [ "$DEADLINE" -gt 0 ] && [ $(($(date +%s) - start)) -ge "$DEADLINE" ]; then
    say "gpu-smoke: deadline of $DEADLINE s reached before $name"
    break
  fi
  err_file="$work/$name.err"
  ckpt_log="$work/$name.ckpt.log"
  read -r -a args <<<"$(args_of "$name")"
  if [ -n "$pack" ]; then
    bin=$src
  else
    bin="$work/$name"
    if ! nvcc -cudart shared -arch="$ARCH" -O2 "$src" -o "$bin" -lpthread 2>"$work/$name.build.err"; then
      say "$(printf '%-26s build failed (see %s)' "$name" "$work/$name.build.err")"
      fail=1
      continue
    fi
  fi
  out_file="$work/$name.native.out"
  if ! tn=$(best_time "${native_env[@]}" "$bin" "${args[@]}"); then
    # Still run it under crum (its output kept, for comparing what each answered).
    timeout -k 5 120 "$crum" run --device "$DEV" -- "$bin" "${args[@]}" >"$work/$name.crum.out" 2>>"$err_file"
    rc=$?
    say "$(printf '%-26s native run failed (under crum: exit %s): %s' "$name" "$rc" "$(tail -c 200 "$out_file" | tr '\n' ' ')")"
    fail=1
    continue
  fi
  out_file="$work/$name.crum.out"
  tc=$(best_time "$crum" run --device "$DEV" -- "$bin" "${args[@]}") || { say "$(printf '%-26s crum run failed (see %s)' "$name" "$err_file")"; fail=1; continue; }
  same=ok
  cmp -s "$work/$name.native.out" "$work/$name.crum.out" || { same=DIFF; fail=1; }
  overhead=$(calc "($tc - $tn) * 100 / $tn")
  # Fidelity of the emulated device (information, not a failure): its output against the GPU's.
  emu=-
  if [ "$DEV" = cuda ]; then
    timeout -k 5 300 "$crum" run --device emu -- "$bin" "${args[@]}" >"$work/$name.emuonly.out" 2>"$work/$name.emuonly.err"
    if cmp -s "$work/$name.native.out" "$work/$name.emuonly.out"; then emu=same; else emu=differs; fi
  fi
  ck=-
  source_file=integration-tests/cuda/$name.cu
  ngates=0
  [ -f "$source_file" ] && ngates=$(grep -o 'GATE([0-9]*)' "$source_file" | tr -dc '0-9\n' | sort -n | tail -1)
  if [ "${ngates:-0}" -gt 0 ] && [ "$same" = ok ]; then
    ck=$(gated)
    [[ "$ck" == *FAIL* || "$ck" == *noimage* || "$ck" == *exit* || "$ck" == *DIFF* ]] && fail=1
  fi
  say "$(printf '%-26s %9.3f %9.3f %7.1f%%  %-6s %-7s %s' "$name" "$tn" "$tc" "$overhead" "$same" "$emu" "$ck")"
done
say "gpu-smoke: $(($(date +%s) - start)) s; outputs and logs in $work"
exit $fail
