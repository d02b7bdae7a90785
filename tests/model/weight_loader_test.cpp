#include "model/weight_loader.h"

#include <cstring>

#include <gtest/gtest.h>

#include "core/error.h"
#include "model/weight_spec.h"
#include "tiny_model.h"

namespace fathom::model {
namespace {

using fathom::testing::TempDir;

std::map<std::string, Tensor> tiny_tensors(uint64_t seed = 7) {
  return make_dummy_tensors(parse_model_config(fathom::testing::tiny_config_json()), seed, true).all();
}

TEST(DummyWeights, DeterministicPerSeedWithCheckpointDtypes) {
  auto a = tiny_tensors(7), b = tiny_tensors(7), c = tiny_tensors(8);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, tensor] : a) {
    ASSERT_EQ(std::memcmp(tensor.raw(), b.at(name).raw(), tensor.nbytes()), 0) << name;
  }
  EXPECT_NE(std::memcmp(a.at("model.layers.0.mlp.up_proj.weight").raw(), c.at("model.layers.0.mlp.up_proj.weight").raw(),
                        a.at("model.layers.0.mlp.up_proj.weight").nbytes()), 0);
  EXPECT_EQ(a.at("model.layers.1.self_attn.kv_a_proj_with_mqa.weight").dtype(), DType::F8_E4M3);
  EXPECT_EQ(a.at("model.layers.1.self_attn.kv_a_proj_with_mqa.weight_scale_inv").shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(a.at("model.layers.3.eh_proj.weight").dtype(), DType::BF16);
  EXPECT_EQ(a.at("model.embed_tokens.weight").dtype(), DType::BF16);
  EXPECT_EQ(a.at("model.layers.2.mlp.gate.e_score_correction_bias").dtype(), DType::F32);
  EXPECT_TRUE(a.count("model.layers.3.mlp.experts.7.down_proj.weight_scale_inv"));
}

TEST(WeightLoader, LoadsAShardedCheckpointWithMtp) {
  TempDir dir("loader-ok");
  fathom::testing::write_config(dir.path(), fathom::testing::tiny_config_json());
  fathom::testing::write_checkpoint(dir.path(), tiny_tensors(), 3);
  LoadOptions options;
  options.model_dir = dir.path();
  LoadedModel loaded = load_model(options);
  EXPECT_EQ(loaded.weights.layers.size(), 3u);
  EXPECT_TRUE(loaded.weights.layers[0].dense_mlp.has_value());
  ASSERT_TRUE(loaded.weights.layers[1].moe.has_value());
  EXPECT_EQ(loaded.weights.layers[1].moe->experts.size(), 8u);
  ASSERT_TRUE(loaded.weights.mtp.has_value());
  EXPECT_TRUE(loaded.weights.mtp->layer.moe.has_value());
  options.load_mtp = false;
  EXPECT_FALSE(load_model(options).weights.mtp.has_value());
}

TEST(WeightLoader, ReportsEveryProblemAtOnce) {
  TempDir dir("loader-bad");
  fathom::testing::write_config(dir.path(), fathom::testing::tiny_config_json());
  auto tensors = tiny_tensors();
  tensors.erase("model.layers.1.self_attn.kv_b_proj.weight");
  tensors["model.norm.weight"] = Tensor::allocate(DType::BF16, {199});
  tensors["model.layers.0.input_layernorm.weight"] = Tensor::allocate(DType::I32, {200});
  tensors.erase("model.layers.2.mlp.experts.3.up_proj.weight_scale_inv");
  tensors["model.layers.0.self_attn.o_proj.weight_scale_inv"] = Tensor::allocate(DType::F32, {1, 1});
  fathom::testing::write_checkpoint(dir.path(), tensors, 1);
  LoadOptions options;
  options.model_dir = dir.path();
  try {
    load_model(options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("5 problem(s)"), std::string::npos) << message;
    EXPECT_NE(message.find("missing tensor 'model.layers.1.self_attn.kv_b_proj.weight' (expected shape [168, 160])"), std::string::npos) << message;
    EXPECT_NE(message.find("tensor 'model.norm.weight' has shape [199], expected [200]"), std::string::npos) << message;
    EXPECT_NE(message.find("tensor 'model.layers.0.input_layernorm.weight' has dtype I32, expected BF16, F16 or F32"), std::string::npos) << message;
    EXPECT_NE(message.find("missing tensor 'model.layers.2.mlp.experts.3.up_proj.weight_scale_inv'"), std::string::npos) << message;
    EXPECT_NE(message.find("tensor 'model.layers.0.self_attn.o_proj.weight_scale_inv' is F32 [1, 1], expected F32 [2, 1]"), std::string::npos) << message;
    EXPECT_NE(message.find(dir.path()), std::string::npos) << message;
  }
}

TEST(WeightLoader, MtpIsLoadedOnlyWhenPresent) {
  TempDir dir("loader-nomtp");
  fathom::testing::write_config(dir.path(), fathom::testing::tiny_config_json());
  auto tensors = tiny_tensors();
  for (auto it = tensors.begin(); it != tensors.end();) {
    it = it->first.rfind("model.layers.3.", 0) == 0 ? tensors.erase(it) : std::next(it);
  }
  fathom::testing::write_checkpoint(dir.path(), tensors, 1);
  LoadOptions options;
  options.model_dir = dir.path();
  EXPECT_FALSE(load_model(options).weights.mtp.has_value());
}

TEST(WeightLoader, OverrideConfigDropsLayers) {
  TempDir dir("loader-override");
  fathom::testing::write_config(dir.path(), fathom::testing::tiny_config_json());
  fathom::testing::write_checkpoint(dir.path(), tiny_tensors(), 1);
  LoadOptions options;
  options.model_dir = dir.path();
  options.override_config = R"({"num_hidden_layers": 2})";
  LoadedModel loaded = load_model(options);
  EXPECT_EQ(loaded.weights.layers.size(), 2u);
  EXPECT_FALSE(loaded.weights.mtp.has_value());  // layer 2 is a plain decoder layer, not an MTP module
}

TEST(WeightSpec, Fp8ScaleShapeCoversPartialBlocks) {
  EXPECT_EQ(fp8_scale_shape({576, 7168}), (std::vector<int64_t>{5, 56}));
  EXPECT_EQ(fp8_scale_shape({1, 1}), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(fp8_scale_shape({128, 129}), (std::vector<int64_t>{1, 2}));
}

TEST(WeightSpec, V3SpecCountsMatchTheOfficialLayout) {
  ModelConfig c = load_model_config(std::string(FATHOM_SHARED_DATA_DIR) + "/deepseek-v3", "");
  std::vector<TensorSpec> main = main_model_tensor_specs(c);
  // 3 dense layers × (9 attention/norm + 3 MLP) + 58 MoE layers × (9 + 2 router + 256×3 experts + 3 shared) + 3.
  EXPECT_EQ(main.size(), 3u * 12 + 58u * (9 + 2 + 256 * 3 + 3) + 3);
  std::vector<TensorSpec> mtp = mtp_tensor_specs(c);
  EXPECT_EQ(mtp.front().name, "model.layers.61.enorm.weight");
}

}  // namespace
}  // namespace fathom::model
