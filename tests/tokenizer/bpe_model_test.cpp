// BPE model: vocab/merges parsing, merge order, and agreement of the small- and large-word loops.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "test_support.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_data.h"

namespace fathom::tokenizer {
namespace {

nlohmann::json char_model(nlohmann::json merges) {
  return {{"type", "BPE"},
          {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}, {"<unk>", 6}, {"aa", 7}}},
          {"merges", std::move(merges)},
          {"unk_token", "<unk>"}};
}

std::vector<int32_t> encode(const BpeModel& model, std::string_view word) {
  BpeScratch scratch;
  std::vector<int32_t> ids;
  model.encode_word(word, false, ids, scratch);
  return ids;
}

TEST(BpeModel, MergesInRankOrderBothJsonForms) {
  const nlohmann::json string_form = nlohmann::json::array({"a b", "ab c", "b c", "a a"});
  const nlohmann::json array_form = nlohmann::json::array(
      {nlohmann::json::array({"a", "b"}), nlohmann::json::array({"ab", "c"}), nlohmann::json::array({"b", "c"}),
       nlohmann::json::array({"a", "a"})});
  for (const nlohmann::json* merges : {&string_form, &array_form}) {
    BpeModel model = BpeModel::from_json(char_model(*merges));
    EXPECT_EQ(encode(model, "abc"), (std::vector<int32_t>{5}));
    EXPECT_EQ(encode(model, "bc"), (std::vector<int32_t>{4}));
    EXPECT_EQ(encode(model, "aaa"), (std::vector<int32_t>{7, 0}));  // leftmost pair first among equal ranks
    EXPECT_EQ(encode(model, "cab"), (std::vector<int32_t>{2, 3}));
  }
}

TEST(BpeModel, LowerRankWinsOverPosition) {
  BpeModel model = BpeModel::from_json(char_model({"b c", "a b", "ab c"}));
  EXPECT_EQ(encode(model, "abc"), (std::vector<int32_t>{0, 4}));  // "bc" (rank 0) before "ab" (rank 1)
}

TEST(BpeModel, UnknownCharactersUseUnkToken) {
  BpeModel model = BpeModel::from_json(char_model({"a b"}));
  EXPECT_EQ(encode(model, "axyb"), (std::vector<int32_t>{0, 6, 6, 1}));
  nlohmann::json fused = char_model({"a b"});
  fused["fuse_unk"] = true;
  EXPECT_EQ(encode(BpeModel::from_json(fused), "axyb"), (std::vector<int32_t>{0, 6, 1}));
  nlohmann::json no_unk = char_model({"a b"});
  no_unk["unk_token"] = nullptr;
  // Without unk_token HF drops the characters, so "a" and "b" become neighbours and merge.
  EXPECT_EQ(encode(BpeModel::from_json(no_unk), "axyb"), (std::vector<int32_t>{3}));
}

TEST(BpeModel, RejectsInconsistentOrUnsupportedModels) {
  EXPECT_THROW(BpeModel::from_json(char_model({"a z"})), Error);         // token missing from vocab
  EXPECT_THROW(BpeModel::from_json(char_model({"c a"})), Error);         // merge result missing
  EXPECT_THROW(BpeModel::from_json(char_model({"a b c"})), Error);       // ambiguous string form
  EXPECT_THROW(BpeModel::from_json(char_model(nlohmann::json::array({nlohmann::json::array({"a"})}))), Error);
  nlohmann::json dropout = char_model({"a b"});
  dropout["dropout"] = 0.1;
  EXPECT_THROW(BpeModel::from_json(dropout), Error);
  nlohmann::json prefix = char_model({"a b"});
  prefix["continuing_subword_prefix"] = "##";
  EXPECT_THROW(BpeModel::from_json(prefix), Error);
  nlohmann::json unigram = char_model({});
  unigram["type"] = "Unigram";
  EXPECT_THROW(BpeModel::from_json(unigram), Error);
}

TEST(BpeModel, SmallAndLargeMergeLoopsAgreeOnDeepSeekVocab) {
  FATHOM_REQUIRE_DEEPSEEK_DATA();
  const BpeModel& model = testing::deepseek(testing::DeepSeekVariant::kR1).data().model;
  std::vector<int32_t> byte_ids(256);
  for (int b = 0; b < 256; ++b) byte_ids[b] = *model.token_to_id(byte_level::bytes_to_token(std::string(1, char(b))));
  std::mt19937 rng(1234);
  const std::string alphabet[] = {"a", "e", "t", "h", "n", " ", "in", "the", "er", "中", "文", "😀", "\n", "1", "ing"};
  BpeScratch scratch;
  for (int trial = 0; trial < 400; ++trial) {
    std::string word;
    const int parts = 1 + int(rng() % 40);
    for (int i = 0; i < parts; ++i) word += alphabet[rng() % std::size(alphabet)];
    if (trial % 4 == 0) {
      for (char& c : word) c = char(rng() % 256);  // arbitrary bytes too
    }
    std::vector<int32_t> small, large;
    for (char c : word) small.push_back(byte_ids[static_cast<uint8_t>(c)]);
    large = small;
    model.merge_small(small, scratch);
    model.merge_large(large, scratch);
    ASSERT_EQ(small, large) << "word: " << word;
  }
}

}  // namespace
}  // namespace fathom::tokenizer
