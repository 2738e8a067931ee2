#!/usr/bin/env bash
# Writes the fingerprint of a static CUDA runtime (libcudart_static.a) that `crum run` uses
# to find the runtime's entry points in stripped executables (cli/src/fingerprint.rs):
# cli/cudart-fingerprints/<version>.txt, checked in and compiled into crum (list it in
# `BUILT_IN` there when it is a new version).
#
#   scripts/cudart-fingerprints.sh                 # the toolkit of scripts/setup-cuda.sh
#   scripts/cudart-fingerprints.sh 13.0.96         # another version, from PyPI's wheel
#   scripts/cudart-fingerprints.sh 13.0.96 path/libcudart_static.a   # from an archive
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
cargo build -q -p crum-cli
crum=$repo/target/debug/crum
out=$repo/cli/cudart-fingerprints
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ $# -eq 0 ]; then
  root=$(scripts/setup-cuda.sh)
  archive=$root/lib/libcudart_static.a
  info=$(find "$root/../.." -maxdepth 1 -name 'nvidia_cuda_runtime-*.dist-info' | head -n 1)
  [ -n "$info" ] || { echo "no nvidia_cuda_runtime dist-info beside $root" >&2; exit 1; }
  version=$(basename "$info" .dist-info)
  version=${version#nvidia_cuda_runtime-}
elif [ $# -eq 1 ]; then
  version=$1
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$tmp" "nvidia-cuda-runtime==$version" >&2
  (cd "$tmp" && python3 -m zipfile -e ./*.whl wheel >&2)
  archive=$(find "$tmp/wheel" -name libcudart_static.a | head -n 1)
  [ -n "$archive" ] || { echo "the nvidia-cuda-runtime $version wheel has no libcudart_static.a" >&2; exit 1; }
else
  version=$1
  archive=$2
fi
"$crum" cudart-fingerprint --cuda-version "$version" "$archive" > "$tmp/print.txt"
mv "$tmp/print.txt" "$out/$version.txt"
echo "$out/$version.txt"
