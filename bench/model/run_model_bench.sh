#!/usr/bin/env bash
# On the GPU machine: the model-level table of bench/RESULTS.md for the V3 slice (official V3 config, 1 dense + 3 MoE
# layers, full vocabulary, dummy FP8 weights): fathom bench-one-batch (decode batch 1 / 32, prefill 256 / 4096),
# the PyTorch baseline (transformers, bf16) and the ceilings, in one run; then the MoE-layer table (one MoE layer's
# spans at 1, 8, 32, 256, 2048, 4096 and 8192 tokens against its floors). Needs .carry/gpu (tools/gpu/stage.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-logs}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/.carry/gpu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
source tools/gpu/unpack_staged.sh
config_dir=.carry/gpu/v3-config
overrides='{"num_hidden_layers": 4, "first_k_dense_replace": 1, "num_nextn_predict_layers": 0}'
fathom=.carry/gpu/fathom
results=$out/model_fathom.jsonl
rm -f "$results"
common=(--model "$config_dir" --load-format dummy --override-config "$overrides" --device cuda --result-filename "$results")
"$fathom" bench-one-batch "${common[@]}" --run-name decode --batch-size 1,32 --input-len 256 --output-len 32 2>&1 | tee "$out/model_decode.log"
"$fathom" bench-one-batch "${common[@]}" --run-name decode-no-graph --disable-cuda-graph --batch-size 1,32 --input-len 256 --output-len 32 2>&1 | tee "$out/model_decode_eager.log"
"$fathom" bench-one-batch "${common[@]}" --run-name prefill --batch-size 1 --input-len 256 --output-len 2 2>&1 | tee "$out/model_prefill256.log"
"$fathom" bench-one-batch "${common[@]}" --run-name prefill --batch-size 1 --input-len 4096 --output-len 2 --profile "$out/profile" 2>&1 | tee "$out/model_prefill4096.log"
python3 bench/model/torch_baseline.py "$config_dir/config.json" "$overrides" "$out/model_torch.json" > "$out/model_torch.log" 2>&1 || { tail -20 "$out/model_torch.log"; exit 1; }
python3 bench/model/model_table.py "$config_dir/config.json" "$overrides" "$results" "$out/model_torch.json" \
  "$(cat .carry/gpu/COMMIT)" | tee "$out/model_table.md"
# The MoE layer's own spans (profiling runs every forward eagerly): decode at 1 / 8 / 32 tokens and prefill of
# 256 / 2048 / 8192 tokens from one run, 4096 from the profiled prefill above.
"$fathom" bench-one-batch --model "$config_dir" --load-format dummy --override-config "$overrides" --device cuda \
  --batch-size 1,8,32 --input-len 256 --output-len 12 --profile "$out/moe256" > "$out/moe_profile.log" 2>&1
python3 bench/model/moe_layer_table.py "$config_dir/config.json" "$overrides" "$out/model_torch.json" \
  "$out/moe256-bs1.trace.json:256:1" "$out/moe256-bs8.trace.json:2048:8" "$out/moe256-bs32.trace.json:8192:32" \
  "$out/profile-bs1.trace.json:4096:1" | tee "$out/moe_layer_table.md"
