"""What the fathom-nano modules share (train_nano.py and the nano_*.py beside it): the repository paths (this
module puts tools/fixtures and tools/train on sys.path), the run's log, and the model's and training's constants."""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools", "fixtures"))
sys.path.insert(0, HERE)

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
