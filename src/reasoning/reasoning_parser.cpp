#include "reasoning/reasoning_parser.h"

#include "core/error.h"
#include "core/marker_search.h"
#include "reasoning/deepseek_r1_reasoning_parser.h"

namespace fathom::reasoning {

std::optional<ReasoningFormat> parse_reasoning_format(std::string_view name) {
  if (name == "deepseek-r1") return ReasoningFormat::kDeepSeekR1;
  return std::nullopt;
}

std::string_view reasoning_format_name(ReasoningFormat format) {
  switch (format) {
    case ReasoningFormat::kDeepSeekR1: return "deepseek-r1";
  }
  return "unknown";
}

std::string reasoning_format_choices() { return "deepseek-r1"; }

std::unique_ptr<ReasoningParser> make_reasoning_parser(ReasoningFormat format, bool starts_in_reasoning) {
  switch (format) {
    case ReasoningFormat::kDeepSeekR1: return std::make_unique<DeepSeekR1ReasoningParser>(starts_in_reasoning);
  }
  FATHOM_FAIL("unknown reasoning format " << static_cast<int>(format));
}

ReasoningChunk parse_reasoning(ReasoningFormat format, std::string_view text, bool starts_in_reasoning) {
  std::unique_ptr<ReasoningParser> parser = make_reasoning_parser(format, starts_in_reasoning);
  ReasoningChunk result = parser->push(text);
  ReasoningChunk rest = parser->finish();
  result.reasoning_text += rest.reasoning_text;
  result.normal_text += rest.normal_text;
  return result;
}

bool prompt_opens_reasoning(ReasoningFormat format, std::string_view prompt) {
  size_t end = prompt.size();
  while (end > 0 && is_ascii_space(prompt[end - 1])) --end;
  const std::string_view open = "<think>";
  return end >= open.size() && prompt.substr(end - open.size(), open.size()) == open;
}

std::string reasoning_open_marker(ReasoningFormat format) { return "<think>"; }

std::string reasoning_close_marker(ReasoningFormat format) { return "</think>"; }

std::vector<std::string> reasoning_markers(ReasoningFormat format) { return {"<think>", "</think>"}; }

}  // namespace fathom::reasoning
