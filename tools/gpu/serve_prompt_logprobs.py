"""Prompt logprobs of a running `fathom serve`: for random prompts P, greedy tokens T (/generate), then P + T scored
from P's end (logprob_start_len) twice (the second time its prefix is cached, yet the scored rows must run again),
against the logprob each token of T gets as the first token generated after its own prefix (the prompt's last row,
prefill form like the scored rows); and the lm-evaluation-harness form (/v1/completions with token-id prompts, echo,
logprobs 1, max_tokens 1). Prints the largest differences. Exits 1 on a wrong shape or id, and with --exact (a server
run with --enable-deterministic-inference, where a prompt row's bits do not depend on chunking or the cache) on any
difference. Without --exact the values are reported only: the default mode's kernels round by token count, which the
small models' near-tied expert routes can amplify. Standard library only.

usage: python3 serve_prompt_logprobs.py PORT VOCAB [--exact]
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


def first_token_logprob(port, ids):
    result = post(port, "/generate", {"input_ids": ids, "return_logprob": True, "top_logprobs_num": 1,
                                      "sampling_params": {"temperature": 0, "max_new_tokens": 1}})
    return result["output_ids"][0], result["meta_info"]["output_token_logprobs"][0][0]


def main():
    port, vocab = int(sys.argv[1]), int(sys.argv[2])
    exact = "--exact" in sys.argv[3:]
    rng = random.Random(5)
    failures, worst_first, worst_repeat = 0, 0.0, 0.0
    for case in range(12):
        prompt = [rng.randrange(3, vocab) for _ in range(rng.randrange(2, 300))]
        tokens = post(port, "/generate", {"input_ids": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": 4,
                                                                                  "ignore_eos": True}})["output_ids"]
        body = {"input_ids": prompt + tokens, "return_logprob": True, "top_logprobs_num": 1,
                "logprob_start_len": len(prompt), "sampling_params": {"temperature": 0, "max_new_tokens": 1}}
        scored = [post(port, "/generate", body)["meta_info"] for _ in range(2)]
        rows = scored[0]["input_token_logprobs"]
        if [entry[1] for entry in rows] != tokens or len(scored[0]["input_top_logprobs"]) != len(tokens):
            print(f"case {case}: scored ids {[entry[1] for entry in rows]} != the tokens {tokens}")
            failures += 1
            continue
        firsts = [first_token_logprob(port, prompt + tokens[:i]) for i in range(len(tokens))]
        worst_first = max(worst_first, *(abs(row[0] - first[1]) for row, first in zip(rows, firsts)))
        worst_repeat = max(worst_repeat, *(abs(a[0] - b[0]) for a, b in zip(rows, scored[1]["input_token_logprobs"])))
        if exact and ([row[0] for row in rows] != [first[1] for first in firsts] or
                      scored[1]["input_token_logprobs"] != rows):
            print(f"case {case}: scored {[row[0] for row in rows]}, as first tokens {[first[1] for first in firsts]}")
            failures += 1
        completion = post(port, "/v1/completions", {"prompt": [prompt + tokens[:1]], "max_tokens": 1, "logprobs": 1,
                                                    "echo": True, "temperature": 0})
        logprobs = completion["choices"][0]["logprobs"]
        if (len(logprobs["tokens"]) != len(prompt) + 2 or logprobs["token_logprobs"][0] is not None
                or logprobs["top_logprobs"][0] is not None
                or not all(isinstance(value, float) and value <= 0 for value in logprobs["token_logprobs"][1:])):
            print(f"case {case}: echo logprobs of the wrong shape: {json.dumps(logprobs['token_logprobs'][:3])}")
            failures += 1
    print(f"prompt logprobs{' (exact)' if exact else ''}: largest difference from the same tokens as first tokens "
          f"{worst_first:.4g}, between two scorings {worst_repeat:.4g}; {failures} failed cases of 12")
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
