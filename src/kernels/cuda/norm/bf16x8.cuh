#pragma once
// Eight bf16 values moved as one 16-byte access and widened to / narrowed from fp32 registers.
// Shared by the small memory-bound kernels (norm, moe, embedding); device-only helpers.
#include <cuda_bf16.h>

#include <cstdint>

namespace fathom::kernels::cuda {

constexpr int kBf16PerVector = 8;  // one uint4 = 8 bf16

// src: 8 bf16, 16-byte aligned.
__device__ __forceinline__ void load_bf16x8(const __nv_bfloat16* src, float (&out)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(src);
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(pairs[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// dst: 8 bf16, 16-byte aligned; round to nearest even.
__device__ __forceinline__ void store_bf16x8(__nv_bfloat16* dst, const float (&in)[8]) {
  uint4 raw;
  __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) pairs[i] = __floats2bfloat162_rn(in[2 * i], in[2 * i + 1]);
  *reinterpret_cast<uint4*>(dst) = raw;
}

// Up to 8 values starting at src (count in [0, 8]); vectorized when `aligned` (16-byte aligned and count == 8).
__device__ __forceinline__ void load_bf16x8_partial(const __nv_bfloat16* src, int count, bool aligned, float (&out)[8]) {
  if (aligned && count == 8) {
    load_bf16x8(src, out);
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = i < count ? __bfloat162float(src[i]) : 0.0f;
}

__device__ __forceinline__ void store_bf16x8_partial(__nv_bfloat16* dst, int count, bool aligned, const float (&in)[8]) {
  if (aligned && count == 8) {
    store_bf16x8(dst, in);
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (i < count) dst[i] = __float2bfloat16_rn(in[i]);
  }
}

// Round-trip through bf16 (the value a bf16 tensor would hold).
__device__ __forceinline__ float round_to_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

inline bool is_aligned_16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Eight bf16 kept as raw bits (4 registers instead of 8 floats), so that a thread's row values and weights both stay
// resident across the reduction barrier. Lanes at or past count hold +0, the value the fp32 path gives them.
__device__ __forceinline__ uint4 load_bf16x8_bits(const __nv_bfloat16* src, int count, bool aligned) {
  if (aligned && count == 8) return *reinterpret_cast<const uint4*>(src);
  uint32_t words[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (i < count) words[i / 2] |= static_cast<uint32_t>(__bfloat16_as_ushort(src[i])) << (16 * (i % 2));
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

// Widening as load_bf16x8 does it.
__device__ __forceinline__ void unpack_bf16x8(const uint4& bits, float (&out)[8]) {
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&bits);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(pairs[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// Narrowing (round to nearest even) as store_bf16x8 does it.
__device__ __forceinline__ uint4 pack_bf16x8(const float (&in)[8]) {
  uint4 bits;
  __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&bits);
#pragma unroll
  for (int i = 0; i < 4; ++i) pairs[i] = __floats2bfloat162_rn(in[2 * i], in[2 * i + 1]);
  return bits;
}

}  // namespace fathom::kernels::cuda
