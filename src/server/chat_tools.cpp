#include "server/chat_tools.h"

#include <algorithm>
#include <set>

#include "server/api_error.h"

namespace fathom::server {

namespace {

constexpr size_t kMaxFunctionNameBytes = 64;  // OpenAI's limit: ^[a-zA-Z0-9_-]{1,64}$
constexpr size_t kMaxTools = 128;             // OpenAI's limit

bool valid_function_name(const std::string& name) {
  return !name.empty() && name.size() <= kMaxFunctionNameBytes && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

[[noreturn]] void type_error(const std::string& param, const char* expected, const Json& actual) {
  throw ApiError(400, "Invalid type for '" + param + "': expected " + expected + ", but got " + json_type_phrase(actual) + " instead.",
                 param, "invalid_type");
}

const Json& require_member(const Json& object, const std::string& key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) throw ApiError::missing(where + "." + key);
  return *it;
}

const std::string& require_string(const Json& object, const std::string& key, const std::string& where) {
  const Json& value = require_member(object, key, where);
  if (!value.is_string()) type_error(where + "." + key, "a string", value);
  return value.get_ref<const std::string&>();
}

void require_function_type(const Json& object, const std::string& where) {
  const std::string& type = require_string(object, "type", where);
  if (type != "function") {
    throw ApiError::invalid_value(where + ".type", "Invalid value for '" + where + ".type': expected 'function', got '" +
                                                       type.substr(0, 64) + "'.");
  }
}

std::string parse_tool(const Json& tool, const std::string& where) {
  if (!tool.is_object()) type_error(where, "an object", tool);
  require_function_type(tool, where);
  const Json& function = require_member(tool, "function", where);
  const std::string function_where = where + ".function";
  if (!function.is_object()) type_error(function_where, "an object", function);
  const std::string& name = require_string(function, "name", function_where);
  if (!valid_function_name(name)) {
    throw ApiError::invalid_value(function_where + ".name",
                                  "Invalid '" + function_where + ".name': string does not match pattern. Expected a string "
                                  "that matches the pattern '^[a-zA-Z0-9_-]{1,64}$'.");
  }
  if (auto description = function.find("description"); description != function.end() && !description->is_null() &&
                                                        !description->is_string()) {
    type_error(function_where + ".description", "a string", *description);
  }
  if (auto parameters = function.find("parameters"); parameters != function.end() && !parameters->is_null() &&
                                                     !parameters->is_object()) {
    type_error(function_where + ".parameters", "an object (a JSON Schema)", *parameters);
  }
  if (auto strict = function.find("strict"); strict != function.end() && !strict->is_null() && !strict->is_boolean()) {
    type_error(function_where + ".strict", "a boolean", *strict);
  }
  return name;
}

ToolChoice parse_tool_choice(const Json& value, const std::vector<std::string>& names) {
  ToolChoice choice;
  if (value.is_string()) {
    const std::string& mode = value.get_ref<const std::string&>();
    if (mode == "none") choice.mode = ToolChoice::Mode::kNone;
    else if (mode == "auto") choice.mode = ToolChoice::Mode::kAuto;
    else if (mode == "required") choice.mode = ToolChoice::Mode::kRequired;
    else {
      throw ApiError::invalid_value("tool_choice", "Invalid value for 'tool_choice': '" + mode.substr(0, 64) +
                                                       "' is not one of 'none', 'auto', 'required' or a function object.");
    }
  } else if (value.is_object()) {
    require_function_type(value, "tool_choice");
    const Json& function = require_member(value, "function", "tool_choice");
    if (!function.is_object()) type_error("tool_choice.function", "an object", function);
    choice.mode = ToolChoice::Mode::kFunction;
    choice.function_name = require_string(function, "name", "tool_choice.function");
    if (std::find(names.begin(), names.end(), choice.function_name) == names.end()) {
      std::string known;
      for (const std::string& name : names) known += (known.empty() ? "'" : ", '") + name + "'";
      throw ApiError::invalid_value("tool_choice", "Invalid value for 'tool_choice': function '" + choice.function_name.substr(0, 64) +
                                                       "' is not one of the request's tools (" +
                                                       (known.empty() ? std::string("none given") : known) + ").");
    }
  } else {
    type_error("tool_choice", "a string or an object", value);
  }
  if (choice.forces_call() && names.empty()) {
    throw ApiError::invalid_value("tool_choice", "Invalid value for 'tool_choice': 'tool_choice' requires 'tools' to be specified.");
  }
  return choice;
}

void validate_tool_calls(const Json& calls, const std::string& where) {
  if (!calls.is_array()) type_error(where, "an array", calls);
  for (size_t i = 0; i < calls.size(); ++i) {
    const Json& call = calls[i];
    const std::string call_where = where + "[" + std::to_string(i) + "]";
    if (!call.is_object()) type_error(call_where, "an object", call);
    require_string(call, "id", call_where);
    require_function_type(call, call_where);
    const Json& function = require_member(call, "function", call_where);
    if (!function.is_object()) type_error(call_where + ".function", "an object", function);
    require_string(function, "name", call_where + ".function");
    const Json& arguments = require_member(function, "arguments", call_where + ".function");
    if (!arguments.is_string() && !arguments.is_object()) {
      type_error(call_where + ".function.arguments", "a string (JSON text)", arguments);
    }
  }
}

}  // namespace

ChatTools parse_chat_tools(const JsonFields& fields) {
  ChatTools tools;
  if (fields.has("functions") || fields.has("function_call")) {
    throw ApiError(400, "The deprecated 'functions' / 'function_call' parameters are not supported; use 'tools' and 'tool_choice'.",
                   fields.has("functions") ? "functions" : "function_call", "unsupported_parameter");
  }
  if (const Json* list = fields.array("tools")) {
    if (list->size() > kMaxTools) {
      throw ApiError::invalid_value("tools", "Invalid 'tools': at most " + std::to_string(kMaxTools) + " tools are allowed, got " +
                                                 std::to_string(list->size()) + ".");
    }
    std::set<std::string> seen;
    for (size_t i = 0; i < list->size(); ++i) {
      std::string name = parse_tool((*list)[i], "tools[" + std::to_string(i) + "]");
      if (!seen.insert(name).second) {
        throw ApiError::invalid_value("tools", "Invalid 'tools': the function name '" + name + "' is used by more than one tool.");
      }
      tools.names.push_back(std::move(name));
    }
    if (!list->empty()) tools.tools = *list;
  }
  tools.choice.mode = tools.names.empty() ? ToolChoice::Mode::kNone : ToolChoice::Mode::kAuto;
  if (const Json* choice = fields.get("tool_choice")) tools.choice = parse_tool_choice(*choice, tools.names);
  tools.parallel_tool_calls = fields.boolean("parallel_tool_calls").value_or(true);
  return tools;
}

void prepare_tool_messages(Json& messages) {
  bool answering_calls = false;  // after an assistant message with tool calls, through the tool messages that follow
  for (size_t i = 0; i < messages.size(); ++i) {
    Json& message = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    const std::string role = message.at("role").get<std::string>();
    if (auto calls = message.find("tool_calls"); calls != message.end()) {
      if (calls->is_null() || (calls->is_array() && calls->empty())) {
        message.erase("tool_calls");
      } else if (role != "assistant") {
        throw ApiError::invalid_value(where + ".tool_calls", "Invalid '" + where + ".tool_calls': only assistant messages carry tool calls.");
      } else {
        validate_tool_calls(*calls, where + ".tool_calls");
      }
    }
    if (role == "tool") {
      require_string(message, "tool_call_id", where);
      // As OpenAI requires: the template renders a tool result as the answer to the calls just before it.
      if (!answering_calls) {
        throw ApiError::invalid_value(where + ".role", "Invalid '" + where + "': a 'tool' message must follow an assistant "
                                                       "message with 'tool_calls' (or another 'tool' message answering them).");
      }
    } else {
      answering_calls = role == "assistant" && message.contains("tool_calls");
    }
  }
}

}  // namespace fathom::server
