#pragma once
// Shared helpers for the tokenizer tests: data paths, JSON files, and the DeepSeek tokenizers
// (loaded once per test process, since each load parses ~8 MB of JSON).
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace fathom::tokenizer::testing {

enum class DeepSeekVariant { kR1, kV3 };  // top-level tokenizer.json (with <think>) / hf-deepseek-v3/

std::string deepseek_dir(DeepSeekVariant variant);
bool have_deepseek_data();
// Loaded from deepseek_dir; model_vocab_size is 129280 for both (the model's embedding rows).
const Tokenizer& deepseek(DeepSeekVariant variant);

std::string read_text_file(const std::string& path);
nlohmann::json read_json_file(const std::string& path);
std::string tokenizer_data_path(const std::string& name);  // tests/tokenizer/data/<name>

}  // namespace fathom::tokenizer::testing

#define FATHOM_REQUIRE_DEEPSEEK_DATA()                                                              \
  do {                                                                                              \
    if (!::fathom::tokenizer::testing::have_deepseek_data())                                        \
      GTEST_SKIP() << "DeepSeek tokenizer data not found at " FATHOM_SHARED_DATA_DIR "/deepseek-v3"; \
  } while (0)
