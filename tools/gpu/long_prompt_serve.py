#!/usr/bin/env python3
"""Long prompts against a running `fathom serve` (token ids, /generate): the case the prefill's key windows exist
for (a prefix longer than one kv_b expansion beside a KV cache sized to the memory fraction).

Sends, one at a time and greedy: a prompt of LENGTH random token ids; the same prompt again (its prefix cached, so
the last tokens attend to a cached prefix of LENGTH keys through the windows); a prompt sharing all but the last
4096 tokens with the first (a cached prefix, then new chunks that attend to it). Prints each request's wall time
and output, whether the repeat gave the first's tokens, and fails (exit 1) if a request fails or the server is
unhealthy afterwards. --expect-deterministic also fails when the repeat's tokens differ (deterministic inference:
the windows sit at fixed positions, so a cache hit must not change a token).

Usage: long_prompt_serve.py PORT LENGTH OUT_JSON [--expect-deterministic]
"""
import json
import random
import sys
import time
import urllib.request


def post(port, path, body, timeout_s=900):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return json.loads(response.read().decode())


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=120) as response:
        return response.read().decode()


def generate(port, ids, max_new_tokens=16):
    start = time.time()
    reply = post(port, "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": max_new_tokens,
                                                                            "temperature": 0.0}})
    return reply, time.time() - start


def main():
    port, length, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    expect_deterministic = "--expect-deterministic" in sys.argv[4:]
    info = json.loads(get(port, "/get_server_info"))
    print("server: max_context_length", info.get("max_context_length"), "engine", json.dumps(info.get("engine"))[:600])
    rng = random.Random(length)
    prompt = [rng.randrange(100, 120000) for _ in range(length)]
    tail = [rng.randrange(100, 120000) for _ in range(4096)]
    variant = prompt[:length - 4096] + tail
    results, status = {}, 0
    for name, ids in (("first", prompt), ("repeat", prompt), ("shared_prefix", variant)):
        try:
            reply, seconds = generate(port, ids)
        except Exception as error:  # the request failed: report and go on, the server must keep serving
            print(f"{name}: FAILED {error}")
            status = 1
            continue
        meta = reply.get("meta_info", {})
        tokens = reply.get("output_ids", [])
        results[name] = {"seconds": seconds, "output_ids": tokens, "meta_info": meta}
        print(f"{name}: {len(ids)} prompt tokens, {seconds:.2f} s, cached {meta.get('cached_tokens')}, "
              f"finish {meta.get('finish_reason')}, output {tokens}")
    if "first" in results and "repeat" in results:
        same = results["first"]["output_ids"] == results["repeat"]["output_ids"]
        print(f"repeat (prefix cached) == first: {same}")
        if expect_deterministic and not same:
            status = 1
    try:
        get(port, "/health_generate")
        print("healthy after the long prompts")
    except Exception as error:
        print(f"unhealthy after the long prompts: {error}")
        status = 1
    json.dump(results, open(out_path, "w"))
    return status


if __name__ == "__main__":
    sys.exit(main())
