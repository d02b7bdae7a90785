#pragma once
// Block-wide (max, argmax, sum exp(x - max)) of one row, in a fixed reduction order (deterministic).
#include <cmath>
#include <cstdint>

namespace fathom::kernels::cuda {

struct RowSoftmaxStats {
  float max;        // -inf for an empty / all -inf row
  float sum_exp;    // sum of exp(x - max)
  int64_t argmax;   // lowest index of the maximum; INT64_MAX when the thread saw nothing
};

__device__ __forceinline__ float logit_or_minus_inf(float x) { return isnan(x) ? -INFINITY : x; }

// Adds one value seen in ascending index order by this thread (strict '>' keeps the lowest index of the maximum).
__device__ __forceinline__ void accumulate(RowSoftmaxStats& s, float x, int64_t index) {
  if (s.argmax == INT64_MAX) s.argmax = index;
  if (x > s.max) {
    s.sum_exp = (s.max == -INFINITY ? 0.0f : s.sum_exp * expf(s.max - x)) + 1.0f;
    s.max = x;
    s.argmax = index;
  } else if (x != -INFINITY) {
    s.sum_exp += expf(x - s.max);
  }
}

__device__ __forceinline__ RowSoftmaxStats merge(const RowSoftmaxStats& a, const RowSoftmaxStats& b) {
  RowSoftmaxStats r;
  r.max = fmaxf(a.max, b.max);
  const float sa = a.max == -INFINITY ? 0.0f : a.sum_exp * expf(a.max - r.max);
  const float sb = b.max == -INFINITY ? 0.0f : b.sum_exp * expf(b.max - r.max);
  r.sum_exp = sa + sb;
  const bool take_a = a.max > b.max || (a.max == b.max && a.argmax < b.argmax);
  r.argmax = take_a ? a.argmax : b.argmax;
  return r;
}

__device__ __forceinline__ RowSoftmaxStats shuffle_xor(const RowSoftmaxStats& s, int offset) {
  RowSoftmaxStats r;
  r.max = __shfl_xor_sync(0xffffffffu, s.max, offset);
  r.sum_exp = __shfl_xor_sync(0xffffffffu, s.sum_exp, offset);
  r.argmax = __shfl_xor_sync(0xffffffffu, s.argmax, offset);
  return r;
}

// Every thread of the block must call; returns the row's stats to all threads. partials: shared [32].
__device__ __forceinline__ RowSoftmaxStats block_row_stats(RowSoftmaxStats s, RowSoftmaxStats* partials) {
  for (int offset = 16; offset > 0; offset >>= 1) s = merge(s, shuffle_xor(s, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) partials[warp] = s;
  __syncthreads();
  if (warp == 0) {
    RowSoftmaxStats w = lane < warps ? partials[lane] : RowSoftmaxStats{-INFINITY, 0.0f, INT64_MAX};
    for (int offset = 16; offset > 0; offset >>= 1) w = merge(w, shuffle_xor(w, offset));
    if (lane == 0) partials[0] = w;
  }
  __syncthreads();
  const RowSoftmaxStats result = partials[0];
  __syncthreads();  // partials may be reused by the caller
  return result;
}

}  // namespace fathom::kernels::cuda
