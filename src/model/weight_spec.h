#pragma once
// The tensors a DeepSeek-V3 checkpoint must hold for a config: names, shapes and dtype classes.
#include <string>
#include <vector>

#include "model/config.h"

namespace fathom::model {

enum class TensorKind {
  kLinear,  // "<name>.weight" of a linear layer: F8_E4M3 (+ "<name>.weight_scale_inv" F32) or BF16/F16/F32
  kFloat,   // norms, embeddings, router, bias: BF16/F16/F32
};

struct TensorSpec {
  std::string name;              // full tensor name, e.g. "model.layers.0.self_attn.kv_b_proj.weight"
  std::vector<int64_t> shape;
  TensorKind kind = TensorKind::kFloat;
  bool required = true;          // optional tensors are checked only when present
};

// Main model tensors (embedding, layers 0..L-1, final norm, lm_head).
std::vector<TensorSpec> main_model_tensor_specs(const ModelConfig& config);
// The MTP module at checkpoint layer index num_hidden_layers.
std::vector<TensorSpec> mtp_tensor_specs(const ModelConfig& config);
// "model.layers.{i}." decoder layer tensors (attention + dense MLP or MoE).
void append_decoder_layer_specs(const ModelConfig& config, int64_t layer_index, bool moe, std::vector<TensorSpec>* specs);

// Shape of "<name>.weight_scale_inv" for an FP8 linear weight of shape [rows, cols].
std::vector<int64_t> fp8_scale_shape(const std::vector<int64_t>& weight_shape);

}  // namespace fathom::model
