"""Greedy outputs of a running `fathom serve` (/generate with input_ids, temperature 0, ignore_eos) in three ways:
one request at a time, all at once (one decode batch), and streamed one at a time. Writes them to a JSON file and
prints how many agree. Standard library only (the GPU machine has no extra packages).

usage: python3 serve_greedy.py PORT VOCAB OUT_JSON
"""
import concurrent.futures
import json
import random
import sys
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


def main():
    port, vocab, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    rng = random.Random(7)
    prompts = [[rng.randrange(0, vocab) for _ in range(rng.randrange(20, 200))] for _ in range(24)]
    sequential = [generate(port, ids, False) for ids in prompts]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        concurrent_outputs = list(pool.map(lambda ids: generate(port, ids, False), prompts))
    streamed = [generate(port, ids, True) for ids in prompts]
    result = {"sequential": sequential, "concurrent": concurrent_outputs, "streamed": streamed}
    json.dump(result, open(out_path, "w"))
    same = lambda a, b: sum(x == y for x, y in zip(a, b))
    print(f"port {port}: sequential == streamed for {same(sequential, streamed)}/{len(prompts)} prompts, "
          f"sequential == concurrent for {same(sequential, concurrent_outputs)}/{len(prompts)}")


if __name__ == "__main__":
    main()
