#!/usr/bin/env bash
# The README's "main job": install what is needed (idempotently), build crum, compile the
# sample CUDA program (an iterative Jacobi solver on managed memory) with the real nvcc, run it
# under `crum run` on the default device, checkpoint it while it runs, kill it with SIGKILL,
# show what the image holds (`crum inspect`: the device part), restart it from the image, and
# compare its result with an uninterrupted run.
# Works without a terminal (CI=true). Size: CRUM_DEMO_N (grid, default 64), CRUM_DEMO_ITERS
# (default 6000).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
export DEBIAN_FRONTEND=noninteractive

say() { printf '\n== %s\n' "$*"; }
die() { printf '\ndemo: FAILED at step "%s": %s\n' "$step" "$*" >&2; exit 1; }

step="install tools"
say "$step"
missing=()
command -v cc >/dev/null || missing+=(build-essential)
command -v g++ >/dev/null || missing+=(g++)
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
command -v python3 >/dev/null || missing+=(python3)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo -n"
  echo "installing Debian packages: ${missing[*]}"
  $sudo apt-get update -q && $sudo apt-get install -y -q "${missing[@]}" || die "apt-get install ${missing[*]} failed"
fi
command -v cargo >/dev/null || die "cargo not found: install Rust with rustup (rust-toolchain.toml pins the version)"
eval "$(scripts/setup-cuda.sh --env)" || die "scripts/setup-cuda.sh failed"
nvcc --version | tail -n 2

step="build crum"
say "$step"
cargo build --workspace --locked || die "cargo build failed"
crum=$repo/target/debug/crum

step="compile the sample"
say "$step"
work=$repo/integration-tests/build/demo
rm -rf "$work"; mkdir -p "$work"
nvcc -cudart shared -arch=sm_80 -O2 -o "$work/jacobi" integration-tests/cuda/jacobi.cu || die "nvcc failed"
n=${CRUM_DEMO_N:-64}; iters=${CRUM_DEMO_ITERS:-6000}; every=$((iters / 20))
args=("$n" "$iters" "$every")
echo "built $work/jacobi (args: ${args[*]})"

step="uninterrupted run under crum run"
say "$step"
"$crum" run -- "$work/jacobi" "${args[@]}" > "$work/reference.out" || die "exit status $? (see above)"
tail -n 3 "$work/reference.out"

step="run under crum run and checkpoint it"
say "$step"
# Descriptors inherited from whatever runs this script (a CI runner's pipes) must not reach the
# program: a restart refuses pipes to other processes.
( for fd in $(ls /proc/$BASHPID/fd); do [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null; done
  exec "$crum" run -- "$work/jacobi" "${args[@]}" ) > "$work/interrupted.out" 2> "$work/interrupted.err" &
runpid=$!
# The program is the child of `crum run`; wait until it has printed its first progress line.
for _ in $(seq 1 600); do
  grep -q '^step ' "$work/interrupted.out" 2>/dev/null && break
  kill -0 "$runpid" 2>/dev/null || die "the program ended before it could be checkpointed"
  sleep 0.05
done
app=$(pgrep -P "$runpid" -f "^$work/jacobi " | head -n 1 || true)
[ -n "$app" ] || die "no program process under crum run (pid $runpid)"
image=$("$crum" checkpoint "$app" --dir "$work/images" | tail -n 1) || die "crum checkpoint $app failed"
echo "checkpoint image: $image"
echo "progress at checkpoint: $(grep '^step ' "$work/interrupted.out" | tail -n 1)"

step="what the image holds"
say "$step"
"$crum" inspect "$image" > "$work/inspect.txt" || die "crum inspect $image failed"
sed -n '/^on disk/p' "$work/inspect.txt"
sed -n '/^device$/,/^device kernels$/p' "$work/inspect.txt" | sed '$d'
grep -q '^device$' "$work/inspect.txt" || die "the image has no device part"

step="kill it with SIGKILL"
say "$step"
kill -9 "$app" 2>/dev/null || die "the program had already ended; use a larger CRUM_DEMO_ITERS"
wait "$runpid" 2>/dev/null || true
echo "killed pid $app; its output stopped at: $(grep '^step ' "$work/interrupted.out" | tail -n 1)"

step="restart from the image"
say "$step"
# The program's stdout was the file interrupted.out: the restart gives it that file again,
# cut back to what it held at the checkpoint (what was printed after the checkpoint, before
# the kill, is not in the image's past), and the program goes on writing there.
echo "interrupted.out before the restart: $(grep -c '^step ' "$work/interrupted.out" || true) progress lines"
"$crum" restart "$image" > "$work/restart.log" 2>&1 || { cat "$work/restart.log"; die "crum restart $image exited with $?"; }
echo "interrupted.out after the restart:"
tail -n 3 "$work/interrupted.out"

step="compare with the uninterrupted run"
say "$step"
if cmp -s "$work/reference.out" "$work/interrupted.out"; then
  echo "the interrupted and restarted run printed exactly what the uninterrupted run printed:"
  grep -v '^step ' "$work/interrupted.out" || true
  echo; echo "demo: OK"
else
  diff "$work/reference.out" "$work/interrupted.out" || true
  die "the restarted run's output differs from the uninterrupted run's"
fi
