#!/usr/bin/env bash
# The prefill's key windows on the GPU machine: the MLA prefill tests (windows merged vs the CPU reference, bits of
# the first window, log-sum-exps), the merge kernel under compute-sanitizer, the model tests (the windowed one at V3
# dims, deterministic; all of them, for the one MLA decode workspace), and a 131072-token prompt on the V3 slice with
# this tree's fathom and, when staged, a base's (the one that expands every key at once). Staging here (binaries of
# this tree in .carry/variants/windows, a base's fathom in .carry/variants/base, the V3 config and libonig in
# .carry/gpu by tools/gpu/stage.sh):
#   tools/gpu/stage_variant.sh windows HEAD fathom cuda_mla_prefill_test cuda_mla_prefill_windows_test \
#     cuda_model_test cuda_mtp_test
# then (device tool, carry [".carry/variants", ".carry/gpu"]): bash tools/gpu/key_windows_checks.sh   Logs: $OUT/logs.
set -u
L=$OUT/logs; mkdir -p $L  # written in place: a run cut short still brings back what it logged
source tools/gpu/unpack_staged.sh
W=.carry/variants/windows; B=.carry/variants/base
unpack_staged_dirs $W $B
export LD_LIBRARY_PATH=$PWD/.carry/gpu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export FATHOM_FIXTURES_DIR=$PWD/tests/fixtures
cat $W/COMMIT 2>/dev/null
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv | tee $L/gpu.txt
for t in cuda_mla_prefill_windows_test cuda_mla_prefill_test; do
  s=$(date +%s); timeout 150 $W/$t > $L/$t.txt 2>&1; echo "$t rc=$? $(( $(date +%s) - s ))s $(grep -E '^\[  (PASSED|FAILED)' $L/$t.txt | tr '\n' ' ')"
done
grep -E "FAILED|Failure|windows\]" $L/cuda_mla_prefill_windows_test.txt $L/cuda_mla_prefill_test.txt | head -40
CS=/usr/local/cuda/bin/compute-sanitizer
timeout 90 $CS --tool memcheck $W/cuda_mla_prefill_windows_test --gtest_filter='MlaMerge*' > $L/memcheck_merge.txt 2>&1
echo "memcheck merge rc=$? $(grep 'ERROR SUMMARY' $L/memcheck_merge.txt)"
for t in cuda_model_test cuda_mtp_test; do
  s=$(date +%s); timeout 170 $W/$t > $L/$t.txt 2>&1
  echo "$t rc=$? $(( $(date +%s) - s ))s $(grep -E '^\[  (PASSED|FAILED)' $L/$t.txt | tr '\n' ' ')"
  grep -E "FAILED|Failure|key windows" $L/$t.txt | head -10
done
overrides='{"num_hidden_layers": 4, "first_k_dense_replace": 1, "num_nextn_predict_layers": 0}'
for v in $W $B; do
  [ -x $v/fathom ] || continue
  n=$(basename $v)
  s=$(date +%s)
  timeout 120 $v/fathom bench-one-batch --model .carry/gpu/v3-config --load-format dummy --override-config "$overrides" \
    --device cuda --batch-size 1 --input-len 131072 --output-len 4 --chunked-prefill-size 8192 > $L/${n}_long.log 2>&1
  echo "== $n 131072-token prompt rc=$? $(( $(date +%s) - s ))s"; grep -iE "prefill|decode|error|memory" $L/${n}_long.log | head -6
done
