#!/usr/bin/env bash
# On the GPU machine: the GPU time of every kernel BINARY ARGS launches (the first COUNT launches, default 700), by
# Nsight Compute's gpu__time_duration with clocks and caches left alone (METHOD.md); each launch runs alone, so
# programmatic overlap is gone and the times add up to more than a graph replay. Prints the kernels by total time and
# writes every launch in order to $OUT/ncu_kernel_times.txt (or ./gpu-logs).
#   tools/gpu/ncu_kernel_times.sh BINARY [ARGS...]
# e.g. where a 4096-token prefill layer of the V3 slice goes (bench/RESULTS.md, thirty-first session):
#   tools/gpu/ncu_kernel_times.sh .carry/gpu/fathom bench-one-batch --model .carry/gpu/v3-config --load-format dummy \
#     --override-config '{"num_hidden_layers": 4, "first_k_dense_replace": 1, "num_nextn_predict_layers": 0}' \
#     --device cuda --batch-size 1 --input-len 4096 --output-len 2 --disable-cuda-graph
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ $# -lt 1 ]; then
  echo "usage: $0 BINARY [ARGS...]" >&2
  exit 2
fi
out=${OUT:-gpu-logs}
mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
"$ncu" --clock-control none --cache-control none --metrics gpu__time_duration.sum --launch-count "${COUNT:-700}" \
  --csv --print-units base --log-file "$out/ncu_kernel_times.csv" "$@" > "$out/ncu_kernel_times.log" 2>&1
status=$?
if ! grep -q '^"ID"' "$out/ncu_kernel_times.csv" 2> /dev/null; then
  echo "ncu_kernel_times: no kernels recorded (exit $status; see $out/ncu_kernel_times.log):" >&2
  tail -5 "$out/ncu_kernel_times.log" >&2
  exit 1
fi
python3 tools/gpu/ncu_kernel_times.py "$out/ncu_kernel_times.csv" > "$out/ncu_kernel_times.txt"
sed -n '1,32p' "$out/ncu_kernel_times.txt"
