#pragma once
// Grouped FP8 block-scaled GEMM for MoE prefill on Hopper's warpgroup MMA (wgmma e4m3), fed by TMA.
//
// Per output element (token t of expert e, weight row r): acc = 0; for each 128-wide K block kb in order:
//   block = Σ over the block of w[e][r][k] · x[t][k] (four chained k32 wgmmas, tensor-core accumulation);
//   acc += block * (w_scale[e][r/128][kb] * x_scale[t][kb]); out = bf16(acc).
// The same promotion contract as the other FP8 paths (DeepSeek's per-128 promotion), but the tensor core's
// in-block summation differs from mma.sync's, so the bits are not those of the small-M / tiled kernels: the
// batch-invariant mode keeps the tiled kernel. Within this kernel a token's result depends only on its own row
// (tokens are wgmma's N dimension: columns never mix), so it does not depend on the other tokens of its tile.
//
// Tiles: 128 weight rows (one scale block; wgmma's M, 64 per instruction) x kTokens tokens of one expert (wgmma's
// N); the two consumer warpgroups split the rows (64-token tiles) or the tokens (128-token tiles, see
// GroupedWgmmaLayout). A persistent grid walks the tiles of all experts in (expert, token tile, weight row block)
// order, so CTAs running together share the expert's token tile and weight in L2. The tile table (prefix sums of each
// expert's tile count) is built in shared memory from the device counts, so no host synchronisation is needed.
// Roles: warpgroups 0..1 consume (wgmma + promotion + epilogue), warpgroup 2's first warp produces: per K block it
// stores the tile's token and weight scales in the stage and issues two TMA boxes (weight tile, token tile).
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/sm90/tma_pipeline.cuh"
#include "kernels/cuda/sm90/wgmma.cuh"

namespace fathom::kernels::cuda::sm90 {

constexpr int kWgmmaTileRows = 128;       // weight rows per tile: one 128-row scale block
constexpr int kWgmmaConsumerGroups = 2;   // split the weight rows or the tokens of a tile (GroupedWgmmaLayout)
constexpr int kWgmmaThreads = 128 * (kWgmmaConsumerGroups + 1);
constexpr int kWgmmaMaxExperts = 1024;    // tile table entries in shared memory
constexpr int kWgmmaSmemLimit = 227 * 1024;
constexpr int kWgmmaProducerRegisters = 40;
constexpr int kWgmmaConsumerRegisters = 232;

// kSplitTokens: the two consumer warpgroups take halves of the token tile (each all 128 weight rows as two m64
// blocks), so a warpgroup whose 64 tokens are all past the expert's rows skips its MMAs; otherwise each takes 64 of
// the weight rows for all kTokens tokens.
template <int kTokens, bool kSplitTokens>
struct GroupedWgmmaLayout {
  static_assert(kTokens == 64 || kTokens == 128, "token tile of 64 or 128");
  static constexpr int kGroupTokens = kSplitTokens ? kTokens / 2 : kTokens;  // wgmma N of one warpgroup
  static constexpr int kRowBlocks = kSplitTokens ? 2 : 1;                     // m64 blocks of one warpgroup
  static_assert(kGroupTokens == 64 || kGroupTokens == 128, "e4m3 wgmma shapes provided: n64, n128");
  // One stage: [128 weight rows][128 B] and [kTokens][128 B] swizzled tiles, then kTokens token scales and the
  // tile's weight scale (fp32); stages are 1024-byte aligned (the swizzle atom).
  static constexpr int kWTileBytes = kWgmmaTileRows * 128;
  static constexpr int kXTileBytes = kTokens * 128;
  static constexpr int kXScaleOffset = kWTileBytes + kXTileBytes;
  static constexpr int kWScaleOffset = kXScaleOffset + kTokens * 4;
  static constexpr int kStageBytes = (kWScaleOffset + 16 + 1023) / 1024 * 1024;
  // Epilogue staging per consumer warpgroup: [kGroupTokens][its rows + 8] bf16 (16-byte aligned rows).
  static constexpr int kOutRowStride = kRowBlocks * 64 + 8;
  static constexpr int kOutGroupBytes = kGroupTokens * kOutRowStride * 2;
  static constexpr int kMaxStages = 8;
  static constexpr int kAlignSlack = 1024;  // the dynamic shared memory base is aligned up to 1024 in the kernel
  static constexpr int kFixedBytes = kWgmmaConsumerGroups * kOutGroupBytes + 2 * kMaxStages * 8 +
                                     (kWgmmaMaxExperts + 1) * 4 + kAlignSlack;
  static constexpr int kStages = (kWgmmaSmemLimit - kFixedBytes) / kStageBytes < kMaxStages
                                     ? (kWgmmaSmemLimit - kFixedBytes) / kStageBytes
                                     : kMaxStages;
  static_assert(kStages >= 3, "too few pipeline stages");
  static constexpr int kOutOffset = kStages * kStageBytes;
  static constexpr int kBarrierOffset = kOutOffset + kWgmmaConsumerGroups * kOutGroupBytes;
  static constexpr int kTableOffset = kBarrierOffset + 2 * kMaxStages * 8;
  static constexpr int kSmemBytes = kTableOffset + (kWgmmaMaxExperts + 1) * 4 + kAlignSlack;
  static_assert(kSmemBytes <= kWgmmaSmemLimit, "shared memory budget");
};

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

}  // namespace wgmma_detail

// out[first_e + t, r] for every expert e with rows: see the header comment. Launch: a persistent 1-D grid (at most
// one CTA per SM), kWgmmaThreads threads, GroupedWgmmaLayout<kTokens, kSplitTokens>::kSmemBytes of dynamic shared
// memory.
// Requires rows % 128 == 0, cols % 16 == 0, num_experts <= kWgmmaMaxExperts, counts >= 0.
template <int kTokens, bool kSplitTokens>
__global__ void __launch_bounds__(kWgmmaThreads, 1)
fp8_gemm_grouped_wgmma_kernel(const __grid_constant__ CUtensorMap w_map,  // [E * rows][cols] e4m3, box [128][128 B]
                              const __grid_constant__ CUtensorMap x_map,  // [x_rows][cols] e4m3, box [kTokens][128 B]
                              const float* __restrict__ x_scales,         // [x_rows, k_blocks] token-major
                              const float* __restrict__ w_scales,         // [E, rows / 128, k_blocks]
                              const int32_t* __restrict__ expert_offsets, // [E + 1] first permuted row of each expert
                              const int32_t* __restrict__ expert_counts,  // [E] rows of each expert
                              int num_experts, int rows, int k_blocks,
                              __nv_bfloat16* __restrict__ out) {          // [x_rows, rows]
  using Layout = GroupedWgmmaLayout<kTokens, kSplitTokens>;
  namespace hw = hopper;
  extern __shared__ uint8_t wgmma_smem_raw[];
  uint8_t* smem = wgmma_smem_raw + ((1024 - (hw::shared_address(wgmma_smem_raw) & 1023)) & 1023);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + Layout::kBarrierOffset);  // [kStages]
  uint64_t* empty = full + Layout::kMaxStages;                                   // [kStages]
  int32_t* table = reinterpret_cast<int32_t*>(smem + Layout::kTableOffset);      // [E + 1] tiles before expert e
  const int row_blocks = rows / kWgmmaTileRows;
  const int lane = threadIdx.x % 32;

  if (threadIdx.x < 32) {  // tile table: an exclusive scan of ceil(count / kTokens) * row_blocks over experts
    int running = 0;
    for (int base = 0; base < num_experts; base += 32) {
      const int e = base + lane;
      const int tiles = e < num_experts ? (max(expert_counts[e], 0) + kTokens - 1) / kTokens * row_blocks : 0;
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
      for (int s = 0; s < Layout::kStages; ++s) {
        hw::mbarrier_init(&full[s], 1);                             // the producer's arrive (+ TMA bytes)
        hw::mbarrier_init(&empty[s], kWgmmaConsumerGroups * 4);     // one arrive per consumer warp
      }
      hw::fence_barrier_init();
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
    int stage = 0;
    uint32_t phase = 0;
    for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
      const wgmma_detail::Tile tile = wgmma_detail::locate_tile(t, table, num_experts, row_blocks);
      const int count = expert_counts[tile.expert];
      const int token_base = tile.token_tile * kTokens;                    // within the expert's rows
      const int x_row = expert_offsets[tile.expert] + token_base;          // first permuted row of the tile
      const int w_row = tile.expert * rows + tile.row_block * kWgmmaTileRows;
      const float* w_scale_row = w_scales + (static_cast<int64_t>(tile.expert) * row_blocks + tile.row_block) * k_blocks;
      // Each lane holds the scales of kTokens / 32 tokens (and the weight scale) one K block ahead of the stage it
      // fills, so their global-load latency overlaps the wait for a free stage instead of delaying the TMA issue.
      constexpr int kScalesPerLane = kTokens / 32;
      auto load_scales = [&](int kb, float (&token_scales)[kScalesPerLane], float& weight_scale) {
#pragma unroll
        for (int i = 0; i < kScalesPerLane; ++i) {  // tokens past the expert's rows: never stored, scale 0
          const int token = lane + 32 * i;
          token_scales[i] =
              token_base + token < count ? x_scales[static_cast<int64_t>(x_row + token) * k_blocks + kb] : 0.0f;
        }
        weight_scale = w_scale_row[kb];
      };
      float held[kScalesPerLane], held_weight;
      load_scales(0, held, held_weight);
      for (int kb = 0; kb < k_blocks; ++kb) {
        float next[kScalesPerLane], next_weight = 0.0f;
#pragma unroll
        for (int i = 0; i < kScalesPerLane; ++i) next[i] = 0.0f;
        if (kb + 1 < k_blocks) load_scales(kb + 1, next, next_weight);
        hw::mbarrier_wait(&empty[stage], phase ^ 1);
        uint8_t* stage_base = smem + stage * Layout::kStageBytes;
        float* x_scale_tile = reinterpret_cast<float*>(stage_base + Layout::kXScaleOffset);  // [kTokens]
#pragma unroll
        for (int i = 0; i < kScalesPerLane; ++i) x_scale_tile[lane + 32 * i] = held[i];
        if (lane == 0) *reinterpret_cast<float*>(stage_base + Layout::kWScaleOffset) = held_weight;
        __syncwarp();  // every lane's scale stores are ordered before lane 0's release (the arrive)
        if (lane == 0) {
          hw::mbarrier_arrive_expect_tx(&full[stage], Layout::kWTileBytes + Layout::kXTileBytes);
          hw::tma_load_2d(stage_base, &w_map, kb * 128, w_row, &full[stage]);
          hw::tma_load_2d(stage_base + Layout::kWTileBytes, &x_map, kb * 128, x_row, &full[stage]);
        }
        if (++stage == Layout::kStages) {
          stage = 0;
          phase ^= 1;
        }
#pragma unroll
        for (int i = 0; i < kScalesPerLane; ++i) held[i] = next[i];
        held_weight = next_weight;
      }
    }
    return;
  }

  // Consumers: warpgroup g owns tokens [group_token, + kGroupTokens) x weight rows [group_row, + 64 kRowBlocks).
  hw::warpgroup_claim_registers<kWgmmaConsumerRegisters>();
  constexpr int kGroupTokens = Layout::kGroupTokens, kRowBlocks = Layout::kRowBlocks;
  const int thread = threadIdx.x % 128, warp = thread / 32;
  const int group_token = kSplitTokens ? warpgroup * kGroupTokens : 0;
  const int group_row = kSplitTokens ? 0 : warpgroup * 64;
  __nv_bfloat16* staged = reinterpret_cast<__nv_bfloat16*>(smem + Layout::kOutOffset + warpgroup * Layout::kOutGroupBytes);
  int stage = 0;
  uint32_t phase = 0;
  for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
    const wgmma_detail::Tile tile = wgmma_detail::locate_tile(t, table, num_experts, row_blocks);
    const int count = expert_counts[tile.expert];
    const int token_base = tile.token_tile * kTokens;
    const bool active = token_base + group_token < count;  // else every column of this group is padding
    float total[kRowBlocks][kGroupTokens / 2];  // [m64 block][n8 tile j][fragment element e] = [h][4j + e]
    float block[kRowBlocks][kGroupTokens / 2];
#pragma unroll
    for (int h = 0; h < kRowBlocks; ++h)
#pragma unroll
      for (int i = 0; i < kGroupTokens / 2; ++i) total[h][i] = block[h][i] = 0.0f;
    for (int kb = 0; kb < k_blocks; ++kb) {
      hw::mbarrier_wait(&full[stage], phase);
      const uint8_t* stage_base = smem + stage * Layout::kStageBytes;
      if (active) {
        const uint32_t w_tile = hw::shared_address(stage_base) + group_row * 128;
        const uint32_t x_tile = hw::shared_address(stage_base + Layout::kWTileBytes) + group_token * 128;
#pragma unroll
        for (int h = 0; h < kRowBlocks; ++h) hw::wgmma_fence_operands(block[h]);
        hw::wgmma_fence();
#pragma unroll
        for (int k = 0; k < 4; ++k) {  // 32 bytes of K per wgmma inside the 128-byte swizzled rows
#pragma unroll
          for (int h = 0; h < kRowBlocks; ++h) {
            hw::wgmma_m64k32_e4m3<kGroupTokens>(block[h], hw::wgmma_desc_kmajor_sw128(w_tile + h * 64 * 128 + 32 * k),
                                                hw::wgmma_desc_kmajor_sw128(x_tile + 32 * k), k > 0);
          }
        }
        hw::wgmma_commit();
        hw::wgmma_wait_all();
#pragma unroll
        for (int h = 0; h < kRowBlocks; ++h) hw::wgmma_fence_operands(block[h]);
        const float w_scale = *reinterpret_cast<const float*>(stage_base + Layout::kWScaleOffset);
        const float* x_scale_tile = reinterpret_cast<const float*>(stage_base + Layout::kXScaleOffset) + group_token;
#pragma unroll
        for (int j = 0; j < kGroupTokens / 8; ++j) {  // columns 8j + 2 (lane % 4) + {0, 1} of the group
          const float2 x_scale = *reinterpret_cast<const float2*>(x_scale_tile + 8 * j + 2 * (lane % 4));
          const float scale0 = w_scale * x_scale.x, scale1 = w_scale * x_scale.y;
#pragma unroll
          for (int h = 0; h < kRowBlocks; ++h) {
            total[h][4 * j + 0] += block[h][4 * j + 0] * scale0;
            total[h][4 * j + 1] += block[h][4 * j + 1] * scale1;
            total[h][4 * j + 2] += block[h][4 * j + 2] * scale0;
            total[h][4 * j + 3] += block[h][4 * j + 3] * scale1;
          }
        }
      }
      __syncwarp();  // the warp's shared reads of this stage are done
      if (lane == 0) hw::mbarrier_arrive(&empty[stage]);
      if (++stage == Layout::kStages) {
        stage = 0;
        phase ^= 1;
      }
    }
    if (!active) continue;  // no token of this group is stored (the group's barriers are its own)

    // Epilogue: stage the group's [rows x tokens] as [token][row] bf16, then 16-byte row segments per token.
#pragma unroll
    for (int h = 0; h < kRowBlocks; ++h)
#pragma unroll
      for (int j = 0; j < kGroupTokens / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = h * 64 + warp * 16 + lane / 4 + (e >= 2 ? 8 : 0);
          const int token = 8 * j + 2 * (lane % 4) + (e & 1);
          staged[token * Layout::kOutRowStride + row] = __float2bfloat16_rn(total[h][4 * j + e]);
        }
    hw::named_barrier_sync(1 + warpgroup, 128);
    const int64_t first_row = expert_offsets[tile.expert] + token_base + group_token;
    const int column = tile.row_block * kWgmmaTileRows + group_row;
    constexpr int kChunksPerToken = kRowBlocks * 8;  // 8 bf16 per chunk
    for (int c = thread; c < kGroupTokens * kChunksPerToken; c += 128) {
      const int token = c / kChunksPerToken, chunk = c % kChunksPerToken;
      if (token_base + group_token + token >= count) continue;
      *reinterpret_cast<uint4*>(out + (first_row + token) * rows + column + chunk * 8) =
          *reinterpret_cast<const uint4*>(staged + token * Layout::kOutRowStride + chunk * 8);
    }
    hw::named_barrier_sync(1 + warpgroup, 128);  // the staging is read before the next tile overwrites it
  }
}

}  // namespace fathom::kernels::cuda::sm90
