"""fathom-nano's data: the Python-source corpus (collected, deduplicated, held out by content hash, split into
documents), the byte-level BPE tokenizer trained on it and the encoding of documents into uint16 id streams."""
import hashlib
import json
import os
import random
import re
import time

import numpy as np

import chat_data
from nano_common import ARCH, VOCAB, log


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
