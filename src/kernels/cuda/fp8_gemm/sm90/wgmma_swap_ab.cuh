#pragma once
// Building blocks of the "swap-AB" FP8 block-scaled GEMMs on Hopper's warpgroup MMA (wgmma e4m3) fed by TMA:
// weight rows are wgmma's M (128 per tile: one 128-row scale block), tokens its N, so a token's column never mixes
// with another token's and its result does not depend on the other tokens of its tile. Shared by the grouped MoE
// prefill kernel (fp8_gemm_grouped_wgmma.cuh) and the dense decode kernel (fp8_gemm_decode_wgmma.cuh).
//
// Per output element (token t, weight row r), over the K blocks [kb_begin, kb_end) of a tile: acc = 0; per block kb
// in order: block = Σ over the block of w[r][k] · x[t][k] (four chained k32 wgmmas, tensor-core accumulation);
// acc = fma(block, w_scale[r / 128][kb] * x_scale[t][kb], acc). DeepSeek's per-128 promotion.
//
// Roles: warpgroups 0..1 consume (wgmma + promotion + epilogue); warpgroup 2's first warp produces: per K block it
// stores the tile's token and weight scales in a stage and issues two TMA boxes (weight tile, token tile).
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/sm90/tma_pipeline.cuh"
#include "kernels/cuda/sm90/wgmma.cuh"

namespace fathom::kernels::cuda::sm90 {

constexpr int kWgmmaTileRows = 128;       // weight rows per tile: one 128-row scale block
constexpr int kWgmmaConsumerGroups = 2;   // split the weight rows or the tokens of a tile (SwapAbLayout)
constexpr int kWgmmaThreads = 128 * (kWgmmaConsumerGroups + 1);
constexpr int kWgmmaSmemLimit = 227 * 1024;
// setmaxnreg moves registers inside the CTA's launch allocation (168 per thread at 384 threads): the producer
// warpgroup must give back what the consumers claim. 72 / 216: no spills in any swap-AB kernel (ptxas -v; with
// 40 / 232 the producer of the 128- and 192-token tiles spilled).
constexpr int kWgmmaLaunchRegisters = 65536 / kWgmmaThreads / 8 * 8;
constexpr int kWgmmaProducerRegisters = 72;
constexpr int kWgmmaConsumerRegisters = 216;
static_assert((kWgmmaLaunchRegisters - kWgmmaProducerRegisters) >=
                  (kWgmmaConsumerRegisters - kWgmmaLaunchRegisters) * kWgmmaConsumerGroups,
              "the consumers claim more registers than the producer releases");

// How the two consumer warpgroups share a tile: kRows: 64 weight rows each, all tokens (one m64nN wgmma per 32 bytes
// of K: the token tile is read from shared memory once per warpgroup, where splitting the tokens read it twice, once
// per m64 block; H100: the grouped prefill GEMM 1-3% faster at 4096-8192 tokens); kK: alternate pipeline stages (an
// even number of them), all rows and tokens: warpgroup g reads every round of the stages s with s % 2 == g, so each
// stage keeps one reader and its parity waits stay in step; warpgroup 1's sums join warpgroup 0's at the end of the
// tile through shared memory (twice the MMAs per wait, two K blocks in flight).
enum class SwapAbSplit { kRows, kK };

// Shared memory of one CTA: kStages pipeline stages, the epilogue staging of the storing warpgroups, the kK exchange,
// the stage barriers and kTableEntries int32 of scheduling table.
template <int kTokens, SwapAbSplit kSplit, int kTableEntries>
struct SwapAbLayout {
  static_assert(kTokens == 32 || kTokens == 64 || kTokens == 128 || kTokens == 192, "token tile of 32, 64, 128 or 192");
  static constexpr int kGroupTokens = kTokens;                                 // wgmma N: a group covers every token
  static constexpr int kRowBlocks = kSplit == SwapAbSplit::kRows ? 1 : 2;     // its m64 blocks
  static_assert(kGroupTokens % 32 == 0 && kGroupTokens <= 192,
                "e4m3 wgmma shapes provided: n32 to n192 in steps of 32");
  static constexpr int kGroupsPerStage = kSplit == SwapAbSplit::kK ? 1 : kWgmmaConsumerGroups;  // readers of a stage
  static constexpr int kStoringGroups = kSplit == SwapAbSplit::kK ? 1 : kWgmmaConsumerGroups;
  // One stage: [128 weight rows][128 B] and [kTokens][128 B] swizzled tiles, then kTokens token scales and the
  // tile's weight scale (fp32); stages are 1024-byte aligned (the swizzle atom).
  static constexpr int kWTileBytes = kWgmmaTileRows * 128;
  static constexpr int kXTileBytes = kTokens * 128;
  static constexpr int kXScaleOffset = kWTileBytes + kXTileBytes;
  static constexpr int kWScaleOffset = kXScaleOffset + kTokens * 4;
  static constexpr int kStageBytes = (kWScaleOffset + 16 + 1023) / 1024 * 1024;
  // Epilogue staging per storing warpgroup: [kGroupTokens][its rows + 8] bf16 (16-byte aligned rows).
  static constexpr int kOutRowStride = kRowBlocks * 64 + 8;
  static constexpr int kOutGroupBytes = kGroupTokens * kOutRowStride * 2;
  // kK: warpgroup 1's accumulators, [accumulator][128 threads] fp32.
  static constexpr int kExchangeBytes = kSplit == SwapAbSplit::kK ? kRowBlocks * (kGroupTokens / 2) * 128 * 4 : 0;
  static constexpr int kMaxStages = 8;
  static constexpr int kAlignSlack = 1024;  // the dynamic shared memory base is aligned up to 1024 in the kernel
  static constexpr int kFixedBytes = kStoringGroups * kOutGroupBytes + kExchangeBytes + 2 * kMaxStages * 8 +
                                     kTableEntries * 4 + kAlignSlack;
  static constexpr int kStagesThatFit = (kWgmmaSmemLimit - kFixedBytes) / kStageBytes < kMaxStages
                                            ? (kWgmmaSmemLimit - kFixedBytes) / kStageBytes
                                            : kMaxStages;
  static constexpr int kStages = kSplit == SwapAbSplit::kK ? kStagesThatFit / 2 * 2 : kStagesThatFit;
  static_assert(kStages >= 3, "too few pipeline stages");
  static constexpr int kOutOffset = kStages * kStageBytes;
  static constexpr int kExchangeOffset = kOutOffset + kStoringGroups * kOutGroupBytes;
  static constexpr int kBarrierOffset = kExchangeOffset + kExchangeBytes;
  static constexpr int kTableOffset = kBarrierOffset + 2 * kMaxStages * 8;
  static constexpr int kSmemBytes = kTableOffset + kTableEntries * 4 + kAlignSlack;
  static_assert(kSmemBytes <= kWgmmaSmemLimit, "shared memory budget");
};

// The pipeline state both roles walk in lockstep: the stage to use next and the parity of its current phase.
struct SwapAbPipeline {
  uint8_t* smem;     // 1024-aligned base of the stages
  uint64_t* full;    // [kStages] the producer's arrive + TMA bytes
  uint64_t* empty;   // [kStages] one arrive per warp of the warpgroups that read the stage
  int stage = 0;
  uint32_t phase = 0;

  template <class Layout>
  __device__ __forceinline__ void advance() {
    if (++stage == Layout::kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
};

// Thread 0 initialises the stage barriers (the caller syncs the CTA afterwards).
template <class Layout>
__device__ __forceinline__ void swap_ab_init_barriers(const SwapAbPipeline& pipe) {
  for (int s = 0; s < Layout::kStages; ++s) {
    hopper::mbarrier_init(&pipe.full[s], 1);
    hopper::mbarrier_init(&pipe.empty[s], Layout::kGroupsPerStage * 4);
  }
  hopper::fence_barrier_init();
}

// Producer warp: fills one stage per K block of [kb_begin, kb_end) for the tile whose weight rows start at w_row
// (tensor-map row) and whose tokens are x rows [x_row, x_row + kTokens), of which the first valid_tokens exist
// (the rest get scale 0; their TMA rows are other tokens' or zero fill, never stored).
template <class Layout, int kTokens>
__device__ __forceinline__ void swap_ab_produce_tile(SwapAbPipeline& pipe, const CUtensorMap* w_map,
                                                     const CUtensorMap* x_map, int w_row, int x_row, int valid_tokens,
                                                     const float* __restrict__ x_scales,     // [x rows, k_blocks]
                                                     int k_blocks,
                                                     const float* __restrict__ w_scale_row,  // [k_blocks] of the tile
                                                     int kb_begin, int kb_end, int lane) {
  // Each lane holds the scales of kTokens / 32 tokens (and the weight scale) one K block ahead of the stage it
  // fills, so their global-load latency overlaps the wait for a free stage instead of delaying the TMA issue.
  constexpr int kScalesPerLane = kTokens / 32;
  auto load_scales = [&](int kb, float (&token_scales)[kScalesPerLane], float& weight_scale) {
#pragma unroll
    for (int i = 0; i < kScalesPerLane; ++i) {
      const int token = lane + 32 * i;
      token_scales[i] = token < valid_tokens ? x_scales[static_cast<int64_t>(x_row + token) * k_blocks + kb] : 0.0f;
    }
    weight_scale = w_scale_row[kb];
  };
  float held[kScalesPerLane], held_weight;
  load_scales(kb_begin, held, held_weight);
  for (int kb = kb_begin; kb < kb_end; ++kb) {
    float next[kScalesPerLane], next_weight = 0.0f;
#pragma unroll
    for (int i = 0; i < kScalesPerLane; ++i) next[i] = 0.0f;
    if (kb + 1 < kb_end) load_scales(kb + 1, next, next_weight);
    hopper::mbarrier_wait(&pipe.empty[pipe.stage], pipe.phase ^ 1);
    uint8_t* stage_base = pipe.smem + pipe.stage * Layout::kStageBytes;
    float* x_scale_tile = reinterpret_cast<float*>(stage_base + Layout::kXScaleOffset);  // [kTokens]
#pragma unroll
    for (int i = 0; i < kScalesPerLane; ++i) x_scale_tile[lane + 32 * i] = held[i];
    if (lane == 0) *reinterpret_cast<float*>(stage_base + Layout::kWScaleOffset) = held_weight;
    __syncwarp();  // every lane's scale stores are ordered before lane 0's release (the arrive)
    if (lane == 0) {
      hopper::mbarrier_arrive_expect_tx(&pipe.full[pipe.stage], Layout::kWTileBytes + Layout::kXTileBytes);
      hopper::tma_load_2d(stage_base, w_map, kb * 128, w_row, &pipe.full[pipe.stage]);
      hopper::tma_load_2d(stage_base + Layout::kWTileBytes, x_map, kb * 128, x_row, &pipe.full[pipe.stage]);
    }
    pipe.advance<Layout>();
#pragma unroll
    for (int i = 0; i < kScalesPerLane; ++i) held[i] = next[i];
    held_weight = next_weight;
  }
}

// Accumulators of one consumer warpgroup: [m64 block h][n8 tile j][fragment element e] = [h][4j + e]; element e of
// n-tile j holds weight row h * 64 + warp * 16 + lane / 4 + 8 (e >= 2), token 8j + 2 (lane % 4) + (e & 1).
template <class Layout>
using SwapAbAccumulators = float[Layout::kRowBlocks][Layout::kGroupTokens / 2];

// swap_ab_consume_tile for MMAs over the group's first kN tokens (kN <= kGroupTokens, a provided wgmma N). Each
// instantiation is one straight loop, so ptxas keeps each K block's wgmmas in flight together (a runtime choice of
// N inside the loop made it wait after every wgmma).
template <class Layout, int kN>
__device__ __forceinline__ void swap_ab_consume_blocks(SwapAbPipeline& pipe, bool active, int group_row,
                                                       int num_k_blocks, int lane,
                                                       SwapAbAccumulators<Layout>& total, int stage_first,
                                                       int stage_stride) {
  namespace hw = hopper;
  constexpr int kGroupTokens = Layout::kGroupTokens, kRowBlocks = Layout::kRowBlocks;
  static_assert(kN % 32 == 0 && kN <= kGroupTokens);
  float block[kRowBlocks][kN / 2];
#pragma unroll
  for (int h = 0; h < kRowBlocks; ++h)
#pragma unroll
    for (int i = 0; i < kGroupTokens / 2; ++i) {
      total[h][i] = 0.0f;
      if (i < kN / 2) block[h][i] = 0.0f;
    }
  for (int kb = 0; kb < num_k_blocks; ++kb) {
    if (stage_stride > 1 && pipe.stage % stage_stride != stage_first) {
      pipe.advance<Layout>();
      continue;
    }
    hw::mbarrier_wait(&pipe.full[pipe.stage], pipe.phase);
    const uint8_t* stage_base = pipe.smem + pipe.stage * Layout::kStageBytes;
    if (active) {
      // One descriptor per operand and stage; the wgmmas' offsets are compile-time adds (wgmma_desc_advance).
      const uint64_t w_desc = hw::wgmma_desc_kmajor_sw128(hw::shared_address(stage_base) + group_row * 128);
      const uint64_t x_desc = hw::wgmma_desc_kmajor_sw128(hw::shared_address(stage_base + Layout::kWTileBytes));
#pragma unroll
      for (int h = 0; h < kRowBlocks; ++h) hw::wgmma_fence_operands(block[h]);
      hw::wgmma_fence();
#pragma unroll
      for (int k = 0; k < 4; ++k) {  // 32 bytes of K per wgmma inside the 128-byte swizzled rows
#pragma unroll
        for (int h = 0; h < kRowBlocks; ++h) {
          hw::wgmma_m64k32_e4m3<kN>(block[h], hw::wgmma_desc_advance(w_desc, h * 64 * 128 + 32 * k),
                                    hw::wgmma_desc_advance(x_desc, 32 * k), k > 0);
        }
      }
      hw::wgmma_commit();
      hw::wgmma_wait_all();
#pragma unroll
      for (int h = 0; h < kRowBlocks; ++h) hw::wgmma_fence_operands(block[h]);
      const float w_scale = *reinterpret_cast<const float*>(stage_base + Layout::kWScaleOffset);
      const float* x_scale_tile = reinterpret_cast<const float*>(stage_base + Layout::kXScaleOffset);
#pragma unroll
      for (int j = 0; j < kN / 8; ++j) {  // columns 8j + 2 (lane % 4) + {0, 1} of the group
        const float2 x_scale = *reinterpret_cast<const float2*>(x_scale_tile + 8 * j + 2 * (lane % 4));
        const float scale0 = w_scale * x_scale.x, scale1 = w_scale * x_scale.y;
#pragma unroll
        for (int h = 0; h < kRowBlocks; ++h) {  // one explicit fma each: the same rounding in every instantiation
          total[h][4 * j + 0] = __fmaf_rn(block[h][4 * j + 0], scale0, total[h][4 * j + 0]);
          total[h][4 * j + 1] = __fmaf_rn(block[h][4 * j + 1], scale1, total[h][4 * j + 1]);
          total[h][4 * j + 2] = __fmaf_rn(block[h][4 * j + 2], scale0, total[h][4 * j + 2]);
          total[h][4 * j + 3] = __fmaf_rn(block[h][4 * j + 3], scale1, total[h][4 * j + 3]);
        }
      }
    }
    __syncwarp();  // the warp's shared reads of this stage are done
    if (lane == 0) hw::mbarrier_arrive(&pipe.empty[pipe.stage]);
    pipe.advance<Layout>();
  }
}

// The smallest provided wgmma N (a multiple of 32, at least kN) that covers used_chunks 32-token chunks: one
// instantiation of swap_ab_consume_blocks per N, chosen once per tile.
template <class Layout, int kN>
__device__ __forceinline__ void swap_ab_consume_chunks(SwapAbPipeline& pipe, int used_chunks, int group_row,
                                                       int num_k_blocks, int lane,
                                                       SwapAbAccumulators<Layout>& total, int stage_first,
                                                       int stage_stride) {
  if constexpr (kN < Layout::kGroupTokens) {
    if (used_chunks > kN / 32) {
      swap_ab_consume_chunks<Layout, kN + 32>(pipe, used_chunks, group_row, num_k_blocks, lane, total, stage_first,
                                              stage_stride);
      return;
    }
  }
  swap_ab_consume_blocks<Layout, kN>(pipe, true, group_row, num_k_blocks, lane, total, stage_first, stage_stride);
}

// Consumer warpgroup: sums the tile's num_k_blocks K blocks that land in its stages (s % stage_stride ==
// stage_first; all of them with the default stride 1) into `total` (zeroed first), stepping over the others' stages
// without waiting. Only the group's first used_tokens tokens get MMAs and promotions, rounded up to the next
// multiple of 32 (every wgmma N from 32 to kGroupTokens is provided): a token column's arithmetic is the same
// whatever N covers it, and the columns past it stay 0. A group with used_tokens <= 0 (all padding) skips the MMAs
// but still releases its stages.
template <class Layout>
__device__ __forceinline__ void swap_ab_consume_tile(SwapAbPipeline& pipe, int used_tokens, int group_row,
                                                     int num_k_blocks, int lane,
                                                     SwapAbAccumulators<Layout>& total, int stage_first = 0,
                                                     int stage_stride = 1) {
  constexpr int kGroupTokens = Layout::kGroupTokens;
  if (used_tokens <= 0) {
    swap_ab_consume_blocks<Layout, kGroupTokens>(pipe, false, group_row, num_k_blocks, lane, total, stage_first,
                                                 stage_stride);
    return;
  }
  swap_ab_consume_chunks<Layout, 32>(pipe, (used_tokens + 31) / 32, group_row, num_k_blocks, lane, total,
                                     stage_first, stage_stride);
}

// Consumer warpgroup epilogue: out[first_row + token][column + row] = bf16(total) for the group's first
// valid_tokens tokens and the rows below valid_rows (multiples of 8), staged as [token][row] in shared memory so
// each token's rows leave as 16-byte segments. `out` rows are row_stride elements apart (16-byte aligned).
template <class Layout>
__device__ __forceinline__ void swap_ab_store_bf16(const SwapAbAccumulators<Layout>& total, __nv_bfloat16* staged,
                                                   __nv_bfloat16* __restrict__ out, int64_t first_row,
                                                   int64_t row_stride, int64_t column, int valid_tokens, int valid_rows,
                                                   int warpgroup, int thread) {
  constexpr int kGroupTokens = Layout::kGroupTokens, kRowBlocks = Layout::kRowBlocks;
  const int warp = thread / 32, lane = thread % 32;
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
  hopper::named_barrier_sync(1 + warpgroup, 128);
  constexpr int kChunksPerToken = kRowBlocks * 8;  // 8 bf16 per chunk
  for (int c = thread; c < kGroupTokens * kChunksPerToken; c += 128) {
    const int token = c / kChunksPerToken, chunk = c % kChunksPerToken;
    if (token >= valid_tokens || chunk * 8 >= valid_rows) continue;
    *reinterpret_cast<uint4*>(out + (first_row + token) * row_stride + column + chunk * 8) =
        *reinterpret_cast<const uint4*>(staged + token * Layout::kOutRowStride + chunk * 8);
  }
  hopper::named_barrier_sync(1 + warpgroup, 128);  // the staging is read before the next tile overwrites it
}

}  // namespace fathom::kernels::cuda::sm90
