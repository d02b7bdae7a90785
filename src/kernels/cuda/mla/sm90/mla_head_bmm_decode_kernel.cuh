#pragma once
// Decode form (1..64 tokens) of the per-head kv_b product of mla_head_bmm_kernel.cuh, built to stream W.
//
// Bit-identical to mla_head_bmm_kernel / mla_head_bmm_pipelined_kernel for every token: every mma.sync issued here
// is one the reference kernels issue, with the same operand registers -- the same 16 token rows (zeros past the
// last token), the same 8 output columns, the same k16 slice of W dequantized the same way (fp8x2_to_bf16x2:
// e4m3 -> half -> float, times the fp32 block scale, rounded to bf16) -- into the same fp32 accumulator, starting
// from 0.0f, in the same increasing-k order over the reference's k extent (4 * ceil(k / 64) k16 steps, the tail
// zero-padded), and the outputs are rounded to bf16 the same way. Only the data movement differs:
//  - a warp owns a distinct slice of W: kBlocks n8 blocks of one head over the whole k extent (k is never split:
//    a split would change the summation), streamed as chunks of 2 k16 steps, kDepth chunks in flight in
//    registers, a rolling ring as in fp8_gemm_gemv.cuh (for DeepSeek-V3 fp8 a warp's whole slice: W_UK 4 KB,
//    W_UV 8 KB);
//  - a chunk is rearranged in registers (fp8: byte permutes) and stored to a per-warp staging buffer laid out so
//    that one ldmatrix (.trans for W_UK) hands each lane exactly its B fragment bytes; a __syncwarp, no CTA
//    barrier, per chunk;
//  - the tokens of the CTA's head are staged once in shared memory (cp.async, zero-filled like the reference's A
//    tile) and read with ldmatrix; <= 8 tokens read only the 8 rows that can be non-zero (x2, the rest 0).
// Launched programmatically: W is read before the wait for the previous kernel; A after it, unless p.a_settled (A
// written two or more launches back, as q_nope is in the model's decode step behind mla_prepare), where A's loads
// are in flight too before the wait, under the previous kernel.
// kCombinedA (W_UV, <= 8 tokens: mla_project_split_values): A is not read from memory but combined from the split-KV
// decode's partial rows of the CTA's head (the combine kernel's sums, so its bits), so the rows the combine would
// write to out_latent and this kernel would read back never leave the multiprocessor; a CTA is a whole head.
// Shapes (checked by the host): k, n multiples of 16; w_rows_per_head and w_row_offset multiples of 16 (a warp's
// 16-row groups of W sit inside one 128-row scale block); kv_lora (w_cols) a multiple of 16; W and A 16-byte
// aligned with A strides multiples of 8 elements.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/mla/sm90/mla_decode_combine.cuh"
#include "kernels/cuda/mla/sm90/mla_head_bmm_kernel.cuh"
#include "kernels/cuda/mla/sm90/mma_primitives.cuh"
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda::mla_detail {

inline constexpr int kDecodeWarps = 4;
inline constexpr int kDecodeThreads = kDecodeWarps * 32;
inline constexpr int kDecodeMaxTokens = 64;
// The combined-A form (kCombinedA): one CTA per head, its 8 warps the head's 128 W_UV rows, so the head's partials are
// combined once, by 256 threads: each owns 8 columns of one sum lane (4 lanes x 64 column octets = 512 columns).
inline constexpr int kCombinedWarps = 8;
inline constexpr int kCombinedInFlight = 16;  // 16-byte partial loads in flight per thread

// Per-warp tiling. W_UK (rows are k, the output columns contiguous): 4 n8 blocks (32 columns) per warp. W_UV (rows
// are the output rows, k contiguous): 2 n8 blocks (16 rows) per warp, so its 128 rows per head still give 8 warps.
template <bool kWeightRowsAreK, bool kFp8>
struct DecodeLayout {
  static constexpr int kBlocks = kWeightRowsAreK ? 4 : 2;
  static constexpr int kWarpCols = kBlocks * 8;                      // output columns per warp
  static constexpr int kElemBytes = kFp8 ? 1 : 2;
  static constexpr int kChunkBytes = kWarpCols * 32 * kElemBytes;   // kBlocks n8 blocks x 32 k (2 k16 steps)
  static constexpr int kLoads = kChunkBytes / 512;                  // 16-byte loads per lane per chunk
  // Chunks in flight per warp (even). W_UV has half the warps of W_UK (8 per head against 16) and 4x the k extent,
  // so it keeps more in flight per warp: 8 KB for fp8 (its whole V3 slice), against 4 KB for fp8 W_UK.
  static constexpr int kDepth = kWeightRowsAreK ? 4 : (kFp8 ? 16 : 8);
  // fp8 scales per chunk: W_UK's 2 steps are 16-row groups that may sit in different 128-row blocks; W_UV's 2 steps
  // are k 32c..32c+31, always inside one 128-column block.
  static constexpr int kScales = kWeightRowsAreK ? 2 : 1;
  static_assert(kLoads >= 1 && kDepth >= 2 && kDepth % 2 == 0);
};

// CTAs per multiprocessor the kernel's register budget is set for (its launch bounds). fp8 W_UK up to 16 tokens: 5
// (96 registers, no spills): at 4 CTAs of 126 registers its 512 CTAs filled every register file, so the next
// kernel's CTAs could not start their weight stream under programmatic launch (mla_bench absorb_chain, H100: 1 token
// 5.98 -> 5.64 us, 8 tokens 6.26 -> 5.86; bench/RESULTS.md twelfth session); 32 tokens would spill at 5 and keep 4
// (128 registers). Others: 2.
template <bool kWeightRowsAreK, bool kFp8, int kTokens, bool kCombinedA = false>
constexpr int decode_min_blocks() {
  if (kCombinedA) return 1;  // 256 threads holding the W ring and kCombinedInFlight loads
  if (kTokens > 32 || !(kWeightRowsAreK && kFp8)) return 2;
  return kTokens <= 16 ? 5 : 4;
}

template <int kTokens>
constexpr int decode_a_rows() {
  return kTokens < 16 ? 8 : kTokens;
}

template <bool kCombinedA>
constexpr int decode_warps() {
  return kCombinedA ? kCombinedWarps : kDecodeWarps;
}

// Dynamic shared memory of mla_head_bmm_decode_kernel: the staged tokens [a_rows][k_steps * 16] bf16 (swizzled)
// and a double buffer of one chunk per warp.
template <bool kWeightRowsAreK, bool kFp8, int kTokens, bool kCombinedA = false>
constexpr int decode_smem_bytes(int k) {
  return decode_a_rows<kTokens>() * 4 * ceil_div_int(k, 64) * 32 +
         decode_warps<kCombinedA>() * 2 * DecodeLayout<kWeightRowsAreK, kFp8>::kChunkBytes;
}

// The split-KV decode's partials that kCombinedA combines into A (token t = sequence t): as mla_decode_combine reads
// them.
struct SplitPartialsA {
  const __nv_bfloat16* partial_out;  // [tokens, num_splits, num_heads, k] bf16, normalized
  const float* partial_lse;          // [tokens, num_splits, num_heads] log2-sum-exp
  const int32_t* seq_lens;           // [tokens]
  int32_t num_heads;
  int32_t num_splits;                // allocated splits (the row stride)
  int32_t tiles_per_split;
  int32_t min_tiles_per_split;
};

// One chunk of one lane's W loads (raw bytes) and, for fp8, the block scale(s) of its 2 k16 steps.
template <int kLoads, int kScales>
struct DecodeChunk {
  uint4 w[kLoads];
  float scale[kScales];
};

// grid (ceil(n / (kWarps * kWarpCols)), num_heads), kWarps * 32 threads (kWarps = decode_warps<kCombinedA>()),
// decode_smem_bytes<kWeightRowsAreK, kFp8, kTokens, kCombinedA>(p.k) bytes of dynamic shared memory; p.m <= kTokens.
// partials: read only with kCombinedA (then p.a is unused).
template <bool kWeightRowsAreK, bool kFp8, int kTokens, bool kCombinedA = false>
__global__ void __launch_bounds__(decode_warps<kCombinedA>() * 32,
                                  decode_min_blocks<kWeightRowsAreK, kFp8, kTokens, kCombinedA>())
    mla_head_bmm_decode_kernel(const HeadBmmParams p, const SplitPartialsA partials) {
  constexpr int kWarps = decode_warps<kCombinedA>(), kThreads = kWarps * 32;
  using Layout = DecodeLayout<kWeightRowsAreK, kFp8>;
  constexpr int kBlocks = Layout::kBlocks, kLoads = Layout::kLoads, kDepth = Layout::kDepth, kScales = Layout::kScales;
  constexpr int kChunkBytes = Layout::kChunkBytes;
  constexpr int kARows = decode_a_rows<kTokens>();
  constexpr int kMTiles = kTokens < 16 ? 1 : kTokens / 16;
  static_assert(kTokens == 8 || kTokens == 16 || kTokens == 32 || kTokens == 64);
  static_assert(!kCombinedA || (!kWeightRowsAreK && kTokens == 8), "combined A: W_UV of at most 8 tokens");

  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int h = blockIdx.y;
  const int k_steps = 4 * ceil_div_int(p.k, kBmmTile);  // the reference's k16 steps: whole 64-wide k tiles
  const int chunks = k_steps / 2;
  const int a_row_bytes = k_steps * 32;                  // a multiple of 128: the swizzle needs 8-chunk rows
  const uint32_t a_tile = smem_u32(smem);
  const uint32_t w_buffer = a_tile + kARows * a_row_bytes + warp * 2 * kChunkBytes;
  const int64_t w_row_base = static_cast<int64_t>(h) * p.w_rows_per_head + p.w_row_offset;
  const int n_base = (blockIdx.x * kWarps + warp) * Layout::kWarpCols;
  const bool active = n_base < p.n;

  // Per-lane W addressing (chunk 0) and the first k16 step its loads belong to. Layouts (chunk = 2 k16 steps):
  //  fp8  W_UK: lane = (step sp, column half, pair-row pr); loads rows 16sp+2pr and +1, columns 16*half..+15.
  //  fp8  W_UV: lane = (step sp, row r); loads row r, k 16sp..+15.
  //  bf16 W_UK: load i = k rows 8i + (lane & 7), columns 8 * (lane >> 3)..+7 (block lane >> 3).
  //  bf16 W_UV: load i = row lane & 15, k 16i + 8 * (lane >> 4)..+7.
  const uint8_t* w_lane = static_cast<const uint8_t*>(p.w);
  int64_t load_offset[kLoads];  // bytes from w_lane
  int load_step[kLoads];        // k16 step within the chunk
  bool lane_ok = active;
  int64_t chunk_stride;         // bytes between consecutive chunks
  if constexpr (kWeightRowsAreK) {
    chunk_stride = 32ll * p.w_cols * Layout::kElemBytes;
    if constexpr (kFp8) {
      const int sp = lane >> 4, half = (lane >> 3) & 1, pr = lane & 7;
      const int col = n_base + 16 * half;
      lane_ok = lane_ok && col < p.n;
#pragma unroll
      for (int i = 0; i < kLoads; ++i) {
        load_offset[i] = (w_row_base + 16 * sp + 2 * pr + i) * p.w_cols + col;
        load_step[i] = sp;
      }
    } else {
      const int col = n_base + 8 * (lane >> 3);
      lane_ok = lane_ok && col < p.n;
#pragma unroll
      for (int i = 0; i < kLoads; ++i) {
        load_offset[i] = ((w_row_base + 8 * i + (lane & 7)) * p.w_cols + col) * 2;
        load_step[i] = i >> 1;
      }
    }
  } else {
    chunk_stride = 32 * Layout::kElemBytes;
    const int64_t row = w_row_base + n_base + (lane & 15);  // n_base + 16 <= n (n % 16 == 0)
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      if constexpr (kFp8) {
        load_offset[i] = row * p.w_cols + 16 * (lane >> 4);
        load_step[i] = lane >> 4;
      } else {
        load_offset[i] = (row * p.w_cols + 16 * i + 8 * (lane >> 4)) * 2;
        load_step[i] = i;
      }
    }
  }
  // fp8 block scale of k16 step s of the warp's slice (one per step: the reference's scale of each of its elements):
  // W_UK: row block (w_row_base + 16s) / 128, column block n_base / 128 (32 columns never straddle a block);
  // W_UV: row block (w_row_base + n_base) / 128 (16 rows inside one block), column block 16s / 128.
  auto scale_of_step = [&](int s) -> float {
    if (16 * s >= p.k) return 0.0f;  // zero-padded step of the last 64-wide tile (W is zero there too)
    if constexpr (kWeightRowsAreK) {
      return __ldg(p.w_scale_inv + ((w_row_base + 16 * s) / 128) * p.scale_cols + n_base / 128);
    } else {
      return __ldg(p.w_scale_inv + ((w_row_base + n_base) / 128) * p.scale_cols + (16 * s) / 128);
    }
  };

  auto load_chunk = [&](int c, DecodeChunk<kLoads, kScales>& chunk) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const bool valid = lane_ok && 16 * (2 * c + load_step[i]) < p.k;
      chunk.w[i] = valid ? __ldg(reinterpret_cast<const uint4*>(w_lane + load_offset[i] + c * chunk_stride))
                         : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int t = 0; t < kScales; ++t) chunk.scale[t] = kFp8 ? scale_of_step(2 * c + t) : 0.0f;
  };

  // Rearranges a chunk into the staging buffer so that ldmatrix yields B fragments (see fragments()).
  auto stage_chunk = [&](const DecodeChunk<kLoads, kScales>& chunk, uint32_t buffer) {
    if constexpr (kFp8 && kWeightRowsAreK) {
      // Interleave rows 2pr and 2pr+1 column by column: b16 element (pair-row pr, column n) = {W[2pr][n],
      // W[2pr+1][n]}. Matrix (sp, block j) row 2(pr & 3) + (pr >> 2) holds pair-row pr of its 8 columns, so
      // ldmatrix.trans gives lane (g, tq) {pair-row tq, pair-row tq + 4} at column g: k = 2tq, 2tq+1, 2tq+8, 2tq+9.
      const int sp = lane >> 4, half = (lane >> 3) & 1, pr = lane & 7;
      const uint32_t r0[4] = {chunk.w[0].x, chunk.w[0].y, chunk.w[0].z, chunk.w[0].w};
      const uint32_t r1[4] = {chunk.w[1].x, chunk.w[1].y, chunk.w[1].z, chunk.w[1].w};
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const uint32_t lo0 = r0[2 * e], lo1 = r1[2 * e], hi0 = r0[2 * e + 1], hi1 = r1[2 * e + 1];
        const uint4 row = make_uint4(__byte_perm(lo0, lo1, 0x5140), __byte_perm(lo0, lo1, 0x7362),
                                     __byte_perm(hi0, hi1, 0x5140), __byte_perm(hi0, hi1, 0x7362));
        store_shared_v4(buffer + (sp * 4 + 2 * half + e) * 128 + (2 * (pr & 3) + (pr >> 2)) * 16, row);
      }
    } else if constexpr (kFp8) {
      // Row r, k 16sp..+15 -> words X_t = bytes {2t, 2t+1, 2t+8, 2t+9} (lane tq = t's fragment bytes), stored as
      // row r & 7 of matrix (sp, block r >> 3) = lane >> 3: plain ldmatrix gives lane (g, tq) X_tq of row g.
      const uint4 w = chunk.w[0];
      store_shared_v4(buffer + lane * 16, make_uint4(__byte_perm(w.x, w.z, 0x5410), __byte_perm(w.x, w.z, 0x7632),
                                                     __byte_perm(w.y, w.w, 0x5410), __byte_perm(w.y, w.w, 0x7632)));
    } else if constexpr (kWeightRowsAreK) {
      // Load i is row lane & 7 of matrix (k octet i, block lane >> 3), at (octet * 4 + block) * 128.
#pragma unroll
      for (int i = 0; i < kLoads; ++i)
        store_shared_v4(buffer + (i * 4 + (lane >> 3)) * 128 + (lane & 7) * 16, chunk.w[i]);
    } else {
      // Load i is row (lane & 15) & 7 of matrix (step i: block (lane & 15) >> 3, k octet lane >> 4), at
      // i * 512 + (2 * block + octet) * 128.
      const int r = lane & 15;
#pragma unroll
      for (int i = 0; i < kLoads; ++i)
        store_shared_v4(buffer + i * 512 + (2 * (r >> 3) + (lane >> 4)) * 128 + (r & 7) * 16, chunk.w[i]);
    }
  };

  // b[t][j]: mma B fragment (b0, b1) of k16 step t of the chunk, n8 block j.
  auto fragments = [&](uint32_t buffer, const float (&scale)[2], uint32_t (&b)[2][kBlocks][2]) {
    if constexpr (kFp8) {
      uint32_t x[2][kBlocks];  // fragment bytes {k 2tq, 2tq+1 | 2tq+8, 2tq+9} at column g
      if constexpr (kWeightRowsAreK) {
        uint32_t r[4];
#pragma unroll
        for (int t = 0; t < 2; ++t) {
          ldmatrix_x4_trans(r, buffer + t * 512 + lane * 16);
#pragma unroll
          for (int j = 0; j < kBlocks; ++j) x[t][j] = r[j];
        }
      } else {
        uint32_t r[4];
        ldmatrix_x4(r, buffer + lane * 16);
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
          for (int j = 0; j < kBlocks; ++j) x[t][j] = r[2 * t + j];
      }
#pragma unroll
      for (int t = 0; t < 2; ++t)
#pragma unroll
        for (int j = 0; j < kBlocks; ++j) {
          b[t][j][0] = fp8x2_to_bf16x2(x[t][j] & 0xffffu, scale[t]);
          b[t][j][1] = fp8x2_to_bf16x2(x[t][j] >> 16, scale[t]);
        }
    } else if constexpr (kWeightRowsAreK) {
      uint32_t r[4];
#pragma unroll
      for (int t = 0; t < 2; ++t)
#pragma unroll
        for (int jp = 0; jp < kBlocks / 2; ++jp) {
          // Lane address: matrix q = lane >> 3 is (k octet 2t + (q & 1), block 2jp + (q >> 1)).
          const int q = lane >> 3;
          ldmatrix_x4_trans(r, buffer + ((2 * t + (q & 1)) * 4 + 2 * jp + (q >> 1)) * 128 + (lane & 7) * 16);
          b[t][2 * jp][0] = r[0];
          b[t][2 * jp][1] = r[1];
          b[t][2 * jp + 1][0] = r[2];
          b[t][2 * jp + 1][1] = r[3];
        }
    } else {
      uint32_t r[4];
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        ldmatrix_x4(r, buffer + t * 512 + lane * 16);
        b[t][0][0] = r[0];
        b[t][0][1] = r[1];
        b[t][1][0] = r[2];
        b[t][1][1] = r[3];
      }
    }
  };

  float acc[kMTiles][kBlocks][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int j = 0; j < kBlocks; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][j][e] = 0.0f;

  DecodeChunk<kLoads, kScales> ring[kDepth];
  if (active) {  // weights only: issued before the programmatic wait, in flight while the previous kernel ends
#pragma unroll
    for (int i = 0; i < kDepth; ++i) {
      if (i < chunks) load_chunk(i, ring[i]);
    }
  }
  if (!p.a_settled) begin_dependent_kernel();  // A is the previous kernel's output (programmatic_launch.cuh)

  if constexpr (kCombinedA) {
    // A [kARows tokens][k] combined from the partials (k a multiple of 64, <= 512: the host checks; rows past p.m
    // zero), one token at a time: thread (lane group v, octet o) sums columns 8o..8o+7 of the splits of sum lane v
    // (s % 4 == v, in split order), 16 bytes per load; the lanes then meet in shared memory and are added in their
    // order, ((l0 + l1) + l2) + l3, times the inverse total: the combine kernel's sums, so its bits.
    static_assert(kThreads == kCombineSumLanes * 64, "4 sum lanes x 64 column octets");
    __shared__ float split_weights[kARows][kCombineMaxSplits];
    __shared__ float inv_totals[kARows];
    __shared__ int split_counts[kARows];
    __shared__ float4 lane_sums[kCombineSumLanes][2][64];  // [lane][column half][octet]
    for (int t = warp; t < p.m; t += kWarps) {
      const int splits = stored_split_count(partials.seq_lens[t], partials.num_splits, partials.tiles_per_split,
                                            partials.min_tiles_per_split);
      const int64_t first_row = static_cast<int64_t>(t) * partials.num_splits * partials.num_heads + h;
      combine_split_weights(partials.partial_lse + first_row, partials.num_heads, splits, split_weights[t],
                            &inv_totals[t]);
      if (lane == 0) split_counts[t] = splits;
    }
    __syncthreads();
    const int sum_lane = tid / 64, octet = tid % 64;
    const bool column_ok = 8 * octet < p.k;
    const int64_t split_stride = static_cast<int64_t>(partials.num_heads) * p.k;  // elements between splits
    for (int t = 0; t < kARows; ++t) {
      if (t < p.m) {  // uniform across the CTA
        const int splits = split_counts[t];
        const float* weights = split_weights[t];
        const __nv_bfloat16* first = partials.partial_out +
                                     (static_cast<int64_t>(t) * partials.num_splits * partials.num_heads + h) * p.k +
                                     8 * octet;
        float4 low = make_float4(0.0f, 0.0f, 0.0f, 0.0f), high = low;  // columns 8o..8o+3, 8o+4..8o+7
#pragma unroll 1
        for (int base = sum_lane; base < splits; base += kCombineSumLanes * kCombinedInFlight) {
          uint4 rows[kCombinedInFlight];
#pragma unroll
          for (int j = 0; j < kCombinedInFlight; ++j) {  // no dependence between the loads: they overlap
            const int s = base + kCombineSumLanes * j;
            rows[j] = column_ok && s < splits ? *reinterpret_cast<const uint4*>(first + s * split_stride)
                                              : make_uint4(0u, 0u, 0u, 0u);
          }
#pragma unroll
          for (int j = 0; j < kCombinedInFlight; ++j) {
            const int s = base + kCombineSumLanes * j;
            if (s >= splits) break;
            add_weighted_columns(low, weights[s], PartialColumns{rows[j].x, rows[j].y});
            add_weighted_columns(high, weights[s], PartialColumns{rows[j].z, rows[j].w});
          }
        }
        lane_sums[sum_lane][0][octet] = low;
        lane_sums[sum_lane][1][octet] = high;
      }
      __syncthreads();
      // Thread tid: columns 2 tid, 2 tid + 1 (octet tid / 4, half (tid / 2) % 2, pair tid % 2 of the half).
      const int column = 2 * tid;
      uint32_t pair = 0u;
      if (t < p.m && column < p.k) {
        const int o = column / 8, half = (column / 4) % 2;
        float2 sum = tid % 2 == 0 ? make_float2(lane_sums[0][half][o].x, lane_sums[0][half][o].y)
                                  : make_float2(lane_sums[0][half][o].z, lane_sums[0][half][o].w);
#pragma unroll
        for (int v = 1; v < kCombineSumLanes; ++v) {
          const float4 x = lane_sums[v][half][o];
          sum.x += tid % 2 == 0 ? x.x : x.z;
          sum.y += tid % 2 == 0 ? x.y : x.w;
        }
        const float inv_total = inv_totals[t];
        pair = pack_bf16x2(sum.x * inv_total, sum.y * inv_total);
      }
      if (column < k_steps * 16) store_shared_u32(a_tile + swizzled_chunk_offset(t, column / 8, a_row_bytes) +
                                                      (column % 8) * 2, pair);
      __syncthreads();  // lane_sums is refilled for the next token
    }
  } else {
    // Stage A [kARows tokens][k_steps * 16] (rows past p.m and k past p.k zero-filled, as the reference's A tile).
    const int row_chunks = k_steps * 2;
    for (int row = warp; row < kARows; row += kWarps) {
      for (int c = lane; c < row_chunks; c += 32) {
        const int k = c * 8;
        const bool valid = row < p.m && k < p.k;
        const __nv_bfloat16* src = valid ? p.a + row * p.a_token_stride + h * p.a_head_stride + k : p.a;
        cp_async_16(a_tile + swizzled_chunk_offset(row, c, a_row_bytes), src, valid ? 16 : 0);
      }
    }
    cp_async_commit();
  }
  // Settled A in flight: now the wait (out may still be read by earlier kernels until the previous kernel has
  // completed), then the successor's launch, which must follow this wait (programmatic_launch.cuh).
  if (p.a_settled) begin_dependent_kernel();

  cp_async_wait_all();
  __syncthreads();  // the staged tokens are visible (the only CTA barrier but for kCombinedA's weights)
  if (!active) return;

  // Rolling ring: slot i holds chunk base + i; it is staged, refilled with chunk base + i + kDepth, then its
  // fragments are multiplied. kDepth is even, so the staging buffer of chunk base + i is i & 1.
#pragma unroll 1
  for (int base = 0; base < chunks; base += kDepth) {
#pragma unroll
    for (int i = 0; i < kDepth; ++i) {
      const int c = base + i;
      if (c < chunks) {
        const uint32_t buffer = w_buffer + (i & 1) * kChunkBytes;
        float scale[2];
        scale[0] = ring[i].scale[0];
        if constexpr (kScales == 2) {
          scale[1] = ring[i].scale[1];
        } else {  // W_UV: the chunk's scale, zero where step 2c+1 is padding (as scale_of_step gives)
          scale[1] = 32 * c + 16 < p.k ? ring[i].scale[0] : 0.0f;
        }
        stage_chunk(ring[i], buffer);
        if (c + kDepth < chunks) load_chunk(c + kDepth, ring[i]);
        // Orders this chunk's stores before the ldmatrix reads below, and the reads of the chunk that used this
        // buffer before (c - 2, read before the previous chunk's barrier) before this chunk's stores.
        __syncwarp();
        uint32_t b[2][kBlocks][2];
        fragments(buffer, scale, b);
#pragma unroll
        for (int t = 0; t < 2; ++t) {
          const int step = 2 * c + t;
          uint32_t a[kMTiles][4];
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            if constexpr (kTokens < 16) {
              uint32_t rows[2];  // tokens 0..7 only: rows 8..15 of the tile are zero
              ldmatrix_x2(rows, a_tile + swizzled_chunk_offset(lane & 7, 2 * step + ((lane >> 3) & 1), a_row_bytes));
              a[mt][0] = rows[0];
              a[mt][1] = 0u;
              a[mt][2] = rows[1];
              a[mt][3] = 0u;
            } else {
              ldmatrix_x4(a[mt], a_tile + swizzled_chunk_offset(mt * 16 + (lane & 15), 2 * step + (lane >> 4),
                                                               a_row_bytes));
            }
          }
#pragma unroll
          for (int j = 0; j < kBlocks; ++j)
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) mma_bf16_16816(acc[mt][j], a[mt], b[t][j][0], b[t][j][1]);
        }
      }
    }
  }

  // The reference kernels' epilogue (store_head_bmm_tiles): the same rounding and bits.
  static_assert(kBlocks % 2 == 0, "output n8 tiles are stored in pairs");
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < (kTokens < 16 ? 1 : 2); ++half) {
      const int m = mt * 16 + g + 8 * half;
      __nv_bfloat16* out = p.out + static_cast<int64_t>(m) * p.out_token_stride + h * p.out_head_stride;
#pragma unroll
      for (int j = 0; j < kBlocks; j += 2)
        store_head_bmm_tiles(p, out, m < p.m, n_base + j * 8, tq, half, acc[mt][j], acc[mt][j + 1]);
    }
}

}  // namespace fathom::kernels::cuda::mla_detail
