#pragma once
// Compute-bound FP8 block-scaled GEMM for many tokens (prefill) on the tensor cores (mma.sync e4m3), with
// per-element arithmetic bitwise identical to the small-M kernel (fp8_gemm_small_m.cuh), so a token's output row
// never depends on how many other tokens share the GEMM (batch invariance).
//
// Arithmetic contract, per output element (token t, weight row r), shared with the small-M kernel:
//   for each K split s (k_blocks_per_split consecutive K blocks; one split = the whole K range):
//     acc = 0; for each 128-wide K block kb of the split in increasing order:
//       block = 0; four m16n8k32 MMAs (A = weight rows, B = tokens) fed with the same K permutation
//         (physical k = lane_in_group*32 + step*8 + half*4 + byte: the same 4-byte words in the same registers);
//       acc += block * (w_scale[r/128][kb] * x_scale[t][kb]);
//     partial[s] = acc;
//   sum = 0; sum += partial[s] for s = 0, 1, ... (the small-M path's split-K reduction); out = static_cast<Output>(sum).
// (With one split, sum = 0 + acc = acc: acc is never -0.)
// An MMA computes each output element from its own row and column fragments only, so any tiling that feeds the
// same words to the same (step, register) slots gives the same bits.
//
// CTA tile: 128 weight rows (exactly one weight scale block: one w_scale per K block) x 128 tokens, 8 warps as
// 4 (rows) x 2 (tokens); each warp owns 32 rows x 64 tokens = 2 m16 x 8 n8 fragments. K blocks stream through a
// kTiledStages-deep cp.async pipeline in shared memory (rows padded to 144 bytes: conflict-free 16-byte reads),
// so each weight tile is reused by 128 tokens and each activation tile by 128 rows.
// Registers: e4m3 mma.sync on sm_90 takes many temporaries (ptxas: ~228 per thread here, no spills), so one
// CTA per SM; 8 warps x 16 independent MMA chains each keep the tensor pipes fed.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/fp8_gemm/sm90/fp8_gemm_small_m.cuh"  // mma_e4m3_16x8x32, word_of: the same MMA and words

namespace fathom::kernels::cuda::sm90 {

constexpr int kTiledRows = 128;       // weight rows per CTA = one 128-row scale block
constexpr int kTiledTokens = 128;     // tokens per CTA
constexpr int kTiledWarps = 8;        // 4 along rows x 2 along tokens
constexpr int kTiledThreads = kTiledWarps * 32;
constexpr int kTiledStages = 4;       // K blocks in flight (4 x 37 KB: one CTA per SM, see the kernels' bounds)
constexpr int kTiledRowBytes = 144;   // 128 bytes of a K block + 16 bytes padding (conflict-free fragment reads)
constexpr int kTiledRasterGroup = 8;  // token tiles walked together so concurrent CTAs share weight tiles in L2

// One pipeline stage: weight tile, activation tile, per-token scales, the CTA's weight scale.
constexpr int kTiledWTileBytes = kTiledRows * kTiledRowBytes;        // [128 rows][144 B]
constexpr int kTiledXTileBytes = kTiledTokens * kTiledRowBytes;      // [128 tokens][144 B]
constexpr int kTiledXScaleOffset = kTiledWTileBytes + kTiledXTileBytes;  // [128 tokens] fp32
constexpr int kTiledWScaleOffset = kTiledXScaleOffset + kTiledTokens * 4;  // [1] fp32 (16 bytes reserved)
constexpr int kTiledStageBytes = kTiledWScaleOffset + 16;
constexpr int kTiledSmemBytes = kTiledStages * kTiledStageBytes;
// Split K: the running sum of the finished splits' partials, [64 accumulators][kTiledThreads] fp32 after the stages.
constexpr int kTiledSplitSumBytes = 64 * kTiledThreads * 4;
constexpr int kTiledSplitSmemBytes = kTiledSmemBytes + kTiledSplitSumBytes;
static_assert(kTiledStageBytes % 16 == 0, "stages must stay 16-byte aligned for cp.async");

namespace tiled_detail {

// 16-byte shared load the compiler may neither merge nor keep alive across uses: each warp reloads B per A
// fragment instead of holding all 8 token tiles in registers (e4m3 mma.sync needs many temporaries on sm_90).
__device__ __forceinline__ uint4 lds128(const uint8_t* p) {
  uint4 v;
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ld.volatile.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr));
  return v;
}

// 16 bytes global -> shared; `valid` false writes zeros without reading (rows/K/tokens past the operand's end).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0)
               : "memory");
}

__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, bool valid) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 4 : 0)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// This thread's share of a stage's copies: chunk (threadIdx % 8) of tile rows threadIdx / 8 + 32 * i, for the
// weight tile and the activation tile alike. Offsets are kept relative to the operand base so nothing past an
// operand's end is ever formed into an address.
struct StageCopier {
  int64_t w_offset, x_offset;      // element offset of row i = 0 at K block 0
  int64_t w_rows_left, x_rows_left;  // row i is inside the operand iff 32 * i < rows_left
  int64_t stride;                  // 32 rows
  int chunk_k;                     // K offset of this thread's 16-byte chunk within a K block

  __device__ __forceinline__ StageCopier(int tokens, int64_t rows, int64_t cols, int64_t row_base,
                                         int64_t token_base) {
    const int r = threadIdx.x / 8;
    chunk_k = (threadIdx.x % 8) * 16;
    w_offset = (row_base + r) * cols + chunk_k;
    x_offset = (token_base + r) * cols + chunk_k;
    w_rows_left = rows - row_base - r;
    x_rows_left = tokens - token_base - r;
    stride = 32 * cols;
  }

  // Issues the copies of K block `kb` into `stage`: the CTA's weight rows, its tokens, their scales. A 16-byte
  // chunk is either wholly inside K or wholly past it (cols is a multiple of 16), exactly like the small-M
  // kernel's zero fill.
  __device__ __forceinline__ void load(uint8_t* stage, const uint8_t* __restrict__ x,
                                       const float* __restrict__ x_scales, const uint8_t* __restrict__ w,
                                       const float* __restrict__ w_scales, int tokens, int64_t cols, int k_blocks,
                                       int64_t row_base, int64_t token_base, int kb) const {
    const int64_t k = static_cast<int64_t>(kb) * 128;
    const bool k_valid = k + chunk_k + 16 <= cols;
    uint8_t* dst = stage + (threadIdx.x / 8) * kTiledRowBytes + chunk_k;
    static_assert(kTiledRows == kTiledTokens && kTiledRows * 8 == 4 * kTiledThreads, "4 chunks per thread per tile");
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const bool valid = k_valid && 32 * i < w_rows_left;
      cp_async_16(dst + i * 32 * kTiledRowBytes, valid ? w + w_offset + i * stride + k : w, valid);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const bool valid = k_valid && 32 * i < x_rows_left;
      cp_async_16(dst + kTiledWTileBytes + i * 32 * kTiledRowBytes, valid ? x + x_offset + i * stride + k : x, valid);
    }
    if (threadIdx.x < kTiledTokens) {
      const int64_t token = token_base + threadIdx.x;
      const bool valid = token < tokens;
      cp_async_4(stage + kTiledXScaleOffset + threadIdx.x * 4, valid ? x_scales + token * k_blocks + kb : x_scales,
                 valid);
    } else if (threadIdx.x == kTiledTokens) {
      cp_async_4(stage + kTiledWScaleOffset, w_scales + (row_base / 128) * k_blocks + kb, true);
    }
  }
};

}  // namespace tiled_detail

// One CTA tile: weight rows [row_block*128, +128) x tokens [token_tile*128, +128) over all K blocks in order.
// `smem` holds kTiledSmemBytes, kTiledSplitSmemBytes when k_blocks_per_split < k_blocks. Ends with every thread
// past a barrier (the memory may be reused afterwards).
template <typename Output>
__device__ __forceinline__ void fp8_gemm_tiled_block(
    const uint8_t* __restrict__ x,       // [tokens, cols] e4m3
    const float* __restrict__ x_scales,  // [tokens, k_blocks]
    const uint8_t* __restrict__ w,       // [rows, cols] e4m3
    const float* __restrict__ w_scales,  // [ceil(rows/128), k_blocks]
    int tokens, int64_t rows, int64_t cols, int k_blocks, int k_blocks_per_split, int64_t row_block,
    int64_t token_tile,
    Output* __restrict__ out,            // [tokens, rows]
    uint8_t* smem) {
  namespace td = tiled_detail;  // qualified: the small-M header has helpers of the same names
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane / 4;  // row within an 8-row half; token within an 8-token tile
  const int lane_in_group = lane % 4;
  const int warp_row = (warp % 4) * 32;    // first of the warp's 32 rows within the CTA tile
  const int warp_token = (warp / 4) * 64;  // first of the warp's 64 tokens within the CTA tile
  const int64_t row_base = row_block * kTiledRows;
  const int64_t token_base = token_tile * kTiledTokens;

  float acc[2][8][4];  // [m16 fragment][n8 tile][fragment element]
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int t = 0; t < 8; ++t) acc[i][t][0] = acc[i][t][1] = acc[i][t][2] = acc[i][t][3] = 0.0f;

  const td::StageCopier copier(tokens, rows, cols, row_base, token_base);
  auto issue = [&](int kb) {
    if (kb < k_blocks) {
      copier.load(smem + (kb % kTiledStages) * kTiledStageBytes, x, x_scales, w, w_scales, tokens, cols, k_blocks,
                  row_base, token_base, kb);
    }
    td::cp_async_commit();  // an empty group past the last block keeps the wait count uniform
  };
#pragma unroll
  for (int s = 0; s < kTiledStages - 1; ++s) issue(s);

  const bool split = k_blocks_per_split < k_blocks;
  float* split_sum = reinterpret_cast<float*>(smem + kTiledSmemBytes) + threadIdx.x;  // [64][kTiledThreads], own column
  // Adds acc to this thread's split sums (starting from 0 after the first split) and clears it.
  auto fold_split = [&](bool first) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int t = 0; t < 8; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float* slot = split_sum + ((i * 8 + t) * 4 + e) * kTiledThreads;
          *slot = (first ? 0.0f : *slot) + acc[i][t][e];
          acc[i][t][e] = 0.0f;
        }
  };
  for (int kb = 0; kb < k_blocks; ++kb) {
    if (split && kb > 0 && kb % k_blocks_per_split == 0) fold_split(kb == k_blocks_per_split);
    td::cp_async_wait<kTiledStages - 2>();  // block kb has landed (for this thread's copies)
    __syncthreads();                        // ... for every thread's; and stage (kb-1) % kTiledStages is free again
    issue(kb + kTiledStages - 1);
    const uint8_t* stage = smem + (kb % kTiledStages) * kTiledStageBytes;
    const float* x_scale_tile = reinterpret_cast<const float*>(stage + kTiledXScaleOffset);
    const float w_scale = *reinterpret_cast<const float*>(stage + kTiledWScaleOffset);

    // One m16 fragment at a time (rows warp_row + i*16 + group and + 8), its 32 bytes at lane_in_group*32 in the
    // small-M kernel's order; B (32 bytes of token + group) is reloaded for each fragment to bound registers.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      uint4 a[2][2];  // [lo, hi][16-byte chunk]
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint8_t* p = stage + (warp_row + i * 16 + h * 8 + group) * kTiledRowBytes + lane_in_group * 32;
        a[h][0] = td::lds128(p);
        a[h][1] = td::lds128(p + 16);
      }
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        const int token = warp_token + t * 8;
        const uint8_t* p = stage + kTiledWTileBytes + (token + group) * kTiledRowBytes + lane_in_group * 32;
        const uint4 b_chunk[2] = {td::lds128(p), td::lds128(p + 16)};
        const float2 x_scale = *reinterpret_cast<const float2*>(&x_scale_tile[token + 2 * lane_in_group]);
        // Formed exactly as the small-M kernel does: weight scale times token scale, then block * scale into acc.
        const float scale[2] = {w_scale * x_scale.x, w_scale * x_scale.y};
        float block[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int step = 0; step < 4; ++step) {
          const uint32_t av[4] = {word_of(a[0], 2 * step), word_of(a[1], 2 * step),
                                  word_of(a[0], 2 * step + 1), word_of(a[1], 2 * step + 1)};
          const uint32_t bv[2] = {word_of(b_chunk, 2 * step), word_of(b_chunk, 2 * step + 1)};
          mma_e4m3_16x8x32(block, av, bv);
        }
        // Fragment: block[0..1] -> row lo, tokens token + 2*lane_in_group + {0,1}; block[2..3] -> row hi.
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          acc[i][t][j] += block[j] * scale[j];
          acc[i][t][2 + j] += block[2 + j] * scale[j];
        }
      }
    }
  }
  td::cp_async_wait<0>();  // only empty groups can remain; drain them before the pipeline memory is reused
  __syncthreads();         // every warp is done reading the last stage
  if (split) {  // the last split's partial joins the sum: sum + partial (fp32 addition commutes bit for bit)
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int t = 0; t < 8; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][t][e] = split_sum[((i * 8 + t) * 4 + e) * kTiledThreads] + acc[i][t][e];
  }

  // Epilogue: stage the converted tile as [token][row] in shared memory, then write whole 16-byte row segments
  // (a fragment's own stores would touch 8 tokens x 16 bytes per instruction).
  constexpr int kVec = 16 / sizeof(Output);        // outputs per 16-byte store
  constexpr int kOutStride = kTiledRows + kVec;    // padded row of the staged tile, in outputs
  static_assert(kTiledTokens * kOutStride * sizeof(Output) <= kTiledSmemBytes, "output tile must fit");
  Output* tile = reinterpret_cast<Output*>(smem);  // [128 tokens][kOutStride]
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int t = 0; t < 8; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = warp_row + i * 16 + (e < 2 ? 0 : 8) + group;
        const int token = warp_token + t * 8 + 2 * lane_in_group + (e % 2);
        tile[token * kOutStride + r] = static_cast<Output>(acc[i][t][e]);
      }
  __syncthreads();
  const bool vector_ok = rows % kVec == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  constexpr int kChunksPerToken = kTiledRows / kVec;
  for (int c = threadIdx.x; c < kTiledTokens * kChunksPerToken; c += kTiledThreads) {
    const int t = c / kChunksPerToken, r = (c % kChunksPerToken) * kVec;
    const int64_t token = token_base + t, row = row_base + r;
    if (token >= tokens || row >= rows) continue;
    const Output* src = tile + t * kOutStride + r;
    Output* dst = out + token * rows + row;
    if (vector_ok) {  // rows % kVec == 0: the whole segment is inside the row
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      for (int v = 0; v < kVec && row + v < rows; ++v) dst[v] = src[v];
    }
  }
  __syncthreads();  // the staged tile is read before a next call reuses the memory
}

// out [tokens, rows] = x · wᵀ. 1-D grid of ceil(rows/128) * ceil(tokens/128) CTAs of kTiledThreads threads with
// kTiledSmemBytes of dynamic shared memory (kTiledSplitSmemBytes when k_blocks_per_split < k_blocks). CTAs are rastered in groups of kTiledRasterGroup token tiles (row
// blocks vary fastest inside a group), so the CTAs resident at once share both weight and activation tiles in L2.
template <typename Output>
__global__ void __launch_bounds__(kTiledThreads, 1)
fp8_gemm_tiled_kernel(const uint8_t* __restrict__ x,       // [tokens, cols] e4m3
                      const float* __restrict__ x_scales,  // [tokens, k_blocks]
                      const uint8_t* __restrict__ w,       // [rows, cols] e4m3
                      const float* __restrict__ w_scales,  // [ceil(rows/128), k_blocks]
                      int tokens, int64_t rows, int64_t cols, int k_blocks, int k_blocks_per_split,
                      int64_t row_blocks, int64_t token_tiles,
                      Output* __restrict__ out) {          // [tokens, rows]
  extern __shared__ __align__(128) uint8_t tiled_smem[];
  const int64_t id = blockIdx.x;
  const int64_t per_group = kTiledRasterGroup * row_blocks;
  const int64_t first_tile = id / per_group * kTiledRasterGroup;
  const int64_t group_tiles = min(static_cast<int64_t>(kTiledRasterGroup), token_tiles - first_tile);
  const int64_t local = id % per_group;  // < group_tiles * row_blocks, also in the last (short) group
  fp8_gemm_tiled_block<Output>(x, x_scales, w, w_scales, tokens, rows, cols, k_blocks, k_blocks_per_split,
                               local / group_tiles, first_tile + local % group_tiles, out, tiled_smem);
}

// Grouped form for MoE, same arithmetic: blockIdx.z = expert e multiplies the permuted rows
// [offsets[e], offsets[e] + counts[e]) by its own weight (w + e * rows * cols); blockIdx.x = weight row block;
// blockIdx.y = 128-row tile of the expert's segment. The grid must cover every expert's count (the host sizes
// gridDim.y from an upper bound); a count beyond it traps rather than leaving rows silently unwritten. (One tile
// per CTA: looping over tiles here costs registers and spills.) Experts with no rows, and tiles past an
// expert's count, exit at once.
template <typename Output>
__global__ void __launch_bounds__(kTiledThreads, 1)
fp8_gemm_grouped_tiled_kernel(const uint8_t* __restrict__ x,               // [max_rows, cols] e4m3, permuted
                              const float* __restrict__ x_scales,          // [max_rows, k_blocks]
                              const int32_t* __restrict__ expert_offsets,  // [E + 1]
                              const int32_t* __restrict__ expert_counts,   // [E]
                              const uint8_t* __restrict__ w,               // [E, rows, cols] e4m3
                              const float* __restrict__ w_scales,          // [E, ceil(rows/128), k_blocks]
                              int64_t rows, int64_t cols, int k_blocks,
                              Output* __restrict__ out) {                  // [max_rows, rows]
  extern __shared__ __align__(128) uint8_t tiled_smem[];
  const int expert = blockIdx.z;
  const int count = expert_counts[expert];
  if (static_cast<int64_t>(gridDim.y) * kTiledTokens < count) __trap();  // caller's max_rows_per_expert too small
  if (static_cast<int>(blockIdx.y) * kTiledTokens >= count) return;      // also count <= 0
  const int64_t first = expert_offsets[expert];
  fp8_gemm_tiled_block<Output>(x + first * cols, x_scales + first * k_blocks,
                               w + static_cast<int64_t>(expert) * rows * cols,
                               w_scales + static_cast<int64_t>(expert) * ((rows + 127) / 128) * k_blocks, count, rows,
                               cols, k_blocks, /*k_blocks_per_split=*/k_blocks, blockIdx.x, blockIdx.y, out + first * rows,
                               tiled_smem);
}

}  // namespace fathom::kernels::cuda::sm90
