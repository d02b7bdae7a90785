// Defined behaviour for bad input: invalid UTF-8 (U+FFFD repair), oversized text, ids out of range.
#include <gtest/gtest.h>

#include "core/error.h"
#include "test_support.h"

namespace fathom::tokenizer {
namespace {

using testing::DeepSeekVariant;

TEST(BadInput, InvalidUtf8IsEncodedAsReplacementCharacters) {
  FATHOM_REQUIRE_DEEPSEEK_DATA();
  const Tokenizer& tokenizer = testing::deepseek(DeepSeekVariant::kR1);
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(tokenizer.encode("a\xFF" "b", false), tokenizer.encode("a" + fffd + "b", false));
  EXPECT_EQ(tokenizer.encode("x\xED\xA0\x80y", false), tokenizer.encode("x" + fffd + fffd + fffd + "y", false));
  EXPECT_EQ(tokenizer.encode("end\xE4\xB8", false), tokenizer.encode("end" + fffd, false));
  const std::string with_nul("nul\0byte", 8);  // NUL is valid UTF-8 and round-trips
  EXPECT_EQ(tokenizer.decode(tokenizer.encode(with_nul, false), false), with_nul);
}

TEST(BadInput, OversizedInputIsRejected) {
  FATHOM_REQUIRE_DEEPSEEK_DATA();
  const Tokenizer limited = testing::deepseek(DeepSeekVariant::kR1).with_max_input_bytes(16);
  EXPECT_EQ(limited.max_input_bytes(), 16u);
  EXPECT_NO_THROW(limited.encode(std::string(16, 'a'), false));
  try {
    limited.encode(std::string(17, 'a'), false);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("17 bytes, over the limit of 16"), std::string::npos) << error.what();
  }
  EXPECT_EQ(testing::deepseek(DeepSeekVariant::kR1).max_input_bytes(), kDefaultMaxInputBytes);
}

TEST(BadInput, IdsOutsideTheModelVocabularyAreErrors) {
  FATHOM_REQUIRE_DEEPSEEK_DATA();
  const Tokenizer& tokenizer = testing::deepseek(DeepSeekVariant::kR1);
  EXPECT_EQ(tokenizer.vocab_size(), 128815);
  EXPECT_EQ(tokenizer.model_vocab_size(), 129280);
  // Embedding rows without a token decode to nothing.
  EXPECT_EQ(tokenizer.decode({19923, 128815, 129279, 4495}, false), "Hello World");
  EXPECT_EQ(tokenizer.id_to_token(129000), "");
  EXPECT_FALSE(tokenizer.is_special(129000));
  EXPECT_THROW(tokenizer.decode({19923, 129280}, false), Error);
  EXPECT_THROW(tokenizer.decode({-1}, false), Error);
  EXPECT_THROW(tokenizer.id_to_token(-5), Error);
  // Without the model's size, the tokenizer's own ids are the limit.
  const Tokenizer bare = Tokenizer::load(testing::deepseek_dir(DeepSeekVariant::kV3));
  EXPECT_EQ(bare.model_vocab_size(), 128815);
  EXPECT_THROW(bare.decode({128815}, false), Error);
}

}  // namespace
}  // namespace fathom::tokenizer
