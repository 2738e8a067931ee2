#!/usr/bin/env bash
# Fault injection (issue 12): runs a CUDA program under crum and breaks things at random
# moments — the image writer, the device proxy (under `crum run` and after a restart), the
# program itself and the `crum checkpoint` client are killed, and a checkpoint is written
# into a full file system — then restarts every complete image and checks that the program,
# which verifies its own memory and its log file, finishes correctly from each.
#
#   scripts/fault-inject.sh [RUNS]        # default 12 (every scenario twice); FAULT_SEED=N,
#   FAULT_ONLY=<scenario>, FAULT_KEEP=1 (keep the work directory), FAULT_DEADLINE=<s>
#
# It prints one line per run and then the counts:
#   runs, images verified, hangs (must be 0), data lost (must be 0)
# and exits 1 when a hang or a loss was seen. "Data lost" counts: a complete image that does
# not restart and finish correctly, an image that vanished, a partial `.tmp-` image left
# behind after a failed checkpoint, and a failure message without its cause.
# Needs a built workspace (target/debug/crum) and nvcc (scripts/setup-cuda.sh).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
runs=${1:-${FAULT_RUNS:-12}}
seed=${FAULT_SEED:-$$}
RANDOM=$seed
crum=${CRUM_BIN:-$repo/target/debug/crum}
[ -x "$crum" ] || { echo "fault-inject: $crum not built (cargo build --workspace)" >&2; exit 2; }
eval "$(scripts/setup-cuda.sh --env)" || { echo "fault-inject: scripts/setup-cuda.sh failed" >&2; exit 2; }

work=$repo/target/fault-inject/$$
rm -rf "$work"; mkdir -p "$work"
trap 'cleanup_all' EXIT
bin=$work/fault_log
nvcc -cudart shared -arch=sm_80 -O2 -o "$bin" integration-tests/cuda/fault_log.cu \
  || { echo "fault-inject: nvcc failed" >&2; exit 2; }

STEPS=${FAULT_STEPS:-600}
BALLAST=${FAULT_BALLAST_MIB:-48}
DEADLINE=${FAULT_DEADLINE:-180}   # seconds before a wait counts as a hang (generous: loaded CI)

n_runs=0 n_verified=0 n_hangs=0 n_lost=0
pids_to_kill=()
mounts=()
cleanup_all() {
  for p in "${pids_to_kill[@]}"; do kill -9 "$p" 2>/dev/null; done
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null; done
  [ -n "${FAULT_KEEP:-}" ] || rm -rf "$work"
}
note() { printf '  %s\n' "$*"; }
lost() { n_lost=$((n_lost + 1)); note "DATA LOST: $*"; }
hang() { n_hangs=$((n_hangs + 1)); note "HANG: $*"; }

# Runs a command with fds above 2 closed (a restart refuses pipes to other processes).
closed_fds() {
  for fd in $(ls /proc/$BASHPID/fd); do [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null; done
  exec "$@"
}

# wait_for COND_CMD...: polls until the command succeeds; 1 after DEADLINE seconds.
wait_for() {
  local t0=$SECONDS
  until "$@"; do
    [ $((SECONDS - t0)) -ge "$DEADLINE" ] && return 1
    sleep 0.02
  done
}
# wait_exit PID: waits for a background job to end (0) or the deadline (1).
wait_exit() { wait_for eval "! kill -0 $1 2>/dev/null"; }
has_line() { grep -q "$2" "$1" 2>/dev/null; }
# settled FILE PATTERN: the program's output reaches FILE through a pipe and `cat` (a restart
# gives a program back the regular files its stdout and stderr were, so they are pipes
# here, like a terminal): waits up to 10 s after the program ended for the line to arrive.
settled() {
  local t0=$SECONDS
  until has_line "$1" "$2"; do [ $((SECONDS - t0)) -ge 10 ] && return 1; sleep 0.02; done
}
app_of() { pgrep -P "$1" -f "^$bin " | head -n 1; }
rand_ms() { echo $((RANDOM % $1)); }
sleep_ms() { sleep "$(printf '0.%03d' "$1")"; }

# start_app RUNDIR [crum run options...]: sets $runpid and $app.
start_app() {
  local d=$1; shift
  mkdir -p "$d"
  ( closed_fds "$crum" run "$@" -- "$bin" "$STEPS" "$d/log" "$BALLAST" ) > >(cat > "$d/out") 2> >(cat > "$d/err") &
  runpid=$!
  pids_to_kill+=("$runpid")
  app=""
  if ! wait_for has_line "$d/out" '^ready'; then hang "program did not start ($d)"; return 1; fi
  app=$(app_of "$runpid")
  [ -n "$app" ] && pids_to_kill+=("$app")
}

# finish RUNDIR: waits for the run to end; the program must have printed PASS.
finish() {
  local d=$1
  if ! wait_exit "$runpid"; then hang "program did not finish ($d)"; kill -9 "$app" "$runpid" 2>/dev/null; return 1; fi
  wait "$runpid" 2>/dev/null
  settled "$d/out" '^PASS' || lost "uninterrupted part of the run failed: $(grep -m1 FAIL "$d/out" "$d/err")"
}

# No `.tmp-` leftovers may remain in an image directory once no writer runs.
check_no_partial() {
  local dir=$1
  [ -d "$dir" ] || return 0
  local left
  if ! wait_for eval "[ -z \"\$(ls -A '$dir' | grep '^\.tmp-')\" ]"; then
    left=$(ls -A "$dir" | grep '^\.tmp-' | tr '\n' ' ')
    lost "partial image left in $dir: $left"
  fi
}

# Restarts every complete image in DIR, each to the end of the program.
verify_images() {
  local dir=$1 img out
  [ -d "$dir" ] || return 0
  for img in "$dir"/ckpt-*; do
    [ -f "$img/inventory" ] || continue
    out=$work/restart.$RANDOM
    ( closed_fds "$crum" restart "$img" ) > >(cat > "$out.out") 2> >(cat > "$out.err") &
    local rp=$!
    pids_to_kill+=("$rp")
    if ! wait_exit "$rp"; then hang "restart of $img did not finish"; kill -9 "$rp"; continue; fi
    wait "$rp" 2>/dev/null
    if settled "$out.out" '^PASS'; then
      n_verified=$((n_verified + 1))
    else
      lost "restart of $(basename "$img") failed: $(tail -n 2 "$out.err" "$out.out" | tr '\n' ' ')"
    fi
  done
}

ckpt_bg() { ( "$crum" checkpoint "$1" --dir "$2" > "$3.out" 2> "$3.err" ) & ckpid=$!; }

# --- scenarios ---------------------------------------------------------------------------

# The writer (the program's forked child) is killed at a random moment; the program goes on.
s_kill_writer() {
  local d=$1 imgs=$1/images
  start_app "$d" || return
  "$crum" checkpoint "$app" --dir "$imgs" > /dev/null 2>&1 || lost "first checkpoint failed"
  ckpt_bg "$app" "$imgs" "$d/ck"
  local delay; delay=$(rand_ms 300)
  local w=""
  local t0=$SECONDS
  while [ -z "$w" ] && kill -0 "$ckpid" 2>/dev/null && [ $((SECONDS - t0)) -lt "$DEADLINE" ]; do
    w=$(pgrep -P "$app" | head -n 1); [ -z "$w" ] && sleep 0.005
  done
  if [ -n "$w" ]; then sleep_ms "$delay"; kill -9 "$w" 2>/dev/null; note "writer $w killed after ${delay} ms"; else note "writer already done"; fi
  wait_exit "$ckpid" || hang "crum checkpoint did not return after the writer was killed"
  if ! grep -q . "$d/ck.out"; then
    grep -q 'killed\|signal' "$d/ck.err" || lost "failure without its cause: $(cat "$d/ck.err")"
  fi
  finish "$d"
  check_no_partial "$imgs"
  [ "$(ls -d "$imgs"/ckpt-* 2>/dev/null | wc -l)" -ge 1 ] || lost "the earlier image vanished"
  verify_images "$imgs"
}

# The proxy dies under `crum run`: the program must end with an error, not hang; the images
# taken before stay restartable.
s_kill_proxy_run() {
  local d=$1 imgs=$1/images
  start_app "$d" || return
  "$crum" checkpoint "$app" --dir "$imgs" > /dev/null 2>&1 || lost "checkpoint before the fault failed"
  local proxy; proxy=$(pgrep -P "$runpid" -f ' proxy ' | head -n 1)
  sleep_ms "$(rand_ms 500)"
  [ -n "$proxy" ] && kill -9 "$proxy" && note "proxy $proxy killed"
  if ! wait_exit "$runpid"; then hang "program hangs after its proxy died"; kill -9 "$app"; fi
  verify_images "$imgs"
}

# The proxy of a restarted program dies.
s_kill_proxy_restart() {
  local d=$1 imgs=$1/images
  start_app "$d" || return
  "$crum" checkpoint "$app" --dir "$imgs" > /dev/null 2>&1 || lost "checkpoint failed"
  kill -9 "$app"; wait "$runpid" 2>/dev/null
  local img; img=$(ls -d "$imgs"/ckpt-* | tail -n 1)
  ( closed_fds "$crum" restart "$img" ) > >(cat > "$d/r.out") 2> >(cat > "$d/r.err") &
  local rp=$!
  pids_to_kill+=("$rp")
  local proxy=""
  wait_for eval "proxy=\$(pgrep -f -- '--watch-pid $rp\$' | head -n 1); [ -n \"\$proxy\" ] || ! kill -0 $rp 2>/dev/null"
  proxy=$(pgrep -f -- "--watch-pid $rp\$" | head -n 1)
  sleep_ms "$(rand_ms 400)"
  if [ -n "$proxy" ]; then kill -9 "$proxy"; note "proxy $proxy of restarted $rp killed"; else note "restarted program ended first"; fi
  if ! wait_exit "$rp"; then hang "restarted program hangs after its proxy died"; kill -9 "$rp"; fi
  verify_images "$imgs"
}

# The program is killed while a checkpoint is in progress: the client must return.
s_kill_app() {
  local d=$1 imgs=$1/images
  start_app "$d" || return
  "$crum" checkpoint "$app" --dir "$imgs" > /dev/null 2>&1 || lost "first checkpoint failed"
  ckpt_bg "$app" "$imgs" "$d/ck"
  sleep_ms "$(rand_ms 200)"
  kill -9 "$app"; note "program killed during a checkpoint"
  wait_exit "$ckpid" || hang "crum checkpoint did not return after the program died"
  wait "$runpid" 2>/dev/null
  # A writer that outlived the program may still be finishing; wait for it.
  wait_for eval "! pgrep -f '^$bin $STEPS $d/log' >/dev/null" || hang "the orphaned writer did not finish"
  check_no_partial "$imgs"
  verify_images "$imgs"
}

# The `crum checkpoint` client is killed; the program goes on and checkpoints again.
s_kill_client() {
  local d=$1 imgs=$1/images
  start_app "$d" || return
  ckpt_bg "$app" "$imgs" "$d/ck"
  sleep_ms "$(rand_ms 150)"
  kill -9 "$ckpid" 2>/dev/null; note "client killed"
  "$crum" checkpoint "$app" --dir "$imgs" > /dev/null 2> "$d/ck2.err" || lost "checkpoint after a killed client failed: $(cat "$d/ck2.err")"
  finish "$d"
  check_no_partial "$imgs"
  verify_images "$imgs"
}

# A checkpoint into a full file system fails with its cause, leaves nothing behind, and a
# checkpoint into a directory with room succeeds afterwards.
s_full_disk() {
  local d=$1 small=$1/small imgs=$1/images
  mkdir -p "$small"
  local how=tmpfs
  if mount -t tmpfs -o size=8m tmpfs "$small" 2>/dev/null; then
    mounts+=("$small")
  else
    how=fsize
  fi
  start_app "$d" || return
  if [ $how = fsize ]; then
    # No mount allowed: a file-size limit on the program (its writer inherits it).
    prlimit --pid "$app" --fsize=$((8 << 20)): 2>/dev/null || { note "neither tmpfs nor prlimit available: skipped"; kill -9 "$app"; return; }
  fi
  if "$crum" checkpoint "$app" --dir "$small" > /dev/null 2> "$d/full.err"; then
    lost "a checkpoint into a full file system ($how) reported success"
  elif [ $how = tmpfs ] && ! grep -q 'No space left' "$d/full.err"; then
    lost "full-disk failure without its cause: $(cat "$d/full.err")"
  fi
  note "full disk ($how): $(tail -n 1 "$d/full.err")"
  [ $how = fsize ] && prlimit --pid "$app" --fsize=unlimited: 2>/dev/null
  "$crum" checkpoint "$app" --dir "$imgs" > /dev/null 2> "$d/ck2.err" || lost "checkpoint after a full disk failed: $(cat "$d/ck2.err")"
  check_no_partial "$small"
  finish "$d"
  verify_images "$imgs"
  [ $how = tmpfs ] && umount "$small" 2>/dev/null
}

scenarios=(s_kill_writer s_kill_proxy_run s_kill_proxy_restart s_kill_app s_kill_client s_full_disk)
# FAULT_ONLY=full_disk (a scenario's name) runs only that one.
[ -n "${FAULT_ONLY:-}" ] && scenarios=("s_${FAULT_ONLY#s_}")
echo "fault-inject: $runs runs, seed $seed, $STEPS steps, ${BALLAST} MiB ballast, work dir $work"
for ((i = 0; i < runs; i++)); do
  s=${scenarios[$((i % ${#scenarios[@]}))]}
  echo "run $((i + 1)): ${s#s_}"
  before=$((n_hangs + n_lost))
  "$s" "$work/run$i"
  n_runs=$((n_runs + 1))
  [ $((n_hangs + n_lost)) -eq "$before" ] && [ -z "${FAULT_KEEP:-}" ] && rm -rf "$work/run$i"
done
echo "fault-inject: runs $n_runs, images verified $n_verified, hangs $n_hangs, data lost $n_lost"
[ "$n_hangs" -eq 0 ] && [ "$n_lost" -eq 0 ]
