#include <gtest/gtest.h>

#include "chat/python_text.h"

namespace fathom::chat::jinja {
namespace {

using Parts = std::vector<std::string>;

TEST(PythonText, FloatReprMatchesPython) {
  EXPECT_EQ(python_float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(python_float_repr(1.0), "1.0");
  EXPECT_EQ(python_float_repr(-0.0), "-0.0");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(python_float_repr(1.5e-5), "1.5e-05");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(123456789.125), "123456789.125");
  EXPECT_EQ(python_float_repr(2.5e-300), "2.5e-300");
  EXPECT_EQ(python_float_repr(1e22), "1e+22");
  EXPECT_EQ(python_float_repr(5e-324), "5e-324");
}

TEST(PythonText, SplitWithAndWithoutSeparator) {
  EXPECT_EQ(python_split("a,b,,c", std::string(","), -1), (Parts{"a", "b", "", "c"}));
  EXPECT_EQ(python_split("  a  b ", std::nullopt, -1), (Parts{"a", "b"}));
  EXPECT_EQ(python_split("  a b  c  ", std::nullopt, 1), (Parts{"a", "b  c  "}));
  EXPECT_EQ(python_split("", std::nullopt, -1), (Parts{}));
  EXPECT_EQ(python_split("", std::string(","), -1), (Parts{""}));
  EXPECT_EQ(python_split("x</think>y</think>z", std::string("</think>"), -1), (Parts{"x", "y", "z"}));
  EXPECT_EQ(python_split("a\u3000b", std::nullopt, -1), (Parts{"a", "b"}));  // ideographic space is whitespace
}

TEST(PythonText, RsplitFromTheRight) {
  EXPECT_EQ(python_rsplit("a-b-c", std::string("-"), 1), (Parts{"a-b", "c"}));
  EXPECT_EQ(python_rsplit("  a b  c  ", std::nullopt, 1), (Parts{"  a b", "c"}));
  EXPECT_EQ(python_rsplit("aaa", std::string("aa"), -1), (Parts{"a", ""}));
}

TEST(PythonText, StripVariants) {
  EXPECT_EQ(python_strip("  \n x \t", StripSide::Both, std::nullopt), "x");
  EXPECT_EQ(python_strip("xxhixx", StripSide::Both, std::string("x")), "hi");
  EXPECT_EQ(python_strip("\u00a0pad\u3000", StripSide::Both, std::nullopt), "pad");
  EXPECT_EQ(python_strip("  x  ", StripSide::Left, std::nullopt), "x  ");
  EXPECT_EQ(python_strip("  x  ", StripSide::Right, std::nullopt), "  x");
  EXPECT_EQ(python_strip("éaé", StripSide::Both, std::string("é")), "a");
}

TEST(PythonText, SplitlinesAndReplace) {
  EXPECT_EQ(python_splitlines("a\nb\r\nc\rd\n"), (Parts{"a", "b", "c", "d"}));
  EXPECT_EQ(python_splitlines("a\n\nb"), (Parts{"a", "", "b"}));
  EXPECT_EQ(python_replace("aXbXc", "X", "-", -1), "a-b-c");
  EXPECT_EQ(python_replace("aXbXc", "X", "-", 1), "a-bXc");
  EXPECT_EQ(python_replace("ab", "", "-", -1), "-a-b-");
  EXPECT_EQ(python_replace("é", "", "|", -1), "|é|");
}

TEST(PythonText, StringReprPicksQuotesAndEscapes) {
  EXPECT_EQ(python_string_repr("plain"), "'plain'");
  EXPECT_EQ(python_string_repr("it's"), "\"it's\"");
  EXPECT_EQ(python_string_repr("both ' \""), "'both \\' \"'");
  EXPECT_EQ(python_string_repr("new\nline\ttab\\"), "'new\\nline\\ttab\\\\'");
  EXPECT_EQ(python_string_repr("é😀"), "'é😀'");
  EXPECT_EQ(python_string_repr("\x01\x7f"), "'\\x01\\x7f'");
}

TEST(PythonText, CodePointsAndUtf8) {
  EXPECT_EQ(count_code_points("héllo😀"), 6u);
  EXPECT_EQ(encode_utf8(decode_utf8("日本語 🧪")), "日本語 🧪");
  EXPECT_EQ(decode_utf8("\xff").size(), 1u);  // invalid byte -> one replacement character
  EXPECT_EQ(jinja_title("hello wORLD-foo (bar)"), "Hello World-Foo (Bar)");
  EXPECT_EQ(python_capitalize("hELLO"), "Hello");
}

}  // namespace
}  // namespace fathom::chat::jinja
