#pragma once
// Finds stop strings in streamed text, across piece boundaries, and holds back any tail that could still turn
// into a stop string, so the streamed text never contains (the start of) a matched stop string.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fathom::scheduler {

class StopStringMatcher {
 public:
  // Empty stop strings are ignored.
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  struct Result {
    std::string text;                  // safe to stream now
    std::optional<std::string> match;  // the stop string that was found; `text` is what precedes it
  };

  // Appends `piece`. After a match, the stream is over: further pushes return nothing.
  Result push(std::string_view piece);
  // Appends `piece` without looking for stop strings: what is held back and `piece` stream now (no match).
  Result push_unmatched(std::string_view piece);
  // End of stream without a match: everything held back.
  std::string flush();
  bool matched() const { return matched_; }

 private:
  std::vector<std::string> stop_strings_;
  std::string held_;  // received but not yet streamed; always a prefix of some stop string after push()
  bool matched_ = false;
};

}  // namespace fathom::scheduler
