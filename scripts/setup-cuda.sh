#!/usr/bin/env bash
# Installs the CUDA compiler (nvcc 13.x) and shared runtime from PyPI into an ignored
# folder, idempotently. No GPU is needed to compile. Prints the toolkit root on stdout.
#
#   scripts/setup-cuda.sh            # install if missing; print the root
#   eval "$(scripts/setup-cuda.sh --env)"   # export CRUM_CUDA_HOME and PATH
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${CRUM_CUDA_VENV:-$repo/.cuda-venv}
stamp=$venv/.crum-cuda-ok

# The CCCL headers (nv/target, libcu++, thrust, cub) and the profiler API header come with a
# real toolkit; cooperative_groups.h includes <nv/target>. NVIDIA's Python driver bindings,
# NVRTC and numpy are a program nobody here wrote for the driver-API tests (cuda_python.rs).
# A venv made before any of them was added gets them.
if [ ! -f "$stamp" ] || ! compgen -G "$venv/lib/*/site-packages/nvidia/*/include/nv/target" >/dev/null \
    || ! compgen -G "$venv/lib/*/site-packages/nvidia/*/include/cuda_profiler_api.h" >/dev/null \
    || ! compgen -G "$venv/lib/*/site-packages/cuda/bindings/driver*" >/dev/null \
    || ! compgen -G "$venv/lib/*/site-packages/numpy" >/dev/null; then
  echo "crum: installing the CUDA compiler from PyPI into $venv (once)" >&2
  [ -x "$venv/bin/pip" ] || python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    'nvidia-cuda-nvcc>=13,<14' 'nvidia-cuda-runtime>=13,<14' \
    'nvidia-cuda-crt>=13,<14' 'nvidia-nvvm>=13,<14' 'nvidia-cuda-cccl>=13,<14' \
    'nvidia-cuda-profiler-api>=13,<14' 'nvidia-cuda-nvrtc>=13,<14' 'cuda-python>=13,<14' numpy >&2
fi

# The packages lay the toolkit out under site-packages/nvidia/cu13 (or cuda_nvcc etc. on
# older layouts); find the folder that holds bin/nvcc.
nvcc=$(find "$venv/lib" -path '*/bin/nvcc' -type f | head -n 1)
[ -n "$nvcc" ] || { echo "crum: nvcc not found under $venv after install" >&2; exit 1; }
root=$(dirname "$(dirname "$nvcc")")
# nvcc -cudart shared links against libcudart.so; the wheel ships only libcudart.so.13.
for lib in "$root"/lib "$root"/lib64; do
  if [ -e "$lib/libcudart.so.13" ] && [ ! -e "$lib/libcudart.so" ]; then
    ln -s libcudart.so.13 "$lib/libcudart.so"
  fi
done
touch "$stamp"

if [ "${1:-}" = "--env" ]; then
  echo "export CRUM_CUDA_HOME='$root'"
  echo "export PATH='$root/bin':\"\$PATH\""
else
  echo "$root"
fi
