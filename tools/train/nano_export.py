"""fathom-nano's checkpoint: the trained weights under the official DeepSeek-V3 names, written through
tools/fixtures in the official layout (FP8 e4m3 / 128x128 blocks), and read back dequantised into transformers."""
import json
import os

import numpy as np

from nano_common import ARCH  # first: it puts tools/fixtures on sys.path
import make_fixtures


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
