#pragma once
// MLA prefill kernel (expanded form) with a TMA producer warpgroup, for DeepSeek-V3's head dims (nope 128, rope 64,
// v 128) with 16-byte aligned rows. One work item = 128 queries of one sequence and one head: two consumer
// warpgroups of 64 queries share every key tile of 128 keys (half the K/V traffic per FLOP of the one-warpgroup
// kernels). Persistent: a CTA per SM works through its items (mla_prefill_items.h), its rings running on from one item
// into the next, so the next item's first key tiles load under the current one's last tiles and each warpgroup
// loads its next queries under its last P·V (against a CTA per item: 5-11% faster at 256-1024-token sequences,
// 2-4% at 2048-4096, on an H100 and an H200).
// The producer warpgroup fills two rings of two stages each: K (k_nope by TMA from a 3-D tensor map over
// [keys][heads][head stride], k_pe gathered from the paged latent cache by cp.async, 32 rows per producer warp) and
// V (TMA). K and V have separate rings because a consumer is done with a tile's K one softmax before its V.
// Per consumer, software-pipelined: the scores of tile t (wgmma m64n128k16, Q and K from shared memory) are issued
// with P(t - 1)·V(t - 1) (wgmma m64n128k16, P from registers), then the fp32 online softmax of tile t (log2 domain,
// causal mask) runs while that P·V multiplies; K(t) is released when its scores complete, V(t - 1) when its P·V
// does. The two consumers take turns issuing their steps' MMAs (ping-pong), so one's softmax runs under the other's
// MMAs (1-3% at 256-8192 tokens, H200). Causal: the CTA visits key tiles up to its last query; a warpgroup skips the
// tiles past its own last query (still releasing them, and passing the other's turns). Registers: the producer
// warpgroup gives back all but 40 per thread, the consumers take 232 (two P register sets, the 64x128 scores and the
// 64x128 output).
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/mla/mla_prefill_items.h"
#include "kernels/cuda/mla/sm90/mla_prefill_kernel.cuh"  // params
#include "kernels/cuda/mla/sm90/mla_prefill_wgmma_kernel.cuh"  // the output rows
#include "kernels/cuda/mla/sm90/mma_primitives.cuh"
#include "kernels/cuda/sm90/tma_pipeline.cuh"

namespace fathom::kernels::cuda::mla_detail {

struct PrefillTmaLayout {
  static constexpr int kNope = 128, kRope = 64, kV = 128;
  static constexpr int kConsumers = 2;                            // warpgroups of 64 queries
  static constexpr int kTileQ = kConsumers * kPrefillTileQ;       // 128 queries per CTA
  static constexpr int kTileKeys = 128;                           // keys per tile (wgmma n128 scores)
  // + a producer warpgroup: its 4 warps gather 32 k_pe rows of each tile each, the first also issues the TMA copies.
  static constexpr int kProducerWarps = 4;
  static constexpr int kThreads = (kConsumers + 1) * 128;
  static constexpr int kProducerWarp = kConsumers * 4;             // the first producer warp
  static constexpr int kRowsPerProducerWarp = kTileKeys / kProducerWarps;  // 32
  static constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;  // 2 x 232 + 40 <= 3 x 168 (the launch)
  static constexpr int kStages = 2;                                // per ring (K, V)
  static constexpr int kQBlockBytes = kPrefillTileQ * 128;         // [64 rows][128 B] k-block, 128-byte swizzle
  static constexpr int kKeyBlockBytes = kTileKeys * 128;           // [128 rows][128 B]
  static constexpr int kQkBlocks = (kNope + kRope) / 64;          // 3: nope 0..63, nope 64..127, rope
  static constexpr int kVBlocks = kV / 64;                        // 2
  static constexpr int kQkSteps = (kNope + kRope) / 16;           // 12
  static constexpr int kQWarpgroupBytes = kQkBlocks * kQBlockBytes;  // one consumer's Q [3 blocks][64 rows][128 B]
  static constexpr int kKStageBytes = kQkBlocks * kKeyBlockBytes;    // [3 blocks][128 keys][128 B]
  static constexpr int kVStageBytes = kVBlocks * kKeyBlockBytes;     // [2 blocks][128 keys][128 B]
  static constexpr uint32_t kKTmaBytes = 2 * kKeyBlockBytes;        // k_nope's 2 blocks (k_pe by cp.async)
  static constexpr uint32_t kVTmaBytes = kVStageBytes;
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kConsumers * kQWarpgroupBytes;
  static constexpr int kVOffset = kKOffset + kStages * kKStageBytes;
  // k_full[kStages], k_empty[kStages], v_full[kStages], v_empty[kStages]
  static constexpr int kBarrierOffset = kVOffset + kStages * kVStageBytes;
  static constexpr int kSmemBytes = kBarrierOffset + 4 * kStages * 8 + 1024;  // + slack to align the base to 1 KB
  static constexpr uint32_t kKFullArrivals = 1 + kProducerWarps * 32;  // expect_tx + the producer lanes' cp.async
  static constexpr uint32_t kVFullArrivals = 1;                        // expect_tx
  static constexpr uint32_t kEmptyArrivals = kConsumers * 4;           // one per consumer warp
  static_assert(kPrefillTileQ == 64, "m64 wgmma tiles of queries");
  static_assert(kSmemBytes <= 232448, "shared memory per block on sm_90");
};

// The CTA's items (mla_prefill_items.h): ctas and cta from the special registers, the order from the kernel's
// parameters, read when needed rather than kept in registers (the producer warps keep 40).
struct PrefillTmaItems {
  PrefillItemOrder order;
  __device__ int index(int round) const {  // -1: no item in this round (nor in any later one)
    return order.index(round, static_cast<int>(gridDim.x), static_cast<int>(blockIdx.x));
  }
};

struct PrefillTmaItem {
  int b, h, q_begin, q_len, kv_begin, kv_len, q0, pos_offset, key_position, kv_tiles;  // kv_tiles 0: nothing to do
};

__device__ __forceinline__ PrefillTmaItem prefill_tma_item(const PrefillKernelParams& p, const PrefillTmaItems& items,
                                                           int index) {
  using L = PrefillTmaLayout;
  PrefillTmaItem t;
  const PrefillItemCoords coords = items.order.coords(index);
  t.b = coords.sequence;
  t.h = coords.head;
  t.q0 = coords.q_tile * L::kTileQ;
  const PrefillSequence s = prefill_sequence(p, t.b);
  t.q_begin = s.q_begin;
  t.q_len = s.q_len;
  t.kv_begin = s.kv_begin;
  t.kv_len = s.kv_len;
  t.pos_offset = s.pos_offset;  // query j sees the window's keys 0 .. pos_offset + j
  t.key_position = s.key_position;
  const int last_pos = min(t.pos_offset + min(t.q0 + L::kTileQ, t.q_len) - 1, t.kv_len - 1);
  t.kv_tiles = t.q0 >= t.q_len || last_pos < 0 ? 0 : ceil_div_int(last_pos + 1, L::kTileKeys);
  return t;
}

// Requires p.nope == 128, p.rope == 64, p.v_dim == 128, p.vector_loads, and maps over the k_nope / v tensors
// ([keys][heads][head stride] bf16 as bytes, the first 128 of each head; boxes of 128 keys x 128 bytes of one head;
// checked by the host). num_q_tiles = ceil(max_q_len / 128); head_block >= 1 (PrefillItemOrder); grid: at most
// heads * batch * num_q_tiles CTAs.
__global__ void __launch_bounds__(PrefillTmaLayout::kThreads, 1)
    mla_prefill_tma_kernel(const PrefillKernelParams p, const __grid_constant__ CUtensorMap k_map,
                           const __grid_constant__ CUtensorMap v_map, int num_q_tiles, int batch,
                           int head_block) {
  using L = PrefillTmaLayout;
  using hopper::mbarrier_arrive;
  using hopper::mbarrier_wait;
  constexpr int kNTiles = L::kTileKeys / 8;  // score n-tiles of 8 keys
  extern __shared__ __align__(1024) uint8_t prefill_tma_smem_raw[];
  uint8_t* smem = prefill_tma_smem_raw + ((1024 - (smem_u32(prefill_tma_smem_raw) & 1023u)) & 1023u);
  uint64_t* k_full = reinterpret_cast<uint64_t*>(smem + L::kBarrierOffset);
  uint64_t* k_empty = k_full + L::kStages;
  uint64_t* v_full = k_empty + L::kStages;
  uint64_t* v_empty = v_full + L::kStages;
  const PrefillTmaItems items{{num_q_tiles, batch, p.num_heads, head_block}};

  const int tid = threadIdx.x, lane = tid & 31;
  const int warp = __shfl_sync(0xffffffffu, tid >> 5, 0);  // warp-uniform for ptxas (wgmma paths non-divergent)
  if (tid == 0) {
    for (int s = 0; s < L::kStages; ++s) {
      hopper::mbarrier_init(&k_full[s], L::kKFullArrivals);
      hopper::mbarrier_init(&k_empty[s], L::kEmptyArrivals);
      hopper::mbarrier_init(&v_full[s], L::kVFullArrivals);
      hopper::mbarrier_init(&v_empty[s], L::kEmptyArrivals);
    }
    hopper::fence_barrier_init();
  }
  __syncthreads();
  // The rings carry the CTA's key tiles in sequence over all its items: tile t of an item whose predecessors took
  // `carried` tiles is the ring's tile carried + t. Stage s holds ring tiles s, s + kStages, ...: waits name the
  // parity of the tile's pass.
  auto ring_stage = [](int ring_tile) { return ring_tile % L::kStages; };
  auto ring_parity = [](int ring_tile) { return static_cast<uint32_t>((ring_tile / L::kStages) & 1); };

  if (warp >= L::kProducerWarp) {
    hopper::warpgroup_release_registers<L::kProducerRegisters>();
    // ---- producer warp pw: rows [32 pw, 32 pw + 32) of each tile's k_pe block, gathered from the paged cache by
    // cp.async (8 lanes per row, 4 rows per pass); warp 0 also issues k_nope and v by TMA. Order per item: K(t + 1),
    // then V(t), as the consumers release them (K(t - 1) once its scores completed, V(t - 2) after its P·V); then
    // the next item's K(0). A row's cache slot is read before the wait for its stage (lane l: row 32 pw + l), then
    // broadcast to the 8 lanes copying it.
    const int pw = warp - L::kProducerWarp;
    const int64_t cache_row_elems = static_cast<int64_t>(p.kv_lora) + L::kRope;
    int carried = 0;
    for (int round = 0;; ++round) {
      const int index = items.index(round);
      if (index < 0) break;
      const PrefillTmaItem it = prefill_tma_item(p, items, index);
      const int32_t* pages = p.page_table + static_cast<int64_t>(it.b) * p.max_pages_per_seq;
      auto key_slot = [&](int tile) {  // -1 past kv_len (a slot < 2^31: 2.4 TB of rows)
        const int key = tile * L::kTileKeys + pw * L::kRowsPerProducerWarp + lane, position = it.key_position + key;
        return key < it.kv_len ? pages[position / p.page_size] * p.page_size + position % p.page_size : -1;
      };
      auto load_keys = [&](int tile, int32_t slot) {
        const int stage = ring_stage(carried + tile);
        mbarrier_wait(&k_empty[stage], ring_parity(carried + tile) ^ 1);
        uint8_t* k_stage = smem + L::kKOffset + stage * L::kKStageBytes;
        if (pw == 0 && lane == 0) {
          const int key_row = it.kv_begin + tile * L::kTileKeys;
          hopper::mbarrier_arrive_expect_tx(&k_full[stage], L::kKTmaBytes);
          hopper::tma_load_3d(k_stage, &k_map, 0, it.h, key_row, &k_full[stage]);
          hopper::tma_load_3d(k_stage + L::kKeyBlockBytes, &k_map, 128, it.h, key_row, &k_full[stage]);
        }
        const uint32_t rope_block = smem_u32(k_stage + 2 * L::kKeyBlockBytes);
#pragma unroll
        for (int i = 0; i < L::kRowsPerProducerWarp * 8 / 32; ++i) {
          const int local_row = 4 * i + (lane >> 3), c = lane & 7;
          const int32_t row_slot = __shfl_sync(0xffffffffu, slot, local_row);
          const int64_t row_offset = static_cast<int64_t>(row_slot) * cache_row_elems + p.kv_lora + c * 8;
          const __nv_bfloat16* src = row_slot >= 0 ? p.cache + row_offset : p.cache;
          cp_async_16(rope_block + kblock_chunk_offset(pw * L::kRowsPerProducerWarp + local_row, c, L::kTileKeys), src,
                      row_slot >= 0 ? 16 : 0);
        }
        hopper::cp_async_arrive_on(&k_full[stage]);
      };
      auto load_values = [&](int tile) {
        if (pw != 0) return;
        const int stage = ring_stage(carried + tile);
        mbarrier_wait(&v_empty[stage], ring_parity(carried + tile) ^ 1);
        if (lane == 0) {
          uint8_t* v_stage = smem + L::kVOffset + stage * L::kVStageBytes;
          const int key_row = it.kv_begin + tile * L::kTileKeys;
          hopper::mbarrier_arrive_expect_tx(&v_full[stage], L::kVTmaBytes);
          hopper::tma_load_3d(v_stage, &v_map, 0, it.h, key_row, &v_full[stage]);
          hopper::tma_load_3d(v_stage + L::kKeyBlockBytes, &v_map, 128, it.h, key_row, &v_full[stage]);
        }
        __syncwarp();
      };
      if (it.kv_tiles == 0) continue;
      int32_t slot = key_slot(0);
      load_keys(0, slot);
      for (int tile = 0; tile < it.kv_tiles; ++tile) {
        if (tile + 1 < it.kv_tiles) {
          slot = key_slot(tile + 1);
          load_keys(tile + 1, slot);
        }
        load_values(tile);
      }
      carried += it.kv_tiles;
    }
    cp_async_wait_all();  // nothing in flight when the warp exits
    return;
  }
  hopper::warpgroup_claim_registers<L::kConsumerRegisters>();

  // ---- consumers: warpgroup wg owns queries q0 + 64 wg .. + 63 of each item
  const int wg = warp >> 2, wg_tid = tid & 127, g = lane >> 2, tq = lane & 3;
  const uint32_t q_smem = smem_u32(smem + L::kQOffset + wg * L::kQWarpgroupBytes);
  const int64_t q_token_stride = static_cast<int64_t>(p.num_heads) * p.q_head_stride;
  // Copies this warpgroup's 64 query rows of item `index` into q_smem (zeros past q_len) as one cp.async group.
  auto load_queries = [&](int index) {
    if (index < 0) return;
    const PrefillTmaItem it = prefill_tma_item(p, items, index);
    const int q_wg = it.q0 + wg * kPrefillTileQ;
    constexpr int kQkChunks = (L::kNope + L::kRope) / 8;  // 24: nope chunks 0..15, rope 16..23
    for (int idx = wg_tid; idx < kPrefillTileQ * kQkChunks; idx += 128) {
      const int r = idx / kQkChunks, c = idx % kQkChunks;
      const bool valid = q_wg + r < it.q_len;
      const __nv_bfloat16* src =
          valid ? p.q + (it.q_begin + q_wg + r) * q_token_stride + it.h * p.q_head_stride + c * 8 : p.q;
      cp_async_16(q_smem + kblock_chunk_offset(r, c, kPrefillTileQ), src, valid ? 16 : 0);
    }
    cp_async_commit();
  };

  auto release = [&](uint64_t* empty, int ring_tile) {  // this warp's MMAs have read the stage
    __syncwarp();
    if (lane == 0) mbarrier_arrive(&empty[ring_stage(ring_tile)]);
  };
  auto wait_keys = [&](int ring_tile) {
    mbarrier_wait(&k_full[ring_stage(ring_tile)], ring_parity(ring_tile));
    fence_proxy_async_shared();  // the producer's cp.async rows (generic proxy) before this wgmma reads them
  };
  auto wait_values = [&](int ring_tile) { mbarrier_wait(&v_full[ring_stage(ring_tile)], ring_parity(ring_tile)); };
  const uint64_t desc_q = wgmma_desc_kmajor_sw128(q_smem);
  // Descriptors are made before a group of MMAs starts (ptxas serializes MMAs whose inputs are defined between them).
  auto keys_desc = [&](int ring_tile) {
    return wgmma_desc_kmajor_sw128(smem_u32(smem + L::kKOffset + ring_stage(ring_tile) * L::kKStageBytes));
  };
  auto values_desc = [&](int ring_tile) {
    return wgmma_desc_sw128(smem_u32(smem + L::kVOffset + ring_stage(ring_tile) * L::kVStageBytes),
                            L::kKeyBlockBytes, 1024);
  };

  // Turns (ping-pong): the two warpgroups issue their pipelined steps' MMAs in alternation, so one's softmax runs
  // under the other's MMAs. Named barrier 3 + wg is this warpgroup's turn; its sync completes once the other has
  // arrived on it after issuing. Both take kv_tiles - 1 turns per item (a warpgroup with fewer steps passes the rest
  // empty), so the turns alternate strictly across items; warpgroup 1 gives warpgroup 0 the first.
  auto take_turn = [&]() { hopper::named_barrier_sync(3 + wg, 256); };
  auto pass_turn = [&]() { hopper::named_barrier_arrive(3 + (1 - wg), 256); };
  if (wg == 1) pass_turn();
  int carried = 0, round = 0, index = items.index(0);
  load_queries(index);
  while (index >= 0) {
    const PrefillTmaItem it = prefill_tma_item(p, items, index);
    const int q_wg = it.q0 + wg * kPrefillTileQ;
    cp_async_wait_all();  // this warpgroup's queries of the item
    fence_proxy_async_shared();
    hopper::named_barrier_sync(1 + wg, 128);

    // Key tiles this warpgroup needs (its last query's position); the item's later tiles are only released.
    const int wg_last_pos = min(it.pos_offset + min(q_wg + kPrefillTileQ, it.q_len) - 1, it.kv_len - 1);
    const int wg_tiles =
        it.kv_tiles == 0 || q_wg >= it.q_len || wg_last_pos < 0 ? 0 : ceil_div_int(wg_last_pos + 1, L::kTileKeys);

    float o[64];  // O [64 queries x 128 v]: o[4j + e] = (row 16 (warp % 4) + g + 8 (e >> 1), col 8j + 2 tq + (e & 1))
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
    const int row_q[2] = {q_wg + (warp & 3) * 16 + g, q_wg + (warp & 3) * 16 + g + 8};  // query within the sequence
    const int row_pos[2] = {it.pos_offset + row_q[0], it.pos_offset + row_q[1]};
    const int wg_first_pos = it.pos_offset + q_wg;  // every row of the warpgroup sees the keys up to here

    float s[kNTiles][4];  // S [64 queries x 128 keys] in the mma m16n8 layout: wgmma's d[4j + e] is s[j][e]
    float(&s_flat)[4 * kNTiles] = reinterpret_cast<float(&)[4 * kNTiles]>(s);
    auto issue_scores = [&](uint64_t desc_k) {  // S = Q·Kᵀ over [nope ; rope] (the first k-step overwrites s)
#pragma unroll
      for (int ks = 0; ks < L::kQkSteps; ++ks) {
        const uint32_t k16 = (ks & 3) * 32;  // byte offset of the k16 step within a 128-byte k-block row
        wgmma_m64n128k16_bf16(s_flat, wgmma_desc_advance(desc_q, k16 + (ks >> 2) * L::kQBlockBytes),
                              wgmma_desc_advance(desc_k, k16 + (ks >> 2) * L::kKeyBlockBytes), ks > 0);
      }
      wgmma_commit();
    };
    // O += P·V, P from registers, V [128 keys x 128] N-major.
    auto issue_values = [&](const uint32_t (&p_frag)[kNTiles][2], uint64_t desc_v) {
#pragma unroll
      for (int kk = 0; kk < L::kTileKeys / 16; ++kk) {
        const uint32_t a[4] = {p_frag[2 * kk][0], p_frag[2 * kk][1], p_frag[2 * kk + 1][0], p_frag[2 * kk + 1][1]};
        wgmma_m64n128k16_bf16_rs_tn(o, a, wgmma_desc_advance(desc_v, kk * 16 * 128));
      }
      wgmma_commit();
    };
    // P of two consecutive tiles in two register sets (p_even: even tiles), so the softmax of one never writes the
    // registers an in-flight P·V reads (a loop-carried copy would let ptxas merge them and serialize the MMAs).
    uint32_t p_even[kNTiles][2], p_odd[kNTiles][2];
    float alpha[2];
    // One pipelined step: the scores of `tile` with P(tile - 1)·V(tile - 1), the softmax of `tile` into p_out
    // under the P·V, then O rescaled for `tile`.
    auto step = [&](int tile, const uint32_t (&p_in)[kNTiles][2], uint32_t (&p_out)[kNTiles][2]) {
      wait_keys(carried + tile);
      wait_values(carried + tile - 1);
      const uint64_t desc_k = keys_desc(carried + tile), desc_v = values_desc(carried + tile - 1);
      take_turn();
      wgmma_fence();  // O's rescale and P (register writes) before the MMAs read them
      issue_scores(desc_k);
      issue_values(p_in, desc_v);
      pass_turn();
      wgmma_wait_pending<1>();  // the scores (committed first) are done: K(tile) is free
      wgmma_fence_operands(s_flat);
      release(k_empty, carried + tile);
      const int tile_last_key = (tile + 1) * L::kTileKeys - 1;
      if (tile_last_key <= wg_first_pos && tile_last_key < it.kv_len) {  // below the diagonal: every key visible
        prefill_online_softmax<kNTiles, false>(s, tile * L::kTileKeys, tq, row_pos, it.kv_len, p.scale_log2, m_run,
                                               l_run, alpha, p_out);
      } else {
        prefill_online_softmax(s, tile * L::kTileKeys, tq, row_pos, it.kv_len, p.scale_log2, m_run, l_run, alpha,
                               p_out);
      }
      wgmma_wait_all();  // P·V of tile - 1: O and V(tile - 1) are free
      wgmma_fence_operands(o);
      release(v_empty, carried + tile - 1);
      rescale_accumulator_rows(o, alpha);
    };
    // Every warp's scores MMAs are done with q_smem: the next item's queries load under this item's last P·V.
    auto load_next_queries = [&]() {
      hopper::named_barrier_sync(1 + wg, 128);
      load_queries(items.index(round + 1));
    };
    if (wg_tiles > 0) {
      wait_keys(carried);
      const uint64_t desc_k0 = keys_desc(carried);
      wgmma_fence();
      issue_scores(desc_k0);
      wgmma_wait_all();
      wgmma_fence_operands(s_flat);
      release(k_empty, carried);
      prefill_online_softmax(s, 0, tq, row_pos, it.kv_len, p.scale_log2, m_run, l_run, alpha, p_even);  // O = 0
      int tile = 1;
      for (; tile + 1 < wg_tiles; tile += 2) {
        step(tile, p_even, p_odd);
        step(tile + 1, p_odd, p_even);
      }
      if (tile < wg_tiles) step(tile, p_even, p_odd);
      load_next_queries();
      const int last = wg_tiles - 1;  // its P: p_even when last is even
      wait_values(carried + last);
      const uint64_t desc_v = values_desc(carried + last);
      wgmma_fence();
      if (last % 2 == 0) {
        issue_values(p_even, desc_v);
      } else {
        issue_values(p_odd, desc_v);
      }
      wgmma_wait_all();
      wgmma_fence_operands(o);
      release(v_empty, carried + last);
    } else {
      load_next_queries();
    }
    // The item's tiles past this warpgroup's last query: released in step with the other warpgroup's steps, whose
    // turns this one passes tile by tile (the other's step t waits for key tile t, which waits for this one's release
    // of tile t - 2; passing all turns before or after all releases deadlocked).
    for (int tile = wg_tiles; tile < it.kv_tiles; ++tile) {
      if (tile >= 1) {
        take_turn();
        pass_turn();
      }
      wait_keys(carried + tile);
      release(k_empty, carried + tile);
      wait_values(carried + tile);
      release(v_empty, carried + tile);
    }
    prefill_store_rows(p, it.q_begin, it.q_len, it.h, tq, row_q, m_run, l_run, o);
    carried += it.kv_tiles;
    index = items.index(++round);
  }
}

}  // namespace fathom::kernels::cuda::mla_detail
