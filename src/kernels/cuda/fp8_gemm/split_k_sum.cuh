#pragma once
// Device side of SplitKPartials: the bf16 value the split-K reduce (reduce_splits_kernel in fp8_gemm.cu) stores at
// an output index, computed by the consumer. Same arithmetic: sum = 0.0f, sum += partial[s] for s = 0, 1, ...,
// rounded to bf16 to nearest even.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/fp8_gemm/split_k_partials.h"

namespace fathom::kernels::cuda {

// Eight consecutive outputs [index, index + count) as packed bf16 bits; lanes past count hold +0.
// aligned: data 16-byte aligned, index % 4 == 0 and split_stride % 4 == 0 (two float4 loads per split when count == 8).
__device__ __forceinline__ uint4 split_k_sum_bf16x8_bits(const SplitKPartials& p, int64_t index, int count, bool aligned) {
  float sum[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  if (aligned && count == 8) {
#pragma unroll 4
    for (int s = 0; s < p.splits; ++s) {
      const float4* src = reinterpret_cast<const float4*>(p.data + s * p.split_stride + index);
      const float4 lo = src[0], hi = src[1];
      sum[0] += lo.x;
      sum[1] += lo.y;
      sum[2] += lo.z;
      sum[3] += lo.w;
      sum[4] += hi.x;
      sum[5] += hi.y;
      sum[6] += hi.z;
      sum[7] += hi.w;
    }
  } else {
    for (int s = 0; s < p.splits; ++s) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        if (i < count) sum[i] += p.data[s * p.split_stride + index + i];
      }
    }
  }
  uint32_t words[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t lo = i * 2 < count ? __bfloat16_as_ushort(__float2bfloat16_rn(sum[2 * i])) : 0u;
    const uint32_t hi = i * 2 + 1 < count ? __bfloat16_as_ushort(__float2bfloat16_rn(sum[2 * i + 1])) : 0u;
    words[i] = lo | (hi << 16);
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

// Host: whether split_k_sum_bf16x8_bits may take its vector path for indices that are multiples of 8.
inline bool split_k_partials_aligned(const SplitKPartials& p) {
  return (reinterpret_cast<uintptr_t>(p.data) & 15u) == 0 && p.split_stride % 4 == 0;
}

}  // namespace fathom::kernels::cuda
