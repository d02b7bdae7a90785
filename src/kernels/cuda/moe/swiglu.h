#pragma once
// SwiGLU activation of a fused gate/up projection: silu(gate) * up, fp32 math, bf16 inputs.
// Two outputs: bf16 rows, or e4m3 rows with per-128-column scales (the numerics of kernels::cpu::
// quantize_activations_fp8 applied to the bf16 rows, so fused == swiglu_bf16 followed by that quantization).
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/fp8_gemm/split_k_partials.h"
#include "kernels/cuda/moe/swiglu_heuristics.h"

namespace fathom::kernels::cuda {

constexpr int64_t kSwigluQuantGroup = 128;  // columns per fp8 scale

// gate_up:    [rows, 2 * I] bf16 (device): gate in columns [0, I), up in [I, 2I)
// row_expert: [rows] int32 (device) or nullptr; rows with a negative entry (MoE padding) are skipped, outputs untouched
// out:        [rows, I] bf16 (device)
// The model runs the fused e4m3 form below; this bf16 form defines its values (fused == this + the CPU quantization).
void swiglu_bf16(const __nv_bfloat16* gate_up, int64_t rows, int64_t intermediate, const int32_t* row_expert,
                 __nv_bfloat16* out, cudaStream_t stream);

// out:    [rows, I] e4m3 (device); x = bf16(silu(gate) * up), scale = max(amax over the 128-column group, 1e-4) / 448,
//         code = e4m3_rn_satfinite(x / scale)
// scales: fp32 (device) at scales[row * scale_row_stride + group * scale_group_stride], group < ceil(I / 128)
//         (row-major [rows, groups]: strides (groups, 1); column-major / MN-major [groups, padded_rows]: (1, padded_rows))
// block_major: optionally the scales again, of rows [0, block_major.rows) as [groups, block_major.rows] (the layout
//         cuBLASLt reads; quantize_activations_fp8's scales_block_major), so a prefill's down GEMM needs no bf16 copy.
// tuning: how the warps walk aligned rows (swiglu_heuristics.h); the bits do not depend on it.
struct SwigluBlockMajorScales {
  float* scales = nullptr;  // [groups, rows] (device) or null
  int64_t rows = 0;         // <= the call's rows
};
void swiglu_quant_fp8(const __nv_bfloat16* gate_up, int64_t rows, int64_t intermediate, const int32_t* row_expert,
                      __nv_fp8_e4m3* out, float* scales, int64_t scale_row_stride, int64_t scale_group_stride,
                      cudaStream_t stream, SwigluBlockMajorScales block_major = {}, SwigluQuantTuning tuning = {});

// Same for every row (no row_expert), with gate_up still in its GEMM's split-K partials ([splits, rows, 2I] fp32,
// split_stride >= rows * 2I): bit-identical to reducing them to the bf16 gate_up first.
void swiglu_quant_fp8(const SplitKPartials& gate_up_partials, int64_t rows, int64_t intermediate, __nv_fp8_e4m3* out,
                      float* scales, int64_t scale_row_stride, int64_t scale_group_stride, cudaStream_t stream);

}  // namespace fathom::kernels::cuda
