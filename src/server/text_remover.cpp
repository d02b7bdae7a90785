#include "server/text_remover.h"

#include "core/marker_search.h"

namespace fathom::server {

TextRemover::TextRemover(std::vector<std::string> strings) : strings_(std::move(strings)) {
  for (const std::string& text : strings_) {
    if (!text.empty()) views_.push_back(text);
  }
}

std::string TextRemover::push(std::string_view text) {
  if (views_.empty()) return std::string(text);
  buffer_.append(text);
  return drain(false);
}

std::string TextRemover::finish() {
  if (views_.empty()) return {};
  return drain(true);
}

std::string TextRemover::drain(bool at_end) {
  std::string out;
  size_t start = 0;
  const std::string_view buffer = buffer_;
  for (;;) {
    const std::optional<MarkerMatch> match = find_first_marker(buffer.substr(start), views_, !at_end);
    if (!match) {
      const std::string_view rest = buffer.substr(start);
      const size_t emit = at_end ? rest.size() : utf8_complete_prefix_length(rest);
      out.append(rest.substr(0, emit));
      start += emit;
      break;
    }
    out.append(buffer.substr(start, match->position));
    start += match->position;
    if (!match->complete) break;
    start += views_[match->marker].size();
  }
  buffer_.erase(0, start);
  return out;
}

}  // namespace fathom::server
