#pragma once
// The server's output parsers (--tool-call-parser, --reasoning-parser) and what they mean for one chat
// request: which parsers run on its output, what the prompt must end with to force a tool call, and which
// special-token texts to hide once special tokens are decoded for the parsers.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "function_call/tool_call_parser.h"
#include "reasoning/reasoning_parser.h"
#include "server/chat_output_parser.h"
#include "server/openai_request.h"

namespace fathom::server {

class TokenizerPromptCodec;

struct OutputParsers {
  std::optional<function_call::ToolCallFormat> tool_call_format;
  std::optional<reasoning::ReasoningFormat> reasoning_format;
};

// From the flag values (absent: no parser); throws fathom::Error naming the flag and its choices.
OutputParsers parse_output_parser_flags(const std::optional<std::string>& tool_call_parser,
                                        const std::optional<std::string>& reasoning_parser);

// Startup warnings: a marker that is not one token of the tokenizer (the model cannot emit it as trained),
// a chat template that never mentions `tools` (tool definitions would not reach the model).
std::vector<std::string> output_parser_warnings(const OutputParsers& parsers, const TokenizerPromptCodec& codec);

struct ChatOutputPlan {
  std::shared_ptr<const ChatOutputOptions> options;  // null: no parsing, the text is the content
  std::string prompt_suffix;                         // appended to the rendered prompt (a forced call's opening)
  bool decode_special_tokens = false;                // the engine must keep special tokens in the text
};

// Throws ApiError(400) when the request forces a call but the server has no tool-call parser.
// `special_token_texts`: the tokenizer's special tokens, hidden from the output when skip_special_tokens.
ChatOutputPlan plan_chat_output(const OutputParsers& parsers, const ChatRequest& request, const std::string& rendered_prompt,
                                const std::vector<std::string>& special_token_texts);

}  // namespace fathom::server
