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
import functools
import json
import math
import os
import random
import sys
import tarfile
import tempfile
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the modules beside this file
# nano_common first: it puts tools/fixtures on sys.path.
from nano_common import (  # noqa: E402
    ARCH, BIAS_UPDATE, CHAT_FRACTION, LOG, MTP_WEIGHT, REPO, SEQ, T0, VOCAB, log)
import chat_data  # noqa: E402
from nano_corpus import collect_sources, documents, encode_stream, train_tokenizer  # noqa: E402
from nano_eval import evaluate, fixed_windows, self_generated_agreement, tool_call_check  # noqa: E402
from nano_export import NanoExport, load_dequantised, official_names  # noqa: E402
from nano_goldens import make_goldens  # noqa: E402
from nano_model import (  # noqa: E402
    build_model, fp32_router, main_fn_of, make_mtp, mtp_forward, router_hooks, set_experts_impl)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")


# ================================================================================================ training
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
        mtp_fn = functools.partial(mtp_forward, torch, model, mtp)  # a lambda over the deleted model reads as undefined
        metrics["eval_trained_fp32"] = {"code": evaluate(torch, main_fn_of(model), mtp_fn, eval_code, "cuda"),
                                        "chat": evaluate(torch, main_fn_of(model), mtp_fn, eval_chat, "cuda")}
    log(f"held-out (trained weights, fp32): {json.dumps(metrics['eval_trained_fp32'])}")
    master = official_names(torch, model, mtp)
    from safetensors.torch import save_file
    save_file({k: torch.from_numpy(np.ascontiguousarray(v)).to(torch.bfloat16) for k, v in master.items()},
              os.path.join(args.out, "master.safetensors"))
    with tarfile.open(os.path.join(args.out, "tokenizer.tar"), "w") as tf:
        for f in ("tokenizer.json", "tokenizer_config.json"):
            tf.add(os.path.join(model_dir, f), arcname=f)
    del model, mtp, mtp_fn
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
    n_experts = sum(v.size for k, v in unique.items()
                    if ".mlp.experts." in k and not k.startswith(f"model.layers.{L}."))
    metrics["params"] = {"main_model": int(n_main), "mtp_module_excluding_shared_embedding_and_head": int(n_mtp),
                         "total": int(n_main + n_mtp),
                         "main_activated_per_token": int(n_main - n_experts * (E - K) / E),
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
    size += sum(os.path.getsize(os.path.join(model_dir, "golden", x))
                for x in os.listdir(os.path.join(model_dir, "golden")))
    metrics["model_dir_bytes"] = size
    log(f"model folder: {files}, {size} bytes")
    with tarfile.open(os.path.join(args.out, "fathom-nano.tar"), "w") as tf:
        tf.add(model_dir, arcname="fathom-nano")
    log("done")


if __name__ == "__main__":
    main()
