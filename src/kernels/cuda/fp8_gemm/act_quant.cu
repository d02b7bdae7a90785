#include "kernels/cuda/fp8_gemm/act_quant.h"

#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8_gemm/e4m3_quant.cuh"
#include "kernels/cuda/fp8_gemm/fp8_gemm_heuristics.h"
#include "kernels/cuda/fp8_gemm/fp8_types.h"
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda {

namespace {

__device__ inline float load_as_float(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ inline float load_as_float(const float* p) { return *p; }

// The general kernel (fp32 input, or rows not 16-byte aligned): one warp per (token, 128-channel group); each lane
// owns 4 consecutive channels.
template <typename Input>
__global__ void quantize_activations_kernel(const Input* __restrict__ x,        // [tokens, cols]
                                            int64_t tokens, int64_t cols,
                                            uint8_t* __restrict__ values,       // [tokens, cols]
                                            float* __restrict__ scales,         // [tokens, groups]
                                            float* __restrict__ scales_block_major,   // [groups, bm_tokens] or null
                                            int64_t block_major_tokens) {
  begin_dependent_kernel();  // launched programmatically (programmatic_launch.cuh)
  const int64_t groups = (cols + kFp8ScaleBlock - 1) / kFp8ScaleBlock;
  const int64_t warp_global = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp_global >= tokens * groups) return;
  const int64_t token = warp_global / groups, group = warp_global % groups;
  const int64_t base = token * cols + group * kFp8ScaleBlock + lane * 4;
  const int64_t channel = group * kFp8ScaleBlock + lane * 4;
  float v[4];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[i] = channel + i < cols ? load_as_float(x + base + i) : 0.0f;
    amax = fmaxf(amax, fabsf(v[i]));
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  const float scale = e4m3_group_scale(amax);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (channel + i < cols) {
      values[base + i] = static_cast<uint8_t>(e4m3_code(v[i], scale));
    }
  }
  if (lane == 0) {
    scales[token * groups + group] = scale;
    if (scales_block_major && token < block_major_tokens) scales_block_major[group * block_major_tokens + token] = scale;
  }
}

// The bf16 kernel for cols % 8 == 0 and 16-byte aligned rows: a half-warp per (token, 128-channel group), each lane
// 8 channels (one 16-byte load, one 8-byte store); a warp takes kUnitsPerWarp consecutive units (contiguous memory),
// their loads issued before any arithmetic. Same numerics as above: the amax of the same 128 values, the same
// division.
template <int kUnitsPerWarp>
__global__ void quantize_activations_bf16x8_kernel(const __nv_bfloat16* __restrict__ x,  // [tokens, cols]
                                                   int64_t tokens, int64_t cols,
                                                   uint8_t* __restrict__ values,        // [tokens, cols]
                                                   float* __restrict__ scales,          // [tokens, groups]
                                                   float* __restrict__ scales_block_major,  // [groups, bm_tokens] or null
                                                   int64_t block_major_tokens) {
  begin_dependent_kernel();  // launched programmatically (programmatic_launch.cuh)
  const int64_t groups = (cols + kFp8ScaleBlock - 1) / kFp8ScaleBlock;
  const int64_t units = tokens * groups;
  constexpr int kIterations = kUnitsPerWarp / 2;  // a warp covers two units per iteration
  const int64_t first_unit = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32 * kUnitsPerWarp;
  const int lane = threadIdx.x % 32, half = lane / 16, sub_lane = lane % 16;
  int64_t unit[kIterations], channel[kIterations];
  bool active[kIterations];
  uint4 raw[kIterations];
#pragma unroll
  for (int j = 0; j < kIterations; ++j) {
    unit[j] = first_unit + 2 * j + half;
    const int64_t token = unit[j] / groups, group = unit[j] % groups;
    channel[j] = group * kFp8ScaleBlock + sub_lane * 8;
    active[j] = unit[j] < units && channel[j] < cols;  // cols % 8 == 0: a lane's 8 channels all exist or none does
    raw[j] = active[j] ? *reinterpret_cast<const uint4*>(x + token * cols + channel[j]) : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int j = 0; j < kIterations; ++j) {
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw[j]);
    float v[8];
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 pair = __bfloat1622float2(pairs[i]);
      v[2 * i] = pair.x;
      v[2 * i + 1] = pair.y;
      amax = fmaxf(amax, fmaxf(fabsf(pair.x), fabsf(pair.y)));
    }
#pragma unroll
    for (int offset = 8; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    if (!active[j]) continue;
    const float scale = e4m3_group_scale(amax);
    uint32_t packed[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      packed[i / 4] |= e4m3_code(v[i], scale) << (8 * (i % 4));
    }
    const int64_t token = unit[j] / groups, group = unit[j] % groups;
    *reinterpret_cast<uint2*>(values + token * cols + channel[j]) = make_uint2(packed[0], packed[1]);
    if (sub_lane == 0) {
      scales[unit[j]] = scale;
      if (scales_block_major && token < block_major_tokens) scales_block_major[group * block_major_tokens + token] = scale;
    }
  }
}

template <typename Input>
void launch(const Input* x, int64_t tokens, int64_t cols, uint8_t* values, float* scales, float* scales_block_major,
            int64_t block_major_tokens, cudaStream_t stream) {
  FATHOM_CHECK(cols % 4 == 0, "quantize_activations_fp8: cols " << cols << " must be a multiple of 4");
  FATHOM_CHECK(block_major_tokens >= 0 && block_major_tokens <= tokens,
               "quantize_activations_fp8: block_major_tokens " << block_major_tokens << " outside [0, " << tokens << "]");
  if (tokens == 0) return;
  constexpr int kThreads = 256;
  const int64_t units = tokens * ceil_div(cols, kFp8ScaleBlock);
  if constexpr (std::is_same_v<Input, __nv_bfloat16>) {
    const bool vector_aligned = cols % 8 == 0 && (reinterpret_cast<uintptr_t>(x) & 15u) == 0 &&
                                (reinterpret_cast<uintptr_t>(values) & 7u) == 0;
    if (vector_aligned) {
      const bool four = units >= kActQuantFourUnitsMinUnits;
      const int64_t blocks = ceil_div(ceil_div(units, four ? 4 : 2) * 32, kThreads);
      launch_programmatic(four ? quantize_activations_bf16x8_kernel<4> : quantize_activations_bf16x8_kernel<2>,
                          dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, x, tokens, cols, values,
                          scales, scales_block_major, block_major_tokens);
      return;
    }
  }
  const int64_t blocks = ceil_div(units * 32, kThreads);
  launch_programmatic(quantize_activations_kernel<Input>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, x,
                      tokens, cols, values, scales, scales_block_major, block_major_tokens);
}

}  // namespace

void quantize_activations_fp8(const __nv_bfloat16* x, int64_t tokens, int64_t cols, uint8_t* values, float* scales,
                              float* scales_block_major, cudaStream_t stream) {
  launch(x, tokens, cols, values, scales, scales_block_major, tokens, stream);
}

void quantize_activations_fp8(const __nv_bfloat16* x, int64_t tokens, int64_t cols, uint8_t* values, float* scales,
                              float* scales_block_major, int64_t block_major_tokens, cudaStream_t stream) {
  launch(x, tokens, cols, values, scales, scales_block_major, block_major_tokens, stream);
}

void quantize_activations_fp8(const float* x, int64_t tokens, int64_t cols, uint8_t* values, float* scales,
                              float* scales_block_major, cudaStream_t stream) {
  launch(x, tokens, cols, values, scales, scales_block_major, tokens, stream);
}

}  // namespace fathom::kernels::cuda
