#pragma once
// OpenAI response shapes: text_completion objects and their streamed chunks, logprobs, usage, the model list
// (chat.completion: chat_protocol.h).
#include <memory>
#include <string>
#include <vector>

#include "server/generation_protocol.h"
#include "server/prompt_codec.h"

namespace fathom::server {

struct OpenAiResponseContext {
  std::string id;           // "cmpl-..." / "chatcmpl-..."
  int64_t created_unix_s = 0;
  std::string model;
  bool include_usage = false;  // streaming: a final usage chunk (and "usage": null in the others)
  std::shared_ptr<const PromptCodec> codec;  // token strings for logprobs
  bool prompt_logprobs = false;  // vLLM's prompt_logprobs field (each choice's for completions, the response's for chat)
};

// vLLM's prompt_logprobs list for a choice: null for the prompt's first token, then per token
// {"<id>": {"logprob", "rank", "decoded_token"}} for it and its alternatives (ranked by their order); null before
// the first token's event brought them.
nlohmann::ordered_json vllm_prompt_logprobs_json(const ChoiceResult& choice, const PromptCodec& codec);

// `echo_prefixes[prompt_index]` is prepended to each choice's text (empty vector: no echo). skip_special_tokens: the
// request's (special tokens then take no characters of the text in logprob offsets).
std::unique_ptr<GenerationProtocol> make_completion_protocol(OpenAiResponseContext context, std::vector<std::string> echo_prefixes,
                                                             bool logprobs, bool skip_special_tokens = true);

nlohmann::ordered_json model_card_json(const std::string& model_name, int64_t created_unix_s, int64_t max_model_len);

}  // namespace fathom::server
