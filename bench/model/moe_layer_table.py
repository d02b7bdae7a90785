"""The MoE-layer table of bench/RESULTS.md: one MoE layer of the V3 slice (router, routed experts, shared expert,
combine and the residual norm after it), timed by the CUDA backend's own spans ("moe", CUDA events around the layer's
kernels, eager launches) in `fathom bench-one-batch --profile` traces, against two floors measured in the same
script: the bytes of the experts the tokens touch / copy bandwidth, and the layer's FLOPs / dense FP8 throughput.

usage: python3 moe_layer_table.py CONFIG_JSON OVERRIDES_JSON CEILINGS_JSON TRACE:PREFILL_TOKENS:DECODE_TOKENS ...

Each trace holds one measured bench-one-batch pass: a prefill of PREFILL_TOKENS tokens in one forward (its first
moe_layers "moe" spans), then decode steps of DECODE_TOKENS tokens (the rest). CEILINGS_JSON is
`torch_baseline.py --ceilings-only` output.
"""
import json
import statistics
import sys

from model_table import expected_distinct_experts, load_slice_and_ceilings


def moe_layer_floors(s, tokens):
    """(bytes, FLOPs) of one MoE layer over `tokens` tokens: FP8 experts touched + shared, the bf16 router weight,
    the bf16 hidden rows in and out; 2 FLOPs per multiply-add of every selected expert, the shared one and the router."""
    touched = expected_distinct_experts(s["experts"], s["top_k"], tokens)
    weight_bytes = (touched * s["expert"]) + s["shared"] + 2 * s["router"]
    activation_bytes = 2 * 2 * tokens * s["h"]
    flops = 2 * tokens * ((s["top_k"] * s["expert"]) + s["shared"] + s["router"])
    return weight_bytes + activation_bytes, flops, touched


def moe_spans_us(path, moe_layers, prefill_tokens):
    """The "moe" span durations of a trace: (prefill spans, decode spans), each in trace order."""
    events = json.load(open(path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    spans = [e for e in events if e.get("name") == "moe" and e.get("ph") == "X"]
    spans.sort(key=lambda e: e["ts"])
    durations = [float(e["dur"]) for e in spans]
    if len(durations) < moe_layers or (len(durations) - moe_layers) % moe_layers:
        raise SystemExit(f"{path}: {len(durations)} moe spans is not one prefill forward of {prefill_tokens} tokens "
                         f"plus whole decode steps of {moe_layers} MoE layers (prefill in several chunks?)")
    return durations[:moe_layers], durations[moe_layers:]


def main():
    if len(sys.argv) < 5:
        raise SystemExit(__doc__)
    s, ceilings, bandwidth, fp8_rate = load_slice_and_ceilings(*sys.argv[1:4])
    rows = {}  # tokens -> (median us, spans, form)
    for spec in sys.argv[4:]:
        path, prefill_tokens, decode_tokens = spec.rsplit(":", 2)
        prefill, decode = moe_spans_us(path, s["moe_layers"], int(prefill_tokens))
        rows.setdefault(int(prefill_tokens), (statistics.median(prefill), len(prefill), "prefill"))
        if decode:
            rows.setdefault(int(decode_tokens), (statistics.median(decode), len(decode), "decode"))
    print(f"Device {ceilings['device']}; ceilings measured in the same script: copy {ceilings['copy_bandwidth_gbs']:.0f} "
          f"GB/s (read+write, 1 GiB), dense FP8 {ceilings['fp8_dense_tflops']:.0f} TFLOP/s (torch._scaled_mm 8192^3). "
          f"One MoE layer: {s['experts']} experts, top-{s['top_k']}, {s['shared'] // s['expert']} shared; "
          f"median of the layer's spans (eager launches with events between layers).")
    print()
    print("| tokens | form | MoE layer | spans | experts touched (expected) | bytes floor | time / bytes floor | "
          "FLOP floor | time / FLOP floor |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for tokens in sorted(rows):
        us, count, form = rows[tokens]
        layer_bytes, flops, touched = moe_layer_floors(s, tokens)
        bytes_us = layer_bytes / bandwidth * 1e6
        flop_us = flops / fp8_rate * 1e6
        print(f"| {tokens} | {form} | {us:.1f} us | {count} | {touched:.1f} | {bytes_us:.1f} us "
              f"({layer_bytes / 1e9:.2f} GB) | {us / bytes_us:.2f}x | {flop_us:.1f} us ({flops / 1e12:.3f} TFLOP) | "
              f"{us / flop_us:.2f}x |")


if __name__ == "__main__":
    main()
