#pragma once
// Deterministic merge of split-KV decode partials (bf16 rows, fp32 log-sum-exps): for each (sequence, head),
//   out = Σ_s 2^(lse_s − M) · partial_s / Σ_s 2^(lse_s − M),  M = max_s lse_s,
// in a fixed order (no atomics): split s is summed into lane s mod 4 in split order, then the lanes in their order. The
// thread groups (1, 2 or 4, each owning whole lanes) change only which threads add, never the order, so the result
// depends neither on scheduling nor on the group count (mla_decode_combine_split_groups: it follows the batch's split
// count).
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/mla/sm90/mla_decode_splits.cuh"
#include "kernels/cuda/mla/sm90/mma_primitives.cuh"  // unpack_bf16x2, store_bf16x4
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda::mla_detail {

inline constexpr int kCombineColumnThreads = 128;  // threads across the latent columns, 4 columns each (kv_lora <= 512)
inline constexpr int kCombineSumLanes = 4;         // split s is summed in lane s % 4; the lanes then in order
inline constexpr int kCombineMaxSplits = 128;
inline constexpr int kCombineMaxLatent = 4 * kCombineColumnThreads;

// Partial rows one thread has in flight in the deep form (below): its CTA of 512 threads reads 64 splits' 64 KB at once.
inline constexpr int kCombineDeepRows = 16;

// Four bf16 columns of a partial row as loaded (two per 32-bit word, low half first); widened only when summed.
struct PartialColumns {
  uint32_t lo = 0, hi = 0;
};

// Columns d, d + stride, d + 2·stride, d + 3·stride of `row` (row[0] = column d), zeros past kv_lora: one 8-byte load
// when vector (contiguous columns, 8-byte aligned), else one 2-byte load each.
__device__ __forceinline__ PartialColumns load_partial_columns(const __nv_bfloat16* row, bool vector, int d,
                                                               int column_stride, int kv_lora) {
  PartialColumns x;
  if (vector) {
    const uint2 raw = *reinterpret_cast<const uint2*>(row);
    x.lo = raw.x;
    x.hi = raw.y;
  } else {
    const auto* bits = reinterpret_cast<const uint16_t*>(row);
    const uint32_t c0 = bits[0];
    const uint32_t c1 = d + column_stride < kv_lora ? bits[column_stride] : 0u;
    const uint32_t c2 = d + 2 * column_stride < kv_lora ? bits[2 * column_stride] : 0u;
    const uint32_t c3 = d + 3 * column_stride < kv_lora ? bits[3 * column_stride] : 0u;
    x.lo = c0 | (c1 << 16);
    x.hi = c2 | (c3 << 16);
  }
  return x;
}

// acc += w · columns (bf16 -> fp32 is exact).
__device__ __forceinline__ void add_weighted_columns(float4& acc, float w, PartialColumns x) {
  const float2 low = unpack_bf16x2(x.lo), high = unpack_bf16x2(x.hi);
  acc.x += w * low.x;
  acc.y += w * low.y;
  acc.z += w * high.x;
  acc.w += w * high.y;
}

// Splits of a sequence of seq_len tokens that hold tiles (the decode kernel writes nothing for the others), at most
// num_splits (the allocated count).
__device__ __forceinline__ int stored_split_count(int seq_len, int num_splits, int tiles_per_split,
                                                  int min_tiles_per_split) {
  const int total_tiles = (seq_len + kDecodeTileTokens - 1) / kDecodeTileTokens;
  const int tiles = split_tiles(total_tiles, num_splits, tiles_per_split, min_tiles_per_split);
  return min(num_splits, (total_tiles + tiles - 1) / tiles);
}

// One warp (all 32 lanes call it): the weights 2^(lse_s - max) of the num_splits (<= kCombineMaxSplits) splits of one
// (sequence, head) into weights[0, num_splits), lse_s = lse[s * split_stride], and the inverse of their sum (0 when
// every split is empty) into *inv_total, both by fixed butterflies (the same bits in every kernel that combines).
__device__ __forceinline__ void combine_split_weights(const float* __restrict__ lse, int64_t split_stride,
                                                      int num_splits, float* weights, float* inv_total) {
  constexpr int kPerLane = kCombineMaxSplits / 32;
  const int lane = static_cast<int>(threadIdx.x & 31);
  float lse_of[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {  // independent loads, all in flight at once
    const int s = lane + 32 * i;
    lse_of[i] = s < num_splits ? lse[static_cast<int64_t>(s) * split_stride] : -INFINITY;
  }
  float max_lse = lse_of[0];
#pragma unroll
  for (int i = 1; i < kPerLane; ++i) max_lse = fmaxf(max_lse, lse_of[i]);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    max_lse = fmaxf(max_lse, __shfl_xor_sync(0xffffffffu, max_lse, offset));
  float total = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int s = lane + 32 * i;
    const float w = lse_of[i] == -INFINITY ? 0.0f : exp2f(lse_of[i] - max_lse);
    if (s < num_splits) weights[s] = w;
    total += w;
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) total += __shfl_xor_sync(0xffffffffu, total, offset);
  if (lane == 0) *inv_total = total > 0.0f ? 1.0f / total : 0.0f;
}

// grid (num_heads, batch), kCombineColumnThreads * kGroups threads (kGroups = mla_decode_combine_split_groups of the
// allocated split count: 1, 2 or 4); kv_lora <= kCombineMaxLatent. Reads only the sequence's non-empty splits (the
// decode kernel writes nothing for the others), with the decode kernel's split rule. One group (below 8 splits)
// keeps its lanes in registers, without shared memory for them, in 32 registers: at 40, batch 16 in 4 splits ran
// 0.2-4% slower than the single-loop combine before it (34 registers; H100), at 32 0-3% faster (H200; RESULTS.md).
// kDeep (2 or 4 groups; MlaDecodePlan::deep_combine): each thread issues its first kCombineDeepRows rows' loads before
// the weights exist (warp 0's log-sum-exp round trip runs under them): 102 registers with fp32 partials (one CTA of 4
// groups per SM), 72-80 with the bf16 ones; where the grid has more CTAs than SMs the 4-8 rows in flight of the plain
// form were faster (H100, fp32 partials, bench/RESULTS.md thirty-sixth session). The sums, and so the bits, are the
// same.
template <int kGroups, bool kDeep>
__global__ void __launch_bounds__(kCombineColumnThreads * kGroups, kGroups == 1 ? 16 : 1) mla_decode_combine_kernel(
    const __nv_bfloat16* __restrict__ partial_out,  // [batch, num_splits, num_heads, kv_lora]
    const float* __restrict__ partial_lse,  // [batch, num_splits, num_heads]
    __nv_bfloat16* __restrict__ out_latent,  // [batch, num_heads, kv_lora]
    const int32_t* __restrict__ seq_lens,   // [batch]
    int32_t num_heads, int32_t kv_lora, int32_t num_splits, int32_t tiles_per_split, int32_t min_tiles_per_split) {
  static_assert(kGroups >= 1 && kCombineSumLanes % kGroups == 0, "each group owns whole lanes");
  static_assert(!kDeep || kGroups > 1, "one group keeps its 32 registers");
  begin_dependent_kernel();  // launched programmatically (programmatic_launch.cuh)
  __shared__ float weights[kCombineMaxSplits];
  __shared__ float inv_total_sh;
  const int h = blockIdx.x, b = blockIdx.y;
  const int64_t first_row = static_cast<int64_t>(b) * num_splits * num_heads + h;  // split s: + s * num_heads
  // The row stride above stays the allocated split count.
  num_splits = stored_split_count(seq_lens[b], num_splits, tiles_per_split, min_tiles_per_split);

  // This thread's 4 columns (contiguous when kv_lora is a multiple of 4, else strided by 128), summed over the splits
  // of the sum lanes its group owns (lane v: splits v, v + 4, ..., in order; group g owns the lanes v % kGroups == g).
  const int group = kGroups == 1 ? 0 : static_cast<int>(threadIdx.x) / kCombineColumnThreads;
  const int column_thread = static_cast<int>(threadIdx.x) % kCombineColumnThreads;
  const bool vector = (kv_lora & 3) == 0;
  const int d = vector ? column_thread * 4 : column_thread;  // first column
  const int column_stride = vector ? 1 : kCombineColumnThreads;
  // The deep form's rows: this thread's k-th split (split order within each of its group's lanes; lane group +
  // kGroups·i holds its splits k with k % lanes == i) for k < kCombineDeepRows, zeros past the sequence's splits.
  constexpr int kLanesPerGroup = kCombineSumLanes / kGroups;
  auto deep_split = [&](int k) {
    return (k / kLanesPerGroup) * kCombineSumLanes + group + kGroups * (k % kLanesPerGroup);
  };
  PartialColumns rows[kDeep ? kCombineDeepRows : 1];
  auto load_rows = [&](int first_k) {
#pragma unroll
    for (int j = 0; j < kCombineDeepRows; ++j) {  // no dependence between the loads: they overlap
      const int s = deep_split(first_k + j);
      rows[j] = s < num_splits && d < kv_lora
                    ? load_partial_columns(
                          partial_out + (first_row + static_cast<int64_t>(s) * num_heads) * kv_lora + d, vector, d,
                          column_stride, kv_lora)
                    : PartialColumns{};
    }
  };
  if constexpr (kDeep) load_rows(0);

  // Warp 0: the splits' weights and their inverse total.
  if (threadIdx.x < 32) combine_split_weights(partial_lse + first_row, num_heads, num_splits, weights, &inv_total_sh);
  __syncthreads();

  float4 acc[kCombineSumLanes];
#pragma unroll
  for (int v = 0; v < kCombineSumLanes; ++v) acc[v] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if constexpr (kDeep) {
    float4 lane_acc[kLanesPerGroup];  // lane_acc[i]: lane group + kGroups·i
#pragma unroll
    for (int i = 0; i < kLanesPerGroup; ++i) lane_acc[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 1
    for (int first_k = 0; deep_split(first_k) < num_splits; first_k += kCombineDeepRows) {
      if (first_k > 0) load_rows(first_k);
#pragma unroll
      for (int j = 0; j < kCombineDeepRows; ++j) {
        const int s = deep_split(first_k + j);
        if (s >= num_splits) break;  // splits grow with j
        add_weighted_columns(lane_acc[j % kLanesPerGroup], weights[s], rows[j]);  // first_k: a multiple of the lanes
      }
    }
#pragma unroll
    for (int v = 0; v < kCombineSumLanes; ++v)
      if (v % kGroups == group) acc[v] = lane_acc[v / kGroups];
  } else if (d < kv_lora) {
#pragma unroll(kGroups == 1 ? 1 : 4)  // one group fits its 32 registers (the launch bounds) only without unrolling
    for (int base = 0; base < num_splits; base += kCombineSumLanes) {
#pragma unroll
      for (int v = 0; v < kCombineSumLanes; ++v) {  // no dependence between the loads: they overlap
        const int s = base + v;
        if (v % kGroups != group || s >= num_splits) continue;
        add_weighted_columns(acc[v], weights[s],
                             load_partial_columns(
                                 partial_out + (first_row + static_cast<int64_t>(s) * num_heads) * kv_lora + d,
                                 vector, d, column_stride, kv_lora));
      }
    }
  }
  // Group 0 gathers the other groups' lanes, then adds the lanes in their order, whatever the group count:
  // ((l0 + l1) + l2) + l3.
  if constexpr (kGroups > 1) {
    __shared__ float4 lane_sums[kCombineSumLanes][kCombineColumnThreads];  // the other groups' lanes
#pragma unroll
    for (int v = 0; v < kCombineSumLanes; ++v)
      if (v % kGroups == group && group > 0) lane_sums[v][column_thread] = acc[v];
    __syncthreads();
    if (group > 0) return;
#pragma unroll
    for (int v = 0; v < kCombineSumLanes; ++v)
      if (v % kGroups != 0) acc[v] = lane_sums[v][column_thread];
  }
  float4 sum = acc[0];
#pragma unroll
  for (int v = 1; v < kCombineSumLanes; ++v) {
    sum.x += acc[v].x;
    sum.y += acc[v].y;
    sum.z += acc[v].z;
    sum.w += acc[v].w;
  }
  const float inv_total = inv_total_sh;
  __nv_bfloat16* out = out_latent + (static_cast<int64_t>(b) * num_heads + h) * kv_lora;
  if (vector) {
    if (d < kv_lora)  // one 8-byte store where aligned: a warp writes whole sectors
      store_bf16x4(out + d,
                   make_uint2(pack_bf16x2(sum.x * inv_total, sum.y * inv_total),
                              pack_bf16x2(sum.z * inv_total, sum.w * inv_total)),
                   4);
  } else {
    const float values[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int c = column_thread + i * kCombineColumnThreads;
      if (c < kv_lora) out[c] = __float2bfloat16(values[i] * inv_total);
    }
  }
}

}  // namespace fathom::kernels::cuda::mla_detail
