#!/usr/bin/env bash
# Long prompts through `fathom serve` on the V3 slice (dummy weights, the server's own memory plan: the KV cache
# takes the memory fraction, so a prefix's expansion must fit in what the plan keeps free): tools/gpu/long_prompt_serve.py
# sends a LENGTH-token prompt, the same again (prefix cached) and one sharing all but its last 4096 tokens, in the
# default mode and with --enable-deterministic-inference (where the cached repeat must give the same tokens).
# Binaries from BIN (default .carry/gpu); MODES picks (default "default deterministic"); LENGTH default 131072.
# Usage (device tool): BIN=.carry/variants/NAME bash tools/gpu/long_prompt_checks.sh    Logs: $OUT/long_prompt.
set -u
cd "$(dirname "$0")/../.."
bin=${BIN:-.carry/gpu}
L=${OUT:-gpu-logs}/long_prompt; mkdir -p "$L"
source tools/gpu/unpack_staged.sh
unpack_staged_dirs "$bin"
export LD_LIBRARY_PATH=$PWD/.carry/gpu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
length=${LENGTH:-131072}
slice='{"num_hidden_layers": 4, "first_k_dense_replace": 1, "num_nextn_predict_layers": 0}'
http_ok() { python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)' "$1" > /dev/null 2>&1; }
status=0 port=30040
for mode in ${MODES:-default deterministic}; do
  extra=()
  [ "$mode" = deterministic ] && extra=(--enable-deterministic-inference)
  port=$((port + 1))
  "$bin/fathom" serve --device cuda --port $port --model .carry/gpu/v3-config --load-format dummy \
    --override-config "$slice" --skip-tokenizer-init "${extra[@]}" > "$L/serve_$mode.log" 2>&1 &
  pid=$!
  up=0
  for _ in $(seq 1 240); do
    http_ok "http://127.0.0.1:$port/health" && { up=1; break; }
    kill -0 $pid 2> /dev/null || break
    sleep 1
  done
  echo "== $mode: server up=$up"
  grep -iE "kv cache|memory|prefill|device cuda" "$L/serve_$mode.log" | head -8 | cut -c1-300
  if [ $up = 1 ]; then
    flags=()
    [ "$mode" = deterministic ] && flags=(--expect-deterministic)
    timeout 600 python3 tools/gpu/long_prompt_serve.py $port "$length" "$L/$mode.json" "${flags[@]}" || status=1
    nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader
  else
    tail -20 "$L/serve_$mode.log"; status=1
  fi
  kill -TERM $pid 2> /dev/null; wait $pid; echo "server exit code $?"
  grep -iE "error|out of memory" "$L/serve_$mode.log" | head -5 | cut -c1-300
done
exit $status
