#pragma once
// y = x · Wᵀ on the CPU with fp32 accumulation; FP8 weights are dequantized per 128×128 block on the fly.
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/weight_matrix.h"

namespace fathom::kernels::cpu {

// x: [num_tokens, weight.cols] fp32, y: [num_tokens, weight.rows] fp32 (overwritten).
// kW8A8 quantizes x per token per 128 channels (quantize_activations_fp8) and promotes each block's fp32
// partial sum by x_scale * w_scale, as DeepSeek's FP8 GEMM does; float (non-FP8) weights ignore the mode.
void linear(const float* x, int64_t num_tokens, const WeightMatrix& weight, NumericMode mode, float* y,
            ThreadPool& pool);

// Row `row` of the dequantized weight (fp8 * scale_inv, or the float value) into out[weight.cols].
void dequantize_row(const WeightMatrix& weight, int64_t row, float* out);

// Whole dequantized weight, [rows, cols] fp32.
std::vector<float> dequantize(const WeightMatrix& weight);

}  // namespace fathom::kernels::cpu
