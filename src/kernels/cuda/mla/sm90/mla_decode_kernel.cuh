#pragma once
// MLA decode kernel (absorbed form) on tensor cores (mma.sync m16n8k16 bf16, fp32 accumulate).
//
// One CTA = one sequence b x one group of kHeadGroup heads x one split (a contiguous run of 64-token tiles).
// The head group's queries Q [kHeadGroup, latent ; rope] stay in shared memory (16-head groups: in registers);
// KV tiles [64 tokens, row] stream through a two-stage cp.async pipeline (three stages for 16-head groups, which are
// memory-bound), so each KV row is read once per CTA for all its heads.
// Per tile (8 warps):
//   scores: S[heads, 64] = Q · Kᵀ over the full row (latent + rope). Warp (wm, wn) computes 16 heads x
//           (64 / kTokenWarps) tokens; row maxima are merged across the kTokenWarps warps of a head row
//           through shared memory, so every warp applies the same running max. With kScoreWgmma (64 heads),
//           warpgroup wn issues wgmma m64n32k16 on Q and its 32 tokens straight from shared memory (same
//           accumulator layout as the mma.sync path); otherwise ldmatrix + mma.sync.
//   P = exp2(S·scale·log2e − m) in bf16 -> shared memory, with m the running max of the previous tiles (no max
//           exchange, no rescale) unless the tile's scores exceed it by kLazyRescaleLog2; then the tile maxima are
//           exchanged, m and alpha (rescale of the running output, -> shared) updated and P rewritten.
//   The next tile's copies are issued behind the score MMAs (wgmma), its page-table reads before them.
//   values: O[heads, latent] = alpha·O + P · V with V = the tile's latent columns; warp w owns
//           latent columns [w·kLatentPad/8, (w+1)·kLatentPad/8) for all heads of the group (mma.sync), or,
//           with kValueWgmma (64 heads, latent 512), warpgroup wn issues wgmma m64n256k16 for columns
//           [256·wn, 256·wn + 256) with P (K-major) and V (N-major) straight from shared memory.
// At the end: O / l, written as bf16 (one split) or as a bf16 partial + fp32 log2-sum-exp (several splits).
// Q and KV tiles use the k-block-major 128-byte-swizzle layout (kblock_chunk_offset), 1024-byte aligned.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/mla/sm90/mla_decode_splits.cuh"
#include "kernels/cuda/mla/sm90/mma_primitives.cuh"
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda::mla_detail {

inline constexpr int kDecodeThreads = 256;
inline constexpr float kLazyRescaleLog2 = 8.0f;  // scores may exceed the softmax reference max by this (log2 units)
inline constexpr int kDecodeWarps = kDecodeThreads / 32;

struct DecodeKernelParams {
  const __nv_bfloat16* q_latent;  // [batch, num_heads, kv_lora]
  const __nv_bfloat16* q_pe;      // [batch, num_heads, q_pe_head_stride] (first `rope` values of each head)
  int64_t q_pe_head_stride;       // elements
  const __nv_bfloat16* cache;     // [num_pages, page_size, kv_lora + rope]
  const int32_t* page_table;      // [batch, max_pages_per_seq]
  const int32_t* seq_lens;        // [batch]
  __nv_bfloat16* out_latent;      // [batch, num_heads, kv_lora]          (num_splits == 1)
  __nv_bfloat16* partial_out;     // [batch, num_splits, num_heads, kv_lora] (num_splits > 1), normalized
  float* partial_lse;             // [batch, num_splits, num_heads] log2(sum exp2) + max
  int32_t num_heads;
  int32_t kv_lora;                // actual latent width (<= kLatentPad)
  int32_t rope;                   // actual rope width (<= kRopePad)
  int32_t page_size;              // tokens per page
  int32_t page_shift;             // log2(page_size) when it is a power of two, else -1 (integer division)
  int32_t max_pages_per_seq;
  int32_t num_splits;
  int32_t tiles_per_split;        // > 0: split s covers tiles [s * tiles_per_split, ...); 0: even division
  int32_t min_tiles_per_split;    // even division: at least this many tiles per split (splits past the end: empty)
  float scale_log2;               // softmax_scale * log2(e)
  int32_t vector_loads;           // 1: kv_lora == kLatentPad, rope == kRopePad and 16-byte aligned rows
  int32_t late_successor_launch;  // 1: seesaw / warp-specialized let the combine launch at their output (plan)
  int32_t kv_loads_before_wait;   // 1: the kernels load their first KV tiles before the wait (plan)
};

template <int kLatentPad, int kRopePad, int kHeadGroup>
struct DecodeLayout {
  static constexpr int kRowElems = kLatentPad + kRopePad;  // one smem row: [latent ; rope], padded
  static constexpr int kRowChunks = kRowElems / 8;
  static constexpr int kRowBytes = kRowElems * 2;
  static constexpr int kKSteps = kRowElems / 16;
  static constexpr int kHeadWarps = kHeadGroup / 16;            // score phase: warps along heads
  static constexpr int kTokenWarps = kDecodeWarps / kHeadWarps;  // score phase: warps along tokens
  static constexpr int kTokensPerWarp = kDecodeTileTokens / kTokenWarps;
  static constexpr int kScoreNTiles = kTokensPerWarp / 8;
  static constexpr int kHeadTiles = kHeadGroup / 16;             // value phase: m-tiles per warp
  static constexpr int kDimsPerWarp = kLatentPad / kDecodeWarps;
  static constexpr int kOutNTiles = kDimsPerWarp / 8;
  static constexpr int kPRowBytes = kDecodeTileTokens * 2;       // 8 chunks
  static constexpr int kRedFloats = kTokenWarps * kHeadGroup;

  // 16-head groups keep Q in registers (the mma.sync score path: 16 rows are every warp's A fragments), which leaves
  // room for a third KV stage: two tiles in flight where the kernel is memory-bound (TP8). Q passes through stage 2.
  static constexpr bool kQInRegisters = kHeadGroup == 16;
  static constexpr int kStages = kQInRegisters ? 3 : 2;
  static constexpr int kTileBytes = kDecodeTileTokens * kRowBytes;
  static constexpr int kKOffset = kQInRegisters ? 0 : kHeadGroup * kRowBytes;
  static constexpr int kQOffset = kQInRegisters ? kKOffset + 2 * kTileBytes : 0;
  static constexpr int kPOffset = kKOffset + kStages * kTileBytes;
  static constexpr int kRedMaxOffset = kPOffset + kHeadGroup * kPRowBytes;
  static constexpr int kAlphaOffset = kRedMaxOffset + kRedFloats * 4;
  static constexpr int kRedSumOffset = kAlphaOffset + kHeadGroup * 4;
  static constexpr int kFinalMaxOffset = kRedSumOffset + kRedFloats * 4;
  static constexpr int kSmemBytes = kFinalMaxOffset + kHeadGroup * 4 + 1024;  // + slack to align the base to 1 KB

  static_assert(kHeadGroup == 16 || kHeadGroup == 32 || kHeadGroup == 64, "head group 16, 32 or 64");
  static_assert(kLatentPad % 128 == 0, "value phase: 8 warps x 16-column pairs of n-tiles");
  static_assert(kRopePad % 16 == 0 && kRowChunks % 8 == 0, "rows: whole k16 steps, swizzle groups of 8 chunks");
  static_assert(kScoreNTiles == 1 || kScoreNTiles % 2 == 0, "score n-tiles loaded in pairs");
  static_assert(kSmemBytes <= 232448, "shared memory per block on sm_90");
  static_assert(!kQInRegisters || kHeadGroup * kRowBytes <= kTileBytes, "Q is staged in a KV stage");
};

// Row h's output as bf16: out_latent (one split) or the split's partial row.
__device__ __forceinline__ __nv_bfloat16* decode_output_row(const DecodeKernelParams& p, int b, int split, int h) {
  return p.num_splits == 1
             ? p.out_latent + (static_cast<int64_t>(b) * p.num_heads + h) * p.kv_lora
             : p.partial_out + ((static_cast<int64_t>(b) * p.num_splits + split) * p.num_heads + h) * p.kv_lora;
}

// Stores head h's output columns [col0, col0 + 16) (two adjacent n8 fragment tiles: this thread's columns col0 + 2·tq,
// +1 in first_pair and col0 + 8 + 2·tq, +1 in second_pair) as bf16, 8 bytes per thread (quad_bf16x4_columns). Every
// lane must call it; valid: this lane's row exists.
__device__ __forceinline__ void store_decode_output_tiles(const DecodeKernelParams& p, int b, int split, int h,
                                                          bool valid, int col0, int tq, float2 first_pair,
                                                          float2 second_pair) {
  const uint2 columns = quad_bf16x4_columns(pack_bf16x2(first_pair.x, first_pair.y),
                                            pack_bf16x2(second_pair.x, second_pair.y), tq);
  const int col = col0 + 4 * tq;
  if (!valid || col >= p.kv_lora) return;
  store_bf16x4(decode_output_row(p, b, split, h) + col, columns, p.kv_lora - col);
}

// Output of an empty sequence without splits for heads [head_base, head_base + head_group): zeros. (Empty splits of
// a split plan write nothing: the combine reads only the splits that hold tiles.) Called by all threads of the CTA.
__device__ __forceinline__ void store_empty_output(const DecodeKernelParams& p, int b, int head_base, int head_group) {
  for (int idx = threadIdx.x; idx < head_group * p.kv_lora; idx += kDecodeThreads) {
    const int h = head_base + idx / p.kv_lora, d = idx % p.kv_lora;
    if (h < p.num_heads) p.out_latent[(static_cast<int64_t>(b) * p.num_heads + h) * p.kv_lora + d] = __float2bfloat16(0.0f);
  }
}

// Cache row (slot) of sequence position `token`: [page, offset] through the sequence's page table.
__device__ __forceinline__ int64_t cache_slot(const DecodeKernelParams& p, const int32_t* pages, int token) {
  if (p.page_shift >= 0)
    return (static_cast<int64_t>(pages[token >> p.page_shift]) << p.page_shift) + (token & (p.page_size - 1));
  return static_cast<int64_t>(pages[token / p.page_size]) * p.page_size + token % p.page_size;
}

// First and one-past-last 64-token tile of split `split` of a sequence of seq_len tokens.
__device__ __forceinline__ int2 split_tile_range(const DecodeKernelParams& p, int split, int seq_len) {
  const int total_tiles = ceil_div_int(seq_len, kDecodeTileTokens);
  const int tiles = split_tiles(total_tiles, p.num_splits, p.tiles_per_split, p.min_tiles_per_split);
  const int tile_begin = split * tiles;
  return make_int2(tile_begin, min(total_tiles, tile_begin + tiles));
}

// The seesaw / warp-specialized kernels' wait for their predecessor (launched programmatically,
// programmatic_launch.cuh), then the successor's launch unless the plan lets it launch only at their output.
__device__ __forceinline__ void wait_then_allow_successor(const DecodeKernelParams& p) {
  wait_for_predecessor();
  if (!p.late_successor_launch) allow_successor_launch();
}

template <int kLatentPad, int kRopePad, int kHeadGroup, bool kScoreWgmma, bool kValueWgmma>
__global__ void __launch_bounds__(kDecodeThreads, 1) mla_decode_kernel(const DecodeKernelParams p) {
  // Launched programmatically (programmatic_launch.cuh): waits for the predecessor first, or after issuing the first
  // KV tile's loads (p.kv_loads_before_wait: cache rows, page table and seq_lens come from two or more launches back),
  // always before it reads q_latent, the previous launch's output.
  if (!p.kv_loads_before_wait) begin_dependent_kernel();
  using L = DecodeLayout<kLatentPad, kRopePad, kHeadGroup>;
  static_assert(!kScoreWgmma || kHeadGroup == 64, "wgmma scores: one warpgroup per 32 tokens of 64 heads");
  static_assert(!kValueWgmma || (kHeadGroup == 64 && kLatentPad == 512), "wgmma values: 2 warpgroups x 256 columns");
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023u)) & 1023u);
  const uint32_t q_smem = smem_u32(smem + L::kQOffset);
  const uint32_t k_smem = smem_u32(smem + L::kKOffset);
  const uint32_t p_smem = smem_u32(smem + L::kPOffset);
  float* red_max = reinterpret_cast<float*>(smem + L::kRedMaxOffset);    // [kTokenWarps, kHeadGroup]
  float* alpha_sh = reinterpret_cast<float*>(smem + L::kAlphaOffset);    // [kHeadGroup]
  float* red_sum = reinterpret_cast<float*>(smem + L::kRedSumOffset);    // [kTokenWarps, kHeadGroup]
  float* final_max = reinterpret_cast<float*>(smem + L::kFinalMaxOffset);  // [kHeadGroup]

  const int head_base = blockIdx.x * kHeadGroup;
  const int split = blockIdx.y;
  const int b = blockIdx.z;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, tq = lane & 3;

  const int seq_len = p.seq_lens[b];
  const int2 tile_range = split_tile_range(p, split, seq_len);
  const int tile_begin = tile_range.x, tile_end = tile_range.y;

  if (tile_begin >= tile_end) {  // empty split (the combine skips it) or empty sequence
    if (p.kv_loads_before_wait) begin_dependent_kernel();
    if (p.num_splits == 1) store_empty_output(p, b, head_base, kHeadGroup);
    return;
  }

  const int64_t q_latent_batch = static_cast<int64_t>(b) * p.num_heads * p.kv_lora;
  const int64_t q_pe_batch = static_cast<int64_t>(b) * p.num_heads * p.q_pe_head_stride;
  const int32_t* pages = p.page_table + static_cast<int64_t>(b) * p.max_pages_per_seq;
  const int64_t cache_row_elems = static_cast<int64_t>(p.kv_lora) + p.rope;

  // ---- KV tile loader: rows [tile*64, tile*64+64) of the sequence into stage `stage`; rows past seq_len are 0.
  // Vector path: 8 threads per row (one 16-byte chunk of every 128-byte block each; a warp's request covers 4 whole
  // lines); this thread's rows are (tid >> 3) + 32 * pass, whose cache slots fetch_slots reads (-1: past seq_len).
  constexpr int kRowsPerPass = kDecodeThreads / 8;
  constexpr int kLoadPasses = kDecodeTileTokens / kRowsPerPass;
  auto fetch_slots = [&](int tile, int64_t (&slots)[kLoadPasses]) {
#pragma unroll
    for (int pass = 0; pass < kLoadPasses; ++pass) {
      const int token = tile * kDecodeTileTokens + (tid >> 3) + kRowsPerPass * pass;
      slots[pass] = token < seq_len ? cache_slot(p, pages, token) : -1;
    }
  };
  auto load_tile = [&](int stage, int tile, const int64_t (&slots)[kLoadPasses]) {
    const uint32_t base = k_smem + stage * L::kTileBytes;
    if (p.vector_loads) {
      const int chunk = tid & 7;
#pragma unroll
      for (int pass = 0; pass < kLoadPasses; ++pass) {
        const int row = (tid >> 3) + kRowsPerPass * pass;
        const bool valid = slots[pass] >= 0;
        const __nv_bfloat16* src = valid ? p.cache + slots[pass] * cache_row_elems : p.cache;
#pragma unroll
        for (int block = 0; block < L::kRowChunks / 8; ++block) {
          const int c = block * 8 + chunk;
          cp_async_16(base + kblock_chunk_offset(row, c, kDecodeTileTokens), valid ? src + c * 8 : p.cache,
                      valid ? 16 : 0);
        }
      }
    } else {
      for (int row = warp; row < kDecodeTileTokens; row += kDecodeWarps) {
        const int token = tile * kDecodeTileTokens + row;
        const __nv_bfloat16* src = nullptr;
        if (token < seq_len) src = p.cache + cache_slot(p, pages, token) * cache_row_elems;
        for (int col = lane; col < L::kRowElems; col += 32) {
          __nv_bfloat16 value = __float2bfloat16(0.0f);
          if (src != nullptr) {
            if (col < kLatentPad) {
              if (col < p.kv_lora) value = src[col];
            } else if (col - kLatentPad < p.rope) {
              value = src[p.kv_lora + (col - kLatentPad)];
            }
          }
          store_shared_u16(base + kblock_elem_offset(row, col, kDecodeTileTokens), __bfloat16_as_ushort(value));
        }
      }
    }
  };

  int64_t slots[kLoadPasses];
  auto load_first_tile = [&] {
    if (p.vector_loads) fetch_slots(tile_begin, slots);
    load_tile(0, tile_begin, slots);
  };
  if (p.kv_loads_before_wait) {
    load_first_tile();
    begin_dependent_kernel();
  }
  // ---- Q: [kHeadGroup, kRowElems], zero rows for heads >= num_heads and zero padding columns.
  if (p.vector_loads) {
    for (int idx = tid; idx < kHeadGroup * L::kRowChunks; idx += kDecodeThreads) {
      const int r = idx / L::kRowChunks, c = idx % L::kRowChunks, h = head_base + r;
      const bool valid = h < p.num_heads;
      const __nv_bfloat16* src = p.q_latent;
      if (valid) {
        src = c < kLatentPad / 8 ? p.q_latent + q_latent_batch + static_cast<int64_t>(h) * p.kv_lora + c * 8
                                 : p.q_pe + q_pe_batch + h * p.q_pe_head_stride + (c - kLatentPad / 8) * 8;
      }
      cp_async_16(q_smem + kblock_chunk_offset(r, c, kHeadGroup), src, valid ? 16 : 0);
    }
  } else {
    for (int r = warp; r < kHeadGroup; r += kDecodeWarps) {
      const int h = head_base + r;
      for (int col = lane; col < L::kRowElems; col += 32) {
        __nv_bfloat16 value = __float2bfloat16(0.0f);
        if (h < p.num_heads) {
          if (col < kLatentPad) {
            if (col < p.kv_lora) value = p.q_latent[q_latent_batch + static_cast<int64_t>(h) * p.kv_lora + col];
          } else if (col - kLatentPad < p.rope) {
            value = p.q_pe[q_pe_batch + h * p.q_pe_head_stride + (col - kLatentPad)];
          }
        }
        store_shared_u16(q_smem + kblock_elem_offset(r, col, kHeadGroup), __bfloat16_as_ushort(value));
      }
    }
  }

  if (!p.kv_loads_before_wait) load_first_tile();
  cp_async_commit();  // group: Q and the first tile
  constexpr int kStages = L::kStages;
  if constexpr (kStages == 3) {  // the second tile in flight too; Q from its staging area into registers
    if (tile_begin + 1 < tile_end) {
      if (p.vector_loads) fetch_slots(tile_begin + 1, slots);
      load_tile(1, tile_begin + 1, slots);
    }
    cp_async_commit();
  }
  uint32_t q_frag[L::kQInRegisters ? L::kKSteps : 1][4];  // [k-step][A fragment] of this warp's 16 heads
  if constexpr (L::kQInRegisters) {
    cp_async_wait_pending<1>();
    __syncthreads();  // Q visible (the loop's first barrier orders these reads before stage 2 is refilled)
    const int a_row = lane & 15, a_chunk_hi = lane >> 4;
#pragma unroll
    for (int ks = 0; ks < L::kKSteps; ++ks)
      ldmatrix_x4(q_frag[ks], q_smem + kblock_chunk_offset(a_row, ks * 2 + a_chunk_hi, kHeadGroup));
  }

  // Score-phase role: 16 heads (rows r0, r0 + 8 of this thread) x kTokensPerWarp tokens.
  const int wm = warp % L::kHeadWarps, wn = warp / L::kHeadWarps;
  const int r0 = wm * 16 + g, r1 = r0 + 8;
  const int token_base = wn * L::kTokensPerWarp;
  float m_run[2] = {-INFINITY, -INFINITY};  // running max of rows r0, r1 (log2 domain), same in all wn warps
  float l_run[2] = {0.0f, 0.0f};            // this thread's partial row sums (its columns only)

  // Value-phase role: all kHeadGroup heads x kDimsPerWarp latent columns (mma.sync), or rows r0/r1 x the
  // warpgroup's 256 columns (wgmma: o_wg[4j + e] = element e of n-tile j).
  constexpr int kHeadTilesMma = kValueWgmma ? 1 : L::kHeadTiles;
  constexpr int kOutNTilesMma = kValueWgmma ? 2 : L::kOutNTiles;
  float o_acc[kHeadTilesMma][kOutNTilesMma][4];
  float o_wg[kValueWgmma ? 128 : 1];
#pragma unroll
  for (int i = 0; i < (kValueWgmma ? 128 : 1); ++i) o_wg[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < kHeadTilesMma; ++i)
#pragma unroll
    for (int n = 0; n < kOutNTilesMma; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o_acc[i][n][e] = 0.0f;
  const int dim_chunk_base = warp * (L::kDimsPerWarp / 8);

  for (int tile = tile_begin; tile < tile_end; ++tile) {
    const int stage = (tile - tile_begin) % kStages;
    if constexpr (kStages == 3) {
      cp_async_wait_pending<1>();  // this tile's group; the next tile's may still be in flight
    } else {
      cp_async_wait_all();
    }
    if constexpr (kScoreWgmma) fence_proxy_async_shared();  // cp.async / st.shared writes -> wgmma reads
    __syncthreads();  // tile `tile` (and Q) visible; everyone is done with the other stage and with P
    const bool load_next = tile + 1 < tile_end;
    if (kStages == 2 && load_next && p.vector_loads) fetch_slots(tile + 1, slots);
    if constexpr (kStages == 3) {  // two tiles ahead, into the stage of the tile every thread finished last
      if (tile + 2 < tile_end) {
        if (p.vector_loads) fetch_slots(tile + 2, slots);
        load_tile((stage + 2) % 3, tile + 2, slots);
      }
      cp_async_commit();
    } else if constexpr (!kScoreWgmma) {  // wgmma scores: the next tile's copies are issued behind the score MMAs
      if (load_next) load_tile(stage ^ 1, tile + 1, slots);
      cp_async_commit();
    }
    const uint32_t kv = k_smem + stage * L::kTileBytes;

    // ---- scores S[16 heads, kTokensPerWarp tokens]
    float s[L::kScoreNTiles][4];
#pragma unroll
    for (int j = 0; j < L::kScoreNTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
    if constexpr (kScoreWgmma) {
      float d[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) d[i] = 0.0f;
      wgmma_fence();
      const uint64_t desc_q = wgmma_desc_kmajor_sw128(q_smem);
      const uint64_t desc_k = wgmma_desc_kmajor_sw128(kv + token_base * 128);  // this warpgroup's 32 token rows
#pragma unroll
      for (int ks = 0; ks < L::kKSteps; ++ks) {
        const uint32_t k_offset = (ks & 3) * 32;
        wgmma_m64n32k16_bf16(d, wgmma_desc_advance(desc_q, (ks >> 2) * (kHeadGroup * 128) + k_offset),
                             wgmma_desc_advance(desc_k, (ks >> 2) * (kDecodeTileTokens * 128) + k_offset));
      }
      wgmma_commit();
      // Issued while the score MMAs run: the page-table reads above had the MMA issue to land.
      if (load_next) load_tile(stage ^ 1, tile + 1, slots);
      cp_async_commit();
      wgmma_wait_all();
#pragma unroll
      for (int j = 0; j < L::kScoreNTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[j][e] = d[4 * j + e];
    } else {
      const int a_row = wm * 16 + (lane & 15);
      const int a_chunk_hi = lane >> 4;
      // One n-tile per warp (16 heads): the odd k-steps accumulate apart, two MMA chains of half the length
      // (mla_bench attention_chain, H100: 16 heads 0.3-2.7% per layer at batch 1-128, forty-second session).
      float s_odd[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      auto score_step = [&](int ks, const uint32_t (&a)[4]) {
        if constexpr (L::kScoreNTiles == 1) {
          uint32_t bfrag[2];
          const int row = token_base + (lane & 7);
          ldmatrix_x2(bfrag, kv + kblock_chunk_offset(row, ks * 2 + ((lane >> 3) & 1), kDecodeTileTokens));
          if (ks & 1) {
            mma_bf16_16816(s_odd, a, bfrag[0], bfrag[1]);
          } else {
            mma_bf16_16816(s[0], a, bfrag[0], bfrag[1]);
          }
        } else {
#pragma unroll
          for (int j2 = 0; j2 < L::kScoreNTiles / 2; ++j2) {
            uint32_t bfrag[4];
            const int row = token_base + j2 * 16 + (lane & 7) + ((lane >> 4) << 3);
            ldmatrix_x4(bfrag, kv + kblock_chunk_offset(row, ks * 2 + ((lane >> 3) & 1), kDecodeTileTokens));
            mma_bf16_16816(s[2 * j2], a, bfrag[0], bfrag[1]);
            mma_bf16_16816(s[2 * j2 + 1], a, bfrag[2], bfrag[3]);
          }
        }
      };
      if constexpr (L::kQInRegisters) {
#pragma unroll
        for (int ks = 0; ks < L::kKSteps; ++ks) score_step(ks, q_frag[ks]);
      } else {
#pragma unroll 4
        for (int ks = 0; ks < L::kKSteps; ++ks) {
          uint32_t a[4];
          ldmatrix_x4(a, q_smem + kblock_chunk_offset(a_row, ks * 2 + a_chunk_hi, kHeadGroup));
          score_step(ks, a);
        }
      }
      if constexpr (L::kScoreNTiles == 1) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[0][e] += s_odd[e];
      }
    }

    // ---- mask, scale (log2 domain) and row maxima
    float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < L::kScoreNTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int token = tile * kDecodeTileTokens + token_base + j * 8 + 2 * tq + (e & 1);
        s[j][e] = token < seq_len ? s[j][e] * p.scale_log2 : -INFINITY;
        row_max[e >> 1] = fmaxf(row_max[e >> 1], s[j][e]);
      }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      row_max[half] = fmaxf(row_max[half], __shfl_xor_sync(0xffffffffu, row_max[half], 1));
      row_max[half] = fmaxf(row_max[half], __shfl_xor_sync(0xffffffffu, row_max[half], 2));
    }
    if (tq == 0) {
      red_max[wn * kHeadGroup + r0] = row_max[0];
      red_max[wn * kHeadGroup + r1] = row_max[1];
    }

    // ---- P = exp2(S - m) in bf16 and running sums. Optimistic pass: m = the running max m_run, which every token
    // warp of a row agrees on, so no max exchange precedes it; it stands unless some row of the tile exceeds m_run by
    // more than kLazyRescaleLog2 (P <= 2^8 otherwise: bf16 keeps its relative precision, fp32 sums cannot overflow).
    // Then (the first tile always) the tile maxima exchanged through red_max give the new m_run, and P is redone.
    float sum[2] = {0.0f, 0.0f};
    auto write_probabilities = [&](const float (&m)[2]) {
      sum[0] = sum[1] = 0.0f;
#pragma unroll
      for (int j = 0; j < L::kScoreNTiles; ++j) {
        const int col = token_base + j * 8 + 2 * tq;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const uint32_t packed = pack_bf16x2(exp2f(s[j][2 * half] - m[half]), exp2f(s[j][2 * half + 1] - m[half]));
          const float2 rounded = unpack_bf16x2(packed);
          sum[half] += rounded.x + rounded.y;
          store_shared_u32(p_smem + swizzled_elem_offset(half == 0 ? r0 : r1, col, L::kPRowBytes), packed);
        }
      }
      if constexpr (kValueWgmma) fence_proxy_async_shared();  // P (st.shared) -> wgmma reads
    };
    const bool exceeds = row_max[0] > m_run[0] + kLazyRescaleLog2 || row_max[1] > m_run[1] + kLazyRescaleLog2;
    if (!exceeds) write_probabilities(m_run);
    float alpha[2] = {1.0f, 1.0f};
    const bool rescale = __syncthreads_or(exceeds) != 0;  // red_max and the optimistic P visible
    if (rescale) {
      float m_new[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = half == 0 ? r0 : r1;
        float tile_max = red_max[r];
#pragma unroll
        for (int w = 1; w < L::kTokenWarps; ++w) tile_max = fmaxf(tile_max, red_max[w * kHeadGroup + r]);
        m_new[half] = fmaxf(m_run[half], tile_max);
        alpha[half] = exp2f(m_run[half] - m_new[half]);
        m_run[half] = m_new[half];
      }
      write_probabilities(m_new);
      if (!kValueWgmma && wn == 0 && tq == 0) {
        alpha_sh[r0] = alpha[0];
        alpha_sh[r1] = alpha[1];
      }
      __syncthreads();
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) l_run[half] = l_run[half] * alpha[half] + sum[half];

    // ---- O = alpha · O + P · V
    if constexpr (kValueWgmma) {
      rescale_accumulator_rows(o_wg, alpha);
      wgmma_fence();
      const uint32_t v_base = kv + (4 * wn) * (kDecodeTileTokens * 128);  // k-blocks of columns 256wn..256wn+255
      const uint64_t desc_p = wgmma_desc_kmajor_sw128(p_smem);
      const uint64_t desc_v = wgmma_desc_sw128(v_base, kDecodeTileTokens * 128, 1024);
#pragma unroll
      for (int kk = 0; kk < kDecodeTileTokens / 16; ++kk)
        wgmma_m64n256k16_bf16_tn(o_wg, wgmma_desc_advance(desc_p, kk * 32), wgmma_desc_advance(desc_v, kk * 16 * 128));
      wgmma_commit();
      wgmma_wait_all();
    } else {
#pragma unroll
    for (int i = 0; i < kHeadTilesMma && rescale; ++i) {
      const float alpha_lo = alpha_sh[i * 16 + g], alpha_hi = alpha_sh[i * 16 + g + 8];
#pragma unroll
      for (int n = 0; n < kOutNTilesMma; ++n) {
        o_acc[i][n][0] *= alpha_lo;
        o_acc[i][n][1] *= alpha_lo;
        o_acc[i][n][2] *= alpha_hi;
        o_acc[i][n][3] *= alpha_hi;
      }
    }
#pragma unroll
    for (int kk = 0; kk < kDecodeTileTokens / 16; ++kk) {
      uint32_t a[kHeadTilesMma][4];
#pragma unroll
      for (int i = 0; i < kHeadTilesMma; ++i)
        ldmatrix_x4(a[i], p_smem + swizzled_chunk_offset(i * 16 + (lane & 15), kk * 2 + (lane >> 4), L::kPRowBytes));
#pragma unroll
      for (int n2 = 0; n2 < kOutNTilesMma / 2; ++n2) {
        uint32_t bfrag[4];
        ldmatrix_x4_trans(bfrag, kv + kblock_chunk_offset(kk * 16 + (lane & 15), dim_chunk_base + n2 * 2 + (lane >> 4),
                                                           kDecodeTileTokens));
#pragma unroll
        for (int i = 0; i < kHeadTilesMma; ++i) {
          mma_bf16_16816(o_acc[i][2 * n2], a[i], bfrag[0], bfrag[1]);
          mma_bf16_16816(o_acc[i][2 * n2 + 1], a[i], bfrag[2], bfrag[3]);
        }
      }
    }
    }  // mma.sync values
  }

  // ---- final row sums (fixed order over warps) and outputs
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    l_run[half] += __shfl_xor_sync(0xffffffffu, l_run[half], 1);
    l_run[half] += __shfl_xor_sync(0xffffffffu, l_run[half], 2);
  }
  if (tq == 0) {
    red_sum[wn * kHeadGroup + r0] = l_run[0];
    red_sum[wn * kHeadGroup + r1] = l_run[1];
    if (wn == 0) {
      final_max[r0] = m_run[0];
      final_max[r1] = m_run[1];
    }
  }
  __syncthreads();

  // Rows past num_heads compute and shuffle like the others (the stores' quad exchange needs every lane), unstored.
  if constexpr (kValueWgmma) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = half == 0 ? r0 : r1, h = head_base + r;
      const bool valid = h < p.num_heads;
      float l_total = 0.0f;
#pragma unroll
      for (int w = 0; w < L::kTokenWarps; ++w) l_total += red_sum[w * kHeadGroup + r];
      const float inv_l = 1.0f / l_total;
#pragma unroll
      for (int j = 0; j < 32; j += 2)
        store_decode_output_tiles(
            p, b, split, h, valid, 256 * wn + 8 * j, tq,
            make_float2(o_wg[4 * j + 2 * half] * inv_l, o_wg[4 * j + 2 * half + 1] * inv_l),
            make_float2(o_wg[4 * (j + 1) + 2 * half] * inv_l, o_wg[4 * (j + 1) + 2 * half + 1] * inv_l));
      if (valid && p.num_splits > 1 && wn == 0 && tq == 0)
        p.partial_lse[(static_cast<int64_t>(b) * p.num_splits + split) * p.num_heads + h] = m_run[half] + log2f(l_total);
    }
  } else {
  static_assert(kOutNTilesMma % 2 == 0, "output n-tiles are stored in pairs");
#pragma unroll
  for (int i = 0; i < kHeadTilesMma; ++i)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = i * 16 + g + 8 * half, h = head_base + r;
      const bool valid = h < p.num_heads;
      float l_total = 0.0f;
#pragma unroll
      for (int w = 0; w < L::kTokenWarps; ++w) l_total += red_sum[w * kHeadGroup + r];
      const float inv_l = 1.0f / l_total;
#pragma unroll
      for (int n = 0; n < kOutNTilesMma; n += 2)
        store_decode_output_tiles(
            p, b, split, h, valid, warp * L::kDimsPerWarp + n * 8, tq,
            make_float2(o_acc[i][n][2 * half] * inv_l, o_acc[i][n][2 * half + 1] * inv_l),
            make_float2(o_acc[i][n + 1][2 * half] * inv_l, o_acc[i][n + 1][2 * half + 1] * inv_l));
      if (valid && p.num_splits > 1 && warp == 0 && tq == 0)
        p.partial_lse[(static_cast<int64_t>(b) * p.num_splits + split) * p.num_heads + h] = final_max[r] + log2f(l_total);
    }
  }  // mma.sync outputs
}

}  // namespace fathom::kernels::cuda::mla_detail
