#pragma once
// MLA prefill kernel (expanded form) on Hopper's warpgroup MMA, for DeepSeek-V3's head dims (nope 128, rope 64,
// v 128) with 16-byte aligned rows. Same algorithm and data flow as mla_prefill_kernel.cuh (one CTA = 64 queries
// of one sequence and one head; K/V tiles of 64 keys through a two-stage cp.async pipeline; causal tiles only;
// fp32 online softmax in the log2 domain; bf16 probabilities), but one warpgroup issues S = Q·Kᵀ as wgmma
// m64n64k16 from shared memory and O += P·V as wgmma m64n128k16 with P straight from the score registers.
// Shared-memory tiles use the k-block-major 128-byte-swizzle layout (kblock_chunk_offset) wgmma reads.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/mla/sm90/mla_prefill_kernel.cuh"  // params, tile sizes, CTA tile, online softmax
#include "kernels/cuda/mla/sm90/mma_primitives.cuh"

namespace fathom::kernels::cuda::mla_detail {

struct PrefillWgmmaLayout {
  static constexpr int kNope = 128, kRope = 64, kV = 128;
  static constexpr int kQkChunks = (kNope + kRope) / 8;  // 24 chunks of 8 bf16 = 3 k-blocks of 64
  static constexpr int kVChunks = kV / 8;                // 16 = 2 k-blocks
  static constexpr int kQkSteps = (kNope + kRope) / 16;  // 12 k16 steps
  static constexpr int kQTileBytes = kPrefillTileQ * (kNope + kRope) * 2;   // [3 blocks][64 rows][128 B]
  static constexpr int kKTileBytes = kPrefillTileKv * (kNope + kRope) * 2;  // [3 blocks][64 keys][128 B]
  static constexpr int kVTileBytes = kPrefillTileKv * kV * 2;               // [2 blocks][64 keys][128 B]
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kQTileBytes;
  static constexpr int kVOffset = kKOffset + 2 * kKTileBytes;
  static constexpr int kAlignSlack = 1024;  // the kernel aligns its base to the 1024-byte swizzle atom
  static constexpr int kSmemBytes = kVOffset + 2 * kVTileBytes + kAlignSlack;
  static_assert(kPrefillThreads == 128 && kPrefillTileQ == 64 && kPrefillTileKv == 64, "one warpgroup, m64 tiles");
  static_assert(kKOffset % 1024 == 0 && kVOffset % 1024 == 0 && kKTileBytes % 1024 == 0, "1024-aligned tiles");
};

// One key tile of a warpgroup's 64 queries: S = Q·Kᵀ (wgmma m64n64k16 over [nope ; rope]), causal mask and online
// softmax, then O = alpha·O + P·V (wgmma m64n128k16 with P from the score registers). q_smem, k_tile:
// [3 k-blocks][64 rows][128 B]; v_tile: [2 k-blocks][64 keys][128 B] (128-byte swizzle, 1024-aligned).
// o[4j + e] = O(row 16 (warp % 4) + g + 8 (e >> 1), column 8j + 2 tq + (e & 1)).
__device__ __forceinline__ void prefill_wgmma_tile(uint32_t q_smem, uint32_t k_tile, uint32_t v_tile, int key_base,
                                                   int tq, const int (&row_pos)[2], int kv_len, float scale_log2,
                                                   float (&m_run)[2], float (&l_run)[2], float (&o)[64]) {
  constexpr int kBlockBytes = kPrefillTileKv * 128;
  float s[kPrefillTileKv / 8][4];  // the mma m16n8 layout prefill_online_softmax takes; wgmma's d[4j + e] is s[j][e]
  float(&s_flat)[32] = reinterpret_cast<float(&)[32]>(s);
#pragma unroll
  for (int i = 0; i < 32; ++i) s_flat[i] = 0.0f;
  wgmma_fence_operands(s_flat);
  wgmma_fence();
  const uint64_t desc_q = wgmma_desc_kmajor_sw128(q_smem), desc_k = wgmma_desc_kmajor_sw128(k_tile);
#pragma unroll
  for (int ks = 0; ks < PrefillWgmmaLayout::kQkSteps; ++ks) {
    const uint32_t k_offset = (ks & 3) * 32 + (ks >> 2) * kBlockBytes;
    wgmma_m64n64k16_bf16(s_flat, wgmma_desc_advance(desc_q, k_offset), wgmma_desc_advance(desc_k, k_offset));
  }
  wgmma_commit();
  wgmma_wait_all();
  wgmma_fence_operands(s_flat);

  float alpha[2];
  uint32_t p_frag[8][2];  // bf16 pairs: [j][0] row g, [j][1] row g + 8
  prefill_online_softmax(s, key_base, tq, row_pos, kv_len, scale_log2, m_run, l_run, alpha, p_frag);
  rescale_accumulator_rows(o, alpha);

  // P [64 x 64 keys] from registers, V [64 keys x 128] N-major (k-blocks of 64 columns)
  wgmma_fence_operands(o);
  wgmma_fence();
  const uint64_t desc_v = wgmma_desc_sw128(v_tile, kBlockBytes, 1024);
#pragma unroll
  for (int kk = 0; kk < kPrefillTileKv / 16; ++kk) {
    const uint32_t a[4] = {p_frag[2 * kk][0], p_frag[2 * kk][1], p_frag[2 * kk + 1][0], p_frag[2 * kk + 1][1]};
    wgmma_m64n128k16_bf16_rs_tn(o, a, wgmma_desc_advance(desc_v, kk * 16 * 128));
  }
  wgmma_commit();
  wgmma_wait_all();
  wgmma_fence_operands(o);
}

// O / l of the thread's two query rows (row_q within the sequence; rows past q_len skipped) as bf16 into p.out, and
// their log-sum-exp into p.lse_log2 when asked for.
__device__ __forceinline__ void prefill_store_rows(const PrefillKernelParams& p, int q_begin, int q_len, int h, int tq,
                                                   const int (&row_q)[2], const float (&m_run)[2], float (&l_run)[2],
                                                   const float (&o)[64]) {
  constexpr int kV = PrefillWgmmaLayout::kV;
  prefill_row_sums(l_run);
  const int64_t out_token_stride = static_cast<int64_t>(p.num_heads) * kV;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (row_q[half] >= q_len) continue;
    const float inv_l = l_run[half] > 0.0f ? 1.0f / l_run[half] : 0.0f;
    const int64_t row = static_cast<int64_t>(q_begin) + row_q[half];
    if (p.lse_log2 != nullptr && tq == 0) p.lse_log2[row * p.num_heads + h] = prefill_row_lse_log2(m_run[half], l_run[half]);
    __nv_bfloat16* out = p.out + row * out_token_stride + h * kV;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      *reinterpret_cast<__nv_bfloat162*>(out + j * 8 + 2 * tq) =
          __floats2bfloat162_rn(o[4 * j + 2 * half] * inv_l, o[4 * j + 2 * half + 1] * inv_l);
    }
  }
}

// Requires p.nope == 128, p.rope == 64, p.v_dim == 128 and p.vector_loads (checked by the host).
__global__ void __launch_bounds__(kPrefillThreads, 2) mla_prefill_wgmma_kernel(const PrefillKernelParams p) {
  using L = PrefillWgmmaLayout;
  extern __shared__ uint8_t prefill_smem_raw[];
  const uint32_t raw = smem_u32(prefill_smem_raw);
  const uint32_t base = raw + ((1024 - (raw & 1023)) & 1023);
  const uint32_t q_smem = base + L::kQOffset, k_smem = base + L::kKOffset, v_smem = base + L::kVOffset;

  const int b = blockIdx.z, h = blockIdx.y;
  PrefillCtaTile cta;
  if (!prefill_cta_tile(p, cta)) return;
  const int q_begin = cta.q_begin, q_len = cta.q_len, kv_begin = cta.kv_begin, kv_len = cta.kv_len, q0 = cta.q0,
            pos_offset = cta.pos_offset, kv_tiles = cta.kv_tiles, key_position = cta.key_position;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int64_t q_token_stride = static_cast<int64_t>(p.num_heads) * p.q_head_stride;
  const int64_t k_token_stride = static_cast<int64_t>(p.num_heads) * p.k_head_stride;
  const int64_t v_token_stride = static_cast<int64_t>(p.num_heads) * p.v_head_stride;
  const int64_t cache_row_elems = static_cast<int64_t>(p.kv_lora) + L::kRope;
  const int32_t* pages = p.page_table + static_cast<int64_t>(b) * p.max_pages_per_seq;

  // ---- Q tile [64 queries][nope ; rope]: chunks 0..15 nope, 16..23 rope.
  for (int idx = tid; idx < kPrefillTileQ * L::kQkChunks; idx += kPrefillThreads) {
    const int r = idx / L::kQkChunks, c = idx % L::kQkChunks;
    const bool valid = q0 + r < q_len;
    const __nv_bfloat16* src = p.q;
    if (valid) src = p.q + (q_begin + q0 + r) * q_token_stride + h * p.q_head_stride + c * 8;  // rope follows nope
    cp_async_16(q_smem + kblock_chunk_offset(r, c, kPrefillTileQ), src, valid ? 16 : 0);
  }
  // ---- K/V tiles: keys [tile*64, tile*64 + 64); keys >= kv_len are zero rows.
  auto load_kv = [&](int stage, int tile) {
    const uint32_t k_base = k_smem + stage * L::kKTileBytes, v_base = v_smem + stage * L::kVTileBytes;
    for (int idx = tid; idx < kPrefillTileKv * L::kQkChunks; idx += kPrefillThreads) {
      const int r = idx / L::kQkChunks, c = idx % L::kQkChunks, key = tile * kPrefillTileKv + r;
      const bool valid = key < kv_len;
      const __nv_bfloat16* src = p.k_nope;
      if (valid) {
        if (c < L::kNope / 8) {
          src = p.k_nope + (kv_begin + key) * k_token_stride + h * p.k_head_stride + c * 8;
        } else {
          const int position = key_position + key;
          const int64_t slot =
              static_cast<int64_t>(pages[position / p.page_size]) * p.page_size + position % p.page_size;
          src = p.cache + slot * cache_row_elems + p.kv_lora + (c - L::kNope / 8) * 8;
        }
      }
      cp_async_16(k_base + kblock_chunk_offset(r, c, kPrefillTileKv), src, valid ? 16 : 0);
    }
    for (int idx = tid; idx < kPrefillTileKv * L::kVChunks; idx += kPrefillThreads) {
      const int r = idx / L::kVChunks, c = idx % L::kVChunks, key = tile * kPrefillTileKv + r;
      const bool valid = key < kv_len;
      const __nv_bfloat16* src = valid ? p.v + (kv_begin + key) * v_token_stride + h * p.v_head_stride + c * 8 : p.v;
      cp_async_16(v_base + kblock_chunk_offset(r, c, kPrefillTileKv), src, valid ? 16 : 0);
    }
  };

  if (kv_tiles > 0) load_kv(0, 0);
  cp_async_commit();

  float o[64];  // O [64 queries x 128 v]: o[4j + e] = (row warp*16 + g + 8 (e >> 1), column 8j + 2 tq + (e & 1))
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  const int row_q[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};  // query index within the sequence
  const int row_pos[2] = {pos_offset + row_q[0], pos_offset + row_q[1]};

  for (int tile = 0; tile < kv_tiles; ++tile) {
    const int stage = tile & 1;
    cp_async_wait_all();
    fence_proxy_async_shared();  // this thread's cp.async bytes before the async proxy (wgmma) reads them
    __syncthreads();             // every thread's; and stage ^ 1 (read by the previous tile's wgmmas) is free
    if (tile + 1 < kv_tiles) load_kv(stage ^ 1, tile + 1);
    cp_async_commit();
    const uint32_t kt = k_smem + stage * L::kKTileBytes, vt = v_smem + stage * L::kVTileBytes;

    prefill_wgmma_tile(q_smem, kt, vt, tile * kPrefillTileKv, tq, row_pos, kv_len, p.scale_log2, m_run, l_run, o);
  }

  cp_async_wait_all();  // nothing may stay in flight (kv_tiles == 0 skips the loop)

  prefill_store_rows(p, q_begin, q_len, h, tq, row_q, m_run, l_run, o);
}

}  // namespace fathom::kernels::cuda::mla_detail
