#pragma once
// Split-KV rule shared by the MLA decode kernel and its combine: how a sequence's 64-token tiles are cut into splits.
#include <cstdint>

namespace fathom::kernels::cuda::mla_detail {

inline constexpr int kDecodeTileTokens = 64;

// Tiles per split of a sequence of total_tiles tiles: the plan's fixed count (batch-invariant plans), else an even
// division among num_splits of at least min_tiles_per_split tiles; splits past the sequence's end are empty.
__host__ __device__ __forceinline__ int split_tiles(int total_tiles, int num_splits, int tiles_per_split,
                                                    int min_tiles_per_split) {
  if (tiles_per_split > 0) return tiles_per_split;
  const int even = (total_tiles + num_splits - 1) / num_splits;
  return even > min_tiles_per_split ? even : min_tiles_per_split;
}

}  // namespace fathom::kernels::cuda::mla_detail
