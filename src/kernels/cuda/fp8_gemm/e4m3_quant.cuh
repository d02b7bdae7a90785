#pragma once
// DeepSeek's activation quantization of one value group (128 channels), shared by every kernel that writes e4m3
// activations (act_quant, the norms' fused output, SwiGLU's): the numerics of kernels::cpu::quantize_activations_fp8,
// IEEE division throughout (no fast-math), so every writer gives the same bits.
#include <cuda_fp8.h>

#include <cstdint>

namespace fathom::kernels::cuda {

constexpr float kE4m3Max = 448.0f;
constexpr float kE4m3MinAmax = 1e-4f;  // floor of a group's amax: an all-zero group still gets a finite scale

// scale = max(amax, 1e-4) / 448 for a group whose largest magnitude is amax.
__device__ __forceinline__ float e4m3_group_scale(float amax) { return __fdiv_rn(fmaxf(amax, kE4m3MinAmax), kE4m3Max); }

// The e4m3 code (round to nearest, saturating to +-448) of value / scale.
__device__ __forceinline__ uint32_t e4m3_code(float value, float scale) {
  return static_cast<uint32_t>(__nv_cvt_float_to_fp8(__fdiv_rn(value, scale), __NV_SATFINITE, __NV_E4M3));
}

}  // namespace fathom::kernels::cuda
