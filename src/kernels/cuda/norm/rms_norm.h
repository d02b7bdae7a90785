#pragma once
// RMSNorm on bf16 rows with fp32 math: y = weight * (x / sqrt(mean(x^2) + eps)), as kernels::cpu::rms_norm.
// Each variant can also quantize its bf16 output to e4m3 for the next FP8 GEMM in the same launch.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/fp8_gemm/split_k_partials.h"

namespace fathom::kernels::cuda {

// Optional e4m3 copy of a norm's bf16 output, bit-identical to quantize_activations_fp8 (kernels/cuda/fp8_gemm)
// run on that output: per row per 128 columns, scale = max(amax, 1e-4) / 448, value = e4m3_rne_saturate(y / scale),
// with y the bf16-rounded output. Packed [rows, dim] whatever the norm's row strides.
struct Fp8RowsOut {
  uint8_t* values = nullptr;  // [rows, dim] e4m3 (device)
  float* scales = nullptr;    // [rows, ceil(dim / 128)] fp32 (device), row-major
};

// x:      [rows, dim] bf16 (device), row r at x + r * x_row_stride (elements)
// weight: [dim] bf16 (device)
// out:    [rows, dim] bf16 (device), row r at out + r * out_row_stride; may alias x (same strides)
// Strides let it normalise a column range in place, e.g. the first 512 columns of MLA's [T, 576] kv_a rows.
void rms_norm_bf16(const __nv_bfloat16* x, int64_t x_row_stride, int64_t rows, int64_t dim,
                   const __nv_bfloat16* weight, float eps, __nv_bfloat16* out, int64_t out_row_stride,
                   cudaStream_t stream);
// Same, also quantizing out to fp8 when fp8 is non-null. Fused into the norm kernel when dim % 128 == 0 and the
// rows are 16-byte aligned; otherwise a second kernel quantizes out after the norm (same bits either way).
void rms_norm_bf16(const __nv_bfloat16* x, int64_t x_row_stride, int64_t rows, int64_t dim,
                   const __nv_bfloat16* weight, float eps, __nv_bfloat16* out, int64_t out_row_stride,
                   const Fp8RowsOut* fp8, cudaStream_t stream);

// The normalised rows before their bf16 rounding, for the MoE router (bf16 rounding of its input flips near-tied
// expert choices, measured on the fixtures): in fp32, and/or split exactly into three bf16 planes (bf16x3_split.cuh)
// for the router's tensor-core GEMM. Either pointer may be null.
struct UnroundedRowsOut {
  float* f32 = nullptr;                  // [rows, dim] fp32 (device)
  __nv_bfloat16* bf16_planes = nullptr;  // [rows, 3, dim] bf16 (device): row r's hi, mid, lo at (3 r + p) * dim
};

// Fused residual add + norm (contiguous rows):
//   residual = bf16(residual + x)          (updated in place)
//   out      = rms_norm(residual)          (computed from the stored bf16 residual, as the unfused pair would)
// x, residual, out: [rows, dim] bf16 (device); out must not alias x or residual.
void add_rms_norm_bf16(const __nv_bfloat16* x, __nv_bfloat16* residual, int64_t rows, int64_t dim,
                       const __nv_bfloat16* weight, float eps, __nv_bfloat16* out, cudaStream_t stream);
// Same, also writing the normalised rows unrounded to out_f32 [rows, dim] fp32 (nullable): the MoE router reads
// them, since bf16 rounding of its input flips near-tied expert choices (measured on the fixtures).
void add_rms_norm_bf16(const __nv_bfloat16* x, __nv_bfloat16* residual, int64_t rows, int64_t dim,
                       const __nv_bfloat16* weight, float eps, __nv_bfloat16* out, float* out_f32, cudaStream_t stream);
// Same, also quantizing out to fp8 when fp8 is non-null (fused under the same conditions as rms_norm_bf16's).
void add_rms_norm_bf16(const __nv_bfloat16* x, __nv_bfloat16* residual, int64_t rows, int64_t dim,
                       const __nv_bfloat16* weight, float eps, __nv_bfloat16* out, float* out_f32,
                       const Fp8RowsOut* fp8, cudaStream_t stream);
// Same, with x still in a decode GEMM's split-K partials when x_partials is non-empty ([splits, rows, dim] at
// split_stride >= rows * dim; x is then not read and may be null): bit-identical to reducing them to bf16 x first.
void add_rms_norm_bf16(const __nv_bfloat16* x, const SplitKPartials& x_partials, __nv_bfloat16* residual, int64_t rows,
                       int64_t dim, const __nv_bfloat16* weight, float eps, __nv_bfloat16* out, float* out_f32,
                       const Fp8RowsOut* fp8, cudaStream_t stream);
// Same, with the unrounded rows in either or both of UnroundedRowsOut's forms.
void add_rms_norm_bf16(const __nv_bfloat16* x, const SplitKPartials& x_partials, __nv_bfloat16* residual, int64_t rows,
                       int64_t dim, const __nv_bfloat16* weight, float eps, __nv_bfloat16* out,
                       const UnroundedRowsOut& unrounded, const Fp8RowsOut* fp8, cudaStream_t stream);

}  // namespace fathom::kernels::cuda
