#pragma once
// The key of the k-th largest z of one row held by a cluster (cluster_row.cuh): the smallest key x with
// count(key > x) < k, counted exactly. Three steps:
//   1. coarse: tokens binned linearly by z_max - z (kCoarseBins over the 28 units below the maximum, the rest in the
//      last bin, left uncounted: its count is the vocabulary less the others'), scanned in descending z: x lies in
//      the last non-empty bin whose count above is below k;
//   2. range: that bin's smallest and largest key; equal (a single value, ties included) -> x;
//   3. radix: 8-bit digits over the key bits where they differ, among that bin's tokens only.
// Real logits spread their tokens over many bins, so the threshold's bin holds a few of them and steps 2-3 are cheap.
// Exact also when z_max is not finite (a +inf logit, or none above -inf: every token then falls in the last bin and
// steps 2-3 rank the whole row). Used by score_tokens' top lists. A top-p form (masses instead of counts) for the
// sampler measured slower on language-model-shaped rows than its radix passes (bench/RESULTS.md, fifty-second
// session); its successor awaits a GPU run on branch sampler-threshold-select.
#include <cooperative_groups.h>
#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "kernels/cuda/sampling/cluster_row.cuh"
#include "kernels/cuda/sampling/fixed_point_keys.cuh"

namespace fathom::kernels::cuda {

constexpr int kRadixBits = 8;
constexpr int kRadixBins = 1 << kRadixBits;
constexpr int kCoarseBins = 2048;
constexpr int kCoarseBinsPerThread = kCoarseBins / kRowThreads;
constexpr float kCoarseRange = 28.0f;  // units below the maximum binned: the top lists of real logits lie within
constexpr float kCoarseBinsPerUnit = kCoarseBins / kCoarseRange;
static_assert(kCoarseBins % kRowThreads == 0 && kRadixBins <= kRowThreads);

struct Scaling {
  float inv_temperature;  // 1 / temperature, > 0 (so -inf logits stay -inf)
  float z_max;            // max logit * inv_temperature
  // z of a logit, rounded on its own: never contracted into a later add, so every pass sees the same z.
  __device__ __forceinline__ float scaled(float logit) const { return __fmul_rn(logit, inv_temperature); }
};

struct ThresholdShared {
  typename cub::BlockScan<unsigned long long, kRowThreads>::TempStorage scan;
  unsigned coarse[kCoarseBins];              // per-bin counts; read by the other blocks
  unsigned radix[2][kRadixBins];             // per-digit counts, double-buffered; read by the other blocks
  uint32_t warp_range[2][kRowThreads / 32];  // per-warp smallest / largest key of the threshold's bin
  uint32_t block_range[2];                   // this block's; read by the other blocks
  int selected;                              // the chosen bin or digit (as the thread that found it)
  unsigned long long selected_above;         // count above the chosen bin or digit
};

// Bin of z in descending z: z1 > z2 -> bin(z1) <= bin(z2) (every step rounds monotonically, none is contracted into
// an FMA, so every pass bins a token alike); -inf -> the last bin.
__device__ __forceinline__ int coarse_bin(float z, float z_max) {
  const float units = __fmul_rn(__fsub_rn(z_max, z), kCoarseBinsPerUnit);
  return static_cast<int>(fminf(units, static_cast<float>(kCoarseBins - 1)));
}

// Adds 1 to hist[digit] for every lane with a digit (< 0: none). All 32 lanes must call. A warp whose lanes all hold
// one digit adds once; otherwise every lane adds its own (lanes of different digits would serialize a match over
// each group, dearer than the atomics themselves).
__device__ __forceinline__ void warp_count(unsigned* hist, int digit) {
  const unsigned active = __ballot_sync(0xffffffffu, digit >= 0);
  if (active == 0) return;  // common: nothing of this warp is in play
  const int leader = __ffs(active) - 1;
  const int leader_digit = __shfl_sync(0xffffffffu, digit, leader);
  if (__all_sync(0xffffffffu, digit < 0 || digit == leader_digit)) {
    if ((threadIdx.x % 32) == leader) atomicAdd(&hist[leader_digit], static_cast<unsigned>(__popc(active)));
  } else if (digit >= 0) {
    atomicAdd(&hist[digit], 1u);
  }
}

// The key of the k-th largest z (0 < k < vocab). Every block of the cluster calls it with the same arguments and gets
// the same key; contains cluster.sync()s, and the other blocks read this block's `sh` afterwards until the caller's
// next cluster.sync().
__device__ uint32_t select_top_k_key(const RowSlice& s, const Scaling& scaling, int k, ThresholdShared& sh,
                                     cooperative_groups::cluster_group& cluster, int& radix_pass) {
  using BlockScan = cub::BlockScan<unsigned long long, kRowThreads>;
  // 1. Coarse bins; the last one (tokens far below the maximum, usually most of them) is left uncounted.
  unsigned* coarse = sh.coarse;
  for (int bin = threadIdx.x; bin < kCoarseBins; bin += kRowThreads) coarse[bin] = 0;
  __syncthreads();
#pragma unroll 2
  for (int j = 0; j < s.per_thread; ++j) {
    const int bin = coarse_bin(scaling.scaled(s.get(j)), scaling.z_max);
    warp_count(coarse, s.valid(j) && bin < kCoarseBins - 1 ? bin : -1);
  }
  cluster.sync();
  const int first_bin = threadIdx.x * kCoarseBinsPerThread;  // this thread's bins, in descending z
  // A bin's weight over the cluster (read twice rather than held: registers are short here).
  auto bin_weight = [&](int bin) -> unsigned long long {
    unsigned long long sum = 0;
    for (int rank = 0; rank < kClusterBlocks; ++rank) sum += cluster.map_shared_rank(coarse, rank)[bin];
    return sum;
  };
  unsigned long long thread_total = 0;
#pragma unroll
  for (int i = 0; i < kCoarseBinsPerThread; ++i) thread_total += bin_weight(first_bin + i);
  unsigned long long above, listed_total;  // count of the bins before this thread's; of every counted bin
  BlockScan(sh.scan).ExclusiveSum(thread_total, above, listed_total);
  const unsigned long long target = static_cast<unsigned long long>(k);
  unsigned long long running = above;
  for (int i = 0; i < kCoarseBinsPerThread; ++i) {
    const int bin = first_bin + i;
    unsigned long long value = bin_weight(bin);
    if (bin == kCoarseBins - 1) value = static_cast<unsigned long long>(s.vocab) - listed_total;
    // The last non-empty bin with count above < k is the one whose span covers k (k < vocab): exactly one thread
    // writes.
    if (running < target && target <= running + value) {
      sh.selected = bin;
      sh.selected_above = running;
    }
    running += value;
  }
  __syncthreads();
  const int threshold_bin = sh.selected;
  above = sh.selected_above;

  // 2. The bin's key range.
  uint32_t lowest = UINT32_MAX, highest = 0;
  for (int j = 0; j < s.per_thread; ++j) {
    const float z = scaling.scaled(s.get(j));
    if (coarse_bin(z, scaling.z_max) != threshold_bin) continue;
    if (!s.valid(j)) continue;
    const uint32_t key = order_key(z);
    lowest = min(lowest, key);
    highest = max(highest, key);
  }
  lowest = __reduce_min_sync(0xffffffffu, lowest);
  highest = __reduce_max_sync(0xffffffffu, highest);
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) {
    sh.warp_range[0][warp] = lowest;
    sh.warp_range[1][warp] = highest;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kRowThreads / 32; ++w) {
      lowest = min(lowest, sh.warp_range[0][w]);
      highest = max(highest, sh.warp_range[1][w]);
    }
    sh.block_range[0] = lowest;
    sh.block_range[1] = highest;
  }
  cluster.sync();
  lowest = UINT32_MAX;
  highest = 0;
  for (int rank = 0; rank < kClusterBlocks; ++rank) {
    const uint32_t* remote = cluster.map_shared_rank(sh.block_range, rank);
    lowest = min(lowest, remote[0]);
    highest = max(highest, remote[1]);
  }
  // Equal: the threshold. (lowest > highest, an empty bin, cannot happen: every pass bins a token alike; were it to,
  // the largest key selects too few tokens, which score_tokens checks.)
  if (lowest >= highest) return lowest;

  // 3. Radix digits over the differing low bits, most significant first.
  int bits = 32 - __clz(lowest ^ highest);
  uint32_t prefix_mask = bits == 32 ? 0u : ~((1u << bits) - 1u);
  uint32_t prefix = lowest & prefix_mask;
  while (bits > 0) {
    const int width = min(kRadixBits, bits), shift = bits - width;
    unsigned* hist = sh.radix[radix_pass++ & 1];
    if (threadIdx.x < kRadixBins) hist[threadIdx.x] = 0;
    if (threadIdx.x == 0) sh.selected = -1;
    __syncthreads();
#pragma unroll 2
    for (int j = 0; j < s.per_thread; ++j) {
      const float z = scaling.scaled(s.get(j));
      const uint32_t key = order_key(z);
      const bool member = s.valid(j) && coarse_bin(z, scaling.z_max) == threshold_bin && (key & prefix_mask) == prefix;
      warp_count(hist, member ? static_cast<int>((key >> shift) & ((1u << width) - 1u)) : -1);
    }
    cluster.sync();
    // Thread t < kRadixBins takes digit (kRadixBins - 1 - t): the scan runs in descending keys.
    unsigned long long digit_weight = 0;
    if (threadIdx.x < kRadixBins) {
      for (int rank = 0; rank < kClusterBlocks; ++rank) {
        digit_weight += cluster.map_shared_rank(hist, rank)[kRadixBins - 1 - threadIdx.x];
      }
    }
    unsigned long long digit_above;
    BlockScan(sh.scan).ExclusiveSum(digit_weight, digit_above);
    // x's digit: the lowest non-empty one whose count above is still below k.
    if (threadIdx.x < kRadixBins && digit_weight > 0 && above + digit_above < target) {
      atomicMax(&sh.selected, static_cast<int>(threadIdx.x));
    }
    __syncthreads();
    if (static_cast<int>(threadIdx.x) == sh.selected) sh.selected_above = above + digit_above;
    __syncthreads();
    prefix |= static_cast<uint32_t>(kRadixBins - 1 - sh.selected) << shift;
    prefix_mask |= ((1u << width) - 1u) << shift;
    above = sh.selected_above;
    bits = shift;
    __syncthreads();
  }
  return prefix;
}

}  // namespace fathom::kernels::cuda
