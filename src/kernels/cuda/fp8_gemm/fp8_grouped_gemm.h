#pragma once
// Grouped FP8 block-scaled GEMM for MoE: every routed expert multiplies its contiguous segment of the permuted
// (expert-grouped, kernels/cuda/moe/moe_permutation.h) activation rows by its own weight. Only experts with rows
// read their weights, so a decode step streams just the selected experts. Same numerics as Fp8Gemm's small-M path
// (fp32 accumulation promoted per 128-wide K block), row by row: a row's result does not depend on its neighbours.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/fp8_gemm/fp8_gemm_heuristics.h"

namespace fathom::kernels::cuda {

struct Fp8GroupedGemmArgs {
  const uint8_t* x_values = nullptr;        // [max_rows, cols] e4m3, rows in permuted order
  const float* x_scales = nullptr;          // [max_rows, ceil(cols/128)] fp32, token-major
  const int32_t* expert_offsets = nullptr;  // [E + 1] first row of each expert's segment (device)
  const int32_t* expert_counts = nullptr;   // [E] rows of each expert (device)
  const uint8_t* w_values = nullptr;        // [E, rows, cols] e4m3
  const float* w_scales = nullptr;          // [E, ceil(rows/128), ceil(cols/128)] fp32
  int32_t num_experts = 0;
  int64_t rows = 0;                         // output features per expert
  int64_t cols = 0;                         // input features, a multiple of 16
  int32_t max_rows_per_expert = 0;          // host upper bound of any expert's count (picks the row tile)
  // false: the small-M kernel (decode: each expert's weight streamed once per 64 rows). true: the tiled kernel
  // (prefill: each weight tile reused by 128 rows; max_rows_per_expert sizes its grid and must bound every count,
  // else the kernel traps). Both compute every element with the same arithmetic, so the choice never changes a
  // bit and may differ from batch to batch.
  bool tiled = false;
  // Decode (not tiled): the experts that have rows, ascending, then -1 (MoePermutation::active_experts), and a host
  // bound on how many there are (min(E, tokens * top_k)). When set, the grid covers only that many experts and each
  // streams its weight with fp8_gemm_grouped_gemv_kernel (same bits as without).
  const int32_t* active_experts = nullptr;  // [num_experts] (device)
  int32_t max_active_experts = 0;
  // Decode only (with active_experts): when set, permuted row r reads activation row x_row_source[r] / x_row_divisor
  // of an unpermuted x (MoePermutation::row_token_slot and top_k: the token's row) instead of row r, so no gather
  // launch is needed. Same values read, same bits.
  const int32_t* x_row_source = nullptr;    // [max_rows] (device)
  int32_t x_row_divisor = 1;
  int64_t x_source_rows = 0;                // rows of the unpermuted x (the kernel addresses them with int offsets)
  // Decode only: each warp asks L2 for its weight rows this many K blocks ahead (data movement only, same bits).
  int32_t gemv_prefetch_blocks = kGroupedGemvPrefetchBlocks;
};

// out: [max_rows, rows] bf16; rows of each expert's segment written, others untouched. No sync, no allocation.
void fp8_grouped_gemm(const Fp8GroupedGemmArgs& args, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace fathom::kernels::cuda
