#pragma once
// The parsing of one chat choice's generated text into the OpenAI message fields: special-token texts removed
// (when the request skips special tokens), then the reasoning split off (--reasoning-parser), then tool calls
// parsed out of the rest (--tool-call-parser). Streamed (push per engine text delta) and non-streamed
// (parse_chat_output) results agree: the latter is the former over the whole text.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "function_call/tool_call_parser.h"
#include "reasoning/reasoning_parser.h"
#include "server/text_remover.h"

namespace fathom::server {

struct ChatOutputOptions {
  std::optional<function_call::ToolCallFormat> tool_format;    // parse tool calls
  std::vector<std::string> tool_names;                         // the request's tools (calls to others are content)
  bool parallel_tool_calls = true;                             // false: only the first call is reported
  std::optional<reasoning::ReasoningFormat> reasoning_format;  // split off the reasoning
  bool starts_in_reasoning = false;                            // the prompt opened the reasoning block
  // Text the server appended to the prompt as the start of the output (forcing a call), fed to the parsers
  // before the model's text: first to the reasoning parser (closing the block), then to the tool parser.
  std::string forced_reasoning_text;
  std::string forced_tool_text;
  std::vector<std::string> removed_strings;  // special-token texts hidden from the output

  bool active() const { return tool_format.has_value() || reasoning_format.has_value(); }
};

struct ChatOutputDelta {
  std::string content;
  std::string reasoning;
  std::vector<function_call::ToolCallDelta> tool_calls;
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
  void append(ChatOutputDelta other);
};

class ChatOutputParser {
 public:
  explicit ChatOutputParser(std::shared_ptr<const ChatOutputOptions> options);

  // The output of the forced prefix (a named call's first delta); call once, before push().
  ChatOutputDelta start();
  ChatOutputDelta push(std::string_view text);
  ChatOutputDelta finish();
  int32_t tool_call_count() const;

 private:
  // Text after special-token removal, through the reasoning and tool parsers.
  ChatOutputDelta route(std::string_view text, bool at_end);
  void keep_allowed_calls(std::vector<function_call::ToolCallDelta>& calls) const;

  std::shared_ptr<const ChatOutputOptions> options_;
  TextRemover remover_;
  std::unique_ptr<reasoning::ReasoningParser> reasoning_;
  std::unique_ptr<function_call::ToolCallParser> tools_;
};

struct ChatOutput {
  std::string content;
  std::string reasoning;
  std::vector<function_call::ToolCall> tool_calls;
};

// The non-streaming result: start(), push(text), finish() accumulated.
ChatOutput parse_chat_output(std::shared_ptr<const ChatOutputOptions> options, std::string_view text);

}  // namespace fathom::server
