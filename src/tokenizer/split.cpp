#include "tokenizer/split.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace fathom::tokenizer {

SplitBehavior parse_split_behavior(std::string_view name) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  FATHOM_FAIL("unknown split behavior '" << std::string(name) << "'");
}

void cover_with_matches(size_t text_size, const std::vector<std::pair<size_t, size_t>>& matches, bool invert,
                        std::vector<MatchedSpan>& spans) {
  spans.clear();
  if (text_size == 0) {
    spans.push_back({0, 0, invert});
    return;
  }
  size_t previous_end = 0;
  for (const auto& [begin, end] : matches) {
    if (previous_end != begin) spans.push_back({previous_end, begin, invert});
    spans.push_back({begin, end, !invert});
    previous_end = end;
  }
  if (previous_end != text_size) spans.push_back({previous_end, text_size, invert});
}

void split_by_behavior(const std::vector<MatchedSpan>& spans, SplitBehavior behavior,
                       std::vector<std::pair<size_t, size_t>>& pieces) {
  const size_t first_piece = pieces.size();
  auto emit = [&](size_t begin, size_t end) { pieces.emplace_back(begin, end); };
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const MatchedSpan& span : spans) emit(span.begin, span.end);
      break;
    case SplitBehavior::kRemoved:
      for (const MatchedSpan& span : spans) {
        if (!span.is_match) emit(span.begin, span.end);
      }
      break;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const MatchedSpan& span : spans) {
        if (span.is_match == previous_match && pieces.size() > first_piece) {
          pieces.back().second = span.end;
        } else {
          emit(span.begin, span.end);
        }
        previous_match = span.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const MatchedSpan& span : spans) {
        if (span.is_match && !previous_match && pieces.size() > first_piece) {
          pieces.back().second = span.end;
        } else {
          emit(span.begin, span.end);
        }
        previous_match = span.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      // Mirror image of MergedWithPrevious: walk backwards, then restore the order.
      bool previous_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && pieces.size() > first_piece) {
          pieces.back().first = it->begin;
        } else {
          emit(it->begin, it->end);
        }
        previous_match = it->is_match;
      }
      std::reverse(pieces.begin() + static_cast<std::ptrdiff_t>(first_piece), pieces.end());
      break;
    }
  }
  // HF drops empty pieces after every split.
  pieces.erase(std::remove_if(pieces.begin() + static_cast<std::ptrdiff_t>(first_piece), pieces.end(),
                              [](const auto& piece) { return piece.first == piece.second; }),
               pieces.end());
}

}  // namespace fathom::tokenizer
