#!/usr/bin/env bash
# The one command that runs every test: installs what the tests need (idempotently),
# builds the workspace, and runs the whole suite. `.ci/run` calls exactly this.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
eval "$(scripts/setup-cuda.sh --env)"
cargo build --workspace --locked
cargo test --workspace --locked -- --test-threads="${CRUM_TEST_THREADS:-2}"
# Fault injection (issue 12), one run of each scenario, small: a killed writer, proxy
# (under crum run and after a restart), program or client, and a full file system must
# never hang or lose a saved image. Longer: scripts/fault-inject.sh 60.
FAULT_STEPS=${FAULT_STEPS:-200} FAULT_BALLAST_MIB=${FAULT_BALLAST_MIB:-16} scripts/fault-inject.sh 6
# The README's main job, end to end (build, run the sample under crum, checkpoint, SIGKILL,
# restart, compare): a newcomer's first command must keep working.
log=$(mktemp)
if scripts/demo.sh > "$log" 2>&1; then
  echo "demo: OK"
  rm -f "$log"
else
  cat "$log"
  rm -f "$log"
  echo "scripts/demo.sh failed" >&2
  exit 1
fi
