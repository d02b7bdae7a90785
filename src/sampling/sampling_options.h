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
  bool logprobs = false;           // report the chosen token's log-probability
  int32_t top_logprobs = 0;        // and this many alternatives (when logprobs)

  bool is_greedy() const { return temperature <= 0.0f || top_k == 1; }
  bool has_penalties() const { return presence_penalty != 0.0f || frequency_penalty != 0.0f; }
};

// Empty string when valid, else what is wrong (naming the field and value).
std::string validate(const SamplingOptions& options);

// Carried across the steps of one sequence: its random stream and what it generated (for penalties).
// Owned by one sequence; mutated only by the thread that samples for it.
struct SamplingState {
  uint64_t seed = 0;
  int64_t num_sampled = 0;                          // tokens drawn so far = the step index of the next draw
  std::unordered_map<int32_t, int32_t> output_counts;  // token id -> occurrences among the generated tokens

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
};

// Whether a device sampler can serve these options: penalties and top_logprobs alternatives need the host sampler.
inline bool device_can_sample(const SamplingOptions& options) {
  return !options.has_penalties() && !(options.logprobs && options.top_logprobs > 0);
}

inline DeviceSamplingRow device_sampling_row(const SamplingOptions& options, const SamplingState& state) {
  DeviceSamplingRow row;
  row.temperature = options.is_greedy() ? 0.0f : options.temperature;
  row.top_k = options.top_k > 0 ? options.top_k : 0;
  row.top_p = options.top_p;
  row.min_p = options.min_p;
  row.seed = state.seed;
  row.step = static_cast<uint64_t>(state.num_sampled);
  return row;
}

struct SampledToken {
  int32_t token_id = 0;
  float logprob = 0.0f;                          // when requested: log-softmax of the raw logits
  std::vector<std::pair<int32_t, float>> top;   // top_logprobs alternatives, best first (lowest id on ties)
};

}  // namespace fathom::sampling
