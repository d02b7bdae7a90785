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
  // Appends `piece` without matching: a stop string that ends inside it is not found, but a tail that could start
  // one is still held back, so a stop string completed by a later push() is (as vLLM and SGLang match them).
  Result push_unmatched(std::string_view piece);
  // End of stream without a match: everything held back.
  std::string flush();
  bool matched() const { return matched_; }

 private:
  // Streams held_ but for its longest tail that is a proper prefix of some stop string.
  std::string release_unheld();

  std::vector<std::string> stop_strings_;
  std::string held_;  // received but not yet streamed; always a prefix of some stop string after push()
  bool matched_ = false;
};

}  // namespace fathom::scheduler
