#pragma once
// The sampling filters' thresholds over one row held by a cluster (cluster_row.cuh): the smallest eligible key x
// whose weight strictly above it, W(key > x), is below a target. Top-k weighs every token 1 with target k (x: the
// k-th largest z); top-p weighs each token of non-zero mass by its 2^-40 fixed-point mass with target p * (total).
// Every sum is an exact integer, so the threshold does not depend on the summation order. Three steps:
//   1. coarse: weights binned linearly by z_max - z (kCoarseBins over a range below which x cannot lie, the rest in
//      the last bin, left uncounted: its weight is the total less the others'), scanned in descending z: x lies in
//      the last non-empty bin whose weight above is below the target. Top-k's range is every token of non-zero mass;
//      top-p's is narrower where p allows (tail_range): the far tail then costs no histogram update;
//   2. range: that bin's smallest and largest key; equal (a single value, ties included) -> x;
//   3. radix: 8-bit digits over the key bits where they differ, among that bin's tokens only.
// Real logits spread their tokens over many bins, so the threshold's bin holds a few of them and steps 2-3 are cheap.
// Top-k stays exact when z_max is not finite (a +inf logit, or none above -inf: every token then falls in the last
// bin and steps 2-3 rank the whole row); top-p needs a finite z_max (the sampler is greedy otherwise).
#include <cooperative_groups.h>
#include <cub/block/block_scan.cuh>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/sampling/cluster_row.cuh"
#include "kernels/cuda/sampling/fixed_point_keys.cuh"

namespace fathom::kernels::cuda {

constexpr int kRadixBits = 8;
constexpr int kRadixBins = 1 << kRadixBits;
constexpr int kCoarseBins = 2048;
constexpr int kBinsPerGroup = 32;  // the scan reads group sums over the cluster, then one group's bins
constexpr int kCoarseGroups = kCoarseBins / kBinsPerGroup;
constexpr float kCoarseRange = 28.0f;  // exp(-28) * 2^40 < 1: every token of non-zero fixed-point mass is in range
constexpr float kCoarseBinsPerUnit = kCoarseBins / kCoarseRange;  // top-k's bins
static_assert(kCoarseGroups <= kRowThreads && kRadixBins <= kRowThreads);

struct Scaling {
  float inv_temperature;  // 1 / temperature, > 0 (so -inf logits stay -inf)
  float z_max;            // max logit * inv_temperature
  // z of a logit, rounded on its own: never contracted into a later add, so every pass sees the same z.
  __device__ __forceinline__ float scaled(float logit) const { return __fmul_rn(logit, inv_temperature); }
};

struct ThresholdShared {
  typename cub::BlockScan<unsigned long long, kRowThreads>::TempStorage scan;
  alignas(16) unsigned long long coarse[kCoarseBins];  // per-bin weights (u32 counts in top-k); read by other blocks
  unsigned long long radix[2][kRadixBins];             // per-digit weights, double-buffered; read by other blocks
  uint32_t warp_range[2][kRowThreads / 32];            // per-warp smallest / largest key of the threshold's bin
  uint32_t block_range[2];                             // this block's; read by the other blocks
  uint32_t cluster_range[2];                           // the cluster's
  unsigned long long warp_mass[kRowThreads / 32];      // top-p: per-warp eligible mass
  unsigned long long block_mass;                       // this block's; read by the other blocks
  unsigned long long group_weight[kCoarseGroups];      // per group of bins; read by the other blocks
  unsigned long long total;                            // the cluster's total weight
  int selected;                                        // the chosen group or digit (as the thread that found it)
  unsigned long long selected_above;                   // weight above the chosen group or digit
  int selected_bin;                                    // the threshold's coarse bin
  unsigned long long selected_bin_above;               // weight above it
};

// Bin of z in descending z: z1 > z2 -> bin(z1) <= bin(z2) (every step rounds monotonically, none is contracted into
// an FMA, so every pass bins a token alike); -inf -> the last bin.
__device__ __forceinline__ int coarse_bin(float z, float z_max, float bins_per_unit) {
  const float units = __fmul_rn(__fsub_rn(z_max, z), bins_per_unit);
  return static_cast<int>(fminf(units, static_cast<float>(kCoarseBins - 1)));
}

// Top-p's coarse range R: the tokens of the last bin (at least R * 2047 / 2048 below the maximum) weigh at most
// vocab * e^-R * e^(R / 2048) = ~0.507 (1 - p) times the maximum's mass, itself at most the total, so each of them has
// more than p of the total above it and none is the threshold. At R = 28 (p near 1) their masses truncate to 0.
__device__ __forceinline__ float tail_range(int64_t vocab, float top_p) {
  const float range = logf(2.0f * static_cast<float>(vocab) / fmaxf(1.0f - top_p, 1e-30f));
  return fminf(fmaxf(range, 1.0f), kCoarseRange);  // >= 1: a p outside [0, 1) (rejected upstream) stays harmless
}

// Top-k counts tokens (u32: a block's count fits, and 32-bit shared atomics are cheap under contention); top-p
// weighs masses (u64).
template <bool kMass>
using ThresholdWeight = std::conditional_t<kMass, unsigned long long, unsigned>;

// Adds `value` to hist[digit] (digit < 0: nothing; its value must then be 0). All 32 lanes must call. A warp whose
// lanes all hold one digit adds once, summed by the warp reduction unit; otherwise every lane adds its own (lanes of
// different digits would serialize a match and reductions over each group, dearer than the atomics themselves).
// Masses must be < 2^41 (summed as two 20/21-bit halves); counts must be 1.
template <typename Weight>
__device__ __forceinline__ void warp_add(Weight* hist, int digit, Weight value) {
  const unsigned active = __ballot_sync(0xffffffffu, digit >= 0);
  if (active == 0) return;  // common: nothing of this warp is in play
  const int leader = __ffs(active) - 1;
  const int leader_digit = __shfl_sync(0xffffffffu, digit, leader);
  if (__all_sync(0xffffffffu, digit < 0 || digit == leader_digit)) {
    Weight sum;
    if constexpr (sizeof(Weight) == 8) {
      const unsigned low = __reduce_add_sync(0xffffffffu, static_cast<unsigned>(value & 0xfffffu));
      const unsigned high = __reduce_add_sync(0xffffffffu, static_cast<unsigned>(value >> 20));
      sum = (static_cast<unsigned long long>(high) << 20) + low;
    } else {
      sum = static_cast<unsigned>(__popc(active));
    }
    if ((threadIdx.x % 32) == leader) atomicAdd(&hist[leader_digit], sum);
  } else if (digit >= 0) {
    atomicAdd(&hist[digit], value);
  }
}

// One element's weight in the selection: top-k counts every token of the vocabulary; top-p weighs the tokens at
// or above min_key by their mass (0: not eligible).
template <bool kMass>
__device__ __forceinline__ ThresholdWeight<kMass> element_weight(const RowSlice& s, int j, float z, uint32_t key,
                                                                 const Scaling& scaling, uint32_t min_key) {
  if constexpr (kMass) {
    return key >= min_key ? fixed_mass(expf(__fsub_rn(z, scaling.z_max))) : 0ull;
  } else {
    return s.valid(j) ? 1u : 0u;
  }
}

// The smallest eligible key x with W(key > x) < target (target_k for counts; max(1, p * total) for masses).
// Every block of the cluster calls it with the same arguments and gets the same key; contains cluster.sync()s, and
// the other blocks read this block's `sh` afterwards until the caller's next cluster.sync().
template <bool kMass>
__device__ uint32_t select_threshold_key(const RowSlice& s, const Scaling& scaling, uint32_t min_key, int target_k,
                                         float top_p, ThresholdShared& sh, cooperative_groups::cluster_group& cluster,
                                         int& radix_pass) {
  using Weight = ThresholdWeight<kMass>;
  using BlockScan = cub::BlockScan<unsigned long long, kRowThreads>;
  // 1. Coarse bins. The last bin (tokens far below the maximum, usually most of them) is left uncounted: its weight
  //    is the total (the vocabulary, or the masses summed apart) less the others'.
  const float bins_per_unit = kMass ? kCoarseBins / tail_range(s.vocab, top_p) : kCoarseBinsPerUnit;
  Weight* coarse = reinterpret_cast<Weight*>(sh.coarse);
  for (int bin = threadIdx.x; bin < kCoarseBins; bin += kRowThreads) coarse[bin] = 0;
  __syncthreads();
  unsigned long long mass_total = 0;  // this thread's eligible mass (top-p)
#pragma unroll 2
  for (int j = 0; j < s.per_thread; ++j) {
    const float z = scaling.scaled(s.get(j));
    const int bin = coarse_bin(z, scaling.z_max, bins_per_unit);
    int digit = -1;
    Weight weight = 0;
    if constexpr (kMass) {
      const Weight mass = element_weight<kMass>(s, j, z, order_key(z), scaling, min_key);
      mass_total += mass;
      if (mass > 0 && bin < kCoarseBins - 1) {
        digit = bin;
        weight = mass;
      }
    } else if (bin < kCoarseBins - 1) {
      weight = element_weight<kMass>(s, j, z, order_key(z), scaling, min_key);
      if (weight > 0) digit = bin;
    }
    warp_add(coarse, digit, weight);
  }
  if constexpr (kMass) {
    for (int offset = 16; offset > 0; offset >>= 1) mass_total += __shfl_xor_sync(0xffffffffu, mass_total, offset);
    if (threadIdx.x % 32 == 0) sh.warp_mass[threadIdx.x / 32] = mass_total;
  }
  __syncthreads();
  // This block's groups of kBinsPerGroup bins, so the cluster reads a few sums, then one group's bins.
  for (int group = threadIdx.x / 32; group < kCoarseGroups; group += kRowThreads / 32) {  // lane i: bin i
    unsigned long long sum = coarse[group * kBinsPerGroup + threadIdx.x % 32];
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (threadIdx.x % 32 == 0) sh.group_weight[group] = sum;
  }
  if (kMass && threadIdx.x == 0) {
    unsigned long long block_mass = 0;
    for (int w = 0; w < kRowThreads / 32; ++w) block_mass += sh.warp_mass[w];
    sh.block_mass = block_mass;
  }
  cluster.sync();
  // Thread t < kCoarseGroups: group t's weight over the cluster; thread 0 also the total.
  unsigned long long group_weight = 0;
  if (threadIdx.x < kCoarseGroups) {
    for (int rank = 0; rank < kClusterBlocks; ++rank) {
      group_weight += cluster.map_shared_rank(sh.group_weight, rank)[threadIdx.x];
    }
  }
  if (threadIdx.x == 0) {
    unsigned long long total = static_cast<unsigned long long>(s.vocab);
    if constexpr (kMass) {
      total = 0;
      for (int rank = 0; rank < kClusterBlocks; ++rank) total += *cluster.map_shared_rank(&sh.block_mass, rank);
    }
    sh.total = total;
  }
  unsigned long long group_above, listed_total;  // weight of the groups before this thread's; of every listed bin
  BlockScan(sh.scan).ExclusiveSum(group_weight, group_above, listed_total);
  __syncthreads();  // sh.total
  const unsigned long long total = sh.total;
  unsigned long long target;
  if constexpr (kMass) {
    const double wanted = static_cast<double>(top_p) * static_cast<double>(total);
    target = wanted < 1.0 ? 1ull : static_cast<unsigned long long>(wanted);
  } else {
    target = static_cast<unsigned long long>(target_k);
  }
  // The last bin is left unlisted: its weight is the total less the listed ones.
  if (threadIdx.x == kCoarseGroups - 1) group_weight += total - listed_total;
  // The last non-empty group (then bin) with weight above < target is the one whose span covers the target (the
  // total reaches the target: k < vocab; p * total < total and the maximum's mass >= 1): exactly one thread writes.
  if (threadIdx.x < kCoarseGroups && group_above < target && target <= group_above + group_weight) {
    sh.selected = static_cast<int>(threadIdx.x);
    sh.selected_above = group_above;
  }
  __syncthreads();
  if (threadIdx.x < 32) {  // warp 0: the group's bins, lane i its bin i
    static_assert(kBinsPerGroup == 32);
    const int bin = sh.selected * kBinsPerGroup + static_cast<int>(threadIdx.x);
    unsigned long long value = 0;
    for (int rank = 0; rank < kClusterBlocks; ++rank) value += cluster.map_shared_rank(coarse, rank)[bin];
    if (bin == kCoarseBins - 1) value = total - listed_total;
    unsigned long long inclusive = value;
    for (int offset = 1; offset < 32; offset <<= 1) {
      const unsigned long long before = __shfl_up_sync(0xffffffffu, inclusive, offset);
      if (static_cast<int>(threadIdx.x) >= offset) inclusive += before;
    }
    const unsigned long long running = sh.selected_above + inclusive - value;
    const bool covers = running < target && target <= running + value;
    const unsigned chosen = __ballot_sync(0xffffffffu, covers);
    if (covers && static_cast<int>(threadIdx.x) == __ffs(chosen) - 1) {
      sh.selected_bin = bin;
      sh.selected_bin_above = running;
    }
  }
  __syncthreads();
  const int threshold_bin = sh.selected_bin;
  unsigned long long above = sh.selected_bin_above;

  // 2. The bin's key range.
  uint32_t lowest = UINT32_MAX, highest = 0;
  for (int j = 0; j < s.per_thread; ++j) {
    const float z = scaling.scaled(s.get(j));
    if (coarse_bin(z, scaling.z_max, bins_per_unit) != threshold_bin) continue;
    const uint32_t key = order_key(z);
    if (element_weight<kMass>(s, j, z, key, scaling, min_key) == 0) continue;
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
  if (threadIdx.x == 0) {  // one thread reads the other blocks' ranges (remote reads are dear); the block shares it
    lowest = UINT32_MAX;
    highest = 0;
    for (int rank = 0; rank < kClusterBlocks; ++rank) {
      const uint32_t* remote = cluster.map_shared_rank(sh.block_range, rank);
      lowest = min(lowest, remote[0]);
      highest = max(highest, remote[1]);
    }
    sh.cluster_range[0] = lowest;
    sh.cluster_range[1] = highest;
  }
  __syncthreads();
  lowest = sh.cluster_range[0];
  highest = sh.cluster_range[1];
  // Equal: the threshold. (lowest > highest, an empty bin, cannot happen: every pass bins a token alike; were it to,
  // the largest key keeps nothing and the caller falls back to greedy.)
  if (lowest >= highest) return lowest;

  // 3. Radix digits over the differing low bits, most significant first.
  int bits = 32 - __clz(lowest ^ highest);
  uint32_t prefix_mask = bits == 32 ? 0u : ~((1u << bits) - 1u);
  uint32_t prefix = lowest & prefix_mask;
  while (bits > 0) {
    const int width = min(kRadixBits, bits), shift = bits - width;
    Weight* hist = reinterpret_cast<Weight*>(sh.radix[radix_pass++ & 1]);
    if (threadIdx.x < kRadixBins) hist[threadIdx.x] = 0;
    if (threadIdx.x == 0) sh.selected = -1;
    __syncthreads();
#pragma unroll 2
    for (int j = 0; j < s.per_thread; ++j) {
      const float z = scaling.scaled(s.get(j));
      const uint32_t key = order_key(z);
      int digit = -1;
      Weight weight = 0;
      if (coarse_bin(z, scaling.z_max, bins_per_unit) == threshold_bin && (key & prefix_mask) == prefix) {
        weight = element_weight<kMass>(s, j, z, key, scaling, min_key);
        if (weight > 0) digit = static_cast<int>((key >> shift) & ((1u << width) - 1u));
      }
      warp_add(hist, digit, weight);
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
    // x's digit: the lowest non-empty one whose weight above is still below the target.
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
