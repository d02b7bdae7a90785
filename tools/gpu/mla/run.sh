#!/usr/bin/env bash
# On the GPU machine, from the repo root: runs the MLA kernel tests, a compute-sanitizer memcheck pass and
# the benchmark from the binaries staged in .carry/mla (tools/gpu/mla/build.sh). Logs go to $OUT.
# Usage: tools/gpu/mla/run.sh [all|tests|bench|sanitize|profile] (default all = all four); each step has a time limit
# so that one slow step cannot take the others' output with it.
set -u
BIN=${BIN:-.carry/mla}
OUT=${OUT:-/tmp/mla_out}
MODE=${1:-all}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
status=0

nvidia-smi 2>&1 | head -12
ldd "$BIN/cuda_mla_decode_test" | grep -E "not found|cudart|cublas" || true

run_step() {  # name, seconds, command...
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc in $((SECONDS - t0)) s"
  [ $rc -ne 0 ] && status=1
  return 0
}

if [ "$MODE" = all ] || [ "$MODE" = tests ]; then
  for t in kv_cache_write absorb decode prefill; do
    run_step "test_$t" 200 "$BIN/cuda_mla_${t}_test" --gtest_brief=1
    grep -E "FAILED|Failure|error|Expected|Which is|rc=|PASSED|SKIPPED|\[ mla" "$OUT/test_$t.log" | head -60
  done
fi
if [ "$MODE" = all ] || [ "$MODE" = tests ]; then  # the wgmma paths must show as HGMMA in the machine code
  cuobjdump -sass "$BIN/cuda_mla_decode_test" 2>/dev/null | grep -oE "HGMMA\.[0-9A-Za-z.]*" | sort | uniq -c | head
fi
if [ "$MODE" = all ] || [ "$MODE" = bench ]; then
  run_step bench 150 "$BIN/mla_bench" --reps 30
  cat "$OUT/bench.log"
  run_step bench_repeat 150 "$BIN/mla_bench" --reps 30 --only decode  # same version again: run-to-run spread
  grep -E "^ +[0-9]" "$OUT/bench_repeat.log"
fi
if [ "$MODE" = all ] || [ "$MODE" = sanitize ]; then
  # One log for all four binaries (subsets: the memcheck run is ~100x slower than the plain one).
  run_step memcheck 200 bash -c "set -e; cs='compute-sanitizer --tool memcheck --error-exitcode 9'
    \$cs $BIN/cuda_mla_decode_test --gtest_filter='*odd*:*b1_len1_page1*:*b3_page_edges*:*Deterministic*' --gtest_brief=1
    \$cs $BIN/cuda_mla_prefill_test --gtest_filter='*odd*:*q1*:*varlen*' --gtest_brief=1
    \$cs $BIN/cuda_mla_absorb_test --gtest_filter='*odd*:*tokens7*:*tails*' --gtest_brief=1
    \$cs $BIN/cuda_mla_kv_cache_write_test --gtest_brief=1"
  grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log"
fi
if [ "$MODE" = all ] || [ "$MODE" = profile ]; then
  run_step ncu_decode 120 ncu --set basic --launch-skip 2 --launch-count 1 -k regex:mla_decode_kernel \
    "$BIN/mla_bench" --only decode --batch 64 --context 4096 --reps 1
  grep -E "Duration|Throughput|Registers|Achieved|Memory \[%\]|Compute|Shared Memory|Waves" "$OUT/ncu_decode.log" | head -30
fi
echo "== done, status $status"
exit $status
