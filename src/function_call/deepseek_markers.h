#pragma once
// The DeepSeek-V3 / V3.1 tool-call marker strings. They are tokens of DeepSeek's tokenizers (ids differ between
// tokenizers), so the parsers find them on decoded text, never by token id.
#include <string_view>
#include <vector>

namespace fathom::function_call::deepseek {

inline constexpr std::string_view kCallsBegin = "<｜tool▁calls▁begin｜>";
inline constexpr std::string_view kCallsEnd = "<｜tool▁calls▁end｜>";
inline constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
inline constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
inline constexpr std::string_view kSeparator = "<｜tool▁sep｜>";
// Tool-output markers belong in prompts only; a model that emits them gets them removed from its content.
inline constexpr std::string_view kOutputsBegin = "<｜tool▁outputs▁begin｜>";
inline constexpr std::string_view kOutputsEnd = "<｜tool▁outputs▁end｜>";
inline constexpr std::string_view kOutputBegin = "<｜tool▁output▁begin｜>";
inline constexpr std::string_view kOutputEnd = "<｜tool▁output▁end｜>";

// Every marker above, in a fixed order.
inline const std::vector<std::string_view>& all_markers() {
  static const std::vector<std::string_view> markers = {kCallsBegin, kCallsEnd,   kCallBegin,    kCallEnd,  kSeparator,
                                                        kOutputsBegin, kOutputsEnd, kOutputBegin, kOutputEnd};
  return markers;
}

}  // namespace fathom::function_call::deepseek
