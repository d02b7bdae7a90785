// Split behaviors and the onig find_iter rules, on the examples HF tokenizers documents/produces.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/onig_regex.h"
#include "tokenizer/split.h"

namespace fathom::tokenizer {
namespace {

std::vector<std::string> split_text(const std::string& text, const std::string& pattern, SplitBehavior behavior,
                                    bool invert = false) {
  Regex regex(pattern);
  RegexScratch scratch;
  std::vector<std::pair<size_t, size_t>> matches;
  regex.find_all(text, matches, scratch);
  std::vector<MatchedSpan> spans;
  cover_with_matches(text.size(), matches, invert, spans);
  std::vector<std::pair<size_t, size_t>> pieces;
  split_by_behavior(spans, behavior, pieces);
  std::vector<std::string> out;
  for (auto [begin, end] : pieces) out.push_back(text.substr(begin, end - begin));
  return out;
}

using Pieces = std::vector<std::string>;

TEST(SplitBehavior, EachBehaviorOnWordPattern) {
  const std::string text = "How are you doing?";
  const std::string words = "\\w+|[^\\w\\s]+";
  EXPECT_EQ(split_text(text, words, SplitBehavior::kRemoved, true), (Pieces{"How", "are", "you", "doing", "?"}));
  EXPECT_EQ(split_text(text, words, SplitBehavior::kIsolated, true),
            (Pieces{"How", " ", "are", " ", "you", " ", "doing", "?"}));
  EXPECT_EQ(split_text(text, words, SplitBehavior::kMergedWithPrevious, true),
            (Pieces{"How ", "are ", "you ", "doing", "?"}));
  EXPECT_EQ(split_text(text, words, SplitBehavior::kMergedWithNext, true),
            (Pieces{"How", " are", " you", " doing", "?"}));
  EXPECT_EQ(split_text(text, words, SplitBehavior::kContiguous, true),
            (Pieces{"How", " ", "are", " ", "you", " ", "doing?"}));
}

TEST(SplitBehavior, DelimiterRuns) {
  const std::string text = "xaxxbx";
  EXPECT_EQ(split_text(text, "x", SplitBehavior::kIsolated), (Pieces{"x", "a", "x", "x", "b", "x"}));
  EXPECT_EQ(split_text(text, "x", SplitBehavior::kContiguous), (Pieces{"x", "a", "xx", "b", "x"}));
  EXPECT_EQ(split_text(text, "x", SplitBehavior::kRemoved), (Pieces{"a", "b"}));
  EXPECT_EQ(split_text(text, "x", SplitBehavior::kRemoved, true), (Pieces{"x", "x", "x", "x"}));
  EXPECT_EQ(split_text(text, "x", SplitBehavior::kMergedWithPrevious), (Pieces{"x", "ax", "x", "bx"}));
  EXPECT_EQ(split_text(text, "x", SplitBehavior::kMergedWithPrevious, true), (Pieces{"xa", "x", "xb", "x"}));
  EXPECT_EQ(split_text(text, "x", SplitBehavior::kMergedWithNext), (Pieces{"xa", "x", "xb", "x"}));
  EXPECT_EQ(split_text(text, "x", SplitBehavior::kMergedWithNext, true), (Pieces{"x", "ax", "x", "bx"}));
}

TEST(SplitBehavior, EmptyMatchesFollowOnigFindIter) {
  EXPECT_EQ(split_text("abxxc", "x*", SplitBehavior::kIsolated), (Pieces{"a", "b", "xx", "c"}));
  EXPECT_EQ(split_text("abxxc", "x*", SplitBehavior::kMergedWithPrevious), (Pieces{"a", "bxx", "c"}));
  EXPECT_EQ(split_text("abxxc", "x*", SplitBehavior::kMergedWithNext), (Pieces{"a", "b", "xxc"}));
  EXPECT_EQ(split_text("baab", "(?=a)", SplitBehavior::kIsolated), (Pieces{"b", "a", "ab"}));
  EXPECT_EQ(split_text("ab cd", "\\b", SplitBehavior::kIsolated), (Pieces{"ab", " ", "cd"}));
}

TEST(SplitBehavior, RegexUsesOnigurumaSemantics) {
  // ^ and $ match at line boundaries (Ruby/Oniguruma syntax), \s+(?!\S) leaves one space for the next word.
  EXPECT_EQ(split_text("aab\naab", "^a|b$", SplitBehavior::kRemoved), (Pieces{"a", "\n", "a"}));
  EXPECT_EQ(split_text("a   b  \n", "\\s+(?!\\S)|\\s+", SplitBehavior::kIsolated), (Pieces{"a", "  ", " ", "b", "  \n"}));
  EXPECT_EQ(split_text("x中文y", "\\p{Han}+", SplitBehavior::kIsolated), (Pieces{"x", "中文", "y"}));
}

TEST(SplitBehavior, LiteralPatternsEscapeMetacharacters) {
  Regex literal = Regex::literal("a.b|(c)*");
  RegexScratch scratch;
  std::vector<std::pair<size_t, size_t>> matches;
  literal.find_all("xa.b|(c)*y axb", matches, scratch);
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(matches[0], std::make_pair(size_t{1}, size_t{9}));
}

TEST(SplitBehavior, ParsesNamesAndRejectsUnknown) {
  EXPECT_EQ(parse_split_behavior("MergedWithNext"), SplitBehavior::kMergedWithNext);
  EXPECT_THROW(parse_split_behavior("Merged"), Error);
  EXPECT_THROW(Regex("(unclosed"), Error);
}

}  // namespace
}  // namespace fathom::tokenizer
