#pragma once
// Grouped FP8 block-scaled GEMM for MoE prefill on Hopper's warpgroup MMA, fed by TMA (the swap-AB building blocks
// and the per-element arithmetic: wgmma_swap_ab.cuh). The same promotion contract as the other FP8 paths, but the
// tensor core's in-block summation differs from mma.sync's, so the bits are not those of the small-M / tiled
// kernels. A token's bits depend neither on the other tokens nor on the tile size or the MMA width covering it, so
// the batch-invariant mode runs this kernel at every batch size, decode included.
//
// Tiles: 128 weight rows x up to kTokens tokens of one expert (its rows shared evenly by its tiles:
// expert_tile_rows); the two consumer warpgroups take 64 rows each (SwapAbSplit::kRows); their MMAs cover only the
// tile's tokens that exist, rounded up to 32. A persistent grid walks the tiles of all experts in (expert, token
// tile, weight row block) order, so CTAs running together share the expert's token tile and weight in L2. The tile
// table (prefix sums of each expert's tile count) is built in shared memory from the device counts, so no host
// synchronisation is needed.
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/fp8_gemm/sm90/wgmma_swap_ab.cuh"

namespace fathom::kernels::cuda::sm90 {

constexpr int kWgmmaMaxExperts = 1024;  // tile table entries in shared memory

template <int kTokens>
using GroupedWgmmaLayout = SwapAbLayout<kTokens, SwapAbSplit::kRows, kWgmmaMaxExperts + 1>;

namespace wgmma_detail {

struct Tile {
  int expert, token_tile, row_block;
};

// Tile t of the table: the expert e with table[e] <= t < table[e + 1] (experts without rows own no tiles).
__device__ __forceinline__ Tile locate_tile(int t, const int32_t* table, int num_experts, int row_blocks) {
  int low = 0, high = num_experts - 1;  // invariant: table[low] <= t
  while (low < high) {
    const int mid = (low + high + 1) / 2;
    if (table[mid] <= t) low = mid;
    else high = mid - 1;
  }
  const int local = t - table[low];
  return {low, local / row_blocks, local % row_blocks};
}

// Token tile j of an expert with `count` rows: {first row within the expert, rows}. The expert's ceil(count / kTokens)
// tiles take ceil(count / tiles) rows each rounded up to 32 (the MMA step), the last one the rest, so they carry
// similar MMA work and stream the weight row block they share at a similar pace: 256 rows of 192-token tiles make
// two tiles of 128, not 192 + 64, whose second reader of each weight block then finds it still in L2.
template <int kTokens>
__device__ __forceinline__ int2 expert_tile_rows(int count, int token_tile) {
  const int tiles = (count + kTokens - 1) / kTokens;
  const int per_tile = ((count + tiles - 1) / tiles + 31) / 32 * 32;  // <= kTokens; (tiles - 1) * per_tile < count
  const int first = token_tile * per_tile;
  return {first, min(per_tile, count - first)};
}

}  // namespace wgmma_detail

// out[first_e + t, r] for every expert e with rows: see the header comment. Launch: a persistent 1-D grid (at most
// one CTA per SM), kWgmmaThreads threads, GroupedWgmmaLayout<kTokens>::kSmemBytes of dynamic shared
// memory.
// Requires rows % 8 == 0, cols % 16 == 0, num_experts <= kWgmmaMaxExperts, counts >= 0. A last row block of fewer
// than 128 rows multiplies whatever the weight box holds past them (the next expert's rows, or the tensor map's zero
// fill past the last) into accumulator rows that are never stored: a row's arithmetic is its own.
template <int kTokens>
__global__ void __launch_bounds__(kWgmmaThreads, 1)
fp8_gemm_grouped_wgmma_kernel(const __grid_constant__ CUtensorMap w_map,  // [E * rows][cols] e4m3, box [128][128 B]
                              const __grid_constant__ CUtensorMap x_map,  // [x_rows][cols] e4m3, box [kTokens][128 B]
                              const float* __restrict__ x_scales,         // [x_rows, k_blocks] token-major
                              const float* __restrict__ w_scales,         // [E, ceil(rows / 128), k_blocks]
                              const int32_t* __restrict__ expert_offsets, // [E + 1] first permuted row of each expert
                              const int32_t* __restrict__ expert_counts,  // [E] rows of each expert
                              int num_experts, int rows, int k_blocks,
                              __nv_bfloat16* __restrict__ out,            // [x_rows, rows]
                              int dense_rows) {  // offsets and counts null: one expert (E = 1) of dense_rows rows
  // Rows of expert e and its first row in x / out.
  auto count_of = [&](int e) { return expert_counts ? expert_counts[e] : dense_rows; };
  auto offset_of = [&](int e) { return expert_offsets ? expert_offsets[e] : 0; };
  using Layout = GroupedWgmmaLayout<kTokens>;
  namespace hw = hopper;
  extern __shared__ uint8_t wgmma_smem_raw[];
  uint8_t* smem = wgmma_smem_raw + ((1024 - (hw::shared_address(wgmma_smem_raw) & 1023)) & 1023);
  SwapAbPipeline pipe{smem, reinterpret_cast<uint64_t*>(smem + Layout::kBarrierOffset),
                      reinterpret_cast<uint64_t*>(smem + Layout::kBarrierOffset) + Layout::kMaxStages};
  int32_t* table = reinterpret_cast<int32_t*>(smem + Layout::kTableOffset);  // [E + 1] tiles before expert e
  const int row_blocks = (rows + kWgmmaTileRows - 1) / kWgmmaTileRows;
  const int lane = threadIdx.x % 32;

  if (threadIdx.x < 32) {  // tile table: an exclusive scan of ceil(count / kTokens) * row_blocks over experts
    int running = 0;
    for (int base = 0; base < num_experts; base += 32) {
      const int e = base + lane;
      const int tiles = e < num_experts ? (max(count_of(e), 0) + kTokens - 1) / kTokens * row_blocks : 0;
      int inclusive = tiles;
#pragma unroll
      for (int delta = 1; delta < 32; delta <<= 1) {
        const int value = __shfl_up_sync(0xffffffffu, inclusive, delta);
        if (lane >= delta) inclusive += value;
      }
      if (e < num_experts) table[e] = running + inclusive - tiles;
      running += __shfl_sync(0xffffffffu, inclusive, 31);
    }
    if (lane == 0) {
      table[num_experts] = running;
      swap_ab_init_barriers<Layout>(pipe);
    }
  }
  __syncthreads();
  const int total_tiles = table[num_experts];
  const int warpgroup = threadIdx.x / 128;

  if (warpgroup == kWgmmaConsumerGroups) {  // producer
    hw::warpgroup_release_registers<kWgmmaProducerRegisters>();
    if (threadIdx.x % 128 >= 32) return;
    if (lane == 0) {
      hw::tma_prefetch_descriptor(&w_map);
      hw::tma_prefetch_descriptor(&x_map);
    }
    for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
      const wgmma_detail::Tile tile = wgmma_detail::locate_tile(t, table, num_experts, row_blocks);
      const int2 tokens = wgmma_detail::expert_tile_rows<kTokens>(count_of(tile.expert), tile.token_tile);
      const float* w_scale_row = w_scales + (static_cast<int64_t>(tile.expert) * row_blocks + tile.row_block) * k_blocks;
      swap_ab_produce_tile<Layout, kTokens>(pipe, &w_map, &x_map, tile.expert * rows + tile.row_block * kWgmmaTileRows,
                                            offset_of(tile.expert) + tokens.x, tokens.y, x_scales, k_blocks,
                                            w_scale_row, 0, k_blocks, lane);
    }
    return;
  }

  // Consumers: warpgroup g owns the tile's tokens x weight rows [group_row, + 64).
  hw::warpgroup_claim_registers<kWgmmaConsumerRegisters>();
  const int thread = threadIdx.x % 128;
  const int group_row = warpgroup * 64;
  __nv_bfloat16* staged = reinterpret_cast<__nv_bfloat16*>(smem + Layout::kOutOffset + warpgroup * Layout::kOutGroupBytes);
  for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
    const wgmma_detail::Tile tile = wgmma_detail::locate_tile(t, table, num_experts, row_blocks);
    const int2 tokens = wgmma_detail::expert_tile_rows<kTokens>(count_of(tile.expert), tile.token_tile);
    const int valid_tokens = tokens.y;  // >= 1
    SwapAbAccumulators<Layout> total;
    swap_ab_consume_tile<Layout>(pipe, valid_tokens, group_row, k_blocks, lane, total);
    swap_ab_store_bf16<Layout>(total, staged, out, offset_of(tile.expert) + tokens.x, rows,
                               tile.row_block * kWgmmaTileRows + group_row, valid_tokens,
                               max(0, min(Layout::kRowBlocks * 64, rows - tile.row_block * kWgmmaTileRows - group_row)),
                               warpgroup, thread);
  }
}

}  // namespace fathom::kernels::cuda::sm90
