#pragma once
// SGLang's native POST /generate: {"text" | "input_ids", "sampling_params", "stream", "return_logprob",
// "top_logprobs_num", "rid"}; a list of prompts (or sampling_params.n > 1) gives a list of results.
// Responses carry "text", "output_ids" and "meta_info"; streamed events carry the text so far.
#include <memory>
#include <string>
#include <vector>

#include "server/generation_protocol.h"
#include "server/openai_request.h"
#include "server/prompt_codec.h"

namespace fathom::server {

struct NativeGenerateRequest {
  std::vector<PromptSource> prompts;
  std::vector<scheduler::SamplingParams> sampling;  // one per prompt
  std::vector<std::string> sampling_prefixes;       // per prompt: "sampling_params." or "sampling_params[i]."
  std::vector<int64_t> n;                           // samples per prompt
  std::vector<bool> max_new_tokens_given;           // per prompt: else the default, capped to the context's room
  std::vector<std::string> rids;                    // client ids per prompt ("" = none)
  bool list_response = false;                       // a batch, or n > 1
  bool stream = false;
  bool return_text_in_logprobs = false;
};

inline constexpr int64_t kDefaultNativeMaxNewTokens = 128;

NativeGenerateRequest parse_native_generate_request(const Json& body, const RequestLimits& limits);

std::unique_ptr<GenerationProtocol> make_native_generate_protocol(bool list_response, bool logprobs, bool text_in_logprobs,
                                                                  std::vector<std::string> rids,
                                                                  std::shared_ptr<const PromptCodec> codec);

}  // namespace fathom::server
