#include "server/output_parsing.h"

#include <algorithm>

#include "core/error.h"
#include "server/api_error.h"
#include "server/tokenizer_codec.h"

namespace fathom::server {

OutputParsers parse_output_parser_flags(const std::optional<std::string>& tool_call_parser,
                                        const std::optional<std::string>& reasoning_parser) {
  OutputParsers parsers;
  if (tool_call_parser) {
    parsers.tool_call_format = function_call::parse_tool_call_format(*tool_call_parser);
    FATHOM_CHECK(parsers.tool_call_format, "--tool-call-parser '" << *tool_call_parser << "' is not one of "
                                                                  << function_call::tool_call_format_choices());
  }
  if (reasoning_parser) {
    parsers.reasoning_format = reasoning::parse_reasoning_format(*reasoning_parser);
    FATHOM_CHECK(parsers.reasoning_format, "--reasoning-parser '" << *reasoning_parser << "' is not one of "
                                                                  << reasoning::reasoning_format_choices());
  }
  return parsers;
}

std::vector<std::string> output_parser_warnings(const OutputParsers& parsers, const TokenizerPromptCodec& codec) {
  std::vector<std::string> warnings;
  auto check_markers = [&](const std::vector<std::string>& markers, const std::string& flag) {
    for (const std::string& marker : markers) {
      if (!codec.tokenizer().token_to_id(marker)) {
        warnings.push_back(flag + ": '" + marker + "' is not a token of this tokenizer; the model may not produce it");
      }
    }
  };
  if (parsers.tool_call_format) {
    check_markers(function_call::tool_call_markers(*parsers.tool_call_format),
                  "--tool-call-parser " + std::string(function_call::tool_call_format_name(*parsers.tool_call_format)));
    if (codec.has_chat_template() && codec.chat_template_source().find("tools") == std::string::npos) {
      warnings.push_back("--tool-call-parser: the chat template never mentions 'tools', so tool definitions do not reach the "
                         "model (pass --chat-template FILE with a template that renders them)");
    }
  }
  if (parsers.reasoning_format) {
    check_markers(reasoning::reasoning_markers(*parsers.reasoning_format),
                  "--reasoning-parser " + std::string(reasoning::reasoning_format_name(*parsers.reasoning_format)));
  }
  return warnings;
}

ChatOutputPlan plan_chat_output(const OutputParsers& parsers, const ChatRequest& request, const std::string& rendered_prompt,
                                const std::vector<std::string>& special_token_texts) {
  ChatOutputPlan plan;
  const ChatTools& tools = request.tools;
  if (tools.choice.forces_call() && !parsers.tool_call_format) {
    throw ApiError(400, "'tool_choice' " + std::string(tools.choice.mode == ToolChoice::Mode::kRequired ? "'required'" : "naming a function") +
                            " needs the server to parse tool calls: start it with --tool-call-parser (" +
                            function_call::tool_call_format_choices() + ").",
                   "tool_choice", "unsupported_parameter");
  }
  auto options = std::make_shared<ChatOutputOptions>();
  if (parsers.tool_call_format && tools.choice.mode != ToolChoice::Mode::kNone && !tools.names.empty()) {
    options->tool_format = parsers.tool_call_format;
    options->tool_names = tools.names;
    options->parallel_tool_calls = tools.parallel_tool_calls;
  }
  if (parsers.reasoning_format && request.separate_reasoning) options->reasoning_format = parsers.reasoning_format;
  // Thinking templates end the prompt inside an opened block; the DeepSeek-R1 markers are the only ones known.
  const reasoning::ReasoningFormat thinking = parsers.reasoning_format.value_or(reasoning::ReasoningFormat::kDeepSeekR1);
  bool prompt_opens_reasoning = reasoning::prompt_opens_reasoning(thinking, rendered_prompt);
  if (request.assistant_prefix) {
    // The continued text may open or close the reasoning block itself; its last marker decides.
    const size_t opened = request.assistant_prefix->rfind(reasoning::reasoning_open_marker(thinking));
    const size_t closed = request.assistant_prefix->rfind(reasoning::reasoning_close_marker(thinking));
    if (opened != std::string::npos || closed != std::string::npos) {
      prompt_opens_reasoning = closed == std::string::npos || (opened != std::string::npos && opened > closed);
    }
    if (tools.choice.forces_call()) {
      throw ApiError(400, "'tool_choice' that forces a call cannot be combined with 'continue_final_message'.",
                     "tool_choice", "unsupported_parameter");
    }
  }
  options->starts_in_reasoning = prompt_opens_reasoning;
  if (tools.choice.forces_call()) {
    // Continue the assistant turn from inside a call (after closing an opened reasoning block).
    const std::string close = prompt_opens_reasoning ? reasoning::reasoning_close_marker(thinking) : "";
    const std::optional<std::string> name =
        tools.choice.mode == ToolChoice::Mode::kFunction ? std::optional<std::string>(tools.choice.function_name) : std::nullopt;
    options->forced_tool_text = function_call::forced_call_opening(*parsers.tool_call_format, name);
    if (options->reasoning_format) options->forced_reasoning_text = close;
    plan.prompt_suffix = close + options->forced_tool_text;
  }
  if (!options->active()) return plan;
  plan.decode_special_tokens = true;
  if (request.sampling.skip_special_tokens) {
    // Hide the special tokens the client asked to skip, except the markers the parsers consume.
    std::vector<std::string> keep;
    if (options->tool_format) keep = function_call::tool_call_markers(*options->tool_format);
    if (options->reasoning_format) {
      for (std::string& marker : reasoning::reasoning_markers(*options->reasoning_format)) keep.push_back(std::move(marker));
    }
    for (const std::string& text : special_token_texts) {
      if (std::find(keep.begin(), keep.end(), text) == keep.end()) options->removed_strings.push_back(text);
    }
  }
  plan.options = std::move(options);
  return plan;
}

}  // namespace fathom::server
