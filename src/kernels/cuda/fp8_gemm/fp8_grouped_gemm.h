#pragma once
// Grouped FP8 block-scaled GEMM for MoE: every routed expert multiplies its contiguous segment of the permuted
// (expert-grouped, kernels/cuda/moe/moe_permutation.h) activation rows by its own weight. Only experts with rows
// read their weights, so a decode step streams just the selected experts. fp32 accumulation promoted per 128-wide
// K block, row by row: a row's result does not depend on its neighbours (for a given kernel; see `kernel`).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/fp8_gemm/fp8_gemm_heuristics.h"
#include "kernels/cuda/fp8_gemm/fp8_types.h"

namespace fathom::kernels::cuda {

enum class Fp8GroupedKernel { kSmallM, kTiled, kWgmma };

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
  // Which kernel multiplies the segments:
  //   kSmallM: decode (each expert's weight streamed once per 64 rows; with active_experts, the gemv kernel).
  //   kTiled: prefill on mma.sync 128-row tiles, every element's arithmetic bitwise identical to kSmallM, so the
  //     choice between the two never changes a bit (batch-invariant inference where kWgmma does not take the
  //     shapes). max_rows_per_expert sizes its grid and must bound every count, else the kernel traps.
  //   kWgmma: prefill on warpgroup MMA fed by TMA (sm90/fp8_gemm_grouped_wgmma.cuh): same promotion contract, not
  //     the same bits as the other two (the tensor core sums a K block in its own order), but the same bits for a
  //     row at every batch size and tile size (batch-invariant inference runs it for decode too). Needs x_rows,
  //     rows a multiple of 8, num_experts <= 1024 and 16-byte aligned operands and output.
  Fp8GroupedKernel kernel = Fp8GroupedKernel::kSmallM;
  int64_t x_rows = 0;                       // kWgmma: rows of x and out (the bound of its tensor map)
  int32_t wgmma_tokens_per_tile = 0;        // kWgmma: 64, 128 or 192; 0 picks from the average rows per expert
  // Decode (kSmallM): the experts that have rows, ascending, then -1 (MoePermutation::active_experts), and a host
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
  // Decode only (with active_experts): the caller's promise that active_experts, the offsets, the counts and
  // x_row_source were written by a kernel launched at least two launches earlier on this stream (the routing,
  // before the gate/up GEMM and SwiGLU, for the down GEMM), so the gemv kernel reads them and starts streaming
  // its experts' weights before waiting for the previous kernel (programmatic launch). Same bits either way.
  bool experts_settled = false;
};

// Whether Fp8GroupedKernel::kWgmma takes this weight shape (rows a multiple of 8, at most 1024 experts).
bool fp8_grouped_wgmma_supports(int64_t rows, int32_t num_experts);

// out: [max_rows, rows] bf16; rows of each expert's segment written, others untouched. No sync, no allocation.
void fp8_grouped_gemm(const Fp8GroupedGemmArgs& args, __nv_bfloat16* out, cudaStream_t stream);

// Dense out[x.tokens, w.rows] bf16 = x · wᵀ on the kWgmma kernel, all tokens as one expert: a row's bits do not depend
// on the token count (batch-invariant prefill), unlike cuBLASLt's. Needs fp8_grouped_wgmma_supports(w.rows, 1) and
// 16-byte aligned operands and output. No sync, no allocation.
void fp8_dense_wgmma_gemm(const DeviceFp8Activations& x, const DeviceFp8Weight& w, __nv_bfloat16* out,
                          cudaStream_t stream);

}  // namespace fathom::kernels::cuda
