#pragma once
// Memory-bound FP8 block-scaled GEMM for decode-sized batches (tokens <= 64) on the tensor cores (mma.sync e4m3).
//
// Each warp owns 16 weight rows, a CTA 128 rows (one scale block), and a range of 128-wide K blocks (split-K);
// the CTA stages each activation K block in shared memory once for all of its warps.
// Per K block it issues four m16n8k32 MMAs per 8-token tile into a fresh fp32 fragment, then promotes that
// fragment by weight_scale * token_scale into the running fp32 accumulator (DeepSeek's per-block promotion).
// K inside a block is permuted identically for both operands so every thread loads 32 contiguous bytes per row:
// logical (lane_in_group, step, half, byte) <-> physical k = lane_in_group*32 + step*8 + half*4 + byte.
#include <cuda_runtime.h>

#include <cstdint>

namespace fathom::kernels::cuda::sm90 {

constexpr int kSmallMRowsPerWarp = 16;
constexpr int kSmallMWarpsPerBlock = 8;  // 8 x 16 rows = one 128-row weight scale block
constexpr int kSmallMMaxTokenTiles = 8;  // 8 tiles of 8 tokens: up to 64 tokens

__device__ __forceinline__ void mma_e4m3_16x8x32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// 32 bytes of a row at `k_offset` (16-byte aligned), zero beyond `limit` bytes of the row.
__device__ __forceinline__ void load_32_bytes(const uint8_t* __restrict__ row, int64_t k_offset, int64_t limit,
                                              uint4 (&out)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t k = k_offset + i * 16;
    out[i] = k + 16 <= limit ? __ldg(reinterpret_cast<const uint4*>(row + k)) : make_uint4(0, 0, 0, 0);
  }
}

__device__ __forceinline__ uint32_t word_of(const uint4 (&chunk)[2], int word) {
  const uint4& v = chunk[word / 4];
  switch (word % 4) {
    case 0: return v.x;
    case 1: return v.y;
    case 2: return v.z;
    default: return v.w;
  }
}

constexpr int kSmallMXRowBytes = 144;  // 128 bytes of a token's K block + 16 bytes padding (conflict-free B reads)

// Stages activation K block `kb` (values and per-token scales) of every token into shared memory.
template <int kTokenTiles>
__device__ __forceinline__ void stage_activation_block(const uint8_t* __restrict__ x, const float* __restrict__ x_scales,
                                                       int tokens, int64_t cols, int k_blocks, int kb,
                                                       uint8_t (*x_tile)[kSmallMXRowBytes], float* x_scale_tile) {
  constexpr int kTokens = kTokenTiles * 8;
  for (int i = threadIdx.x; i < kTokens * 8; i += blockDim.x) {
    const int token = i / 8, chunk = i % 8;
    const int64_t k = static_cast<int64_t>(kb) * 128 + chunk * 16;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (token < tokens && k + 16 <= cols) v = __ldg(reinterpret_cast<const uint4*>(x + token * cols + k));
    *reinterpret_cast<uint4*>(&x_tile[token][chunk * 16]) = v;
  }
  for (int token = threadIdx.x; token < kTokens; token += blockDim.x) {
    x_scale_tile[token] = token < tokens ? x_scales[static_cast<int64_t>(token) * k_blocks + kb] : 0.0f;
  }
}

// One CTA = 8 warps = 128 weight rows (exactly one 128-row scale block) x one K range (split). Each iteration
// covers kKbPerStep K blocks (more contiguous bytes per row and more loads in flight), and prefetches the next step.
// partial: [splits, tokens, rows] fp32 when splits > 1 (reduced later in split order), else out: [tokens, rows].
// No register cap beyond the block size: capping one token tile at 64 registers (4 CTAs/SM) measured slower
// (spills) than its natural ~74 (3 CTAs/SM).
// The body of one CTA, shared by the plain kernel and the grouped (per-expert) kernel: row block `row_block`,
// K blocks [split * k_blocks_per_split, ...). Ends with every thread past a barrier, so it may be called again.
template <int kTokenTiles, int kKbPerStep, typename Output>
__device__ __forceinline__ void fp8_gemm_small_m_block(
    const uint8_t* __restrict__ x,          // [tokens, cols] e4m3
    const float* __restrict__ x_scales,     // [tokens, k_blocks]
    const uint8_t* __restrict__ w,          // [rows, cols] e4m3
    const float* __restrict__ w_scales,     // [ceil(rows/128), k_blocks]
    int tokens, int64_t rows, int64_t cols, int k_blocks, int k_blocks_per_split, int row_block, int split,
    Output* __restrict__ out,               // [tokens, rows]
    float* __restrict__ partial) {          // [splits, tokens, rows]
  constexpr int kTokens = kTokenTiles * 8;
  __shared__ alignas(16) uint8_t x_tile[2][kKbPerStep][kTokens][kSmallMXRowBytes];  // [buffer, kb, token, bytes]
  __shared__ float x_scale_tile[2][kKbPerStep][kTokens];                             // [buffer, kb, token]

  const int lane = threadIdx.x % 32;
  const int group = lane / 4;           // row within the 8-row half, token within the 8-token tile
  const int lane_in_group = lane % 4;
  const int64_t row0 = static_cast<int64_t>(row_block) * (kSmallMWarpsPerBlock * kSmallMRowsPerWarp) +
                       (threadIdx.x / 32) * kSmallMRowsPerWarp;
  const int kb_begin = split * k_blocks_per_split;
  const int kb_end = min(k_blocks, kb_begin + k_blocks_per_split);

  float acc[kTokenTiles][4];
#pragma unroll
  for (int t = 0; t < kTokenTiles; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;

  // Warps past the last row still stage activations and hit every barrier; their weights read as zero.
  const int64_t row_lo = row0 + group, row_hi = row0 + group + 8;
  const uint8_t* w_lo = w + min(row_lo, rows - 1) * cols;
  const uint8_t* w_hi = w + min(row_hi, rows - 1) * cols;
  const int64_t w_limit_lo = row_lo < rows ? cols : 0;
  const int64_t w_limit_hi = row_hi < rows ? cols : 0;
  const float* w_scale_row = w_scales + (min(row0, rows - 1) / 128) * k_blocks;

  uint4 a_lo[kKbPerStep][2], a_hi[kKbPerStep][2], next_lo[kKbPerStep][2], next_hi[kKbPerStep][2];
  float w_scale[kKbPerStep], next_w_scale[kKbPerStep];
  // Loads step `kb0`'s weights (blocks past kb_end read as zero) and stages its activations into `buffer`.
  auto load_step = [&](int kb0, uint4 (&lo)[kKbPerStep][2], uint4 (&hi)[kKbPerStep][2], float (&scale)[kKbPerStep],
                       int buffer) {
#pragma unroll
    for (int i = 0; i < kKbPerStep; ++i) {
      const int kb = kb0 + i;
      const bool valid = kb < kb_end;
      const int64_t k_offset = static_cast<int64_t>(kb) * 128 + lane_in_group * 32;
      load_32_bytes(w_lo, k_offset, valid ? w_limit_lo : 0, lo[i]);
      load_32_bytes(w_hi, k_offset, valid ? w_limit_hi : 0, hi[i]);
      scale[i] = valid ? w_scale_row[kb] : 0.0f;
      if (valid) {
        stage_activation_block<kTokenTiles>(x, x_scales, tokens, cols, k_blocks, kb, x_tile[buffer][i],
                                            x_scale_tile[buffer][i]);
      }
    }
  };
  if (kb_begin < kb_end) load_step(kb_begin, a_lo, a_hi, w_scale, 0);
  __syncthreads();
  int buffer = 0;
  for (int kb0 = kb_begin; kb0 < kb_end; kb0 += kKbPerStep) {
    const bool has_next = kb0 + kKbPerStep < kb_end;
    if (has_next) load_step(kb0 + kKbPerStep, next_lo, next_hi, next_w_scale, buffer ^ 1);
#pragma unroll
    for (int i = 0; i < kKbPerStep; ++i) {
      if (kb0 + i >= kb_end) break;
#pragma unroll
      for (int t = 0; t < kTokenTiles; ++t) {
        const uint8_t* b_row = &x_tile[buffer][i][t * 8 + group][lane_in_group * 32];
        const uint4 b_chunk[2] = {*reinterpret_cast<const uint4*>(b_row), *reinterpret_cast<const uint4*>(b_row + 16)};
        float block[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int step = 0; step < 4; ++step) {
          const uint32_t a[4] = {word_of(a_lo[i], 2 * step), word_of(a_hi[i], 2 * step), word_of(a_lo[i], 2 * step + 1),
                                 word_of(a_hi[i], 2 * step + 1)};
          const uint32_t b[2] = {word_of(b_chunk, 2 * step), word_of(b_chunk, 2 * step + 1)};
          mma_e4m3_16x8x32(block, a, b);
        }
        // Fragment: block[0..1] -> row_lo, tokens t*8 + 2*lane_in_group + {0,1}; block[2..3] -> row_hi.
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float scale = w_scale[i] * x_scale_tile[buffer][i][t * 8 + 2 * lane_in_group + j];
          acc[t][j] += block[j] * scale;
          acc[t][2 + j] += block[2 + j] * scale;
        }
      }
    }
    if (has_next) {
#pragma unroll
      for (int i = 0; i < kKbPerStep; ++i) {
        a_lo[i][0] = next_lo[i][0]; a_lo[i][1] = next_lo[i][1];
        a_hi[i][0] = next_hi[i][0]; a_hi[i][1] = next_hi[i][1];
        w_scale[i] = next_w_scale[i];
      }
    }
    __syncthreads();  // everyone is done with `buffer`; the other buffer's stores are visible
    buffer ^= 1;
  }

#pragma unroll
  for (int t = 0; t < kTokenTiles; ++t) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int token = t * 8 + 2 * lane_in_group + (i % 2);
      const int64_t row = i < 2 ? row_lo : row_hi;
      if (token >= tokens || row >= rows) continue;
      if (partial) {
        partial[(static_cast<int64_t>(split) * tokens + token) * rows + row] = acc[t][i];
      } else {
        out[static_cast<int64_t>(token) * rows + row] = static_cast<Output>(acc[t][i]);
      }
    }
  }
}

template <int kTokenTiles, int kKbPerStep, typename Output>
__global__ void __launch_bounds__(kSmallMWarpsPerBlock * 32)
fp8_gemm_small_m_kernel(const uint8_t* __restrict__ x, const float* __restrict__ x_scales,
                        const uint8_t* __restrict__ w, const float* __restrict__ w_scales,
                        int tokens, int64_t rows, int64_t cols, int k_blocks, int k_blocks_per_split,
                        Output* __restrict__ out, float* __restrict__ partial) {
  fp8_gemm_small_m_block<kTokenTiles, kKbPerStep, Output>(x, x_scales, w, w_scales, tokens, rows, cols, k_blocks,
                                                          k_blocks_per_split, blockIdx.x, blockIdx.y, out, partial);
}

// Grouped form for MoE: blockIdx.z = expert e multiplies the permuted rows [offsets[e], offsets[e] + counts[e])
// by its own weight (w + e * rows * cols), kTokenTiles * 8 rows at a time; experts with no rows exit at once,
// so only the selected experts' weights are read. No split-K (the expert dimension fills the machine).
template <int kTokenTiles, typename Output>
__global__ void __launch_bounds__(kSmallMWarpsPerBlock * 32)
fp8_gemm_grouped_small_m_kernel(const uint8_t* __restrict__ x,            // [max_rows, cols] e4m3, permuted
                                const float* __restrict__ x_scales,       // [max_rows, k_blocks]
                                const int32_t* __restrict__ expert_offsets,  // [E + 1]
                                const int32_t* __restrict__ expert_counts,   // [E]
                                const uint8_t* __restrict__ w,            // [E, rows, cols] e4m3
                                const float* __restrict__ w_scales,       // [E, ceil(rows/128), k_blocks]
                                int64_t rows, int64_t cols, int k_blocks,
                                Output* __restrict__ out) {               // [max_rows, rows]
  const int expert = blockIdx.z;
  const int count = expert_counts[expert];
  if (count <= 0) return;
  const int64_t begin = expert_offsets[expert];
  const uint8_t* w_expert = w + static_cast<int64_t>(expert) * rows * cols;
  const float* w_scales_expert = w_scales + static_cast<int64_t>(expert) * ((rows + 127) / 128) * k_blocks;
  constexpr int kTokens = kTokenTiles * 8;
  for (int m0 = 0; m0 < count; m0 += kTokens) {
    const int64_t first = begin + m0;
    fp8_gemm_small_m_block<kTokenTiles, 1, Output>(x + first * cols, x_scales + first * k_blocks, w_expert,
                                                   w_scales_expert, min(kTokens, count - m0), rows, cols, k_blocks,
                                                   k_blocks, blockIdx.x, 0, out + first * rows, nullptr);
  }
}

}  // namespace fathom::kernels::cuda::sm90
