// UTF-8 classification and U+FFFD repair by maximal invalid subparts (Unicode 3.9, Table 3-8 style).
#include <gtest/gtest.h>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace fathom::tokenizer {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, ValidInputIsUnchanged) {
  for (std::string text : {"", "ascii only", "é中😀", "\x7f", "\xF4\x8F\xBF\xBF"}) {
    EXPECT_TRUE(utf8::is_valid(text)) << text;
    EXPECT_EQ(utf8::to_lossy(text), text);
  }
}

TEST(Utf8, MaximalSubpartsBecomeOneReplacementEach) {
  struct Case {
    std::string bytes;
    std::string expected;
  };
  const Case cases[] = {
      {"a\xFF" "b", "a" + kFffd + "b"},
      {"\x80\x80", kFffd + kFffd},                          // stray continuation bytes: one each
      {"\xC0\xAF", kFffd + kFffd},                          // overlong lead byte is never valid
      {"\xE4\xB8", kFffd},                                  // truncated 3-byte sequence at the end: one
      {"\xE4\xB8x", kFffd + "x"},                           // truncated, then ASCII
      {"\xED\xA0\x80", kFffd + kFffd + kFffd},              // surrogate: ED allows only 80..9F next
      {"\xF0\x9F\x98", kFffd},                              // truncated emoji
      {"\xF0\x9F\x98\x80\xF0", "😀" + kFffd},
      {"\xF5\x80", kFffd + kFffd},                          // beyond U+10FFFF
      {"\xE0\x80\x80", kFffd + kFffd + kFffd},              // overlong 3-byte
      {"\xF4\x90\x80\x80", kFffd + kFffd + kFffd + kFffd},  // > U+10FFFF
      {"\xE1\x80\xE2\xF0\x91\x92\xF1\xBF\x41", kFffd + kFffd + kFffd + kFffd + "A"},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(utf8::is_valid(c.bytes));
    EXPECT_EQ(utf8::to_lossy(c.bytes), c.expected) << testing::PrintToString(c.bytes);
  }
}

TEST(Utf8, StreamingHoldsBackOnlyTruncatedSequences) {
  std::string out;
  EXPECT_EQ(utf8::append_lossy("ab\xE4\xB8", out, false), 2u);
  EXPECT_EQ(out, "ab");
  out.clear();
  EXPECT_EQ(utf8::append_lossy("ab\xE4x", out, false), 4u);  // proven invalid: replaced at once
  EXPECT_EQ(out, "ab" + kFffd + "x");
  out.clear();
  EXPECT_EQ(utf8::append_lossy("\xF0\x9F\x98", out, true), 3u);  // final: replaced
  EXPECT_EQ(out, kFffd);
}

TEST(Utf8, CodePointRoundTrip) {
  for (char32_t cp : {U'\0', U'A', U'\u00e9', U'\u4e2d', U'\U0001F600', U'\U0010FFFF'}) {
    std::string encoded;
    utf8::append_code_point(encoded, cp);
    size_t pos = 0;
    EXPECT_EQ(utf8::decode_next(encoded, pos), cp);
    EXPECT_EQ(pos, encoded.size());
    size_t start = 99;
    EXPECT_EQ(utf8::decode_before(encoded, encoded.size(), &start), cp);
    EXPECT_EQ(start, 0u);
  }
}

TEST(ByteLevelAlphabet, MatchesGpt2Mapping) {
  EXPECT_EQ(byte_level::bytes_to_token(" "), "Ġ");
  EXPECT_EQ(byte_level::bytes_to_token("\n"), "Ċ");
  EXPECT_EQ(byte_level::bytes_to_token("a!"), "a!");
  EXPECT_EQ(byte_level::bytes_to_token("\xC3\xA4"), "Ã¤");
  EXPECT_EQ(byte_level::byte_to_code_point(0), U'\u0100');
  EXPECT_EQ(byte_level::byte_to_code_point(0xAD), U'\u0143');
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
  EXPECT_EQ(byte_level::token_to_bytes(byte_level::bytes_to_token(all_bytes)), all_bytes);
  EXPECT_EQ(byte_level::token_to_bytes("<｜User｜>"), "<｜User｜>");  // non-alphabet: passed through
}

}  // namespace
}  // namespace fathom::tokenizer
