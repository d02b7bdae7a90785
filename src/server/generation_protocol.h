#pragma once
// What an API format (OpenAI completions, OpenAI chat, SGLang /generate) needs to turn the engine's event
// streams of one HTTP request's choices into its JSON response or its SSE chunks. GenerationJob owns the
// choices and calls these on the event loop's thread.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scheduler/generation_request.h"

namespace fathom::server {

struct ChoiceResult {
  int64_t index = 0;          // position in the response's choices
  int64_t prompt_index = 0;   // which prompt of the request it continues
  std::string request_id;     // the engine request id
  int64_t prompt_length = 0;  // tokens submitted
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<scheduler::TokenLogprob> logprobs;
  // Prompt logprobs (prompt_logprob_start >= 0), set by the first token's event (so never for a request that ended
  // before it): the prompt's first token when the range starts at position 0 (it has no logprob), then one entry per
  // scored prompt token.
  bool prompt_logprobs_ready = false;
  std::optional<int32_t> unscored_first_prompt_token;
  std::vector<scheduler::TokenLogprob> prompt_logprobs;
  bool finished = false;
  scheduler::FinishReason finish_reason = scheduler::FinishReason::kNone;
  std::string matched_stop;                    // the stop string that ended it, if any
  std::optional<int32_t> matched_stop_token;   // or the EOS / stop token id
  std::string error_message;
  int64_t completion_tokens = 0;
  int64_t cached_prompt_tokens = 0;
  double latency_s = 0.0;     // submit to finish
};

// Token counts in the OpenAI usage shape: prompts are counted once per prompt, not once per choice.
struct UsageCounts {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};
UsageCounts count_usage(const std::vector<ChoiceResult>& choices);
nlohmann::ordered_json usage_json(const UsageCounts& usage);

// "stop", "length", "abort", "error", or null while running.
nlohmann::ordered_json finish_reason_json(scheduler::FinishReason reason);

class GenerationProtocol {
 public:
  virtual ~GenerationProtocol() = default;
  // SSE events sent when the stream opens (before any delta).
  virtual void stream_opened(const std::vector<ChoiceResult>& choices, std::string& out) {}
  // SSE events for `event`, already merged into `choice` (its text/logprobs now end with the event's).
  virtual void stream_delta(const ChoiceResult& choice, const scheduler::GenerationEvent& event, std::string& out) = 0;
  // SSE events after every choice finished (usage), before "data: [DONE]".
  virtual void stream_closed(const std::vector<ChoiceResult>& choices, std::string& out) {}
  // The non-streaming response body.
  virtual nlohmann::ordered_json final_response(const std::vector<ChoiceResult>& choices) = 0;
};

}  // namespace fathom::server
