#!/usr/bin/env bash
# The one command that runs every test: installs what the tests need (idempotently),
# builds the workspace, and runs the whole suite. `.ci/run` calls exactly this.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
eval "$(scripts/setup-cuda.sh --env)"
cargo build --workspace --locked
cargo test --workspace --locked -- --test-threads="${CRUM_TEST_THREADS:-2}"
