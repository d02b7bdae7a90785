#pragma once
// Finding marker strings (e.g. "<｜tool▁call▁begin｜>", "</think>") in streamed text, for parsers that must
// decide the same way however the text is chunked: a marker cut off by the end of the text so far is reported
// as partial, so that the caller holds that text back until more arrives (or the stream ends).
#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

namespace fathom {

struct MarkerMatch {
  size_t position = 0;  // byte offset of the marker's first byte in the searched text
  size_t marker = 0;    // index into the marker list
  bool complete = true; // false: the text ends with a proper prefix of markers[marker]
};

// The earliest position in `text` where a marker starts: completely, or (when allow_partial) as a proper
// prefix of a marker that runs to the end of `text`. At one position a complete marker wins (the longest
// complete one), unless a longer marker could still match there, in which case the match is partial.
// Empty markers are ignored. O(text.size() * total marker bytes) in the worst case.
std::optional<MarkerMatch> find_first_marker(std::string_view text, const std::vector<std::string_view>& markers,
                                             bool allow_partial);

// The length of the longest prefix of `text` that does not end inside a UTF-8 sequence: a trailing lead byte
// whose continuation bytes have not all arrived is excluded. Text cut there never splits a character.
size_t utf8_complete_prefix_length(std::string_view text);

// Whether `c` is ASCII whitespace (space, \t, \n, \r, \f, \v).
inline bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace fathom
