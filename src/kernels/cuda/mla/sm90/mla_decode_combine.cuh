#pragma once
// Deterministic merge of split-KV decode partials: for each (sequence, head),
//   out = Σ_s 2^(lse_s − M) · partial_s / Σ_s 2^(lse_s − M),  M = max_s lse_s,
// summed in split order (no atomics), so the result does not depend on scheduling.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/mla/sm90/mla_decode_splits.cuh"
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda::mla_detail {

inline constexpr int kCombineThreads = 128;
inline constexpr int kCombineMaxSplits = 128;

// grid (num_heads, batch), kCombineThreads threads. Reads only the sequence's non-empty splits (the decode kernel
// writes nothing for the others), with the decode kernel's split rule.
__global__ void __launch_bounds__(kCombineThreads) mla_decode_combine_kernel(
    const float* __restrict__ partial_out,  // [batch, num_splits, num_heads, kv_lora]
    const float* __restrict__ partial_lse,  // [batch, num_splits, num_heads]
    __nv_bfloat16* __restrict__ out_latent,  // [batch, num_heads, kv_lora]
    const int32_t* __restrict__ seq_lens,   // [batch]
    int32_t num_heads, int32_t kv_lora, int32_t num_splits, int32_t tiles_per_split, int32_t min_tiles_per_split) {
  begin_dependent_kernel();  // launched programmatically (programmatic_launch.cuh)
  __shared__ float weights[kCombineMaxSplits];
  const int h = blockIdx.x, b = blockIdx.y;
  const int64_t first_row = static_cast<int64_t>(b) * num_splits * num_heads + h;  // split s: + s * num_heads
  const int total_tiles = (seq_lens[b] + kDecodeTileTokens - 1) / kDecodeTileTokens;
  const int tiles = split_tiles(total_tiles, num_splits, tiles_per_split, min_tiles_per_split);
  const int stored_splits = (total_tiles + tiles - 1) / tiles;
  num_splits = min(num_splits, stored_splits);  // the row stride above stays the allocated split count
  float max_lse = -INFINITY;
  for (int s = 0; s < num_splits; ++s) max_lse = fmaxf(max_lse, partial_lse[first_row + s * num_heads]);
  for (int s = threadIdx.x; s < num_splits; s += kCombineThreads) {
    const float lse = partial_lse[first_row + s * num_heads];
    weights[s] = lse == -INFINITY ? 0.0f : exp2f(lse - max_lse);
  }
  __syncthreads();
  float total = 0.0f;
  for (int s = 0; s < num_splits; ++s) total += weights[s];
  const float inv_total = total > 0.0f ? 1.0f / total : 0.0f;

  __nv_bfloat16* out = out_latent + (static_cast<int64_t>(b) * num_heads + h) * kv_lora;
  if ((kv_lora & 3) == 0) {
    for (int d = threadIdx.x * 4; d < kv_lora; d += kCombineThreads * 4) {
      float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
      for (int s = 0; s < num_splits; ++s) {  // stored splits only; no branch, so the loads overlap
        const float w = weights[s];
        const float4 v = *reinterpret_cast<const float4*>(partial_out + (first_row + s * num_heads) * kv_lora + d);
        acc.x += w * v.x;
        acc.y += w * v.y;
        acc.z += w * v.z;
        acc.w += w * v.w;
      }
      *reinterpret_cast<__nv_bfloat162*>(out + d) = __floats2bfloat162_rn(acc.x * inv_total, acc.y * inv_total);
      *reinterpret_cast<__nv_bfloat162*>(out + d + 2) = __floats2bfloat162_rn(acc.z * inv_total, acc.w * inv_total);
    }
  } else {
    for (int d = threadIdx.x; d < kv_lora; d += kCombineThreads) {
      float acc = 0.0f;
#pragma unroll 8
      for (int s = 0; s < num_splits; ++s) acc += weights[s] * partial_out[(first_row + s * num_heads) * kv_lora + d];
      out[d] = __float2bfloat16(acc * inv_total);
    }
  }
}

}  // namespace fathom::kernels::cuda::mla_detail
