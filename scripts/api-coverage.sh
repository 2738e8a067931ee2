#!/bin/sh
# Regenerate docs/runtime-api-coverage.md from interpose/abi/exports.txt, the entry points
# implemented under interpose/src and interpose/abi/unsupported.txt (the same code build.rs
# uses to generate the stubs: interpose/abi/coverage.rs). Without this, the test
# `cargo test -p crum-interpose --test api_coverage` fails when the table is out of date.
set -eu
cd "$(dirname "$0")/.."
CRUM_BLESS=1 cargo test -q -p crum-interpose --test api_coverage coverage_doc_matches >/dev/null
grep -A5 '^| | entry points' docs/runtime-api-coverage.md
