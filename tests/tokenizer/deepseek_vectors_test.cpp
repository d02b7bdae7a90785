// The shared DeepSeek-V3 conformance vectors (see shared/data/deepseek-v3/SOURCES.md) with both
// tokenizer.json files, plus the config-driven properties of the two bundles.
#include <gtest/gtest.h>

#include <sstream>

#include "test_support.h"

namespace fathom::tokenizer {
namespace {

using testing::DeepSeekVariant;

class DeepSeekVectors : public ::testing::TestWithParam<DeepSeekVariant> {};

TEST_P(DeepSeekVectors, EncodeVectorsJson) {
  FATHOM_REQUIRE_DEEPSEEK_DATA();
  const Tokenizer& tokenizer = testing::deepseek(GetParam());
  const auto vectors = testing::read_json_file(std::string(FATHOM_SHARED_DATA_DIR) + "/deepseek-v3/tests/deepseek_v3_encode_vectors.json");
  int checked = 0;
  for (const char* group : {"cases", "extra_cases"}) {
    for (const auto& test_case : vectors.at(group)) {
      const std::string input = test_case.at("input").get<std::string>();
      const auto expected = test_case.at("expected").get<std::vector<int32_t>>();
      EXPECT_EQ(tokenizer.encode(input, false), expected) << group << ": " << test_case.at("input").dump();
      EXPECT_EQ(tokenizer.decode(expected, false), input);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 79);
}

TEST_P(DeepSeekVectors, LlamaCppVocabTest) {
  FATHOM_REQUIRE_DEEPSEEK_DATA();
  const Tokenizer& tokenizer = testing::deepseek(GetParam());
  const std::string dir = std::string(FATHOM_SHARED_DATA_DIR) + "/deepseek-v3/tests/";
  const std::string inputs = testing::read_text_file(dir + "ggml-vocab-deepseek-v3.gguf.inp");
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t start = 0, end; (end = inputs.find(separator, start)) != std::string::npos; start = end + separator.size()) {
    texts.push_back(inputs.substr(start, end - start));
  }
  std::istringstream outputs(testing::read_text_file(dir + "ggml-vocab-deepseek-v3.gguf.out"));
  std::string line;
  size_t index = 0;
  for (; std::getline(outputs, line); ++index) {
    ASSERT_LT(index, texts.size());
    std::vector<int32_t> expected;
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) expected.push_back(id);
    EXPECT_EQ(tokenizer.encode(texts[index], false), expected) << "case " << index << ": " << nlohmann::json(texts[index]).dump();
    EXPECT_EQ(tokenizer.decode(expected, false), texts[index]);
  }
  EXPECT_EQ(index, 46u);
  EXPECT_EQ(texts.size(), 46u);
}

INSTANTIATE_TEST_SUITE_P(BothTokenizerFiles, DeepSeekVectors, ::testing::Values(DeepSeekVariant::kR1, DeepSeekVariant::kV3),
                         [](const auto& info) { return info.param == DeepSeekVariant::kR1 ? "R1" : "V3"; });

TEST(DeepSeekConfig, R1BundleHasThinkTokensAndNoBos) {
  FATHOM_REQUIRE_DEEPSEEK_DATA();
  const Tokenizer& tokenizer = testing::deepseek(DeepSeekVariant::kR1);
  EXPECT_EQ(tokenizer.vocab_size(), 128815);
  EXPECT_FALSE(tokenizer.add_bos_token());
  EXPECT_EQ(tokenizer.bos_token(), "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(tokenizer.eos_token(), "<｜end▁of▁sentence｜>");
  EXPECT_EQ(tokenizer.bos_token_id(), 0);
  EXPECT_EQ(tokenizer.eos_token_id(), 1);
  EXPECT_EQ(tokenizer.encode("<think>\nok</think>", false), (std::vector<int32_t>{128798, 201, 633, 128799}));
  EXPECT_EQ(tokenizer.encode("Hello", true), (std::vector<int32_t>{19923}));  // add_bos_token is false
  EXPECT_EQ(tokenizer.token_to_id("<｜User｜>"), 128803);
  EXPECT_EQ(tokenizer.token_to_id("<｜Assistant｜>"), 128804);
  EXPECT_TRUE(tokenizer.is_special(0));
  EXPECT_TRUE(tokenizer.is_special(128805));   // <|EOT|>
  EXPECT_FALSE(tokenizer.is_special(128798));  // <think>
  EXPECT_FALSE(tokenizer.is_special(128803));  // <｜User｜>
  EXPECT_TRUE(tokenizer.tokenizer_config().contains("chat_template"));
  EXPECT_EQ(tokenizer.tokenizer_config().at("model_max_length"), 16384);
}

TEST(DeepSeekConfig, V3BundleAddsBosAndTreatsThinkAsText) {
  FATHOM_REQUIRE_DEEPSEEK_DATA();
  const Tokenizer& tokenizer = testing::deepseek(DeepSeekVariant::kV3);
  EXPECT_EQ(tokenizer.vocab_size(), 128815);
  EXPECT_TRUE(tokenizer.add_bos_token());
  EXPECT_EQ(tokenizer.encode("Hello", true), (std::vector<int32_t>{0, 19923}));
  EXPECT_EQ(tokenizer.encode("Hello", false), (std::vector<int32_t>{19923}));
  EXPECT_GT(tokenizer.encode("<think>", false).size(), 1u);
  EXPECT_TRUE(tokenizer.is_special(128798));  // a placeholder in this file
  EXPECT_EQ(tokenizer.decode({0, 19923, 1}, true), "Hello");
  EXPECT_EQ(tokenizer.tokenizer_config().at("model_max_length"), 131072);
}

}  // namespace
}  // namespace fathom::tokenizer
