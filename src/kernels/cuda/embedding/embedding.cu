#include "kernels/cuda/embedding/embedding.h"

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/norm/bf16x8.cuh"
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kTargetBlocks = 264;

// grid: (T, splits); Unit = uint4 (8 bf16) when rows and pointers are 16-byte aligned, else one bf16.
template <typename Unit>
__global__ void __launch_bounds__(kThreads)
    embedding_kernel(const Unit* __restrict__ table,      // [vocab, units_per_row]
                     int64_t vocab, int64_t units_per_row, int64_t units_per_split,
                     const int32_t* __restrict__ token_ids, // [T]
                     Unit* __restrict__ out,               // [T, units_per_row]
                     int32_t* __restrict__ error_flag) {
  begin_dependent_kernel();  // launched programmatically (programmatic_launch.cuh)
  const int64_t token = blockIdx.x;
  int64_t id = token_ids[token];
  if (id < 0 || id >= vocab) {
    if (threadIdx.x == 0 && blockIdx.y == 0 && error_flag) atomicOr(error_flag, 1);
    id = id < 0 ? 0 : vocab - 1;
  }
  const Unit* src = table + id * units_per_row;
  Unit* dst = out + token * units_per_row;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * units_per_split;
  const int64_t end = min(units_per_row, begin + units_per_split);
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) dst[i] = src[i];
}

template <typename Unit>
void launch(const __nv_bfloat16* table, int64_t vocab, int64_t hidden, const int32_t* token_ids, int64_t num_tokens,
            __nv_bfloat16* out, int32_t* error_flag, cudaStream_t stream) {
  const int64_t units = hidden * static_cast<int64_t>(sizeof(__nv_bfloat16)) / static_cast<int64_t>(sizeof(Unit));
  const int64_t max_splits = std::max<int64_t>(1, (units + kThreads - 1) / kThreads);
  const int64_t splits = std::clamp<int64_t>((kTargetBlocks + num_tokens - 1) / num_tokens, 1, max_splits);
  const int64_t units_per_split = (units + splits - 1) / splits;
  const dim3 grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>(splits));
  launch_programmatic(embedding_kernel<Unit>, grid, dim3(kThreads), 0, stream, reinterpret_cast<const Unit*>(table), vocab,
                      units, units_per_split, token_ids, reinterpret_cast<Unit*>(out), error_flag);
}

}  // namespace

void embedding_gather_bf16(const __nv_bfloat16* table, int64_t vocab, int64_t hidden, const int32_t* token_ids,
                           int64_t num_tokens, __nv_bfloat16* out, int32_t* error_flag, cudaStream_t stream) {
  FATHOM_CHECK(vocab > 0 && hidden > 0, "embedding: vocab " << vocab << ", hidden " << hidden);
  FATHOM_CHECK(num_tokens >= 0 && num_tokens < (int64_t{1} << 31), "embedding: num_tokens " << num_tokens);
  if (num_tokens == 0) return;
  if (hidden % kBf16PerVector == 0 && is_aligned_16(table) && is_aligned_16(out)) {
    launch<uint4>(table, vocab, hidden, token_ids, num_tokens, out, error_flag, stream);
  } else {
    launch<__nv_bfloat16>(table, vocab, hidden, token_ids, num_tokens, out, error_flag, stream);
  }
}

}  // namespace fathom::kernels::cuda
