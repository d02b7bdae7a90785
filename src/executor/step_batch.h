#pragma once
// One scheduled step as the executor sees it: per sequence the new tokens, their KV slots, and how to sample.
// Everything is copied in, so a step can run on another thread while the scheduler prepares the next one.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "sampling/sampling_options.h"

namespace fathom::executor {

struct SequenceStep {
  uint64_t sequence_id = 0;            // the request's engine-wide id
  std::vector<int32_t> new_tokens;     // [num_new] at positions [num_cached, num_cached + num_new)
  // new_tokens.back() is a placeholder for the token this sequence sampled in the previously executed step
  // (not yet known when this step was built: overlap scheduling); the executor fills it in.
  bool last_token_from_previous_step = false;
  int64_t num_cached = 0;
  std::vector<int32_t> kv_slots;       // [num_cached + num_new] cache slot of every position
  bool sample = false;                 // sample a token from the last position's logits
  bool extends_prompt = false;         // the new tokens are prompt tokens (not generated ones)
  sampling::SamplingOptions sampling;
  std::shared_ptr<sampling::SamplingState> sampling_state;  // required when sample; mutated by the executor
  // Prompt logprobs: row scored_row_begin + i of new_tokens scores scored_targets[i] (the prompt's next token):
  // its log-probability and the scored_top_n most likely tokens (raw logits, as sampled logprobs).
  int64_t scored_row_begin = 0;
  std::vector<int32_t> scored_targets;
  int32_t scored_top_n = 0;
};

// Whether a sequence's new tokens run in the expanded (prefill) attention form, which expands every key it attends to
// through kv_b, or the absorbed (decode) form: several tokens, or a prompt's token under deterministic inference (as
// it ran when the prompt was not cached), take the prefill form. ModelRunner groups forwards by it; the scheduler's
// key budget counts only the prefill form.
inline bool runs_in_prefill_form(int64_t num_new_tokens, bool extends_prompt, bool deterministic) {
  return num_new_tokens != 1 || (deterministic && extends_prompt);
}

struct StepBatch {
  std::vector<SequenceStep> sequences;
  int64_t num_tokens() const {
    int64_t total = 0;
    for (const SequenceStep& sequence : sequences) total += static_cast<int64_t>(sequence.new_tokens.size());
    return total;
  }
};

struct StepOutput {
  std::vector<std::optional<sampling::SampledToken>> tokens;  // [sequences]: set for those that sample
  std::vector<std::vector<sampling::SampledToken>> scored;    // [sequences][scored_targets]: target and its logprob
};

}  // namespace fathom::executor
