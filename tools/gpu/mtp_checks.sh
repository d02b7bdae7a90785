#!/usr/bin/env bash
# On the GPU machine, the MTP (NextN) module through the `fathom` binary:
#  1. `fathom logits --mtp --device cuda` on the fixtures that have one, one-shot and in chunks of 3, against the
#     transformers golden MTP logits (relative L2 <= 6e-2, the GPU model's fixture bound; top-1 agreement);
#  2. `fathom bench-one-batch --mtp` on the V3 slice with its MTP layer (official V3 config, dummy FP8 weights):
#     the main decode step and the MTP step behind it, batch 1 and 32, against the same run without --mtp.
# Needs .carry/gpu (tools/gpu/stage.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-logs}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/.carry/gpu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
source tools/gpu/unpack_staged.sh
fathom=.carry/gpu/fathom
status=0
for fixture in tiny-noqlora tiny-qlora-yarn; do
  ids=$(python3 - "tests/fixtures/$fixture/golden.safetensors" <<'PY'
import sys
from safetensors.numpy import load_file
golden = load_file(sys.argv[1])
longest = max((k for k in golden if k.endswith(".ids")), key=lambda k: golden[k].size)
print(longest[:-3] + " " + ",".join(str(int(i)) for i in golden[longest]))
PY
)
  for chunk in 0 3; do
    "$fathom" logits --model "tests/fixtures/$fixture" --device cuda --mtp --ids "${ids#* }" --chunked-prefill-size "$chunk" \
      --out "$out/mtp_logits_${fixture}_$chunk.safetensors" > "$out/mtp_logits_${fixture}_$chunk.log" 2>&1 \
      || { echo "FAIL fathom logits --mtp $fixture chunk $chunk"; tail -5 "$out/mtp_logits_${fixture}_$chunk.log"; status=1; continue; }
    python3 - "tests/fixtures/$fixture/golden.safetensors" "${ids%% *}" "$out/mtp_logits_${fixture}_$chunk.safetensors" "$fixture chunk $chunk" <<'PY' || status=1
import sys
import numpy as np
from safetensors.numpy import load_file
golden, prefix, ours, label = load_file(sys.argv[1]), sys.argv[2], load_file(sys.argv[3]), sys.argv[4]
ok = True
for name in ("logits", "mtp_logits"):
    ref, got = golden[prefix + name].astype(np.float64), ours[name].astype(np.float64)
    rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    agree = int((got.argmax(-1) == ref.argmax(-1)).sum())
    good = got.shape == ref.shape and rel <= 6e-2 and agree >= 0.98 * ref.shape[0]
    ok &= good
    print(f"{'PASS' if good else 'FAIL'} logits --mtp {label}: {name} {got.shape} rel L2 {rel:.2e}, top-1 {agree}/{ref.shape[0]}")
sys.exit(0 if ok else 1)
PY
  done
done
if [ -d .carry/gpu/v3-config ]; then
  common=(--model .carry/gpu/v3-config --load-format dummy --device cuda --batch-size 1,32 --input-len 256 --output-len 32)
  "$fathom" bench-one-batch "${common[@]}" \
    --override-config '{"num_hidden_layers": 4, "first_k_dense_replace": 1, "num_nextn_predict_layers": 1}' --mtp \
    > "$out/mtp_bench.log" 2>&1 || { echo "FAIL bench-one-batch --mtp"; tail -5 "$out/mtp_bench.log"; status=1; }
  "$fathom" bench-one-batch "${common[@]}" \
    --override-config '{"num_hidden_layers": 4, "first_k_dense_replace": 1, "num_nextn_predict_layers": 0}' \
    > "$out/mtp_bench_base.log" 2>&1 || { echo "FAIL bench-one-batch"; tail -5 "$out/mtp_bench_base.log"; status=1; }
  echo "== V3 slice with MTP"; grep -E "^device|Decode\.  median|^MTP" "$out/mtp_bench.log"
  echo "== V3 slice without MTP (same run)"; grep -E "^device|Decode\.  median" "$out/mtp_bench_base.log"
fi
exit $status
