#include "kernels/cuda/moe/swiglu.h"

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8_gemm/e4m3_quant.cuh"
#include "kernels/cuda/fp8_gemm/split_k_sum.cuh"
#include "kernels/cuda/norm/bf16x8.cuh"
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kFullMask = 0xffffffffu;

// silu(g) * u as the CPU computes it (g / (1 + expf(-g)), IEEE division), rounded to bf16.
__device__ __forceinline__ float swiglu_bf16_value(float gate, float up) {
  const float silu = __fdiv_rn(gate, __fadd_rn(1.0f, expf(-gate)));
  return round_to_bf16(__fmul_rn(silu, up));
}

// Loads 8 gate and 8 up values of `row` at `column` (count valid, others 0) and returns the bf16-rounded products.
// With non-empty partials gate_up is still in its GEMM's split-K partials [splits, rows, 2I] (gate_up is not read).
__device__ __forceinline__ void swiglu_vector(const __nv_bfloat16* __restrict__ gate_up, const SplitKPartials& partials,
                                              bool partials_aligned, int64_t row, int64_t intermediate, int64_t column,
                                              int count, bool aligned, float (&out)[8]) {
  float gate[8], up[8];
  if (!partials.empty()) {
    const int64_t index = row * 2 * intermediate + column;
    unpack_bf16x8(split_k_sum_bf16x8_bits(partials, index, count, partials_aligned), gate);
    unpack_bf16x8(split_k_sum_bf16x8_bits(partials, index + intermediate, count, partials_aligned), up);
  } else {
    const __nv_bfloat16* gate_row = gate_up + row * 2 * intermediate;
    load_bf16x8_partial(gate_row + column, count, aligned, gate);
    load_bf16x8_partial(gate_row + intermediate + column, count, aligned, up);
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = i < count ? swiglu_bf16_value(gate[i], up[i]) : 0.0f;
}

// grid: (ceil(rows / warps per block), ceil(vectors per row / 32)); warp = (row, 32 consecutive 8-column vectors).
// A skipped (padding) row costs each of its warps one load.
__global__ void __launch_bounds__(kThreads)
    swiglu_bf16_kernel(const __nv_bfloat16* __restrict__ gate_up,  // [rows, 2I]
                       int64_t rows, int64_t intermediate,
                       const int32_t* __restrict__ row_expert,     // [rows] or null
                       bool aligned,
                       __nv_bfloat16* __restrict__ out) {          // [rows, I]
  begin_dependent_kernel();  // launched programmatically (programmatic_launch.cuh)
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows || (row_expert && row_expert[row] < 0)) return;
  const int64_t column = (static_cast<int64_t>(blockIdx.y) * 32 + threadIdx.x % 32) * kBf16PerVector;
  if (column >= intermediate) return;
  const int count = static_cast<int>(min(int64_t{kBf16PerVector}, intermediate - column));
  float values[8];
  swiglu_vector(gate_up, SplitKPartials{}, false, row, intermediate, column, count, aligned, values);
  store_bf16x8_partial(out + row * intermediate + column, count, aligned, values);
}

// grid: (ceil(rows / warps per block), ceil(groups per row / 2)); warp = (row, two 128-column groups), one group per
// half-warp (lane covers 8 columns, the amax is a 16-lane reduction). A skipped row costs its warps one load.
__global__ void __launch_bounds__(kThreads)
    swiglu_quant_fp8_kernel(const __nv_bfloat16* __restrict__ gate_up,  // [rows, 2I]
                            SplitKPartials gate_up_partials,            // non-empty: gate_up as [splits, rows, 2I] fp32
                            bool partials_aligned,
                            int64_t rows, int64_t intermediate,
                            const int32_t* __restrict__ row_expert,     // [rows] or null
                            bool aligned,
                            __nv_fp8_e4m3* __restrict__ out,            // [rows, I]
                            float* __restrict__ scales, int64_t scale_row_stride, int64_t scale_group_stride) {
  begin_dependent_kernel();  // launched programmatically (programmatic_launch.cuh)
  const int lane = threadIdx.x % 32;
  const int half = lane / 16, sub_lane = lane % 16;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows || (row_expert && row_expert[row] < 0)) return;  // warp-uniform
  const int64_t groups_per_row = (intermediate + kSwigluQuantGroup - 1) / kSwigluQuantGroup;
  const int64_t group = static_cast<int64_t>(blockIdx.y) * 2 + half;
  const int64_t column = group * kSwigluQuantGroup + sub_lane * kBf16PerVector;
  const int count = group < groups_per_row
                        ? static_cast<int>(max(int64_t{0}, min(int64_t{kBf16PerVector}, intermediate - column)))
                        : 0;
  float values[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (count > 0) {
    swiglu_vector(gate_up, gate_up_partials, partials_aligned, row, intermediate, column, count, aligned, values);
  }
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(values[i]));
#pragma unroll
  for (int offset = 8; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, offset));
  const float scale = e4m3_group_scale(amax);
  if (count == 0) return;
  uint8_t codes[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    codes[i] = static_cast<uint8_t>(e4m3_code(values[i], scale));
  }
  uint8_t* out_bytes = reinterpret_cast<uint8_t*>(out) + row * intermediate + column;
  if (aligned && count == 8) {
    uint2 packed;
    packed.x = codes[0] | (codes[1] << 8) | (codes[2] << 16) | (static_cast<uint32_t>(codes[3]) << 24);
    packed.y = codes[4] | (codes[5] << 8) | (codes[6] << 16) | (static_cast<uint32_t>(codes[7]) << 24);
    *reinterpret_cast<uint2*>(out_bytes) = packed;
  } else {
    for (int i = 0; i < count; ++i) out_bytes[i] = codes[i];
  }
  if (sub_lane == 0) scales[row * scale_row_stride + group * scale_group_stride] = scale;
}

// (row blocks, column blocks) for `columns_per_warp` columns handled by each warp.
dim3 grid_for(int64_t rows, int64_t intermediate, int64_t columns_per_warp) {
  const int64_t warps_per_block = kThreads / 32;
  const int64_t row_blocks = (rows + warps_per_block - 1) / warps_per_block;
  const int64_t column_blocks = (intermediate + columns_per_warp - 1) / columns_per_warp;
  FATHOM_CHECK(row_blocks < (int64_t{1} << 31) && column_blocks <= 65535,
               "swiglu: " << rows << " rows x " << intermediate << " columns exceed the launch grid");
  return dim3(static_cast<unsigned>(row_blocks), static_cast<unsigned>(column_blocks));
}

void validate(const __nv_bfloat16* gate_up, int64_t rows, int64_t intermediate) {
  FATHOM_CHECK(rows >= 0, "swiglu: rows " << rows);
  FATHOM_CHECK(intermediate > 0, "swiglu: intermediate " << intermediate);
  FATHOM_CHECK(gate_up != nullptr || rows == 0, "swiglu: null gate_up");
}

}  // namespace

void swiglu_bf16(const __nv_bfloat16* gate_up, int64_t rows, int64_t intermediate, const int32_t* row_expert,
                 __nv_bfloat16* out, cudaStream_t stream) {
  validate(gate_up, rows, intermediate);
  if (rows == 0) return;
  const bool aligned = intermediate % kBf16PerVector == 0 && is_aligned_16(gate_up) && is_aligned_16(out);
  launch_programmatic(swiglu_bf16_kernel, grid_for(rows, intermediate, 32 * kBf16PerVector), dim3(kThreads), 0, stream,
                      gate_up, rows, intermediate, row_expert, aligned, out);
}

void swiglu_quant_fp8(const __nv_bfloat16* gate_up, int64_t rows, int64_t intermediate, const int32_t* row_expert,
                      __nv_fp8_e4m3* out, float* scales, int64_t scale_row_stride, int64_t scale_group_stride,
                      cudaStream_t stream) {
  validate(gate_up, rows, intermediate);
  if (rows == 0) return;
  // gate/up loads need 16-byte alignment; the packed e4m3 store needs 8.
  const bool aligned = intermediate % kBf16PerVector == 0 && is_aligned_16(gate_up) &&
                       (reinterpret_cast<uintptr_t>(out) & 7u) == 0;
  launch_programmatic(swiglu_quant_fp8_kernel, grid_for(rows, intermediate, 2 * kSwigluQuantGroup), dim3(kThreads), 0,
                      stream, gate_up, SplitKPartials{}, false, rows, intermediate, row_expert, aligned, out, scales,
                      scale_row_stride, scale_group_stride);
}

void swiglu_quant_fp8(const SplitKPartials& gate_up_partials, int64_t rows, int64_t intermediate, __nv_fp8_e4m3* out,
                      float* scales, int64_t scale_row_stride, int64_t scale_group_stride, cudaStream_t stream) {
  FATHOM_CHECK(rows >= 0 && intermediate > 0, "swiglu: rows " << rows << ", intermediate " << intermediate);
  FATHOM_CHECK(!gate_up_partials.empty() && gate_up_partials.splits >= 1 &&
                   gate_up_partials.split_stride >= rows * 2 * intermediate,
               "swiglu: " << gate_up_partials.splits << " split-K partials of stride " << gate_up_partials.split_stride
                          << " for " << rows << " x " << 2 * intermediate);
  if (rows == 0) return;
  const bool aligned = intermediate % kBf16PerVector == 0 && (reinterpret_cast<uintptr_t>(out) & 7u) == 0;
  const bool partials_aligned = intermediate % kBf16PerVector == 0 && split_k_partials_aligned(gate_up_partials);
  launch_programmatic(swiglu_quant_fp8_kernel, grid_for(rows, intermediate, 2 * kSwigluQuantGroup), dim3(kThreads), 0,
                      stream, nullptr, gate_up_partials, partials_aligned, rows, intermediate, nullptr, aligned, out,
                      scales, scale_row_stride, scale_group_stride);
}

}  // namespace fathom::kernels::cuda
