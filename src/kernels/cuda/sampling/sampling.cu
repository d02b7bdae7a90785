#include "kernels/cuda/sampling/sampling.h"

#include <cub/block/block_scan.cuh>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/sampling/cluster_row.cuh"
#include "kernels/cuda/sampling/philox.cuh"
#include "kernels/cuda/sampling/threshold_select.cuh"

namespace fathom::kernels::cuda {
namespace {

namespace cg = cooperative_groups;

using BlockScanU64 = cub::BlockScan<unsigned long long, kRowThreads>;

struct SharedState {
  ThresholdShared threshold;
  RowSoftmaxStats partials[32];
  RowSoftmaxStats block_stats;      // read by the cluster's other blocks
  unsigned long long block_mass;    // kept mass of this block's slice; read by the other blocks
  unsigned long long block_start;   // kept mass of the blocks of lower rank
  unsigned long long cluster_mass;  // kept mass of the row
};

__device__ __forceinline__ unsigned long long kept_mass(float logit, const Scaling& scaling, uint32_t min_key,
                                                        float min_p) {
  const float z = scaling.scaled(logit);
  if (order_key(z) < min_key) return 0;
  const float relative = expf(__fsub_rn(z, scaling.z_max));
  if (relative < min_p) return 0;
  return fixed_mass(relative);
}

// Inverse-CDF draw over the kept masses in (block rank, thread, element) order. The block and thread that own the
// drawn element write the token; returns false when no mass is kept anywhere (cannot happen: the maximum is kept).
__device__ bool draw(const RowSlice& s, const Scaling& scaling, uint32_t min_key, float min_p,
                     unsigned long long random_bits, float log_normalizer, SharedState& sh, cg::cluster_group& cluster,
                     int32_t* token_out, float* logprob_out) {
  unsigned long long thread_mass = 0;
#pragma unroll 4
  for (int j = 0; j < s.per_thread; ++j) thread_mass += kept_mass(s.get(j), scaling, min_key, min_p);
  unsigned long long start, block_total;
  BlockScanU64(sh.threshold.scan).ExclusiveSum(thread_mass, start, block_total);
  if (threadIdx.x == 0) sh.block_mass = block_total;
  cluster.sync();
  if (threadIdx.x == 0) {  // one thread reads the other blocks' masses (remote reads are dear); the block shares them
    const int my_rank = static_cast<int>(cluster.block_rank());
    unsigned long long before = 0, all = 0;
    for (int rank = 0; rank < kClusterBlocks; ++rank) {
      const unsigned long long mass = *cluster.map_shared_rank(&sh.block_mass, rank);
      if (rank < my_rank) before += mass;
      all += mass;
    }
    sh.block_start = before;
    sh.cluster_mass = all;
  }
  __syncthreads();
  const unsigned long long block_start = sh.block_start, total = sh.cluster_mass;
  if (total == 0) return false;
  const unsigned long long target = __umul64hi(random_bits, total);  // uniform in [0, total)
  if (target < block_start || target >= block_start + block_total) return true;
  const unsigned long long local = target - block_start;
  if (thread_mass == 0 || local < start || local >= start + thread_mass) return true;
  unsigned long long running = start;
  bool found = false;
  for (int j = 0; j < s.per_thread; ++j) {
    const unsigned long long mass = kept_mass(s.get(j), scaling, min_key, min_p);
    if (!found && local < running + mass) {
      found = true;
      *token_out = static_cast<int32_t>(s.index(j));
      if (logprob_out) *logprob_out = s.get(j) - log_normalizer;
    }
    running += mass;
  }
  return true;
}

// One cluster of kClusterBlocks blocks per row; every block takes the same branches (cluster-uniform data).
__global__ void __cluster_dims__(kClusterBlocks, 1, 1) __launch_bounds__(kRowThreads, 2)
    sample_kernel(const float* __restrict__ logits,  // [batch, vocab]
                  int64_t vocab, int per_thread, SamplingParams params,
                  int32_t* __restrict__ tokens,        // [batch]
                  float* __restrict__ token_logprobs) { // [batch] or null
  extern __shared__ float slice[];  // [per_thread * kRowThreads]
  __shared__ SharedState sh;
  cg::cluster_group cluster = cg::this_cluster();
  const int64_t b = blockIdx.x / kClusterBlocks;
  const bool leader = cluster.block_rank() == 0 && threadIdx.x == 0;
  const RowSlice s = load_row_slice(logits + b * vocab, vocab, per_thread, static_cast<int>(cluster.block_rank()), slice);
  const RowSoftmaxStats stats = cluster_row_stats(s, sh.partials, &sh.block_stats, cluster);
  const float log_normalizer = stats.max + logf(stats.sum_exp);
  const float temperature = params.temperature[b];
  const int top_k = params.top_k ? params.top_k[b] : 0;
  const float top_p = params.top_p ? params.top_p[b] : 1.0f;
  const float min_p = params.min_p ? fminf(params.min_p[b], 1.0f) : 0.0f;
  const float inv_temperature = __fdiv_rn(1.0f, temperature);
  // Greedy also when scaling would overflow (tiny temperature, huge or infinite maximum) or vanish (infinite one).
  const bool greedy = !(temperature > 0.0f) || !(inv_temperature > 0.0f) || top_k == 1 ||
                      !isfinite(stats.max * inv_temperature);
  bool drawn = false;
  if (!greedy) {
    const Scaling scaling{inv_temperature, stats.max * inv_temperature};
    int radix_pass = 0;
    uint32_t min_key = 0;
    if (top_k > 0 && top_k < vocab) {
      min_key = select_threshold_key<false>(s, scaling, 0, top_k, 1.0f, sh.threshold, cluster, radix_pass);
    }
    if (top_p < 1.0f) {
      min_key = select_threshold_key<true>(s, scaling, min_key, 0, top_p, sh.threshold, cluster, radix_pass);
    }
    const uint64_t step = params.step ? params.step[b] : 0;
    drawn = draw(s, scaling, min_key, min_p > 0.0f ? min_p : 0.0f, philox_random64(params.seed[b], step, 0),
                 log_normalizer, sh, cluster, tokens + b, token_logprobs ? token_logprobs + b : nullptr);
  }
  if (!drawn && leader) {
    tokens[b] = static_cast<int32_t>(stats.argmax);
    if (token_logprobs) token_logprobs[b] = stats.max - log_normalizer;
  }
  cluster.sync();  // the other blocks may still be reading this block's shared memory
}

}  // namespace

void sample_tokens(const float* logits, int64_t batch, int64_t vocab, const SamplingParams& params, int32_t* tokens,
                   float* token_logprobs, cudaStream_t stream) {
  FATHOM_CHECK(batch >= 0 && batch * kClusterBlocks < (int64_t{1} << 31), "sampling: batch " << batch);
  FATHOM_CHECK(vocab > 0 && row_elements_per_thread(vocab) <= kMaxElementsPerThread,
               "sampling: vocab " << vocab << " above " << int64_t{kClusterBlocks} * kRowThreads * kMaxElementsPerThread);
  FATHOM_CHECK(params.temperature != nullptr && params.seed != nullptr, "sampling: temperature and seed are required");
  if (batch == 0) return;
  const int per_thread = row_elements_per_thread(vocab);
  const size_t shared_bytes = row_slice_bytes(per_thread);
  FATHOM_CUDA_CHECK(
      cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_row_slice_bytes()));
  sample_kernel<<<static_cast<unsigned>(batch * kClusterBlocks), kRowThreads, shared_bytes, stream>>>(
      logits, vocab, per_thread, params, tokens, token_logprobs);
  FATHOM_CUDA_CHECK_LAUNCH();
}

}  // namespace fathom::kernels::cuda
