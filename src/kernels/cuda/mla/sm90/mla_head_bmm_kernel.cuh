#pragma once
// Per-head batched product with a kv_b_proj slice, on tensor cores (mma.sync m16n8k16 bf16, fp32 accumulate):
//   C[m, h, n] = Σ_k A[m, h, k] · B_h(k, n),
// B_h(k, n) = W[h*rows_per_head + row_offset + k][n]   when kWeightRowsAreK (absorb: W_UK, k = nope index)
//           = W[h*rows_per_head + row_offset + n][k]   otherwise           (project: W_UV, k = latent index).
// W is bf16, or e4m3 with fp32 scale_inv per 128x128 block (dequantized to bf16 when staged in shared memory).
// CTA: 64 (m) x 64 (n) output tile of one head, 4 warps of 32x32, k in steps of 64; the next k-tile is
// fetched into registers while the current one is multiplied.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/mla/sm90/mma_primitives.cuh"
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda::mla_detail {

inline constexpr int kBmmThreads = 128;
inline constexpr int kBmmTile = 64;                // BM = BN = BK
inline constexpr int kBmmRowBytes = kBmmTile * 2;  // 8 chunks per smem row
inline constexpr int kBmmChunksPerThread = kBmmTile * (kBmmTile / 8) / kBmmThreads;  // 4

struct HeadBmmParams {
  const __nv_bfloat16* a;    // A[m, h, k] at a[m * a_token_stride + h * a_head_stride + k]
  int64_t a_token_stride;
  int64_t a_head_stride;
  const void* w;             // [num_heads * rows_per_head, w_cols] bf16 or e4m3
  const float* w_scale_inv;  // [ceil(rows / 128), scale_cols] (fp8 only)
  int32_t w_cols;            // kv_lora
  int32_t w_rows_per_head;   // nope + v
  int32_t w_row_offset;      // 0 (W_UK) or nope (W_UV)
  int32_t scale_cols;        // ceil(w_cols / 128)
  __nv_bfloat16* out;        // C[m, h, n] at out[m * out_token_stride + h * out_head_stride + n]
  int64_t out_token_stride;
  int64_t out_head_stride;
  int32_t m, k, n;           // tokens, reduction length, output width
  int32_t a_vector;          // A chunks of 8 are 16-byte aligned (strides, k multiples of 8)
  int32_t w_vector;          // W chunks of 8 are aligned (w_cols multiple of 8; 128-blocks never split a chunk)
  int32_t a_settled;         // 1: A was written two or more launches back (decode kernel: read before the wait)
};

// Output columns [n0, n0 + 16) of one token row (out_row: its head's first column) from two adjacent n8 accumulator
// tiles, this thread's element pair `half` (row g or g + 8) of each, rounded to bf16 and stored 8 bytes per thread
// (quad_bf16x4_columns). The epilogue of every bmm kernel: the same rounding, so the same bits. Every lane calls it;
// valid: the row exists.
__device__ __forceinline__ void store_head_bmm_tiles(const HeadBmmParams& p, __nv_bfloat16* out_row, bool valid,
                                                     int n0, int tq, int half, const float (&first)[4],
                                                     const float (&second)[4]) {
  const uint2 columns = quad_bf16x4_columns(pack_bf16x2(first[2 * half], first[2 * half + 1]),
                                            pack_bf16x2(second[2 * half], second[2 * half + 1]), tq);
  const int n = n0 + 4 * tq;
  if (valid && n < p.n) store_bf16x4(out_row + n, columns, p.n - n);
}

// 2 e4m3 values (the low 16 bits of pair, low byte first) times scale -> bf16x2: e4m3 -> half -> float (exact),
// one fp32 multiply, round to nearest bf16. The one dequantization of W shared by every bmm kernel (the decode
// kernel's bit-identity with the tiled ones rests on it).
__device__ __forceinline__ uint32_t fp8x2_to_bf16x2(uint32_t pair, float scale) {
  const __half2 halves(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xffffu), __NV_E4M3));
  const float2 values = __half22float2(halves);
  return pack_bf16x2(values.x * scale, values.y * scale);
}

// 8 e4m3 values (little-endian in raw) times scale -> 8 bf16.
__device__ __forceinline__ uint4 fp8x8_to_bf16x8(uint2 raw, float scale) {
  uint32_t words[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) words[i] = fp8x2_to_bf16x2((i < 2 ? raw.x : raw.y) >> (16 * (i & 1)), scale);
  return make_uint4(words[0], words[1], words[2], words[3]);
}

template <bool kWeightRowsAreK, bool kFp8>
__device__ __forceinline__ float weight_value(const HeadBmmParams& p, int64_t row, int col) {
  if constexpr (kFp8) {
    const uint8_t bits = static_cast<const uint8_t*>(p.w)[row * p.w_cols + col];
    const __half value(__nv_cvt_fp8_to_halfraw(bits, __NV_E4M3));
    return __half2float(value) * p.w_scale_inv[(row / 128) * p.scale_cols + col / 128];
  } else {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(p.w)[row * p.w_cols + col]);
  }
}

// grid (ceil(n / 64), ceil(m / 64), num_heads), kBmmThreads threads.
template <bool kWeightRowsAreK, bool kFp8>
__global__ void __launch_bounds__(kBmmThreads) mla_head_bmm_kernel(const HeadBmmParams p) {
  begin_dependent_kernel();  // launched programmatically (programmatic_launch.cuh)
  __shared__ __align__(128) uint8_t a_tile[kBmmTile * kBmmRowBytes];  // [m][k]
  __shared__ __align__(128) uint8_t b_tile[kBmmTile * kBmmRowBytes];  // [k][n] if kWeightRowsAreK else [n][k]
  const uint32_t a_smem = smem_u32(a_tile), b_smem = smem_u32(b_tile);
  const int n0 = blockIdx.x * kBmmTile, m0 = blockIdx.y * kBmmTile, h = blockIdx.z;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int64_t w_row_base = static_cast<int64_t>(h) * p.w_rows_per_head + p.w_row_offset;

  uint4 a_regs[kBmmChunksPerThread];
  uint4 b_regs[kBmmChunksPerThread];    // bf16x8, or (fp8 fast path) raw bytes in .x/.y and the scale in .z
  bool b_raw[kBmmChunksPerThread];

  auto fetch = [&](int k0) {
#pragma unroll
    for (int i = 0; i < kBmmChunksPerThread; ++i) {
      const int idx = tid + i * kBmmThreads, row = idx >> 3, c = idx & 7;
      // A: row = token, chunk over k.
      {
        const int m = m0 + row, k = k0 + c * 8;
        const __nv_bfloat16* src = p.a + m * p.a_token_stride + h * p.a_head_stride + k;
        if (m < p.m && p.a_vector && k + 8 <= p.k) {
          a_regs[i] = *reinterpret_cast<const uint4*>(src);
        } else {
          uint32_t words[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float lo = (m < p.m && k + 2 * e < p.k) ? __bfloat162float(src[2 * e]) : 0.0f;
            const float hi = (m < p.m && k + 2 * e + 1 < p.k) ? __bfloat162float(src[2 * e + 1]) : 0.0f;
            words[e] = pack_bf16x2(lo, hi);
          }
          a_regs[i] = make_uint4(words[0], words[1], words[2], words[3]);
        }
      }
      // B: smem row = k (kWeightRowsAreK) or n; chunk over the other index.
      {
        const int row_index = (kWeightRowsAreK ? k0 : n0) + row;
        const int row_limit = kWeightRowsAreK ? p.k : p.n;
        const int col = (kWeightRowsAreK ? n0 : k0) + c * 8;
        const int col_limit = kWeightRowsAreK ? p.n : p.k;
        const int64_t w_row = w_row_base + row_index;
        b_raw[i] = false;
        if (row_index < row_limit && p.w_vector && col + 8 <= col_limit) {
          if constexpr (kFp8) {
            const uint2 raw = *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(p.w) + w_row * p.w_cols + col);
            const float scale = p.w_scale_inv[(w_row / 128) * p.scale_cols + col / 128];
            b_regs[i] = make_uint4(raw.x, raw.y, __float_as_uint(scale), 0u);
            b_raw[i] = true;
          } else {
            b_regs[i] = *reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(p.w) + w_row * p.w_cols + col);
          }
        } else {
          uint32_t words[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const bool row_ok = row_index < row_limit;
            const float lo = (row_ok && col + 2 * e < col_limit)
                                 ? weight_value<kWeightRowsAreK, kFp8>(p, w_row, col + 2 * e) : 0.0f;
            const float hi = (row_ok && col + 2 * e + 1 < col_limit)
                                 ? weight_value<kWeightRowsAreK, kFp8>(p, w_row, col + 2 * e + 1) : 0.0f;
            words[e] = pack_bf16x2(lo, hi);
          }
          b_regs[i] = make_uint4(words[0], words[1], words[2], words[3]);
        }
      }
    }
  };
  auto stage = [&]() {
#pragma unroll
    for (int i = 0; i < kBmmChunksPerThread; ++i) {
      const int idx = tid + i * kBmmThreads, row = idx >> 3, c = idx & 7;
      store_shared_v4(a_smem + swizzled_chunk_offset(row, c, kBmmRowBytes), a_regs[i]);
      uint4 b_value = b_regs[i];
      if constexpr (kFp8) {
        if (b_raw[i]) b_value = fp8x8_to_bf16x8(make_uint2(b_value.x, b_value.y), __uint_as_float(b_value.z));
      }
      store_shared_v4(b_smem + swizzled_chunk_offset(row, c, kBmmRowBytes), b_value);
    }
  };

  const int wm = warp & 1, wn = warp >> 1;  // warp tile: rows wm*32.., cols wn*32..
  float acc[2][4][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int nj = 0; nj < 4; ++nj)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][nj][e] = 0.0f;

  const int k_tiles = ceil_div_int(p.k, kBmmTile);
  fetch(0);
  for (int kt = 0; kt < k_tiles; ++kt) {
    __syncthreads();  // previous tile's ldmatrix reads are done
    stage();
    __syncthreads();
    if (kt + 1 < k_tiles) fetch((kt + 1) * kBmmTile);
#pragma unroll
    for (int ks = 0; ks < kBmmTile / 16; ++ks) {
      uint32_t a[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
        ldmatrix_x4(a[mi], a_smem + swizzled_chunk_offset(wm * 32 + mi * 16 + (lane & 15), ks * 2 + (lane >> 4),
                                                          kBmmRowBytes));
#pragma unroll
      for (int nj2 = 0; nj2 < 2; ++nj2) {
        uint32_t bfrag[4];
        if constexpr (kWeightRowsAreK) {
          ldmatrix_x4_trans(bfrag, b_smem + swizzled_chunk_offset(ks * 16 + (lane & 15),
                                                                  wn * 4 + nj2 * 2 + (lane >> 4), kBmmRowBytes));
        } else {
          ldmatrix_x4(bfrag, b_smem + swizzled_chunk_offset(wn * 32 + nj2 * 16 + (lane & 7) + ((lane >> 4) << 3),
                                                            ks * 2 + ((lane >> 3) & 1), kBmmRowBytes));
        }
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          mma_bf16_16816(acc[mi][2 * nj2], a[mi], bfrag[0], bfrag[1]);
          mma_bf16_16816(acc[mi][2 * nj2 + 1], a[mi], bfrag[2], bfrag[3]);
        }
      }
    }
  }

#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int m = m0 + wm * 32 + mi * 16 + g + 8 * half;
      __nv_bfloat16* out = p.out + static_cast<int64_t>(m) * p.out_token_stride + h * p.out_head_stride;
#pragma unroll
      for (int nj = 0; nj < 4; nj += 2)
        store_head_bmm_tiles(p, out, m < p.m, n0 + wn * 32 + nj * 8, tq, half, acc[mi][nj], acc[mi][nj + 1]);
    }
}

}  // namespace fathom::kernels::cuda::mla_detail
