// find_first_marker (complete vs partial matches, earliest position, longest at a position) and
// utf8_complete_prefix_length.
#include <gtest/gtest.h>

#include "core/marker_search.h"

namespace fathom {
namespace {

TEST(MarkerSearch, EarliestCompleteMarkerWins) {
  const std::vector<std::string_view> markers = {"</think>", "<b>"};
  auto match = find_first_marker("x<b>y</think>", markers, true);
  ASSERT_TRUE(match);
  EXPECT_EQ(match->position, 1u);
  EXPECT_EQ(match->marker, 1u);
  EXPECT_TRUE(match->complete);
  EXPECT_FALSE(find_first_marker("no markers here", markers, true));
  EXPECT_FALSE(find_first_marker("", markers, true));
}

TEST(MarkerSearch, TrailingPrefixIsPartialOnlyWhenAllowed) {
  const std::vector<std::string_view> markers = {"</think>"};
  auto match = find_first_marker("abc</thi", markers, true);
  ASSERT_TRUE(match);
  EXPECT_EQ(match->position, 3u);
  EXPECT_FALSE(match->complete);
  EXPECT_FALSE(find_first_marker("abc</thi", markers, false));
  EXPECT_FALSE(find_first_marker("abc</thx", markers, true));  // diverged: not a prefix
}

TEST(MarkerSearch, LongestCompleteAtAPositionUnlessALongerOneMayStillMatch) {
  const std::vector<std::string_view> markers = {"<e>", "\n```<e>", "```<e>"};
  auto match = find_first_marker("{}\n```<e>", markers, true);
  ASSERT_TRUE(match);
  EXPECT_EQ(match->position, 2u);
  EXPECT_EQ(match->marker, 1u);
  const std::vector<std::string_view> nested = {"ab", "abcd"};
  match = find_first_marker("xabc", nested, true);  // "ab" is complete but "abcd" may still come
  ASSERT_TRUE(match);
  EXPECT_FALSE(match->complete);
  match = find_first_marker("xabc", nested, false);
  ASSERT_TRUE(match);
  EXPECT_TRUE(match->complete);
  EXPECT_EQ(match->marker, 0u);
}

TEST(MarkerSearch, Utf8CompletePrefixDropsOnlyATrailingPartialCharacter) {
  EXPECT_EQ(utf8_complete_prefix_length("abc"), 3u);
  EXPECT_EQ(utf8_complete_prefix_length("caf\xC3"), 3u);
  EXPECT_EQ(utf8_complete_prefix_length("caf\xC3\xA9"), 5u);
  EXPECT_EQ(utf8_complete_prefix_length("\xE4\xB8"), 0u);
  EXPECT_EQ(utf8_complete_prefix_length("\xF0\x9F\x8C\xA7"), 4u);
  EXPECT_EQ(utf8_complete_prefix_length("a\xF0\x9F\x8C"), 1u);
  EXPECT_EQ(utf8_complete_prefix_length(""), 0u);
}

}  // namespace
}  // namespace fathom
