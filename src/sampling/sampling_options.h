#pragma once
// How one sequence picks its next token, and the per-sequence state that sampling carries from step to step.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fathom::sampling {

struct SamplingOptions {
  float temperature = 1.0f;        // <= 0: greedy
  int32_t top_k = -1;              // <= 0: off; 1: greedy
  float top_p = 1.0f;              // (0, 1]; 1: off
  float min_p = 0.0f;              // [0, 1]; 0: off
  float presence_penalty = 0.0f;   // OpenAI semantics, over the tokens generated so far
  float frequency_penalty = 0.0f;
  // (0, 2]; 1: off. HF / SGLang semantics over the prompt's and the generated tokens: a positive logit is divided
  // by it, a negative one multiplied (SamplingState::prompt_token_ids must hold the prompt's distinct ids).
  float repetition_penalty = 1.0f;
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, added to its logit), ids ascending and unique
  int64_t min_new_tokens = 0;           // while fewer tokens were drawn, the ids below cannot be drawn
  std::vector<int32_t> ending_token_ids;  // the ids that would end the sequence (EOS, stop tokens)
  bool logprobs = false;           // report the chosen token's log-probability
  int32_t top_logprobs = 0;        // and this many alternatives (when logprobs)

  bool is_greedy() const { return temperature <= 0.0f || top_k == 1; }
  bool has_penalties() const { return presence_penalty != 0.0f || frequency_penalty != 0.0f; }
  // Whether anything changes the logits of the draw after num_sampled draws (penalties, bias, the
  // min_new_tokens ban).
  bool modifies_logits(int64_t num_sampled) const {
    return has_penalties() || repetition_penalty != 1.0f || !logit_bias.empty() ||
           (num_sampled < min_new_tokens && !ending_token_ids.empty());
  }
};

// Empty string when valid, else what is wrong (naming the field and value).
std::string validate(const SamplingOptions& options);

// Carried across the steps of one sequence: its random stream and what it generated (for penalties).
// Owned by one sequence; mutated only by the thread that samples for it.
struct SamplingState {
  uint64_t seed = 0;
  int64_t num_sampled = 0;                          // tokens drawn so far = the step index of the next draw
  std::unordered_map<int32_t, int32_t> output_counts;  // token id -> occurrences among the generated tokens
  std::vector<int32_t> prompt_token_ids;  // the prompt's distinct ids, ascending; filled only for repetition_penalty

  void record(int32_t token_id) {
    ++num_sampled;
    ++output_counts[token_id];
  }
};

// One logits row for a device sampler (the CUDA backend; kernels/cuda/sampling/sampling.h gives the semantics).
struct DeviceSamplingRow {
  float temperature = 0.0f;  // <= 0: greedy
  int32_t top_k = 0;         // <= 0: off
  float top_p = 1.0f;        // >= 1: off
  float min_p = 0.0f;        // <= 0: off
  uint64_t seed = 0;
  uint64_t step = 0;         // the sequence's draw counter (SamplingState::num_sampled)
  int32_t top_logprobs = 0;  // alternatives returned with the drawn token (SampledToken::top, rank); 0: none
};

// A token row scored on the device (prompt logprobs): target's log-probability and rank, and the top_n most likely
// tokens, as score_token defines them (in fp32 on the device, where the host accumulates in double).
struct DeviceScoredRow {
  int64_t row = 0;     // token row of the forward
  int32_t target = 0;  // token id in [0, vocab)
  int32_t top_n = 0;
};

// Whether a device sampler can serve the sequence's next draw: changed logits need the host sampler. A
// min_new_tokens ban alone moves the draws to the device once it is over (a seeded request's later draws then come
// from the device sampler's arithmetic).
inline bool device_can_sample(const SamplingOptions& options, const SamplingState& state) {
  return !options.modifies_logits(state.num_sampled);
}

inline DeviceSamplingRow device_sampling_row(const SamplingOptions& options, const SamplingState& state) {
  DeviceSamplingRow row;
  row.temperature = options.is_greedy() ? 0.0f : options.temperature;
  row.top_k = options.top_k > 0 ? options.top_k : 0;
  row.top_p = options.top_p;
  row.min_p = options.min_p;
  row.seed = state.seed;
  row.step = static_cast<uint64_t>(state.num_sampled);
  row.top_logprobs = options.logprobs ? options.top_logprobs : 0;
  return row;
}

struct SampledToken {
  int32_t token_id = 0;
  float logprob = 0.0f;                          // when requested: log-softmax of the raw logits
  std::vector<std::pair<int32_t, float>> top;   // top_logprobs alternatives, best first (lowest id on ties)
  int64_t rank = 0;                              // score_token: 1 + the tokens with a larger logit; 0: not computed
};

}  // namespace fathom::sampling
