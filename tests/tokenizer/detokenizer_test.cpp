// Streaming decode: pieces end on UTF-8 boundaries and concatenate to the full decode.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "test_support.h"
#include "tokenizer/utf8.h"

namespace fathom::tokenizer {
namespace {

using testing::DeepSeekVariant;

std::string stream(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip_special,
                   std::vector<std::string>* pieces = nullptr) {
  IncrementalDetokenizer detokenizer(tokenizer, skip_special);
  std::string text;
  for (int32_t id : ids) {
    std::string piece = detokenizer.push(id);
    if (pieces) pieces->push_back(piece);
    text += piece;
  }
  std::string rest = detokenizer.flush();
  if (pieces) pieces->push_back(rest);
  return text + rest;
}

TEST(IncrementalDetokenizer, HoldsSplitCharactersUntilComplete) {
  FATHOM_REQUIRE_DEEPSEEK_DATA();
  const Tokenizer& tokenizer = testing::deepseek(DeepSeekVariant::kR1);
  // "中" is E4 B8 AD: three single-byte tokens.
  const int32_t e4 = *tokenizer.token_to_id("ä"), b8 = *tokenizer.token_to_id("¸"), ad = *tokenizer.token_to_id("Ń");
  IncrementalDetokenizer detokenizer(tokenizer, false);
  EXPECT_EQ(detokenizer.push(*tokenizer.token_to_id("Hello")), "Hello");
  EXPECT_EQ(detokenizer.push(e4), "");
  EXPECT_EQ(detokenizer.push(b8), "");
  EXPECT_EQ(detokenizer.push(ad), "中");
  EXPECT_EQ(detokenizer.push(e4), "");
  EXPECT_EQ(detokenizer.push(*tokenizer.token_to_id("!")), "\xEF\xBF\xBD!");  // proven invalid: U+FFFD
  EXPECT_EQ(detokenizer.push(e4), "");
  EXPECT_EQ(detokenizer.flush(), "\xEF\xBF\xBD");  // end of stream: incomplete character
}

TEST(IncrementalDetokenizer, SkipsSpecialTokensAndPaddingRows) {
  FATHOM_REQUIRE_DEEPSEEK_DATA();
  const Tokenizer& tokenizer = testing::deepseek(DeepSeekVariant::kR1);
  const std::vector<int32_t> ids = {0, 128803, 19923, 128798, 128900, 1};
  EXPECT_EQ(stream(tokenizer, ids, true), "<｜User｜>Hello<think>");
  EXPECT_EQ(stream(tokenizer, ids, false), "<｜begin▁of▁sentence｜><｜User｜>Hello<think><｜end▁of▁sentence｜>");
  IncrementalDetokenizer detokenizer(tokenizer, false);
  EXPECT_THROW(detokenizer.push(129280), Error);
  EXPECT_THROW(detokenizer.push(-1), Error);
}

TEST(IncrementalDetokenizer, RandomIdStreamsEqualFullDecode) {
  FATHOM_REQUIRE_DEEPSEEK_DATA();
  std::mt19937 rng(42);
  for (DeepSeekVariant variant : {DeepSeekVariant::kR1, DeepSeekVariant::kV3}) {
    const Tokenizer& tokenizer = testing::deepseek(variant);
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<int32_t> ids;
      const int length = 1 + int(rng() % 40);
      for (int i = 0; i < length; ++i) {
        const int kind = int(rng() % 10);
        if (kind < 4) ids.push_back(3 + int(rng() % 256));  // single bytes split characters
        else if (kind < 8) ids.push_back(int(rng() % 128000));
        else if (kind < 9) ids.push_back(128000 + int(rng() % 815));
        else ids.push_back(128815 + int(rng() % 465));
      }
      for (bool skip : {false, true}) {
        std::vector<std::string> pieces;
        const std::string streamed = stream(tokenizer, ids, skip, &pieces);
        ASSERT_EQ(streamed, tokenizer.decode(ids, skip)) << "trial " << trial;
        for (const std::string& piece : pieces) ASSERT_TRUE(utf8::is_valid(piece));
      }
    }
  }
}

TEST(IncrementalDetokenizer, StreamsEncodedTextBack) {
  FATHOM_REQUIRE_DEEPSEEK_DATA();
  const Tokenizer& tokenizer = testing::deepseek(DeepSeekVariant::kR1);
  const std::string text = "Emoji 👨‍👩‍👧‍👦 and 中文 and <think>reasoning</think> done.";
  std::vector<std::string> pieces;
  EXPECT_EQ(stream(tokenizer, tokenizer.encode(text, false), false, &pieces), text);
  for (const std::string& piece : pieces) EXPECT_TRUE(utf8::is_valid(piece));
}

}  // namespace
}  // namespace fathom::tokenizer
