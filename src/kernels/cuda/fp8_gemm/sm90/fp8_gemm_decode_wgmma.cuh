#pragma once
// Dense FP8 block-scaled GEMM for decode-sized batches (up to 64 tokens) on warpgroup MMA: the swap-AB building
// blocks of wgmma_swap_ab.cuh (weight rows on wgmma's M, tokens on its N) with split-K. From 9 tokens the mma.sync
// small-M kernels fall off the memory floor (17-30% of copy bandwidth at 64 tokens on an H200, bound by their MMA
// rate); wgmma streams the weight several times faster. The tensor core's in-block summation differs from mma.sync's, so the
// bits are not those of the small-M kernel (batch-invariant inference keeps that one).
//
// Tiles: (token tile, 128-row weight block, K split), split fastest; a persistent grid walks them. A tile covers
// K blocks [split * k_blocks_per_split, + k_blocks_per_split) and stores either the bf16 output (one split) or its
// fp32 partial sums, which the split-K reduce or the consuming kernel adds in split order (split_k_sum.cuh).
// Within a tile the two consumer warpgroups sum the K blocks that land in the even and in the odd pipeline stages
// (each promoted per block, in order), then add the two sums. Which blocks those are depends on the tiles the CTA
// ran before (their K block counts), so the summation order is fixed by the weight shape, the split count, the SM
// count and the token tile (32 or 64), never by the other tokens of a batch with the same token tile.
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/fp8_gemm/sm90/wgmma_swap_ab.cuh"
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda::sm90 {

// The consumer warpgroups take alternate pipeline stages (SwapAbSplit::kK): a decode tile's few tokens make each
// wgmma short, so the per-block wait, not the MMA rate, bounds a warpgroup.
template <int kTokens>
using DecodeWgmmaLayout = SwapAbLayout<kTokens, SwapAbSplit::kK, /*kTableEntries=*/0>;

namespace decode_wgmma_detail {

struct Tile {
  int token_tile, row_block, split;
};

__device__ __forceinline__ Tile locate_tile(int t, int row_blocks, int splits) {
  const int rest = t / splits;
  return {rest / row_blocks, rest % row_blocks, t % splits};
}

}  // namespace decode_wgmma_detail

// Launch: a persistent 1-D grid (at most one CTA per SM and at most one per tile), kWgmmaThreads threads,
// DecodeWgmmaLayout<kTokens>::kSmemBytes of dynamic shared memory, programmatic launch allowed (the weight's first K
// blocks are requested into L2 before the wait for the predecessor).
// Requires rows % 8 == 0, cols % 16 == 0, 16-byte aligned out; splits * k_blocks_per_split covers k_blocks with
// no empty split.
template <int kTokens>
__global__ void __launch_bounds__(kWgmmaThreads, 1)
fp8_gemm_decode_wgmma_kernel(const __grid_constant__ CUtensorMap w_map,  // [rows][cols] e4m3, box [128][128 B]
                             const __grid_constant__ CUtensorMap x_map,  // [tokens][cols] e4m3, box [kTokens][128 B]
                             const float* __restrict__ x_scales,         // [tokens, k_blocks] token-major
                             const float* __restrict__ w_scales,         // [ceil(rows / 128), k_blocks]
                             int tokens, int rows, int k_blocks, int k_blocks_per_split, int splits,
                             __nv_bfloat16* __restrict__ out,            // [tokens, rows] when splits == 1
                             float* __restrict__ partial) {              // [splits, tokens, rows] when splits > 1
  using Layout = DecodeWgmmaLayout<kTokens>;
  namespace hw = hopper;
  namespace detail = decode_wgmma_detail;
  extern __shared__ uint8_t decode_wgmma_smem_raw[];
  uint8_t* smem = decode_wgmma_smem_raw + ((1024 - (hw::shared_address(decode_wgmma_smem_raw) & 1023)) & 1023);
  SwapAbPipeline pipe{smem, reinterpret_cast<uint64_t*>(smem + Layout::kBarrierOffset),
                      reinterpret_cast<uint64_t*>(smem + Layout::kBarrierOffset) + Layout::kMaxStages};
  const int row_blocks = (rows + kWgmmaTileRows - 1) / kWgmmaTileRows;
  const int total_tiles = (tokens + kTokens - 1) / kTokens * row_blocks * splits;
  const int warpgroup = threadIdx.x / 128, lane = threadIdx.x % 32;
  const bool producer_lane = threadIdx.x == kWgmmaConsumerGroups * 128;

  if (threadIdx.x == 0) swap_ab_init_barriers<Layout>(pipe);
  if (producer_lane) {  // weights are read-only: ask L2 for the first tile's leading K blocks before the wait
    hw::tma_prefetch_descriptor(&w_map);
    hw::tma_prefetch_descriptor(&x_map);
    const detail::Tile tile = detail::locate_tile(blockIdx.x, row_blocks, splits);
    const int kb_begin = tile.split * k_blocks_per_split;
    const int kb_end = min(k_blocks, min(kb_begin + k_blocks_per_split, kb_begin + Layout::kStages));
    for (int kb = kb_begin; kb < kb_end; ++kb) hw::tma_prefetch_2d_l2(&w_map, kb * 128, tile.row_block * kWgmmaTileRows);
  }
  begin_dependent_kernel();
  __syncthreads();

  if (warpgroup == kWgmmaConsumerGroups) {  // producer
    hw::warpgroup_release_registers<kWgmmaProducerRegisters>();
    if (threadIdx.x % 128 >= 32) return;
    for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
      const detail::Tile tile = detail::locate_tile(t, row_blocks, splits);
      const int kb_begin = tile.split * k_blocks_per_split;
      const int x_row = tile.token_tile * kTokens;
      swap_ab_produce_tile<Layout, kTokens>(pipe, &w_map, &x_map, tile.row_block * kWgmmaTileRows, x_row,
                                            tokens - x_row, x_scales, k_blocks,
                                            w_scales + static_cast<int64_t>(tile.row_block) * k_blocks, kb_begin,
                                            min(k_blocks, kb_begin + k_blocks_per_split), lane);
    }
    return;
  }

  // Consumers: warpgroup g sums the tile's K blocks in stages s % 2 == g for all 128 rows and kTokens tokens;
  // warpgroup 0 adds warpgroup 1's sums to its own and stores.
  hw::warpgroup_claim_registers<kWgmmaConsumerRegisters>();
  const int thread = threadIdx.x % 128, warp = thread / 32;
  float* exchange = reinterpret_cast<float*>(smem + Layout::kExchangeOffset);  // [accumulator][128 threads]
  __nv_bfloat16* staged = reinterpret_cast<__nv_bfloat16*>(smem + Layout::kOutOffset);
  constexpr int kAccumulators = Layout::kGroupTokens / 2;  // per m64 block
  constexpr int kExchangeBarrier = 3, kExchangeFreeBarrier = 4;  // ids 1..2: the staging barriers
  for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
    const detail::Tile tile = detail::locate_tile(t, row_blocks, splits);
    const int kb_begin = tile.split * k_blocks_per_split;
    const int num_k_blocks = min(k_blocks, kb_begin + k_blocks_per_split) - kb_begin;
    SwapAbAccumulators<Layout> total;
    swap_ab_consume_tile<Layout>(pipe, Layout::kGroupTokens, 0, num_k_blocks, lane, total, warpgroup,
                                 kWgmmaConsumerGroups);
    // Each exchange barrier has one side that arrives and one that waits (a bar.sync from each warpgroup, at two
    // places in the code, is what compute-sanitizer's synccheck reports as divergent threads).
    if (warpgroup == 1) {
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int i = 0; i < kAccumulators; ++i) exchange[(h * kAccumulators + i) * 128 + thread] = total[h][i];
      hw::named_barrier_arrive(kExchangeBarrier, 256);    // the exchange is written
      hw::named_barrier_sync(kExchangeFreeBarrier, 256);  // warpgroup 0 has read it
      continue;
    }
    hw::named_barrier_sync(kExchangeBarrier, 256);
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < kAccumulators; ++i) total[h][i] += exchange[(h * kAccumulators + i) * 128 + thread];
    hw::named_barrier_arrive(kExchangeFreeBarrier, 256);

    const int token_base = tile.token_tile * kTokens;
    const int column = tile.row_block * kWgmmaTileRows;          // first weight row of the tile
    const int valid_rows = min(kWgmmaTileRows, rows - column);  // a multiple of 8
    if (splits == 1) {
      swap_ab_store_bf16<Layout>(total, staged, out, token_base, rows, column, tokens - token_base, valid_rows, 0,
                                 thread);
      continue;
    }
    float* split_partial = partial + static_cast<int64_t>(tile.split) * tokens * rows;  // [tokens, rows]
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int j = 0; j < kTokens / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = column + h * 64 + warp * 16 + lane / 4 + (e >= 2 ? 8 : 0);
          const int token = token_base + 8 * j + 2 * (lane % 4) + (e & 1);
          if (token < tokens && row < rows) {
            split_partial[static_cast<int64_t>(token) * rows + row] = total[h][4 * j + e];
          }
        }
  }
}

}  // namespace fathom::kernels::cuda::sm90
