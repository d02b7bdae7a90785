#pragma once
// MLA prefill kernel (expanded form) with a TMA producer warpgroup, for DeepSeek-V3's head dims (nope 128, rope 64,
// v 128) with 16-byte aligned rows. One CTA = 128 queries of one sequence and one head: two consumer warpgroups of
// 64 queries share every K/V tile (half the K/V traffic per FLOP of the one-warpgroup kernels), and the producer
// warpgroup keeps kStages tiles in flight: k_nope and v by TMA (3-D tensor maps over [keys][heads][head stride], one
// 64-key x 64-column box per k-block), k_pe gathered from the paged latent cache by cp.async (16 rows per producer
// warp: with one warp the gather set the pace, 395 vs 435 TFLOP/s), both completing on the stage's `full` mbarrier;
// the consumers release a stage on its `empty` mbarrier once their MMAs have read it.
// Per consumer and key tile (as mla_prefill_wgmma_kernel.cuh): S = Q·Kᵀ as wgmma m64n64k16 from shared memory,
// causal mask and fp32 online softmax (log2 domain), O += P·V as wgmma m64n128k16 with P from the score registers;
// a tile's scores are issued with the previous tile's P·V, so its softmax overlaps that MMA.
// Causal: the CTA visits key tiles up to its last query; a warpgroup skips the tiles past its own last query
// (still releasing them).
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/mla/sm90/mla_prefill_kernel.cuh"  // params
#include "kernels/cuda/mla/sm90/mla_prefill_wgmma_kernel.cuh"  // the per-tile math, the output rows
#include "kernels/cuda/mla/sm90/mma_primitives.cuh"
#include "kernels/cuda/sm90/tma_pipeline.cuh"

namespace fathom::kernels::cuda::mla_detail {

struct PrefillTmaLayout {
  static constexpr int kNope = 128, kRope = 64, kV = 128;
  static constexpr int kConsumers = 2;                            // warpgroups of 64 queries
  static constexpr int kTileQ = kConsumers * kPrefillTileQ;       // 128 queries per CTA
  // + a producer warpgroup: its 4 warps gather 16 k_pe rows of each tile each (the gather sets the pace with one
  // warp), the first also issues the TMA copies.
  static constexpr int kProducerWarps = 4;
  static constexpr int kThreads = (kConsumers + 1) * 128;
  static constexpr int kProducerWarp = kConsumers * 4;             // the first producer warp
  static constexpr int kRowsPerProducerWarp = kPrefillTileKv / kProducerWarps;  // 16
  static constexpr int kStages = 4;
  static constexpr int kBlockBytes = kPrefillTileKv * 128;        // [64 rows][128 B] k-block, 128-byte swizzle
  static constexpr int kQkBlocks = (kNope + kRope) / 64;          // 3: nope 0..63, nope 64..127, rope
  static constexpr int kVBlocks = kV / 64;                        // 2
  static constexpr int kQkSteps = (kNope + kRope) / 16;           // 12
  static constexpr int kQWarpgroupBytes = kQkBlocks * kBlockBytes;  // one consumer's Q [3 blocks][64 rows][128 B]
  static constexpr int kKTileBytes = kQkBlocks * kBlockBytes;
  static constexpr int kStageBytes = kKTileBytes + kVBlocks * kBlockBytes;  // K [3 blocks] then V [2 blocks]
  static constexpr uint32_t kTmaBytesPerStage = 4 * kBlockBytes;  // k_nope 2 blocks + v 2 blocks
  static constexpr int kQOffset = 0;
  static constexpr int kStageOffset = kQOffset + kConsumers * kQWarpgroupBytes;
  static constexpr int kBarrierOffset = kStageOffset + kStages * kStageBytes;  // full[kStages], empty[kStages]
  static constexpr int kSmemBytes = kBarrierOffset + 2 * kStages * 8 + 1024;   // + slack to align the base to 1 KB
  static constexpr uint32_t kFullArrivals = 1 + kProducerWarps * 32;  // expect_tx + the producer lanes' cp.async
  static constexpr uint32_t kEmptyArrivals = kConsumers * 4;           // one per consumer warp
  static_assert(kPrefillTileQ == 64 && kPrefillTileKv == 64, "m64 wgmma tiles of 64 keys");
  static_assert(kSmemBytes <= 232448, "shared memory per block on sm_90");
};

// Requires p.nope == 128, p.rope == 64, p.v_dim == 128, p.vector_loads, and maps over the k_nope / v tensors
// ([keys][heads][head stride] bf16 as bytes, the first 128 of each head; boxes of 64 keys x 128 bytes of one head;
// checked by the host).
__global__ void __launch_bounds__(PrefillTmaLayout::kThreads, 1)
    mla_prefill_tma_kernel(const PrefillKernelParams p, const __grid_constant__ CUtensorMap k_map,
                           const __grid_constant__ CUtensorMap v_map) {
  using L = PrefillTmaLayout;
  using hopper::mbarrier_arrive;
  using hopper::mbarrier_wait;
  extern __shared__ __align__(1024) uint8_t prefill_tma_smem_raw[];
  uint8_t* smem = prefill_tma_smem_raw + ((1024 - (smem_u32(prefill_tma_smem_raw) & 1023u)) & 1023u);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + L::kBarrierOffset);
  uint64_t* empty = full + L::kStages;

  const int b = blockIdx.z, h = blockIdx.y;
  const int q_begin = p.cu_q_lens[b], q_len = p.cu_q_lens[b + 1] - q_begin;
  const int kv_begin = p.cu_kv_lens[b], kv_len = p.cu_kv_lens[b + 1] - kv_begin;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * L::kTileQ;  // the longest (latest) query tiles start first
  if (q0 >= q_len) return;
  const int pos_offset = kv_len - q_len;  // query j is at position pos_offset + j
  const int last_pos = min(pos_offset + min(q0 + L::kTileQ, q_len) - 1, kv_len - 1);
  const int kv_tiles = last_pos < 0 ? 0 : ceil_div_int(last_pos + 1, kPrefillTileKv);

  const int tid = threadIdx.x, lane = tid & 31;
  const int warp = __shfl_sync(0xffffffffu, tid >> 5, 0);  // warp-uniform for ptxas (wgmma paths non-divergent)
  if (tid == 0) {
    for (int s = 0; s < L::kStages; ++s) {
      hopper::mbarrier_init(&full[s], L::kFullArrivals);
      hopper::mbarrier_init(&empty[s], L::kEmptyArrivals);
    }
    hopper::fence_barrier_init();
  }
  __syncthreads();

  if (warp >= L::kProducerWarp) {
    // ---- producer warp pw: rows [16 pw, 16 pw + 16) of each tile's k_pe block, gathered from the paged cache by
    // cp.async (8 lanes per row); warp 0 also issues k_nope / v by TMA. The cache slots of a tile's rows are read one
    // tile ahead (lane l < 16: row 16 pw + l), so the page-table latency overlaps the wait for a free stage; each
    // row's slot is then broadcast to the 8 lanes copying it.
    const int pw = warp - L::kProducerWarp;
    const int32_t* pages = p.page_table + static_cast<int64_t>(b) * p.max_pages_per_seq;
    const int64_t cache_row_elems = static_cast<int64_t>(p.kv_lora) + L::kRope;
    auto key_slot = [&](int tile) {  // -1 past kv_len or for lanes >= 16 (a slot < 2^31: 2.4 TB of rows)
      const int key = tile * kPrefillTileKv + pw * L::kRowsPerProducerWarp + lane;
      return lane < L::kRowsPerProducerWarp && key < kv_len ? pages[key / p.page_size] * p.page_size + key % p.page_size
                                                             : -1;
    };
    int32_t slot = kv_tiles > 0 ? key_slot(0) : -1;
    for (int tile = 0; tile < kv_tiles; ++tile) {
      const int32_t next_slot = tile + 1 < kv_tiles ? key_slot(tile + 1) : -1;
      const int stage = tile % L::kStages;
      mbarrier_wait(&empty[stage], ((tile / L::kStages) & 1) ^ 1);
      uint8_t* k_stage = smem + L::kStageOffset + stage * L::kStageBytes;
      uint8_t* v_stage = k_stage + L::kKTileBytes;
      if (pw == 0 && lane == 0) {
        const int key_row = kv_begin + tile * kPrefillTileKv;
        hopper::mbarrier_arrive_expect_tx(&full[stage], L::kTmaBytesPerStage);
        hopper::tma_load_3d(k_stage, &k_map, 0, h, key_row, &full[stage]);
        hopper::tma_load_3d(k_stage + L::kBlockBytes, &k_map, 128, h, key_row, &full[stage]);
        hopper::tma_load_3d(v_stage, &v_map, 0, h, key_row, &full[stage]);
        hopper::tma_load_3d(v_stage + L::kBlockBytes, &v_map, 128, h, key_row, &full[stage]);
      }
      const uint32_t rope_block = smem_u32(k_stage + 2 * L::kBlockBytes);
#pragma unroll
      for (int i = 0; i < L::kRowsPerProducerWarp * 8 / 32; ++i) {
        const int local_row = 4 * i + (lane >> 3), c = lane & 7;
        const int32_t row_slot = __shfl_sync(0xffffffffu, slot, local_row);
        const __nv_bfloat16* src =
            row_slot >= 0 ? p.cache + static_cast<int64_t>(row_slot) * cache_row_elems + p.kv_lora + c * 8 : p.cache;
        cp_async_16(rope_block + kblock_chunk_offset(pw * L::kRowsPerProducerWarp + local_row, c, kPrefillTileKv), src,
                    row_slot >= 0 ? 16 : 0);
      }
      hopper::cp_async_arrive_on(&full[stage]);
      slot = next_slot;
    }
    cp_async_wait_all();  // nothing in flight when the warp exits
    return;
  }

  // ---- consumers: warpgroup wg owns queries q0 + 64 wg .. + 63
  const int wg = warp >> 2, wg_tid = tid & 127, g = lane >> 2, tq = lane & 3;
  const int q_wg = q0 + wg * kPrefillTileQ;
  const uint32_t q_smem = smem_u32(smem + L::kQOffset + wg * L::kQWarpgroupBytes);
  const int64_t q_token_stride = static_cast<int64_t>(p.num_heads) * p.q_head_stride;
  constexpr int kQkChunks = (L::kNope + L::kRope) / 8;  // 24: nope chunks 0..15, rope 16..23
  for (int idx = wg_tid; idx < kPrefillTileQ * kQkChunks; idx += 128) {
    const int r = idx / kQkChunks, c = idx % kQkChunks;
    const bool valid = q_wg + r < q_len;
    const __nv_bfloat16* src = valid ? p.q + (q_begin + q_wg + r) * q_token_stride + h * p.q_head_stride + c * 8 : p.q;
    cp_async_16(q_smem + kblock_chunk_offset(r, c, kPrefillTileQ), src, valid ? 16 : 0);
  }
  cp_async_commit();
  cp_async_wait_all();
  fence_proxy_async_shared();
  hopper::named_barrier_sync(1 + wg, 128);

  // Key tiles this warpgroup needs (its last query's position); the CTA's later tiles are only released.
  const int wg_last_pos = min(pos_offset + min(q_wg + kPrefillTileQ, q_len) - 1, kv_len - 1);
  const int wg_tiles = q_wg >= q_len || wg_last_pos < 0 ? 0 : ceil_div_int(wg_last_pos + 1, kPrefillTileKv);

  float o[64];  // O [64 queries x 128 v]: o[4j + e] = (row 16 (warp % 4) + g + 8 (e >> 1), column 8j + 2 tq + (e & 1))
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  const int row_q[2] = {q_wg + (warp & 3) * 16 + g, q_wg + (warp & 3) * 16 + g + 8};  // query within the sequence
  const int row_pos[2] = {pos_offset + row_q[0], pos_offset + row_q[1]};

  // Software-pipelined over the warpgroup's tiles: the scores of tile t are issued together with P·V of tile t - 1,
  // so the softmax of tile t runs while the tensor cores multiply P(t - 1) by V(t - 1). A stage is released once
  // its P·V has completed (its scores completed one softmax earlier).
  const uint64_t desc_q = wgmma_desc_kmajor_sw128(q_smem);
  auto stage_base = [&](int tile) { return smem_u32(smem + L::kStageOffset + (tile % L::kStages) * L::kStageBytes); };
  auto wait_full = [&](int tile) { mbarrier_wait(&full[tile % L::kStages], (tile / L::kStages) & 1); };
  auto release = [&](int tile) {  // this warp's MMAs have read the stage
    __syncwarp();
    if (lane == 0) mbarrier_arrive(&empty[tile % L::kStages]);
  };
  float s[kPrefillTileKv / 8][4];  // S [64 queries x 64 keys] in the mma m16n8 layout: wgmma's d[4j + e] is s[j][e]
  float(&s_flat)[32] = reinterpret_cast<float(&)[32]>(s);
  // Descriptors are made before a group of MMAs starts (ptxas serializes MMAs whose inputs are defined between them).
  auto keys_desc = [&](int tile) { return wgmma_desc_kmajor_sw128(stage_base(tile)); };
  auto issue_scores = [&](uint64_t desc_k) {  // S = Q·Kᵀ over [nope ; rope] (the first k-step overwrites s)
#pragma unroll
    for (int ks = 0; ks < L::kQkSteps; ++ks) {
      const uint32_t k_offset = (ks & 3) * 32 + (ks >> 2) * L::kBlockBytes;
      wgmma_m64n64k16_bf16(s_flat, wgmma_desc_advance(desc_q, k_offset), wgmma_desc_advance(desc_k, k_offset), ks > 0);
    }
    wgmma_commit();
  };
  // O += P·V, P from registers, V [64 keys x 128] N-major.
  auto issue_values = [&](const uint32_t (&p_frag)[kPrefillTileKv / 8][2], uint64_t desc_v) {
#pragma unroll
    for (int kk = 0; kk < kPrefillTileKv / 16; ++kk) {
      const uint32_t a[4] = {p_frag[2 * kk][0], p_frag[2 * kk][1], p_frag[2 * kk + 1][0], p_frag[2 * kk + 1][1]};
      wgmma_m64n128k16_bf16_rs_tn(o, a, wgmma_desc_advance(desc_v, kk * 16 * 128));
    }
    wgmma_commit();
  };
  auto values_desc = [&](int tile) { return wgmma_desc_sw128(stage_base(tile) + L::kKTileBytes, L::kBlockBytes, 1024); };
  // P of two consecutive tiles in two register sets (p_even: even tiles), so the softmax of one never writes the
  // registers an in-flight P·V reads (a loop-carried copy would let ptxas merge them and serialize the MMAs).
  uint32_t p_even[kPrefillTileKv / 8][2], p_odd[kPrefillTileKv / 8][2];
  float alpha[2];
  // One pipelined step: the scores of `tile` with P(tile - 1)·V(tile - 1), the softmax of `tile` into p_out
  // under the P·V, then O rescaled for `tile`.
  auto step = [&](int tile, const uint32_t (&p_in)[kPrefillTileKv / 8][2], uint32_t (&p_out)[kPrefillTileKv / 8][2]) {
    wait_full(tile);
    fence_proxy_async_shared();  // the producer's cp.async rows (generic proxy) before this wgmma reads them
    const uint64_t desc_k = keys_desc(tile), desc_v = values_desc(tile - 1);
    wgmma_fence();  // O's rescale and P (register writes) before the MMAs read them
    issue_scores(desc_k);
    issue_values(p_in, desc_v);
    wgmma_wait_pending<1>();  // the scores (committed first) are done
    wgmma_fence_operands(s_flat);
    prefill_online_softmax(s, tile * kPrefillTileKv, tq, row_pos, kv_len, p.scale_log2, m_run, l_run, alpha, p_out);
    wgmma_wait_all();  // P·V of tile - 1: O and its stage are free
    wgmma_fence_operands(o);
    release(tile - 1);
    rescale_accumulator_rows(o, alpha);
  };
  if (wg_tiles > 0) {
    wait_full(0);
    fence_proxy_async_shared();
    const uint64_t desc_k0 = keys_desc(0);
    wgmma_fence();
    issue_scores(desc_k0);
    wgmma_wait_all();
    wgmma_fence_operands(s_flat);
    prefill_online_softmax(s, 0, tq, row_pos, kv_len, p.scale_log2, m_run, l_run, alpha, p_even);  // O = 0 so far
    int tile = 1;
    for (; tile + 1 < wg_tiles; tile += 2) {
      step(tile, p_even, p_odd);
      step(tile + 1, p_odd, p_even);
    }
    if (tile < wg_tiles) step(tile++, p_even, p_odd);
    const int last = wg_tiles - 1;  // its P: p_even when last is even
    const uint64_t desc_v = values_desc(last);
    wgmma_fence();
    if (last % 2 == 0) {
      issue_values(p_even, desc_v);
    } else {
      issue_values(p_odd, desc_v);
    }
    wgmma_wait_all();
    wgmma_fence_operands(o);
    release(last);
  }
  for (int tile = wg_tiles; tile < kv_tiles; ++tile) {  // the CTA's tiles past this warpgroup's last query
    wait_full(tile);
    release(tile);
  }

  prefill_store_rows(p, q_begin, q_len, h, tq, row_q, l_run, o);
}

}  // namespace fathom::kernels::cuda::mla_detail
