// StopStringMatcher: matches across pieces, holds back possible starts, drops the stop string and what follows.
#include <gtest/gtest.h>

#include "scheduler/stop_string_matcher.h"

namespace fathom::scheduler {
namespace {

TEST(StopStringMatcher, PassesTextThroughWithoutStopStrings) {
  StopStringMatcher matcher({});
  EXPECT_EQ(matcher.push("abc").text, "abc");
  EXPECT_EQ(matcher.flush(), "");
}

TEST(StopStringMatcher, MatchesAcrossPiecesAndHoldsBackPrefixes) {
  StopStringMatcher matcher({"</end>", "xyz"});
  EXPECT_EQ(matcher.push("hello <").text, "hello ");
  EXPECT_EQ(matcher.push("/e").text, "");
  StopStringMatcher::Result result = matcher.push("nd> more");
  EXPECT_EQ(result.text, "");
  ASSERT_TRUE(result.match);
  EXPECT_EQ(*result.match, "</end>");
  EXPECT_TRUE(matcher.matched());
  EXPECT_EQ(matcher.push("later").text, "");
  EXPECT_EQ(matcher.flush(), "");
}

TEST(StopStringMatcher, ReleasesFalseStartsAndFlushesHeldText) {
  StopStringMatcher matcher({"abc"});
  EXPECT_EQ(matcher.push("xab").text, "x");
  EXPECT_EQ(matcher.push("d").text, "abd");
  EXPECT_EQ(matcher.push("aab").text, "a");  // "ab" could still become "abc"
  EXPECT_EQ(matcher.flush(), "ab");
}

TEST(StopStringMatcher, EarliestMatchWinsAndTextBeforeItIsKept) {
  StopStringMatcher matcher({"cd", "bcdx"});
  StopStringMatcher::Result result = matcher.push("abcdx");
  ASSERT_TRUE(result.match);
  EXPECT_EQ(*result.match, "bcdx");
  EXPECT_EQ(result.text, "a");
  StopStringMatcher other({"world", "o"});
  result = other.push("hello world");
  EXPECT_EQ(result.text, "hell");
  EXPECT_EQ(*result.match, "o");
}

// Before min_new_tokens, text streams unmatched: held-back text is released with it, and matching resumes after.
TEST(StopStringMatcher, UnmatchedPushesStreamEverything) {
  StopStringMatcher matcher({"stop"});
  EXPECT_EQ(matcher.push("a st").text, "a ");  // "st" held back
  StopStringMatcher::Result result = matcher.push_unmatched("op here");
  EXPECT_EQ(result.text, "stop here");
  EXPECT_FALSE(result.match);
  EXPECT_FALSE(matcher.matched());
  result = matcher.push(" and stop");
  EXPECT_EQ(result.text, " and ");
  ASSERT_TRUE(result.match);
  EXPECT_EQ(*result.match, "stop");
  EXPECT_EQ(matcher.push_unmatched("late").text, "");  // over after a match
}

}  // namespace
}  // namespace fathom::scheduler
