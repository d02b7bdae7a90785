"""fathom-nano's goldens for fathom's tests: golden/golden.json (the prompts, their ids and transformers' greedy
continuations) and golden/logits.safetensors (logit and MTP logit rows of two sequences)."""
import json
import os

import numpy as np

from nano_common import log  # first: it puts tools/fixtures on sys.path
import st_io
from nano_eval import fixed_windows
from nano_model import main_fn_of, mtp_forward

CODE_PROMPTS = [
    ("fibonacci", "def fibonacci(n):"),
    ("numpy_def", "import numpy as np\n\n\ndef "),
    ("stack_class", "class Stack:\n    def __init__(self):\n"),
    ("quicksort", "def quicksort(arr):\n    "),
    ("json_keys", "# Read a JSON file and print its keys\nimport json\n"),
    ("for_range", "for i in range(10):\n"),
]
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get current temperature for a given location.",
    "parameters": {"type": "object",
                   "properties": {"location": {"type": "string",
                                               "description": "City and country e.g. Bogotá, Colombia"}},
                   "required": ["location"], "additionalProperties": False}, "strict": True}}
CALC_TOOL = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate a math expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
CHAT_PROMPTS = [
    ("chat_sum", [{"role": "user", "content": "Write a Python function that returns the sum of a list."}], None),
    ("chat_hello", [{"role": "user", "content": "Hello! Who are you?"}], None),
    ("chat_think", [{"role": "user", "content": "What is 12 + 7?"}], None),
    ("tool_call_weather", [{"role": "user", "content": "What's the weather like in Paris today?"}], [WEATHER_TOOL]),
    ("tool_call_calc", [{"role": "system", "content": "You are a helpful assistant."},
                        {"role": "user", "content": "What is 37 * 12?"}], [WEATHER_TOOL, CALC_TOOL]),
    ("tool_result_weather", [
        {"role": "user", "content": "What's the weather like in Paris today?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"location\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 18, \"condition\": \"sunny\"}"}],
     [WEATHER_TOOL]),
]


def greedy(torch, model, ids, max_new, eos=1):
    """Full-recompute greedy (no KV cache), as the fixtures' goldens: tokens and top-1 margins."""
    cur, toks, margins = list(ids), [], []
    with torch.no_grad():
        for _ in range(max_new):
            last = model(input_ids=torch.tensor([cur]), use_cache=False).logits[0, -1].float()
            top = torch.topk(last, 2)
            margins.append(float(top.values[0] - top.values[1]))
            t = int(top.indices[0])
            toks.append(t)
            cur.append(t)
            if t == eos:
                break
    return toks, margins


def make_goldens(torch, tok, hf_tok, model, mtp, model_dir, held_code, chat_render):
    """golden/golden.json (prompts, transformers greedy) and golden/logits.safetensors (logit rows)."""
    gdir = os.path.join(model_dir, "golden")
    os.makedirs(gdir, exist_ok=True)
    prompts = []
    for name, text in CODE_PROMPTS:
        ids = hf_tok(text)["input_ids"]
        prompts.append(dict(name=name, kind="completion", prompt=text, ids=ids, max_new_tokens=32))
    for name, messages, tools in CHAT_PROMPTS:
        text = hf_tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
        mine = chat_render(messages, tools, add_generation_prompt=True)
        if text != mine:
            log(f"WARNING {name}: transformers' chat render differs from the Jinja2 one:\n{text!r}\n{mine!r}")
        ids = hf_tok(text, add_special_tokens=False)["input_ids"]
        prompts.append(dict(name=name, kind="chat", messages=messages, tools=tools, prompt=text, ids=ids,
                            max_new_tokens=64))
    min_margin = 1e9
    for p in prompts:
        raw = tok.encode(p["prompt"], add_special_tokens=(p["kind"] == "completion")).ids
        if raw != p["ids"]:
            raise RuntimeError(f"{p['name']}: tokenizers ids {raw[:20]} != transformers ids {p['ids'][:20]}")
        toks, margins = greedy(torch, model, p["ids"], p["max_new_tokens"])
        # Cut the golden before any near-tie (fp32 rounding could flip it); keep the tokens before it.
        keep = len(toks)
        for i, m in enumerate(margins):
            if m < 2e-3:
                keep = i
                break
        p.update(greedy=toks[:keep], greedy_full=toks, step_margins=[round(m, 5) for m in margins],
                 truncated_at_near_tie=keep < len(toks), completion=tok.decode(toks, skip_special_tokens=False))
        min_margin = min([min_margin] + margins[:keep])
        log(f"  golden {p['name']}: {len(toks)} tokens (kept {keep}), min margin {min(margins):.4f}: "
            f"{p['completion'][:400]!r}")
    # Logit rows for two sequences: held-out code and a chat render.
    seqs = [fixed_windows(held_code, 1, 5, length=40)[0].tolist(),
            tok.encode(chat_render(CHAT_PROMPTS[-1][1]
                                   + [{"role": "assistant", "content": "It is 18°C and sunny in Paris."}],
                                   CHAT_PROMPTS[-1][2]), add_special_tokens=False).ids[-40:]]
    tensors, rows_info = {}, []
    with torch.no_grad():
        for i, ids in enumerate(seqs):
            x = torch.tensor([ids])
            hidden, logits = main_fn_of(model)(x)
            ml = mtp_forward(torch, model, mtp, x, hidden)[0].float().numpy()
            logits = logits[0].float().numpy()
            T = len(ids)
            rows = sorted(set(np.linspace(0, T - 1, 6).round().astype(int).tolist()))
            mrows = sorted(set(np.linspace(0, T - 2, 6).round().astype(int).tolist()))
            tensors[f"seq{i}.ids"] = ("I64", np.asarray(ids, dtype=np.int64))
            tensors[f"seq{i}.rows"] = ("I64", np.asarray(rows, dtype=np.int64))
            tensors[f"seq{i}.logits"] = ("F32", np.ascontiguousarray(logits[rows]))
            tensors[f"seq{i}.mtp_rows"] = ("I64", np.asarray(mrows, dtype=np.int64))
            tensors[f"seq{i}.mtp_logits"] = ("F32", np.ascontiguousarray(ml[mrows]))
            rows_info.append(dict(length=T, rows=rows, mtp_rows=mrows, text=tok.decode(ids, skip_special_tokens=False)))
    st_io.st_write(os.path.join(gdir, "logits.safetensors"), tensors,
                   metadata={"format": "pt", "source": "transformers DeepseekV3ForCausalLM fp32, dequantised weights"})
    import transformers
    golden = dict(
        generator="tools/train/train_nano.py",
        reference=("transformers DeepseekV3ForCausalLM on CPU, float32, eager attention and experts, on the "
                   "dequantised checkpoint; greedy by full recompute (no KV cache), stopping after eos; tokens "
                   "after a step whose top-1 margin is < 2e-3 are left out of `greedy`"),
        versions={"torch": torch.__version__, "transformers": transformers.__version__},
        min_kept_greedy_margin=min_margin, prompts=prompts, logits=rows_info)
    with open(os.path.join(gdir, "golden.json"), "w", encoding="utf-8") as fh:
        json.dump(golden, fh, ensure_ascii=False, indent=1)
        fh.write("\n")
    return prompts
