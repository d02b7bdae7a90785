#include "kernels/cuda/sampling/log_softmax.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/sampling/cluster_row.cuh"

namespace fathom::kernels::cuda {
namespace {

namespace cg = cooperative_groups;

// One cluster of kClusterBlocks blocks per row: slice into shared memory, cluster (max, sum), out = x - lse.
__global__ void __cluster_dims__(kClusterBlocks, 1, 1) __launch_bounds__(kRowThreads, 1)
    log_softmax_kernel(const float* logits,  // [batch, vocab]
                       int64_t vocab, int per_thread,
                       float* out) {         // [batch, vocab], may alias logits
  extern __shared__ float slice[];
  __shared__ RowSoftmaxStats partials[32];
  __shared__ RowSoftmaxStats block_stats;
  cg::cluster_group cluster = cg::this_cluster();
  const int64_t b = blockIdx.x / kClusterBlocks;
  const RowSlice s = load_row_slice(logits + b * vocab, vocab, per_thread, static_cast<int>(cluster.block_rank()), slice);
  const RowSoftmaxStats stats = cluster_row_stats(s, partials, &block_stats, cluster);
  const float log_normalizer = stats.max + logf(stats.sum_exp);
  float* out_row = out + b * vocab;
  for (int j = 0; j < per_thread; ++j) {
    if (s.valid(j)) out_row[s.index(j)] = s.get(j) - log_normalizer;
  }
  cluster.sync();  // peers may still read block_stats
}

}  // namespace

void log_softmax(const float* logits, int64_t batch, int64_t vocab, float* out, cudaStream_t stream) {
  FATHOM_CHECK(batch >= 0 && batch * kClusterBlocks < (int64_t{1} << 31) && vocab > 0 &&
                   row_elements_per_thread(vocab) <= kMaxElementsPerThread,
               "log_softmax: batch " << batch << ", vocab " << vocab);
  if (batch == 0) return;
  const int per_thread = row_elements_per_thread(vocab);
  const size_t shared_bytes = row_slice_bytes(per_thread);
  FATHOM_CUDA_CHECK(
      cudaFuncSetAttribute(log_softmax_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_row_slice_bytes()));
  log_softmax_kernel<<<static_cast<unsigned>(batch * kClusterBlocks), kRowThreads, shared_bytes, stream>>>(
      logits, vocab, per_thread, out);
  FATHOM_CUDA_CHECK_LAUNCH();
}

}  // namespace fathom::kernels::cuda
