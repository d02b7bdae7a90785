#pragma once
// MoE combine: each token's output is the weighted sum of its experts' rows (in permuted order), plus the
// shared expert's output. Deterministic: fp32 accumulation in slot order, no atomics.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/fp8_gemm/split_k_partials.h"

namespace fathom::kernels::cuda {

// expert_out:     [max_rows, H] bf16 (device), rows in the permuted order
// expert_weights: [T, k] fp32 (device), from moe_route
// token_slot_row: [T * k] int32 (device), from MoePermutation; entries < 0 contribute nothing
// shared_out:     [T, H] bf16 (device) or nullptr
// out:            [T, H] bf16 (device); out[t] = bf16(sum_{s<k} w[t,s] * expert_out[row(t,s)] + shared_out[t])
void moe_combine(const __nv_bfloat16* expert_out, const float* expert_weights, const int32_t* token_slot_row,
                 const __nv_bfloat16* shared_out, int64_t num_tokens, int32_t top_k, int64_t hidden,
                 __nv_bfloat16* out, cudaStream_t stream);
// Same, with the shared expert's output still in its down GEMM's split-K partials ([splits, T, H] fp32, split_stride
// >= T * H): bit-identical to reducing them to bf16 shared_out first.
void moe_combine(const __nv_bfloat16* expert_out, const float* expert_weights, const int32_t* token_slot_row,
                 const SplitKPartials& shared_partials, int64_t num_tokens, int32_t top_k, int64_t hidden,
                 __nv_bfloat16* out, cudaStream_t stream);

}  // namespace fathom::kernels::cuda
