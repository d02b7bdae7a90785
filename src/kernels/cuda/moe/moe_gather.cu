#include "kernels/cuda/moe/moe_gather.h"

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kUnroll = 4;
constexpr int kMaxTopK = 64;
constexpr int kTargetBlocks = 264;  // ~2 per SM on H100/H200: small batches split rows across blocks

// grid: (T, splits). Block (t, s) copies units [s * units_per_split, ...) of row t to its k destinations.
template <typename Unit>
__global__ void __launch_bounds__(kThreads)
    gather_rows_kernel(const Unit* __restrict__ src,              // [T, units_per_row]
                       int32_t top_k, int64_t units_per_row, int64_t units_per_split,
                       const int32_t* __restrict__ token_slot_row, // [T * k]
                       Unit* __restrict__ dst) {                  // [max_rows, units_per_row]
  begin_dependent_kernel();  // launched programmatically (programmatic_launch.cuh)
  __shared__ int rows[kMaxTopK];
  const int64_t token = blockIdx.x;
  if (threadIdx.x < top_k) rows[threadIdx.x] = token_slot_row[token * top_k + threadIdx.x];
  __syncthreads();
  const Unit* src_row = src + token * units_per_row;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * units_per_split;
  const int64_t end = min(units_per_row, begin + units_per_split);
  for (int64_t base = begin + threadIdx.x; base < end; base += kThreads * kUnroll) {
    Unit values[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * kThreads;
      if (i < end) values[u] = src_row[i];
    }
    for (int s = 0; s < top_k; ++s) {
      const int row = rows[s];
      if (row < 0) continue;
      Unit* dst_row = dst + static_cast<int64_t>(row) * units_per_row;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = base + u * kThreads;
        if (i < end) dst_row[i] = values[u];
      }
    }
  }
}

template <typename Unit>
void launch_gather(const void* src, int64_t num_tokens, int32_t top_k, int64_t row_bytes, const int32_t* token_slot_row,
                   void* dst, cudaStream_t stream) {
  const int64_t units = row_bytes / static_cast<int64_t>(sizeof(Unit));
  // At least one unit per thread and block; more splits for small batches so that enough blocks run.
  const int64_t max_splits = std::max<int64_t>(1, (units + kThreads - 1) / kThreads);
  const int64_t min_splits = std::max<int64_t>(1, (units + kThreads * kUnroll * 4 - 1) / (kThreads * kUnroll * 4));
  const int64_t wanted = (kTargetBlocks + num_tokens - 1) / num_tokens;
  const int64_t splits = std::clamp<int64_t>(wanted, min_splits, max_splits);
  const int64_t units_per_split = (units + splits - 1) / splits;
  const dim3 grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>(splits));
  launch_programmatic(gather_rows_kernel<Unit>, grid, dim3(kThreads), 0, stream, static_cast<const Unit*>(src), top_k,
                      units, units_per_split, token_slot_row, static_cast<Unit*>(dst));
}

}  // namespace

void moe_gather_rows(const void* src, int64_t num_tokens, int32_t top_k, int64_t row_bytes,
                     const int32_t* token_slot_row, void* dst, cudaStream_t stream) {
  FATHOM_CHECK(num_tokens >= 0 && num_tokens < (int64_t{1} << 31), "moe gather: num_tokens " << num_tokens);
  FATHOM_CHECK(top_k >= 1 && top_k <= kMaxTopK, "moe gather: top_k " << top_k << " outside [1, " << kMaxTopK << "]");
  FATHOM_CHECK(row_bytes > 0, "moe gather: row_bytes " << row_bytes);
  if (num_tokens == 0) return;
  const uintptr_t alignment_bits = reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) |
                                   static_cast<uintptr_t>(row_bytes);
  if ((alignment_bits & 15u) == 0) {
    launch_gather<uint4>(src, num_tokens, top_k, row_bytes, token_slot_row, dst, stream);
  } else if ((alignment_bits & 7u) == 0) {
    launch_gather<uint2>(src, num_tokens, top_k, row_bytes, token_slot_row, dst, stream);
  } else if ((alignment_bits & 3u) == 0) {
    launch_gather<uint32_t>(src, num_tokens, top_k, row_bytes, token_slot_row, dst, stream);
  } else if ((alignment_bits & 1u) == 0) {
    launch_gather<uint16_t>(src, num_tokens, top_k, row_bytes, token_slot_row, dst, stream);
  } else {
    launch_gather<uint8_t>(src, num_tokens, top_k, row_bytes, token_slot_row, dst, stream);
  }
}

}  // namespace fathom::kernels::cuda
