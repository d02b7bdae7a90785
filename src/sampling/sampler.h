#pragma once
// CPU token sampling over one row of logits: penalties, temperature, top-k / top-p / min-p filtering, a
// counter-based random draw keyed by (seed, step), and log-probabilities with top-N alternatives.
//
// Order of operations (the result depends only on the logits row, the options and the sequence's state):
//   1. logprobs (if requested) = log_softmax(raw logits): before penalties and temperature, as OpenAI reports them.
//   2. the logits modified (apply_logit_modifiers): repetition penalty, presence/frequency penalties, logit bias,
//      then the min_new_tokens ban of the ending ids.
//   3. greedy (temperature <= 0 or top_k == 1): argmax, lowest id on ties.
//   4. otherwise probabilities = softmax(logit / temperature); keep the top_k most likely; then the smallest
//      most-likely set whose mass reaches top_p; then tokens with p >= min_p * p_max; draw u = U[0,1) from
//      Philox(seed, step) and take the first kept token whose cumulative normalized mass exceeds u (kept tokens are
//      ordered most likely first when any filter is on, by id otherwise).
#include <cstdint>
#include <vector>

#include "sampling/sampling_options.h"

namespace fathom::sampling {

// log_softmax of `logits` [vocab] into `out` [vocab], accumulated in double.
void log_softmax(const float* logits, int64_t vocab, float* out);

// Applies, in place and in this order: the repetition penalty over the prompt's and the generated ids (logit > 0:
// divided by it, else multiplied; each id once), OpenAI presence/frequency penalties over the generated ids
// (logit[t] -= presence * (count[t] > 0) + frequency * count[t]), the logit bias (added), and, while
// state.num_sampled < min_new_tokens, -inf on the ending ids. Ids outside [0, vocab) are skipped.
void apply_logit_modifiers(float* logits, int64_t vocab, const SamplingState& state, const SamplingOptions& options);

// Token ids of the `count` largest values, largest first, lowest id on ties.
std::vector<int32_t> top_indices(const float* values, int64_t vocab, int64_t count);

// Samples one token from `logits` [vocab] (modified in place by apply_logit_modifiers) and records it in
// `state` (step counter and penalty counts). Throws fathom::Error on invalid options.
SampledToken sample_token(float* logits, int64_t vocab, const SamplingOptions& options, SamplingState& state);

// `token` scored under log_softmax(logits) [vocab], with the top_n most likely tokens (prompt logprobs).
SampledToken score_token(const float* logits, int64_t vocab, int32_t token, int32_t top_n);

// The filtered distribution of step 4 as (token, probability) pairs, most likely first; for tests.
std::vector<std::pair<int32_t, double>> filtered_distribution(const float* logits, int64_t vocab,
                                                              const SamplingOptions& options);

}  // namespace fathom::sampling
