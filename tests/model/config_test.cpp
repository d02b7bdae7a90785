#include "model/config.h"

#include <cmath>
#include <fstream>

#include <gtest/gtest.h>

#include "core/error.h"

namespace fathom::model {
namespace {

using nlohmann::json;

json official_v3_config() {
  std::ifstream file(std::string(FATHOM_SHARED_DATA_DIR) + "/deepseek-v3/config.json");
  EXPECT_TRUE(file.good()) << "shared data missing";
  return json::parse(file);
}

std::string error_of(const json& config) {
  try {
    parse_model_config(config);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, ParsesTheOfficialDeepSeekV3Config) {
  ModelConfig c = parse_model_config(official_v3_config());
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.num_hidden_layers, 61);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  ASSERT_TRUE(c.q_lora_rank.has_value());
  EXPECT_EQ(*c.q_lora_rank, 1536);
  EXPECT_EQ(c.kv_latent_dim(), 576);
  EXPECT_EQ(c.qk_head_dim(), 192);
  EXPECT_EQ(c.n_routed_experts, 256);
  EXPECT_EQ(c.n_group, 8);
  EXPECT_EQ(c.topk_group, 4);
  EXPECT_EQ(c.first_k_dense_replace, 3);
  EXPECT_FALSE(c.is_moe_layer(2));
  EXPECT_TRUE(c.is_moe_layer(3));
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
  ASSERT_TRUE(c.yarn.has_value());
  EXPECT_DOUBLE_EQ(c.yarn->factor, 40.0);
  EXPECT_EQ(c.yarn->original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c.yarn->mscale_all_dim, 1.0);
  ASSERT_TRUE(c.fp8.has_value());
  EXPECT_EQ(c.fp8->block_rows, 128);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{1});
  // 192^-0.5 * (0.1 * ln 40 + 1)^2
  const double m = 0.1 * std::log(40.0) + 1.0;
  EXPECT_NEAR(c.attention_softmax_scale(), m * m / std::sqrt(192.0), 1e-12);
}

TEST(ModelConfig, AcceptsV2StyleNullQLoraAndNoRopeScaling) {
  json config = official_v3_config();
  config["q_lora_rank"] = nullptr;
  config.erase("rope_scaling");
  config.erase("quantization_config");
  ModelConfig c = parse_model_config(config);
  EXPECT_FALSE(c.q_lora_rank.has_value());
  EXPECT_FALSE(c.yarn.has_value());
  EXPECT_FALSE(c.fp8.has_value());
  EXPECT_NEAR(c.attention_softmax_scale(), 1.0 / std::sqrt(192.0), 1e-12);
}

TEST(ModelConfig, OverridesMergeRecursively) {
  json merged = merge_config_json(official_v3_config(), json::parse(R"({"num_hidden_layers": 4, "rope_scaling": {"factor": 8}})"));
  ModelConfig c = parse_model_config(merged);
  EXPECT_EQ(c.num_hidden_layers, 4);
  EXPECT_DOUBLE_EQ(c.yarn->factor, 8.0);
  EXPECT_EQ(c.yarn->original_max_position_embeddings, 4096);  // untouched sibling kept
}

TEST(ModelConfig, ReadsTransformersV5RopeParameters) {
  json config = official_v3_config();
  config.erase("rope_scaling");
  config["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64},
                               {"rope_theta", 10000.0}};
  ModelConfig c = parse_model_config(config);
  ASSERT_TRUE(c.yarn.has_value());
  EXPECT_DOUBLE_EQ(c.yarn->factor, 4.0);
}

TEST(ModelConfig, ErrorsNameTheField) {
  struct Case { const char* patch; const char* expected; };
  const Case cases[] = {
      {R"({"architectures": ["LlamaForCausalLM"]})", "unsupported architectures [\"LlamaForCausalLM\"]"},
      {R"({"hidden_size": "big"})", "field 'hidden_size' must be an integer"},
      {R"({"hidden_size": null})", "missing required field 'hidden_size'"},
      {R"({"scoring_func": "softmax"})", "unsupported scoring_func 'softmax'"},
      {R"({"topk_method": "greedy"})", "unsupported topk_method 'greedy'"},
      {R"({"rope_scaling": {"type": "dynamic", "factor": 2}})", "unsupported rope_scaling.type 'dynamic'"},
      {R"({"rope_scaling": {"type": "yarn", "factor": 2, "original_max_position_embeddings": null}})", "missing required field 'rope_scaling.original_max_position_embeddings'"},
      {R"({"quantization_config": {"quant_method": "awq"}})", "unsupported quantization_config.quant_method 'awq'"},
      {R"({"quantization_config": {"quant_method": "fp8", "weight_block_size": [64, 64]}})", "weight_block_size [64,64]"},
      {R"({"quantization_config": {"quant_method": "fp8", "fmt": "e5m2", "weight_block_size": [128, 128]}})", "unsupported quantization_config.fmt 'e5m2'"},
      {R"({"n_group": 7})", "field 'n_group' (7) must divide n_routed_experts (256)"},
      {R"({"topk_group": 9})", "field 'topk_group' (9) must be <= n_group (8)"},
      {R"({"num_key_value_heads": 1})", "field 'num_key_value_heads' must equal num_attention_heads"},
      {R"({"hidden_act": "gelu"})", "unsupported hidden_act 'gelu'"},
      {R"({"num_nextn_predict_layers": 2})", "unsupported num_nextn_predict_layers 2"},
      {R"({"qk_rope_head_dim": 63})", "field 'qk_rope_head_dim' must be even"},
      {R"({"norm_topk_prob": "yes"})", "field 'norm_topk_prob' must be true or false"},
      {R"({"model_type": "llama"})", "unsupported model_type 'llama'"},
      {R"({"rope_theta": 0})", "field 'rope_theta' must be a positive number, got 0"},
      {R"({"rms_norm_eps": -1e-6})", "field 'rms_norm_eps' must be a positive number"},
      {R"({"routed_scaling_factor": 0.0})", "field 'routed_scaling_factor' must be a positive number"},
      {R"({"n_routed_experts": -8})", "field 'n_routed_experts' must be >= 0, got -8"},
      {R"({"n_shared_experts": -1})", "field 'n_shared_experts' must be >= 0"},
      {R"({"max_position_embeddings": 0})", "field 'max_position_embeddings' must be positive"},
      {R"({"rope_scaling": {"beta_slow": 0}})", "field 'rope_scaling.beta_slow' must be a positive number"},
  };
  for (const Case& c : cases) {
    const std::string message = error_of(merge_config_json(official_v3_config(), json::parse(c.patch)));
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.patch << " -> " << message;
  }
}

TEST(ModelConfig, LoadReportsBadOverrideAndMissingFile) {
  EXPECT_THROW(load_model_config("/nonexistent-dir", ""), Error);
  try {
    load_model_config(std::string(FATHOM_SHARED_DATA_DIR) + "/deepseek-v3", "{not json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--override-config must be a JSON object"), std::string::npos);
  }
  ModelConfig c = load_model_config(std::string(FATHOM_SHARED_DATA_DIR) + "/deepseek-v3", R"({"num_hidden_layers": 4})");
  EXPECT_EQ(c.num_hidden_layers, 4);
}

TEST(ModelConfig, OverrideOfAnUnreadFieldIsRefused) {
  const std::string dir = std::string(FATHOM_SHARED_DATA_DIR) + "/deepseek-v3";
  struct Case { const char* overrides; const char* expected; };
  const Case cases[] = {
      {R"({"rope_thetha": 5})", "does not read the field 'rope_thetha' (known: architectures,"},
      {R"({"use_cache": false})", "does not read the field 'use_cache'"},
      {R"({"rope_scaling": {"factr": 2}})", "does not read the field 'rope_scaling.factr'"},
      {R"({"quantization_config": {"block": [1, 1]}})", "does not read the field 'quantization_config.block'"},
  };
  for (const Case& c : cases) {
    try {
      load_model_config(dir, c.overrides);
      ADD_FAILURE() << c.overrides << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << c.overrides << " -> " << e.what();
    }
  }
  // Read fields, null included (null restores the default), are accepted.
  ModelConfig c = load_model_config(dir, R"({"rope_theta": 50000, "rope_scaling": null, "quantization_config": {"fmt": "e4m3"}})");
  EXPECT_DOUBLE_EQ(c.rope_theta, 50000.0);
  EXPECT_FALSE(c.yarn.has_value());
  ASSERT_TRUE(c.fp8.has_value());
}

TEST(ModelConfig, TransformersV5RopeThetaInRopeParameters) {
  json config = official_v3_config();
  config.erase("rope_scaling");
  config.erase("rope_theta");
  config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  EXPECT_DOUBLE_EQ(parse_model_config(config).rope_theta, 500000.0);
  config["rope_theta"] = 20000.0;  // a top-level value wins, as in v4 configs
  EXPECT_DOUBLE_EQ(parse_model_config(config).rope_theta, 20000.0);
}

TEST(ModelConfig, YarnMscale) {
  EXPECT_DOUBLE_EQ(yarn_get_mscale(1.0, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(yarn_get_mscale(0.5, 1.0), 1.0);
  EXPECT_NEAR(yarn_get_mscale(40.0, 0.707), 0.1 * 0.707 * std::log(40.0) + 1.0, 1e-15);
}

}  // namespace
}  // namespace fathom::model
