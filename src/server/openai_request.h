#pragma once
// Parsing and validation of OpenAI /v1/completions and /v1/chat/completions request bodies into plain
// structs. Every invalid field throws ApiError (400, naming the field); tokenization happens later.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "scheduler/generation_request.h"
#include "server/chat_tools.h"

namespace fathom::server {

using Json = nlohmann::ordered_json;

struct RequestLimits {
  int64_t max_choices = 128;         // n (times the number of prompts for completions)
  int32_t max_top_logprobs = 20;
  size_t max_stop_sequences = 16;
  size_t max_logit_bias_entries = 1024;  // OpenAI's logit_bias entries (each applied on the host at every step)
};

// One prompt of a request: text to tokenize, or token ids given directly.
struct PromptSource {
  bool is_text = true;
  std::string text;
  std::vector<int32_t> ids;
};

struct CompletionRequest {
  std::string model;                   // "" when absent
  std::vector<PromptSource> prompts;   // a batch of prompts; choices are prompt-major
  int64_t n = 1;
  bool stream = false;
  bool include_usage = false;
  bool echo = false;
  bool add_special_tokens = true;      // vLLM: text prompts get the tokenizer's special tokens (BOS)
  std::optional<int64_t> max_tokens;   // absent: kDefaultCompletionMaxTokens
  scheduler::SamplingParams sampling;  // max_new_tokens is set later
};

struct ChatRequest {
  std::string model;
  Json messages = Json::array();       // text content parts already joined into strings; tool parts checked
  ChatTools tools;                     // tools, tool_choice, parallel_tool_calls
  bool separate_reasoning = true;      // SGLang's option: reasoning_content apart from content (with --reasoning-parser)
  Json template_kwargs = Json::object();  // chat_template_kwargs
  bool add_generation_prompt = true;
  bool add_special_tokens = false;     // vLLM: the tokenizer's special tokens on top of what the template renders
  // continue_final_message (vLLM / SGLang): the final assistant message's text, taken out of `messages`; the prompt is
  // the rest rendered with the generation prompt, then this text, which the model continues.
  std::optional<std::string> assistant_prefix;
  int64_t n = 1;
  bool stream = false;
  bool include_usage = false;
  std::optional<int64_t> max_tokens;   // max_completion_tokens or max_tokens; absent: the rest of the context
  scheduler::SamplingParams sampling;
};

inline constexpr int64_t kDefaultCompletionMaxTokens = 16;  // OpenAI's legacy completions default
inline constexpr int kMaxJsonDepth = 64;                     // nesting levels accepted in request bodies

// A JSON object from a request body; malformed JSON or a non-object throws ApiError(400).
Json parse_json_object(std::string_view body);

CompletionRequest parse_completion_request(const Json& body, const RequestLimits& limits);
ChatRequest parse_chat_request(const Json& body, const RequestLimits& limits);

}  // namespace fathom::server
