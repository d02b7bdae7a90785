#pragma once
// The fp32 split-K partial sums of a decode GEMM, handed to the kernel that consumes the GEMM's output instead of
// being summed by a reduce launch. The consumer sums them exactly as that reduce would (split_k_sum.cuh), so its
// input is bit-identical to the bf16 output the reduce would have stored.
#include <cstdint>

namespace fathom::kernels::cuda {

struct SplitKPartials {
  const float* data = nullptr;  // [splits, tokens, rows] fp32 (device); null: the GEMM wrote its bf16 output itself
  int splits = 0;
  int64_t split_stride = 0;  // elements between splits: tokens * rows of the GEMM
  constexpr bool empty() const { return data == nullptr; }  // constexpr: callable in device code (relaxed constexpr)
};

}  // namespace fathom::kernels::cuda
