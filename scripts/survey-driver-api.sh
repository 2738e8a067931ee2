#!/usr/bin/env bash
# The driver-API survey of issue 13 (docs/driver-api.md): builds the CUDA corpus with the
# static runtime (scripts/survey-build-static.sh), runs every program against a logging
# libcuda.so.1 (scripts/survey/libcuda_log.c + the fake driver), and prints the tables.
#
#   scripts/survey-driver-api.sh [PROGRAM...]     # default: the whole corpus
#   scripts/survey-driver-api.sh --variants       # device_query under other driver answers
#
# Logs: integration-tests/build/survey/<program>.log (one line per driver event, see the C
# file), <program>.out (its stdout+stderr), <program>.rc; summary: survey.md there.
# Environment passed through to the logging driver: CRUM_SURVEY_STUB_RESULT,
# CRUM_SURVEY_SLOT_RESULT, CRUM_SURVEY_REFUSE (export-table UUIDs to answer "not found"),
# CRUM_SURVEY_DRIVER_VERSION (see scripts/survey/libcuda_log.c).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=$repo/integration-tests/build/survey
mkdir -p "$out"
variants=0
if [ "${1:-}" = --variants ]; then variants=1; shift; fi
if [ $variants = 1 ]; then "$repo/scripts/survey-build-static.sh" device_query; else
  # managed_nouffd runs managed_cycles.
  extra=(); [[ " $* " == *" managed_nouffd "* ]] && extra=(managed_cycles)
  "$repo/scripts/survey-build-static.sh" "$@" "${extra[@]}"
fi
cc -O1 -Wall -Wextra -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$out/libcuda.so.1" \
  "$repo/scripts/survey/libcuda_log.c" "$repo/proxy/src/cuda/fake_libcuda.c" -ldl -lpthread
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
progs=("$@")
if [ ${#progs[@]} -eq 0 ]; then
  for f in "$repo"/integration-tests/build/static/*; do
    case $f in *.sum|*.sum.*|*.err|*.err.*|*.tmp|*.tmp.*) continue;; esac
    [ -x "$f" ] && progs+=("$(basename "$f")")
  done
fi
if [ $variants = 1 ]; then
  # One program (device_query) against other answers of the driver, and built with the shared
  # runtime (NVIDIA's libcudart.so.13) instead: how the runtime's initialization reacts.
  eval "$("$repo/scripts/setup-cuda.sh" --env)"
  nvcc -cudart shared -arch=sm_80 -O2 -I"$repo/integration-tests/cuda" -o "$out/device_query_shared" \
    "$repo/integration-tests/cuda/device_query.cu"
  integ=D4082055-BDE6-704B-8D34-BA123C66E1F2
  echo "| variant | entry points requested | export tables | device_query printed |"
  echo "|---|---|---|---|"
  while IFS='|' read -r label envs exe; do
    rm -f "$out/variant.log"
    # shellcheck disable=SC2086
    r=$(cd "$scratch" && env $envs CRUM_SURVEY_LOG="$out/variant.log" LD_PRELOAD="$out/libcuda.so.1" \
          LD_LIBRARY_PATH="$out:$CRUM_CUDA_HOME/lib" timeout 30 "$exe" 2>&1 </dev/null | head -n 1 || true)
    echo "| $label | $(grep -c '^proc' "$out/variant.log") | $(grep -c '^table [^ ]*$' "$out/variant.log") | \`${r#*cuda/}\` |"
  done <<EOV
static runtime, defaults (driver 13.0, slots answer 0)|CRUM_SURVEY_DRIVER_VERSION=13000|$repo/integration-tests/build/static/device_query
shared runtime (libcudart.so.13), defaults|CRUM_SURVEY_DRIVER_VERSION=13000|$out/device_query_shared
integrity check answers CUDA_ERROR_NOT_SUPPORTED|CRUM_SURVEY_SLOT_RESULT=801|$repo/integration-tests/build/static/device_query
integrity table refused (CUDA_ERROR_NOT_FOUND)|CRUM_SURVEY_REFUSE=$integ|$repo/integration-tests/build/static/device_query
driver reports 12.8|CRUM_SURVEY_DRIVER_VERSION=12080|$repo/integration-tests/build/static/device_query
driver reports 13.1|CRUM_SURVEY_DRIVER_VERSION=13010|$repo/integration-tests/build/static/device_query
driver reports 99.9|CRUM_SURVEY_DRIVER_VERSION=99999|$repo/integration-tests/build/static/device_query
EOV
  exit 0
fi
# The arguments the test suite gives programs that need some (they exit before any CUDA call
# without them).
args_of() {
  case $1 in
    ckpt_log_file) echo "$scratch/log";;
    exec_chain) echo "0 $scratch/go";;
    fault_log) echo "10 $scratch/log 1";;
    managed_nouffd) echo "$repo/integration-tests/build/static/managed_cycles 4";;
  esac
}
for p in "${progs[@]}"; do
  rm -f "$out/$p.log"
  read -r -a args <<<"$(args_of "$p")"
  # Programs run in a scratch directory (some write files); 30 s is far more than any needs
  # to reach the driver and stop.
  set +e
  # Descriptors this shell inherited are closed: exec_chain checks that none below 64 is open.
  (for fd in /proc/self/fd/*; do n=${fd##*/}; [ "$n" -gt 2 ] && eval "exec $n>&-" 2>/dev/null; done
   cd "$scratch" && CRUM_SURVEY_LOG="$out/$p.log" LD_PRELOAD="$out/libcuda.so.1" \
     LD_LIBRARY_PATH="$out" timeout 30 "$repo/integration-tests/build/static/$p" "${args[@]}" \
     >"$out/$p.out" 2>&1 </dev/null)
  echo $? >"$out/$p.rc"
  set -e
done
python3 "$repo/scripts/survey/summarize.py" "$out" "${progs[@]}" | tee "$out/survey.md"
