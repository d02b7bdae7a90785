#!/usr/bin/env bash
# On the GPU machine: the sampling and scoring kernels of every variant staged by tools/gpu/stage_variant.sh (e.g.
# "base" = main, "final" = a candidate), each variant's sampling test binaries, then their timings alternating
# (bench_small_ops sampling: 1, 32 and 256 rows of the V3 vocabulary, uniform and language-model-shaped rows).
# Here:  T="bench_small_ops cuda_sampling_tokens_test cuda_sampling_score_tokens_test cuda_sampling_threshold_select_test"
#        tools/gpu/stage_variant.sh base main $T cuda_sampling_greedy_tokens_test
#        tools/gpu/stage_variant.sh final BRANCH $T cuda_sampling_greedy_tokens_test   (omit tests a revision lacks)
# There: tools/gpu/sampling_checks.sh [ROUNDS]   (device tool, carry [".carry/variants"]; default 2 rounds)
# FILTER (a regex of bench rows, e.g. 'greedy') narrows the timings.
# Prints each test binary's verdict and the last round's warm microseconds per op, variant and row count.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-logs}
mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
source tools/gpu/unpack_staged.sh
unpack_staged_dirs .carry/variants/*/ > /dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
status=0
for variant in .carry/variants/*/; do
  name=$(basename "$variant")
  echo "variant $name: $(cat "$variant/COMMIT" 2>/dev/null || echo unknown)"
  for test in cuda_sampling_threshold_select_test cuda_sampling_tokens_test cuda_sampling_score_tokens_test \
    cuda_sampling_greedy_tokens_test; do
    if [ ! -x "$variant/$test" ]; then
      echo "  $test not staged"
      continue
    fi
    log=$out/${test}_$name.log
    timeout 300 "$variant/$test" > "$log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || status=1
    echo "  $test rc=$rc $(grep -E '^\[  (PASSED|FAILED) ' "$log" | tr '\n' ' ')"
    grep -E "Failure|Which is" "$log" | head -6 | sed 's/^/    /'
  done
done
rounds=${1:-2}
FILTER=${FILTER:-'sample_|score_|greedy_'} TIMEOUT_S=180 bash tools/gpu/ab_bench.sh "$rounds" bench_small_ops sampling > "$out/sampling_ab.log" 2>&1 || status=1
# Lines read "round R VARIANT: op rows cold warm bytes floor cold/floor warm/floor".
grep -E "^round $rounds " "$out/sampling_ab.log" | awk '{sub(":", "", $3); printf "%-8s %-22s %5s %10s\n", $3, $4, $5, $7}' |
  sort -b -k2,2 -k3,3n -k1,1
exit $status
