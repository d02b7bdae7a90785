#pragma once
// Scores chosen tokens of fp32 logits rows on the device (prompt logprobs, top_logprobs of sampled tokens), so only
// a few numbers per row cross the bus instead of the whole row. Per scored row, as sampling::score_token defines them
// (fp32 here; the host accumulates the normalizer in double):
//   logprob = log_softmax(logits)[target]   (the sampler's normalizer: the same bits as its token_logprobs)
//   rank    = 1 + the number of logits strictly greater than the target's
//   top     = the top_n largest logits, largest first, lowest id on ties, with their log-probabilities
// NaN logits count as -inf. Deterministic: a fixed reduction order, whatever the other rows.
#include <cuda_runtime.h>

#include <cstdint>

namespace fathom::kernels::cuda {

constexpr int32_t kMaxScoreTopN = 64;       // most alternatives per scored row
constexpr int32_t kScoreSampledToken = -1;  // ScoreRow::target: the token sample_tokens wrote for that logits row

struct ScoreRow {
  int32_t logits_row = 0;  // row of `logits`
  int32_t target = 0;      // token id in [0, vocab), or kScoreSampledToken
  int32_t top_n = 0;       // [0, max_top_n]
};

struct ScoreOutputs {
  float* logprob = nullptr;       // [num_scored]
  int64_t* rank = nullptr;        // [num_scored]
  int32_t* top_ids = nullptr;     // [num_scored, max_top_n]: the first min(top_n, vocab) entries are written
  float* top_logprobs = nullptr;  // [num_scored, max_top_n]
};

// logits:         [num_logits_rows, vocab] fp32 (device), vocab <= 393216
// rows:           [num_scored] (device)
// sampled_tokens: [num_logits_rows] int32 (device), read for kScoreSampledToken targets; may be null otherwise
// A target outside [0, vocab) gets logprob NaN and rank 0. One cluster of 8 blocks per scored row; no host sync.
void score_tokens(const float* logits, int64_t vocab, const ScoreRow* rows, int64_t num_scored,
                  const int32_t* sampled_tokens, int32_t max_top_n, const ScoreOutputs& out, cudaStream_t stream);

}  // namespace fathom::kernels::cuda
