#pragma once
// The contract between the HTTP layer and the engine: what a request asks for and what the engine streams back.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fathom::scheduler {

struct SamplingParams {
  float temperature = 1.0f;          // 0 = greedy
  float top_p = 1.0f;
  int32_t top_k = -1;                // -1 = off
  float min_p = 0.0f;
  std::optional<uint64_t> seed;      // per-request RNG seed: same seed + same input -> same output
  int64_t max_new_tokens = 128;
  std::vector<std::string> stop;     // stop strings; matched on decoded text across token boundaries, excluded from output
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;   // (0, 2]; 1 = off; over the prompt's and the generated tokens (SGLang, vLLM)
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, bias in [-100, 100]), ids ascending and unique
  // EOS / stop tokens cannot be drawn before this many tokens; a stop string matches only if it ends at or after
  // the min_new_tokens-th token.
  int64_t min_new_tokens = 0;
  int32_t top_logprobs = 0;          // 0..20 alternatives per token when logprobs is set
  bool logprobs = false;
  // >= 0: also the logprobs of the prompt tokens at positions [max(this, 1), prompt length), with top_logprobs
  // alternatives when logprobs is set (SGLang's logprob_start_len; OpenAI's echo with logprobs). -1: none.
  int64_t prompt_logprob_start = -1;
  int32_t prompt_top_logprobs = -1;  // 0..20 alternatives per prompt token; -1: top_logprobs (when logprobs is set)
  bool skip_special_tokens = true;
};

struct GenerateRequest {
  std::string request_id;            // unique; used by abort() and in error messages
  std::vector<int32_t> input_ids;
  SamplingParams sampling;
};

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };  // kStop: EOS, stop string or stop token

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // top_logprobs alternatives, best first
  int64_t rank = 0;                            // prompt tokens: 1 + the tokens more likely than it (0: unknown)
};

// One streamed update. Events of a request arrive in order on the engine's thread; the last has finished = true.
struct GenerationEvent {
  std::string request_id;
  std::vector<int32_t> new_token_ids;     // tokens sampled since the previous event
  std::string text_delta;                 // newly decodable text (valid UTF-8; stop strings removed)
  std::vector<TokenLogprob> logprobs;     // one per new token when requested
  // The event of the first generated token, with prompt_logprob_start >= 0: one per prompt token at positions
  // [max(prompt_logprob_start, 1), prompt length), in order (raw logits, as the sampled tokens' logprobs).
  std::vector<TokenLogprob> prompt_logprobs;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string matched_stop;               // the stop string that ended it, if any
  std::optional<int32_t> matched_stop_token;  // or the EOS / stop token id that ended it
  std::string error_message;              // when finish_reason == kError
  bool queue_full = false;                // kError because the engine's queue was full: retry later (HTTP 503)
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;          // total so far
  int64_t cached_prompt_tokens = 0;       // prompt tokens served from the prefix cache
};

}  // namespace fathom::scheduler
