#pragma once
// RoPE's cos/sin of one (position, frequency) pair and the pair rotation, as device helpers: the one definition that
// apply_rope_bf16, the cos/sin table builder and the fused MLA preparation kernel share, so that the three give the
// same bits (a table entry is exactly what the kernels would compute for that position).
#include <cstdint>

#include "kernels/cuda/rope/rope.h"

namespace fathom::kernels::cuda {

// fp32 angle (one rounded product, never contracted), cos/sin in double rounded to fp32, then the YaRN magnitude
// scaling: as kernels::cpu::apply_rope.
__device__ __forceinline__ void rope_compute_cos_sin(int32_t position, float inv_freq, float attention_factor,
                                                     float& cos_out, float& sin_out) {
  const float angle = __fmul_rn(static_cast<float>(position), inv_freq);
  double sin_value, cos_value;
  sincos(static_cast<double>(angle), &sin_value, &cos_value);
  cos_out = __fmul_rn(static_cast<float>(cos_value), attention_factor);
  sin_out = __fmul_rn(static_cast<float>(sin_value), attention_factor);
}

// cos/sin of frequency i (< rope_dim / 2) at `position`: read from params.cos_sin when the table covers the
// position, computed otherwise (same bits; positions outside the table cost a double sincos but never read past it).
__device__ __forceinline__ void rope_cos_sin(const RopeParams& params, int32_t position, int i, float& cos_out,
                                             float& sin_out) {
  if (params.cos_sin != nullptr && position >= 0 && position < params.max_positions) {
    const float* row = params.cos_sin + static_cast<int64_t>(position) * params.rope_dim;  // [cos (half) ; sin (half)]
    cos_out = row[i];
    sin_out = row[params.rope_dim / 2 + i];
    return;
  }
  rope_compute_cos_sin(position, params.inv_freq[i], params.attention_factor, cos_out, sin_out);
}

// (a, b) <- (a cos - b sin, b cos + a sin), each product and sum rounded separately (no FMA), as the CPU op.
__device__ __forceinline__ void rope_rotate(float& a, float& b, float cos_value, float sin_value) {
  const float x0 = a, x1 = b;
  a = __fsub_rn(__fmul_rn(x0, cos_value), __fmul_rn(x1, sin_value));
  b = __fadd_rn(__fmul_rn(x1, cos_value), __fmul_rn(x0, sin_value));
}

}  // namespace fathom::kernels::cuda
