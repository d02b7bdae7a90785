#!/usr/bin/env bash
# On the GPU machine, `fathom serve --device cuda`:
#  1. greedy outputs of the trained models/fathom-nano with CUDA graphs on and off, one request at a time, all at
#     once and streamed (tools/gpu/serve_greedy.py; a trained model, so greedy choices have real margins), and with
#     --enable-deterministic-inference (re-sent prompts hit the prefix cache; second turns equal with the first turn
#     cached or not, logprobs bit for bit); prompt logprobs against the generated tokens' (serve_prompt_logprobs.py);
#  2. 2000 concurrent streaming requests (fathom bench-serving) against the V3 slice (dummy weights), with CUDA graphs,
#     without, and with --enable-deterministic-inference (SLICE_VARIANTS picks): all must succeed and the server
#     must stay healthy; with graphs, then prompt-scoring throughput (serve_prompt_scoring_bench.py).
# SERVE_EXTRA adds flags to every server (e.g. "--page-size 64": KV pages the decode reads by TMA); SLICE_VARIANTS
# picks the slice runs (graphs, no-graphs, deterministic).
# Needs .carry/gpu (tools/gpu/stage.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-logs}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/.carry/gpu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
source tools/gpu/unpack_staged.sh
fathom=.carry/gpu/fathom
slice='{"num_hidden_layers": 4, "first_k_dense_replace": 1, "num_nextn_predict_layers": 0}'
status=0
http_get() { python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=60).read().decode())' "$1"; }

start_server() {  # port, log, fathom serve flags...
  local port=$1 log=$2
  shift 2
  # shellcheck disable=SC2086  # SERVE_EXTRA: whitespace-separated flags
  "$fathom" serve --device cuda --port "$port" "$@" ${SERVE_EXTRA:-} > "$log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 300); do
    http_get "http://127.0.0.1:$port/health" > /dev/null 2>&1 && { grep -m1 "device cuda" "$log"; return 0; }
    kill -0 "$server_pid" 2> /dev/null || { echo "server on $port died"; tail -20 "$log"; return 1; }
    sleep 1
  done
  echo "server on $port did not become healthy"; return 1
}

stop_server() {
  kill -TERM "$server_pid" 2> /dev/null
  wait "$server_pid"
  echo "server exit code $? after SIGTERM"
}

nano=(--model models/fathom-nano --max-running-requests 64 --mem-fraction-static 0.3)
if start_server 30001 "$out/serve_nano_graphs.log" "${nano[@]}"; then
  python3 tools/gpu/serve_greedy.py 30001 4096 "$out/greedy_graphs.json" || status=1
  python3 tools/gpu/serve_prompt_logprobs.py 30001 4096 || status=1  # shapes, values reported
  stop_server
else
  status=1
fi
if start_server 30002 "$out/serve_nano_eager.log" "${nano[@]}" --disable-cuda-graph; then
  python3 tools/gpu/serve_greedy.py 30002 4096 "$out/greedy_eager.json" || status=1
  stop_server
else
  status=1
fi
# Deterministic inference: a prompt sent again (served from the prefix cache) or with others must give the same tokens,
# and a second turn the same logprobs whether the first turn is cached or not.
if start_server 30004 "$out/serve_nano_deterministic.log" "${nano[@]}" --enable-deterministic-inference; then
  python3 tools/gpu/serve_greedy.py 30004 4096 "$out/greedy_deterministic.json" --expect-deterministic || status=1
  python3 tools/gpu/serve_prompt_logprobs.py 30004 4096 --exact || status=1  # prompt rows bit for bit
  stop_server
else
  status=1
fi
python3 - "$out/greedy_graphs.json" "$out/greedy_eager.json" <<'PY' || status=1
import json, sys
graphs, eager = (json.load(open(p)) for p in sys.argv[1:3])
for mode in ("sequential", "concurrent", "streamed"):
    same = sum(a == b for a, b in zip(graphs[mode], eager[mode]))
    print(f"graphs on == off ({mode}): {same}/{len(graphs[mode])} prompts")
PY

for variant in ${SLICE_VARIANTS:-graphs no-graphs deterministic}; do
  extra=()
  [ "$variant" = no-graphs ] && extra=(--disable-cuda-graph)
  [ "$variant" = deterministic ] && extra=(--enable-deterministic-inference)
  echo "== 2000 concurrent streams, V3 slice, $variant"
  if start_server 30003 "$out/serve_slice_$variant.log" --model .carry/gpu/v3-config --load-format dummy \
      --override-config "$slice" --skip-tokenizer-init --max-running-requests 256 --chunked-prefill-size 8192 --enable-metrics \
      "${extra[@]}"; then
    "$fathom" bench-serving --backend fathom --port 30003 --dataset-name random --random-input 256 --random-output 64 \
      --num-prompts 2000 --max-concurrency 2000 --request-rate inf --seed 3 --output-file "$out/load_2000_$variant.jsonl" \
      > "$out/load_2000_$variant.log" 2>&1 || status=1
    grep -E "Successful requests|Benchmark duration|Total input|Total generated|Output token throughput|Concurrency|Median TTFT|P99 TTFT|Median ITL|P99 ITL|Median E2E|First failure" "$out/load_2000_$variant.log" | cut -c1-300
    http_get "http://127.0.0.1:30003/health_generate" > /dev/null 2>&1 && echo "healthy after the load" || { echo "unhealthy after the load"; status=1; }
    if [ "$variant" = graphs ]; then  # prompt logprobs at the real vocabulary: scored on the GPU
      python3 tools/gpu/serve_prompt_scoring_bench.py 30003 129280 32 1024 32 5 "$out/scores_slice.json" || status=1
    fi
    http_get "http://127.0.0.1:30003/metrics" | grep -E "^fathom:(num_running_reqs|num_queue_reqs|token_usage|num_requests_total)" | head -8
    stop_server
  else
    status=1
  fi
done
exit $status
