#include "function_call/tool_call_parser.h"

#include "core/error.h"
#include "function_call/call_syntax.h"
#include "function_call/deepseek_markers.h"
#include "function_call/deepseek_tool_call_parser.h"

namespace fathom::function_call {

namespace {

std::unique_ptr<const CallSyntax> make_syntax(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kDeepSeekV3: return make_deepseekv3_syntax();
    case ToolCallFormat::kDeepSeekV31: return make_deepseekv31_syntax();
  }
  FATHOM_FAIL("unknown tool-call format " << static_cast<int>(format));
}

}  // namespace

std::optional<ToolCallFormat> parse_tool_call_format(std::string_view name) {
  if (name == "deepseekv3") return ToolCallFormat::kDeepSeekV3;
  if (name == "deepseekv31") return ToolCallFormat::kDeepSeekV31;
  return std::nullopt;
}

std::string_view tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kDeepSeekV3: return "deepseekv3";
    case ToolCallFormat::kDeepSeekV31: return "deepseekv31";
  }
  return "unknown";
}

std::string tool_call_format_choices() { return "deepseekv3, deepseekv31"; }

void accumulate(ToolCallParseResult& result, const ToolCallChunk& chunk) {
  result.normal_text += chunk.normal_text;
  for (const ToolCallDelta& delta : chunk.calls) {
    FATHOM_CHECK(delta.index >= 0 && static_cast<size_t>(delta.index) <= result.calls.size(),
                 "tool-call delta for call " << delta.index << " after " << result.calls.size() << " calls");
    if (static_cast<size_t>(delta.index) == result.calls.size()) {
      FATHOM_CHECK(delta.name.has_value(), "the first delta of tool call " << delta.index << " has no name");
      result.calls.push_back(ToolCall{*delta.name, ""});
    }
    result.calls[static_cast<size_t>(delta.index)].arguments += delta.arguments;
  }
}

std::unique_ptr<ToolCallParser> make_tool_call_parser(ToolCallFormat format, ToolCallParserOptions options) {
  return std::make_unique<DeepSeekToolCallParser>(make_syntax(format), std::move(options));
}

ToolCallParseResult parse_tool_calls(ToolCallFormat format, std::string_view text, ToolCallParserOptions options) {
  std::unique_ptr<ToolCallParser> parser = make_tool_call_parser(format, std::move(options));
  ToolCallParseResult result;
  accumulate(result, parser->push(text));
  accumulate(result, parser->finish());
  return result;
}

std::string forced_call_opening(ToolCallFormat format, const std::optional<std::string>& name) {
  return std::string(deepseek::kCallsBegin) + make_syntax(format)->call_opening(name);
}

std::vector<std::string> tool_call_markers(ToolCallFormat format) {
  std::vector<std::string> markers;
  for (std::string_view marker : deepseek::all_markers()) markers.emplace_back(marker);
  return markers;
}

}  // namespace fathom::function_call
