#pragma once
// The sampling filters' exact arithmetic: z as an order-preserving integer key, and probability mass as a 2^-40
// fixed-point integer (sums of them are exact and independent of their order).
#include <cstdint>

namespace fathom::kernels::cuda {

constexpr float kMassScale = 1099511627776.0f;  // 2^40: probability mass fixed point

// Order-preserving map of a float to uint32 (larger float -> larger key); -0 folds onto +0.
__device__ __forceinline__ uint32_t order_key(float z) {
  if (z == 0.0f) z = 0.0f;
  const uint32_t bits = __float_as_uint(z);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// exp(z - z_max) in [0, 1] as a 2^-40 fixed-point mass (truncated).
__device__ __forceinline__ unsigned long long fixed_mass(float relative) {
  return static_cast<unsigned long long>(relative * kMassScale);
}

}  // namespace fathom::kernels::cuda
