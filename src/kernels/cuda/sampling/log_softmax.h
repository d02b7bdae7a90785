#pragma once
// Row-wise log-softmax of fp32 logits (for logprobs), fp32 math, deterministic reduction order.
#include <cuda_runtime.h>

#include <cstdint>

namespace fathom::kernels::cuda {

// logits: [batch, vocab] fp32 (device); out: [batch, vocab] fp32 (device), may alias logits.
// out = logits - max - log(sum(exp(logits - max))); NaN logits count as -inf.
void log_softmax(const float* logits, int64_t batch, int64_t vocab, float* out, cudaStream_t stream);

}  // namespace fathom::kernels::cuda
