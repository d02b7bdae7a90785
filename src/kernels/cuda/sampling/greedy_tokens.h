#pragma once
// Greedy decoding of a whole batch, for steps whose every row is greedy (the common serving case): per row b the
// argmax of the logits (lowest index on ties, NaN counts as -inf) and its log_softmax. Bit for bit what
// sample_tokens returns for a greedy row (the same element ownership and reduction order), so a request's tokens and
// logprobs do not depend on whether its batch also held a sampled row. Streams the row once from registers (no
// shared-memory copy of the row), which sample_tokens needs for its filters.
#include <cuda_runtime.h>

#include <cstdint>

namespace fathom::kernels::cuda {

// logits:         [batch, vocab] fp32 (device), vocab <= 393216
// tokens:         [batch] int32 (device)
// token_logprobs: [batch] fp32 (device) or nullptr: log_softmax(logits)[token]
// One cluster of 8 blocks (512 threads each) per row; no host sync, no allocation.
void greedy_tokens(const float* logits, int64_t batch, int64_t vocab, int32_t* tokens, float* token_logprobs,
                   cudaStream_t stream);

}  // namespace fathom::kernels::cuda
