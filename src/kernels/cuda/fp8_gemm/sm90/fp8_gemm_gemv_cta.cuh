#pragma once
// Decode FP8 block-scaled GEMM for 1..16 tokens with split-K summed inside the CTA: one CTA per 16-row weight tile
// holds every K split of it, one warp per split (a warp takes several in turn past gemv_cta_max_warps), so the
// partials meet in shared memory: no fp32 partials in global memory and no reduce launch, which costs 1-3 us per
// small GEMM (bench_fp8_gemm floor, H200) -- as much as a 15 MB weight's whole stream.
//
// Bit-identical to fp8_gemm_small_m_kernel (fp8_gemm_small_m.cuh) and fp8_gemm_gemv_kernel for every token, M and
// shape: the same split count and split ranges, each (16-row tile, split) computed by one warp exactly as
// fp8_gemm_gemv_kernel computes it (gemv_accumulate: same fragments, the same four m16n8k32 MMAs per K block
// promoted in increasing K-block order, kDepth K blocks in flight, L2 prefetch ahead, weights requested before the
// wait for the previous kernel), and the partials summed from 0.0f in split order as reduce_splits_kernel does.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/fp8_gemm/sm90/fp8_gemm_gemv.cuh"  // gemv_operands, gemv_accumulate, gemv_store_fragment
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda::sm90 {

// Warps per CTA at most (splits beyond it are taken by the same warps in turn): 16 for one token tile; 8 for two,
// whose 2 x 4 accumulators and operands need more than the 128 registers a 16-warp CTA allows (ptxas spilled
// ~120 bytes at 16; 148 registers at 8). H100, graph us at 16 tokens, 16 -> 8 warps: q_b 22.2 -> 18.1, shared
// expert gate_up 18.1 -> 15.2, fused q_a + kv_a 10.2 -> 9.8, shared down 9.6 -> 10.0 (bench/RESULTS.md).
__host__ __device__ constexpr int gemv_cta_max_warps(int token_tiles) { return token_tiles == 1 ? 16 : 8; }
// Warps of a CTA for `splits` splits: every warp gets ceil(splits / warps) or one fewer.
__host__ __device__ constexpr int gemv_cta_warps(int splits, int token_tiles) {
  const int max_warps = gemv_cta_max_warps(token_tiles);
  const int per_warp = (splits + max_warps - 1) / max_warps;
  return (splits + per_warp - 1) / per_warp;
}

// The fragment of split `split` of the CTA's 16-row tile (rows row0.., acc as gemv_compute leaves it): written to
// out when it is the only split, else kept in partial_tile [splits][kTokenTiles][4][32] for gemv_cta_sum_splits.
template <int kTokenTiles, typename Output>
__device__ __forceinline__ void gemv_cta_keep_split(const float (&acc)[kTokenTiles][4], int split, int splits,
                                                    int tokens, int64_t rows, int64_t row0, float* partial_tile,
                                                    Output* __restrict__ out) {
  if (splits == 1) {
    gemv_store_fragment(acc, tokens, rows, row0, out);
    return;
  }
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int t = 0; t < kTokenTiles; ++t) {
#pragma unroll
    for (int i = 0; i < 4; ++i) partial_tile[((split * kTokenTiles + t) * 4 + i) * 32 + lane] = acc[t][i];
  }
}

// After a barrier over the CTA: out rows [row0, row0 + 16) = the splits' partials summed from 0.0f in split order,
// as reduce_splits_kernel sums them. Element e = token * 16 + row of the tile.
template <int kTokenTiles, typename Output>
__device__ __forceinline__ void gemv_cta_sum_splits(const float* partial_tile, int splits, int tokens, int64_t rows,
                                                    int64_t row0, Output* __restrict__ out) {
  for (int e = threadIdx.x; e < tokens * kSmallMRowsPerWarp; e += blockDim.x) {
    const int token = e / kSmallMRowsPerWarp, tile_row = e % kSmallMRowsPerWarp;
    const int64_t row = row0 + tile_row;
    if (row >= rows) continue;
    const int t = token / 8, token_in_tile = token % 8;
    const int i = token_in_tile % 2 + (tile_row >= 8 ? 2 : 0);
    const int source_lane = (tile_row % 8) * 4 + token_in_tile / 2;
    float sum = 0.0f;
    // Eight splits' loads in flight at a time, the adds in split order (one load at a time cost the fused q_a + kv_a
    // ~0.2 us of its 7.4 at 1 token on an H100).
    for (int split0 = 0; split0 < splits; split0 += 8) {
      float value[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int split = split0 + j;
        value[j] = split < splits ? partial_tile[((split * kTokenTiles + t) * 4 + i) * 32 + source_lane] : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (split0 + j < splits) sum += value[j];
      }
    }
    out[static_cast<int64_t>(token) * rows + row] = static_cast<Output>(sum);
  }
}

// grid = ceil(rows / 16) CTAs; block = gemv_cta_warps(splits, kTokenTiles) * 32 threads; splits * kTokenTiles * 512
// bytes of dynamic shared memory when splits > 1 (none for one split: the warp writes out itself). Launched
// programmatically.
// Requires splits * k_blocks_per_split to cover k_blocks with no empty split, tokens <= kTokenTiles * 8.
template <int kTokenTiles, int kDepth, typename Output>
__global__ void __launch_bounds__(gemv_cta_max_warps(kTokenTiles) * 32)
fp8_gemm_gemv_cta_kernel(const uint8_t* __restrict__ x,       // [tokens, cols] e4m3
                         const float* __restrict__ x_scales,  // [tokens, k_blocks]
                         const uint8_t* __restrict__ w,       // [rows, cols] e4m3
                         const float* __restrict__ w_scales,  // [ceil(rows/128), k_blocks]
                         int tokens, int64_t rows, int64_t cols, int k_blocks, int k_blocks_per_split, int splits,
                         int prefetch_blocks,
                         Output* __restrict__ out) {          // [tokens, rows]
  extern __shared__ float gemv_cta_partial_tile[];            // [splits][kTokenTiles][4][32] when splits > 1
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kSmallMRowsPerWarp;
  const GemvOperands<kTokenTiles> op = gemv_operands<kTokenTiles>(w, w_scales, tokens, rows, cols, k_blocks, row0);
  for (int split = warp; split < splits; split += warps) {
    const int kb_begin = split * k_blocks_per_split;
    float acc[kTokenTiles][4];
    // The warp's first split waits for the previous kernel once its first weight blocks are requested.
    gemv_accumulate<kTokenTiles, kDepth>(op, x, x_scales, kb_begin, min(k_blocks, kb_begin + k_blocks_per_split) - kb_begin,
                                         prefetch_blocks, acc, [split, warp] {
                                           if (split == warp) begin_dependent_kernel();
                                         });
    gemv_cta_keep_split<kTokenTiles>(acc, split, splits, tokens, rows, row0, gemv_cta_partial_tile, out);
  }
  if (splits == 1) return;
  __syncthreads();
  gemv_cta_sum_splits<kTokenTiles>(gemv_cta_partial_tile, splits, tokens, rows, row0, out);
}

}  // namespace fathom::kernels::cuda::sm90
