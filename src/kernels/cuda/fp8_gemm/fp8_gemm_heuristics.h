#pragma once
// Launch-shape heuristics for the FP8 GEMMs, kept apart from the kernels.
#include <algorithm>
#include <cstdint>

namespace fathom::kernels::cuda {

// Warps to keep resident per SM so enough weight bytes are in flight to saturate HBM (each warp streams
// 16 rows x 128 bytes per K block with one block prefetched).
constexpr int64_t kSmallMTargetWarpsPerSm = 16;

// Split-K for the small-M kernel: enough (row tile, K range) work items to fill the machine, at least 2 K blocks
// per split so the prefetch has something to overlap. A function of the weight shape only (batch invariance).
inline int small_m_split_count(int64_t rows, int64_t cols, int num_sms) {
  const int64_t row_tiles = (rows + 15) / 16;
  const int64_t k_blocks = (cols + 127) / 128;
  const int64_t wanted = (static_cast<int64_t>(num_sms) * kSmallMTargetWarpsPerSm + row_tiles - 1) / row_tiles;
  const int64_t max_splits = std::max<int64_t>(1, k_blocks / 2);
  return static_cast<int>(std::clamp<int64_t>(wanted, 1, max_splits));
}

}  // namespace fathom::kernels::cuda
