#pragma once
// Decode FP8 block-scaled GEMM for 1..16 tokens (one or two 8-token tiles), tuned for streaming the weight.
//
// Bit-identical to fp8_gemm_small_m_kernel (fp8_gemm_small_m.cuh) for every token, M and shape: each warp owns the
// same 16 weight rows and 8-token tiles, loads the same 4-byte words into the same fragment registers (same K
// permutation), issues the same four m16n8k32 MMAs per K block into a fresh fragment, promotes it by
// w_scale * x_scale into the running accumulator in increasing K-block order, and split-K partials are summed in
// split order starting from 0.0f. Only the data movement differs:
//  - activations are read straight from global memory (L1/L2 hits: every warp of the CTA reads the same bytes)
//    instead of being staged in shared memory behind a barrier per K block;
//  - each warp keeps kDepth K blocks of loads (weights, activations, scales) in flight in registers, a rolling
//    ring: K block i is consumed, then slot i is refilled with K block i + kDepth;
//  - kWarps warps (16 rows each) per CTA; the weight scale block (128 rows) is looked up per warp;
//  - launched programmatically: the first weight blocks are requested before waiting for the previous kernel,
//    and each warp can prefetch its weight rows a few K blocks ahead into L2 (prefetch_blocks);
//  - kFused: the split-K reduction runs inside the GEMM. Every CTA writes its fp32 partials, then arrives on a
//    per-row-block counter; the last CTA to arrive sums the partials in split order and writes the output, then
//    resets the counter to zero (so counters are zero at rest and a CUDA graph replays safely).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/fp8_gemm/sm90/fp8_gemm_small_m.cuh"  // mma_e4m3_16x8x32, word_of, kSmallMRowsPerWarp
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda::sm90 {

// Shared-memory floats of the fused reduction's staging buffer; the fused path needs splits <= this.
constexpr int kGemvReduceCapacity = 4096;

// One K block of one thread's operands (registers).
template <int kTokenTiles>
struct GemvStage {
  uint4 w_lo[2], w_hi[2];          // weight rows row0+group, row0+group+8: bytes [lane_in_group*32, +32) of the block
  uint4 x[kTokenTiles][2];         // token t*8+group: the same 32 bytes
  float w_scale;                   // scale of (row0 / 128, kb)
  float x_scale[kTokenTiles][2];   // tokens t*8 + 2*lane_in_group + {0,1}
};

// Per-thread row and token addressing of one warp (fixed for the whole K loop). Rows past the last row and tokens
// past the last token are clamped to valid memory instead of zeroed: an MMA output element depends only on its own
// row and token, and those elements are never written. Bytes past `cols` (a partial last K block) are zeroed in
// both operands, as in the reference kernel, so they contribute exact zeros.
template <int kTokenTiles>
struct GemvOperands {
  const uint8_t* w_lo;               // row row0+group (clamped), at byte lane_in_group*32
  const uint8_t* w_hi;               // row row0+group+8 (clamped), at byte lane_in_group*32
  const float* w_scale_row;          // [k_blocks] of row block (row0 / 128)
  int x_offset[kTokenTiles];         // token t*8+group (clamped) * cols + lane_in_group*32
  int x_scale_offset[kTokenTiles][2];  // token t*8 + 2*lane_in_group + j (clamped) * k_blocks
  int k_limit;                       // cols - lane_in_group*32: this thread's bytes of a block at k exist if k+16 <= it
};

// 16 bytes at p + k if k + 16 <= limit (p 16-byte aligned), else zero.
__device__ __forceinline__ uint4 gemv_load_16(const uint8_t* __restrict__ p, int k, int limit) {
  return k + 16 <= limit ? __ldg(reinterpret_cast<const uint4*>(p + k)) : make_uint4(0, 0, 0, 0);
}

// The weight half of a K block's operands: read-only data, so it may be loaded before the predecessor kernel ends.
template <int kTokenTiles>
__device__ __forceinline__ void gemv_load_weights(const GemvOperands<kTokenTiles>& op, int kb, GemvStage<kTokenTiles>& s) {
  const int k = kb * 128;  // cols < 2^31 (int k_blocks)
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    s.w_lo[i] = gemv_load_16(op.w_lo, k + i * 16, op.k_limit);
    s.w_hi[i] = gemv_load_16(op.w_hi, k + i * 16, op.k_limit);
  }
  s.w_scale = op.w_scale_row[kb];
}

// The activation half (written by the previous kernel: only after wait_for_predecessor()).
template <int kTokenTiles>
__device__ __forceinline__ void gemv_load_activations(const GemvOperands<kTokenTiles>& op, const uint8_t* __restrict__ x,
                                                      const float* __restrict__ x_scales, int kb,
                                                      GemvStage<kTokenTiles>& s) {
  const int k = kb * 128;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int t = 0; t < kTokenTiles; ++t) s.x[t][i] = gemv_load_16(x + op.x_offset[t], k + i * 16, op.k_limit);
  }
#pragma unroll
  for (int t = 0; t < kTokenTiles; ++t) {
#pragma unroll
    for (int j = 0; j < 2; ++j) s.x_scale[t][j] = x_scales[op.x_scale_offset[t][j] + kb];
  }
}

template <int kTokenTiles>
__device__ __forceinline__ void gemv_load(const GemvOperands<kTokenTiles>& op, const uint8_t* __restrict__ x,
                                          const float* __restrict__ x_scales, int kb, GemvStage<kTokenTiles>& s) {
  gemv_load_weights(op, kb, s);
  gemv_load_activations(op, x, x_scales, kb, s);
}

// The per-K-block arithmetic, written exactly as in fp8_gemm_small_m_block (same expressions, so the same FFMA
// contraction): block = 4 MMAs from zero; acc += block * (w_scale * x_scale).
template <int kTokenTiles>
__device__ __forceinline__ void gemv_compute(const GemvStage<kTokenTiles>& s, float (&acc)[kTokenTiles][4]) {
#pragma unroll
  for (int t = 0; t < kTokenTiles; ++t) {
    float block[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int step = 0; step < 4; ++step) {
      const uint32_t a[4] = {word_of(s.w_lo, 2 * step), word_of(s.w_hi, 2 * step), word_of(s.w_lo, 2 * step + 1),
                             word_of(s.w_hi, 2 * step + 1)};
      const uint32_t b[2] = {word_of(s.x[t], 2 * step), word_of(s.x[t], 2 * step + 1)};
      mma_e4m3_16x8x32(block, a, b);
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float scale = s.w_scale * s.x_scale[t][j];
      acc[t][j] += block[j] * scale;
      acc[t][2 + j] += block[2 + j] * scale;
    }
  }
}

// The last-arriving CTA of a row block sums the splits' partials in split order and writes the output rows
// [block_row0, block_row0 + block_rows). Partials are read through L2 (__ldcg: other CTAs wrote them), staged in
// shared memory `chunk` elements x splits at a time so all loads of a chunk are in flight together.
template <typename Output>
__device__ __forceinline__ void gemv_reduce_splits(const float* __restrict__ partial,  // [splits, tokens, rows]
                                                   int splits, int tokens, int64_t rows, int64_t block_row0,
                                                   int block_rows, float* stage,  // [kGemvReduceCapacity] shared
                                                   Output* __restrict__ out) {    // [tokens, rows]
  const int elements = tokens * block_rows;  // element e = token * block_rows + row
  const int per_pass = kGemvReduceCapacity / splits;
  for (int e0 = 0; e0 < elements; e0 += per_pass) {
    const int count = min(per_pass, elements - e0);
    for (int i = threadIdx.x; i < count * splits; i += blockDim.x) {
      const int s = i / count, e = e0 + i % count;
      const int token = e / block_rows, row = e % block_rows;
      stage[i] = __ldcg(&partial[(static_cast<int64_t>(s) * tokens + token) * rows + block_row0 + row]);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < count; e += blockDim.x) {
      float sum = 0.0f;  // as reduce_splits_kernel: from 0.0f, splits in order
      for (int s = 0; s < splits; ++s) sum += stage[s * count + e];
      const int token = (e0 + e) / block_rows, row = (e0 + e) % block_rows;
      out[static_cast<int64_t>(token) * rows + block_row0 + row] = static_cast<Output>(sum);
    }
    __syncthreads();  // the stage is reused by the next pass
  }
}

// Addressing of one warp: rows [row0, row0 + 16) of w, tokens [0, tokens) of x (clamped as GemvOperands says).
template <int kTokenTiles>
__device__ __forceinline__ GemvOperands<kTokenTiles> gemv_operands(const uint8_t* __restrict__ w,
                                                                   const float* __restrict__ w_scales, int tokens,
                                                                   int64_t rows, int64_t cols, int k_blocks,
                                                                   int64_t row0) {
  const int lane = threadIdx.x % 32;
  const int group = lane / 4;
  const int lane_in_group = lane % 4;
  GemvOperands<kTokenTiles> op;
  op.w_lo = w + min(row0 + group, rows - 1) * cols + lane_in_group * 32;
  op.w_hi = w + min(row0 + group + 8, rows - 1) * cols + lane_in_group * 32;
  op.w_scale_row = w_scales + (min(row0, rows - 1) / 128) * k_blocks;
#pragma unroll
  for (int t = 0; t < kTokenTiles; ++t) {
    op.x_offset[t] = min(t * 8 + group, tokens - 1) * static_cast<int>(cols) + lane_in_group * 32;
#pragma unroll
    for (int j = 0; j < 2; ++j) op.x_scale_offset[t][j] = min(t * 8 + 2 * lane_in_group + j, tokens - 1) * k_blocks;
  }
  op.k_limit = static_cast<int>(cols) - lane_in_group * 32;
  return op;
}

// Asks L2 for the 128-byte lines of K block kb of the warp's 16 weight rows (no registers, no wait).
template <int kTokenTiles>
__device__ __forceinline__ void gemv_prefetch_weights(const GemvOperands<kTokenTiles>& op, int kb) {
  const int k = kb * 128;
  asm volatile("prefetch.global.L2 [%0];" ::"l"(op.w_lo + k));
  asm volatile("prefetch.global.L2 [%0];" ::"l"(op.w_hi + k));
}

// acc (zeroed here) = the warp's fragment over K blocks [kb_begin, kb_begin + n), in increasing K-block order.
// before_activations() runs (in every thread) after the first kDepth K blocks of weights are requested and before
// any activation is read: the kernels put wait_for_predecessor() there, so the weight stream starts early.
// prefetch_blocks > 0: while consuming block j the warp also asks L2 for block j + prefetch_blocks of its rows.
template <int kTokenTiles, int kDepth, typename BeforeActivations>
__device__ __forceinline__ void gemv_accumulate(const GemvOperands<kTokenTiles>& op, const uint8_t* __restrict__ x,
                                                const float* __restrict__ x_scales, int kb_begin, int n,
                                                int prefetch_blocks, float (&acc)[kTokenTiles][4],
                                                BeforeActivations before_activations) {
#pragma unroll
  for (int t = 0; t < kTokenTiles; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
  // Rolling register ring: slot i holds K block base+i; after computing it, it is refilled with base+i+kDepth,
  // so kDepth - 1 K blocks stay in flight while one is consumed. All slot indices are compile-time constants.
  GemvStage<kTokenTiles> ring[kDepth];
#pragma unroll
  for (int i = 0; i < kDepth; ++i) {
    if (i < n) gemv_load_weights(op, kb_begin + i, ring[i]);
  }
  if (prefetch_blocks > 0) {
    // The blocks past the ring that the loop below would otherwise reach prefetch_blocks blocks late.
    for (int j = kDepth; j < min(n, kDepth + prefetch_blocks); ++j) gemv_prefetch_weights(op, kb_begin + j);
  }
  before_activations();
#pragma unroll
  for (int i = 0; i < kDepth; ++i) {
    if (i < n) gemv_load_activations(op, x, x_scales, kb_begin + i, ring[i]);
  }
#pragma unroll 1
  for (int base = 0; base < n; base += kDepth) {
#pragma unroll
    for (int i = 0; i < kDepth; ++i) {
      if (base + i < n) {
        gemv_compute(ring[i], acc);
        if (base + i + kDepth < n) gemv_load(op, x, x_scales, kb_begin + base + i + kDepth, ring[i]);
        const int ahead = base + i + kDepth + prefetch_blocks;  // prefetch_blocks past the block just requested
        if (prefetch_blocks > 0 && ahead < n) gemv_prefetch_weights(op, kb_begin + ahead);
      }
    }
  }
}

// Stores a warp's fragment (acc as gemv_accumulate leaves it, rows [row0, row0 + 16)) into out [tokens, rows],
// skipping tokens past `tokens` and rows past `rows`. Fragment: acc[t][0..1] -> row row0 + group, tokens
// t*8 + 2*lane_in_group + {0,1}; acc[t][2..3] -> row row0 + group + 8.
template <int kTokenTiles, typename Output>
__device__ __forceinline__ void gemv_store_fragment(const float (&acc)[kTokenTiles][4], int tokens, int64_t rows,
                                                    int64_t row0, Output* __restrict__ out) {
  const int lane = threadIdx.x % 32, group = lane / 4, lane_in_group = lane % 4;
#pragma unroll
  for (int t = 0; t < kTokenTiles; ++t) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int token = t * 8 + 2 * lane_in_group + (i % 2);
      const int64_t row = row0 + group + (i < 2 ? 0 : 8);
      if (token < tokens && row < rows) out[static_cast<int64_t>(token) * rows + row] = static_cast<Output>(acc[t][i]);
    }
  }
}

// grid = (ceil(rows / (kWarps * 16)), used_splits); block = kWarps * 32 threads.
// splits == 1: writes out directly. splits > 1 and !kFused: writes partial (summed by reduce_splits_kernel).
// splits > 1 and kFused: writes partial, and the last CTA per row block writes out; counters[blockIdx.x] must be
// zero on entry and is zero again on exit; needs splits <= kGemvReduceCapacity.
template <int kTokenTiles, int kWarps, int kDepth, bool kFused, typename Output>
__global__ void __launch_bounds__(kWarps * 32)
fp8_gemm_gemv_kernel(const uint8_t* __restrict__ x,         // [tokens, cols] e4m3
                     const float* __restrict__ x_scales,    // [tokens, k_blocks]
                     const uint8_t* __restrict__ w,         // [rows, cols] e4m3
                     const float* __restrict__ w_scales,    // [ceil(rows/128), k_blocks]
                     int tokens, int64_t rows, int64_t cols, int k_blocks, int k_blocks_per_split, int splits,
                     int prefetch_blocks,                   // L2 prefetch distance in K blocks (0: none)
                     Output* __restrict__ out,              // [tokens, rows]
                     float* __restrict__ partial,           // [splits, tokens, rows] when splits > 1
                     uint32_t* __restrict__ counters) {     // [gridDim.x] when kFused and splits > 1
  static_assert(kTokenTiles >= 1 && kTokenTiles <= 2 && kDepth >= 1 && kWarps >= 1 && kWarps <= 32);
  const int64_t block_row0 = static_cast<int64_t>(blockIdx.x) * (kWarps * kSmallMRowsPerWarp);
  const int64_t row0 = block_row0 + (threadIdx.x / 32) * kSmallMRowsPerWarp;
  const int split = blockIdx.y;
  const int kb_begin = split * k_blocks_per_split;
  const int kb_end = min(k_blocks, kb_begin + k_blocks_per_split);
  const int n = row0 < rows ? kb_end - kb_begin : 0;  // warps past the last row load nothing

  const GemvOperands<kTokenTiles> op = gemv_operands<kTokenTiles>(w, w_scales, tokens, rows, cols, k_blocks, row0);
  float acc[kTokenTiles][4];
  // Launched programmatically: the first weight blocks are requested while the previous kernel finishes.
  gemv_accumulate<kTokenTiles, kDepth>(op, x, x_scales, kb_begin, n, prefetch_blocks, acc, [] { begin_dependent_kernel(); });

  const bool to_partial = splits > 1;
  if (n > 0) {
    if (to_partial) gemv_store_fragment(acc, tokens, rows, row0, partial + static_cast<int64_t>(split) * tokens * rows);
    else gemv_store_fragment(acc, tokens, rows, row0, out);
  }

  if constexpr (kFused) {
    if (!to_partial) return;
    __shared__ float stage[kGemvReduceCapacity];
    __shared__ bool is_last;
    __threadfence();  // this thread's partials are visible device-wide before the CTA arrives
    __syncthreads();
    if (threadIdx.x == 0) {
      const uint32_t arrived = atomicAdd(&counters[blockIdx.x], 1u) + 1;
      is_last = arrived == static_cast<uint32_t>(splits);
      if (is_last) {
        counters[blockIdx.x] = 0;  // every split has arrived: nobody else touches it in this launch
        __threadfence();           // the other CTAs' partials are visible to this CTA's reads below
      }
    }
    __syncthreads();
    if (!is_last) return;
    const int block_rows = static_cast<int>(min(static_cast<int64_t>(kWarps * kSmallMRowsPerWarp), rows - block_row0));
    gemv_reduce_splits(partial, splits, tokens, rows, block_row0, block_rows, stage, out);
  }
}

// Grouped form for MoE decode: blockIdx.z = slot s works on expert active_experts[s] (experts with rows, ascending,
// then -1: slots past the active ones exit at once, so the grid is sized by the batch, not by the expert count).
// The expert multiplies its permuted rows [offsets[e], offsets[e] + counts[e]) by its own weight, kTokenTiles * 8
// rows per pass over the weight, all K blocks in one split: the same bits as fp8_gemm_grouped_small_m_kernel.
// x_row_source (nullable): permuted row r reads x row x_row_source[r] / x_row_divisor (x unpermuted) instead of r.
// experts_settled: the expert list, offsets, counts and x_row_source were written by a kernel that completed before
// the immediately preceding one waited (e.g. the routing, two launches before the down GEMM): they are read through
// L2 before the wait for the previous kernel, so the first weight blocks are requested while it finishes; else
// (the routing is the previous kernel) the kernel waits first.
// grid = (ceil(rows / (kWarps * 16)), 1, slots); block = kWarps * 32 threads.
template <int kTokenTiles, int kWarps, int kDepth, typename Output>
__global__ void __launch_bounds__(kWarps * 32)
fp8_gemm_grouped_gemv_kernel(const uint8_t* __restrict__ x,               // [max_rows or tokens, cols] e4m3
                             const float* __restrict__ x_scales,          // [max_rows or tokens, k_blocks]
                             const int32_t* __restrict__ expert_offsets,  // [E + 1]
                             const int32_t* __restrict__ expert_counts,   // [E]
                             const int32_t* __restrict__ active_experts,  // [>= gridDim.z]
                             const int32_t* __restrict__ x_row_source,    // [max_rows] or null
                             int x_row_divisor,
                             const uint8_t* __restrict__ w,               // [E, rows, cols] e4m3
                             const float* __restrict__ w_scales,          // [E, ceil(rows/128), k_blocks]
                             int64_t rows, int64_t cols, int k_blocks,
                             int prefetch_blocks,                         // L2 prefetch distance in K blocks
                             bool experts_settled,
                             Output* __restrict__ out) {                  // [max_rows, rows]
  static_assert(kTokenTiles >= 1 && kTokenTiles <= 2 && kDepth >= 1 && kWarps >= 1 && kWarps <= 32);
  // Unsettled, the expert list is the previous kernel's output: no weight can be read before the wait. Settled,
  // __ldcg reads it from L2 (where the earlier kernel's completion left it), never from a stale L1 line.
  if (!experts_settled) begin_dependent_kernel();
  const int expert = __ldcg(active_experts + blockIdx.z);
  if (expert < 0) return;
  const int count = __ldcg(expert_counts + expert);
  const int64_t begin = __ldcg(expert_offsets + expert);
  const uint8_t* w_expert = w + static_cast<int64_t>(expert) * rows * cols;
  const float* w_scales_expert = w_scales + static_cast<int64_t>(expert) * ((rows + 127) / 128) * k_blocks;
  const int lane = threadIdx.x % 32;
  const int group = lane / 4;
  const int lane_in_group = lane % 4;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * (kWarps * kSmallMRowsPerWarp) +
                       (threadIdx.x / 32) * kSmallMRowsPerWarp;
  if (row0 >= rows) return;  // no barrier below: a warp past the last row may leave
  constexpr int kTokens = kTokenTiles * 8;
  for (int m0 = 0; m0 < count; m0 += kTokens) {
    const int tokens = min(kTokens, count - m0);
    const int64_t first = begin + m0;
    const uint8_t* x_rows = x + first * cols;
    const float* x_scale_rows = x_scales + first * k_blocks;
    GemvOperands<kTokenTiles> op = gemv_operands<kTokenTiles>(w_expert, w_scales_expert, tokens, rows, cols, k_blocks, row0);
    if (x_row_source != nullptr) {
      // The same (clamped) tile rows as gemv_operands, each redirected to its source row of the unpermuted x.
      x_rows = x;
      x_scale_rows = x_scales;
#pragma unroll
      for (int t = 0; t < kTokenTiles; ++t) {
        const int source = __ldcg(x_row_source + first + min(t * 8 + group, tokens - 1)) / x_row_divisor;
        op.x_offset[t] = source * static_cast<int>(cols) + lane_in_group * 32;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int scale_source = __ldcg(x_row_source + first + min(t * 8 + 2 * lane_in_group + j, tokens - 1)) / x_row_divisor;
          op.x_scale_offset[t][j] = scale_source * k_blocks;
        }
      }
    }
    float acc[kTokenTiles][4];
    // Settled: the wait goes after the first pass's first weight requests (activations are the previous kernel's).
    gemv_accumulate<kTokenTiles, kDepth>(op, x_rows, x_scale_rows, 0, k_blocks, prefetch_blocks, acc,
                                         [experts_settled, m0] {
                                           if (experts_settled && m0 == 0) begin_dependent_kernel();
                                         });
    gemv_store_fragment(acc, tokens, rows, row0, out + first * rows);
  }
}

}  // namespace fathom::kernels::cuda::sm90
