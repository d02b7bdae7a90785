#pragma once
// The function-calling fields of a chat request: `tools`, `tool_choice`, `parallel_tool_calls`, and the tool
// parts of the message history (assistant `tool_calls`, `role: tool` messages with `tool_call_id`). Invalid
// values throw ApiError(400) naming the field, in OpenAI's wording.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/json_fields.h"

namespace fathom::server {

struct ToolChoice {
  enum class Mode {
    kNone,      // no calls: the tools are not shown to the model and its output is not parsed for calls
    kAuto,      // the model decides; its output is parsed for calls
    kRequired,  // the model must call one of the tools
    kFunction,  // the model must call `function_name`
  };
  Mode mode = Mode::kNone;
  std::string function_name;

  bool forces_call() const { return mode == Mode::kRequired || mode == Mode::kFunction; }
};

struct ChatTools {
  Json tools;                      // null, or the request's validated non-empty array (passed to the template as is)
  std::vector<std::string> names;  // the tools' function names, in request order
  ToolChoice choice;               // default: auto with tools, none without
  bool parallel_tool_calls = true;
};

ChatTools parse_chat_tools(const JsonFields& fields);

// Checks the tool parts of `messages` (already checked to be objects with a string role): assistant
// `tool_calls` must be [{"id", "type": "function", "function": {"name", "arguments": string or object}}] and
// tool messages need a string `tool_call_id`. A null or empty `tool_calls` is removed (templates test for the
// key's presence). Arguments are passed to the template as given (OpenAI clients send JSON text).
void prepare_tool_messages(Json& messages);

}  // namespace fathom::server
