#!/usr/bin/env python3
"""Tokenizer conformance expectations and reference throughput with Python `tokenizers`.

Twin of make_corpus.mjs (HF's npm binding): both read the stored corpus texts in
tests/tokenizer/data/ and compute the expected ids/decodes, so running this on another machine
cross-checks the stored expectations against a second build of HF tokenizers.

  python3 tools/tokenizer/make_corpus.py check [--data-dir DIR] [--out FILE]
      recompute everything; exit 1 and list the differences if it differs from
      tests/tokenizer/data/corpus_expected.json; --out also writes what was computed
  python3 tools/tokenizer/make_corpus.py bench --file F [--tokenizer DIR] [--runs N] [--per-line]
  python3 tools/tokenizer/make_corpus.py bench-text --out F [--mb N]

DIR defaults to ../shared/data/deepseek-v3 next to the repository.
"""
import os

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "tokenizer" / "data"
DEEPSEEK_TOKENIZERS = {"r1": "tokenizer.json", "v3": "hf-deepseek-v3/tokenizer.json"}


def format_json(value, indent=""):
    """The layout make_corpus.mjs writes: one id list or string per line."""
    inner = indent + " "
    if isinstance(value, list):
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return json.dumps(value, separators=(",", ":"))
        if not value:
            return "[]"
        return "[\n" + ",\n".join(inner + format_json(v, inner) for v in value) + "\n" + indent + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = (inner + json.dumps(k, ensure_ascii=False) + ": " + format_json(v, inner) for k, v in value.items())
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    return json.dumps(value, ensure_ascii=False)


def encode_all(tokenizer, texts, add_special_tokens):
    return [tokenizer.encode(text, add_special_tokens=add_special_tokens).ids for text in texts]


def decode_all(tokenizer, id_lists, skip_special_tokens):
    return [tokenizer.decode(ids, skip_special_tokens=skip_special_tokens) for ids in id_lists]


def compute_expected(data_dir):
    inputs = json.loads((DATA / "corpus_inputs.json").read_text(encoding="utf-8"))
    synthetic = json.loads((DATA / "synthetic_tokenizers.json").read_text(encoding="utf-8"))
    result = {"reference": f"HF tokenizers {tokenizers.__version__} (Python)", "deepseek": {}, "synthetic": {}}
    for name, file in DEEPSEEK_TOKENIZERS.items():
        tokenizer = Tokenizer.from_file(str(Path(data_dir) / file))
        encode = encode_all(tokenizer, inputs["texts"], False)
        mismatches = [i for i, ids in enumerate(encode) if tokenizer.decode(ids, skip_special_tokens=False) != inputs["texts"][i]]
        result["deepseek"][name] = {
            "encode": encode,
            "roundtrip_mismatches": mismatches,
            "decode": decode_all(tokenizer, inputs["decode_ids"], False),
            "decode_skip_special": decode_all(tokenizer, inputs["decode_ids"], True),
        }
    for entry in synthetic["tokenizers"]:
        tokenizer = Tokenizer.from_str(json.dumps(entry["tokenizer"]))
        result["synthetic"][entry["name"]] = {
            "encode": encode_all(tokenizer, entry["texts"], False),
            "encode_special": encode_all(tokenizer, entry["texts"], True),
            "decode": decode_all(tokenizer, entry["decode_ids"], False),
            "decode_skip_special": decode_all(tokenizer, entry["decode_ids"], True),
        }
    r1, v3 = result["deepseek"]["r1"], result["deepseek"]["v3"]
    v3_encode = v3.pop("encode")
    # Same compaction as make_corpus.mjs: V3 stores only the encodings that differ from R1.
    reordered = {"encode_where_different_from_r1": {str(i): ids for i, ids in enumerate(v3_encode) if ids != r1["encode"][i]}}
    result["deepseek"]["v3"] = {**v3, **reordered}
    return result


def describe_differences(stored, fresh, path="", out=None, limit=40):
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    if isinstance(stored, dict) and isinstance(fresh, dict):
        for key in sorted(set(stored) | set(fresh)):
            if key not in stored or key not in fresh:
                out.append(f"{path}/{key}: only in {'stored' if key in stored else 'computed'}")
            else:
                describe_differences(stored[key], fresh[key], f"{path}/{key}", out, limit)
    elif isinstance(stored, list) and isinstance(fresh, list) and not all(isinstance(v, int) for v in stored + fresh):
        if len(stored) != len(fresh):
            out.append(f"{path}: {len(stored)} stored entries vs {len(fresh)} computed")
        for i, (a, b) in enumerate(zip(stored, fresh)):
            describe_differences(a, b, f"{path}[{i}]", out, limit)
    elif stored != fresh:
        out.append(f"{path}: stored {json.dumps(stored, ensure_ascii=False)[:200]} computed {json.dumps(fresh, ensure_ascii=False)[:200]}")
    return out


def check(args):
    fresh = compute_expected(args.data_dir)
    if args.out:
        Path(args.out).write_text(format_json(fresh) + "\n", encoding="utf-8")
    stored = json.loads((DATA / "corpus_expected.json").read_text(encoding="utf-8"))
    differences = describe_differences({**stored, "reference": ""}, {**fresh, "reference": ""})
    cases = len(fresh["deepseek"]["r1"]["encode"])
    if differences:
        print(f"MISMATCH: {fresh['reference']} differs from the stored expectations ({stored['reference']}):")
        print("\n".join(differences))
        return 1
    print(f"OK: {fresh['reference']} reproduces all stored expectations "
          f"({cases} texts x 2 DeepSeek tokenizers, {len(fresh['synthetic'])} synthetic tokenizers)")
    return 0


def bench(args):
    tokenizer = Tokenizer.from_file(str(Path(args.tokenizer) / "tokenizer.json"))
    with open(args.file, encoding="utf-8", newline="") as file:  # keep CR bytes exactly as node/C++ see them
        text = file.read()
    size_mb = len(text.encode("utf-8")) / 1e6
    lines = text.split("\n")
    tokenizer.encode("warm up", add_special_tokens=False)
    wall, cpu = [], []
    token_count = 0
    for _ in range(args.runs):
        wall_start, cpu_start = time.perf_counter(), time.process_time()
        if args.per_line:
            # Sequential with TOKENIZERS_PARALLELISM=false: one thread, no per-call Python overhead.
            token_count = sum(len(e.ids) for e in tokenizer.encode_batch(lines, add_special_tokens=False))
        else:
            token_count = len(tokenizer.encode(text, add_special_tokens=False).ids)
        cpu.append(time.process_time() - cpu_start)
        wall.append(time.perf_counter() - wall_start)
    print(f"hf-tokenizers-python {tokenizers.__version__}: {size_mb / statistics.median(wall):.2f} MB/s wall, "
          f"{size_mb / statistics.median(cpu):.2f} MB/s cpu (median of {args.runs}, {len(text.encode('utf-8'))} bytes, "
          f"{token_count} tokens, {'per line' if args.per_line else 'whole file'})")
    return 0


def make_random(seed):
    """sfc32, bit-identical to makeRandom in make_corpus.mjs."""
    state = [0x9E3779B9, 0x243F6A88, 0xB7E15162, seed & 0xFFFFFFFF]

    def random():
        a, b, c, d = state
        t = (((a + b) & 0xFFFFFFFF) + d) & 0xFFFFFFFF
        d = (d + 1) & 0xFFFFFFFF
        a = b ^ (b >> 9)
        b = (c + (c << 3)) & 0xFFFFFFFF
        c = ((c << 21) | (c >> 11)) & 0xFFFFFFFF
        c = (c + t) & 0xFFFFFFFF
        state[:] = [a, b, c, d]
        return t / 4294967296

    return random


def bench_text(args):
    inputs = json.loads((DATA / "corpus_inputs.json").read_text(encoding="utf-8"))
    random = make_random(7)
    sources = inputs["texts"][: inputs["natural_text_count"]]
    separators = [" ", "\n", "\n\n", " "]
    parts, size = [], 0
    while size < args.mb * 1e6:
        piece = sources[int(random() * len(sources))] + separators[int(random() * len(separators))]
        parts.append(piece)
        size += len(piece.encode("utf-8"))
    Path(args.out).write_text("".join(parts), encoding="utf-8", newline="")
    print(f"wrote {size} bytes to {args.out}")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["check", "bench", "bench-text"])
    default_data = REPO.parent / "shared" / "data" / "deepseek-v3"
    parser.add_argument("--data-dir", default=str(default_data))
    parser.add_argument("--tokenizer", default=str(default_data))
    parser.add_argument("--out")
    parser.add_argument("--file")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--per-line", action="store_true")
    parser.add_argument("--mb", type=float, default=4)
    args = parser.parse_args()
    if args.command == "check":
        return check(args)
    if args.command == "bench":
        if not args.file:
            parser.error("bench needs --file")
        return bench(args)
    if not args.out:
        parser.error("bench-text needs --out")
    return bench_text(args)


if __name__ == "__main__":
    sys.exit(main())
