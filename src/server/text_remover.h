#pragma once
// Removes a fixed set of strings (e.g. a tokenizer's special-token texts) from streamed text: an occurrence
// cut by a chunk boundary is held back until it completes or proves not to be one, so the output is the same
// for any chunking. Used where special tokens must be decoded (for the output parsers) but not shown.
#include <string>
#include <string_view>
#include <vector>

namespace fathom::server {

class TextRemover {
 public:
  explicit TextRemover(std::vector<std::string> strings);
  bool empty() const { return strings_.empty(); }

  // The text made final by this chunk, with the strings removed.
  std::string push(std::string_view text);
  // End of text: whatever was held back (a partial occurrence is kept as text).
  std::string finish();

 private:
  std::string drain(bool at_end);

  std::vector<std::string> strings_;
  std::vector<std::string_view> views_;
  std::string buffer_;
};

}  // namespace fathom::server
