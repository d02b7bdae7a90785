#include "kernels/cuda/sampling/greedy_tokens.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/sampling/cluster_row.cuh"

namespace fathom::kernels::cuda {
namespace {

namespace cg = cooperative_groups;

// Elements a thread loads into registers before accumulating them: enough bytes in flight per SM to cover the
// memory latency (2 blocks x 512 threads x 16 x 4 B = 64 KB), few enough registers for 2 blocks per SM.
constexpr int kLoadsInFlight = 16;
// Element indices within a row (the last batch's unused slots included) are computed in 32 bits.
static_assert(int64_t{kClusterBlocks} * kRowThreads * (kMaxElementsPerThread + kLoadsInFlight) < (int64_t{1} << 31));

// One cluster of kClusterBlocks blocks per row. Thread t of block r owns row elements r * slice + j * kRowThreads + t
// (slice = per_thread * kRowThreads), accumulated in ascending j: RowSlice's ownership, so the stats equal
// cluster_row_stats' bit for bit.
__global__ void __cluster_dims__(kClusterBlocks, 1, 1) __launch_bounds__(kRowThreads, 2)
    greedy_kernel(const float* __restrict__ logits,  // [batch, vocab]
                  int64_t vocab, int per_thread,
                  int32_t* __restrict__ tokens,          // [batch]
                  float* __restrict__ token_logprobs) {  // [batch] or null
  __shared__ RowSoftmaxStats partials[32];
  __shared__ RowSoftmaxStats block_stats;  // read by the cluster's other blocks
  cg::cluster_group cluster = cg::this_cluster();
  const int64_t b = blockIdx.x / kClusterBlocks;
  const float* row = logits + b * vocab;             // [vocab]
  const int row_elements = static_cast<int>(vocab);  // <= 393216: indices within the row fit 32 bits
  const int first = static_cast<int>(cluster.block_rank()) * per_thread * kRowThreads + static_cast<int>(threadIdx.x);
  RowSoftmaxStats t{-INFINITY, 0.0f, INT64_MAX};
  for (int j0 = 0; j0 < per_thread; j0 += kLoadsInFlight) {
    float x[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int i = first + (j0 + u) * kRowThreads;
      x[u] = j0 + u < per_thread && i < row_elements ? __ldcs(row + i) : -INFINITY;
    }
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int i = first + (j0 + u) * kRowThreads;
      if (j0 + u < per_thread && i < row_elements) accumulate(t, logit_or_minus_inf(x[u]), i);
    }
  }
  const RowSoftmaxStats stats = cluster_merge_stats(t, partials, &block_stats, cluster);
  if (cluster.block_rank() == 0 && threadIdx.x == 0) {
    tokens[b] = static_cast<int32_t>(stats.argmax);
    // sample_kernel's expression: log_normalizer first, then the difference.
    const float log_normalizer = stats.max + logf(stats.sum_exp);
    if (token_logprobs) token_logprobs[b] = stats.max - log_normalizer;
  }
  cluster.sync();  // the other blocks may still be reading this block's block_stats
}

}  // namespace

void greedy_tokens(const float* logits, int64_t batch, int64_t vocab, int32_t* tokens, float* token_logprobs,
                   cudaStream_t stream) {
  FATHOM_CHECK(batch >= 0 && batch * kClusterBlocks < (int64_t{1} << 31), "greedy sampling: batch " << batch);
  FATHOM_CHECK(
      vocab > 0 && row_elements_per_thread(vocab) <= kMaxElementsPerThread,
      "greedy sampling: vocab " << vocab << " above " << int64_t{kClusterBlocks} * kRowThreads * kMaxElementsPerThread);
  if (batch == 0) return;
  greedy_kernel<<<static_cast<unsigned>(batch * kClusterBlocks), kRowThreads, 0, stream>>>(
      logits, vocab, row_elements_per_thread(vocab), tokens, token_logprobs);
  FATHOM_CUDA_CHECK_LAUNCH();
}

}  // namespace fathom::kernels::cuda
