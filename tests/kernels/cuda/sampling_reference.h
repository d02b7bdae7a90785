#pragma once
// CPU references shared by the sampling tests: NaN logits count as -inf, the argmax keeps the lowest index on ties.
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace fathom::kernels::cuda {

inline float clean(float x) { return std::isnan(x) ? -INFINITY : x; }

// [vocab] -> lowest index of the maximum (0 for a row of -inf / NaN only).
inline int64_t cpu_argmax(const float* row, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i) {
    if (clean(row[i]) > clean(row[best])) best = i;
  }
  return best;
}

// log_softmax(row)[token] in double.
inline double cpu_logprob(const float* row, int64_t vocab, int64_t token) {
  double max = -INFINITY, sum = 0;
  for (int64_t i = 0; i < vocab; ++i) max = std::max(max, double(clean(row[i])));
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(clean(row[i])) - max);
  return double(clean(row[token])) - max - std::log(sum);
}

}  // namespace fathom::kernels::cuda
