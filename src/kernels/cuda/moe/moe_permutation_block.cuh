#pragma once
// Block-level building blocks of the MoE token permutation (moe_permutation.cu): per-warp histograms, stable
// scatter in (token, slot) order, segment offsets, unrouted-row fill, and the whole one-block build for T*k <= 4096
// entries, shared with the fused decode routing + permutation kernel (moe_route_permute.cu). Device-only.
#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "kernels/cuda/moe/moe_permutation.h"

namespace fathom::kernels::cuda::moe_permute_detail {

constexpr int kWarpSize = 32;
constexpr int kBlockThreads = 512;
constexpr int kWarpsPerBlock = kBlockThreads / kWarpSize;
constexpr int kChunkEntries = 4096;                                // (token, slot) entries per block
constexpr int kEntriesPerWarp = kChunkEntries / kWarpsPerBlock;    // 256: 8 steps of 32
constexpr int kMaxExperts = kBlockThreads;                         // one expert per thread in the scans
constexpr int64_t kRowsPerFillBlock = 4096;                       // unrouted-row fill: 8 rows per thread
constexpr unsigned kFullMask = 0xffffffffu;

using BlockScan = cub::BlockScan<int, kBlockThreads>;

__device__ __forceinline__ int valid_expert_or_minus_one(const int32_t* expert_ids, int64_t index, int64_t end,
                                                         int num_experts) {
  if (index >= end) return -1;
  const int e = expert_ids[index];
  return (e >= 0 && e < num_experts) ? e : -1;
}

constexpr int kStepsPerWarp = kEntriesPerWarp / kWarpSize;  // 8 warp-wide steps of 32 entries

// The warp's (at most kEntriesPerWarp) expert ids, all loads issued before any is used; -1 past `end` / invalid.
struct WarpEntries {
  int expert[kStepsPerWarp];
  int64_t begin, end;  // this warp's sub-range [begin, end) of the block's entries
};

__device__ __forceinline__ WarpEntries load_warp_entries(const int32_t* __restrict__ expert_ids, int64_t block_begin,
                                                         int64_t block_end, int num_experts) {
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  WarpEntries w;
  w.begin = block_begin + static_cast<int64_t>(warp) * kEntriesPerWarp;
  w.end = min(block_end, w.begin + kEntriesPerWarp);
#pragma unroll
  for (int step = 0; step < kStepsPerWarp; ++step) {
    w.expert[step] = valid_expert_or_minus_one(expert_ids, w.begin + step * kWarpSize + lane, w.end, num_experts);
  }
  return w;
}

// Per-warp expert histograms of this block's entries [begin, end): warp w covers the contiguous
// sub-range [begin + w * kEntriesPerWarp, ...). warp_hist: shared [kWarpsPerBlock][E], zeroed by the caller.
__device__ inline void warp_histograms(const WarpEntries& w, int num_experts, int* warp_hist) {
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  int* hist = warp_hist + warp * num_experts;
#pragma unroll
  for (int step = 0; step < kStepsPerWarp; ++step) {
    if (w.begin + step * kWarpSize >= w.end) break;  // warp-uniform
    const int e = w.expert[step];
    const unsigned peers = __match_any_sync(kFullMask, e);
    if (e >= 0 && lane == __ffs(peers) - 1) hist[e] += __popc(peers);
    __syncwarp();
  }
}

// warp_hist[w][e] (counts) -> start of warp w's rows inside expert e's segment, beginning at
// chunk_base[e] (or 0). Returns expert e's running total for the thread that owns e (threads own e = tid + i*blockDim).
__device__ inline void warp_exclusive_bases(int num_experts, const int32_t* chunk_base, int* warp_hist, int* totals) {
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
    int running = chunk_base ? chunk_base[e] : 0;
    for (int w = 0; w < kWarpsPerBlock; ++w) {
      const int count = warp_hist[w * num_experts + e];
      warp_hist[w * num_experts + e] = running;
      running += count;
    }
    if (totals) totals[e] = running;
  }
}

// Writes the rows of this block's entries in stable (token, slot) order. offsets: [E] segment starts.
__device__ inline void warp_scatter(const WarpEntries& w, int* warp_hist, const int* offsets, int num_experts,
                             const MoePermutation& out) {
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  int* bases = warp_hist + warp * num_experts;
#pragma unroll
  for (int step = 0; step < kStepsPerWarp; ++step) {
    if (w.begin + step * kWarpSize >= w.end) break;  // warp-uniform
    const int64_t index = w.begin + step * kWarpSize + lane;
    const int e = w.expert[step];
    const unsigned peers = __match_any_sync(kFullMask, e);
    if (e >= 0) {
      const int rank = __popc(peers & ((1u << lane) - 1u));
      const int row = offsets[e] + bases[e] + rank;
      out.token_slot_row[index] = row;
      out.row_token_slot[row] = static_cast<int32_t>(index);
      out.row_expert[row] = e;
    } else if (index < w.end) {
      out.token_slot_row[index] = -1;
    }
    __syncwarp();
    if (e >= 0 && lane == __ffs(peers) - 1) bases[e] += __popc(peers);
    __syncwarp();
  }
}

// Rows [row_begin, row_end) that hold no routed entry (segment padding, or past the padded total) get -1 in both
// row maps; routed rows are left to the scatter. offsets: shared [E + 1]; counts: shared [E]. Coalesced.
__device__ inline void fill_unrouted_rows(int64_t row_begin, int64_t row_end, int num_experts, const int* offsets,
                                   const int* counts, const MoePermutation& out) {
  const int total = offsets[num_experts];
  for (int64_t row = row_begin + threadIdx.x; row < row_end; row += blockDim.x) {
    bool routed = false;
    if (row < total) {
      int low = 0, high = num_experts;  // last e with offsets[e] <= row: offsets[low] <= row < offsets[high]
      while (high - low > 1) {
        const int mid = (low + high) / 2;
        if (offsets[mid] <= row) low = mid; else high = mid;
      }
      routed = row - offsets[low] < counts[low];
    }
    if (!routed) {
      out.row_token_slot[row] = -1;
      out.row_expert[row] = -1;
    }
  }
}

// Segment starts from the per-expert totals (block-wide scan, one expert per thread).
// Writes offsets_shared [E + 1] and, when `out` is set, the global expert_offsets / expert_counts.
__device__ inline void segment_offsets(int num_experts, int row_alignment, const int* counts, int* offsets_shared,
                                typename BlockScan::TempStorage& scan_storage, const MoePermutation* out) {
  const int e = threadIdx.x;
  const int count = e < num_experts ? counts[e] : 0;
  const int padded = (count + row_alignment - 1) / row_alignment * row_alignment;
  int start = 0, total = 0;
  BlockScan(scan_storage).ExclusiveSum(padded, start, total);
  if (e < num_experts) {
    offsets_shared[e] = start;
    if (out) {
      out->expert_offsets[e] = start;
      out->expert_counts[e] = count;
    }
  }
  if (e == 0) {
    offsets_shared[num_experts] = total;
    if (out) out->expert_offsets[num_experts] = total;
  }
  if (out && out->active_experts) {  // block-uniform: the scan below has every thread
    __syncthreads();                 // scan_storage is reused
    int active_index = 0, active_total = 0;
    BlockScan(scan_storage).ExclusiveSum(count > 0 ? 1 : 0, active_index, active_total);
    if (e < num_experts) {
      // Disjoint positions: active experts fill [0, active_total), the others' own index e >= active_total.
      if (count > 0) out->active_experts[active_index] = e;
      if (e >= active_total) out->active_experts[e] = -1;
    }
  }
}

// The whole permutation of num_entries <= kChunkEntries (token, slot) entries by one block of kBlockThreads threads:
// every block computes the (small) histogram and segment offsets itself; block 0 scatters the entries and writes
// offsets / counts; every block fills rows [blockIdx.x * rows_per_block, ...) of the unrouted rows.
// expert_ids: global or shared; shared: permute_small_shared_ints(E) ints of dynamic shared memory.
__device__ __forceinline__ void permute_small_block(const int32_t* expert_ids, int64_t num_entries, int num_experts,
                                                   int row_alignment, int64_t max_rows, int64_t rows_per_block,
                                                   const MoePermutation& out, int* shared,
                                                   typename BlockScan::TempStorage& scan_storage) {
  int* warp_hist = shared;                                   // [W][E]
  int* counts = warp_hist + kWarpsPerBlock * num_experts;    // [E]
  int* offsets = counts + num_experts;                       // [E + 1]
  const WarpEntries entries = load_warp_entries(expert_ids, 0, num_entries, num_experts);
  for (int i = threadIdx.x; i < kWarpsPerBlock * num_experts; i += blockDim.x) warp_hist[i] = 0;
  __syncthreads();
  warp_histograms(entries, num_experts, warp_hist);
  __syncthreads();
  warp_exclusive_bases(num_experts, nullptr, warp_hist, counts);
  __syncthreads();
  const bool writer = blockIdx.x == 0;
  segment_offsets(num_experts, row_alignment, counts, offsets, scan_storage, writer ? &out : nullptr);
  __syncthreads();
  if (writer) warp_scatter(entries, warp_hist, offsets, num_experts, out);
  const int64_t row_begin = static_cast<int64_t>(blockIdx.x) * rows_per_block;
  fill_unrouted_rows(row_begin, min(max_rows, row_begin + rows_per_block), num_experts, offsets, counts, out);
}

// Dynamic shared memory (ints) of permute_small_block.
constexpr size_t permute_small_shared_ints(int num_experts) {
  return static_cast<size_t>(kWarpsPerBlock) * num_experts + 2 * num_experts + 1;
}

}  // namespace fathom::kernels::cuda::moe_permute_detail
