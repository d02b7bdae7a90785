#include "kernels/cpu/rms_norm.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "test_util.h"

namespace fathom::kernels::cpu {
namespace {

TEST(RmsNorm, MatchesDoubleReferenceForEachWeightDtype) {
  std::mt19937 rng(4);
  const int64_t rows = 3, dim = 300;
  std::vector<float> x = fathom::testing::random_vector(rng, rows * dim, 3.0f);
  std::vector<float> gamma = fathom::testing::random_vector(rng, dim);
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    Tensor weight = Tensor::allocate(dtype, {dim});
    for (int64_t i = 0; i < dim; ++i) {
      if (dtype == DType::F32) weight.data<float>()[i] = gamma[i];
      if (dtype == DType::BF16) weight.data<uint16_t>()[i] = float_to_bf16(gamma[i]);
      if (dtype == DType::F16) weight.data<uint16_t>()[i] = float_to_f16(gamma[i]);
    }
    std::vector<float> g(static_cast<size_t>(dim));
    to_float(weight, g.data());
    std::vector<float> y(x.size(), NAN);
    rms_norm(x.data(), rows, dim, weight, 1e-6f, y.data());
    std::vector<double> ref(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
      const double inv = 1.0 / std::sqrt(ss / dim + 1e-6);
      for (int64_t i = 0; i < dim; ++i) ref[r * dim + i] = g[i] * x[r * dim + i] * inv;
    }
    EXPECT_LT(fathom::testing::relative_l2(y, ref), 1e-6) << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace fathom::kernels::cpu
