#!/usr/bin/env bash
# Configures and builds fathom (Release) into build/; extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Compile the CUDA backend too when the toolkit is installed (no GPU is needed to build it).
if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
cmake -G Ninja -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C build
