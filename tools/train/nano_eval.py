"""fathom-nano's evaluations: held-out windows, losses and MTP agreement, greedy generation, MTP agreement on the
model's own continuations and the tool-call check on fresh synthetic conversations."""
import json
import random
import re

import numpy as np

import chat_data
from nano_common import SEQ
from nano_model import main_fn_of, mtp_forward

TOOL_CALL_RE = re.compile(r"^<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>([A-Za-z0-9_\-]+)"
                          r"\n```json\n(.*?)\n```"
                          r"<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>$", re.S)


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
        prompt = tok.encode(chat_render(msgs[:call_i], conv["tools"], add_generation_prompt=True),
                            add_special_tokens=False).ids
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
