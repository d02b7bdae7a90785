#include "server/openai_request.h"

#include <algorithm>
#include <cstdint>
#include <set>

#include "chat/chat_template.h"
#include "core/error.h"
#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/sampling_fields.h"

namespace fathom::server {

namespace {

void reject_if_present(const JsonFields& fields, const std::string& name, const std::string& why) {
  if (fields.has(name)) throw ApiError(400, "'" + name + "' is not supported" + why + ".", name, "unsupported_parameter");
}

// The sampling fields shared by both endpoints (OpenAI names plus the SGLang/vLLM extensions).
void parse_sampling(const JsonFields& fields, const RequestLimits& limits, scheduler::SamplingParams& sampling,
                    int64_t& n) {
  if (auto temperature = fields.number("temperature")) {
    fields.require_range("temperature", *temperature, 0.0, 2.0);
    sampling.temperature = static_cast<float>(*temperature);
  }
  const std::optional<double> top_p = fields.number("top_p");
  if (top_p) {
    fields.require_range("top_p", *top_p, 0.0, 1.0);
    if (*top_p > 0.0) sampling.top_p = static_cast<float>(*top_p);
  }
  if (auto top_k = fields.integer("top_k")) {
    if (*top_k < -1) throw ApiError::invalid_value("top_k", "Invalid 'top_k': must be -1 (disabled) or positive, got " + std::to_string(*top_k) + ".");
    sampling.top_k = *top_k <= 0 ? -1 : static_cast<int32_t>(std::min<int64_t>(*top_k, INT32_MAX));
  }
  if (top_p && *top_p == 0.0) sampling.top_k = 1;  // OpenAI accepts 0: the nucleus is the most likely token alone
  if (auto min_p = fields.number("min_p")) {
    fields.require_range("min_p", *min_p, 0.0, 1.0);
    sampling.min_p = static_cast<float>(*min_p);
  }
  if (auto seed = fields.integer("seed")) sampling.seed = static_cast<uint64_t>(*seed);
  if (auto stop = fields.string_or_strings("stop")) {
    if (stop->size() > limits.max_stop_sequences) {
      throw ApiError::invalid_value("stop", "Invalid 'stop': at most " + std::to_string(limits.max_stop_sequences) +
                                                " stop sequences are allowed, got " + std::to_string(stop->size()) + ".");
    }
    for (std::string& text : *stop) {
      if (!text.empty()) sampling.stop.push_back(std::move(text));
    }
  }
  if (auto presence = fields.number("presence_penalty")) {
    fields.require_range("presence_penalty", *presence, -2.0, 2.0);
    sampling.presence_penalty = static_cast<float>(*presence);
  }
  if (auto frequency = fields.number("frequency_penalty")) {
    fields.require_range("frequency_penalty", *frequency, -2.0, 2.0);
    sampling.frequency_penalty = static_cast<float>(*frequency);
  }
  if (auto count = fields.integer("n")) {
    if (*count < 1 || *count > limits.max_choices) {
      throw ApiError::invalid_value("n", "Invalid 'n': must be between 1 and " + std::to_string(limits.max_choices) +
                                             ", got " + std::to_string(*count) + ".");
    }
    n = *count;
  }
  // Extensions (SGLang / vLLM).
  if (auto ignore_eos = fields.boolean("ignore_eos")) sampling.ignore_eos = *ignore_eos;
  if (auto stop_ids = fields.int32_list("stop_token_ids")) sampling.stop_token_ids = *stop_ids;
  if (auto skip = fields.boolean("skip_special_tokens")) sampling.skip_special_tokens = *skip;
  if (auto min_tokens = fields.integer("min_tokens")) {
    fields.require_at_least("min_tokens", *min_tokens, 0);
    sampling.min_new_tokens = *min_tokens;
  }
  if (auto include_stop = fields.boolean("include_stop_str_in_output"); include_stop && *include_stop) {
    throw ApiError(400, "'include_stop_str_in_output' is not supported (stop strings are removed from the output).",
                   "include_stop_str_in_output", "unsupported_parameter");
  }
  sampling.repetition_penalty = parse_repetition_penalty(fields, "repetition_penalty");
  // vLLM's prompt_logprobs: each prompt token's logprob with this many alternatives (not streamed).
  if (auto prompt_logprobs = fields.integer("prompt_logprobs")) {
    if (*prompt_logprobs < 0 || *prompt_logprobs > limits.max_top_logprobs) {
      throw ApiError::invalid_value("prompt_logprobs", "Invalid 'prompt_logprobs': must be between 0 and " +
                                                           std::to_string(limits.max_top_logprobs) + ".");
    }
    if (fields.boolean("stream").value_or(false)) {
      throw ApiError(400, "'prompt_logprobs' is not supported with 'stream'.", "prompt_logprobs", "unsupported_parameter");
    }
    sampling.prompt_logprob_start = 0;
    sampling.prompt_top_logprobs = static_cast<int32_t>(*prompt_logprobs);
  }
  sampling.logit_bias = parse_logit_bias(fields, "logit_bias", limits.max_logit_bias_entries);
  // SGLang's and vLLM's constrained-decoding fields: refused, never ignored (the output would not follow them).
  for (const char* constrained : {"regex", "json_schema", "ebnf", "guided_json", "guided_regex", "guided_choice",
                                  "guided_grammar", "guided_whitespace_pattern", "structural_tag", "structured_outputs"}) {
    reject_if_present(fields, constrained, " (no constrained decoding)");
  }
  if (const Json* format = fields.object("response_format")) {
    auto type = format->find("type");
    if (type == format->end() || *type != "text") {
      throw ApiError(400, "'response_format' other than {\"type\": \"text\"} is not supported.", "response_format",
                     "unsupported_parameter");
    }
  }
}

void parse_stream_options(const JsonFields& fields, bool& stream, bool& include_usage) {
  stream = fields.boolean("stream").value_or(false);
  if (const Json* options = fields.object("stream_options")) {
    if (!stream) {
      throw ApiError(400, "The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options",
                     "invalid_value");
    }
    JsonFields option_fields(*options, "stream_options.");
    include_usage = option_fields.boolean("include_usage").value_or(false);
  }
}

std::optional<int64_t> parse_max_tokens(const JsonFields& fields, const char* name) {
  auto value = fields.integer(name);
  if (value) fields.require_at_least(name, *value, 1);
  return value;
}

std::vector<PromptSource> parse_prompts(const JsonFields& fields) {
  const Json* prompt = fields.get("prompt");
  if (!prompt) throw ApiError::missing("prompt");
  const char* expected = "a string, an array of strings, an array of integers or an array of integer arrays";
  std::vector<PromptSource> prompts;
  auto ids_from = [&](const Json& array) {
    PromptSource source;
    source.is_text = false;
    for (const Json& item : array) {
      if (!item.is_number_integer()) fields.type_error("prompt", expected, item);
      int64_t id = item.get<int64_t>();
      if (id < 0 || id > INT32_MAX) throw ApiError::invalid_value("prompt", "Invalid 'prompt': token id " + std::to_string(id) + " is out of range.");
      source.ids.push_back(static_cast<int32_t>(id));
    }
    if (source.ids.empty()) throw ApiError::invalid_value("prompt", "Invalid 'prompt': a token id list must not be empty.");
    return source;
  };
  if (prompt->is_string()) {
    prompts.push_back(PromptSource{true, prompt->get<std::string>(), {}});
  } else if (prompt->is_array()) {
    if (prompt->empty()) throw ApiError::invalid_value("prompt", "Invalid 'prompt': must not be an empty array.");
    const Json& first = prompt->front();
    if (first.is_number_integer()) {
      prompts.push_back(ids_from(*prompt));
    } else {
      for (const Json& item : *prompt) {
        if (item.is_string()) {
          prompts.push_back(PromptSource{true, item.get<std::string>(), {}});
        } else if (item.is_array()) {
          prompts.push_back(ids_from(item));
        } else {
          fields.type_error("prompt", expected, item);
        }
      }
    }
  } else {
    fields.type_error("prompt", expected, *prompt);
  }
  return prompts;
}

Json parse_messages(const JsonFields& fields) {
  const Json* messages = fields.get("messages");
  if (!messages) throw ApiError::missing("messages");
  if (!messages->is_array()) fields.type_error("messages", "an array", *messages);
  if (messages->empty()) throw ApiError::invalid_value("messages", "Invalid 'messages': must contain at least one message.");
  static const std::set<std::string> kRoles = {"system", "user", "assistant", "tool", "developer"};
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& message = (*messages)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!message.is_object()) {
      throw ApiError(400, "Invalid type for '" + where + "': expected an object, but got " + json_type_phrase(message) + " instead.",
                     where, "invalid_type");
    }
    auto role = message.find("role");
    if (role == message.end()) throw ApiError::missing(where + ".role");
    if (!role->is_string()) {
      throw ApiError(400, "Invalid type for '" + where + ".role': expected a string, but got " + json_type_phrase(*role) + " instead.",
                     where + ".role", "invalid_type");
    }
    if (*role == "function") {
      throw ApiError::invalid_value(where + ".role", "Invalid '" + where + ".role': 'function' messages (deprecated) "
                                                     "are not supported; send the result as a 'tool' message.");
    }
    if (!kRoles.count(role->get<std::string>())) {
      throw ApiError::invalid_value(where + ".role", "Invalid '" + where + ".role': '" + role->get<std::string>().substr(0, 64) +
                                                         "' is not one of system, user, assistant, tool, developer.");
    }
    auto content = message.find("content");
    if (content == message.end() || content->is_null()) {
      // An assistant turn may consist of tool calls only (their shape is checked by prepare_tool_messages).
      auto calls = message.find("tool_calls");
      const bool calls_given = calls != message.end() && !calls->is_null() && !(calls->is_array() && calls->empty());
      if (*role != "assistant" || !calls_given) throw ApiError::missing(where + ".content");
    } else if (!content->is_string() && !content->is_array()) {
      throw ApiError(400, "Invalid type for '" + where + ".content': expected a string or an array of content parts, but got " +
                              json_type_phrase(*content) + " instead.",
                     where + ".content", "invalid_type");
    }
  }
  Json joined;
  try {
    joined = chat::join_text_content_parts(*messages);
  } catch (const fathom::Error& error) {
    throw ApiError(400, std::string("Invalid 'messages': ") + error.what(), "messages", "invalid_value");
  }
  // OpenAI's 'developer' role replaces 'system' for newer models; DeepSeek's template knows only 'system'.
  for (Json& message : joined) {
    if (message["role"] == "developer") message["role"] = "system";
  }
  prepare_tool_messages(joined);
  return joined;
}

// Removes the final message for continue_final_message and returns its text; it must be a plain assistant message.
std::string take_final_assistant_text(Json& messages) {
  const Json& last = messages.back();
  const std::string where = "messages[" + std::to_string(messages.size() - 1) + "]";
  if (last["role"] != "assistant") {
    throw ApiError::invalid_value("continue_final_message", "Invalid 'continue_final_message': the last message (" + where +
                                                                ") must be an assistant message to continue.");
  }
  auto content = last.find("content");
  auto calls = last.find("tool_calls");
  if (content == last.end() || !content->is_string() ||
      (calls != last.end() && !calls->is_null() && !(calls->is_array() && calls->empty()))) {
    throw ApiError::invalid_value("continue_final_message", "Invalid 'continue_final_message': the last message (" + where +
                                                                ") must have text content and no tool calls.");
  }
  std::string text = content->get<std::string>();
  messages.erase(messages.size() - 1);
  return text;
}

}  // namespace

Json parse_json_object(std::string_view body) {
  Json parsed;
  // Deeply nested input would make later recursive walks (dump, templates) overflow the stack: refuse it.
  bool too_deep = false;
  auto depth_guard = [&too_deep](int depth, Json::parse_event_t, Json&) {
    if (depth > kMaxJsonDepth) too_deep = true;
    return !too_deep;
  };
  try {
    parsed = Json::parse(body.begin(), body.end(), depth_guard);
  } catch (const nlohmann::json::exception& error) {
    // "[json.exception.parse_error.101] parse error at line 1, column 15: ..." -> from "line" on.
    std::string detail = error.what();
    if (const size_t at = detail.find(" at line "); at != std::string::npos) detail = detail.substr(at + 4);
    else if (const size_t bracket = detail.find("] "); detail.starts_with("[json.exception") && bracket != std::string::npos) {
      detail = detail.substr(bracket + 2);
    }
    throw ApiError(400, "We could not parse the JSON body of your request (" + detail + ").", "", "invalid_json");
  }
  if (too_deep) {
    throw ApiError(400, "The JSON body of your request nests deeper than " + std::to_string(kMaxJsonDepth) + " levels.", "",
                   "invalid_json");
  }
  if (!parsed.is_object()) {
    throw ApiError(400, std::string("The request body must be a JSON object, but got ") + json_type_phrase(parsed) + ".",
                   "", "invalid_json");
  }
  return parsed;
}

CompletionRequest parse_completion_request(const Json& body, const RequestLimits& limits) {
  JsonFields fields(body);
  CompletionRequest request;
  request.model = fields.string("model").value_or("");
  request.prompts = parse_prompts(fields);
  parse_stream_options(fields, request.stream, request.include_usage);
  parse_sampling(fields, limits, request.sampling, request.n);
  request.echo = fields.boolean("echo").value_or(false);
  request.add_special_tokens = fields.boolean("add_special_tokens").value_or(true);
  // vLLM's echo without generation: max_tokens 0 returns the prompt (and its logprobs) only.
  request.max_tokens = fields.integer("max_tokens");
  if (request.max_tokens && !(request.echo && *request.max_tokens == 0)) {
    fields.require_at_least("max_tokens", *request.max_tokens, 1);
  }
  fields.string("user");  // unused, but a wrong type is still an error
  if (auto logprobs = fields.integer("logprobs")) {
    if (*logprobs < 0 || *logprobs > limits.max_top_logprobs) {
      throw ApiError::invalid_value("logprobs", "Invalid 'logprobs': must be between 0 and " + std::to_string(limits.max_top_logprobs) +
                                                    ", got " + std::to_string(*logprobs) + ".");
    }
    request.sampling.logprobs = true;
    request.sampling.top_logprobs = static_cast<int32_t>(*logprobs);
  }
  if (request.echo && request.sampling.logprobs) request.sampling.prompt_logprob_start = 0;  // every prompt token
  if (auto suffix = fields.string("suffix"); suffix && !suffix->empty()) {
    throw ApiError(400, "'suffix' is not supported.", "suffix", "unsupported_parameter");
  }
  if (auto best_of = fields.integer("best_of"); best_of && *best_of != request.n) {
    throw ApiError(400, "'best_of' is not supported.", "best_of", "unsupported_parameter");
  }
  const int64_t choices = request.n * static_cast<int64_t>(request.prompts.size());
  if (choices > limits.max_choices) {
    throw ApiError::invalid_value(request.n > 1 ? "n" : "prompt", "Invalid '" + std::string(request.n > 1 ? "n" : "prompt") +
                                                                      "': " + std::to_string(request.prompts.size()) + " prompts x n = " +
                                           std::to_string(choices) + " choices exceeds the limit of " +
                                           std::to_string(limits.max_choices) + ".");
  }
  return request;
}

ChatRequest parse_chat_request(const Json& body, const RequestLimits& limits) {
  JsonFields fields(body);
  ChatRequest request;
  request.model = fields.string("model").value_or("");
  request.messages = parse_messages(fields);
  request.tools = parse_chat_tools(fields);
  request.separate_reasoning = fields.boolean("separate_reasoning").value_or(true);
  if (const Json* kwargs = fields.object("chat_template_kwargs")) request.template_kwargs = *kwargs;
  request.add_generation_prompt = fields.boolean("add_generation_prompt").value_or(true);
  request.add_special_tokens = fields.boolean("add_special_tokens").value_or(false);
  if (fields.boolean("continue_final_message").value_or(false)) request.assistant_prefix = take_final_assistant_text(request.messages);
  if (fields.boolean("echo").value_or(false)) {
    throw ApiError(400, "'echo' is not supported for chat completions.", "echo", "unsupported_parameter");
  }
  // Output this server cannot produce is refused rather than silently left out.
  if (const Json* modalities = fields.array("modalities")) {
    for (const Json& modality : *modalities) {
      if (modality != "text") {
        throw ApiError(400, "'modalities' may only contain \"text\", got " + modality.dump() + ".", "modalities",
                       "unsupported_parameter");
      }
    }
  }
  reject_if_present(fields, "audio", " (text output only)");
  fields.string("user");        // OpenAI's end-user id: unused, but a wrong type is still an error
  fields.object("metadata");
  parse_stream_options(fields, request.stream, request.include_usage);
  parse_sampling(fields, limits, request.sampling, request.n);
  request.max_tokens = parse_max_tokens(fields, "max_completion_tokens");
  if (!request.max_tokens) request.max_tokens = parse_max_tokens(fields, "max_tokens");
  request.sampling.logprobs = fields.boolean("logprobs").value_or(false);
  if (auto top = fields.integer("top_logprobs")) {
    if (*top < 0 || *top > limits.max_top_logprobs) {
      throw ApiError::invalid_value("top_logprobs", "Invalid 'top_logprobs': must be between 0 and " +
                                                        std::to_string(limits.max_top_logprobs) + ", got " + std::to_string(*top) + ".");
    }
    if (!request.sampling.logprobs) {
      throw ApiError::invalid_value("top_logprobs", "Invalid value: 'top_logprobs' requires 'logprobs' to be true.");
    }
    request.sampling.top_logprobs = static_cast<int32_t>(*top);
  }
  return request;
}

}  // namespace fathom::server
