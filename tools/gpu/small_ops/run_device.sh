#!/usr/bin/env bash
# On the GPU machine (device `run` tool): runs the small-op CUDA tests, compute-sanitizer memcheck over the same
# binaries, and the benchmark. Binaries come prebuilt in .carry/ops (see build_carry.sh); logs go to $OUT.
# Usage: bash tools/gpu/small_ops/run_device.sh [tests] [memcheck] [ncu] [bench]   (default: tests memcheck bench)
set -u
BIN=${BIN:-.carry/ops}
OUT=${OUT:-/tmp/small_ops_out}
mkdir -p "$OUT"
steps="${*:-tests memcheck bench}"
export LD_LIBRARY_PATH="$BIN:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
tests=$(ls "$BIN"/cuda_*_test)

run_tests() {
  for t in $tests; do
    start=$(date +%s)
    timeout 120 "$t" --gtest_brief=1 >> "$OUT/tests.log" 2>&1
    echo "TEST $(basename "$t") rc=$? $(( $(date +%s) - start ))s" | tee -a "$OUT/tests.log"
  done
}

run_memcheck() {
  # One sanitizer process per binary, all at once (each is mostly host-bound); logs concatenated at the end.
  # The V3-sized lm_head GEMM and the chi-square draws are the slow parts under the sanitizer; smaller cases cover them.
  mkdir -p /tmp/memcheck_logs
  for t in $tests; do
    filter='*'
    case "$t" in
      *norm_lm_head*) filter='*SmallAndOddShapes*' ;;
      *sampling*) filter='-*ChiSquare*' ;;
    esac
    (
      start=$(date +%s)
      log=/tmp/memcheck_logs/$(basename "$t").log
      timeout 220 compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 "$t" --gtest_brief=1 \
        --gtest_filter="$filter" > "$log" 2>&1
      echo "MEMCHECK $(basename "$t") filter=$filter rc=$? $(( $(date +%s) - start ))s" >> "$log"
    ) &
  done
  wait
  cat /tmp/memcheck_logs/*.log > "$OUT/memcheck.log"
  grep -h "^MEMCHECK" /tmp/memcheck_logs/*.log
}

for step in $steps; do
  case "$step" in
    tests) run_tests & tests_pid=$! ;;
    memcheck) run_memcheck & memcheck_pid=$! ;;
    ncu)
      wait  # profiles alone on the GPU; clocks left as they are
      for t in ${NCU_SIZES:-1 32}; do
        timeout 150 ncu --clock-control none --section SpeedOfLight --section LaunchStats --section Occupancy \
          --section WarpStateStats --kernel-name regex:'routing|permutation|swiglu|rms_norm|rope|sample|gather|combine' \
          "$BIN/bench_small_ops" profile $t > "$OUT/ncu_t$t.txt" 2>&1
        echo "NCU tokens=$t rc=$?"
      done ;;
    bench)
      wait  # the benchmark runs alone on the GPU
      timeout 120 "$BIN/bench_small_ops" > "$OUT/bench.txt" 2>&1
      echo "BENCH rc=$?"
      cat "$OUT/bench.txt" ;;
  esac
done
wait
grep -h -E "FAILED|Failure|error|ERROR SUMMARY" "$OUT"/tests.log "$OUT"/memcheck.log 2>/dev/null | sort | uniq -c | head -40
