#include "test_support.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>

namespace fathom::tokenizer::testing {

std::string deepseek_dir(DeepSeekVariant variant) {
  const std::string root = std::string(FATHOM_SHARED_DATA_DIR) + "/deepseek-v3";
  return variant == DeepSeekVariant::kR1 ? root : root + "/hf-deepseek-v3";
}

bool have_deepseek_data() {
  return std::filesystem::is_regular_file(deepseek_dir(DeepSeekVariant::kR1) + "/tokenizer.json") &&
         std::filesystem::is_regular_file(deepseek_dir(DeepSeekVariant::kV3) + "/tokenizer.json");
}

const Tokenizer& deepseek(DeepSeekVariant variant) {
  static std::mutex mutex;
  static std::map<DeepSeekVariant, Tokenizer> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = loaded.find(variant);
  if (it == loaded.end()) {
    it = loaded.emplace(variant, Tokenizer::load(deepseek_dir(variant)).with_model_vocab_size(129280)).first;
  }
  return it->second;
}

std::string read_text_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("cannot open " + path);
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

nlohmann::json read_json_file(const std::string& path) { return nlohmann::json::parse(read_text_file(path)); }

std::string tokenizer_data_path(const std::string& name) {
  return std::string(FATHOM_SOURCE_DIR) + "/tests/tokenizer/data/" + name;
}

}  // namespace fathom::tokenizer::testing
