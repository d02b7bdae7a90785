"""Builds the model-level results table: fathom bench-one-batch results (JSON lines) next to the hardware floor
(bytes / measured copy bandwidth, or FLOPs / measured FP8 rate) and the PyTorch baseline of the same run.

usage: python3 model_table.py CONFIG_JSON OVERRIDES_JSON FATHOM_JSONL TORCH_JSON COMMIT > table.md
"""
import json
import sys


def expected_distinct_experts(experts, top_k, tokens):
    """Experts a batch of tokens touches when routing is uniform (dummy weights): E * (1 - (1 - k/E)^tokens)."""
    return experts * (1 - (1 - top_k / experts) ** tokens)


def slice_costs(c):
    h, heads = c["hidden_size"], c["num_attention_heads"]
    nope, rope, v = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    q_lora, lora = c["q_lora_rank"], c["kv_lora_rank"]
    attention = h * q_lora + q_lora * heads * (nope + rope) + h * (lora + rope) + lora * heads * (nope + v) + heads * v * h
    dense = 3 * h * c["intermediate_size"]
    expert = 3 * h * c["moe_intermediate_size"]
    shared = expert * c["n_shared_experts"]
    layers = c["num_hidden_layers"]
    dense_layers = c["first_k_dense_replace"]
    return dict(h=h, heads=heads, attention=attention, dense=dense, expert=expert, shared=shared, layers=layers,
                dense_layers=dense_layers, moe_layers=layers - dense_layers, experts=c["n_routed_experts"],
                top_k=c["num_experts_per_tok"], router=c["n_routed_experts"] * h, vocab=c["vocab_size"],
                qk=nope + rope, v=v, lora=lora, rope=rope, nope=nope)


def decode_bytes(s, batch, context):
    """Bytes one decode step must read: FP8 weights touched, bf16 router / lm_head, the KV cache (bf16, 576/token)."""
    touched = expected_distinct_experts(s["experts"], s["top_k"], batch)
    weights = s["layers"] * s["attention"] + s["dense_layers"] * s["dense"]
    weights += s["moe_layers"] * ((touched * s["expert"]) + s["shared"] + 2 * s["router"])
    weights += 2 * s["vocab"] * s["h"]
    kv = s["layers"] * batch * context * (s["lora"] + s["rope"]) * 2
    return weights + kv


def prefill_flops(s, length):
    per_token = s["layers"] * s["attention"] + s["dense_layers"] * s["dense"]
    per_token += s["moe_layers"] * ((s["top_k"] + s["shared"] / s["expert"]) * s["expert"] + s["router"])
    linear = 2 * length * per_token
    # kv_b expansion of every key, causal attention scores and values.
    attention = s["layers"] * (2 * length * s["lora"] * s["heads"] * (s["nope"] + s["v"]) +
                               2 * (length * (length + 1) / 2) * s["heads"] * (s["qk"] + s["v"]))
    return linear + attention + 2 * s["vocab"] * s["h"]


def prefill_bytes(s, length):
    touched = expected_distinct_experts(s["experts"], s["top_k"], length)
    weights = s["layers"] * s["attention"] + s["dense_layers"] * s["dense"]
    weights += s["moe_layers"] * (touched * s["expert"] + s["shared"] + 2 * s["router"]) + 2 * s["vocab"] * s["h"]
    return weights


def load_slice_and_ceilings(config_path, overrides_json, ceilings_path):
    """(slice costs of the config with its overrides, the ceilings JSON, bytes/s, FLOP/s)."""
    config = json.load(open(config_path))
    config.update(json.loads(overrides_json))
    ceilings = json.load(open(ceilings_path))
    return slice_costs(config), ceilings, ceilings["copy_bandwidth_gbs"] * 1e9, ceilings["fp8_dense_tflops"] * 1e12


def main():
    config_path, overrides_json, fathom_path, torch_path, commit = sys.argv[1:6]
    s, baseline, bandwidth, fp8_rate = load_slice_and_ceilings(config_path, overrides_json, torch_path)
    runs = [json.loads(line) for line in open(fathom_path) if line.strip()]
    print(f"Device {baseline['device']}, commit {commit}; ceilings measured in the same script: copy bandwidth "
          f"{baseline['copy_bandwidth_gbs']:.0f} GB/s (read+write, 1 GiB), dense FP8 {baseline['fp8_dense_tflops']:.0f} "
          f"TFLOP/s (torch._scaled_mm 8192^3). PyTorch: transformers {baseline['transformers']} "
          f"DeepseekV3ForCausalLM, bf16 weights ({baseline['weight_bytes'] / 1e9:.1f} GB), torch {baseline['torch']}.")
    print()
    print("| measurement | fathom | floor | fathom / floor | PyTorch bf16 | PyTorch / fathom |")
    print("|---|---|---|---|---|---|")
    for run in runs:
        batch, input_len = run["batch_size"], run["input_len"]
        if run.get("run_name", "").startswith("decode"):
            ms = run["median_decode_latency"] * 1e3
            context = input_len + run["output_len"] // 2
            floor_bytes = decode_bytes(s, batch, context)
            floor_ms = floor_bytes / bandwidth * 1e3
            torch_ms = baseline.get(f"decode_bs{batch}_ms")
            graphs = "CUDA graphs" if run["run_name"] == "decode" else "no graphs"
            line = (f"| decode step, batch {batch}, context ~{context}, {graphs} | {ms:.3f} ms | {floor_ms:.3f} ms "
                    f"({floor_bytes / 1e9:.2f} GB read) | {ms / floor_ms:.2f}x |")
            line += f" {torch_ms:.2f} ms | {torch_ms / ms:.1f}x |" if torch_ms else " - | - |"
            print(line)
        else:
            ms = run["prefill_latency"] * 1e3
            flops = prefill_flops(s, input_len)
            floor_ms = max(flops / fp8_rate, prefill_bytes(s, input_len) / bandwidth) * 1e3
            torch_ms = baseline.get(f"prefill_{input_len}_ms")
            tokens_per_s = input_len / (ms * 1e-3)
            line = (f"| prefill {input_len} tokens (batch 1) | {ms:.2f} ms ({tokens_per_s:,.0f} tok/s) | "
                    f"{floor_ms:.2f} ms ({flops / 1e12:.2f} TFLOP) | {ms / floor_ms:.2f}x |")
            line += f" {torch_ms:.2f} ms | {torch_ms / ms:.1f}x |" if torch_ms else " - | - |"
            print(line)


if __name__ == "__main__":
    main()
