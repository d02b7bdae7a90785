#pragma once
// DeepSeek-V3 architecture hyper-parameters, parsed from a Hugging Face config.json.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace fathom::model {

struct YarnRopeScaling {
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;          // 0 = absent
  double mscale_all_dim = 0.0;  // 0 = absent
};

struct Fp8QuantConfig {
  int64_t block_rows = 128;   // weight_block_size[0]: output channels per scale
  int64_t block_cols = 128;   // weight_block_size[1]: input channels per scale
};

struct ModelConfig {
  std::string model_type;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;        // dense MLP layers
  int64_t moe_intermediate_size = 0;    // per routed expert
  int64_t num_hidden_layers = 0;
  int64_t num_nextn_predict_layers = 0;
  int64_t num_attention_heads = 0;
  std::optional<int64_t> q_lora_rank;   // absent/null: plain q_proj (V2-Lite style)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  int64_t first_k_dense_replace = 0;
  int64_t moe_layer_freq = 1;
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  std::string scoring_func = "sigmoid";
  std::string topk_method = "noaux_tc";
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 0;
  std::optional<YarnRopeScaling> yarn;  // absent: plain RoPE
  std::optional<Fp8QuantConfig> fp8;    // absent: unquantized (bf16/f32) linear weights
  bool rope_interleave = true;  // rope dims stored as interleaved pairs (DeepSeek's layout)
  bool tie_word_embeddings = false;
  int64_t bos_token_id = 0;
  std::vector<int64_t> eos_token_ids;

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int64_t kv_latent_dim() const { return kv_lora_rank + qk_rope_head_dim; }  // cached values per token per layer
  bool is_moe_layer(int64_t layer_index) const {
    return n_routed_experts > 0 && layer_index >= first_k_dense_replace && layer_index % moe_layer_freq == 0;
  }
  // Softmax scale: qk_head_dim^-0.5 * mscale(factor, mscale_all_dim)^2 under YaRN.
  double attention_softmax_scale() const;
};

// Recursively merges `overrides` into `base` (objects merge key by key; anything else replaces).
nlohmann::json merge_config_json(nlohmann::json base, const nlohmann::json& overrides);

// Parses and validates; throws fathom::Error naming the field for missing, mistyped or unsupported values.
ModelConfig parse_model_config(const nlohmann::json& config_json);

// Reads DIR/config.json, merges `override_json` (a JSON object as text, may be empty) and parses.
ModelConfig load_model_config(const std::string& model_dir, const std::string& override_json);
nlohmann::json load_config_json(const std::string& model_dir, const std::string& override_json);

// DeepSeek's YaRN magnitude correction: 0.1 * mscale * ln(scale) + 1 for scale > 1, else 1.
double yarn_get_mscale(double scale, double mscale);

}  // namespace fathom::model
