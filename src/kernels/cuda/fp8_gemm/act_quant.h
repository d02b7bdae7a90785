#pragma once
// Per-token, per-128-channel e4m3 quantization on the GPU; numerics identical to kernels/cpu/activation_quant.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace fathom::kernels::cuda {

// x: [tokens, cols] bf16; values: [tokens, cols] e4m3; scales: [tokens, ceil(cols/128)] fp32 (token-major),
// and, when scales_block_major is non-null, the same scales as [ceil(cols/128), tokens] (the layout cuBLASLt reads).
// scale = max(amax, 1e-4) / 448; value = e4m3_rne_saturate(x / scale). Requires cols % 4 == 0.
void quantize_activations_fp8(const __nv_bfloat16* x, int64_t tokens, int64_t cols, uint8_t* values, float* scales,
                              float* scales_block_major, cudaStream_t stream);

// Block-major scales for the first block_major_tokens rows only, laid out [ceil(cols/128), block_major_tokens]:
// cuBLASLt takes a multiple-of-128 row prefix and the small-M kernel the rest (cuBLASLt has no algorithm for some M).
void quantize_activations_fp8(const __nv_bfloat16* x, int64_t tokens, int64_t cols, uint8_t* values, float* scales,
                              float* scales_block_major, int64_t block_major_tokens, cudaStream_t stream);
// Same for fp32 input (tests and fp32 pipelines).
void quantize_activations_fp8(const float* x, int64_t tokens, int64_t cols, uint8_t* values, float* scales,
                              float* scales_block_major, cudaStream_t stream);

}  // namespace fathom::kernels::cuda
