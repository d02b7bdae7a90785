#pragma once
// MLA decode kernel (absorbed form) for DeepSeek-V3's dims (kv_lora 512, rope 64, 64-head groups) on cache pages of
// a multiple of 64 tokens: two warpgroups score alternate 64-token tiles ("seesaw"), so that while one runs its
// softmax the tensor pipe works on MMAs the other has issued (a warpgroup's own MMA issue holds it until its chain
// is nearly done: bench_wgmma, bench/RESULTS.md twenty-sixth session). Same grid, split rule and outputs as
// mla_decode_kernel.
//
// One CTA = one sequence b x 64 heads x one split. Its tiles go in pairs: A = tile 2k in KV buffer 0, B = tile
// 2k + 1 in buffer 1. Warpgroup 0 holds O[:, 0:256] and scores the A tiles, warpgroup 1 holds O[:, 256:512] and
// scores the B tiles; both keep their row sums against one running max m (shared memory). Per pair:
//   wg0: refills buffer 0's rope k-block (8) with the next A tile (A's scores were its only reader); S_A ->
//        m_A = max(m, rowmax) (lazy), scale0 = exp2(m - m_A), P_A; O_L = O_L·scale0 + P_A·V_A[:, 0:256] (P from
//        registers); refills buffer 0's k-blocks 0..3.
//   wg1: refills buffer 1's rope k-block; S_B -> m_B, scale1 = exp2(m_A - m_B), P_B -> shared; O_R =
//        O_R·scale0·scale1 + P_B·V_B[:, 256:512] (registers) + (P_A·scale1)·V_A[:, 256:512] (shared, from wg0);
//        refills buffer 1's k-blocks 4..7 and buffer 0's 4..7; then the scores of the next B tile.
//   wg0: P_A·scale1 -> shared; O_L = O_L·scale1 + P_B·V_B[:, 0:256] (shared); the next A tile's scores, refilling
//        buffer 1's k-blocks 0..3 once its P_B·V_B is done.
// Each k-block of a buffer is refilled by the warpgroup that reads it last, as soon as its MMAs on it are done.
// Loads: TMA boxes of [64 cache rows][128 bytes] (a page holds whole tiles), one mbarrier per (buffer, k-block),
// so a tile's scores start on its first k-blocks while the rest land.
// Shared memory: Q [64 heads][576] (its rope k-block moves into registers; the space then holds P_B), two KV
// tiles, P_A: 224 KB of the 227. At the end the KV buffers stage O for its bulk stores (mla_decode_output.cuh).
//
// Synchronization per pair (named barriers, one side bar.arrive, the other bar.sync, 256 threads each; the chain
// scale0 -> scale1 -> P_A -> P_B orders them so that no side arrives twice before the other has synced):
//   kSeesawScale0: wg0 wrote m_A and scale0.            kSeesawScale1: wg1 wrote m_B and scale1.
//   kSeesawPAReady: wg0 wrote P_A (scaled to m_B).      kSeesawPBReady: wg1 wrote P_B and issued its P_A product.
// Rows of a sequence's last tile past seq_len hold whatever the page holds (NaN included): their scores are masked,
// and the warpgroup about to multiply P by V zeroes them first (0 · NaN is NaN).
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/mla/sm90/mla_decode_kernel.cuh"
#include "kernels/cuda/mla/sm90/mla_decode_output.cuh"
#include "kernels/cuda/sm90/tma_pipeline.cuh"

namespace fathom::kernels::cuda::mla_detail {

struct DecodeSeesawLayout {
  static constexpr int kHeads = 64, kKBlocks = 9;              // 576 = 9 k-blocks of 64 bf16 (128 bytes)
  static constexpr int kKBlockBytes = kDecodeTileTokens * 128;  // [64 rows][128 B], 8 KB
  static constexpr int kTileBytes = kKBlocks * kKBlockBytes;    // 73,728 (Q: the same, 64 heads)
  static constexpr int kQOffset = 0;
  static constexpr int kPBOffset = kQOffset + 8 * kKBlockBytes;   // Q's rope k-block, free once in registers
  static constexpr int kKvOffset = kTileBytes;                    // 2 buffers
  static constexpr int kPAOffset = kKvOffset + 2 * kTileBytes;   // [64 heads][64 tokens] bf16, 128-byte rows
  static constexpr int kMaxOffset = kPAOffset + kKBlockBytes;     // [64] running max (log2 domain)
  static constexpr int kScale0Offset = kMaxOffset + kHeads * 4;   // [64]
  static constexpr int kScale1Offset = kScale0Offset + kHeads * 4;  // [64]
  static constexpr int kSumOffset = kScale1Offset + kHeads * 4;   // [2 warpgroups][64] row sums at the end
  static constexpr int kBarrierOffset = kSumOffset + 2 * kHeads * 4;  // full[2 buffers][9 k-blocks]
  static constexpr int kSmemBytes = kBarrierOffset + 2 * kKBlocks * 8 + 1024;  // + slack to align the base to 1 KB
  static_assert(kSmemBytes <= 232448, "shared memory per block on sm_90");
};

inline constexpr int kSeesawScale0 = 1, kSeesawScale1 = 2, kSeesawPAReady = 3, kSeesawPBReady = 4;
inline constexpr int kSeesawZeroBarrier = 5;  // + warpgroup: a warpgroup's own barrier after zeroing tail rows
inline constexpr int kSeesawStoreBarrier = 7;  // + warpgroup: its output rows staged, before their bulk stores

// S[64 heads, 64 tokens] (+)= Q · Kᵀ over k-blocks [kBegin, kEnd) of the tile at kv_tile, each k-block's four MMAs
// issued once its TMA landed (full[kb], phase `parity`), so the first k-blocks' MMAs run while later ones land; the
// first MMA overwrites S when `overwrite`. Q's k-blocks 0..7 from shared memory, the rope k-block 8 from registers
// (q_rope: A fragments of its four k-steps). The wgmma.fence after each wait keeps ptxas from fencing the chain
// itself inside the wait loop (C7519), which would serialize every wgmma of the kernel (C7520).
template <int kBegin, int kEnd>
__device__ __forceinline__ void seesaw_issue_scores(float (&s)[32], uint32_t q_smem, uint32_t kv_tile,
                                                    const uint32_t (&q_rope)[4][4], uint64_t* full, uint32_t parity,
                                                    bool overwrite) {
  using L = DecodeSeesawLayout;
  uint64_t desc_q = wgmma_desc_kmajor_sw128(q_smem), desc_k = wgmma_desc_kmajor_sw128(kv_tile);
  // Computed per call, not hoisted out of the pair loop (72 loop-invariant 64-bit descriptors would spill).
  asm volatile("" : "+l"(desc_q), "+l"(desc_k));
#pragma unroll
  for (int kb = kBegin; kb < kEnd; ++kb) {
    hopper::mbarrier_wait(&full[kb], parity);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const uint32_t offset = kb * L::kKBlockBytes + ks * 32;
      const int accumulate = overwrite && kb == kBegin && ks == 0 ? 0 : 1;
      if (kb < 8) {
        wgmma_m64n64k16_bf16(s, wgmma_desc_advance(desc_q, offset), wgmma_desc_advance(desc_k, offset), accumulate);
      } else {
        wgmma_m64n64k16_bf16_rs(s, q_rope[ks], wgmma_desc_advance(desc_k, offset), accumulate);
      }
    }
  }
}

// One warpgroup's softmax of its tile against the running max m (rows r0, r1 of this thread, log2 domain): m rises
// to the tile's row max only where that exceeds it by 2^kLazyRescaleLog2 (scale = exp2(m_old - m_new), else 1);
// P = exp2(S·scale_log2 - m) packed to bf16 in the wgmma A-fragment order (packed[2j + half]: n-tile j, row half),
// sum = this thread's sums of the rounded P per row.
__device__ __forceinline__ void seesaw_softmax(const float (&s)[32], uint32_t (&packed)[16], float (&m)[2],
                                               float (&scale)[2], float (&sum)[2], float scale_log2) {
  float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) row_max[e >> 1] = fmaxf(row_max[e >> 1], s[4 * j + e]);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    row_max[half] = fmaxf(row_max[half], __shfl_xor_sync(0xffffffffu, row_max[half], 1));
    row_max[half] = fmaxf(row_max[half], __shfl_xor_sync(0xffffffffu, row_max[half], 2));
    row_max[half] *= scale_log2;  // scale_log2 > 0: the maxima commute with the scaling
    scale[half] = 1.0f;
    if (row_max[half] > m[half] + kLazyRescaleLog2) {
      scale[half] = exp2f(m[half] - row_max[half]);
      m[half] = row_max[half];
    }
    sum[half] = 0.0f;
  }
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      packed[2 * j + half] = pack_bf16x2(exp2f(fmaf(s[4 * j + 2 * half], scale_log2, -m[half])),
                                         exp2f(fmaf(s[4 * j + 2 * half + 1], scale_log2, -m[half])));
      const float2 rounded = unpack_bf16x2(packed[2 * j + half]);
      sum[half] += rounded.x + rounded.y;
    }
}

// O[:, this warpgroup's 256 columns] += P · V over a tile's 64 tokens (4 MMAs, not committed): P from this
// warpgroup's registers (packed: A-fragment order) or from a 128-byte-swizzled K-major tile in shared memory; desc_v:
// V's N-major descriptor of those columns.
__device__ __forceinline__ void seesaw_issue_pv(float (&o)[128], const uint32_t (&packed)[16], uint64_t desc_v) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint32_t a[4] = {packed[4 * kk], packed[4 * kk + 1], packed[4 * kk + 2], packed[4 * kk + 3]};
    wgmma_m64n256k16_bf16_rs_tn(o, a, wgmma_desc_advance(desc_v, kk * 16 * 128));
  }
}
__device__ __forceinline__ void seesaw_issue_pv(float (&o)[128], uint32_t p_smem, uint64_t desc_v) {
  const uint64_t desc_p = wgmma_desc_kmajor_sw128(p_smem);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    wgmma_m64n256k16_bf16_tn(o, wgmma_desc_advance(desc_p, kk * 32), wgmma_desc_advance(desc_v, kk * 16 * 128));
}

// P [64 heads, 64 tokens] bf16 from this warpgroup's registers into a 128-byte-swizzled K-major tile.
__device__ __forceinline__ void seesaw_store_p(uint32_t p_smem, const uint32_t (&packed)[16], int r0, int r1, int tq) {
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int half = 0; half < 2; ++half)
      store_shared_u32(p_smem + swizzled_elem_offset(half == 0 ? r0 : r1, j * 8 + 2 * tq, kDecodeTileTokens * 2),
                       packed[2 * j + half]);
}

// Zeroes rows [valid_rows, 64) of k-blocks [kb_begin, kb_end) of the KV tile at kv_tile and orders the stores before
// this warpgroup's wgmma reads. All 128 threads of the warpgroup call it.
__device__ __forceinline__ void seesaw_zero_tail_rows(uint32_t kv_tile, int kb_begin, int kb_end, int valid_rows,
                                                      int wg_tid, int warpgroup) {
  const int row_chunks = (kDecodeTileTokens - valid_rows) * 8;  // whole 128-byte rows: the swizzle does not matter
  for (int i = wg_tid; i < row_chunks * (kb_end - kb_begin); i += 128) {
    const int kb = kb_begin + i / row_chunks, within = i % row_chunks;
    store_shared_v4(kv_tile + kb * DecodeSeesawLayout::kKBlockBytes + (valid_rows + within / 8) * 128 + (within % 8) * 16,
                    make_uint4(0u, 0u, 0u, 0u));
  }
  fence_proxy_async_shared();
  hopper::named_barrier_sync(kSeesawZeroBarrier + warpgroup, 128);
}

// Launch: grid (ceil(num_heads / 64), num_splits, batch), kDecodeThreads threads, DecodeSeesawLayout::kSmemBytes of
// dynamic shared memory. Requires kv_lora 512, rope 64, 16-byte-aligned rows (p.vector_loads) and page_size a
// multiple of 64. kv_map: the cache pool as [num_slots][1152 bytes], boxes of [64 rows][128 bytes], 128-byte swizzle.
__global__ void __launch_bounds__(kDecodeThreads, 1)
mla_decode_seesaw_kernel(const DecodeKernelParams p, const __grid_constant__ CUtensorMap kv_map) {
  using L = DecodeSeesawLayout;
  // Launched programmatically (programmatic_launch.cuh): waits for the predecessor before its first KV tiles or
  // after them (p.kv_loads_before_wait), always before it reads q_latent, the previous launch's output.
  if (!p.kv_loads_before_wait) wait_then_allow_successor(p);
  using hopper::mbarrier_wait;
  using hopper::named_barrier_arrive;
  using hopper::named_barrier_sync;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023u)) & 1023u);
  const uint32_t q_smem = smem_u32(smem + L::kQOffset);
  const uint32_t kv_smem = smem_u32(smem + L::kKvOffset);
  const uint32_t pa_smem = smem_u32(smem + L::kPAOffset), pb_smem = smem_u32(smem + L::kPBOffset);
  float* max_sh = reinterpret_cast<float*>(smem + L::kMaxOffset);        // [64] running max m
  float* scale0_sh = reinterpret_cast<float*>(smem + L::kScale0Offset);  // [64] exp2(m - m_A) of this pair
  float* scale1_sh = reinterpret_cast<float*>(smem + L::kScale1Offset);  // [64] exp2(m_A - m_B) of this pair
  float* sum_sh = reinterpret_cast<float*>(smem + L::kSumOffset);        // [2][64] row sums at the end
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + L::kBarrierOffset);  // [buffer * 9 + k-block]

  const int head_base = blockIdx.x * L::kHeads;
  const int split = blockIdx.y;
  const int b = blockIdx.z;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, tq = lane & 3;
  const int warpgroup = tid >> 7, wg_tid = tid & 127;
  const int r0 = (warp & 3) * 16 + g, r1 = r0 + 8;  // this thread's accumulator rows (heads) in either warpgroup

  const int seq_len = p.seq_lens[b];
  const int2 tile_range = split_tile_range(p, split, seq_len);
  const int tile_begin = tile_range.x, num_tiles = tile_range.y - tile_range.x;
  if (num_tiles <= 0) {  // empty split (the combine skips it) or empty sequence
    wait_for_predecessor();
    if (p.num_splits == 1) store_empty_output(p, b, head_base, L::kHeads);
    return;
  }
  const int32_t* pages = p.page_table + static_cast<int64_t>(b) * p.max_pages_per_seq;
  auto kv_tile = [&](int buffer) { return kv_smem + buffer * L::kTileBytes; };
  // K-blocks [kb_begin, kb_end) of tile `tile` into `buffer` (one thread): its 64 cache rows are consecutive.
  auto load_kblocks = [&](int buffer, int tile, int kb_begin, int kb_end) {
    const int32_t row = static_cast<int32_t>(cache_slot(p, pages, tile * kDecodeTileTokens));
    for (int kb = kb_begin; kb < kb_end; ++kb) {
      uint64_t* barrier = &full[buffer * L::kKBlocks + kb];
      hopper::mbarrier_arrive_expect_tx(barrier, L::kKBlockBytes);
      hopper::tma_load_2d(smem + L::kKvOffset + buffer * L::kTileBytes + kb * L::kKBlockBytes, &kv_map, kb * 128, row,
                          barrier);
    }
  };
  // The sequence's last tile when it ends inside it: rows [valid, 64) past seq_len.
  auto tail_rows = [&](int tile) { return seq_len - tile * kDecodeTileTokens; };  // < 64: a tail tile
  auto mask_tail = [&](float (&s)[32], int tile) {
    if (tail_rows(tile) >= kDecodeTileTokens) return;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (tile * kDecodeTileTokens + j * 8 + 2 * tq + (e & 1) >= seq_len) s[4 * j + e] = -INFINITY;
  };
  // V of this warpgroup's columns in `buffer`: k-blocks 4·warpgroup .. 4·warpgroup + 3, N-major.
  auto values_desc = [&](int buffer) {
    return wgmma_desc_sw128(kv_tile(buffer) + 4 * warpgroup * L::kKBlockBytes, L::kKBlockBytes, 1024);
  };

  if (tid == 0) {
    for (int i = 0; i < 2 * L::kKBlocks; ++i) hopper::mbarrier_init(&full[i], 1);
    hopper::fence_barrier_init();
  }
  if (tid < L::kHeads) max_sh[tid] = -INFINITY;
  __syncthreads();  // barriers initialised before any copy names them
  if (tid == 0) {  // the cache rows, page table and seq_lens: written two or more launches back
    load_kblocks(0, tile_begin, 0, L::kKBlocks);
    if (num_tiles > 1) load_kblocks(1, tile_begin + 1, 0, L::kKBlocks);
  }
  if (p.kv_loads_before_wait) wait_then_allow_successor(p);
  // Q [64 heads, 576] (zero rows for heads >= num_heads) by every thread while the first tiles land.
  const int64_t q_latent_batch = static_cast<int64_t>(b) * p.num_heads * 512;
  const int64_t q_pe_batch = static_cast<int64_t>(b) * p.num_heads * p.q_pe_head_stride;
  for (int idx = tid; idx < L::kHeads * 72; idx += kDecodeThreads) {
    const int r = idx / 72, c = idx % 72, h = head_base + r;
    const bool valid = h < p.num_heads;
    const __nv_bfloat16* src = p.q_latent;
    if (valid) {
      src = c < 64 ? p.q_latent + q_latent_batch + static_cast<int64_t>(h) * 512 + c * 8
                   : p.q_pe + q_pe_batch + h * p.q_pe_head_stride + (c - 64) * 8;
    }
    cp_async_16(q_smem + kblock_chunk_offset(r, c, L::kHeads), src, valid ? 16 : 0);
  }
  cp_async_commit();
  cp_async_wait_all();
  fence_proxy_async_shared();  // the cp.async writes (generic proxy) before the wgmma reads (async proxy)
  __syncthreads();
  uint32_t q_rope[4][4];  // A fragments of Q's k-block 8 (rope), k-steps 0..3, this warp's 16 heads
  {
    const int a_row = (warp & 3) * 16 + (lane & 15);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) ldmatrix_x4(q_rope[ks], q_smem + kblock_chunk_offset(a_row, 64 + 2 * ks + (lane >> 4), 64));
  }
  __syncthreads();  // both warpgroups hold the rope block: its space now takes P_B

  float o[128];  // O of this warpgroup's 256 latent columns: o[4j + e] = element e of n-tile j
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  float s[32];                       // S of this warpgroup's tile: s[4j + e] = element e of n-tile j
  uint32_t packed[16];               // P of it in bf16, A-fragment order
  float l_run[2] = {0.0f, 0.0f};     // this thread's partial row sums (its columns), relative to the running max

  // A pair's steps are instantiated per case (kHasB: tile B exists; kHasNext: the next A tile, for wg1 the next B
  // tile, exists) so that no runtime branch separates an MMA from its wait (ptxas then serializes the wgmma chain).
  // Zeroing tail rows happens only in a CTA's last pair (the sequence's last tile is its split's last).
  if (warpgroup == 0) {
    // ---- warpgroup 0: A tiles, O[:, 0:256]
    auto pair = [&]<bool kHasB, bool kHasNext>(int k) {
      const int i_a = 2 * k, tile_a = tile_begin + i_a;
      const uint32_t parity = k & 1;
      constexpr bool kLastPair = !kHasNext;
      if (kHasNext && wg_tid == 0) load_kblocks(0, tile_a + 2, 8, 9);  // the rope k-block: only A's scores read it
      // softmax of A against the max wg1 left (before the first pair: -inf)
      if constexpr (kLastPair) mask_tail(s, tile_a);
      float m[2] = {max_sh[r0], max_sh[r1]}, scale0[2], sum[2];
      seesaw_softmax(s, packed, m, scale0, sum, p.scale_log2);
      __syncwarp();  // every thread of the row's quad has read m
      if (tq == 0) {
        max_sh[r0] = m[0], max_sh[r1] = m[1];
        scale0_sh[r0] = scale0[0], scale0_sh[r1] = scale0[1];
      }
      named_barrier_arrive(kSeesawScale0, kDecodeThreads);
      rescale_accumulator_rows(o, scale0);
#pragma unroll
      for (int half = 0; half < 2; ++half) l_run[half] = l_run[half] * scale0[half] + sum[half];
      // O_L += P_A · V_A[:, 0:256], P from registers
      if constexpr (kLastPair && !kHasB) seesaw_zero_tail_rows(kv_tile(0), 0, 4, tail_rows(tile_a), wg_tid, 0);
      wgmma_fence();
      seesaw_issue_pv(o, packed, values_desc(0));
      wgmma_commit();
      wgmma_wait_all();
      wgmma_fence_operands(o);
      if (kHasNext && wg_tid == 0) load_kblocks(0, tile_a + 2, 0, 4);  // read by nobody else: the next A tile
      // P_A relative to wg1's max for its half of O
      named_barrier_sync(kSeesawScale1, kDecodeThreads);
      const float scale1[2] = {scale1_sh[r0], scale1_sh[r1]};
      if (!__all_sync(0xffffffffu, scale1[0] == 1.0f && scale1[1] == 1.0f)) {
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const float2 value = unpack_bf16x2(packed[2 * j + half]);
            packed[2 * j + half] = pack_bf16x2(value.x * scale1[half], value.y * scale1[half]);
          }
      }
      seesaw_store_p(pa_smem, packed, r0, r1, tq);
      fence_proxy_async_shared();  // P_A (st.shared) -> wg1's wgmma reads
      named_barrier_arrive(kSeesawPAReady, kDecodeThreads);
      // O_L = O_L·scale1 + P_B · V_B[:, 0:256], P_B from shared memory
      named_barrier_sync(kSeesawPBReady, kDecodeThreads);
      if constexpr (kHasB) {
        rescale_accumulator_rows(o, scale1);
#pragma unroll
        for (int half = 0; half < 2; ++half) l_run[half] *= scale1[half];
        for (int kb = 0; kb < 4; ++kb) mbarrier_wait(&full[L::kKBlocks + kb], parity);  // landed (wg1 waited too)
        if constexpr (kLastPair) seesaw_zero_tail_rows(kv_tile(1), 0, 4, tail_rows(tile_a + 1), wg_tid, 0);
        wgmma_fence();
        seesaw_issue_pv(o, pb_smem, values_desc(1));
        wgmma_commit();
      }
      if constexpr (kHasNext) {  // the next A tile's scores behind it; buffer 1's k-blocks 0..3 refilled after P_B·V_B
        seesaw_issue_scores<0, 4>(s, q_smem, kv_tile(0), q_rope, full, parity ^ 1u, true);
        wgmma_commit();
        wgmma_wait_pending<1>();
        wgmma_fence_operands(o);
        if (wg_tid == 0 && i_a + 3 < num_tiles) load_kblocks(1, tile_a + 3, 0, 4);
        seesaw_issue_scores<4, 9>(s, q_smem, kv_tile(0), q_rope, full, parity ^ 1u, false);
        wgmma_commit();
      }
      wgmma_wait_all();
      wgmma_fence_operands(o);
      wgmma_fence_operands(s);
    };
    wgmma_fence();
    seesaw_issue_scores<0, 9>(s, q_smem, kv_tile(0), q_rope, full, 0, true);
    wgmma_commit();
    wgmma_wait_all();
    wgmma_fence_operands(s);
    int k = 0;
    for (; 2 * k + 2 < num_tiles; ++k) pair.template operator()<true, true>(k);
    if (2 * k + 1 < num_tiles) {
      pair.template operator()<true, false>(k);
    } else {
      pair.template operator()<false, false>(k);
    }
  } else {
    // ---- warpgroup 1: B tiles, O[:, 256:512]
    auto pair = [&]<bool kHasB, bool kHasNextB>(int k) {
      const int i_a = 2 * k, tile_a = tile_begin + i_a, tile_b = tile_a + 1;
      const uint32_t parity = k & 1;
      // a tail tile is the CTA's last: A of a last pair without B, or B of a pair without a next A
      const bool last_pair = i_a + 2 >= num_tiles;
      if (kHasNextB && wg_tid == 0) load_kblocks(1, tile_b + 2, 8, 9);  // the rope k-block: only B's scores read it
      // softmax of B against m_A
      named_barrier_sync(kSeesawScale0, kDecodeThreads);
      float m[2] = {max_sh[r0], max_sh[r1]}, scale1[2] = {1.0f, 1.0f}, sum[2] = {0.0f, 0.0f};
      const float scale0[2] = {scale0_sh[r0], scale0_sh[r1]};
      if constexpr (kHasB) {
        if constexpr (!kHasNextB) mask_tail(s, tile_b);
        seesaw_softmax(s, packed, m, scale1, sum, p.scale_log2);
      }
      __syncwarp();  // every thread of the row's quad has read m
      if (tq == 0) {
        max_sh[r0] = m[0], max_sh[r1] = m[1];
        scale1_sh[r0] = scale1[0], scale1_sh[r1] = scale1[1];
      }
      named_barrier_arrive(kSeesawScale1, kDecodeThreads);
      const float scale01[2] = {scale0[0] * scale1[0], scale0[1] * scale1[1]};
      rescale_accumulator_rows(o, scale01);
#pragma unroll
      for (int half = 0; half < 2; ++half) l_run[half] = l_run[half] * scale01[half] + sum[half];
      // P_B -> shared for wg0; O_R += P_B · V_B[:, 256:512], P from registers
      if constexpr (kHasB) {
        seesaw_store_p(pb_smem, packed, r0, r1, tq);
        if constexpr (!kHasNextB) seesaw_zero_tail_rows(kv_tile(1), 4, 8, last_pair ? tail_rows(tile_b) : 64, wg_tid, 1);
        fence_proxy_async_shared();  // P_B (st.shared) -> wg0's wgmma reads
        wgmma_fence();
        seesaw_issue_pv(o, packed, values_desc(1));
        wgmma_commit();
      }
      // O_R += P_A · V_A[:, 256:512], P_A from wg0 (already relative to m_B)
      named_barrier_sync(kSeesawPAReady, kDecodeThreads);
      for (int kb = 4; kb < 8; ++kb) mbarrier_wait(&full[kb], parity);  // landed (wg0 waited too)
      if constexpr (!kHasB) seesaw_zero_tail_rows(kv_tile(0), 4, 8, tail_rows(tile_a), wg_tid, 1);
      wgmma_fence();
      seesaw_issue_pv(o, pa_smem, values_desc(0));
      wgmma_commit();
      named_barrier_arrive(kSeesawPBReady, kDecodeThreads);
      // refills: buffer 1's k-blocks 4..7 once P_B·V_B is done, buffer 0's 4..7 once P_A·V_A is
      if constexpr (kHasB) {
        wgmma_wait_pending<1>();
        wgmma_fence_operands(o);
        if (kHasNextB && wg_tid == 0) load_kblocks(1, tile_b + 2, 4, 8);
      }
      wgmma_wait_all();
      wgmma_fence_operands(o);
      if (wg_tid == 0 && i_a + 2 < num_tiles) load_kblocks(0, tile_a + 2, 4, 8);
      if constexpr (kHasNextB) {  // the next B tile's scores, its own refills (k-blocks 4..7, the rope block) first
        seesaw_issue_scores<4, 9>(s, q_smem, kv_tile(1), q_rope, full + L::kKBlocks, parity ^ 1u, true);
        seesaw_issue_scores<0, 4>(s, q_smem, kv_tile(1), q_rope, full + L::kKBlocks, parity ^ 1u, false);
        wgmma_commit();
        wgmma_wait_all();
        wgmma_fence_operands(s);
      }
    };
    if (num_tiles > 1) {
      wgmma_fence();
      seesaw_issue_scores<0, 9>(s, q_smem, kv_tile(1), q_rope, full + L::kKBlocks, 0, true);
      wgmma_commit();
      wgmma_wait_all();
      wgmma_fence_operands(s);
    }
    int k = 0;
    for (; 2 * k + 3 < num_tiles; ++k) pair.template operator()<true, true>(k);
    if (2 * k + 1 < num_tiles) pair.template operator()<true, false>(k++);
    if (2 * k < num_tiles) pair.template operator()<false, false>(k);
  }

  // ---- row sums over the quad and both warpgroups, the outputs (and the split's log2-sum-exp)
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    l_run[half] += __shfl_xor_sync(0xffffffffu, l_run[half], 1);
    l_run[half] += __shfl_xor_sync(0xffffffffu, l_run[half], 2);
  }
  if (tq == 0) {
    sum_sh[warpgroup * L::kHeads + r0] = l_run[0];
    sum_sh[warpgroup * L::kHeads + r1] = l_run[1];
  }
  __syncthreads();
  const float l_total[2] = {sum_sh[r0] + sum_sh[L::kHeads + r0], sum_sh[r1] + sum_sh[L::kHeads + r1]};
  if (warpgroup == 0 && tq == 0 && p.num_splits > 1) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = half == 0 ? r0 : r1, h = head_base + row;
      if (h < p.num_heads)
        p.partial_lse[(static_cast<int64_t>(b) * p.num_splits + split) * p.num_heads + h] =
            max_sh[row] + log2f(l_total[half]);
    }
  }
  // Every wgmma and TMA load of the KV buffers is complete (waited for before the __syncthreads above): the
  // buffers take the output rows.
  const float inv_l[2] = {1.0f / l_total[0], 1.0f / l_total[1]};
  static_assert(2 * kOutputStageBytes <= 2 * L::kTileBytes, "both warpgroups' output rows fit the KV buffers");
  if (p.late_successor_launch) allow_successor_launch();
  store_decode_output_bulk(p, b, split, o, inv_l, smem + L::kKvOffset + warpgroup * kOutputStageBytes,
                           kSeesawStoreBarrier + warpgroup, head_base, warpgroup, wg_tid, r0, r1, tq);
}

}  // namespace fathom::kernels::cuda::mla_detail
