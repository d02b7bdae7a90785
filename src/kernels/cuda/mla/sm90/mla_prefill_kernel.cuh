#pragma once
// MLA prefill kernel (expanded form), flash-attention style on tensor cores (mma.sync m16n8k16 bf16).
// One CTA = 64 queries of one sequence and one head, 4 warps of 16 queries. Q fragments stay in registers;
// K tiles [64 keys, nope ; rope] and V tiles [64 keys, v] stream through a two-stage cp.async pipeline.
// Scores and the online softmax (fp32, log2 domain) stay in registers: the score accumulators are repacked
// as the bf16 A operand of P·V. Causal: only key tiles up to the CTA's last query position are visited.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/mla/sm90/mma_primitives.cuh"

namespace fathom::kernels::cuda::mla_detail {

inline constexpr int kPrefillThreads = 128;
inline constexpr int kPrefillTileQ = 64;
inline constexpr int kPrefillTileKv = 64;

struct PrefillKernelParams {
  const __nv_bfloat16* q;       // [total_q, num_heads, q_head_stride] = [nope ; rope]
  int64_t q_head_stride;
  const __nv_bfloat16* k_nope;  // [total_kv, num_heads, k_head_stride] (first nope of each head)
  const __nv_bfloat16* v;       // [total_kv, num_heads, v_head_stride] (first v_dim of each head)
  int64_t k_head_stride, v_head_stride;  // elements between heads, resolved by the host (never 0)
  const __nv_bfloat16* cache;   // [num_pages, page_size, kv_lora + rope]
  const int32_t* page_table;    // [batch, max_pages_per_seq]
  const int32_t* cu_q_lens;     // [batch + 1]
  const int32_t* cu_kv_lens;    // [batch + 1]
  __nv_bfloat16* out;           // [total_q, num_heads, v_dim]
  const int32_t* key_positions;    // [batch] position of each sequence's first key row; null: 0
  const int32_t* query_positions;  // [batch] position of each sequence's first query; null: kv_len - q_len
  float* lse_log2;              // [total_q, num_heads] each row's log2-domain max + log2(sum); null: not written
  int32_t max_pages_per_seq;
  int32_t num_heads, nope, rope, v_dim, kv_lora, page_size;
  float scale_log2;             // softmax_scale * log2(e)
  int32_t vector_loads;         // 1: nope/rope/v equal the padded dims, 16-byte aligned rows
};

template <int kNopePad, int kRopePad, int kVPad>
struct PrefillLayout {
  static constexpr int kQkElems = kNopePad + kRopePad;
  static constexpr int kQkChunks = kQkElems / 8;
  static constexpr int kQkRowBytes = kQkElems * 2;
  static constexpr int kVChunks = kVPad / 8;
  static constexpr int kVRowBytes = kVPad * 2;
  static constexpr int kKSteps = kQkElems / 16;
  static constexpr int kScoreNTiles = kPrefillTileKv / 8;  // 8
  static constexpr int kOutNTiles = kVPad / 8;
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kPrefillTileQ * kQkRowBytes;
  static constexpr int kKTileBytes = kPrefillTileKv * kQkRowBytes;
  static constexpr int kVOffset = kKOffset + 2 * kKTileBytes;
  static constexpr int kVTileBytes = kPrefillTileKv * kVRowBytes;
  static constexpr int kSmemBytes = kVOffset + 2 * kVTileBytes;
  static_assert(kNopePad % 16 == 0 && kRopePad % 16 == 0 && kQkChunks % 8 == 0, "q/k rows: k16 steps, 8-chunk swizzle");
  static_assert(kVPad % 64 == 0, "v rows: 8-chunk swizzle");
};

// Sequence b of the batch: its query rows, its key rows (a window of its positions starting at key_position) and
// where its queries sit relative to the first key (query j at local key index pos_offset + j: causal over the window).
struct PrefillSequence {
  int q_begin, q_len, kv_begin, kv_len;
  int pos_offset;    // query j sees the window's keys 0 .. pos_offset + j
  int key_position;  // position of key row 0 in the sequence (its page-table index)
};

__device__ __forceinline__ PrefillSequence prefill_sequence(const PrefillKernelParams& p, int b) {
  PrefillSequence s;
  s.q_begin = p.cu_q_lens[b];
  s.q_len = p.cu_q_lens[b + 1] - s.q_begin;
  s.kv_begin = p.cu_kv_lens[b];
  s.kv_len = p.cu_kv_lens[b + 1] - s.kv_begin;
  s.key_position = p.key_positions != nullptr ? p.key_positions[b] : 0;
  s.pos_offset = (p.query_positions != nullptr ? p.query_positions[b] : s.kv_len - s.q_len) - s.key_position;
  return s;
}

// The CTA's part of the batch: sequence blockIdx.z and a query tile (the longest, latest tiles start first), with
// the key tiles it visits (causal: up to its last query's position). Shared by the prefill kernels.
struct PrefillCtaTile {
  int q_begin, q_len, kv_begin, kv_len;
  int q0;            // first query of the tile within the sequence
  int pos_offset;    // query j sees keys 0 .. pos_offset + j of the window
  int key_position;  // position of key row 0
  int kv_tiles;      // key tiles of kPrefillTileKv to visit
};

// False when the tile starts past the sequence's queries (the CTA has nothing to do).
__device__ __forceinline__ bool prefill_cta_tile(const PrefillKernelParams& p, PrefillCtaTile& t) {
  const PrefillSequence s = prefill_sequence(p, blockIdx.z);
  t.q_begin = s.q_begin;
  t.q_len = s.q_len;
  t.kv_begin = s.kv_begin;
  t.kv_len = s.kv_len;
  t.key_position = s.key_position;
  t.q0 = (gridDim.x - 1 - blockIdx.x) * kPrefillTileQ;
  if (t.q0 >= t.q_len) return false;
  t.pos_offset = s.pos_offset;
  const int last_pos = min(t.pos_offset + min(t.q0 + kPrefillTileQ, t.q_len) - 1, t.kv_len - 1);
  t.kv_tiles = last_pos < 0 ? 0 : ceil_div_int(last_pos + 1, kPrefillTileKv);
  return true;
}

// The row's log-sum-exp (log2 domain, scores scaled by scale_log2) once l_run holds the full sum: -inf where the row
// saw no key. What a later merge of this window with another weighs it by.
__device__ __forceinline__ float prefill_row_lse_log2(float m_run, float l_run) {
  return l_run > 0.0f ? m_run + log2f(l_run) : -INFINITY;
}

// One key tile of the online softmax for a thread's two query rows (the mma m16n8 C layout: s[j][e] is row
// g + 8 (e >> 1), key key_base + 8j + 2 tq + (e & 1)): masks (causal, past kv_len) and scales the scores (s is left
// as it is: its registers may be an in-flight MMA's accumulators), updates the running max and sum, and returns O's
// rescale factors and the bf16 probabilities as P·V's A fragments ([j][0] row g, [j][1] row g + 8; the sum adds the
// rounded values P·V uses).
// kNTiles: the tile's keys / 8. kMasked = false: the caller knows every key of the tile is visible to both rows
// (the same values as the masked path: only the comparisons are left out).
template <int kNTiles, bool kMasked = true>
__device__ __forceinline__ void prefill_online_softmax(const float (&s)[kNTiles][4], int key_base, int tq,
                                                       const int (&row_pos)[2], int kv_len, float scale_log2,
                                                       float (&m_run)[2], float (&l_run)[2], float (&alpha)[2],
                                                       uint32_t (&p_frag)[kNTiles][2]) {
  auto scaled = [&](int j, int e) {  // log2-domain score, -inf where the key is masked
    if constexpr (!kMasked) return s[j][e] * scale_log2;
    const int key = key_base + j * 8 + 2 * tq + (e & 1);
    return key <= row_pos[e >> 1] && key < kv_len ? s[j][e] * scale_log2 : -INFINITY;
  };
  float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < kNTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) row_max[e >> 1] = fmaxf(row_max[e >> 1], scaled(j, e));
  float m_use[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    row_max[half] = fmaxf(row_max[half], __shfl_xor_sync(0xffffffffu, row_max[half], 1));
    row_max[half] = fmaxf(row_max[half], __shfl_xor_sync(0xffffffffu, row_max[half], 2));
    const float m_new = fmaxf(m_run[half], row_max[half]);
    m_use[half] = m_new == -INFINITY ? 0.0f : m_new;  // a row with no visible key yet stays at zero
    alpha[half] = exp2f(m_run[half] - m_use[half]);
    m_run[half] = m_new;
  }
#pragma unroll
  for (int j = 0; j < kNTiles; ++j)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      p_frag[j][half] = pack_bf16x2(exp2f(scaled(j, 2 * half) - m_use[half]), exp2f(scaled(j, 2 * half + 1) - m_use[half]));
      const float2 rounded = unpack_bf16x2(p_frag[j][half]);
      sum[half] += rounded.x + rounded.y;
    }
#pragma unroll
  for (int half = 0; half < 2; ++half) l_run[half] = l_run[half] * alpha[half] + sum[half];
}

// The full softmax denominators of the thread's two rows (each quad of lanes held a quarter of the keys).
__device__ __forceinline__ void prefill_row_sums(float (&l_run)[2]) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    l_run[half] += __shfl_xor_sync(0xffffffffu, l_run[half], 1);
    l_run[half] += __shfl_xor_sync(0xffffffffu, l_run[half], 2);
  }
}

template <int kNopePad, int kRopePad, int kVPad>
__global__ void __launch_bounds__(kPrefillThreads, 2) mla_prefill_kernel(const PrefillKernelParams p) {
  using L = PrefillLayout<kNopePad, kRopePad, kVPad>;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t q_smem = smem_u32(smem + L::kQOffset);
  const uint32_t k_smem = smem_u32(smem + L::kKOffset);
  const uint32_t v_smem = smem_u32(smem + L::kVOffset);

  const int b = blockIdx.z, h = blockIdx.y;
  PrefillCtaTile cta;
  if (!prefill_cta_tile(p, cta)) return;
  const int q_begin = cta.q_begin, q_len = cta.q_len, kv_begin = cta.kv_begin, kv_len = cta.kv_len, q0 = cta.q0,
            pos_offset = cta.pos_offset, kv_tiles = cta.kv_tiles, key_position = cta.key_position;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int64_t q_token_stride = static_cast<int64_t>(p.num_heads) * p.q_head_stride;
  const int64_t k_token_stride = static_cast<int64_t>(p.num_heads) * p.k_head_stride;
  const int64_t v_token_stride = static_cast<int64_t>(p.num_heads) * p.v_head_stride;
  const int64_t out_token_stride = static_cast<int64_t>(p.num_heads) * p.v_dim;
  const int64_t cache_row_elems = static_cast<int64_t>(p.kv_lora) + p.rope;
  const int32_t* pages = p.page_table + static_cast<int64_t>(b) * p.max_pages_per_seq;
  auto k_pe_row = [&](int key) {  // cache row of key row `key` of this sequence's window, at its k_pe part
    const int position = key_position + key;
    const int64_t slot = static_cast<int64_t>(pages[position / p.page_size]) * p.page_size + position % p.page_size;
    return p.cache + slot * cache_row_elems + p.kv_lora;
  };

  // ---- Q tile [64 queries, nope ; rope]
  if (p.vector_loads) {
    for (int idx = tid; idx < kPrefillTileQ * L::kQkChunks; idx += kPrefillThreads) {
      const int r = idx / L::kQkChunks, c = idx % L::kQkChunks;
      const bool valid = q0 + r < q_len;
      const __nv_bfloat16* src = p.q;
      if (valid) {
        src = p.q + (q_begin + q0 + r) * q_token_stride + h * p.q_head_stride +
              (c < kNopePad / 8 ? c * 8 : p.nope + (c - kNopePad / 8) * 8);
      }
      cp_async_16(q_smem + swizzled_chunk_offset(r, c, L::kQkRowBytes), src, valid ? 16 : 0);
    }
  } else {
    for (int idx = tid; idx < kPrefillTileQ * L::kQkElems; idx += kPrefillThreads) {
      const int r = idx / L::kQkElems, col = idx % L::kQkElems;
      __nv_bfloat16 value = __float2bfloat16(0.0f);
      if (q0 + r < q_len) {
        const __nv_bfloat16* row = p.q + (q_begin + q0 + r) * q_token_stride + h * p.q_head_stride;
        if (col < kNopePad) {
          if (col < p.nope) value = row[col];
        } else if (col - kNopePad < p.rope) {
          value = row[p.nope + col - kNopePad];
        }
      }
      store_shared_u16(q_smem + swizzled_elem_offset(r, col, L::kQkRowBytes), __bfloat16_as_ushort(value));
    }
  }

  // ---- K/V tile loader: keys [tile*64, tile*64+64); keys >= kv_len are zero rows.
  auto load_kv = [&](int stage, int tile) {
    const uint32_t k_base = k_smem + stage * L::kKTileBytes, v_base = v_smem + stage * L::kVTileBytes;
    if (p.vector_loads) {
      for (int idx = tid; idx < kPrefillTileKv * L::kQkChunks; idx += kPrefillThreads) {
        const int r = idx / L::kQkChunks, c = idx % L::kQkChunks, key = tile * kPrefillTileKv + r;
        const bool valid = key < kv_len;
        const __nv_bfloat16* src = p.k_nope;
        if (valid) {
          src = c < kNopePad / 8 ? p.k_nope + (kv_begin + key) * k_token_stride + h * p.k_head_stride + c * 8
                                 : k_pe_row(key) + (c - kNopePad / 8) * 8;
        }
        cp_async_16(k_base + swizzled_chunk_offset(r, c, L::kQkRowBytes), src, valid ? 16 : 0);
      }
      for (int idx = tid; idx < kPrefillTileKv * L::kVChunks; idx += kPrefillThreads) {
        const int r = idx / L::kVChunks, c = idx % L::kVChunks, key = tile * kPrefillTileKv + r;
        const bool valid = key < kv_len;
        const __nv_bfloat16* src = valid ? p.v + (kv_begin + key) * v_token_stride + h * p.v_head_stride + c * 8 : p.v;
        cp_async_16(v_base + swizzled_chunk_offset(r, c, L::kVRowBytes), src, valid ? 16 : 0);
      }
    } else {
      for (int idx = tid; idx < kPrefillTileKv * L::kQkElems; idx += kPrefillThreads) {
        const int r = idx / L::kQkElems, col = idx % L::kQkElems, key = tile * kPrefillTileKv + r;
        __nv_bfloat16 value = __float2bfloat16(0.0f);
        if (key < kv_len) {
          if (col < kNopePad) {
            if (col < p.nope) value = p.k_nope[(kv_begin + key) * k_token_stride + h * p.k_head_stride + col];
          } else if (col - kNopePad < p.rope) {
            value = k_pe_row(key)[col - kNopePad];
          }
        }
        store_shared_u16(k_base + swizzled_elem_offset(r, col, L::kQkRowBytes), __bfloat16_as_ushort(value));
      }
      for (int idx = tid; idx < kPrefillTileKv * kVPad; idx += kPrefillThreads) {
        const int r = idx / kVPad, col = idx % kVPad, key = tile * kPrefillTileKv + r;
        __nv_bfloat16 value = __float2bfloat16(0.0f);
        if (key < kv_len && col < p.v_dim) value = p.v[(kv_begin + key) * v_token_stride + h * p.v_head_stride + col];
        store_shared_u16(v_base + swizzled_elem_offset(r, col, L::kVRowBytes), __bfloat16_as_ushort(value));
      }
    }
  };

  if (kv_tiles > 0) load_kv(0, 0);
  cp_async_commit();

  uint32_t q_frag[L::kKSteps][4];
  float o_acc[L::kOutNTiles][4];
#pragma unroll
  for (int n = 0; n < L::kOutNTiles; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) o_acc[n][e] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  const int row_q[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};  // query index within the sequence
  const int row_pos[2] = {pos_offset + row_q[0], pos_offset + row_q[1]};

  for (int tile = 0; tile < kv_tiles; ++tile) {
    const int stage = tile & 1;
    cp_async_wait_all();
    __syncthreads();
    if (tile == 0) {
#pragma unroll
      for (int ks = 0; ks < L::kKSteps; ++ks)
        ldmatrix_x4(q_frag[ks], q_smem + swizzled_chunk_offset(warp * 16 + (lane & 15), ks * 2 + (lane >> 4),
                                                               L::kQkRowBytes));
    }
    if (tile + 1 < kv_tiles) load_kv(stage ^ 1, tile + 1);
    cp_async_commit();
    const uint32_t kt = k_smem + stage * L::kKTileBytes, vt = v_smem + stage * L::kVTileBytes;

    float s[L::kScoreNTiles][4];
#pragma unroll
    for (int j = 0; j < L::kScoreNTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < L::kKSteps; ++ks)
#pragma unroll
      for (int j2 = 0; j2 < L::kScoreNTiles / 2; ++j2) {
        uint32_t bfrag[4];
        ldmatrix_x4(bfrag, kt + swizzled_chunk_offset(j2 * 16 + (lane & 7) + ((lane >> 4) << 3),
                                                      ks * 2 + ((lane >> 3) & 1), L::kQkRowBytes));
        mma_bf16_16816(s[2 * j2], q_frag[ks], bfrag[0], bfrag[1]);
        mma_bf16_16816(s[2 * j2 + 1], q_frag[ks], bfrag[2], bfrag[3]);
      }

    float alpha[2];
    uint32_t p_frag[L::kScoreNTiles][2];
    prefill_online_softmax(s, tile * kPrefillTileKv, tq, row_pos, kv_len, p.scale_log2, m_run, l_run, alpha, p_frag);
#pragma unroll
    for (int n = 0; n < L::kOutNTiles; ++n) {
      o_acc[n][0] *= alpha[0];
      o_acc[n][1] *= alpha[0];
      o_acc[n][2] *= alpha[1];
      o_acc[n][3] *= alpha[1];
    }
#pragma unroll
    for (int kk = 0; kk < kPrefillTileKv / 16; ++kk) {
      const uint32_t a[4] = {p_frag[2 * kk][0], p_frag[2 * kk][1], p_frag[2 * kk + 1][0], p_frag[2 * kk + 1][1]};
#pragma unroll
      for (int n2 = 0; n2 < L::kOutNTiles / 2; ++n2) {
        uint32_t bfrag[4];
        ldmatrix_x4_trans(bfrag, vt + swizzled_chunk_offset(kk * 16 + (lane & 15), n2 * 2 + (lane >> 4), L::kVRowBytes));
        mma_bf16_16816(o_acc[2 * n2], a, bfrag[0], bfrag[1]);
        mma_bf16_16816(o_acc[2 * n2 + 1], a, bfrag[2], bfrag[3]);
      }
    }
  }

  cp_async_wait_all();  // nothing may stay in flight (kv_tiles == 0 skips the loop)

  // ---- normalize and store
  prefill_row_sums(l_run);
  const bool pairs = (p.v_dim & 1) == 0;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (row_q[half] >= q_len) continue;
    const float inv_l = l_run[half] > 0.0f ? 1.0f / l_run[half] : 0.0f;
    const int64_t row = static_cast<int64_t>(q_begin) + row_q[half];
    if (p.lse_log2 != nullptr && tq == 0) p.lse_log2[row * p.num_heads + h] = prefill_row_lse_log2(m_run[half], l_run[half]);
    __nv_bfloat16* out = p.out + row * out_token_stride + h * p.v_dim;
#pragma unroll
    for (int n = 0; n < L::kOutNTiles; ++n) {
      const int d = n * 8 + 2 * tq;
      const float v0 = o_acc[n][2 * half] * inv_l, v1 = o_acc[n][2 * half + 1] * inv_l;
      if (pairs && d + 1 < p.v_dim) {
        *reinterpret_cast<__nv_bfloat162*>(out + d) = __floats2bfloat162_rn(v0, v1);
      } else {
        if (d < p.v_dim) out[d] = __float2bfloat16(v0);
        if (d + 1 < p.v_dim) out[d + 1] = __float2bfloat16(v1);
      }
    }
  }
}

}  // namespace fathom::kernels::cuda::mla_detail
