#include "model/weight_spec.h"

namespace fathom::model {

namespace {

int64_t blocks(int64_t extent) { return (extent + 127) / 128; }

void add_linear(std::vector<TensorSpec>* specs, const std::string& prefix, int64_t rows, int64_t cols) {
  specs->push_back({prefix + ".weight", {rows, cols}, TensorKind::kLinear, true});
}

void add_float(std::vector<TensorSpec>* specs, const std::string& name, std::vector<int64_t> shape, bool required = true) {
  specs->push_back({name, std::move(shape), TensorKind::kFloat, required});
}

void add_mlp(std::vector<TensorSpec>* specs, const std::string& prefix, int64_t hidden, int64_t intermediate) {
  add_linear(specs, prefix + ".gate_proj", intermediate, hidden);
  add_linear(specs, prefix + ".up_proj", intermediate, hidden);
  add_linear(specs, prefix + ".down_proj", hidden, intermediate);
}

}  // namespace

std::vector<int64_t> fp8_scale_shape(const std::vector<int64_t>& weight_shape) {
  return {blocks(weight_shape.at(0)), blocks(weight_shape.at(1))};
}

void append_decoder_layer_specs(const ModelConfig& c, int64_t layer_index, bool moe, std::vector<TensorSpec>* specs) {
  const std::string prefix = "model.layers." + std::to_string(layer_index) + ".";
  const int64_t hidden = c.hidden_size, heads = c.num_attention_heads;
  add_float(specs, prefix + "input_layernorm.weight", {hidden});
  add_float(specs, prefix + "post_attention_layernorm.weight", {hidden});
  const std::string attn = prefix + "self_attn.";
  if (c.q_lora_rank) {
    add_linear(specs, attn + "q_a_proj", *c.q_lora_rank, hidden);
    add_float(specs, attn + "q_a_layernorm.weight", {*c.q_lora_rank});
    add_linear(specs, attn + "q_b_proj", heads * c.qk_head_dim(), *c.q_lora_rank);
  } else {
    add_linear(specs, attn + "q_proj", heads * c.qk_head_dim(), hidden);
  }
  add_linear(specs, attn + "kv_a_proj_with_mqa", c.kv_lora_rank + c.qk_rope_head_dim, hidden);
  add_float(specs, attn + "kv_a_layernorm.weight", {c.kv_lora_rank});
  add_linear(specs, attn + "kv_b_proj", heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
  add_linear(specs, attn + "o_proj", hidden, heads * c.v_head_dim);
  if (!moe) {
    add_mlp(specs, prefix + "mlp", hidden, c.intermediate_size);
    return;
  }
  add_float(specs, prefix + "mlp.gate.weight", {c.n_routed_experts, hidden});
  add_float(specs, prefix + "mlp.gate.e_score_correction_bias", {c.n_routed_experts});
  for (int64_t e = 0; e < c.n_routed_experts; ++e) {
    add_mlp(specs, prefix + "mlp.experts." + std::to_string(e), hidden, c.moe_intermediate_size);
  }
  if (c.n_shared_experts > 0) {
    add_mlp(specs, prefix + "mlp.shared_experts", hidden, c.moe_intermediate_size * c.n_shared_experts);
  }
}

std::vector<TensorSpec> main_model_tensor_specs(const ModelConfig& c) {
  std::vector<TensorSpec> specs;
  add_float(&specs, "model.embed_tokens.weight", {c.vocab_size, c.hidden_size});
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    append_decoder_layer_specs(c, layer, c.is_moe_layer(layer), &specs);
  }
  add_float(&specs, "model.norm.weight", {c.hidden_size});
  if (!c.tie_word_embeddings) add_linear(&specs, "lm_head", c.vocab_size, c.hidden_size);
  return specs;
}

std::vector<TensorSpec> mtp_tensor_specs(const ModelConfig& c) {
  std::vector<TensorSpec> specs;
  const int64_t index = c.num_hidden_layers;
  const std::string prefix = "model.layers." + std::to_string(index) + ".";
  add_float(&specs, prefix + "enorm.weight", {c.hidden_size});
  add_float(&specs, prefix + "hnorm.weight", {c.hidden_size});
  add_linear(&specs, prefix + "eh_proj", c.hidden_size, 2 * c.hidden_size);
  add_float(&specs, prefix + "shared_head.norm.weight", {c.hidden_size});
  // Copies of the main embedding and lm_head in the official checkpoint; the main ones are used.
  add_float(&specs, prefix + "embed_tokens.weight", {c.vocab_size, c.hidden_size}, /*required=*/false);
  add_float(&specs, prefix + "shared_head.head.weight", {c.vocab_size, c.hidden_size}, /*required=*/false);
  append_decoder_layer_specs(c, index, c.is_moe_layer(index), &specs);
  return specs;
}

}  // namespace fathom::model
