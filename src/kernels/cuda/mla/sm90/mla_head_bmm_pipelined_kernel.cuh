#pragma once
// The per-head kv_b product of mla_head_bmm_kernel.cuh with a cp.async pipeline: kStages k-tiles of A and
// W in flight per CTA (the op is bound by reading W at decode batch sizes, so bytes in flight matter; a short
// k extent takes fewer stages, so more CTAs fit on a multiprocessor).
// Needs aligned 8-element chunks (16 for fp8) in A and W; other shapes use mla_head_bmm_kernel.
// fp8 W tiles land raw in shared memory and are dequantized (x block scale) into a bf16 tile before the MMAs.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/mla/sm90/mla_head_bmm_kernel.cuh"
#include "kernels/cuda/mla/sm90/mma_primitives.cuh"

namespace fathom::kernels::cuda::mla_detail {

inline constexpr int kBmmTileBytes = kBmmTile * kBmmRowBytes;  // 8 KB of bf16
inline constexpr int kBmmRawBytes = kBmmTile * kBmmTile;       // 4 KB of e4m3

template <bool kFp8, int kStages>
constexpr int bmm_pipelined_smem_bytes() {
  return kStages * (kBmmTileBytes + (kFp8 ? kBmmRawBytes : kBmmTileBytes)) + (kFp8 ? kBmmTileBytes : 0);
}

// grid (ceil(n / 64), ceil(m / 64), num_heads), kBmmThreads threads, bmm_pipelined_smem_bytes<kFp8, kStages>()
// bytes of dynamic shared memory.
template <bool kWeightRowsAreK, bool kFp8, int kStages>
__global__ void __launch_bounds__(kBmmThreads, 5) mla_head_bmm_pipelined_kernel(const HeadBmmParams p) {
  extern __shared__ __align__(128) uint8_t smem[];
  // Layout: A stages [kStages][64][64] bf16 | W stages (bf16 tiles, or raw e4m3 [64][64]) | fp8: bf16 W tile.
  const uint32_t a_stages = smem_u32(smem);
  const uint32_t w_stages = a_stages + kStages * kBmmTileBytes;
  const uint32_t w_converted = w_stages + kStages * kBmmRawBytes;  // used by fp8 only
  constexpr int kWStageBytes = kFp8 ? kBmmRawBytes : kBmmTileBytes;

  const int n0 = blockIdx.x * kBmmTile, m0 = blockIdx.y * kBmmTile, h = blockIdx.z;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int64_t w_row_base = static_cast<int64_t>(h) * p.w_rows_per_head + p.w_row_offset;
  const int k_tiles = ceil_div_int(p.k, kBmmTile);

  auto load_stage = [&](int stage, int k0) {
#pragma unroll
    for (int i = 0; i < kBmmChunksPerThread; ++i) {  // A: [64 tokens][64 k], 8-element chunks
      const int idx = tid + i * kBmmThreads, row = idx >> 3, c = idx & 7;
      const int m = m0 + row, k = k0 + c * 8;
      const bool valid = m < p.m && k < p.k;
      const __nv_bfloat16* src = valid ? p.a + m * p.a_token_stride + h * p.a_head_stride + k : p.a;
      cp_async_16(a_stages + stage * kBmmTileBytes + swizzled_chunk_offset(row, c, kBmmRowBytes), src, valid ? 16 : 0);
    }
    // W: smem row = k (kWeightRowsAreK) or n, columns along the other index.
    constexpr int kChunkElems = kFp8 ? 16 : 8;
    constexpr int kChunksPerRow = kBmmTile / kChunkElems;
    constexpr int kWChunksPerThread = kBmmTile * kChunksPerRow / kBmmThreads;
#pragma unroll
    for (int i = 0; i < kWChunksPerThread; ++i) {
      const int idx = tid + i * kBmmThreads, row = idx / kChunksPerRow, c = idx % kChunksPerRow;
      const int row_index = (kWeightRowsAreK ? k0 : n0) + row;
      const int col = (kWeightRowsAreK ? n0 : k0) + c * kChunkElems;
      const bool valid = row_index < (kWeightRowsAreK ? p.k : p.n) && col < (kWeightRowsAreK ? p.n : p.k);
      const int64_t w_elem = (w_row_base + row_index) * p.w_cols + col;
      const void* src = valid ? (kFp8 ? static_cast<const void*>(static_cast<const uint8_t*>(p.w) + w_elem)
                                      : static_cast<const void*>(static_cast<const __nv_bfloat16*>(p.w) + w_elem))
                              : p.w;
      const uint32_t dst = kFp8 ? w_stages + stage * kWStageBytes + row * kBmmTile + c * 16
                                : w_stages + stage * kWStageBytes + swizzled_chunk_offset(row, c, kBmmRowBytes);
      cp_async_16(dst, src, valid ? 16 : 0);
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

#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    if (s < k_tiles) load_stage(s, s * kBmmTile);
    cp_async_commit();  // one group per stage, empty or not, keeps the wait count uniform
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int stage = kt % kStages;
    cp_async_wait_pending<kStages - 1>();  // tile kt has landed (later groups may be in flight)
    __syncthreads();
    uint32_t w_tile = w_stages + stage * kWStageBytes;
    if constexpr (kFp8) {  // dequantize the raw e4m3 tile into the bf16 tile: 2 chunks of 16 values per thread
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int idx = tid + i * kBmmThreads, row = idx >> 2, c = idx & 3;
        const int row_index = (kWeightRowsAreK ? kt * kBmmTile : n0) + row;
        const int col = (kWeightRowsAreK ? n0 : kt * kBmmTile) + c * 16;
        const int64_t w_row = w_row_base + row_index;
        const bool valid = row_index < (kWeightRowsAreK ? p.k : p.n) && col < (kWeightRowsAreK ? p.n : p.k);
        const float scale = valid ? p.w_scale_inv[(w_row / 128) * p.scale_cols + col / 128] : 0.0f;
        const uint4 raw = *reinterpret_cast<const uint4*>(smem + (w_tile - a_stages) + row * kBmmTile + c * 16);
        store_shared_v4(w_converted + swizzled_chunk_offset(row, 2 * c, kBmmRowBytes),
                        fp8x8_to_bf16x8(make_uint2(raw.x, raw.y), scale));
        store_shared_v4(w_converted + swizzled_chunk_offset(row, 2 * c + 1, kBmmRowBytes),
                        fp8x8_to_bf16x8(make_uint2(raw.z, raw.w), scale));
      }
      __syncthreads();
      w_tile = w_converted;
    }
    const uint32_t a_tile = a_stages + stage * kBmmTileBytes;
#pragma unroll
    for (int ks = 0; ks < kBmmTile / 16; ++ks) {
      uint32_t a[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
        ldmatrix_x4(a[mi], a_tile + swizzled_chunk_offset(wm * 32 + mi * 16 + (lane & 15), ks * 2 + (lane >> 4),
                                                          kBmmRowBytes));
#pragma unroll
      for (int nj2 = 0; nj2 < 2; ++nj2) {
        uint32_t bfrag[4];
        if constexpr (kWeightRowsAreK) {
          ldmatrix_x4_trans(bfrag, w_tile + swizzled_chunk_offset(ks * 16 + (lane & 15), wn * 4 + nj2 * 2 + (lane >> 4),
                                                                  kBmmRowBytes));
        } else {
          ldmatrix_x4(bfrag, w_tile + swizzled_chunk_offset(wn * 32 + nj2 * 16 + (lane & 7) + ((lane >> 4) << 3),
                                                            ks * 2 + ((lane >> 3) & 1), kBmmRowBytes));
        }
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          mma_bf16_16816(acc[mi][2 * nj2], a[mi], bfrag[0], bfrag[1]);
          mma_bf16_16816(acc[mi][2 * nj2 + 1], a[mi], bfrag[2], bfrag[3]);
        }
      }
    }
    __syncthreads();  // all reads of this stage (and of the converted tile) are done before it is refilled
    if (kt + kStages < k_tiles) load_stage(stage, (kt + kStages) * kBmmTile);
    cp_async_commit();
  }
  cp_async_wait_pending<0>();

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
