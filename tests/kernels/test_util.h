#pragma once
// Random inputs and error metrics shared by the kernel tests.
#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/weight_matrix.h"

namespace fathom::testing {

inline std::vector<float> random_vector(std::mt19937& rng, size_t count, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> values(count);
  for (float& v : values) v = dist(rng);
  return values;
}

// ‖a − b‖ / ‖b‖ in double.
inline double relative_l2(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

inline double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  return relative_l2(a, std::vector<double>(b.begin(), b.end()));
}

// Random FP8 weight [rows, cols] with per-block scales (partial edge blocks when not multiples of 128).
inline kernels::WeightMatrix random_fp8_weight(std::mt19937& rng, int64_t rows, int64_t cols) {
  kernels::WeightMatrix w;
  w.name = "test";
  w.rows = rows;
  w.cols = cols;
  w.weight = Tensor::allocate(DType::F8_E4M3, {rows, cols});
  std::normal_distribution<float> dist(0.0f, 100.0f);
  for (int64_t i = 0; i < rows * cols; ++i) w.weight.data<uint8_t>()[i] = float_to_fp8_e4m3(dist(rng));
  w.scale_inv = Tensor::allocate(DType::F32, {(rows + 127) / 128, (cols + 127) / 128});
  std::uniform_real_distribution<float> scale(0.5e-3f, 2e-3f);
  for (int64_t i = 0; i < w.scale_inv.numel(); ++i) w.scale_inv.data<float>()[i] = scale(rng);
  return w;
}

// Double-precision dequantized element.
inline double dequantized(const kernels::WeightMatrix& w, int64_t r, int64_t c) {
  return static_cast<double>(fp8_e4m3_to_float(w.weight.data<uint8_t>()[r * w.cols + c])) *
         w.scale_inv.data<float>()[(r / 128) * w.scale_inv.dim(1) + c / 128];
}

}  // namespace fathom::testing
