#pragma once
// Small DeepSeek-V3-shaped configs and checkpoints written to temporary directories for the model tests.
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/dummy_weights.h"
#include "model/safetensors.h"

namespace fathom::testing {

// q_lora, YaRN, partial 128-blocks (kv_a has 192 rows), 1 dense + 2 MoE layers + MTP.
inline nlohmann::json tiny_config_json() {
  return nlohmann::json::parse(R"({
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "vocab_size": 300, "hidden_size": 200, "intermediate_size": 320, "moe_intermediate_size": 72,
    "num_hidden_layers": 3, "num_nextn_predict_layers": 1, "num_attention_heads": 3, "num_key_value_heads": 3,
    "q_lora_rank": 96, "kv_lora_rank": 160, "qk_nope_head_dim": 32, "qk_rope_head_dim": 32, "v_head_dim": 24,
    "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 3, "n_group": 4, "topk_group": 2,
    "first_k_dense_replace": 1, "moe_layer_freq": 1, "norm_topk_prob": true, "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid", "topk_method": "noaux_tc", "rms_norm_eps": 1e-6, "rope_theta": 10000,
    "max_position_embeddings": 256, "bos_token_id": 0, "eos_token_id": 1, "tie_word_embeddings": false,
    "rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 64, "beta_fast": 32,
                     "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707},
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                            "weight_block_size": [128, 128]}
  })");
}

class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    path_ = std::filesystem::temp_directory_path() /
            ("fathom-test-" + tag + "-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
             std::to_string(reinterpret_cast<uintptr_t>(this)));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void write_config(const std::string& dir, const nlohmann::json& config) {
  std::ofstream(dir + "/config.json") << config.dump(2);
}

// Writes the tensors as a checkpoint: one file, or `num_shards` files plus model.safetensors.index.json.
inline void write_checkpoint(const std::string& dir, const std::map<std::string, Tensor>& tensors, int num_shards = 1) {
  if (num_shards == 1) {
    std::vector<std::pair<std::string, Tensor>> list(tensors.begin(), tensors.end());
    model::write_safetensors(dir + "/model.safetensors", list);
    return;
  }
  std::vector<std::vector<std::pair<std::string, Tensor>>> shards(static_cast<size_t>(num_shards));
  nlohmann::json weight_map = nlohmann::json::object();
  size_t index = 0;
  for (const auto& [name, tensor] : tensors) {
    const size_t shard = index++ % static_cast<size_t>(num_shards);
    shards[shard].push_back({name, tensor});
    char file_name[64];
    std::snprintf(file_name, sizeof(file_name), "model-%05zu-of-%05d.safetensors", shard + 1, num_shards);
    weight_map[name] = file_name;
  }
  for (size_t shard = 0; shard < shards.size(); ++shard) {
    char file_name[64];
    std::snprintf(file_name, sizeof(file_name), "model-%05zu-of-%05d.safetensors", shard + 1, num_shards);
    model::write_safetensors(dir + "/" + file_name, shards[shard]);
  }
  std::ofstream(dir + "/model.safetensors.index.json") << nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump(2);
}

}  // namespace fathom::testing
