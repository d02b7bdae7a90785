"""PyTorch baseline for the model-level table: transformers' DeepseekV3ForCausalLM with bf16 weights at the V3-slice
dimensions (random init on the GPU), timed with CUDA events (median). Also measures the ceilings the floors use:
device-to-device copy bandwidth and dense FP8 (torch._scaled_mm) throughput.

usage: python3 torch_baseline.py CONFIG_JSON OVERRIDES_JSON OUT_JSON
       python3 torch_baseline.py --ceilings-only OUT_JSON   (the ceilings alone, for moe_layer_table.py)
"""
import json
import statistics
import sys
import time

import torch


def cuda_median_ms(fn, repeats):
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_bandwidth_gbs():
    """Read + write bytes of a 1 GiB device-to-device copy per second (the convention of bench/RESULTS.md)."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    ms = cuda_median_ms(lambda: dst.copy_(src), 20)
    del src, dst
    return 2 * (1 << 30) / (ms * 1e-3) / 1e9


def fp8_tflops():
    n = 8192
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.ones((), device="cuda")
    run = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    run()
    ms = cuda_median_ms(run, 20)
    return 2 * n ** 3 / (ms * 1e-3) / 1e12


def main():
    result = {"copy_bandwidth_gbs": copy_bandwidth_gbs(), "fp8_dense_tflops": fp8_tflops(),
              "device": torch.cuda.get_device_name(), "torch": torch.__version__}
    if sys.argv[1] == "--ceilings-only":
        json.dump(result, open(sys.argv[2], "w"), indent=1)
        return
    config_path, overrides_json, out_path = sys.argv[1:4]
    import transformers
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    result["transformers"] = transformers.__version__
    raw = json.load(open(config_path))
    raw.update(json.loads(overrides_json))
    raw.pop("quantization_config", None)
    config = DeepseekV3Config(**raw)
    torch.manual_seed(0)
    begin = time.time()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = DeepseekV3ForCausalLM(config)
    model.eval()
    torch.cuda.synchronize()
    result["init_s"] = time.time() - begin
    result["weight_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
    result["experts_implementation"] = str(getattr(model.config, "_experts_implementation", None) or
                                           getattr(model.config, "experts_implementation", None))
    vocab = config.vocab_size

    with torch.inference_mode():
        for length in (256, 4096):
            ids = torch.randint(0, vocab, (1, length), device="cuda")
            run = lambda: model(input_ids=ids, use_cache=True, logits_to_keep=1)
            run()
            ms = cuda_median_ms(run, 3)
            result[f"prefill_{length}_ms"] = ms
        for batch in (1, 32):
            ids = torch.randint(0, vocab, (batch, 256), device="cuda")
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
            next_ids = out.logits[:, -1:].argmax(-1)
            steps = []
            for _ in range(12):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                out = model(input_ids=next_ids, past_key_values=cache, use_cache=True)
                end.record()
                torch.cuda.synchronize()
                steps.append(start.elapsed_time(end))
                cache = out.past_key_values
                next_ids = out.logits[:, -1:].argmax(-1)
            result[f"decode_bs{batch}_ms"] = statistics.median(steps[2:])
    json.dump(result, open(out_path, "w"), indent=1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
