// The generated conformance corpus (tests/tokenizer/data, made by tools/tokenizer/make_corpus.mjs):
// expected ids and decodes come from HF tokenizers 0.23.2 for both DeepSeek files and for small
// per-component tokenizers.
#include <gtest/gtest.h>

#include "test_support.h"

namespace fathom::tokenizer {
namespace {

using testing::DeepSeekVariant;

const nlohmann::json& inputs() {
  static const nlohmann::json json = testing::read_json_file(testing::tokenizer_data_path("corpus_inputs.json"));
  return json;
}

const nlohmann::json& expected() {
  static const nlohmann::json json = testing::read_json_file(testing::tokenizer_data_path("corpus_expected.json"));
  return json;
}

void check_decodes(const Tokenizer& tokenizer, const nlohmann::json& id_lists, const nlohmann::json& decoded,
                   const nlohmann::json& decoded_skipping, const std::string& label) {
  ASSERT_EQ(id_lists.size(), decoded.size());
  for (size_t i = 0; i < id_lists.size(); ++i) {
    const auto ids = id_lists[i].get<std::vector<int32_t>>();
    EXPECT_EQ(tokenizer.decode(ids, false), decoded[i].get<std::string>()) << label << " decode #" << i;
    EXPECT_EQ(tokenizer.decode(ids, true), decoded_skipping[i].get<std::string>()) << label << " decode(skip) #" << i;
  }
}

TEST(Corpus, DeepSeekR1MatchesHfTokenizers) {
  FATHOM_REQUIRE_DEEPSEEK_DATA();
  const Tokenizer& tokenizer = testing::deepseek(DeepSeekVariant::kR1);
  const auto& texts = inputs().at("texts");
  const auto& reference = expected().at("deepseek").at("r1");
  const auto& encodings = reference.at("encode");
  ASSERT_EQ(texts.size(), encodings.size());
  EXPECT_TRUE(reference.at("roundtrip_mismatches").empty());
  size_t failures = 0;
  for (size_t i = 0; i < texts.size() && failures < 20; ++i) {
    const std::string text = texts[i].get<std::string>();
    const auto ids = tokenizer.encode(text, false);
    if (ids != encodings[i].get<std::vector<int32_t>>()) {
      ++failures;
      ADD_FAILURE() << "text #" << i << " " << texts[i].dump() << "\n ours: " << nlohmann::json(ids).dump()
                    << "\n   hf: " << encodings[i].dump();
    }
    EXPECT_EQ(tokenizer.decode(ids, false), text) << "round trip of text #" << i;
  }
  check_decodes(tokenizer, inputs().at("decode_ids"), reference.at("decode"), reference.at("decode_skip_special"), "r1");
}

TEST(Corpus, DeepSeekV3MatchesHfTokenizers) {
  FATHOM_REQUIRE_DEEPSEEK_DATA();
  const Tokenizer& tokenizer = testing::deepseek(DeepSeekVariant::kV3);
  const auto& texts = inputs().at("texts");
  const auto& r1_encodings = expected().at("deepseek").at("r1").at("encode");
  const auto& reference = expected().at("deepseek").at("v3");
  const auto& differing = reference.at("encode_where_different_from_r1");
  EXPECT_GT(differing.size(), 0u);
  size_t failures = 0;
  for (size_t i = 0; i < texts.size() && failures < 20; ++i) {
    const std::string key = std::to_string(i);
    const auto& want = differing.contains(key) ? differing.at(key) : r1_encodings[i];
    const auto ids = tokenizer.encode(texts[i].get<std::string>(), false);
    if (ids != want.get<std::vector<int32_t>>()) {
      ++failures;
      ADD_FAILURE() << "text #" << i << " " << texts[i].dump() << "\n ours: " << nlohmann::json(ids).dump() << "\n   hf: " << want.dump();
    }
  }
  check_decodes(tokenizer, inputs().at("decode_ids"), reference.at("decode"), reference.at("decode_skip_special"), "v3");
}

TEST(Corpus, SyntheticTokenizersMatchHfTokenizers) {
  const auto synthetic = testing::read_json_file(testing::tokenizer_data_path("synthetic_tokenizers.json"));
  const auto& reference = expected().at("synthetic");
  int tokenizers_checked = 0;
  for (const auto& entry : synthetic.at("tokenizers")) {
    const std::string name = entry.at("name").get<std::string>();
    SCOPED_TRACE(name);
    const Tokenizer tokenizer = Tokenizer::from_json(entry.at("tokenizer").dump(), "");
    const auto& want = reference.at(name);
    const auto& texts = entry.at("texts");
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::string text = texts[i].get<std::string>();
      EXPECT_EQ(tokenizer.encode(text, false), want.at("encode")[i].get<std::vector<int32_t>>()) << "text " << texts[i].dump();
      EXPECT_EQ(tokenizer.encode(text, true), want.at("encode_special")[i].get<std::vector<int32_t>>()) << "text " << texts[i].dump();
    }
    check_decodes(tokenizer, entry.at("decode_ids"), want.at("decode"), want.at("decode_skip_special"), name);
    ++tokenizers_checked;
  }
  EXPECT_EQ(tokenizers_checked, 30);
}

}  // namespace
}  // namespace fathom::tokenizer
