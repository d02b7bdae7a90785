#include "kernels/cuda/sampling/sampling.h"

#include <cub/block/block_scan.cuh>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/sampling/cluster_row.cuh"
#include "kernels/cuda/sampling/fixed_point_keys.cuh"
#include "kernels/cuda/sampling/philox.cuh"

namespace fathom::kernels::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kWarpSize = 32;
constexpr int kDigitBits = 8;
constexpr int kBins = 1 << kDigitBits;
constexpr unsigned kFullMask = 0xffffffffu;

using BlockScanU64 = cub::BlockScan<unsigned long long, kRowThreads>;

struct SharedState {
  typename BlockScanU64::TempStorage scan;
  RowSoftmaxStats partials[32];
  RowSoftmaxStats block_stats;            // read by the cluster's other blocks
  unsigned long long hist[2][kBins];      // per-pass histograms, double-buffered; read by the other blocks
  unsigned long long block_mass;          // kept mass of this block's slice; read by the other blocks
  int selected_thread;
  unsigned selected_digit;
  unsigned long long selected_value;
};

struct Scaling {
  float inv_temperature;  // 1 / temperature, > 0
  float z_max;            // max logit * inv_temperature
};

// Adds `value` to hist[digit] once per distinct digit of the warp (digit < 0: nothing). All 32 lanes must call.
// Values must be < 2^41: they are summed as two 20/21-bit halves with the warp reduction unit.
__device__ __forceinline__ void warp_aggregated_add(unsigned long long* hist, int digit, unsigned long long value) {
  if (!__any_sync(kFullMask, digit >= 0)) return;  // common after the first pass: nothing of this warp matches
  const unsigned peers = __match_any_sync(kFullMask, digit);
  const unsigned low = __reduce_add_sync(peers, static_cast<unsigned>(value & 0xfffffu));
  const unsigned high = __reduce_add_sync(peers, static_cast<unsigned>(value >> 20));
  if (digit >= 0 && (threadIdx.x % kWarpSize) == __ffs(peers) - 1) {
    atomicAdd(&hist[digit], (static_cast<unsigned long long>(high) << 20) + low);
  }
}

// Cluster-wide histogram: waits for every block's local one, then thread t < kBins gets bin (kBins - 1 - t), summed
// over the blocks in rank order, and scans them (descending digits) across the block.
__device__ __forceinline__ void cluster_descending_scan(const unsigned long long* local_hist, SharedState& sh,
                                                        cg::cluster_group& cluster, unsigned long long& value,
                                                        unsigned long long& exclusive, unsigned long long& total) {
  cluster.sync();
  value = 0;
  if (threadIdx.x < kBins) {
    for (int rank = 0; rank < kClusterBlocks; ++rank) {
      value += cluster.map_shared_rank(local_hist, rank)[kBins - 1 - threadIdx.x];
    }
  }
  unsigned long long inclusive;
  BlockScanU64(sh.scan).InclusiveSum(value, inclusive, total);
  exclusive = inclusive - value;
}

// Key of the k-th largest z over the row (radix select, 8 bits per pass): count(key > K) < k <= count(key >= K).
__device__ uint32_t select_top_k_key(const RowSlice& s, const Scaling& scaling, int k,
                                     SharedState& sh, cg::cluster_group& cluster, int& pass) {
  uint32_t prefix = 0, prefix_mask = 0;
  unsigned long long remaining = static_cast<unsigned long long>(k);
  for (int shift = 32 - kDigitBits; shift >= 0; shift -= kDigitBits) {
    unsigned long long* hist = sh.hist[pass++ & 1];
    if (threadIdx.x < kBins) hist[threadIdx.x] = 0;
    __syncthreads();
#pragma unroll 4
    for (int j = 0; j < s.per_thread; ++j) {
      int digit = -1;
      if (s.valid(j)) {
        const uint32_t key = order_key(s.get(j) * scaling.inv_temperature);
        if ((key & prefix_mask) == prefix) digit = static_cast<int>((key >> shift) & (kBins - 1));
      }
      warp_aggregated_add(hist, digit, 1ull);
    }
    unsigned long long value, exclusive, total;
    cluster_descending_scan(hist, sh, cluster, value, exclusive, total);
    if (threadIdx.x < kBins && exclusive < remaining && remaining <= exclusive + value) {
      sh.selected_digit = kBins - 1 - threadIdx.x;
      sh.selected_value = remaining - exclusive;
    }
    __syncthreads();
    prefix |= sh.selected_digit << shift;
    prefix_mask |= static_cast<uint32_t>(kBins - 1) << shift;
    remaining = sh.selected_value;
    __syncthreads();
  }
  return prefix;
}

// Top-p threshold among tokens with key >= min_key and positive mass: the smallest present key x with
// mass(key > x) < p * mass(all). Radix walk carrying `above` = mass above the current prefix range.
__device__ uint32_t select_top_p_key(const RowSlice& s, const Scaling& scaling, uint32_t min_key, float top_p,
                                     SharedState& sh, cg::cluster_group& cluster, int& pass) {
  uint32_t prefix = 0, prefix_mask = 0;
  unsigned long long above = 0, target_mass = 1;
  for (int shift = 32 - kDigitBits; shift >= 0; shift -= kDigitBits) {
    unsigned long long* hist = sh.hist[pass++ & 1];
    if (threadIdx.x < kBins) hist[threadIdx.x] = 0;
    if (threadIdx.x == 0) sh.selected_thread = -1;
    __syncthreads();
#pragma unroll 4
    for (int j = 0; j < s.per_thread; ++j) {
      const float z = s.get(j) * scaling.inv_temperature;  // -inf past the vocabulary: zero mass, skipped
      const uint32_t key = order_key(z);
      int digit = -1;
      unsigned long long mass = 0;
      if (key >= min_key && (key & prefix_mask) == prefix) {
        mass = fixed_mass(expf(z - scaling.z_max));
        if (mass > 0) digit = static_cast<int>((key >> shift) & (kBins - 1));
      }
      warp_aggregated_add(hist, digit, digit >= 0 ? mass : 0ull);
    }
    unsigned long long value, exclusive, total;
    cluster_descending_scan(hist, sh, cluster, value, exclusive, total);
    if (shift == 32 - kDigitBits) {
      const double wanted = static_cast<double>(top_p) * static_cast<double>(total);
      target_mass = wanted < 1.0 ? 1ull : static_cast<unsigned long long>(wanted);
    }
    // The answer lies in the lowest non-empty bin whose mass above is still below the target.
    if (threadIdx.x < kBins && value > 0 && above + exclusive < target_mass) {
      atomicMax(&sh.selected_thread, static_cast<int>(threadIdx.x));
    }
    __syncthreads();
    if (static_cast<int>(threadIdx.x) == sh.selected_thread) {
      sh.selected_digit = kBins - 1 - threadIdx.x;
      sh.selected_value = above + exclusive;
    }
    __syncthreads();
    prefix |= sh.selected_digit << shift;
    prefix_mask |= static_cast<uint32_t>(kBins - 1) << shift;
    above = sh.selected_value;
    __syncthreads();
  }
  return prefix;
}

__device__ __forceinline__ unsigned long long kept_mass(float logit, const Scaling& scaling, uint32_t min_key,
                                                        float min_p) {
  const float z = logit * scaling.inv_temperature;
  if (order_key(z) < min_key) return 0;
  const float relative = expf(z - scaling.z_max);
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
  BlockScanU64(sh.scan).ExclusiveSum(thread_mass, start, block_total);
  if (threadIdx.x == 0) sh.block_mass = block_total;
  cluster.sync();
  const int my_rank = static_cast<int>(cluster.block_rank());
  unsigned long long block_start = 0, total = 0;
  for (int rank = 0; rank < kClusterBlocks; ++rank) {
    const unsigned long long mass = *cluster.map_shared_rank(&sh.block_mass, rank);
    if (rank < my_rank) block_start += mass;
    total += mass;
  }
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
  // Greedy also when scaling would overflow (tiny temperature, huge or infinite maximum).
  const bool greedy = !(temperature > 0.0f) || top_k == 1 || !isfinite(stats.max * inv_temperature);
  bool drawn = false;
  if (!greedy) {
    const Scaling scaling{inv_temperature, stats.max * inv_temperature};
    int pass = 0;
    uint32_t min_key = 0;
    if (top_k > 0 && top_k < vocab) min_key = select_top_k_key(s, scaling, top_k, sh, cluster, pass);
    if (top_p < 1.0f) min_key = select_top_p_key(s, scaling, min_key, top_p, sh, cluster, pass);
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
  FATHOM_CUDA_CHECK(cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(shared_bytes)));
  sample_kernel<<<static_cast<unsigned>(batch * kClusterBlocks), kRowThreads, shared_bytes, stream>>>(
      logits, vocab, per_thread, params, tokens, token_logprobs);
  FATHOM_CUDA_CHECK_LAUNCH();
}

}  // namespace fathom::kernels::cuda
