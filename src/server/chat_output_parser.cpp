#include "server/chat_output_parser.h"

#include <algorithm>

#include "core/error.h"

namespace fathom::server {

void ChatOutputDelta::append(ChatOutputDelta other) {
  content += other.content;
  reasoning += other.reasoning;
  for (function_call::ToolCallDelta& delta : other.tool_calls) {
    if (!tool_calls.empty() && tool_calls.back().index == delta.index && !delta.name) {
      tool_calls.back().arguments += delta.arguments;
    } else {
      tool_calls.push_back(std::move(delta));
    }
  }
}

ChatOutputParser::ChatOutputParser(std::shared_ptr<const ChatOutputOptions> options)
    : options_(std::move(options)), remover_(options_ ? options_->removed_strings : std::vector<std::string>{}) {
  FATHOM_CHECK(options_ != nullptr, "ChatOutputParser needs options");
  if (options_->reasoning_format) {
    reasoning_ = reasoning::make_reasoning_parser(*options_->reasoning_format, options_->starts_in_reasoning);
  }
  if (options_->tool_format) {
    function_call::ToolCallParserOptions tool_options;
    tool_options.known_names = options_->tool_names;
    tools_ = function_call::make_tool_call_parser(*options_->tool_format, std::move(tool_options));
  }
}

ChatOutputDelta ChatOutputParser::start() {
  ChatOutputDelta out;
  if (reasoning_ && !options_->forced_reasoning_text.empty()) {
    reasoning::ReasoningChunk chunk = reasoning_->push(options_->forced_reasoning_text);
    out.reasoning += chunk.reasoning_text;
    if (tools_) {
      function_call::ToolCallChunk calls = tools_->push(chunk.normal_text);
      out.content += calls.normal_text;
      out.tool_calls = std::move(calls.calls);
    } else {
      out.content += chunk.normal_text;
    }
  }
  if (tools_ && !options_->forced_tool_text.empty()) {
    function_call::ToolCallChunk calls = tools_->push_forced(options_->forced_tool_text);
    ChatOutputDelta forced;
    forced.content = std::move(calls.normal_text);
    forced.tool_calls = std::move(calls.calls);
    out.append(std::move(forced));
  }
  keep_allowed_calls(out.tool_calls);
  return out;
}

ChatOutputDelta ChatOutputParser::push(std::string_view text) { return route(remover_.push(text), false); }

ChatOutputDelta ChatOutputParser::finish() { return route(remover_.finish(), true); }

ChatOutputDelta ChatOutputParser::route(std::string_view text, bool at_end) {
  ChatOutputDelta out;
  std::string normal;
  if (reasoning_) {
    reasoning::ReasoningChunk chunk = reasoning_->push(text);
    if (at_end) {
      reasoning::ReasoningChunk rest = reasoning_->finish();
      chunk.reasoning_text += rest.reasoning_text;
      chunk.normal_text += rest.normal_text;
    }
    out.reasoning = std::move(chunk.reasoning_text);
    normal = std::move(chunk.normal_text);
  } else {
    normal = std::string(text);
  }
  if (tools_) {
    function_call::ToolCallChunk calls = tools_->push(normal);
    out.content = std::move(calls.normal_text);
    out.tool_calls = std::move(calls.calls);
    if (at_end) {
      function_call::ToolCallChunk rest = tools_->finish();
      ChatOutputDelta tail;
      tail.content = std::move(rest.normal_text);
      tail.tool_calls = std::move(rest.calls);
      out.append(std::move(tail));
    }
    keep_allowed_calls(out.tool_calls);
  } else {
    out.content = std::move(normal);
  }
  return out;
}

void ChatOutputParser::keep_allowed_calls(std::vector<function_call::ToolCallDelta>& calls) const {
  if (options_->parallel_tool_calls) return;
  calls.erase(std::remove_if(calls.begin(), calls.end(), [](const function_call::ToolCallDelta& delta) { return delta.index > 0; }),
              calls.end());
}

int32_t ChatOutputParser::tool_call_count() const {
  if (!tools_) return 0;
  const int32_t count = tools_->call_count();
  return options_->parallel_tool_calls ? count : std::min<int32_t>(count, 1);
}

ChatOutput parse_chat_output(std::shared_ptr<const ChatOutputOptions> options, std::string_view text) {
  ChatOutputParser parser(std::move(options));
  ChatOutputDelta all = parser.start();
  all.append(parser.push(text));
  all.append(parser.finish());
  ChatOutput output;
  output.content = std::move(all.content);
  output.reasoning = std::move(all.reasoning);
  function_call::ToolCallParseResult calls;
  function_call::ToolCallChunk chunk;
  chunk.calls = std::move(all.tool_calls);
  function_call::accumulate(calls, chunk);
  output.tool_calls = std::move(calls.calls);
  return output;
}

}  // namespace fathom::server
