"""fathom-nano's model in transformers: DeepseekV3ForCausalLM from the architecture, the MTP module and its
forward, the main model's forward, and the routing helpers of training (float32 routing, expert-load counts)."""
import json

from nano_common import ARCH  # first: it puts tools/fixtures on sys.path
import make_fixtures


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


def main_fn_of(model):
    def fn(ids):
        hidden = model.model(input_ids=ids, use_cache=False).last_hidden_state
        return hidden, model.lm_head(hidden)
    return fn
