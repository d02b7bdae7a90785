#!/usr/bin/env bash
# Builds the MLA kernel tests and benchmark on the dev machine and stages them in .carry/mla/ for the GPU
# machine (run there with tools/gpu/mla/run.sh; the device `run` tool carries ".carry/mla").
set -euo pipefail
cd "$(dirname "$0")/../../.."
export CUDACXX=${CUDACXX:-/usr/local/cuda/bin/nvcc}
BUILD=${BUILD:-build-mla}
TARGETS="cuda_mla_decode_test cuda_mla_absorb_test cuda_mla_prefill_test cuda_mla_kv_cache_write_test mla_bench"
cmake -G Ninja -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$BUILD" -j"${JOBS:-2}" $TARGETS
mkdir -p .carry/mla
for t in cuda_mla_decode_test cuda_mla_absorb_test cuda_mla_prefill_test cuda_mla_kv_cache_write_test; do
  cp "$BUILD/tests/kernels/cuda/$t" .carry/mla/
done
cp "$BUILD/bench/kernels/mla/mla_bench" .carry/mla/
ls -la .carry/mla
