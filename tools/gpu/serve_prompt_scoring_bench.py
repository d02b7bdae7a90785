"""Prompt-scoring throughput of a running `fathom serve` (the loglikelihood requests of lm-evaluation-harness, in
/generate's form: token ids, logprob_start_len 0, top_logprobs_num N, max_new_tokens 1 as lm-evaluation-harness asks, so no tokenizer is needed):
every prompt token but the first is scored. First one
request alone (its logprobs saved to OUT_JSON, to compare servers), then NUM_PROMPTS prompts of PROMPT_LEN random
tokens at CONCURRENCY; prints wall time and scored prompt tokens per second. Exits 1 on a wrong shape. Standard
library only.

usage: python3 serve_prompt_scoring_bench.py PORT VOCAB NUM_PROMPTS PROMPT_LEN CONCURRENCY TOP_N OUT_JSON
"""
import json
import random
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor


def score(port, prompt, top_n):
    body = {"input_ids": prompt, "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": top_n,
            "sampling_params": {"temperature": 0, "max_new_tokens": 1}}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        meta = json.loads(response.read())["meta_info"]
    rows, tops = meta["input_token_logprobs"], meta["input_top_logprobs"]
    values = [row[0] for row in rows]
    if (len(rows) != len(prompt) or values[0] is not None or [row[1] for row in rows] != prompt
            or not all(isinstance(v, float) and v <= 0 for v in values[1:])
            or any(len(top) != top_n for top in tops[1:])):
        raise RuntimeError(f"wrong shape: {len(rows)} logprobs for {len(prompt)} tokens: {rows[:3]}")
    return values, [[entry[:2] for entry in top] for top in tops[1:]]


def main():
    port, vocab, num_prompts, prompt_len, concurrency, top_n = (int(a) for a in sys.argv[1:7])
    out_json = sys.argv[7]
    rng = random.Random(11)
    prompts = [[rng.randrange(vocab) for _ in range(prompt_len)] for _ in range(num_prompts)]
    values, tops = score(port, prompts[0], top_n)
    with open(out_json, "w") as f:
        json.dump({"token_logprobs": values, "top_logprobs": tops}, f)
    start = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda p: score(port, p, top_n), prompts))
    seconds = time.monotonic() - start
    scored = num_prompts * (prompt_len - 1)
    print(f"scored {num_prompts} prompts x {prompt_len} tokens (logprobs {top_n}, concurrency {concurrency}): "
          f"{seconds:.2f} s, {scored / seconds:.0f} scored tokens/s")


if __name__ == "__main__":
    try:
        main()
    except Exception as error:  # noqa: BLE001 - report and fail
        print(f"prompt scoring bench failed: {error}")
        sys.exit(1)
