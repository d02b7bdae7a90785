#!/usr/bin/env python3
"""Train fathom-nano, the repository's embedded default model, from scratch on one GPU, and export it in the
official DeepSeek-V3 checkpoint layout with evaluations and goldens for fathom's tests.  See README.md here.

    python3 tools/train/train_nano.py --out OUT [--deadline 570] [--smoke]

Stages (all in one process, within --deadline seconds): Python sources of the installed packages (plus
synthetic chat, tools/train/chat_data.py) -> byte-level BPE tokenizer with DeepSeek-V3's pre-tokenizer ->
DeepseekV3ForCausalLM (transformers) + one MTP module trained jointly (loss = main + 0.3 * MTP), bf16 autocast,
AdamW, cosine schedule -> FP8 e4m3 / 128x128 block export (tools/fixtures code) -> held-out losses and MTP
agreement of the dequantised export (transformers, fp32), transformers greedy goldens and logits.
Writes OUT/fathom-nano.tar (the model folder), OUT/metrics.json, OUT/master.safetensors (bf16 training
weights, for a re-export with --resume), OUT/log.txt.
"""
import argparse
import hashlib
import io
import json
import math
import os
import random
import re
import sys
import tarfile
import tempfile
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools", "fixtures"))
sys.path.insert(0, HERE)
import chat_data  # noqa: E402
import make_fixtures  # noqa: E402
import st_io  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

T0 = time.time()
LOG = []


def log(msg):
    line = f"[{time.time() - T0:7.1f}s] {msg}"
    print(line, flush=True)
    LOG.append(line)


VOCAB = 4096
SEQ = 512
MTP_WEIGHT = 0.3
CHAT_FRACTION = 0.10
BIAS_UPDATE = 1e-3  # DeepSeek-V3's auxiliary-loss-free balancing: bias += gamma * sign(mean load - load)
ARCH = dict(
    name="fathom-nano", seed=0, shards=1,
    hidden_size=256, vocab_size=VOCAB, intermediate_size=768, moe_intermediate_size=128,
    num_attention_heads=4, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64,
    q_lora_rank=128, kv_lora_rank=128, num_hidden_layers=4, first_k_dense_replace=1,
    n_routed_experts=8, n_group=4, topk_group=2, num_experts_per_tok=2, n_shared_experts=1,
    norm_topk_prob=True, routed_scaling_factor=2.5, num_nextn_predict_layers=1,
    max_position_embeddings=2048,
    rope_scaling={"beta_fast": 32, "beta_slow": 1, "factor": 4, "mscale": 1.0, "mscale_all_dim": 1.0,
                  "original_max_position_embeddings": 512, "type": "yarn"},
)

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
    "parameters": {"type": "object", "properties": {"location": {"type": "string",
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
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 18, \"condition\": \"sunny\"}"}],
     [WEATHER_TOOL]),
]
TOOL_CALL_RE = re.compile(r"^<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>([A-Za-z0-9_\-]+)\n```json\n(.*?)\n```"
                          r"<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>$", re.S)


# ================================================================================================ corpus
def python_roots():
    import site
    import sysconfig
    cands = set()
    for key in ("purelib", "platlib", "stdlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            cands.add(p)
    try:
        cands.update(site.getsitepackages())
    except Exception:  # noqa: BLE001
        pass
    for pattern in ("/usr/lib/python3*", "/usr/lib/python3/dist-packages", "/usr/local/lib/python3*"):
        import glob
        cands.update(glob.glob(pattern))
    roots = sorted({os.path.realpath(p) for p in cands if os.path.isdir(p)})
    return [r for r in roots if not any(r != o and r.startswith(o + os.sep) for o in roots)]


def collect_sources(max_bytes):
    """-> (train_texts, heldout_texts, stats). Deduplicated .py files; ~1.2% held out by content hash."""
    paths = []
    for root in python_roots():
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for f in filenames:
                if f.endswith(".py"):
                    paths.append(os.path.join(dirpath, f))
    paths.sort()
    random.Random(0).shuffle(paths)
    seen, train, held, total, skipped = set(), [], [], 0, 0
    for p in paths:
        try:
            size = os.path.getsize(p)
            if size < 200 or size > 150_000:
                continue
            with open(p, "rb") as fh:
                raw = fh.read()
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            skipped += 1
            continue
        if max(len(line) for line in text.split("\n")) > 400 or "\x00" in text:
            skipped += 1
            continue
        digest = hashlib.sha1(raw).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        text = text.replace("\r\n", "\n").replace("\t", "    ")
        if int(digest[:2], 16) < 3:
            held.append(text)
        else:
            train.append(text)
            total += len(raw)
            if total >= max_bytes:
                break
    return train, held, dict(files_seen=len(paths), train_files=len(train), heldout_files=len(held),
                             train_bytes=total, skipped=skipped, roots=python_roots())


TOP_LEVEL = re.compile(r"^(def |class |async def |@)")


def split_top_level(text):
    """Top-level def/class chunks (decorators kept with what follows); the preamble is one chunk."""
    chunks, cur, prev_decorator = [], [], False
    for line in text.split("\n"):
        starts = bool(TOP_LEVEL.match(line))
        if starts and not prev_decorator and cur:
            chunks.append("\n".join(cur).strip("\n") + "\n")
            cur = []
        cur.append(line)
        prev_decorator = line.startswith("@")
    if cur:
        chunks.append("\n".join(cur).strip("\n") + "\n")
    return [c for c in chunks if len(c) > 40]


def documents(texts, seed):
    """Half the files whole, half split into top-level chunks (each its own document after BOS)."""
    rng = random.Random(seed)
    docs = []
    for t in texts:
        if rng.random() < 0.5:
            docs.append(t)
        else:
            docs.extend(split_top_level(t))
    return docs


# ================================================================================================ tokenizer
def train_tokenizer(sample_texts, deepseek_tokenizer_json, out_dir):
    from tokenizers import AddedToken, Tokenizer, pre_tokenizers, processors
    from tokenizers.trainers import BpeTrainer
    with open(deepseek_tokenizer_json, encoding="utf-8") as fh:
        ds = json.load(fh)
    skeleton = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
                "normalizer": ds["normalizer"], "pre_tokenizer": ds["pre_tokenizer"], "post_processor": None,
                "decoder": ds["decoder"],
                "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                          "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                          "ignore_merges": False, "vocab": {}, "merges": []}}
    tok = Tokenizer.from_str(json.dumps(skeleton))
    base = VOCAB - len(chat_data.TAIL_TOKENS)
    trainer = BpeTrainer(vocab_size=base, min_frequency=2, show_progress=False,
                         special_tokens=[chat_data.BOS, chat_data.EOS, chat_data.PAD],
                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(sample_texts, trainer=trainer)
    assert tok.get_vocab_size() == base, tok.get_vocab_size()
    for content, special in chat_data.TAIL_TOKENS:
        added = AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=True, special=special)
        n = tok.add_special_tokens([added]) if special else tok.add_tokens([added])
        assert n == 1, content
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    assert [tok.token_to_id(t) for t in (chat_data.BOS, chat_data.EOS, chat_data.PAD)] == [0, 1, 2]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{chat_data.BOS} $A", pair=f"{chat_data.BOS} $A {chat_data.BOS} $B:1",
        special_tokens=[(chat_data.BOS, 0)])
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    # Keep DeepSeek's own added-token flags (their normalized flag is as in DeepSeek-V3's tokenizer.json).
    with open(os.path.join(out_dir, "tokenizer.json"), encoding="utf-8") as fh:
        saved = json.load(fh)
    for a in saved["added_tokens"]:
        if a["id"] < 3:
            a["normalized"] = False
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as fh:
        json.dump(saved, fh, ensure_ascii=False)
    config = {
        "add_bos_token": True, "add_eos_token": False,
        "bos_token": {"__type": "AddedToken", "content": chat_data.BOS, "lstrip": False, "normalized": True,
                      "rstrip": False, "single_word": False},
        "clean_up_tokenization_spaces": False,
        "eos_token": {"__type": "AddedToken", "content": chat_data.EOS, "lstrip": False, "normalized": True,
                      "rstrip": False, "single_word": False},
        "legacy": True, "model_max_length": ARCH["max_position_embeddings"],
        "pad_token": {"__type": "AddedToken", "content": chat_data.EOS, "lstrip": False, "normalized": True,
                      "rstrip": False, "single_word": False},
        "sp_model_kwargs": {}, "unk_token": None, "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": chat_data.CHAT_TEMPLATE,
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as fh:
        json.dump(config, fh, ensure_ascii=False, indent=2)
        fh.write("\n")
    return Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))


def encode_stream(tok, texts, add_bos_eos, deadline=None):
    """Concatenated uint16 ids ([BOS] text [EOS] per document when add_bos_eos)."""
    parts, n_docs = [], 0
    enc_fn = getattr(tok, "encode_batch_fast", None) or tok.encode_batch
    for i in range(0, len(texts), 2000):
        batch = texts[i:i + 2000]
        for e in enc_fn(batch, add_special_tokens=False):
            ids = e.ids
            if add_bos_eos:
                ids = [0] + ids + [1]
            parts.append(np.asarray(ids, dtype=np.uint16))
        n_docs += len(batch)
        if deadline is not None and time.time() > deadline:
            log(f"  encoding stopped by its time budget after {n_docs}/{len(texts)} documents")
            break
    return np.concatenate(parts) if parts else np.zeros(0, np.uint16)


# ================================================================================================ model
def hf_config(n_layers):
    from transformers import DeepseekV3Config
    cfg = json.loads(json.dumps(make_fixtures.make_config(ARCH)))  # a deep copy: transformers edits rope_scaling
    cfg.pop("quantization_config")
    cfg.update(torch_dtype="float32", num_hidden_layers=n_layers)
    return DeepseekV3Config(**cfg)


def build_model(n_layers):
    from transformers import DeepseekV3ForCausalLM
    config = hf_config(n_layers)
    errors = []
    for kwargs in ({"attn_implementation": "sdpa", "experts_implementation": "eager"}, {"attn_implementation": "sdpa"}):
        try:
            return DeepseekV3ForCausalLM._from_config(config, **kwargs)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
    raise RuntimeError("cannot build DeepseekV3ForCausalLM: " + "; ".join(errors))


def set_experts_impl(module, name):
    for m in module.modules():
        cfg = getattr(m, "config", None)
        if cfg is not None and hasattr(cfg, "_experts_implementation"):
            cfg._experts_implementation = name


def make_mtp(torch, L):
    """The MTP module: enorm, hnorm, eh_proj, a MoE decoder layer (layer L of an (L+1)-layer model, so that
    transformers builds and initialises it), shared_head.norm; embedding and head shared with the main model."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RMSNorm
    holder = build_model(L + 1)
    H, eps = ARCH["hidden_size"], 1e-6
    mtp = torch.nn.Module()
    mtp.layer = holder.model.layers[L]
    mtp.enorm = DeepseekV3RMSNorm(H, eps=eps)
    mtp.hnorm = DeepseekV3RMSNorm(H, eps=eps)
    mtp.head_norm = DeepseekV3RMSNorm(H, eps=eps)
    mtp.eh_proj = torch.nn.Linear(2 * H, H, bias=False)
    torch.nn.init.normal_(mtp.eh_proj.weight, std=0.02)
    if not hasattr(mtp.layer.mlp, "gate"):
        raise RuntimeError("the MTP decoder layer is not a MoE layer")
    return mtp, holder.config


def layer_out(o):
    return o[0] if isinstance(o, tuple) else o


def mtp_forward(torch, model, mtp, ids, hidden):
    """MTP logits [B, T-1, V]: row i reads embed(ids[i+1]) and the main final-normed hidden h_i, predicts ids[i+2]."""
    e = model.model.embed_tokens(ids[:, 1:])
    h = hidden[:, :-1]
    u = mtp.eh_proj(torch.cat([mtp.enorm(e), mtp.hnorm(h)], dim=-1))
    T = u.shape[1]
    pos = torch.arange(T, device=u.device).unsqueeze(0)
    pe = model.model.rotary_emb(e, pos)  # e is float32 (embeddings are not autocast): float32 cos/sin
    mask = None  # sdpa: causal when no mask is given (checked at the start of training)
    if getattr(mtp.layer.self_attn.config, "_attn_implementation", None) != "sdpa":
        mask = torch.full((T, T), torch.finfo(u.dtype).min, dtype=u.dtype, device=u.device).triu(1)[None, None]
    out = layer_out(mtp.layer(u, attention_mask=mask, position_ids=pos, position_embeddings=pe, use_cache=False))
    return model.lm_head(mtp.head_norm(out))


def router_hooks(torch, modules, counts):
    """Counts each MoE layer's expert selections (for the bias update), replicating transformers' selection."""
    E, G, TG, K = ARCH["n_routed_experts"], ARCH["n_group"], ARCH["topk_group"], ARCH["num_experts_per_tok"]

    def hook(mod, inputs, output):
        outs = output if isinstance(output, tuple) else (output,)
        with torch.no_grad():
            idx = next((o for o in outs if torch.is_tensor(o) and not o.is_floating_point()), None)
            if idx is None:
                logits = next(o for o in outs if torch.is_tensor(o) and o.shape[-1] == E)
                s = logits.float().reshape(-1, E).sigmoid() + mod.e_score_correction_bias
                g = s.view(-1, G, E // G).topk(2, dim=-1).values.sum(-1)
                gm = torch.zeros_like(g).scatter_(1, g.topk(TG, dim=-1).indices, 1.0)
                sm = gm.unsqueeze(-1).expand(-1, G, E // G).reshape(-1, E)
                idx = s.masked_fill(sm == 0, float("-inf")).topk(K, dim=-1).indices
            counts[mod] += torch.bincount(idx.reshape(-1), minlength=E).float()

    gates = [m for m in modules if hasattr(m, "e_score_correction_bias")]
    for g in gates:
        counts[g] = torch.zeros(E, device=g.e_score_correction_bias.device)
        g.register_forward_hook(hook)
    return gates


def fp32_router(torch, gate_cls):
    """Routing in float32 under autocast (as at inference), so that training sees the same expert choices."""
    orig = gate_cls.forward

    def forward(self, *args, **kwargs):
        with torch.autocast(device_type="cuda", enabled=False):
            args = [a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args]
            return orig(self, *args, **kwargs)
    gate_cls.forward = forward


class Batches:
    def __init__(self, torch, code, chat, batch, device, seed):
        self.torch, self.batch, self.device = torch, batch, device
        self.code = torch.from_numpy(code.astype(np.int32)).to(device)
        self.chat = torch.from_numpy(chat.astype(np.int32)).to(device)
        self.n_chat = max(1, round(batch * CHAT_FRACTION))
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(seed)
        self.offsets = torch.arange(SEQ + 1, device=device)

    def windows(self, stream, n):
        starts = self.torch.randint(0, stream.numel() - SEQ - 1, (n,), device=self.device, generator=self.gen)
        return stream[starts[:, None] + self.offsets].long()

    def __call__(self):
        return self.torch.cat([self.windows(self.code, self.batch - self.n_chat), self.windows(self.chat, self.n_chat)])


def fixed_windows(stream, n, seed, length=SEQ + 1):
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(stream) - length, n)
    return np.stack([stream[s:s + length] for s in starts]).astype(np.int64)


def evaluate(torch, main_fn, mtp_fn, windows, device, batch=16):
    """Mean main CE, MTP CE, accuracies and MTP top-1 agreement with the main model's next-next greedy token."""
    F = torch.nn.functional
    tot = dict(main_ce=0.0, mtp_ce=0.0, main_acc=0.0, mtp_acc=0.0, mtp_agree=0.0)
    n_main = n_mtp = 0
    with torch.no_grad():
        for i in range(0, len(windows), batch):
            x = torch.from_numpy(windows[i:i + batch]).to(device)
            hidden, logits = main_fn(x[:, :-1])
            logits = logits.float()
            V = logits.shape[-1]
            tot["main_ce"] += F.cross_entropy(logits.reshape(-1, V), x[:, 1:].reshape(-1), reduction="sum").item()
            tot["main_acc"] += (logits.argmax(-1) == x[:, 1:]).sum().item()
            n_main += x[:, 1:].numel()
            ml = mtp_fn(x[:, :-1], hidden).float()
            tot["mtp_ce"] += F.cross_entropy(ml.reshape(-1, V), x[:, 2:].reshape(-1), reduction="sum").item()
            top = ml.argmax(-1)
            tot["mtp_acc"] += (top == x[:, 2:]).sum().item()
            tot["mtp_agree"] += (top == logits[:, 1:].argmax(-1)).sum().item()
            n_mtp += x[:, 2:].numel()
    return {"main_ce": tot["main_ce"] / n_main, "main_top1_acc": tot["main_acc"] / n_main,
            "mtp_ce": tot["mtp_ce"] / n_mtp, "mtp_top1_acc": tot["mtp_acc"] / n_mtp,
            "mtp_agreement_with_main_next_next": tot["mtp_agree"] / n_mtp, "tokens": n_main}


def train(args, torch, code, chat, budget_s):
    """Returns (model, mtp, stats)."""
    device = "cuda"
    torch.manual_seed(0)
    L = ARCH["num_hidden_layers"]
    model = build_model(L)
    mtp, _ = make_mtp(torch, L)
    model.to(device)
    mtp.to(device)
    gate_cls = type(model.model.layers[L - 1].mlp.gate)
    fp32_router(torch, gate_cls)
    log(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.3f} M params main, "
        f"{sum(p.numel() for p in mtp.parameters()) / 1e6:.3f} M MTP; attn {model.config._attn_implementation}; "
        f"expert params {[n for n, _ in model.model.layers[L - 1].mlp.named_parameters()]}")
    params = [p for p in list(model.parameters()) + list(mtp.parameters()) if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    counts = {}
    gates = router_hooks(torch, list(model.modules()) + list(mtp.modules()), counts)
    batches = Batches(torch, code, chat, args.batch, device, seed=1)
    F = torch.nn.functional

    def step_loss(x):
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            hidden = model.model(input_ids=x[:, :-1], use_cache=False).last_hidden_state
            logits = model.lm_head(hidden)
            main = F.cross_entropy(logits.float().reshape(-1, VOCAB), x[:, 1:].reshape(-1))
            ml = mtp_forward(torch, model, mtp, x[:, :-1], hidden)
            mloss = F.cross_entropy(ml.float().reshape(-1, VOCAB), x[:, 2:].reshape(-1))
        return main, mloss

    # Causality self-check of the MTP path (attention_mask=None must mean causal): later tokens must not
    # change earlier MTP logits.
    with torch.no_grad():
        x = batches()[:2]
        y = x.clone()
        y[:, 300:] = (y[:, 300:] + 7) % VOCAB
        hx = model.model(input_ids=x[:, :-1], use_cache=False).last_hidden_state
        hy = model.model(input_ids=y[:, :-1], use_cache=False).last_hidden_state
        mx, my = mtp_forward(torch, model, mtp, x[:, :-1], hx), mtp_forward(torch, model, mtp, y[:, :-1], hy)
        d_main = (hx[:, :299] - hy[:, :299]).abs().max().item()
        d_mtp = (mx[:, :298] - my[:, :298]).abs().max().item()
        log(f"causality check: max change before the edit: main {d_main:.2e}, MTP {d_mtp:.2e}")
        if d_main > 1e-4 or d_mtp > 1e-4:
            raise RuntimeError("non-causal attention in the training forward")

    # Pick the fastest experts implementation that works.
    impls = ["grouped_mm", "batched_mm", "eager"] if not args.eager_experts else ["eager"]
    timing = {}
    for impl in impls:
        try:
            set_experts_impl(model, impl)
            set_experts_impl(mtp, impl)
            for i in range(4):
                if i == 1:
                    torch.cuda.synchronize()
                    t = time.time()
                main, mloss = step_loss(batches())
                (main + MTP_WEIGHT * mloss).backward()
                opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            timing[impl] = (time.time() - t) / 3
        except Exception as e:  # noqa: BLE001
            log(f"experts implementation {impl}: failed: {type(e).__name__}: {str(e)[:200]}")
            opt.zero_grad(set_to_none=True)
    for c in counts.values():
        c.zero_()
    best = min(timing, key=timing.get)
    set_experts_impl(model, best)
    set_experts_impl(mtp, best)
    log(f"experts implementation timings (s/step): {timing}; using {best}")
    est_steps = max(50, int(budget_s / timing[best]))

    t_start, step, tokens = time.time(), 0, 0
    total_steps, warmup = est_steps, min(200, est_steps // 10)
    hist = []
    while True:
        if step == 30:
            torch.cuda.synchronize()
            t30 = time.time()
        if step == 130:
            torch.cuda.synchronize()
            per = (time.time() - t30) / 100
            total_steps = max(step + 10, int((budget_s - (time.time() - t_start)) / per) + step)
            log(f"measured {per * 1000:.1f} ms/step -> {total_steps} steps in the budget")
        if step >= total_steps or time.time() - t_start > budget_s * 1.03:
            break
        if step < warmup:
            lr = args.lr * (step + 1) / warmup
        else:
            p = min(1.0, (step - warmup) / max(1, total_steps - warmup))
            lr = args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))
        for g in opt.param_groups:
            g["lr"] = lr
        x = batches()
        main, mloss = step_loss(x)
        loss = main + MTP_WEIGHT * mloss
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            for g in gates:
                load = counts[g]
                g.e_score_correction_bias.add_(BIAS_UPDATE * torch.sign(load.mean() - load))
                load.zero_()
        tokens += x[:, 1:].numel()
        step += 1
        if step % 200 == 0 or step == 1:
            m, ml = main.item(), mloss.item()
            hist.append((step, round(m, 4), round(ml, 4)))
            biases = [round(float(g.e_score_correction_bias.abs().max()), 3) for g in gates]
            log(f"step {step}/{total_steps} lr {lr:.2e} loss {m:.4f} mtp {ml:.4f} gnorm {float(gnorm):.2f} "
                f"tok {tokens / 1e6:.1f}M max|bias| {biases}")
    torch.cuda.synchronize()
    elapsed = time.time() - t_start
    log(f"trained {step} steps, {tokens / 1e6:.1f} M tokens in {elapsed:.0f}s ({tokens / elapsed / 1e6:.2f} M tok/s)")
    return model, mtp, dict(steps=step, train_tokens=tokens, train_seconds=elapsed, experts_impl=best,
                            batch=args.batch, seq=SEQ, lr=args.lr, loss_history=hist)


# ================================================================================================ export
class NanoExport:
    """The trained weights in the official layout (attributes as tools/fixtures' Fixture, so that its checkpoint
    writer and golden_hf's loaders work on it)."""
    write_checkpoint = make_fixtures.Fixture.write_checkpoint

    def __init__(self, master):
        self.name, self.seed, self.shards = ARCH["name"], 0, 1
        self.cfg = json.loads(json.dumps(make_fixtures.make_config(ARCH)))
        self.ckpt, self.deq, self.fp8_quot, self.bf16_master = {}, {}, {}, {}
        for name, shape, kind, init in make_fixtures.tensor_specs(self.cfg):
            w = master[init[1]] if init[0] == "copy" else master[name]
            w = np.ascontiguousarray(w, dtype=np.float32)
            if w.shape != tuple(shape):
                raise ValueError(f"{name}: trained shape {w.shape}, spec {shape}")
            make_fixtures.encode_tensor(self, name, kind, w)
        used = {n for n, _, _, _ in make_fixtures.tensor_specs(self.cfg)}
        extra = sorted(set(master) - used)
        if extra:
            raise ValueError(f"trained tensors with no place in the checkpoint: {extra[:8]}")


def official_names(torch, model, mtp):
    """Trained tensors (float32 numpy) under the official DeepSeek-V3 names; fused experts split per expert."""
    L, E = ARCH["num_hidden_layers"], ARCH["n_routed_experts"]
    out = {}

    def put(prefix, sd):
        for k, v in sd.items():
            if "rotary_emb" in k:
                continue
            v = v.detach().float().cpu().numpy()
            name = prefix + k
            if name.endswith("mlp.experts.gate_up_proj"):
                p = name[: -len("gate_up_proj")]
                inter = v.shape[1] // 2
                for e in range(E):
                    out[f"{p}{e}.gate_proj.weight"] = v[e, :inter]
                    out[f"{p}{e}.up_proj.weight"] = v[e, inter:]
            elif name.endswith("mlp.experts.down_proj"):
                p = name[: -len("down_proj")]
                for e in range(E):
                    out[f"{p}{e}.down_proj.weight"] = v[e]
            else:
                out[name] = v
    put("", model.state_dict())
    P = f"model.layers.{L}."
    put(P, mtp.layer.state_dict())
    out[P + "enorm.weight"] = mtp.enorm.weight.detach().float().cpu().numpy()
    out[P + "hnorm.weight"] = mtp.hnorm.weight.detach().float().cpu().numpy()
    out[P + "eh_proj.weight"] = mtp.eh_proj.weight.detach().float().cpu().numpy()
    out[P + "shared_head.norm.weight"] = mtp.head_norm.weight.detach().float().cpu().numpy()
    return out


# ================================================================================================ goldens
def load_dequantised(torch, golden_hf, f, tmp):
    """transformers fp32 models of the dequantised export: (main model, MTP pieces)."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RMSNorm
    L, H = ARCH["num_hidden_layers"], ARCH["hidden_size"]
    main_keys = [k for k in f.deq if not (k.startswith("model.layers.") and int(k.split(".")[2]) >= L)]
    P = f"model.layers.{L}."
    mtp_only = ("embed_tokens.", "enorm.", "hnorm.", "eh_proj.", "shared_head.")
    dec_keys = [k for k in f.deq if k.startswith(P) and not k[len(P):].startswith(mtp_only)]
    model = golden_hf.load_hf(f, main_keys, L, os.path.join(tmp, "main"))
    holder = golden_hf.load_hf(f, main_keys + dec_keys, L + 1, os.path.join(tmp, "mtp"))
    mtp = torch.nn.Module()
    mtp.layer = holder.model.layers[L]
    for attr, key in (("enorm", "enorm"), ("hnorm", "hnorm"), ("head_norm", "shared_head.norm")):
        norm = DeepseekV3RMSNorm(H, eps=1e-6)
        with torch.no_grad():
            norm.weight.copy_(torch.from_numpy(f.deq[P + key + ".weight"]))
        setattr(mtp, attr, norm)
    mtp.eh_proj = torch.nn.Linear(2 * H, H, bias=False)
    with torch.no_grad():
        mtp.eh_proj.weight.copy_(torch.from_numpy(f.deq[P + "eh_proj.weight"]))
    return model.eval(), mtp.eval()


def main_fn_of(model):
    def fn(ids):
        hidden = model.model(input_ids=ids, use_cache=False).last_hidden_state
        return hidden, model.lm_head(hidden)
    return fn


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
        log(f"  golden {p['name']}: {len(toks)} tokens (kept {keep}), min margin {min(margins):.4f}: {p['completion'][:400]!r}")
    # Logit rows for two sequences: held-out code and a chat render.
    seqs = [fixed_windows(held_code, 1, 5, length=40)[0].tolist(),
            tok.encode(chat_render(CHAT_PROMPTS[-1][1] + [{"role": "assistant", "content": "It is 18°C and sunny in Paris."}],
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


def tool_call_check(torch, model, tok, chat_render, n, device):
    """Greedy (KV-cached generate, GPU fp32) on held-out synthetic tool conversations: is the first assistant turn a
    well-formed call to the right function with the right JSON arguments, and is the answer after the tool output
    plain text ending in eos?"""
    rng = random.Random(12345)
    ok_form = ok_name = ok_args = ok_answer = total = 0
    examples = []
    model.to(device)
    while total < n:
        conv = chat_data.conversation(rng)
        msgs = conv["messages"]
        call_i = next((i for i, m in enumerate(msgs) if m["role"] == "assistant" and m.get("tool_calls")), None)
        if call_i is None:
            continue
        total += 1
        expect = msgs[call_i]["tool_calls"][0]["function"]
        prompt = tok.encode(chat_render(msgs[:call_i], conv["tools"], add_generation_prompt=True), add_special_tokens=False).ids
        out = generate(torch, model, prompt, 64, device)
        text = tok.decode(out, skip_special_tokens=False)
        m = TOOL_CALL_RE.match(text)
        if m:
            ok_form += 1
            ok_name += m.group(1) == expect["name"]
            try:
                ok_args += json.loads(m.group(2)) == json.loads(expect["arguments"])
            except ValueError:
                pass
        prompt2 = tok.encode(chat_render(msgs[:call_i + 2], conv["tools"], add_generation_prompt=True),
                             add_special_tokens=False).ids
        out2 = generate(torch, model, prompt2, 64, device)
        answer = tok.decode(out2, skip_special_tokens=False)
        good = answer.endswith(chat_data.EOS) and "<｜tool" not in answer and len(answer) > len(chat_data.EOS) + 2
        ok_answer += good
        if len(examples) < 6:
            examples.append(dict(question=msgs[call_i - 1]["content"], expected=expect, call=text, answer=answer))
    model.cpu()
    return dict(conversations=total, well_formed_call=ok_form / total, right_function=ok_name / total,
                right_arguments=ok_args / total, plain_answer_after_output=ok_answer / total, examples=examples)


def generate(torch, model, prompt, max_new, device, eos=1):
    with torch.no_grad():
        x = torch.tensor([prompt], device=device)
        out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_new, do_sample=False,
                             eos_token_id=eos, pad_token_id=eos)
    return out[0, len(prompt):].tolist()


def self_generated_agreement(torch, model, mtp, prompts, device, max_new=48):
    """MTP top-1 vs the main model's next-next greedy token on the model's own greedy continuations."""
    agree = total = 0
    model.to(device)
    mtp.to(device)
    with torch.no_grad():
        for p in prompts:
            out = generate(torch, model, p, max_new, device)
            seq = torch.tensor([p + out], device=device)
            hidden, logits = main_fn_of(model)(seq)
            ml = mtp_forward(torch, model, mtp, seq, hidden)[0]
            lo = len(p) - 1  # rows whose next-next token is generated
            a = ml[lo:].argmax(-1) == logits[0, lo + 1:].argmax(-1)
            agree += int(a.sum())
            total += a.numel()
    model.cpu()
    mtp.cpu()
    return agree / max(1, total), total


# ================================================================================================ driver
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--deadline", type=float, default=575.0, help="seconds from start by which all must be done")
    ap.add_argument("--train-seconds", type=float, default=450.0, help="upper bound on the training time")
    ap.add_argument("--reserve", type=float, default=85.0, help="seconds kept for export, evaluation and goldens")
    ap.add_argument("--max-corpus-mb", type=float, default=400.0)
    ap.add_argument("--chat-conversations", type=int, default=100000)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--eager-experts", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="small corpus, short training: a pipeline check")
    ap.add_argument("--deepseek-tokenizer", default=None,
                    help="DeepSeek-V3 tokenizer.json whose pre-tokenizer/normalizer/decoder are used")
    args = ap.parse_args()
    if args.smoke:
        args.max_corpus_mb, args.train_seconds, args.chat_conversations = 20.0, 30.0, 5000
    deadline = T0 + args.deadline
    os.makedirs(args.out, exist_ok=True)
    ds_json = args.deepseek_tokenizer or next(
        p for p in (os.path.join(REPO, ".carry", "nano", "tokenizer.json"),
                    os.path.join(REPO, "..", "shared", "data", "deepseek-v3", "hf-deepseek-v3", "tokenizer.json"),
                    "/work/shared/data/deepseek-v3/hf-deepseek-v3/tokenizer.json") if os.path.exists(p))
    metrics = {"arch": ARCH, "args": vars(args)}
    work = tempfile.mkdtemp(prefix="nano-")
    model_dir = os.path.join(work, "fathom-nano")
    try:
        run(args, deadline, ds_json, metrics, work, model_dir)
    finally:
        with open(os.path.join(args.out, "metrics.json"), "w") as fh:
            json.dump(metrics, fh, indent=1, ensure_ascii=False, default=str)
        with open(os.path.join(args.out, "log.txt"), "w") as fh:
            fh.write("\n".join(LOG) + "\n")


def run(args, deadline, ds_json, metrics, work, model_dir):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    import transformers
    import tokenizers
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, "
        f"gpu {torch.cuda.get_device_name(0)}, cpus {os.cpu_count()}")
    metrics["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__,
                           "tokenizers": tokenizers.__version__}

    # ---- corpus
    train_texts, held_texts, stats = collect_sources(int(args.max_corpus_mb * 1e6))
    log(f"corpus: {stats}")
    metrics["corpus"] = stats
    train_docs = documents(train_texts, 1)
    held_docs = documents(held_texts, 2)
    render = chat_data.Renderer()
    convs = chat_data.conversations(7, args.chat_conversations)
    chat_texts = [render(c["messages"], c["tools"]) for c in convs]
    held_chat = [render(c["messages"], c["tools"]) for c in chat_data.conversations(8, 600)]
    log(f"chat: {len(chat_texts)} conversations rendered, {sum(map(len, chat_texts)) / 1e6:.1f} MB")

    # ---- tokenizer
    rng = random.Random(3)
    sample, size = [], 0
    for t in rng.sample(train_texts, len(train_texts)):
        sample.append(t)
        size += len(t)
        if size > 40e6:
            break
    specials = [chat_data.BOS, chat_data.EOS] + [t for t, _ in chat_data.TAIL_TOKENS]
    for text in chat_texts[:3000]:  # special tokens are added tokens: keep their strings out of the BPE statistics
        for sp in specials:
            text = text.replace(sp, "\n")
        sample.append(text)
    tok = train_tokenizer(sample, ds_json, model_dir)
    log(f"tokenizer: {tok.get_vocab_size()} tokens trained on {size / 1e6:.1f} MB + 3000 chats")

    # ---- encode
    enc_deadline = time.time() + 90
    code = encode_stream(tok, train_docs, True, deadline=enc_deadline)
    held_code = encode_stream(tok, held_docs, True)
    chat = encode_stream(tok, chat_texts, False)
    held_chat_ids = encode_stream(tok, held_chat, False)
    bpt = stats["train_bytes"] / max(1, len(code))
    log(f"encoded: code {len(code) / 1e6:.1f} M tokens ({bpt:.2f} bytes/token), held-out code "
        f"{len(held_code) / 1e6:.2f} M, chat {len(chat) / 1e6:.2f} M, held-out chat {len(held_chat_ids) / 1e6:.2f} M")
    metrics["data"] = {"code_tokens": int(len(code)), "heldout_code_tokens": int(len(held_code)),
                       "chat_tokens": int(len(chat)), "heldout_chat_tokens": int(len(held_chat_ids)),
                       "chat_fraction_of_batches": CHAT_FRACTION}

    # ---- train
    budget = min(args.train_seconds, deadline - time.time() - args.reserve)
    log(f"training budget {budget:.0f}s")
    model, mtp, tstats = train(args, torch, code, chat, budget)
    metrics["training"] = tstats
    del code
    eval_code = fixed_windows(held_code, 64 if not args.smoke else 16, 11)
    eval_chat = fixed_windows(held_chat_ids, 32 if not args.smoke else 8, 12)
    model.eval()
    mtp.eval()
    set_experts_impl(model, "eager")
    set_experts_impl(mtp, "eager")
    with torch.no_grad():
        metrics["eval_trained_fp32"] = {
            "code": evaluate(torch, main_fn_of(model), lambda x, h: mtp_forward(torch, model, mtp, x, h), eval_code, "cuda"),
            "chat": evaluate(torch, main_fn_of(model), lambda x, h: mtp_forward(torch, model, mtp, x, h), eval_chat, "cuda")}
    log(f"held-out (trained weights, fp32): {json.dumps(metrics['eval_trained_fp32'])}")
    master = official_names(torch, model, mtp)
    from safetensors.torch import save_file
    save_file({k: torch.from_numpy(np.ascontiguousarray(v)).to(torch.bfloat16) for k, v in master.items()},
              os.path.join(args.out, "master.safetensors"))
    with tarfile.open(os.path.join(args.out, "tokenizer.tar"), "w") as tf:
        for f in ("tokenizer.json", "tokenizer_config.json"):
            tf.add(os.path.join(model_dir, f), arcname=f)
    del model, mtp
    torch.cuda.empty_cache()
    export_and_check(args, torch, master, tok, model_dir, work, held_code, eval_code, eval_chat, render, metrics)


def export_and_check(args, torch, master, tok, model_dir, work, held_code, eval_code, eval_chat, render, metrics):
    import golden_hf
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    golden_hf.setup()
    f = NanoExport(master)
    f.write_checkpoint(model_dir)
    golden_hf.check_files(f, model_dir)
    counts = {"fp8": sum(a.size for dt, a in f.ckpt.values() if dt == "F8_E4M3"),
              "bf16": sum(a.size for dt, a in f.ckpt.values() if dt == "BF16"),
              "f32": sum(a.size for dt, a in f.ckpt.values() if dt == "F32")}
    L = ARCH["num_hidden_layers"]
    unique = {k: v for k, v in master.items()}
    n_main = sum(v.size for k, v in unique.items() if not k.startswith(f"model.layers.{L}."))
    n_mtp = sum(v.size for k, v in unique.items() if k.startswith(f"model.layers.{L}."))
    E, K = ARCH["n_routed_experts"], ARCH["num_experts_per_tok"]
    n_experts = sum(v.size for k, v in unique.items() if ".mlp.experts." in k and not k.startswith(f"model.layers.{L}."))
    metrics["params"] = {"main_model": int(n_main), "mtp_module_excluding_shared_embedding_and_head": int(n_mtp),
                         "total": int(n_main + n_mtp), "main_activated_per_token": int(n_main - n_experts * (E - K) / E),
                         "checkpoint_elements": counts}
    log(f"params: {metrics['params']}")
    with open(os.path.join(model_dir, "config.json")) as fh:
        cfg = json.load(fh)
    import transformers
    cfg["transformers_version"] = transformers.__version__
    with open(os.path.join(model_dir, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=2)
        fh.write("\n")
    with open(os.path.join(model_dir, "generation_config.json"), "w") as fh:
        json.dump({"_from_model_config": True, "bos_token_id": 0, "eos_token_id": 1, "do_sample": False}, fh, indent=2)
        fh.write("\n")

    # tokenizer through transformers (the class in tokenizer_config.json and AutoTokenizer) vs the tokenizers library
    hf_tok = PreTrainedTokenizerFast.from_pretrained(model_dir)
    auto_tok = AutoTokenizer.from_pretrained(model_dir)
    probe = ["def fibonacci(n):", "Hello world\n\n  x = 1", "<｜User｜>hi<｜Assistant｜><think>\nok\n</think>\n\nyes"]
    tok_report = []
    for s in probe:
        a, b, c = hf_tok(s)["input_ids"], auto_tok(s)["input_ids"], tok.encode(s).ids
        tok_report.append(dict(text=s, pretrained_fast=a, auto=b, tokenizers=c, auto_class=type(auto_tok).__name__))
        if not (a == b == c) or a[0] != 0:
            log(f"WARNING tokenizer mismatch: {tok_report[-1]}")
    metrics["tokenizer_check"] = tok_report

    # dequantised export in transformers (fp32)
    with tempfile.TemporaryDirectory() as tmp:
        model, mtp = load_dequantised(torch, golden_hf, f, tmp)
    model.cuda()
    mtp.cuda()
    with torch.no_grad():
        mtp_fn = lambda x, h: mtp_forward(torch, model, mtp, x, h)  # noqa: E731
        metrics["eval_export_fp8_dequantised"] = {"code": evaluate(torch, main_fn_of(model), mtp_fn, eval_code, "cuda"),
                                                  "chat": evaluate(torch, main_fn_of(model), mtp_fn, eval_chat, "cuda")}
    log(f"held-out (FP8 export, dequantised, fp32): {json.dumps(metrics['eval_export_fp8_dequantised'])}")
    model.cpu()
    mtp.cpu()
    prompts = [fixed_windows(held_code, 1, 100 + i, length=24)[0].tolist() for i in range(16)]
    agree, n = self_generated_agreement(torch, model, mtp, prompts, "cuda")
    metrics["mtp_agreement_on_own_greedy_text"] = {"agreement": agree, "positions": n}
    log(f"MTP agreement on the model's own greedy continuations: {agree:.4f} over {n} positions")
    try:
        metrics["tool_calls"] = tool_call_check(torch, model, tok, render, 30 if not args.smoke else 8, "cuda")
        log(f"tool-call check: { {k: v for k, v in metrics['tool_calls'].items() if k != 'examples'} }")
        for ex in metrics["tool_calls"]["examples"][:3]:
            log(f"  {ex['question']!r} -> {ex['call']!r} / {ex['answer']!r}")
    except Exception:  # noqa: BLE001
        log("tool-call check failed:\n" + traceback.format_exc())
    torch.set_num_threads(min(16, os.cpu_count() or 1))
    prompts = make_goldens(torch, tok, hf_tok, model, mtp, model_dir, held_code, render)
    metrics["goldens"] = [{k: p[k] for k in ("name", "completion", "truncated_at_near_tie")} for p in prompts]
    # numpy float64 reference on one golden prompt (independent of transformers)
    try:
        from model_ref import RefModel
        ref = RefModel(f.cfg, f.deq)
        ids = np.asarray(prompts[0]["ids"], dtype=np.int64)
        lg, hn, _ = ref.forward(ids)
        with torch.no_grad():
            tl = model(input_ids=torch.tensor([ids.tolist()]), use_cache=False).logits[0].float().numpy()
        metrics["numpy_ref_vs_transformers_max_abs"] = float(np.abs(lg - tl).max())
        log(f"numpy float64 reference vs transformers: max |diff| {metrics['numpy_ref_vs_transformers_max_abs']:.2e}")
    except Exception:  # noqa: BLE001
        log("numpy reference check failed:\n" + traceback.format_exc())
    files = sorted(os.listdir(model_dir))
    size = sum(os.path.getsize(os.path.join(model_dir, x)) for x in files if os.path.isfile(os.path.join(model_dir, x)))
    size += sum(os.path.getsize(os.path.join(model_dir, "golden", x)) for x in os.listdir(os.path.join(model_dir, "golden")))
    metrics["model_dir_bytes"] = size
    log(f"model folder: {files}, {size} bytes")
    with tarfile.open(os.path.join(args.out, "fathom-nano.tar"), "w") as tf:
        tf.add(model_dir, arcname="fathom-nano")
    log("done")


if __name__ == "__main__":
    main()
