#include "kernels/cuda/moe/moe_permutation.h"

#include <cub/block/block_scan.cuh>

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda {
namespace {

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
__device__ void warp_histograms(const WarpEntries& w, int num_experts, int* warp_hist) {
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
__device__ void warp_exclusive_bases(int num_experts, const int32_t* chunk_base, int* warp_hist, int* totals) {
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
__device__ void warp_scatter(const WarpEntries& w, int* warp_hist, const int* offsets, int num_experts,
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
__device__ void fill_unrouted_rows(int64_t row_begin, int64_t row_end, int num_experts, const int* offsets,
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
__device__ void segment_offsets(int num_experts, int row_alignment, const int* counts, int* offsets_shared,
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

// ---- T*k <= kChunkEntries: one launch. Every block computes the (small) histogram and segment offsets itself;
// block 0 scatters the entries and writes offsets / counts; every block fills a slice of the unrouted rows. ----
__global__ void __launch_bounds__(kBlockThreads)
    permutation_small_kernel(const int32_t* __restrict__ expert_ids,  // [T * k]
                             int64_t num_entries, int num_experts, int row_alignment, int64_t max_rows,
                             int64_t rows_per_block, MoePermutation out) {
  begin_dependent_kernel();  // launched programmatically (programmatic_launch.cuh)
  __shared__ typename BlockScan::TempStorage scan_storage;
  extern __shared__ int shared[];
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

// ---- Larger batches: histogram per chunk, one-block scan, scatter per chunk ----
__global__ void __launch_bounds__(kBlockThreads)
    permutation_histogram_kernel(const int32_t* __restrict__ expert_ids,  // [T * k]
                                 int64_t num_entries, int num_experts,
                                 int32_t* __restrict__ chunk_counts) {    // [chunks, E]
  begin_dependent_kernel();  // launched programmatically (programmatic_launch.cuh)
  extern __shared__ int hist[];  // [E]
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kChunkEntries;
  const int64_t end = min(num_entries, begin + kChunkEntries);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const int e = valid_expert_or_minus_one(expert_ids, i, end, num_experts);
    if (e >= 0) atomicAdd(&hist[e], 1);  // integer: order-independent
  }
  __syncthreads();
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) chunk_counts[blockIdx.x * num_experts + e] = hist[e];
}

__global__ void __launch_bounds__(kBlockThreads)
    permutation_offsets_kernel(int32_t* __restrict__ chunk_counts,  // [chunks, E] counts in, exclusive bases out
                               int num_chunks, int num_experts, int row_alignment, MoePermutation out) {
  begin_dependent_kernel();  // launched programmatically (programmatic_launch.cuh)
  __shared__ typename BlockScan::TempStorage scan_storage;
  extern __shared__ int shared[];
  int* counts = shared;                 // [E]
  int* offsets = counts + num_experts;  // [E + 1]
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
    int running = 0;
    for (int c = 0; c < num_chunks; ++c) {
      const int count = chunk_counts[c * num_experts + e];
      chunk_counts[c * num_experts + e] = running;
      running += count;
    }
    counts[e] = running;
  }
  __syncthreads();
  segment_offsets(num_experts, row_alignment, counts, offsets, scan_storage, &out);
}

// Blocks [0, chunks) scatter their chunk; blocks [chunks, chunks + fill_blocks) fill the unrouted rows.
__global__ void __launch_bounds__(kBlockThreads)
    permutation_scatter_kernel(const int32_t* __restrict__ expert_ids,     // [T * k]
                               int64_t num_entries, int num_experts, int64_t max_rows, int num_chunks,
                               int64_t rows_per_fill_block,
                               const int32_t* __restrict__ chunk_bases,    // [chunks, E]
                               MoePermutation out) {
  begin_dependent_kernel();  // launched programmatically (programmatic_launch.cuh)
  extern __shared__ int shared[];
  int* warp_hist = shared;                                 // [W][E]
  int* offsets = warp_hist + kWarpsPerBlock * num_experts; // [E + 1]
  int* counts = offsets + num_experts + 1;                 // [E]
  for (int e = threadIdx.x; e <= num_experts; e += blockDim.x) offsets[e] = out.expert_offsets[e];
  if (static_cast<int>(blockIdx.x) >= num_chunks) {
    for (int e = threadIdx.x; e < num_experts; e += blockDim.x) counts[e] = out.expert_counts[e];
    __syncthreads();
    const int64_t row_begin = static_cast<int64_t>(blockIdx.x - num_chunks) * rows_per_fill_block;
    fill_unrouted_rows(row_begin, min(max_rows, row_begin + rows_per_fill_block), num_experts, offsets, counts, out);
    return;
  }
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kChunkEntries;
  const int64_t end = min(num_entries, begin + kChunkEntries);
  const WarpEntries entries = load_warp_entries(expert_ids, begin, end, num_experts);
  for (int i = threadIdx.x; i < kWarpsPerBlock * num_experts; i += blockDim.x) warp_hist[i] = 0;
  __syncthreads();
  warp_histograms(entries, num_experts, warp_hist);
  __syncthreads();
  warp_exclusive_bases(num_experts, chunk_bases + blockIdx.x * num_experts, warp_hist, nullptr);
  __syncthreads();
  warp_scatter(entries, warp_hist, offsets, num_experts, out);
}

int64_t num_chunks_of(const MoePermutationShape& shape) {
  const int64_t entries = shape.num_tokens * shape.top_k;
  return (entries + kChunkEntries - 1) / kChunkEntries;
}

void validate_shape(const MoePermutationShape& shape) {
  FATHOM_CHECK(shape.num_tokens >= 0, "moe permutation: num_tokens " << shape.num_tokens);
  FATHOM_CHECK(shape.top_k >= 1, "moe permutation: top_k " << shape.top_k);
  FATHOM_CHECK(shape.num_experts >= 1 && shape.num_experts <= kMaxExperts,
               "moe permutation: num_experts " << shape.num_experts << " outside [1, " << kMaxExperts << "]");
  FATHOM_CHECK(shape.row_alignment >= 1, "moe permutation: row_alignment " << shape.row_alignment);
  FATHOM_CHECK(moe_max_permuted_rows(shape) < (int64_t{1} << 31),
               "moe permutation: " << moe_max_permuted_rows(shape) << " rows overflow int32 row indices");
}

}  // namespace

int64_t moe_max_permuted_rows(const MoePermutationShape& shape) {
  const int64_t entries = shape.num_tokens * shape.top_k;
  return entries + std::min<int64_t>(shape.num_experts, entries) * (shape.row_alignment - 1);
}

size_t moe_permutation_workspace_bytes(const MoePermutationShape& shape) {
  const int64_t chunks = num_chunks_of(shape);
  return chunks <= 1 ? 0 : static_cast<size_t>(chunks) * shape.num_experts * sizeof(int32_t);
}

void moe_build_permutation(const int32_t* expert_ids, const MoePermutationShape& shape, void* workspace,
                           size_t workspace_bytes, const MoePermutation& out, cudaStream_t stream) {
  validate_shape(shape);
  const int64_t entries = shape.num_tokens * shape.top_k;
  const int64_t max_rows = moe_max_permuted_rows(shape);
  const int num_experts = shape.num_experts;
  const int64_t chunks = num_chunks_of(shape);
  const int64_t fill_blocks = std::max<int64_t>(1, (max_rows + kRowsPerFillBlock - 1) / kRowsPerFillBlock);
  if (chunks <= 1) {
    const size_t shared_bytes = sizeof(int) * (static_cast<size_t>(kWarpsPerBlock) * num_experts + 2 * num_experts + 1);
    launch_programmatic(permutation_small_kernel, dim3(static_cast<unsigned>(fill_blocks)), dim3(kBlockThreads),
                        shared_bytes, stream, expert_ids, entries, num_experts, shape.row_alignment, max_rows,
                        kRowsPerFillBlock, out);
    return;
  }
  FATHOM_CHECK(workspace != nullptr && workspace_bytes >= moe_permutation_workspace_bytes(shape),
               "moe permutation: workspace of " << workspace_bytes << " bytes, need "
                                                << moe_permutation_workspace_bytes(shape));
  int32_t* chunk_counts = static_cast<int32_t*>(workspace);
  launch_programmatic(permutation_histogram_kernel, dim3(static_cast<unsigned>(chunks)), dim3(kBlockThreads),
                      sizeof(int) * num_experts, stream, expert_ids, entries, num_experts, chunk_counts);
  launch_programmatic(permutation_offsets_kernel, dim3(1), dim3(kBlockThreads), sizeof(int) * (2 * num_experts + 1),
                      stream, chunk_counts, static_cast<int>(chunks), num_experts, shape.row_alignment, out);
  const size_t scatter_shared = sizeof(int) * (static_cast<size_t>(kWarpsPerBlock) * num_experts + 2 * num_experts + 1);
  launch_programmatic(permutation_scatter_kernel, dim3(static_cast<unsigned>(chunks + fill_blocks)), dim3(kBlockThreads),
                      scatter_shared, stream, expert_ids, entries, num_experts, max_rows, static_cast<int>(chunks),
                      kRowsPerFillBlock, chunk_counts, out);
}

}  // namespace fathom::kernels::cuda
