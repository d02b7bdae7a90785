#include "core/marker_search.h"

#include <bitset>

namespace fathom {

std::optional<MarkerMatch> find_first_marker(std::string_view text, const std::vector<std::string_view>& markers,
                                             bool allow_partial) {
  std::bitset<256> first_bytes;
  for (std::string_view marker : markers) {
    if (!marker.empty()) first_bytes.set(static_cast<unsigned char>(marker.front()));
  }
  for (size_t position = 0; position < text.size(); ++position) {
    if (!first_bytes.test(static_cast<unsigned char>(text[position]))) continue;
    const std::string_view rest = text.substr(position);
    std::optional<MarkerMatch> complete, partial;
    for (size_t index = 0; index < markers.size(); ++index) {
      const std::string_view marker = markers[index];
      if (marker.empty() || marker.front() != rest.front()) continue;
      if (rest.size() >= marker.size()) {
        if (rest.substr(0, marker.size()) == marker && (!complete || marker.size() > markers[complete->marker].size())) {
          complete = MarkerMatch{position, index, true};
        }
      } else if (allow_partial && !partial && marker.substr(0, rest.size()) == rest) {
        partial = MarkerMatch{position, index, false};  // longer than any complete marker here
      }
    }
    if (partial) return partial;
    if (complete) return complete;
  }
  return std::nullopt;
}

size_t utf8_complete_prefix_length(std::string_view text) {
  // Look back over at most three continuation bytes for the sequence's lead byte.
  size_t end = text.size();
  size_t continuation = 0;
  while (continuation < 3 && end > continuation &&
         (static_cast<unsigned char>(text[end - 1 - continuation]) & 0xC0) == 0x80) {
    ++continuation;
  }
  if (continuation == end) return end;  // only continuation bytes (or empty): nothing to hold back
  const unsigned char lead = static_cast<unsigned char>(text[end - 1 - continuation]);
  size_t needed = 1;
  if ((lead & 0xE0) == 0xC0) needed = 2;
  else if ((lead & 0xF0) == 0xE0) needed = 3;
  else if ((lead & 0xF8) == 0xF0) needed = 4;
  if (needed > 1 && continuation + 1 < needed) return end - 1 - continuation;
  return end;
}

}  // namespace fathom
