#!/usr/bin/env bash
# The fused SwiGLU + e4m3 kernel's walks on the GPU machine: its tests (every walk length and load depth against
# the CPU quantization, bit for bit), compute-sanitizer memcheck on the pipelined walks, and `bench_small_ops moe`
# (the MoE ops at 1-8192 tokens, every walk length and depth of the SwiGLU kernel; the default row is the
# heuristic's). Binaries from BIN (default .carry/gpu; e.g. a folder staged by hand or by tools/gpu/stage_variant.sh).
# Usage (device tool): BIN=.carry/variants/NAME bash tools/gpu/swiglu_checks.sh    Logs: $OUT/swiglu (or ./gpu-logs).
set -u
cd "$(dirname "$0")/../.."
bin=${BIN:-.carry/gpu}
L=${OUT:-gpu-logs}/swiglu; mkdir -p "$L"  # written in place: a run cut short still brings back what it logged
source tools/gpu/unpack_staged.sh
unpack_staged_dirs "$bin"
export LD_LIBRARY_PATH=$PWD/.carry/gpu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cat "$bin/COMMIT" 2> /dev/null
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader | tee "$L/gpu.txt"
status=0
s=$(date +%s); timeout 200 "$bin/cuda_moe_swiglu_test" > "$L/cuda_moe_swiglu_test.txt" 2>&1 || status=1
echo "cuda_moe_swiglu_test $(( $(date +%s) - s ))s $(grep -E '^\[  (PASSED|FAILED)' "$L/cuda_moe_swiglu_test.txt" | tr '\n' ' ')"
grep -E "FAILED|Failure" "$L/cuda_moe_swiglu_test.txt" | head -10
timeout 200 /usr/local/cuda/bin/compute-sanitizer --tool memcheck "$bin/cuda_moe_swiglu_test" \
  --gtest_filter='*Pipelined*:*FusedFp8*' > "$L/memcheck.txt" 2>&1 || status=1
echo "memcheck $(grep 'ERROR SUMMARY' "$L/memcheck.txt")"
timeout 240 "$bin/bench_small_ops" moe > "$L/bench_small_ops_moe.txt" 2>&1 || status=1
grep -E "^device|^op|swiglu" "$L/bench_small_ops_moe.txt"
exit $status
