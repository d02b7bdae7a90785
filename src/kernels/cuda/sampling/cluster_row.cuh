#pragma once
// One logits row spread over a cluster of kClusterBlocks blocks (Hopper thread-block clusters), each block holding
// its slice in shared memory: element j of thread t of block r is row index r * slice + j * kRowThreads + t, stored
// at slice_shared[j * kRowThreads + t] (loaded once, coalesced; later passes read shared memory only).
// Cluster-wide results are combined through distributed shared memory in rank order (deterministic).
#include <cooperative_groups.h>

#include <cstdint>

#include "kernels/cuda/sampling/row_softmax_stats.cuh"

namespace fathom::kernels::cuda {

constexpr int kRowThreads = 512;           // threads per block
constexpr int kClusterBlocks = 8;          // blocks per row (the portable cluster size)
constexpr int kMaxElementsPerThread = 96;  // 192 KB of shared memory per block: vocab <= 8 * 512 * 96 = 393216

// Elements per thread for a vocabulary (each block's slice is a multiple of kRowThreads).
inline int row_elements_per_thread(int64_t vocab) {
  const int64_t slice = (vocab + kClusterBlocks - 1) / kClusterBlocks;
  return static_cast<int>((slice + kRowThreads - 1) / kRowThreads);
}

struct RowSlice {
  float* logit;    // shared [per_thread * kRowThreads]; raw logits (NaN -> -inf), -inf past the vocabulary
  int per_thread;  // elements per thread
  int64_t first;   // row index of this thread's element 0
  int64_t vocab;
  __device__ __forceinline__ int64_t index(int j) const { return first + static_cast<int64_t>(j) * kRowThreads; }
  __device__ __forceinline__ bool valid(int j) const { return index(j) < vocab; }
  __device__ __forceinline__ float get(int j) const { return logit[j * kRowThreads + threadIdx.x]; }
};

// Each thread loads (and later reads) only its own elements, so no barrier is needed before use.
__device__ __forceinline__ RowSlice load_row_slice(const float* row, int64_t vocab, int per_thread, int rank,
                                                   float* slice_shared) {
  RowSlice s{slice_shared, per_thread, static_cast<int64_t>(rank) * per_thread * kRowThreads + threadIdx.x, vocab};
#pragma unroll 8
  for (int j = 0; j < per_thread; ++j) {
    const int64_t i = s.index(j);
    slice_shared[j * kRowThreads + threadIdx.x] = i < vocab ? logit_or_minus_inf(row[i]) : -INFINITY;
  }
  return s;
}

// Merges every thread's stats of its elements (accumulated in ascending index order) into the row's (max, argmax,
// sum exp), identical in every block of the cluster: block_row_stats' fixed tree, then the blocks in rank order.
// Contains a cluster.sync(); block_stats (shared) is read by the other blocks afterwards, so a block must not exit
// before a later cluster.sync().
__device__ __forceinline__ RowSoftmaxStats cluster_merge_stats(const RowSoftmaxStats& thread_stats,
                                                               RowSoftmaxStats* partials, RowSoftmaxStats* block_stats,
                                                               cooperative_groups::cluster_group& cluster) {
  const RowSoftmaxStats b = block_row_stats(thread_stats, partials);
  if (threadIdx.x == 0) *block_stats = b;
  cluster.sync();
  if (threadIdx.x == 0) {  // one thread merges the blocks' stats in rank order (remote reads are dear); it shares them
    RowSoftmaxStats r = *cluster.map_shared_rank(block_stats, 0);
    for (int rank = 1; rank < kClusterBlocks; ++rank) r = merge(r, *cluster.map_shared_rank(block_stats, rank));
    partials[0] = r;
  }
  __syncthreads();
  const RowSoftmaxStats r = partials[0];
  __syncthreads();  // partials may be reused by the caller
  return r;
}

// (max, argmax, sum exp) of the whole row held in the cluster's slices; see cluster_merge_stats.
__device__ __forceinline__ RowSoftmaxStats cluster_row_stats(const RowSlice& s, RowSoftmaxStats* partials,
                                                             RowSoftmaxStats* block_stats,
                                                             cooperative_groups::cluster_group& cluster) {
  RowSoftmaxStats t{-INFINITY, 0.0f, INT64_MAX};
  for (int j = 0; j < s.per_thread; ++j) {
    if (s.valid(j)) accumulate(t, s.get(j), s.index(j));
  }
  return cluster_merge_stats(t, partials, block_stats, cluster);
}

// Dynamic shared memory of a row block: the slice of logits.
inline size_t row_slice_bytes(int per_thread) { return sizeof(float) * static_cast<size_t>(per_thread) * kRowThreads; }

// Row kernels set their dynamic shared-memory limit to the largest slice (not the call's): a call of a smaller
// vocabulary on another host thread must not lower the limit between this call's set and its launch.
inline int max_row_slice_bytes() { return static_cast<int>(row_slice_bytes(kMaxElementsPerThread)); }

}  // namespace fathom::kernels::cuda
