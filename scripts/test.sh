#!/usr/bin/env bash
# One command: install dependencies, build everything, run every CPU test. The last line is ctest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
