"""Prompt logprobs of a running `fathom serve` against the logprobs of generated tokens: for random prompts, greedy
tokens with their logprobs (/generate), then the prompt plus those tokens scored from the prompt's end
(logprob_start_len) twice (the second time its prefix is cached, yet the scored rows must run again); and the
lm-evaluation-harness form (/v1/completions with token-id prompts, echo, logprobs 1, max_tokens 1). Prints the largest
differences; exits 1 when a shape is wrong or a difference exceeds the tolerance (decode and prefill forms round
differently on the GPU). Standard library only.

usage: python3 serve_prompt_logprobs.py PORT VOCAB [TOLERANCE]
"""
import json
import random
import sys
import urllib.request


def post(port, path, body):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())


def main():
    port, vocab = int(sys.argv[1]), int(sys.argv[2])
    tolerance = float(sys.argv[3]) if len(sys.argv) > 3 else 0.1
    rng = random.Random(5)
    failures, worst_generated, worst_repeat = 0, 0.0, 0.0
    for case in range(16):
        prompt = [rng.randrange(3, vocab) for _ in range(rng.randrange(2, 300))]
        generated = post(port, "/generate", {"input_ids": prompt, "return_logprob": True, "top_logprobs_num": 1,
                                             "sampling_params": {"temperature": 0, "max_new_tokens": 4,
                                                                 "ignore_eos": True}})
        tokens = generated["output_ids"]
        expected = [entry[0] for entry in generated["meta_info"]["output_token_logprobs"]]
        body = {"input_ids": prompt + tokens, "return_logprob": True, "top_logprobs_num": 1,
                "logprob_start_len": len(prompt), "sampling_params": {"temperature": 0, "max_new_tokens": 1}}
        scored = [post(port, "/generate", body)["meta_info"]["input_token_logprobs"] for _ in range(2)]
        if [entry[1] for entry in scored[0]] != tokens:
            print(f"case {case}: scored ids {[entry[1] for entry in scored[0]]} != generated {tokens}")
            failures += 1
            continue
        worst_generated = max(worst_generated, *(abs(a[0] - b) for a, b in zip(scored[0], expected)))
        worst_repeat = max(worst_repeat, *(abs(a[0] - b[0]) for a, b in zip(scored[0], scored[1])))
        completion = post(port, "/v1/completions", {"prompt": [prompt + tokens[:1]], "max_tokens": 1, "logprobs": 1,
                                                    "echo": True, "temperature": 0})
        logprobs = completion["choices"][0]["logprobs"]
        if (len(logprobs["tokens"]) != len(prompt) + 2 or logprobs["token_logprobs"][0] is not None
                or abs(logprobs["token_logprobs"][len(prompt)] - expected[0]) > tolerance):
            print(f"case {case}: echo logprobs {json.dumps(logprobs['token_logprobs'][-3:])} against {expected[0]}")
            failures += 1
    print(f"prompt logprobs: largest difference from the generated tokens' {worst_generated:.4g}, "
          f"between two scorings {worst_repeat:.4g} (tolerance {tolerance}); {failures} failed cases of 16")
    if failures or worst_generated > tolerance or worst_repeat > tolerance:
        sys.exit(1)


if __name__ == "__main__":
    main()
