#pragma once
// Host-side views of every weight the forward pass uses, grouped as the model is (no copies of checkpoint data).
#include <optional>
#include <vector>

#include "core/tensor.h"
#include "kernels/weight_matrix.h"

namespace fathom::model {

using kernels::WeightMatrix;

struct AttentionWeights {
  std::optional<WeightMatrix> q_a_proj;     // [q_lora, H] when q_lora_rank is set
  Tensor q_a_layernorm;                     // [q_lora]
  std::optional<WeightMatrix> q_b_proj;     // [heads*qk_head_dim, q_lora]
  std::optional<WeightMatrix> q_proj;       // [heads*qk_head_dim, H] without q_lora
  WeightMatrix kv_a_proj_with_mqa;          // [kv_lora + rope, H]
  Tensor kv_a_layernorm;                    // [kv_lora]
  WeightMatrix kv_b_proj;                   // [heads*(nope+v), kv_lora]
  WeightMatrix o_proj;                      // [H, heads*v]
};

struct MlpWeights {
  WeightMatrix gate_proj;  // [I, H]
  WeightMatrix up_proj;    // [I, H]
  WeightMatrix down_proj;  // [H, I]
};

struct MoeWeights {
  Tensor gate;                           // router [E, H]
  Tensor e_score_correction_bias;        // [E], may be empty
  std::vector<MlpWeights> experts;       // E routed experts
  std::optional<MlpWeights> shared;      // n_shared_experts fused into one MLP of width moe_I * n_shared
};

struct DecoderLayerWeights {
  Tensor input_layernorm;           // [H]
  Tensor post_attention_layernorm;  // [H]
  AttentionWeights attention;
  std::optional<MlpWeights> dense_mlp;
  std::optional<MoeWeights> moe;
};

// DeepSeek-V3's multi-token-prediction module (checkpoint layer index = num_hidden_layers).
struct MtpWeights {
  Tensor enorm;              // [H], applied to the next token's embedding
  Tensor hnorm;              // [H], applied to the main model's hidden state
  WeightMatrix eh_proj;      // [H, 2H], input = [enorm(emb) ; hnorm(h)]
  Tensor shared_head_norm;   // [H]
  DecoderLayerWeights layer;
};

struct ModelWeights {
  Tensor embed_tokens;                 // [V, H]
  std::vector<DecoderLayerWeights> layers;
  Tensor norm;                         // [H]
  WeightMatrix lm_head;                // [V, H]
  std::optional<MtpWeights> mtp;
};

}  // namespace fathom::model
