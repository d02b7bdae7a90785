#!/usr/bin/env bash
# Configures and builds fathom (Release) into build/; extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -G Ninja -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C build
