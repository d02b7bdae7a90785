"""Greedy outputs of a running `fathom serve` (/generate with input_ids, temperature 0, ignore_eos) in three ways:
one request at a time, all at once (one decode batch), and streamed one at a time; then second turns (a prompt, its
greedy answer and a few more ids) with the first turn in the prefix cache and again after /flush_cache, with their
logprobs. Writes them to a JSON file and prints how many agree. Standard library only (the GPU machine has no extra
packages).

usage: python3 serve_greedy.py PORT VOCAB OUT_JSON [--expect-deterministic]
  --expect-deterministic: exit 1 unless every way gives the same outputs and the second turns the same logprobs bit
  for bit (a server run with --enable-deterministic-inference)
"""
import concurrent.futures
import json
import random
import sys
import time
import urllib.error
import urllib.request


def generate(port, ids, stream):
    body = {"input_ids": ids, "stream": stream,
            "sampling_params": {"temperature": 0, "max_new_tokens": 16, "ignore_eos": True}}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        if not stream:
            return json.loads(response.read())["output_ids"]
        last = None
        for raw in response:
            line = raw.decode().strip()
            if line.startswith("data: ") and line != "data: [DONE]":
                last = json.loads(line[len("data: "):])
        return last["output_ids"]


def generate_with_logprobs(port, ids):
    body = {"input_ids": ids, "return_logprob": True,
            "sampling_params": {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        result = json.loads(response.read())
    meta = result["meta_info"]
    return {"output_ids": result["output_ids"], "cached_tokens": meta["cached_tokens"],
            "logprobs": [entry[0] for entry in meta["output_token_logprobs"]]}


def flush_cache(port):
    for attempt in range(100):  # refused (400) while the last request is still being released
        try:
            request = urllib.request.Request(f"http://127.0.0.1:{port}/flush_cache", data=b"", method="POST")
            with urllib.request.urlopen(request, timeout=300) as response:
                response.read()
            return
        except urllib.error.HTTPError as error:
            if error.code != 400 or attempt == 99:
                raise
            time.sleep(0.1)


def main():
    port, vocab, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    expect_deterministic = "--expect-deterministic" in sys.argv[4:]
    rng = random.Random(7)
    prompts = [[rng.randrange(0, vocab) for _ in range(rng.randrange(20, 200))] for _ in range(24)]
    sequential = [generate(port, ids, False) for ids in prompts]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        concurrent_outputs = list(pool.map(lambda ids: generate(port, ids, False), prompts))
    streamed = [generate(port, ids, True) for ids in prompts]
    # Second turns: the first turn (prompt and answer) is cached by the runs above; then the same from a cold cache.
    second_turns = [prompts[i] + sequential[i] + [rng.randrange(0, vocab) for _ in range(3)] for i in range(8)]
    warm = [generate_with_logprobs(port, ids) for ids in second_turns]
    flush_cache(port)
    cold = [generate_with_logprobs(port, ids) for ids in second_turns]
    result = {"sequential": sequential, "concurrent": concurrent_outputs, "streamed": streamed,
              "second_turns_warm": warm, "second_turns_cold": cold}
    json.dump(result, open(out_path, "w"))
    same = lambda a, b: sum(x == y for x, y in zip(a, b))
    same_logprobs = sum(w["logprobs"] == c["logprobs"] for w, c in zip(warm, cold))
    print(f"port {port}: sequential == streamed for {same(sequential, streamed)}/{len(prompts)} prompts, "
          f"sequential == concurrent for {same(sequential, concurrent_outputs)}/{len(prompts)}; second turns with "
          f"the first cached == cold: logprobs {same_logprobs}/{len(warm)} bit for bit, tokens "
          f"{same([w['output_ids'] for w in warm], [c['output_ids'] for c in cold])}/{len(warm)} (cached tokens "
          f"{[w['cached_tokens'] for w in warm]} warm, {[c['cached_tokens'] for c in cold]} cold)")
    if expect_deterministic and (same(sequential, streamed) != len(prompts) or
                                 same(sequential, concurrent_outputs) != len(prompts) or same_logprobs != len(warm)):
        print("not deterministic")
        sys.exit(1)


if __name__ == "__main__":
    main()
