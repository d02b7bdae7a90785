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

// The row a warp works on (the kernels below run one row per warp).
__device__ __forceinline__ int64_t warp_row() {
  return static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
}

// Where a (row, group)'s e4m3 codes and scales go.
struct QuantOut {
  uint8_t* codes;                        // [rows, I]
  float* scales;                         // scales[row * row_stride + group * group_stride]
  int64_t row_stride, group_stride;
  SwigluBlockMajorScales block_major;    // [groups, block_major.rows] or null
};

// Quantizes the 128-column group `group` of `row` held by a half-warp, 8 values per lane (the lanes past the row hold
// 0), every lane of the warp calling: amax over the 16 lanes, then this lane's first `count` codes at `column` and,
// from sub-lane 0, the scale (also block-major for the first block_major.rows rows).
__device__ __forceinline__ void quantize_group(const float (&values)[8], int count, bool aligned, int sub_lane,
                                               int64_t row, int64_t intermediate, int64_t group, int64_t column,
                                               const QuantOut& out) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(values[i]));
#pragma unroll
  for (int offset = 8; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, offset));
  const float scale = e4m3_group_scale(amax);
  if (count == 0) return;
  uint8_t codes[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) codes[i] = static_cast<uint8_t>(e4m3_code(values[i], scale));
  uint8_t* out_bytes = out.codes + row * intermediate + column;
  if (aligned && count == 8) {
    uint2 packed;
    packed.x = codes[0] | (codes[1] << 8) | (codes[2] << 16) | (static_cast<uint32_t>(codes[3]) << 24);
    packed.y = codes[4] | (codes[5] << 8) | (codes[6] << 16) | (static_cast<uint32_t>(codes[7]) << 24);
    *reinterpret_cast<uint2*>(out_bytes) = packed;
  } else {
    for (int i = 0; i < count; ++i) out_bytes[i] = codes[i];
  }
  if (sub_lane != 0) return;
  out.scales[row * out.row_stride + group * out.group_stride] = scale;
  if (out.block_major.scales && row < out.block_major.rows) {
    out.block_major.scales[group * out.block_major.rows + row] = scale;
  }
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
                            QuantOut out) {
  begin_dependent_kernel();  // launched programmatically (programmatic_launch.cuh)
  const int lane = threadIdx.x % 32;
  const int half = lane / 16, sub_lane = lane % 16;
  const int64_t row = warp_row();
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
  quantize_group(values, count, aligned, sub_lane, row, intermediate, group, column, out);
}

// The bf16 input of whole 16-byte vectors (I % 8 == 0, aligned rows). grid: (ceil(rows / warps per block),
// ceil(pairs per row / pairs_per_warp)); warp = (row, pairs_per_warp consecutive pairs of 128-column groups), one
// group per half-warp as above. The next pair's loads are in flight while a pair computes: one pair per warp left the
// loads and the arithmetic of a wave of warps in series (H100, 4096 tokens: 197 -> 163 us). Same arithmetic per value
// as swiglu_quant_fp8_kernel, so the same bits. Occupancy decides the rest: at most 64 registers (4 blocks, 32 warps
// per SM); two pairs ahead needed 75, and its 3 blocks per SM were 2-22% slower at every walk length.
__global__ void __launch_bounds__(kThreads, 4)
    swiglu_quant_fp8_pipelined_kernel(const __nv_bfloat16* __restrict__ gate_up,  // [rows, 2I]
                                      int64_t rows, int64_t intermediate,
                                      const int32_t* __restrict__ row_expert,     // [rows] or null
                                      int pairs_per_warp,
                                      QuantOut out) {
  constexpr int kLoadsAhead = 1, kSlots = kLoadsAhead + 1;
  begin_dependent_kernel();  // launched programmatically (programmatic_launch.cuh)
  const int lane = threadIdx.x % 32;
  const int half = lane / 16, sub_lane = lane % 16;
  const int64_t row = warp_row();
  if (row >= rows || (row_expert && row_expert[row] < 0)) return;  // warp-uniform
  const int64_t groups_per_row = (intermediate + kSwigluQuantGroup - 1) / kSwigluQuantGroup;
  const int pairs_per_row = static_cast<int>((groups_per_row + 1) / 2);
  const int first_pair = static_cast<int>(blockIdx.y) * pairs_per_warp;
  const int num_pairs = min(pairs_per_warp, pairs_per_row - first_pair);
  const __nv_bfloat16* gate_row = gate_up + row * 2 * intermediate;
  // This lane's first column in pair p (past the row for the lanes of a partial or missing last group).
  auto column_of = [&](int p) {
    return (2 * static_cast<int64_t>(first_pair + p) + half) * kSwigluQuantGroup + sub_lane * kBf16PerVector;
  };
  uint4 gate[kSlots], up[kSlots];  // raw bf16 bits of the pairs in flight, slot p % kSlots
  auto load = [&](int p, uint4& gate_bits, uint4& up_bits) {
    const int64_t column = column_of(p);
    if (column < intermediate) {
      gate_bits = __ldg(reinterpret_cast<const uint4*>(gate_row + column));
      up_bits = __ldg(reinterpret_cast<const uint4*>(gate_row + intermediate + column));
    } else {
      gate_bits = up_bits = make_uint4(0u, 0u, 0u, 0u);
    }
  };
#pragma unroll
  for (int p = 0; p < kLoadsAhead; ++p) {
    if (p < num_pairs) load(p, gate[p], up[p]);
  }
  for (int base = 0; base < num_pairs; base += kSlots) {
#pragma unroll
    for (int slot = 0; slot < kSlots; ++slot) {
      const int p = base + slot;
      if (p >= num_pairs) break;
      if (p + kLoadsAhead < num_pairs) {  // into the slot pair p - 1 used
        load(p + kLoadsAhead, gate[(slot + kLoadsAhead) % kSlots], up[(slot + kLoadsAhead) % kSlots]);
      }
      const int64_t column = column_of(p);
      const bool in_row = column < intermediate;  // lanes past the row hold zeros (amax 0) and store nothing
      float gate_values[8], up_values[8], values[8];
      unpack_bf16x8(gate[slot], gate_values);
      unpack_bf16x8(up[slot], up_values);
#pragma unroll
      for (int i = 0; i < 8; ++i) values[i] = in_row ? swiglu_bf16_value(gate_values[i], up_values[i]) : 0.0f;
      quantize_group(values, in_row ? 8 : 0, true, sub_lane, row, intermediate, column / kSwigluQuantGroup, column,
                     out);
    }
  }
}

// (row blocks, column blocks) for rows of `units_per_row` work units (columns, group pairs), units_per_warp per warp.
dim3 grid_for(int64_t rows, int64_t units_per_row, int64_t units_per_warp) {
  const int64_t warps_per_block = kThreads / 32;
  const int64_t row_blocks = (rows + warps_per_block - 1) / warps_per_block;
  const int64_t column_blocks = (units_per_row + units_per_warp - 1) / units_per_warp;
  FATHOM_CHECK(row_blocks < (int64_t{1} << 31) && column_blocks <= 65535,
               "swiglu: " << rows << " rows of " << units_per_row << " units exceed the launch grid");
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
                      cudaStream_t stream, SwigluBlockMajorScales block_major, SwigluQuantTuning tuning) {
  validate(gate_up, rows, intermediate);
  FATHOM_CHECK(block_major.rows >= 0 && block_major.rows <= rows && (block_major.rows == 0 || block_major.scales),
               "swiglu: block-major scales for " << block_major.rows << " of " << rows << " rows");
  int pairs_per_warp = tuning.pairs_per_warp;
  FATHOM_CHECK(pairs_per_warp >= 0, "swiglu: pairs_per_warp " << pairs_per_warp << " (0 = the heuristic)");
  if (rows == 0) return;
  const QuantOut quant_out{reinterpret_cast<uint8_t*>(out), scales, scale_row_stride, scale_group_stride, block_major};
  // gate/up loads need 16-byte alignment; the packed e4m3 store needs 8.
  const bool aligned = intermediate % kBf16PerVector == 0 && is_aligned_16(gate_up) &&
                       (reinterpret_cast<uintptr_t>(out) & 7u) == 0;
  if (aligned) {
    const int64_t pairs_per_row = (intermediate + 2 * kSwigluQuantGroup - 1) / (2 * kSwigluQuantGroup);
    if (pairs_per_warp == 0) {
      int device = 0, num_sms = 0;
      FATHOM_CUDA_CHECK(cudaGetDevice(&device));
      FATHOM_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
      pairs_per_warp = swiglu_pairs_per_warp(rows, pairs_per_row, num_sms);
    }
    const int64_t per_warp = std::min<int64_t>(pairs_per_warp, pairs_per_row);
    launch_programmatic(swiglu_quant_fp8_pipelined_kernel, grid_for(rows, pairs_per_row, per_warp), dim3(kThreads), 0, stream, gate_up, rows,
                        intermediate, row_expert, static_cast<int>(per_warp), quant_out);
    return;
  }
  launch_programmatic(swiglu_quant_fp8_kernel, grid_for(rows, intermediate, 2 * kSwigluQuantGroup), dim3(kThreads), 0,
                      stream, gate_up, SplitKPartials{}, false, rows, intermediate, row_expert, aligned, quant_out);
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
                      stream, nullptr, gate_up_partials, partials_aligned, rows, intermediate, nullptr, aligned,
                      QuantOut{reinterpret_cast<uint8_t*>(out), scales, scale_row_stride, scale_group_stride, {}});
}

}  // namespace fathom::kernels::cuda
