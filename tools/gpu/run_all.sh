#!/usr/bin/env bash
# On the GPU machine: every CUDA kernel test (against the CPU ops) and the whole-model GPU test, compute-sanitizer
# on each kernel test binary (tools/gpu/sanitize.sh), the kernel benchmarks, the model-level benchmark and the
# serving checks. Binaries come from tools/gpu/stage.sh via carry; logs go to $OUT (or ./gpu-logs).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-logs}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/.carry/gpu:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export FATHOM_FIXTURES_DIR=$PWD/tests/fixtures  # cuda_model_test reads the golden fixtures of the working tree
source tools/gpu/unpack_staged.sh || exit 1  # a broken archive must not pass as "no tests failed"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/device.txt"
echo "commit $(cat .carry/gpu/COMMIT 2>/dev/null || echo unknown)" | tee -a "$out/device.txt"
status=0
# The test binaries, TEST_JOBS at a time (default 4: they share the GPU, and their checks do not depend on timing;
# one at a time they take ~520 s on the H100, past the device tool's 600 s per call with the rest). Each prints its
# report in one write, so short parallel reports do not interleave.
run_test() {
  local test=$1 name report
  [ -e "$test" ] || return 0  # TESTS matched nothing (e.g. TESTS=none: benchmarks only)
  name=$(basename "$test")
  if [ ! -x "$test" ]; then
    report="FAIL $name (not executable)"
  elif "$test" > "$out/$name.log" 2>&1; then
    report="PASS $name ($(grep -o '[0-9]* tests\? from' "$out/$name.log" | tail -1 | cut -d' ' -f1) tests)"
  else
    report="FAIL $name"$'\n'"$(grep -E "FAILED|Failure" -A3 "$out/$name.log" | head -20)"
  fi
  printf '%s\n' "$report"
  [[ $report == PASS* ]]
}
export -f run_test
export out
if [ -z "${TESTS:-}" ] && ! compgen -G ".carry/gpu/cuda_*_test" > /dev/null; then
  echo "FAIL: no CUDA test binaries in .carry/gpu (run tools/gpu/stage.sh here and carry .carry/gpu)"; status=1
fi
printf '%s\n' .carry/gpu/${TESTS:-cuda_*_test} | xargs -P "${TEST_JOBS:-4}" -I{} bash -c 'run_test "$1"' _ {} || status=1
# compute-sanitizer over the kernel test binaries, 4 at a time (memcheck, the gate: 26 binaries in 84 s on the
# H100); SANITIZE_TOOLS adds synccheck / initcheck / racecheck, which report and never fail (tools/gpu/sanitize.sh).
if [ "${SANITIZE:-1}" = 1 ]; then
  OUT=$out bash tools/gpu/sanitize.sh ${SANITIZE_TOOLS:-memcheck} || status=1
fi
for bench in .carry/gpu/${BENCHES:-bench_*}; do
  case "$(basename "$bench")" in bench_tokenizer) continue ;; esac  # a CPU benchmark that needs a tokenizer and text
  [ -x "$bench" ] || continue
  name=$(basename "$bench")
  echo "== $name"
  timeout 300 "$bench" > "$out/$name.log" 2>&1 || { echo "bench $name failed"; status=1; }
done
# The MLA kernels at V3 dims: the decode tables (batch 1-128 to 16k tokens; batch 1-8 to 160k), the attention as the
# decode step chains it, and the prefill table; its plans and absorb tables are tuning aids, left out here.
if [ -x .carry/gpu/mla_bench ] && [ -z "${BENCHES:-}" ]; then
  for part in decode decode_long attention_chain prefill; do
    echo "== mla_bench --only $part"
    timeout 300 .carry/gpu/mla_bench --only "$part" > "$out/mla_bench_$part.log" 2>&1 || { echo "bench mla_bench $part failed"; status=1; }
  done
  # The chain in the model's order (mla_prepare first), at V3's 128 heads and TP8's 16 per GPU.
  for heads in 128 16; do
    echo "== mla_bench --only attention_chain --with-prepare --heads $heads"
    timeout 300 .carry/gpu/mla_bench --only attention_chain --with-prepare --heads "$heads" \
      > "$out/mla_bench_attention_chain_prepare_$heads.log" 2>&1 ||
      { echo "bench mla_bench chain $heads failed"; status=1; }
  done
fi
# The model-level table (bench/model), the MTP checks through the binary (tools/gpu/mtp_checks.sh) and the serving
# checks (graphs on/off greedy equality, 2000 concurrent streams).
if [ "${MODEL_BENCH:-1}" = 1 ] && [ -d .carry/gpu/v3-config ]; then
  bash bench/model/run_model_bench.sh || status=1
fi
if [ "${MTP_CHECKS:-1}" = 1 ]; then
  bash tools/gpu/mtp_checks.sh || status=1
fi
if [ "${SERVE_CHECKS:-1}" = 1 ] && [ -d .carry/gpu/v3-config ]; then
  bash tools/gpu/serve_checks.sh || status=1
fi
# 131072-token prompts through the server's own memory plan (the prefill's key windows), default and deterministic.
if [ "${LONG_PROMPT_CHECKS:-1}" = 1 ] && [ -d .carry/gpu/v3-config ]; then
  bash tools/gpu/long_prompt_checks.sh || status=1
fi
exit $status
