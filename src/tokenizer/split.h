#pragma once
// HF's SplitDelimiterBehavior: how the matches of a pattern cut a string into pieces.
#include <cstddef>
#include <string_view>
#include <utility>
#include <vector>

namespace fathom::tokenizer {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// "Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"; throws on anything else.
SplitBehavior parse_split_behavior(std::string_view name);

struct MatchedSpan {
  size_t begin;
  size_t end;
  bool is_match;
};

// HF's Pattern::find_matches: the match ranges plus the gaps between them, covering [0, text_size).
// `invert` swaps which spans count as matches.
void cover_with_matches(size_t text_size, const std::vector<std::pair<size_t, size_t>>& matches, bool invert,
                        std::vector<MatchedSpan>& spans);

// Applies `behavior` to the covering spans and appends the resulting non-empty [begin, end) pieces.
void split_by_behavior(const std::vector<MatchedSpan>& spans, SplitBehavior behavior,
                       std::vector<std::pair<size_t, size_t>>& pieces);

}  // namespace fathom::tokenizer
