#!/usr/bin/env bash
# On the GPU machine (device `run` tool): runs the small-op CUDA tests, compute-sanitizer memcheck over the same
# binaries, and the benchmark. Binaries come prebuilt in .carry/ops (see build_carry.sh); logs go to $OUT.
# Usage: bash tools/gpu/small_ops/run_device.sh [tests] [memcheck] [bench]   (default: all three)
set -u
BIN=${BIN:-.carry/ops}
OUT=${OUT:-/tmp/small_ops_out}
mkdir -p "$OUT"
steps="${*:-tests memcheck bench}"
export LD_LIBRARY_PATH="$BIN:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
tests=$(ls "$BIN"/cuda_*_test)

run_tests() {
  for t in $tests; do
    start=$(date +%s)
    timeout 240 "$t" --gtest_brief=1 >> "$OUT/tests.log" 2>&1
    echo "TEST $(basename "$t") rc=$? $(( $(date +%s) - start ))s" | tee -a "$OUT/tests.log"
  done
}

run_memcheck() {
  # The V3-sized lm_head GEMM and chi-square draws are the slow parts under the sanitizer; smaller cases cover them.
  for t in $tests; do
    filter='*'
    case "$t" in
      *norm_lm_head*) filter='*SmallAndOddShapes*' ;;
      *sampling*) filter='-*ChiSquare*' ;;
    esac
    start=$(date +%s)
    timeout 240 compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 "$t" --gtest_brief=1 \
      --gtest_filter="$filter" >> "$OUT/memcheck.log" 2>&1
    echo "MEMCHECK $(basename "$t") filter=$filter rc=$? $(( $(date +%s) - start ))s" | tee -a "$OUT/memcheck.log"
  done
}

for step in $steps; do
  case "$step" in
    tests) run_tests & tests_pid=$! ;;
    memcheck) run_memcheck & memcheck_pid=$! ;;
    bench)
      wait  # the benchmark runs alone on the GPU
      timeout 300 "$BIN/bench_small_ops" > "$OUT/bench.txt" 2>&1
      echo "BENCH rc=$?"
      cat "$OUT/bench.txt" ;;
  esac
done
wait
grep -h -E "FAILED|Failure|error|ERROR SUMMARY" "$OUT"/tests.log "$OUT"/memcheck.log 2>/dev/null | sort | uniq -c | head -40
