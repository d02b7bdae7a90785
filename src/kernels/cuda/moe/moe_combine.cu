#include "kernels/cuda/moe/moe_combine.h"

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8_gemm/split_k_sum.cuh"
#include "kernels/cuda/norm/bf16x8.cuh"
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxTopK = 64;
constexpr int kTargetBlocks = 264;

// grid: (T, splits); block (t, s) produces vectors [s * vectors_per_split, ...) of token t's row.
// Vector = 8 bf16 columns; the last vector of a row may be partial (H % 8 != 0 uses the scalar path).
__global__ void __launch_bounds__(kThreads)
    combine_kernel(const __nv_bfloat16* __restrict__ expert_out,  // [max_rows, H]
                   const float* __restrict__ expert_weights,      // [T, k]
                   const int32_t* __restrict__ token_slot_row,    // [T * k]
                   const __nv_bfloat16* __restrict__ shared_out,  // [T, H] or null
                   SplitKPartials shared_partials,                // non-empty: shared_out still in [splits, T, H] fp32
                   bool partials_aligned,
                   int32_t top_k, int64_t hidden, int64_t vectors_per_split, bool aligned,
                   __nv_bfloat16* __restrict__ out) {             // [T, H]
  begin_dependent_kernel();  // launched programmatically (programmatic_launch.cuh)
  __shared__ int rows[kMaxTopK];
  __shared__ float weights[kMaxTopK];
  const int64_t token = blockIdx.x;
  if (threadIdx.x < top_k) {
    rows[threadIdx.x] = token_slot_row[token * top_k + threadIdx.x];
    weights[threadIdx.x] = expert_weights[token * top_k + threadIdx.x];
  }
  __syncthreads();
  const int64_t vectors_per_row = (hidden + kBf16PerVector - 1) / kBf16PerVector;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * vectors_per_split;
  const int64_t end = min(vectors_per_row, begin + vectors_per_split);
  for (int64_t v = begin + threadIdx.x; v < end; v += kThreads) {
    const int64_t column = v * kBf16PerVector;
    const int count = static_cast<int>(min(int64_t{kBf16PerVector}, hidden - column));
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll 8
    for (int s = 0; s < top_k; ++s) {
      const int row = rows[s];
      if (row < 0) continue;
      float x[8];
      load_bf16x8_partial(expert_out + static_cast<int64_t>(row) * hidden + column, count, aligned, x);
      const float w = weights[s];
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = fmaf(w, x[i], acc[i]);
    }
    if (!shared_partials.empty()) {
      float x[8];
      unpack_bf16x8(split_k_sum_bf16x8_bits(shared_partials, token * hidden + column, count, partials_aligned), x);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] += x[i];
    } else if (shared_out) {
      float x[8];
      load_bf16x8_partial(shared_out + token * hidden + column, count, aligned, x);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] += x[i];
    }
    store_bf16x8_partial(out + token * hidden + column, count, aligned, acc);
  }
}

void launch_combine(const __nv_bfloat16* expert_out, const float* expert_weights, const int32_t* token_slot_row,
                    const __nv_bfloat16* shared_out, const SplitKPartials& shared_partials, int64_t num_tokens,
                    int32_t top_k, int64_t hidden, __nv_bfloat16* out, cudaStream_t stream) {
  FATHOM_CHECK(num_tokens >= 0 && num_tokens < (int64_t{1} << 31), "moe combine: num_tokens " << num_tokens);
  FATHOM_CHECK(top_k >= 1 && top_k <= kMaxTopK, "moe combine: top_k " << top_k << " outside [1, " << kMaxTopK << "]");
  FATHOM_CHECK(hidden > 0, "moe combine: hidden " << hidden);
  if (num_tokens == 0) return;
  const bool aligned = hidden % kBf16PerVector == 0 && is_aligned_16(expert_out) && is_aligned_16(out) &&
                       (shared_out == nullptr || is_aligned_16(shared_out));
  const bool partials_aligned = !shared_partials.empty() && hidden % kBf16PerVector == 0 &&
                                split_k_partials_aligned(shared_partials);
  const int64_t vectors = (hidden + kBf16PerVector - 1) / kBf16PerVector;
  const int64_t max_splits = std::max<int64_t>(1, (vectors + kThreads - 1) / kThreads);
  const int64_t wanted = (kTargetBlocks + num_tokens - 1) / num_tokens;
  const int64_t splits = std::clamp<int64_t>(wanted, 1, max_splits);
  const int64_t vectors_per_split = (vectors + splits - 1) / splits;
  const dim3 grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>(splits));
  launch_programmatic(combine_kernel, grid, dim3(kThreads), 0, stream, expert_out, expert_weights, token_slot_row,
                      shared_out, shared_partials, partials_aligned, top_k, hidden, vectors_per_split, aligned, out);
}

}  // namespace

void moe_combine(const __nv_bfloat16* expert_out, const float* expert_weights, const int32_t* token_slot_row,
                 const __nv_bfloat16* shared_out, int64_t num_tokens, int32_t top_k, int64_t hidden,
                 __nv_bfloat16* out, cudaStream_t stream) {
  launch_combine(expert_out, expert_weights, token_slot_row, shared_out, SplitKPartials{}, num_tokens, top_k, hidden,
                 out, stream);
}

void moe_combine(const __nv_bfloat16* expert_out, const float* expert_weights, const int32_t* token_slot_row,
                 const SplitKPartials& shared_partials, int64_t num_tokens, int32_t top_k, int64_t hidden,
                 __nv_bfloat16* out, cudaStream_t stream) {
  FATHOM_CHECK(!shared_partials.empty() && shared_partials.splits >= 1 &&
                   shared_partials.split_stride >= num_tokens * hidden,
               "moe combine: " << shared_partials.splits << " shared-expert split-K partials of stride "
                               << shared_partials.split_stride << " for " << num_tokens << " x " << hidden);
  launch_combine(expert_out, expert_weights, token_slot_row, nullptr, shared_partials, num_tokens, top_k, hidden, out,
                 stream);
}

}  // namespace fathom::kernels::cuda
