#include "kernels/cuda/moe/moe_permutation.h"

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe/moe_permutation_block.cuh"
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda {
namespace {

using namespace moe_permute_detail;

// ---- T*k <= kChunkEntries: one launch (permute_small_block). ----
__global__ void __launch_bounds__(kBlockThreads)
    permutation_small_kernel(const int32_t* __restrict__ expert_ids,  // [T * k]
                             int64_t num_entries, int num_experts, int row_alignment, int64_t max_rows,
                             int64_t rows_per_block, MoePermutation out) {
  begin_dependent_kernel();  // launched programmatically (programmatic_launch.cuh)
  __shared__ typename BlockScan::TempStorage scan_storage;
  extern __shared__ int shared[];
  permute_small_block(expert_ids, num_entries, num_experts, row_alignment, max_rows, rows_per_block, out, shared,
                      scan_storage);
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
    const size_t shared_bytes = sizeof(int) * permute_small_shared_ints(num_experts);
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
