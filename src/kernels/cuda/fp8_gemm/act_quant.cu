#include "kernels/cuda/fp8_gemm/act_quant.h"

#include <cuda_fp8.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8_gemm/fp8_types.h"
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda {

namespace {

__device__ inline float load_as_float(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ inline float load_as_float(const float* p) { return *p; }

// One warp per (token, 128-channel group); each lane owns 4 consecutive channels.
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
  const float scale = fmaxf(amax, 1e-4f) / 448.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (channel + i < cols) {
      values[base + i] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(v[i] / scale, __NV_SATFINITE, __NV_E4M3));
    }
  }
  if (lane == 0) {
    scales[token * groups + group] = scale;
    if (scales_block_major && token < block_major_tokens) scales_block_major[group * block_major_tokens + token] = scale;
  }
}

template <typename Input>
void launch(const Input* x, int64_t tokens, int64_t cols, uint8_t* values, float* scales, float* scales_block_major,
            int64_t block_major_tokens, cudaStream_t stream) {
  FATHOM_CHECK(cols % 4 == 0, "quantize_activations_fp8: cols " << cols << " must be a multiple of 4");
  FATHOM_CHECK(block_major_tokens >= 0 && block_major_tokens <= tokens,
               "quantize_activations_fp8: block_major_tokens " << block_major_tokens << " outside [0, " << tokens << "]");
  if (tokens == 0) return;
  const int64_t warps = tokens * ceil_div(cols, kFp8ScaleBlock);
  constexpr int kThreads = 256;
  const int64_t blocks = ceil_div(warps * 32, kThreads);
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
