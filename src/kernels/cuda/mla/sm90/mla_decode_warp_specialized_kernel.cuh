#pragma once
// MLA decode kernel (absorbed form), warp-specialized, for DeepSeek-V3's dims: kv_lora 512, rope 64, 64-head groups,
// 16-byte-aligned rows (DecodeKernelParams::vector_loads). Same grid, split rule and outputs as mla_decode_kernel.
//
// One CTA = one sequence b x 64 heads x one split; its two warpgroups take different roles:
//   warpgroup 0 (scores): loads Q, then per tile S[64 heads, 64 tokens] = Q · Kᵀ over the full row (wgmma
//     m64n64k16, Q and K from shared memory), the online softmax over whole rows (a row lives in one quad: no
//     exchange between warps), P -> shared memory, then O[:, 0:256] += P · V[:, 0:256]; the next tile's scores are
//     issued behind it.
//   warpgroup 1 (values): O[:, 256:512] += P · V[:, 256:512] once P is ready, and the page-table reads.
// Both refill the two-stage KV ring by cp.async, each the k-blocks it reads last, right after its own P·V:
// warpgroup 1 k-blocks 4..7, warpgroup 0 k-blocks 0..3 and 8 (the scores finished before P existed), so neither
// waits for the other to free a stage and eight warps keep copies in flight. (Warpgroup 1 loads the first two tiles
// whole while warpgroup 0 loads Q.) The tiles' cache rows pass from warpgroup 1 to warpgroup 0 through shared memory
// (slot_sh, one buffer per stage parity, written two tiles ahead).
// mla_decode_kernel has both warpgroups share every phase (n32 score tiles that read Q from shared memory at 1.5x
// its bandwidth, a max exchange and two CTA barriers per tile); here the tensor pipe holds the P·V of one tile and
// the scores of the next while warpgroup 0 waits, and only the softmax leaves it idle.
//
// Synchronization (tile i of the split, stage i & 1):
//   full[stage]  mbarrier, 256 arrivals: every thread's cp.async copies of the tile landed (cp.async arrive-on).
//   kBarrierPReady (named): warpgroup 0 wrote P and alpha of tile i; warpgroup 1 waits for it.
//   kBarrierPFree (named): warpgroup 1's P·V of tile i is done; warpgroup 0 waits before writing P of tile i + 1.
//   kBarrierFinal (named): warpgroup 0 wrote the rows' 1 / l.
//   kBarrierQ, kBarrierPWritten (named, warpgroup 0 only): Q landed; every row of P is written.
// Each cross-warpgroup named barrier alternates one bar.arrive (128 threads, a release) and one bar.sync (128
// threads); the P chain orders them so that no side arrives twice before the other has synced. (compute-sanitizer
// racecheck reports the alpha and slot exchanges as potential hazards: it does not follow bar.arrive -> bar.sync.)
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/mla/sm90/mla_decode_kernel.cuh"
#include "kernels/cuda/mla/sm90/mla_decode_output.cuh"
#include "kernels/cuda/sm90/tma_pipeline.cuh"

namespace fathom::kernels::cuda::mla_detail {

struct DecodeWarpSpecializedLayout {
  static constexpr int kLatent = 512, kRope = 64, kHeads = 64;
  static constexpr int kRowChunks = (kLatent + kRope) / 8;       // 72 16-byte chunks per row
  static constexpr int kKBlocks = kRowChunks / 8;                // 9 k-blocks of 128 bytes
  static constexpr int kKSteps = (kLatent + kRope) / 16;         // 36 score MMAs per tile
  static constexpr int kTileBytes = kDecodeTileTokens * kRowChunks * 16;  // 73,728 (Q: the same, 64 heads)
  static constexpr int kQOffset = 0;
  static constexpr int kKvOffset = kTileBytes;                   // 2 stages
  static constexpr int kPOffset = kKvOffset + 2 * kTileBytes;    // [64 heads, 64 tokens] bf16, 128-byte rows
  static constexpr int kAlphaOffset = kPOffset + kHeads * kDecodeTileTokens * 2;
  static constexpr int kInvSumOffset = kAlphaOffset + kHeads * 4;
  static constexpr int kSlotOffset = kInvSumOffset + kHeads * 4;  // [2][64] cache rows of a tile's tokens
  static constexpr int kBarrierOffset = kSlotOffset + 2 * kDecodeTileTokens * 4;  // full[2]
  static constexpr int kSmemBytes = kBarrierOffset + 2 * 8 + 1024;  // + slack to align the base to 1 KB
  static_assert(kSmemBytes <= 232448, "shared memory per block on sm_90");
};

inline constexpr int kBarrierPReady = 1, kBarrierPFree = 2, kBarrierFinal = 3, kBarrierQ = 4, kBarrierPWritten = 5;
inline constexpr int kBarrierOutput = 6;  // + warpgroup: its output rows staged, before their bulk stores

__global__ void __launch_bounds__(kDecodeThreads, 1) mla_decode_warp_specialized_kernel(const DecodeKernelParams p) {
  using L = DecodeWarpSpecializedLayout;
  // Launched programmatically (programmatic_launch.cuh): waits for the predecessor at the start, or with
  // p.kv_loads_before_wait after warpgroup 1's first two tiles and before warpgroup 0's Q (q_latent: the previous
  // launch's output).
  if (!p.kv_loads_before_wait) wait_then_allow_successor(p);
  using hopper::mbarrier_wait;
  using hopper::named_barrier_arrive;
  using hopper::named_barrier_sync;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023u)) & 1023u);
  const uint32_t q_smem = smem_u32(smem + L::kQOffset);
  const uint32_t kv_smem = smem_u32(smem + L::kKvOffset);
  const uint32_t p_smem = smem_u32(smem + L::kPOffset);
  float* alpha_sh = reinterpret_cast<float*>(smem + L::kAlphaOffset);     // [64] rescale of O for this tile
  float* inv_sum_sh = reinterpret_cast<float*>(smem + L::kInvSumOffset);  // [64] 1 / l at the end
  int32_t* slot_sh = reinterpret_cast<int32_t*>(smem + L::kSlotOffset);   // [tile & 1][64 tokens]
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + L::kBarrierOffset);

  const int head_base = blockIdx.x * L::kHeads;
  const int split = blockIdx.y;
  const int b = blockIdx.z;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, tq = lane & 3;
  const int warpgroup = tid >> 7;
  const int r0 = (warp & 3) * 16 + g, r1 = r0 + 8;  // this thread's accumulator rows (heads) in either warpgroup

  const int seq_len = p.seq_lens[b];
  const int2 tile_range = split_tile_range(p, split, seq_len);
  const int tile_begin = tile_range.x, num_tiles = tile_range.y - tile_range.x;
  if (num_tiles <= 0) {  // empty split (the combine skips it) or empty sequence
    wait_for_predecessor();
    if (p.num_splits == 1) store_empty_output(p, b, head_base, L::kHeads);
    return;
  }
  if (tid == 0) {
    for (int stage = 0; stage < 2; ++stage) hopper::mbarrier_init(&full[stage], kDecodeThreads);
  }
  __syncthreads();  // barriers initialised before any arrival

  // O of this warpgroup's 256 latent columns: o[4j + e] = element e of n-tile j (columns 256·warpgroup + 8j + 2tq).
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  // V of this warpgroup's columns in stage `stage`: k-blocks 4·warpgroup .. 4·warpgroup + 3 of the tile, N-major.
  auto values_desc = [&](int stage) {
    const uint32_t v_base = kv_smem + stage * L::kTileBytes + (4 * warpgroup) * (kDecodeTileTokens * 128);
    return wgmma_desc_sw128(v_base, kDecodeTileTokens * 128, 1024);
  };
  // The outputs, staged where nothing is read any more: warpgroup 0 in Q (its scores were Q's only reader), warpgroup 1
  // in the KV stages once it has passed kBarrierFinal (warpgroup 0's last P·V had finished before it arrived there).
  static_assert(kOutputStageBytes <= L::kKvOffset - L::kQOffset && kOutputStageBytes <= L::kPOffset - L::kKvOffset,
                "each warpgroup's output rows fit its staging region (Q; the KV stages)");
  auto store_rows = [&](float inv_l0, float inv_l1) {
    const float inv_l[2] = {inv_l0, inv_l1};
    if (p.late_successor_launch) allow_successor_launch();
    store_decode_output_bulk(p, b, split, o, inv_l, smem + (warpgroup == 0 ? L::kQOffset : L::kKvOffset),
                             kBarrierOutput + warpgroup, head_base, warpgroup, tid & 127, r0, r1, tq);
  };

  // ---- KV loads, by both warpgroups: 8 threads per row (one 16-byte chunk of each k-block it copies), 16 rows per
  // pass, 4 passes. Slots: cache rows of this thread's tokens in the tile (-1: past seq_len).
  const int loader = tid & 127, chunk = loader & 7;
  const int32_t* pages = p.page_table + static_cast<int64_t>(b) * p.max_pages_per_seq;
  constexpr int kPasses = kDecodeTileTokens / 16;
  auto fetch_slots = [&](int tile, int32_t (&slots)[kPasses]) {
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const int token = tile * kDecodeTileTokens + (loader >> 3) + 16 * pass;
      slots[pass] = token < seq_len ? static_cast<int32_t>(cache_slot(p, pages, token)) : -1;
    }
  };
  // The slots of tile `tile` through shared memory (warpgroup 1 reads the page table for both warpgroups); thread t
  // of either warpgroup copies the same rows.
  auto slot_index = [&](int tile, int pass) { return (tile & 1) * kDecodeTileTokens + (loader >> 3) + 16 * pass; };
  auto store_slots = [&](int tile, const int32_t (&slots)[kPasses]) {
    if (chunk == 0) {
#pragma unroll
      for (int pass = 0; pass < kPasses; ++pass) slot_sh[slot_index(tile, pass)] = slots[pass];
    }
  };
  auto load_slots = [&](int tile, int32_t (&slots)[kPasses]) {
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) slots[pass] = slot_sh[slot_index(tile, pass)];
  };
  // K-blocks of `stage` for which in_part(block) holds; rows past seq_len are zero-filled (their scores are masked).
  auto load_blocks = [&](int stage, const int32_t (&slots)[kPasses], auto in_part) {
    const uint32_t base = kv_smem + stage * L::kTileBytes;
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const int row = (loader >> 3) + 16 * pass;
      const bool valid = slots[pass] >= 0;
      const __nv_bfloat16* src =
          valid ? p.cache + static_cast<int64_t>(slots[pass]) * (L::kLatent + L::kRope) : p.cache;
#pragma unroll
      for (int block = 0; block < L::kKBlocks; ++block) {
        if (!in_part(block)) continue;
        const int c = block * 8 + chunk;
        cp_async_16(base + kblock_chunk_offset(row, c, kDecodeTileTokens), valid ? src + c * 8 : p.cache,
                    valid ? 16 : 0);
      }
    }
    hopper::cp_async_arrive_on(&full[stage]);  // fires when this thread's copies so far have landed
  };
  // A stage is refilled in two parts, each by the warpgroup that reads it last: warpgroup 1's values (k-blocks 4..7)
  // after its P·V; the rest (warpgroup 0's values and the rope block, which only the scores read) after
  // warpgroup 0's P·V. No warpgroup waits for the other to free a stage.
  constexpr auto kHiValues = [](int block) { return block >= 4 && block < 8; };
  constexpr auto kRest = [](int block) { return block < 4 || block == 8; };
  constexpr auto kAll = [](int) { return true; };

  if (warpgroup == 1) {
    int32_t slots[kPasses];
    for (int i = 0; i < 2 && i < num_tiles; ++i) {  // the first two tiles whole (warpgroup 0 loads Q meanwhile)
      fetch_slots(tile_begin + i, slots);
      load_blocks(i, slots, kAll);
    }
    if (p.kv_loads_before_wait) wait_then_allow_successor(p);  // the cache rows: written two or more launches back
    for (int i = 0; i < num_tiles; ++i) {
      const int stage = i & 1;
      named_barrier_sync(kBarrierPReady, kDecodeThreads);
      fence_proxy_async_shared();  // V's cp.async writes, ordered before here through warpgroup 0's full wait
      const float alpha[2] = {alpha_sh[r0], alpha_sh[r1]};
      rescale_accumulator_rows(o, alpha);
      wgmma_fence();
      const uint64_t desc_p = wgmma_desc_kmajor_sw128(p_smem), desc_v = values_desc(stage);
#pragma unroll
      for (int kk = 0; kk < kDecodeTileTokens / 16; ++kk)  // P from shared memory
        wgmma_m64n256k16_bf16_tn(o, wgmma_desc_advance(desc_p, kk * 32), wgmma_desc_advance(desc_v, kk * 16 * 128));
      wgmma_commit();
      // Tile i + 3's slots while the MMAs run, over tile i + 1's (both warpgroups loaded that tile before P of tile
      // i was ready); warpgroup 0 reads them after the P-free barrier below, one iteration later.
      if (i + 3 < num_tiles) {
        fetch_slots(tile_begin + i + 3, slots);
        store_slots(i + 3, slots);
      }
      wgmma_wait_all();
      wgmma_fence_operands(o);
      if (i + 1 < num_tiles) named_barrier_arrive(kBarrierPFree, kDecodeThreads);
      if (i + 2 < num_tiles) {
        load_slots(i + 2, slots);
        load_blocks(stage, slots, kHiValues);
      }
    }
    named_barrier_sync(kBarrierFinal, kDecodeThreads);
    store_rows(inv_sum_sh[r0], inv_sum_sh[r1]);
    return;
  }

  // ---- warpgroup 0: scores, softmax, P, O[:, 0:256]
  float s[32];  // S[16 rows of this warp, 64 tokens]: s[4j + e] = element e of n-tile j (tokens 8j + 2tq + (e & 1))
  const uint64_t desc_q = wgmma_desc_kmajor_sw128(q_smem);
  auto issue_scores = [&](int stage) {  // overwrites s (the first k-step does not accumulate)
    const uint64_t desc_k = wgmma_desc_kmajor_sw128(kv_smem + stage * L::kTileBytes);
    uint64_t desc_q_tile = desc_q;
    asm volatile("" : "+l"(desc_q_tile));  // Q's 36 descriptors computed per tile, not held in registers across it
#pragma unroll
    for (int ks = 0; ks < L::kKSteps; ++ks) {
      const uint32_t k_offset = (ks >> 2) * (kDecodeTileTokens * 128) + (ks & 3) * 32;  // Q and K: 64 rows each
      wgmma_m64n64k16_bf16(s, wgmma_desc_advance(desc_q_tile, k_offset), wgmma_desc_advance(desc_k, k_offset),
                           ks > 0);
    }
    wgmma_commit();
  };
  float m_run[2] = {-INFINITY, -INFINITY};  // running max of rows r0, r1 (log2 domain), equal in the row's quad
  float l_run[2] = {0.0f, 0.0f};            // this thread's partial row sums (its columns only)

  // Q [64 heads, 576] (zero rows for heads >= num_heads), loaded by this warpgroup while warpgroup 1 loads the first
  // tiles: short splits are bound by how fast the prologue's loads are issued.
  if (p.kv_loads_before_wait) wait_then_allow_successor(p);
  const int64_t q_latent_batch = static_cast<int64_t>(b) * p.num_heads * L::kLatent;
  const int64_t q_pe_batch = static_cast<int64_t>(b) * p.num_heads * p.q_pe_head_stride;
  for (int idx = tid; idx < L::kHeads * L::kRowChunks; idx += 128) {
    const int r = idx / L::kRowChunks, c = idx % L::kRowChunks, h = head_base + r;
    const bool valid = h < p.num_heads;
    const __nv_bfloat16* src = p.q_latent;
    if (valid) {
      src = c < L::kLatent / 8 ? p.q_latent + q_latent_batch + static_cast<int64_t>(h) * L::kLatent + c * 8
                               : p.q_pe + q_pe_batch + h * p.q_pe_head_stride + (c - L::kLatent / 8) * 8;
    }
    cp_async_16(q_smem + kblock_chunk_offset(r, c, L::kHeads), src, valid ? 16 : 0);
  }
  for (int i = 0; i < 2 && i < num_tiles; ++i) hopper::cp_async_arrive_on(&full[i]);  // warpgroup 1 loads them
  if (num_tiles > 2) {  // tile 2's slots, for both warpgroups (warpgroup 1 reads them after P of tile 0 is ready)
    int32_t slots[kPasses];
    fetch_slots(tile_begin + 2, slots);
    store_slots(2, slots);
  }
  cp_async_commit();
  cp_async_wait_all();
  fence_proxy_async_shared();  // the cp.async writes (generic proxy) before the wgmma reads (async proxy)
  named_barrier_sync(kBarrierQ, 128);  // every row of Q landed (warpgroup 0 only)
  mbarrier_wait(&full[0], 0);
  fence_proxy_async_shared();
  wgmma_fence();
  issue_scores(0);
  wgmma_wait_all();
  wgmma_fence_operands(s);

  for (int i = 0; i < num_tiles; ++i) {
    const int stage = i & 1;
    const int tile = tile_begin + i;
    // ---- mask (the tile the sequence ends in), row maxima of the raw scores within the quad, then the log2 domain
    // (scale_log2 > 0: the maxima commute with the scaling)
    if ((tile + 1) * kDecodeTileTokens > seq_len) {
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (tile * kDecodeTileTokens + j * 8 + 2 * tq + (e & 1) >= seq_len) s[4 * j + e] = -INFINITY;
    }
    float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) row_max[e >> 1] = fmaxf(row_max[e >> 1], s[4 * j + e]);
    float alpha[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      row_max[half] = fmaxf(row_max[half], __shfl_xor_sync(0xffffffffu, row_max[half], 1));
      row_max[half] = fmaxf(row_max[half], __shfl_xor_sync(0xffffffffu, row_max[half], 2));
      row_max[half] *= p.scale_log2;
      // Lazy rescale: P stays relative to the running max unless the tile exceeds it by 2^8 (first tile always).
      alpha[half] = 1.0f;
      if (row_max[half] > m_run[half] + kLazyRescaleLog2) {
        alpha[half] = exp2f(m_run[half] - row_max[half]);
        m_run[half] = row_max[half];
      }
    }
    // ---- P = exp2(S - m) in bf16, running sums of the rounded values
    uint32_t packed[16];  // [n-tile j][half]
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        packed[2 * j + half] = pack_bf16x2(exp2f(fmaf(s[4 * j + 2 * half], p.scale_log2, -m_run[half])),
                                           exp2f(fmaf(s[4 * j + 2 * half + 1], p.scale_log2, -m_run[half])));
        const float2 rounded = unpack_bf16x2(packed[2 * j + half]);
        sum[half] += rounded.x + rounded.y;
      }
#pragma unroll
    for (int half = 0; half < 2; ++half) l_run[half] = l_run[half] * alpha[half] + sum[half];

    if (i > 0) named_barrier_sync(kBarrierPFree, kDecodeThreads);  // warpgroup 1 is done with the previous P
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half)
        store_shared_u32(p_smem + swizzled_elem_offset(half == 0 ? r0 : r1, j * 8 + 2 * tq, kDecodeTileTokens * 2),
                         packed[2 * j + half]);
    if (tq == 0) {
      alpha_sh[r0] = alpha[0];
      alpha_sh[r1] = alpha[1];
    }
    fence_proxy_async_shared();  // P (st.shared) -> both warpgroups' wgmma reads
    named_barrier_sync(kBarrierPWritten, 128);  // every row of P written (warpgroup 0 only)
    named_barrier_arrive(kBarrierPReady, kDecodeThreads);

    // ---- O[:, 0:256] = alpha · O + P · V, then the next tile's scores behind it
    rescale_accumulator_rows(o, alpha);
    wgmma_fence();
    {
      const uint64_t desc_p = wgmma_desc_kmajor_sw128(p_smem), desc_v = values_desc(stage);
#pragma unroll
      for (int kk = 0; kk < kDecodeTileTokens / 16; ++kk)  // P from shared memory (its registers are free)
        wgmma_m64n256k16_bf16_tn(o, wgmma_desc_advance(desc_p, kk * 32), wgmma_desc_advance(desc_v, kk * 16 * 128));
      wgmma_commit();
    }
    if (i + 1 < num_tiles) {
      mbarrier_wait(&full[stage ^ 1], ((i + 1) >> 1) & 1);
      fence_proxy_async_shared();
      issue_scores(stage ^ 1);
      wgmma_wait_pending<1>();  // this tile's P·V (committed first) is done; the next tile's scores still run
    } else {
      wgmma_wait_all();
    }
    wgmma_fence_operands(o);
    if (i + 2 < num_tiles) {  // this stage's last reads of those k-blocks are done: refill behind the scores
      int32_t slots[kPasses];
      load_slots(i + 2, slots);
      load_blocks(stage, slots, kRest);
    }
    wgmma_wait_all();
    wgmma_fence_operands(s);
  }

  // ---- row sums over the quad, 1 / l for both warpgroups, outputs
  float inv_l[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    l_run[half] += __shfl_xor_sync(0xffffffffu, l_run[half], 1);
    l_run[half] += __shfl_xor_sync(0xffffffffu, l_run[half], 2);
    inv_l[half] = 1.0f / l_run[half];
  }
  if (tq == 0) {
    inv_sum_sh[r0] = inv_l[0];
    inv_sum_sh[r1] = inv_l[1];
    if (p.num_splits > 1) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int h = head_base + (half == 0 ? r0 : r1);
        if (h < p.num_heads)
          p.partial_lse[(static_cast<int64_t>(b) * p.num_splits + split) * p.num_heads + h] =
              m_run[half] + log2f(l_run[half]);
      }
    }
  }
  named_barrier_arrive(kBarrierFinal, kDecodeThreads);
  store_rows(inv_l[0], inv_l[1]);
}

}  // namespace fathom::kernels::cuda::mla_detail
