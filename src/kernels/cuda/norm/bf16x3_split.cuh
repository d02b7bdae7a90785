#pragma once
// An fp32 value as the exact sum of three bf16 values (hi + mid + lo), so that a bf16 tensor-core GEMM over the three
// planes with a bf16-exact weight forms exactly the fp32 products x * w (the MoE router: fp32 rows on tensor cores).
// Host and device: the tests check the kernels' planes against this same function.
#include <cuda_bf16.h>

namespace fathom::kernels::cuda {

constexpr int kBf16SplitPlanes = 3;

// Exact (hi + mid + lo == x in real arithmetic) for every finite x with |x| >= 2^-100 whose hi does not round to
// infinity: each remainder is an exact fp32 difference (Sterbenz), the last one a multiple of x's fp32 ulp within
// 2^-16 of x, so at most 8 significant bits; for smaller x that ulp falls under bf16's smallest subnormal (2^-133).
// hi == bf16(x); a non-finite hi gives mid == lo == 0.
struct Bf16x3 {
  __nv_bfloat16 hi, mid, lo;
};

__host__ __device__ inline Bf16x3 split_bf16x3(float x) {
  const __nv_bfloat16 hi = __float2bfloat16_rn(x);
  const float high_value = __bfloat162float(hi);
  // A non-finite x (or one rounding to infinity) keeps its value in hi; the planes' sum is then x's own overflow.
  const bool finite = high_value - high_value == 0.0f;
  const float rest = finite ? x - high_value : 0.0f;
  const __nv_bfloat16 mid = __float2bfloat16_rn(rest);
  const __nv_bfloat16 lo = __float2bfloat16_rn(rest - __bfloat162float(mid));
  return {hi, mid, lo};
}

}  // namespace fathom::kernels::cuda
