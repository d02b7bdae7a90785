#pragma once
// Token sampling over fp32 logits: greedy, temperature, top-k, top-p, min-p, per-request seeds.
//
// Per row b (one request), with z = logits * (1 / temperature) (fp32):
//   greedy      when temperature <= 0 (or NaN) or top_k == 1: argmax of the logits, lowest index on ties.
//   top-k       (0 < k < vocab): keep z >= the k-th largest z (ties with it kept, as transformers' TopK warper).
//   top-p       (p < 1): over the top-k survivors, keep the smallest top set whose probability reaches p: token i
//               is kept iff the mass of tokens with a larger z is < max(1, floor(p * survivor mass)) (masses in
//               the fixed point below). Ties are kept together.
//   min-p       (min_p > 0): keep exp(z - z_max) >= min_p (min_p above 1 acts as 1).
//   The token is drawn from the survivors in proportion to exp(z - z_max) by inverse CDF in a fixed element order
//   with 64 bits from Philox4x32-10 keyed by (seed, step). Masses are 2^-40 fixed-point integers, so every
//   reduction is exact and order-independent: same logits + seed + step -> same token, whatever the batch.
// NaN logits count as -inf; a row whose scaled maximum is not finite (+-inf logits, tiny temperature) is greedy, and
// so is an infinite temperature (the server accepts finite ones only).
#include <cuda_runtime.h>

#include <cstdint>

namespace fathom::kernels::cuda {

// Per-request parameters, device arrays of [batch] entries. Optional arrays may be nullptr (filter off / step 0).
struct SamplingParams {
  const float* temperature = nullptr;  // required
  const int32_t* top_k = nullptr;      // <= 0 or >= vocab: off
  const float* top_p = nullptr;        // >= 1: off
  const float* min_p = nullptr;        // <= 0: off
  const uint64_t* seed = nullptr;      // required (read only by rows that sample)
  const uint64_t* step = nullptr;      // RNG counter, e.g. tokens generated so far by the request
};

// logits:         [batch, vocab] fp32 (device), vocab <= 393216
// tokens:         [batch] int32 (device)
// token_logprobs: [batch] fp32 (device) or nullptr: log_softmax(logits)[token] of the unscaled logits
// One cluster of 8 blocks (512 threads each) per row, the row held in shared memory; no host sync, no allocation.
void sample_tokens(const float* logits, int64_t batch, int64_t vocab, const SamplingParams& params, int32_t* tokens,
                   float* token_logprobs, cudaStream_t stream);

}  // namespace fathom::kernels::cuda
