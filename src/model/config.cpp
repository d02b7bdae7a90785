#include "model/config.h"

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"

namespace fathom::model {

using nlohmann::json;

namespace {

const json* find_field(const json& object, const std::string& key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

int64_t require_int(const json& object, const std::string& key, const std::string& context = "") {
  const json* value = find_field(object, key);
  FATHOM_CHECK(value, "config.json: missing required field '" << context << key << "'");
  FATHOM_CHECK(value->is_number_integer() || (value->is_number_float() && std::floor(value->get<double>()) == value->get<double>()),
               "config.json: field '" << context << key << "' must be an integer, got " << value->dump());
  return value->is_number_integer() ? value->get<int64_t>() : static_cast<int64_t>(value->get<double>());
}

int64_t optional_int(const json& object, const std::string& key, int64_t fallback) {
  return find_field(object, key) ? require_int(object, key) : fallback;
}

double require_number(const json& object, const std::string& key, const std::string& context = "") {
  const json* value = find_field(object, key);
  FATHOM_CHECK(value, "config.json: missing required field '" << context << key << "'");
  FATHOM_CHECK(value->is_number(), "config.json: field '" << context << key << "' must be a number, got " << value->dump());
  return value->get<double>();
}

double optional_number(const json& object, const std::string& key, double fallback, const std::string& context = "") {
  return find_field(object, key) ? require_number(object, key, context) : fallback;
}

bool optional_bool(const json& object, const std::string& key, bool fallback) {
  const json* value = find_field(object, key);
  if (!value) return fallback;
  FATHOM_CHECK(value->is_boolean(), "config.json: field '" << key << "' must be true or false, got " << value->dump());
  return value->get<bool>();
}

std::string optional_string(const json& object, const std::string& key, const std::string& fallback) {
  const json* value = find_field(object, key);
  if (!value) return fallback;
  FATHOM_CHECK(value->is_string(), "config.json: field '" << key << "' must be a string, got " << value->dump());
  return value->get<std::string>();
}

void require_positive(int64_t value, const std::string& key) {
  FATHOM_CHECK(value > 0, "config.json: field '" << key << "' must be positive, got " << value);
}

std::optional<YarnRopeScaling> parse_rope_scaling(const json& config) {
  // Legacy (v4) configs use "rope_scaling"; transformers v5 writes "rope_parameters".
  const json* rope = find_field(config, "rope_scaling");
  std::string field = "rope_scaling";
  if (!rope) {
    rope = find_field(config, "rope_parameters");
    field = "rope_parameters";
  }
  if (!rope) return std::nullopt;
  FATHOM_CHECK(rope->is_object(), "config.json: field '" << field << "' must be an object");
  std::string type = optional_string(*rope, "type", optional_string(*rope, "rope_type", "default"));
  if (type == "default") return std::nullopt;
  FATHOM_CHECK(type == "yarn", "config.json: unsupported " << field << ".type '" << type << "' (supported: yarn, default)");
  const std::string context = field + ".";
  YarnRopeScaling yarn;
  yarn.factor = require_number(*rope, "factor", context);
  FATHOM_CHECK(yarn.factor >= 1.0, "config.json: field '" << context << "factor' must be >= 1, got " << yarn.factor);
  yarn.original_max_position_embeddings = require_int(*rope, "original_max_position_embeddings", context);
  require_positive(yarn.original_max_position_embeddings, context + "original_max_position_embeddings");
  yarn.beta_fast = optional_number(*rope, "beta_fast", 32.0, context);
  yarn.beta_slow = optional_number(*rope, "beta_slow", 1.0, context);
  yarn.mscale = optional_number(*rope, "mscale", 0.0, context);
  yarn.mscale_all_dim = optional_number(*rope, "mscale_all_dim", 0.0, context);
  FATHOM_CHECK(std::isfinite(yarn.factor), "config.json: field '" << context << "factor' must be finite");
  for (auto [value, key] : {std::pair{yarn.beta_fast, "beta_fast"}, {yarn.beta_slow, "beta_slow"}}) {
    FATHOM_CHECK(std::isfinite(value) && value > 0.0,
                 "config.json: field '" << context << key << "' must be a positive number, got " << value);
  }
  return yarn;
}

std::optional<Fp8QuantConfig> parse_quantization(const json& config) {
  const json* quant = find_field(config, "quantization_config");
  if (!quant) return std::nullopt;
  FATHOM_CHECK(quant->is_object(), "config.json: field 'quantization_config' must be an object");
  std::string method = optional_string(*quant, "quant_method", "");
  FATHOM_CHECK(method == "fp8", "config.json: unsupported quantization_config.quant_method '" << method << "' (supported: fp8)");
  std::string format = optional_string(*quant, "fmt", "e4m3");
  FATHOM_CHECK(format == "e4m3", "config.json: unsupported quantization_config.fmt '" << format << "' (supported: e4m3)");
  std::string activation = optional_string(*quant, "activation_scheme", "dynamic");
  FATHOM_CHECK(activation == "dynamic",
               "config.json: unsupported quantization_config.activation_scheme '" << activation << "' (supported: dynamic)");
  std::string scale_format = optional_string(*quant, "scale_fmt", "");
  FATHOM_CHECK(scale_format.empty() || scale_format == "ue8m0" || scale_format == "float32",
               "config.json: unsupported quantization_config.scale_fmt '" << scale_format << "'");
  Fp8QuantConfig fp8;
  const json* block = find_field(*quant, "weight_block_size");
  FATHOM_CHECK(block, "config.json: missing required field 'quantization_config.weight_block_size'");
  FATHOM_CHECK(block->is_array() && block->size() == 2 && (*block)[0].is_number_integer() && (*block)[1].is_number_integer(),
               "config.json: field 'quantization_config.weight_block_size' must be [rows, cols], got " << block->dump());
  fp8.block_rows = (*block)[0].get<int64_t>();
  fp8.block_cols = (*block)[1].get<int64_t>();
  FATHOM_CHECK(fp8.block_rows == 128 && fp8.block_cols == 128,
               "config.json: unsupported quantization_config.weight_block_size " << block->dump() << " (supported: [128, 128])");
  return fp8;
}

// The fields parse_model_config reads: an override of anything else would change nothing, so it is refused.
void check_override_fields(const json& overrides) {
  static const std::set<std::string> kTopLevel = {
      "architectures", "attention_bias", "bos_token_id", "eos_token_id", "first_k_dense_replace", "hidden_act",
      "hidden_size", "intermediate_size", "kv_lora_rank", "max_position_embeddings", "model_type", "moe_intermediate_size",
      "moe_layer_freq", "n_group", "n_routed_experts", "n_shared_experts", "norm_topk_prob", "num_attention_heads",
      "num_experts_per_tok", "num_hidden_layers", "num_key_value_heads", "num_nextn_predict_layers", "q_lora_rank",
      "qk_nope_head_dim", "qk_rope_head_dim", "quantization_config", "rms_norm_eps", "rope_interleave", "rope_parameters",
      "rope_scaling", "rope_theta", "routed_scaling_factor", "scoring_func", "tie_word_embeddings", "topk_group",
      "topk_method", "v_head_dim", "vocab_size"};
  static const std::set<std::string> kRope = {"type", "rope_type", "factor", "original_max_position_embeddings", "beta_fast",
                                              "beta_slow", "mscale", "mscale_all_dim", "rope_theta"};
  static const std::set<std::string> kQuantization = {"quant_method", "fmt", "activation_scheme", "scale_fmt",
                                                      "weight_block_size"};
  auto check = [](const json& object, const std::set<std::string>& known, const std::string& prefix) {
    for (auto it = object.begin(); it != object.end(); ++it) {
      if (known.count(it.key())) continue;
      std::string listing;
      for (const std::string& name : known) listing += (listing.empty() ? "" : ", ") + name;
      FATHOM_FAIL("--override-config: fathom does not read the field '" << prefix << it.key() << "' (known: " << listing
                                                                          << ")");
    }
  };
  check(overrides, kTopLevel, "");
  for (const char* rope_field : {"rope_scaling", "rope_parameters"}) {
    if (overrides.contains(rope_field) && overrides[rope_field].is_object()) {
      check(overrides[rope_field], kRope, std::string(rope_field) + ".");
    }
  }
  if (overrides.contains("quantization_config") && overrides["quantization_config"].is_object()) {
    check(overrides["quantization_config"], kQuantization, "quantization_config.");
  }
}

}  // namespace

double yarn_get_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

double ModelConfig::attention_softmax_scale() const {
  double scale = 1.0 / std::sqrt(static_cast<double>(qk_head_dim()));
  if (yarn && yarn->mscale_all_dim != 0.0) {
    double m = yarn_get_mscale(yarn->factor, yarn->mscale_all_dim);
    scale *= m * m;
  }
  return scale;
}

json merge_config_json(json base, const json& overrides) {
  if (!overrides.is_object() || !base.is_object()) return overrides;
  for (auto it = overrides.begin(); it != overrides.end(); ++it) {
    if (it->is_object() && base.contains(it.key()) && base[it.key()].is_object()) {
      base[it.key()] = merge_config_json(base[it.key()], *it);
    } else {
      base[it.key()] = *it;
    }
  }
  return base;
}

ModelConfig parse_model_config(const json& config) {
  FATHOM_CHECK(config.is_object(), "config.json: top level must be a JSON object");
  ModelConfig c;
  const json* architectures = find_field(config, "architectures");
  if (architectures) {
    FATHOM_CHECK(architectures->is_array(), "config.json: field 'architectures' must be a list");
    bool supported = false;
    for (const json& name : *architectures) {
      if (name == "DeepseekV3ForCausalLM") supported = true;
    }
    FATHOM_CHECK(supported, "config.json: unsupported architectures " << architectures->dump()
                                                                      << " (supported: DeepseekV3ForCausalLM)");
  }
  c.model_type = optional_string(config, "model_type", "deepseek_v3");
  FATHOM_CHECK(c.model_type == "deepseek_v3",
               "config.json: unsupported model_type '" << c.model_type << "' (supported: deepseek_v3)");

  c.vocab_size = require_int(config, "vocab_size");
  c.hidden_size = require_int(config, "hidden_size");
  c.intermediate_size = require_int(config, "intermediate_size");
  c.num_hidden_layers = require_int(config, "num_hidden_layers");
  c.num_nextn_predict_layers = optional_int(config, "num_nextn_predict_layers", 0);
  c.num_attention_heads = require_int(config, "num_attention_heads");
  int64_t kv_heads = optional_int(config, "num_key_value_heads", c.num_attention_heads);
  FATHOM_CHECK(kv_heads == c.num_attention_heads,
               "config.json: field 'num_key_value_heads' must equal num_attention_heads for MLA, got " << kv_heads);
  if (find_field(config, "q_lora_rank")) c.q_lora_rank = require_int(config, "q_lora_rank");
  c.kv_lora_rank = require_int(config, "kv_lora_rank");
  c.qk_nope_head_dim = require_int(config, "qk_nope_head_dim");
  c.qk_rope_head_dim = require_int(config, "qk_rope_head_dim");
  c.v_head_dim = require_int(config, "v_head_dim");
  c.n_routed_experts = optional_int(config, "n_routed_experts", 0);
  c.n_shared_experts = optional_int(config, "n_shared_experts", 0);
  c.num_experts_per_tok = optional_int(config, "num_experts_per_tok", 0);
  c.moe_intermediate_size = optional_int(config, "moe_intermediate_size", 0);
  c.n_group = optional_int(config, "n_group", 1);
  c.topk_group = optional_int(config, "topk_group", 1);
  c.first_k_dense_replace = optional_int(config, "first_k_dense_replace", 0);
  c.moe_layer_freq = optional_int(config, "moe_layer_freq", 1);
  c.norm_topk_prob = optional_bool(config, "norm_topk_prob", true);
  c.routed_scaling_factor = optional_number(config, "routed_scaling_factor", 1.0);
  c.scoring_func = optional_string(config, "scoring_func", "sigmoid");
  c.topk_method = optional_string(config, "topk_method", "noaux_tc");
  c.rms_norm_eps = optional_number(config, "rms_norm_eps", 1e-6);
  c.rope_theta = optional_number(config, "rope_theta", 10000.0);
  if (!find_field(config, "rope_theta")) {  // transformers v5 keeps it in rope_parameters
    const json* rope = find_field(config, "rope_parameters");
    if (rope && rope->is_object()) c.rope_theta = optional_number(*rope, "rope_theta", c.rope_theta, "rope_parameters.");
  }
  c.max_position_embeddings = optional_int(config, "max_position_embeddings", 4096);
  c.tie_word_embeddings = optional_bool(config, "tie_word_embeddings", false);
  c.rope_interleave = optional_bool(config, "rope_interleave", true);
  c.bos_token_id = optional_int(config, "bos_token_id", 0);
  if (const json* eos = find_field(config, "eos_token_id")) {
    if (eos->is_array()) {
      for (const json& id : *eos) {
        FATHOM_CHECK(id.is_number_integer(), "config.json: field 'eos_token_id' must hold integers, got " << eos->dump());
        c.eos_token_ids.push_back(id.get<int64_t>());
      }
    } else {
      c.eos_token_ids.push_back(require_int(config, "eos_token_id"));
    }
  }

  std::string hidden_act = optional_string(config, "hidden_act", "silu");
  FATHOM_CHECK(hidden_act == "silu", "config.json: unsupported hidden_act '" << hidden_act << "' (supported: silu)");
  FATHOM_CHECK(!optional_bool(config, "attention_bias", false), "config.json: unsupported attention_bias true (supported: false)");
  FATHOM_CHECK(c.scoring_func == "sigmoid", "config.json: unsupported scoring_func '" << c.scoring_func << "' (supported: sigmoid)");
  FATHOM_CHECK(c.topk_method == "noaux_tc", "config.json: unsupported topk_method '" << c.topk_method << "' (supported: noaux_tc)");

  for (auto [value, key] : {std::pair{c.vocab_size, "vocab_size"}, {c.hidden_size, "hidden_size"},
                            {c.num_hidden_layers, "num_hidden_layers"}, {c.num_attention_heads, "num_attention_heads"},
                            {c.kv_lora_rank, "kv_lora_rank"}, {c.qk_nope_head_dim, "qk_nope_head_dim"},
                            {c.qk_rope_head_dim, "qk_rope_head_dim"}, {c.v_head_dim, "v_head_dim"},
                            {c.moe_layer_freq, "moe_layer_freq"}, {c.n_group, "n_group"}, {c.topk_group, "topk_group"}}) {
    require_positive(value, key);
  }
  for (auto [value, key] : {std::pair{c.n_routed_experts, "n_routed_experts"}, {c.n_shared_experts, "n_shared_experts"},
                            {c.num_experts_per_tok, "num_experts_per_tok"}, {c.moe_intermediate_size, "moe_intermediate_size"},
                            {c.intermediate_size, "intermediate_size"}}) {
    FATHOM_CHECK(value >= 0, "config.json: field '" << key << "' must be >= 0, got " << value);
  }
  require_positive(c.max_position_embeddings, "max_position_embeddings");
  for (auto [value, key] : {std::pair{c.rope_theta, "rope_theta"}, {c.rms_norm_eps, "rms_norm_eps"},
                            {c.routed_scaling_factor, "routed_scaling_factor"}}) {
    FATHOM_CHECK(std::isfinite(value) && value > 0.0, "config.json: field '" << key << "' must be a positive number, got " << value);
  }
  FATHOM_CHECK(c.qk_rope_head_dim % 2 == 0, "config.json: field 'qk_rope_head_dim' must be even, got " << c.qk_rope_head_dim);
  if (c.q_lora_rank) require_positive(*c.q_lora_rank, "q_lora_rank");
  FATHOM_CHECK(c.num_nextn_predict_layers >= 0 && c.num_nextn_predict_layers <= 1,
               "config.json: unsupported num_nextn_predict_layers " << c.num_nextn_predict_layers << " (supported: 0 or 1)");
  FATHOM_CHECK(c.first_k_dense_replace >= 0, "config.json: field 'first_k_dense_replace' must be >= 0");
  bool has_dense_layer = c.first_k_dense_replace > 0 || c.n_routed_experts == 0 || c.moe_layer_freq > 1;
  if (has_dense_layer) require_positive(c.intermediate_size, "intermediate_size");
  if (c.n_routed_experts > 0) {
    require_positive(c.moe_intermediate_size, "moe_intermediate_size");
    require_positive(c.num_experts_per_tok, "num_experts_per_tok");
    FATHOM_CHECK(c.n_routed_experts % c.n_group == 0,
                 "config.json: field 'n_group' (" << c.n_group << ") must divide n_routed_experts (" << c.n_routed_experts << ")");
    FATHOM_CHECK(c.topk_group <= c.n_group,
                 "config.json: field 'topk_group' (" << c.topk_group << ") must be <= n_group (" << c.n_group << ")");
    int64_t experts_per_group = c.n_routed_experts / c.n_group;
    FATHOM_CHECK(experts_per_group >= 2 || c.n_group == 1,
                 "config.json: field 'n_group' leaves fewer than 2 experts per group (group score sums the top 2)");
    FATHOM_CHECK(c.num_experts_per_tok <= c.topk_group * experts_per_group,
                 "config.json: field 'num_experts_per_tok' (" << c.num_experts_per_tok
                     << ") exceeds the experts in the kept groups (" << c.topk_group * experts_per_group << ")");
  }
  c.yarn = parse_rope_scaling(config);
  c.fp8 = parse_quantization(config);
  return c;
}

json load_config_json(const std::string& model_dir, const std::string& override_json) {
  std::string path = model_dir + "/config.json";
  std::ifstream file(path);
  FATHOM_CHECK(file.good(), "cannot open " << path);
  std::stringstream buffer;
  buffer << file.rdbuf();
  json config = json::parse(buffer.str(), nullptr, /*allow_exceptions=*/false);
  FATHOM_CHECK(!config.is_discarded(), path << ": not valid JSON");
  if (!override_json.empty()) {
    json overrides = json::parse(override_json, nullptr, false);
    FATHOM_CHECK(!overrides.is_discarded() && overrides.is_object(),
                 "--override-config must be a JSON object, got '" << override_json << "'");
    check_override_fields(overrides);
    config = merge_config_json(std::move(config), overrides);
  }
  return config;
}

ModelConfig load_model_config(const std::string& model_dir, const std::string& override_json) {
  return parse_model_config(load_config_json(model_dir, override_json));
}

}  // namespace fathom::model
