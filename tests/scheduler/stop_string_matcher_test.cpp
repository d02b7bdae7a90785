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

// Before min_new_tokens, stop strings ending in a piece are not matched, but a possible start is still held back:
// a stop string completed once matching resumes is found even if it began earlier.
TEST(StopStringMatcher, UnmatchedPushesSkipCompletedStopsButHoldPossibleStarts) {
  StopStringMatcher matcher({"stop"});
  EXPECT_EQ(matcher.push("a st").text, "a ");  // "st" held back
  StopStringMatcher::Result result = matcher.push_unmatched("op here, st");
  EXPECT_EQ(result.text, "stop here, ");  // completed while unmatched: streamed; "st" held back again
  EXPECT_FALSE(result.match);
  EXPECT_FALSE(matcher.matched());
  result = matcher.push("op");
  EXPECT_EQ(result.text, "");
  ASSERT_TRUE(result.match);
  EXPECT_EQ(*result.match, "stop");
  EXPECT_EQ(matcher.push_unmatched("late").text, "");  // over after a match
  StopStringMatcher released({"stop"});
  EXPECT_EQ(released.push_unmatched("xs").text, "x");
  EXPECT_EQ(released.push_unmatched("y").text, "sy");  // a false start is released
  EXPECT_EQ(released.flush(), "");
}

}  // namespace
}  // namespace fathom::scheduler
