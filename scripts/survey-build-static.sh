#!/usr/bin/env bash
# Builds every program of the CUDA corpus (integration-tests/cuda) with the static runtime
# (`nvcc -cudart static`, nvcc's default) into integration-tests/build/static/, skipping those
# already built from the same source. Used by scripts/survey-driver-api.sh.
#
#   scripts/survey-build-static.sh [PROGRAM...]    # default: every program
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
eval "$("$repo/scripts/setup-cuda.sh" --env)"
src=$repo/integration-tests/cuda
out=$repo/integration-tests/build/static
mkdir -p "$out"
if [ $# -gt 0 ]; then
  sel=()
  for n in "$@"; do if [ -d "$src/$n" ]; then sel+=("$src/$n/"); else sel+=("$src/$n.cu"); fi; done
else
  sel=("$src"/*.cu "$src"/*/)
fi
for p in "${sel[@]}"; do
  name=$(basename "${p%/}" .cu)
  [ "$name" = expected ] && continue
  if [ -d "$p" ]; then srcs=("$p"*.cu); rdc=(-rdc=true); else srcs=("$p"); rdc=(); fi
  sum=$(cat "${srcs[@]}" "$src"/*.h | sha256sum | cut -c1-16)
  exe=$out/$name
  if [ -x "$exe" ] && [ "$(cat "$exe.sum" 2>/dev/null)" = "$sum" ]; then continue; fi
  # Built under a name of its own and renamed into place: two surveys (or tests) may build
  # the same program at once.
  tmp=$exe.tmp.$$
  if nvcc -cudart static -arch=sm_80 -O2 "${rdc[@]}" -I"$src" -o "$tmp" "${srcs[@]}" -lpthread 2>"$exe.err.$$"; then
    mv -f "$tmp" "$exe"; echo "$sum" >"$exe.sum.$$"; mv -f "$exe.sum.$$" "$exe.sum"; rm -f "$exe.err.$$" "$exe.err"
  else
    mv -f "$exe.err.$$" "$exe.err"; rm -f "$tmp"
    echo "survey: $name did not build (see $exe.err)" >&2
  fi
done
