#include "model/weight_loader.h"

#include <sstream>

#include "core/error.h"
#include "model/dummy_weights.h"
#include "model/weight_spec.h"

namespace fathom::model {

namespace {

bool is_float_dtype(DType dtype) { return dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16; }

void check_spec(const TensorSpec& spec, const TensorLookup& lookup, std::vector<std::string>* problems) {
  std::optional<Tensor> tensor = lookup(spec.name);
  if (!tensor) {
    if (spec.required) problems->push_back("missing tensor '" + spec.name + "' (expected shape " + shape_to_string(spec.shape) + ")");
    return;
  }
  if (tensor->shape() != spec.shape) {
    problems->push_back("tensor '" + spec.name + "' has shape " + tensor->shape_string() + ", expected " +
                        shape_to_string(spec.shape));
  }
  const DType dtype = tensor->dtype();
  if (spec.kind == TensorKind::kFloat || dtype != DType::F8_E4M3) {
    if (!is_float_dtype(dtype)) {
      problems->push_back("tensor '" + spec.name + "' has dtype " + std::string(dtype_name(dtype)) + ", expected " +
                          (spec.kind == TensorKind::kLinear ? "F8_E4M3, BF16, F16 or F32" : "BF16, F16 or F32"));
    }
    return;
  }
  // FP8 linear weight: needs its block scales.
  const std::string scale_name = spec.name + "_scale_inv";
  std::optional<Tensor> scale = lookup(scale_name);
  const std::vector<int64_t> scale_shape = fp8_scale_shape(spec.shape);
  if (!scale) {
    problems->push_back("missing tensor '" + scale_name + "' (FP8 weight needs scales of shape " + shape_to_string(scale_shape) + ")");
  } else if (scale->dtype() != DType::F32 || scale->shape() != scale_shape) {
    problems->push_back("tensor '" + scale_name + "' is " + std::string(dtype_name(scale->dtype())) + " " +
                        scale->shape_string() + ", expected F32 " + shape_to_string(scale_shape));
  }
}

Tensor get(const TensorLookup& lookup, const std::string& name) {
  std::optional<Tensor> tensor = lookup(name);
  FATHOM_CHECK(tensor.has_value(), "missing tensor '" << name << "'");
  return *tensor;
}

WeightMatrix get_linear(const TensorLookup& lookup, const std::string& prefix) {
  WeightMatrix matrix;
  matrix.name = prefix;
  matrix.weight = get(lookup, prefix + ".weight");
  matrix.rows = matrix.weight.dim(0);
  matrix.cols = matrix.weight.dim(1);
  if (matrix.is_fp8()) matrix.scale_inv = get(lookup, prefix + ".weight_scale_inv");
  return matrix;
}

MlpWeights get_mlp(const TensorLookup& lookup, const std::string& prefix) {
  return {get_linear(lookup, prefix + ".gate_proj"), get_linear(lookup, prefix + ".up_proj"),
          get_linear(lookup, prefix + ".down_proj")};
}

DecoderLayerWeights get_layer(const ModelConfig& c, const TensorLookup& lookup, int64_t index) {
  const std::string prefix = "model.layers." + std::to_string(index) + ".";
  DecoderLayerWeights layer;
  layer.input_layernorm = get(lookup, prefix + "input_layernorm.weight");
  layer.post_attention_layernorm = get(lookup, prefix + "post_attention_layernorm.weight");
  AttentionWeights& attn = layer.attention;
  const std::string a = prefix + "self_attn.";
  if (c.q_lora_rank) {
    attn.q_a_proj = get_linear(lookup, a + "q_a_proj");
    attn.q_a_layernorm = get(lookup, a + "q_a_layernorm.weight");
    attn.q_b_proj = get_linear(lookup, a + "q_b_proj");
  } else {
    attn.q_proj = get_linear(lookup, a + "q_proj");
  }
  attn.kv_a_proj_with_mqa = get_linear(lookup, a + "kv_a_proj_with_mqa");
  attn.kv_a_layernorm = get(lookup, a + "kv_a_layernorm.weight");
  attn.kv_b_proj = get_linear(lookup, a + "kv_b_proj");
  attn.o_proj = get_linear(lookup, a + "o_proj");
  if (!c.is_moe_layer(index)) {
    layer.dense_mlp = get_mlp(lookup, prefix + "mlp");
    return layer;
  }
  MoeWeights moe;
  moe.gate = get(lookup, prefix + "mlp.gate.weight");
  moe.e_score_correction_bias = get(lookup, prefix + "mlp.gate.e_score_correction_bias");
  for (int64_t e = 0; e < c.n_routed_experts; ++e) {
    moe.experts.push_back(get_mlp(lookup, prefix + "mlp.experts." + std::to_string(e)));
  }
  if (c.n_shared_experts > 0) moe.shared = get_mlp(lookup, prefix + "mlp.shared_experts");
  layer.moe = std::move(moe);
  return layer;
}

}  // namespace

bool checkpoint_has_mtp(const ModelConfig& config, const TensorLookup& lookup) {
  if (config.num_nextn_predict_layers < 1) return false;
  return lookup("model.layers." + std::to_string(config.num_hidden_layers) + ".eh_proj.weight").has_value();
}

void validate_tensors(const ModelConfig& config, const TensorLookup& lookup, bool with_mtp,
                      const std::string& source_description) {
  std::vector<TensorSpec> specs = main_model_tensor_specs(config);
  if (with_mtp) {
    std::vector<TensorSpec> mtp = mtp_tensor_specs(config);
    specs.insert(specs.end(), mtp.begin(), mtp.end());
  }
  std::vector<std::string> problems;
  for (const TensorSpec& spec : specs) check_spec(spec, lookup, &problems);
  if (problems.empty()) return;
  std::ostringstream message;
  message << source_description << ": " << problems.size() << " problem(s) with the checkpoint tensors:";
  for (const std::string& problem : problems) message << "\n  - " << problem;
  FATHOM_FAIL(message.str());
}

ModelWeights assemble_weights(const ModelConfig& config, const TensorLookup& lookup, bool with_mtp) {
  ModelWeights weights;
  weights.embed_tokens = get(lookup, "model.embed_tokens.weight");
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) weights.layers.push_back(get_layer(config, lookup, layer));
  weights.norm = get(lookup, "model.norm.weight");
  if (config.tie_word_embeddings) {
    weights.lm_head.name = "model.embed_tokens";
    weights.lm_head.weight = weights.embed_tokens;
    weights.lm_head.rows = config.vocab_size;
    weights.lm_head.cols = config.hidden_size;
  } else {
    weights.lm_head = get_linear(lookup, "lm_head");
  }
  if (with_mtp) {
    const std::string prefix = "model.layers." + std::to_string(config.num_hidden_layers) + ".";
    MtpWeights mtp;
    mtp.enorm = get(lookup, prefix + "enorm.weight");
    mtp.hnorm = get(lookup, prefix + "hnorm.weight");
    mtp.eh_proj = get_linear(lookup, prefix + "eh_proj");
    mtp.shared_head_norm = get(lookup, prefix + "shared_head.norm.weight");
    mtp.layer = get_layer(config, lookup, config.num_hidden_layers);
    weights.mtp = std::move(mtp);
  }
  return weights;
}

LoadFormat parse_load_format(const std::string& name) {
  if (name == "auto" || name == "safetensors") return LoadFormat::kSafetensors;
  if (name == "dummy") return LoadFormat::kDummy;
  FATHOM_FAIL("unknown --load-format '" << name << "' (expected auto, safetensors or dummy)");
}

LoadedModel load_model(const LoadOptions& options) {
  LoadedModel loaded;
  loaded.config = load_model_config(options.model_dir, options.override_config);
  if (options.format == LoadFormat::kDummy) {
    auto tensors = std::make_shared<DummyTensors>(make_dummy_tensors(loaded.config, options.dummy_seed, options.load_mtp));
    TensorLookup lookup = [tensors](const std::string& name) { return tensors->find(name); };
    const bool with_mtp = checkpoint_has_mtp(loaded.config, lookup);
    validate_tensors(loaded.config, lookup, with_mtp, "dummy weights");
    loaded.weights = assemble_weights(loaded.config, lookup, with_mtp);
    loaded.storage = tensors;
    return loaded;
  }
  auto checkpoint = std::make_shared<Checkpoint>(Checkpoint::open(options.model_dir));
  TensorLookup lookup = [checkpoint](const std::string& name) -> std::optional<Tensor> {
    if (!checkpoint->contains(name)) return std::nullopt;
    return checkpoint->tensor(name);
  };
  const bool with_mtp = options.load_mtp && checkpoint_has_mtp(loaded.config, lookup);
  validate_tensors(loaded.config, lookup, with_mtp, options.model_dir);
  loaded.weights = assemble_weights(loaded.config, lookup, with_mtp);
  loaded.storage = checkpoint;
  return loaded;
}

}  // namespace fathom::model
