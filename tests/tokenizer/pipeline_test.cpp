// Whole-pipeline behaviour on small hand-built tokenizer.json files: normalizers, pre-tokenizers,
// post-processing and config flags, decoders, vocabulary queries, unsupported components.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/error.h"
#include "error_message.h"
#include "test_support.h"
#include "tokenizer/byte_level.h"

namespace fathom::tokenizer {
namespace {

using fathom::testing::error_of;
using Merges = std::vector<std::pair<std::string, std::string>>;

// Byte-level BPE: ids 0..255 are the byte characters, then one id per merge result.
nlohmann::json byte_level_json(const Merges& merges) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level::bytes_to_token(std::string(1, char(b)))] = b;
  nlohmann::json merge_list = nlohmann::json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
    merge_list.push_back(a + " " + b);
  }
  return {{"version", "1.0"},
          {"added_tokens", nlohmann::json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}}};
}

std::vector<int32_t> bytes_of(std::string_view text) {
  std::vector<int32_t> ids;
  for (char c : text) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

Tokenizer make(const nlohmann::json& tokenizer, const nlohmann::json& config = nullptr) {
  return Tokenizer::from_json(tokenizer.dump(), config.is_null() ? std::string() : config.dump());
}

TEST(Pipeline, NormalizersStripReplacePrepend) {
  nlohmann::json json = byte_level_json({});
  json["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  json["normalizer"] = {{"type", "Sequence"},
                        {"normalizers",
                         {{{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}},
                          {{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}},
                          {{"type", "Prepend"}, {"prepend", "▁"}}}}};
  Tokenizer tokenizer = make(json);
  EXPECT_EQ(tokenizer.encode(" \u3000a \t\n b  ", false), bytes_of("▁a b"));
  EXPECT_EQ(tokenizer.encode("   ", false), std::vector<int32_t>{});  // stripped to empty: nothing prepended
}

TEST(Pipeline, UnsupportedComponentsAreNamedInErrors) {
  nlohmann::json json = byte_level_json({});
  json["normalizer"] = {{"type", "NFKC"}};
  EXPECT_NE(error_of([&] { make(json); }).find("unsupported normalizer type 'NFKC'"), std::string::npos);
  json = byte_level_json({});
  json["pre_tokenizer"] = {{"type", "Metaspace"}};
  EXPECT_NE(error_of([&] { make(json); }).find("'Metaspace'"), std::string::npos);
  json = byte_level_json({});
  json["decoder"] = {{"type", "WordPiece"}};
  EXPECT_NE(error_of([&] { make(json); }).find("'WordPiece'"), std::string::npos);
  json = byte_level_json({});
  json["post_processor"] = {{"type", "Mystery"}};
  EXPECT_NE(error_of([&] { make(json); }).find("'Mystery'"), std::string::npos);
  json = byte_level_json({});
  json["pre_tokenizer"] = {{"type", "Sequence"},
                           {"pretokenizers", {{{"type", "ByteLevel"}}, {{"type", "Digits"}}}}};
  EXPECT_NE(error_of([&] { make(json); }).find("ByteLevel must be the last"), std::string::npos);
  EXPECT_NE(error_of([&] { Tokenizer::from_json("{not json", ""); }).find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of([&] { Tokenizer::load("/nonexistent/dir"); }).find("has no tokenizer.json"), std::string::npos);
}

TEST(Pipeline, DigitsIndividualAndContiguous) {
  nlohmann::json json = byte_level_json({{"1", "2"}, {"a", "1"}});
  json["pre_tokenizer"] = {{"type", "Sequence"},
                           {"pretokenizers",
                            {{{"type", "Digits"}, {"individual_digits", true}},
                             {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  EXPECT_EQ(make(json).encode("a12", false), (std::vector<int32_t>{'a', '1', '2'}));
  json["pre_tokenizer"]["pretokenizers"][0]["individual_digits"] = false;
  EXPECT_EQ(make(json).encode("a12", false), (std::vector<int32_t>{'a', 256}));
}

TEST(Pipeline, ByteLevelPrefixSpaceIsPerPiece) {
  nlohmann::json json = byte_level_json({{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}});
  json["pre_tokenizer"] = {{"type", "Sequence"},
                           {"pretokenizers",
                            {{{"type", "Split"}, {"pattern", {{"String", "|"}}}, {"behavior", "Removed"}, {"invert", false}},
                             {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}}}}};
  EXPECT_EQ(make(json).encode("the|the| the", false), (std::vector<int32_t>{258, 258, 258}));
}

TEST(Pipeline, TemplateProcessingAddsSpecialTokensOnlyWhenAsked) {
  nlohmann::json json = byte_level_json({});
  json["model"]["vocab"]["<s>"] = 256;
  json["model"]["vocab"]["</s>"] = 257;
  json["added_tokens"] = {{{"id", 256}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
                          {{"id", 257}, {"content", "</s>"}, {"special", true}, {"normalized", false}}};
  json["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                  {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {256}}, {"tokens", {"<s>"}}}},
                          {"</s>", {{"id", "</s>"}, {"ids", {257}}, {"tokens", {"</s>"}}}}}}};
  Tokenizer tokenizer = make(json, {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  EXPECT_EQ(tokenizer.encode("hi", true), (std::vector<int32_t>{256, 'h', 'i', 257}));
  EXPECT_EQ(tokenizer.encode("hi", false), (std::vector<int32_t>{'h', 'i'}));
  EXPECT_EQ(tokenizer.encode("", true), (std::vector<int32_t>{256, 257}));
  EXPECT_TRUE(tokenizer.add_bos_token());
  EXPECT_EQ(tokenizer.bos_token_id(), 256);
  EXPECT_EQ(tokenizer.eos_token_id(), 257);
  EXPECT_TRUE(tokenizer.is_special(256));
  EXPECT_FALSE(tokenizer.is_special('h'));

  // transformers semantics: add_bos_token/add_eos_token in the config replace the post-processor.
  nlohmann::json config = {{"add_bos_token", false},
                           {"add_eos_token", true},
                           {"bos_token", {{"__type", "AddedToken"}, {"content", "<s>"}}},
                           {"eos_token", {{"__type", "AddedToken"}, {"content", "</s>"}}}};
  Tokenizer configured = make(json, config);
  EXPECT_EQ(configured.encode("hi", true), (std::vector<int32_t>{'h', 'i', 257}));
  EXPECT_FALSE(configured.add_bos_token());
  EXPECT_EQ(configured.bos_token(), "<s>");
  EXPECT_EQ(configured.tokenizer_config().at("add_eos_token"), true);
  config["add_bos_token"] = true;
  config["bos_token"] = "<missing>";
  EXPECT_NE(error_of([&] { make(json, config); }).find("bos_token '<missing>' is not a token"), std::string::npos);
}

TEST(Pipeline, DecodersJoinReplaceAndFuse) {
  nlohmann::json json = byte_level_json({{"h", "i"}});
  Tokenizer byte_level = make(json);
  EXPECT_EQ(byte_level.decode({256, ' ', 'x'}, false), "hi x");
  json["decoder"] = nullptr;
  EXPECT_EQ(make(json).decode({256, 'x', 0x20}, false), "hi x Ġ");  // no decoder: tokens joined by spaces
  json["decoder"] = {{"type", "Sequence"},
                     {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "i"}}}, {"content", "I"}}, {{"type", "ByteLevel"}}}}};
  EXPECT_EQ(make(json).decode({256, 'i'}, false), "hII");
  json["decoder"] = {{"type", "Sequence"},
                     {"decoders", {{{"type", "ByteLevel"}}, {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "_"}}}}};
  EXPECT_EQ(make(json).decode({256, ' ', 'x'}, false), "hi_x");
}

TEST(Pipeline, VocabularyQueries) {
  Tokenizer tokenizer = make(byte_level_json({{"h", "i"}}));
  EXPECT_EQ(tokenizer.vocab_size(), 257);
  EXPECT_EQ(tokenizer.token_to_id("hi"), 256);
  EXPECT_EQ(tokenizer.token_to_id("nope"), std::nullopt);
  EXPECT_EQ(tokenizer.id_to_token(256), "hi");
  EXPECT_EQ(tokenizer.id_to_token(' '), "Ġ");
  EXPECT_THROW(tokenizer.id_to_token(257), Error);
  Tokenizer padded = tokenizer.with_model_vocab_size(300);
  EXPECT_EQ(padded.id_to_token(299), "");
  EXPECT_EQ(padded.decode({'a', 299, 'b'}, false), "ab");
  EXPECT_THROW(tokenizer.with_model_vocab_size(10), Error);
  EXPECT_TRUE(tokenizer.tokenizer_config().empty());
}

TEST(Pipeline, ConcurrentEncodesMatchSequentialOnes) {
  FATHOM_REQUIRE_DEEPSEEK_DATA();
  const Tokenizer& tokenizer = testing::deepseek(testing::DeepSeekVariant::kR1);
  const auto inputs = testing::read_json_file(testing::tokenizer_data_path("corpus_inputs.json"));
  std::vector<std::string> texts;
  for (const auto& text : inputs.at("texts")) texts.push_back(text.get<std::string>());
  std::vector<std::vector<int32_t>> expected;
  for (const auto& text : texts) expected.push_back(tokenizer.encode(text, false));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Tokenizer copy = tokenizer;  // copies share the loaded data
      for (size_t i = t; i < texts.size(); i += 2) mismatches[t] += copy.encode(texts[i], false) != expected[i];
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(Pipeline, MegabyteInputsEncodeInLinearTime) {
  FATHOM_REQUIRE_DEEPSEEK_DATA();
  const Tokenizer& tokenizer = testing::deepseek(testing::DeepSeekVariant::kR1);
  const size_t size = 1 << 20;
  std::string mixed;
  while (mixed.size() < size) mixed += "The year 2024 had 366 days; 東京 ist groß. 😀\n";
  for (const std::string& text : {std::string(size, 'a'), std::string(size, ' '), std::string(size, '7'), mixed}) {
    auto start = std::chrono::steady_clock::now();
    auto ids = tokenizer.encode(text, false);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 5.0) << "first bytes: " << text.substr(0, 8);
    EXPECT_EQ(tokenizer.decode(ids, false), text);
  }
}

}  // namespace
}  // namespace fathom::tokenizer
