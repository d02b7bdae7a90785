#!/usr/bin/env bash
# Here (no GPU): builds the small-op test binaries and the benchmark into build-ops/ and copies them to .carry/ops/ for the
# device machine (git-ignored); the CUDA runtime and cuBLASLt come from the toolkit installed there.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export CUDACXX=${CUDACXX:-/usr/local/cuda/bin/nvcc}
cmake -G Ninja -S . -B build-ops -DCMAKE_BUILD_TYPE=Release >/dev/null
tests="cuda_moe_routing_test cuda_moe_permutation_test cuda_moe_swiglu_test cuda_norm_rms_norm_test \
cuda_norm_lm_head_test cuda_rope_yarn_test cuda_embedding_gather_test cuda_sampling_tokens_test"
ninja -C build-ops -j2 $tests
ninja -C build-ops -j2 bench_small_ops
bench=build-ops/bench/bench_small_ops
mkdir -p .carry/ops
for t in $tests; do cp "build-ops/tests/kernels/cuda/$t" .carry/ops/; done
cp "$bench" .carry/ops/bench_small_ops
du -sh .carry/ops
