#pragma once
// Python `str` semantics on UTF-8 strings: code-point indexing, whitespace, split/strip, repr of str and float.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fathom::chat::jinja {

// Decodes UTF-8; invalid bytes become U+FFFD so a bad input never stalls rendering.
std::u32string decode_utf8(std::string_view text);
void append_utf8(std::string& out, char32_t code_point);
std::string encode_utf8(std::u32string_view code_points);
size_t count_code_points(std::string_view text);
bool is_ascii(std::string_view text);

// str.isspace() for one code point (the set Python's `\s` and str.strip() use).
bool is_python_space(char32_t code_point);

enum class StripSide { Both, Left, Right };
// str.strip / lstrip / rstrip; `chars` absent means whitespace.
std::string python_strip(std::string_view text, StripSide side, const std::optional<std::string>& chars);

// str.split / str.rsplit; `separator` absent means runs of whitespace. max_split < 0 means no limit.
std::vector<std::string> python_split(std::string_view text, const std::optional<std::string>& separator,
                                      int64_t max_split);
std::vector<std::string> python_rsplit(std::string_view text, const std::optional<std::string>& separator,
                                       int64_t max_split);
// str.splitlines(): the Python line-boundary set, separators dropped.
std::vector<std::string> python_splitlines(std::string_view text);
// str.replace; count < 0 means all.
std::string python_replace(std::string_view text, std::string_view old_text, std::string_view new_text,
                           int64_t count);

// ASCII-only case mapping (non-ASCII passes through unchanged).
std::string ascii_upper(std::string_view text);
std::string ascii_lower(std::string_view text);
std::string python_capitalize(std::string_view text);
// Jinja's `title` filter: upper-case the first letter after each run of [-\s({[<].
std::string jinja_title(std::string_view text);

// repr(str): quotes chosen as Python does, control characters escaped.
std::string python_string_repr(std::string_view text);
// repr(float) / str(float): shortest round-trip digits, Python's exponent thresholds.
std::string python_float_repr(double value);

}  // namespace fathom::chat::jinja
