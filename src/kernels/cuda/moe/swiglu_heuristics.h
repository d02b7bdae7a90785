#pragma once
// Tuning choice of the fused SwiGLU + e4m3 kernel, kept apart from it: how many pairs of 128-column groups of a row
// one warp walks (its loads run a pair ahead of its arithmetic, so longer walks overlap more; shorter ones give more
// warps).
#include <algorithm>
#include <cstdint>

namespace fathom::kernels::cuda {

// Rows of whole 16-byte vectors (I % 8 == 0, aligned): each warp walks pairs_per_warp pairs of 128-column groups of
// a row, the next pair's loads in flight while one computes.
struct SwigluQuantTuning {
  int pairs_per_warp = 0;  // 0: swiglu_pairs_per_warp
};

// Longest walk: H100 (bench_small_ops moe, I = 2048), 4096 tokens: 1 pair 197 us, 2 171, 4 163, 8 166; 8192: 394,
// 338, 320, 321.
inline constexpr int kSwigluMaxPairsPerWarp = 4;
// Warps wanted per SM before walks get longer (4 waves of the kernel's 32 resident warps): 1024 tokens (8192 rows of
// 8 pairs) walk 2 pairs (44.4 us; 1: 47.9, 4: 45.4), 256 tokens 1 (12.0; 2: 12.0, 4: 12.4).
inline constexpr int64_t kSwigluWarpsPerSm = 128;

// The longest walk (1, 2 or 4 pairs, at most the row's pairs) that still gives every SM kSwigluWarpsPerSm warps;
// 1 when even that does not.
inline int swiglu_pairs_per_warp(int64_t rows, int64_t pairs_per_row, int num_sms) {
  const int64_t wanted_warps = static_cast<int64_t>(std::max(num_sms, 1)) * kSwigluWarpsPerSm;
  int pairs = 1;
  while (pairs * 2 <= std::min<int64_t>(kSwigluMaxPairsPerWarp, pairs_per_row) &&
         rows * ((pairs_per_row + pairs * 2 - 1) / (pairs * 2)) >= wanted_warps) {
    pairs *= 2;
  }
  return pairs;
}

}  // namespace fathom::kernels::cuda
