#include "kernels/cpu/linear.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "kernels/cpu/activation_quant.h"
#include "test_util.h"

namespace fathom::kernels::cpu {
namespace {

using fathom::testing::dequantized;
using fathom::testing::random_fp8_weight;
using fathom::testing::random_vector;
using fathom::testing::relative_l2;

struct Shape { int64_t tokens, rows, cols; };

class LinearSweep : public ::testing::TestWithParam<Shape> {};

TEST_P(LinearSweep, ExactMatchesDoubleReference) {
  const Shape s = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(s.tokens * 131 + s.rows * 7 + s.cols));
  WeightMatrix w = random_fp8_weight(rng, s.rows, s.cols);
  std::vector<float> x = random_vector(rng, static_cast<size_t>(s.tokens * s.cols));
  std::vector<float> y(static_cast<size_t>(s.tokens * s.rows), NAN);  // poisoned
  ThreadPool pool(3);
  linear(x.data(), s.tokens, w, NumericMode::kExact, y.data(), pool);
  std::vector<double> ref(y.size());
  for (int64_t t = 0; t < s.tokens; ++t)
    for (int64_t r = 0; r < s.rows; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < s.cols; ++c) acc += x[t * s.cols + c] * dequantized(w, r, c);
      ref[t * s.rows + r] = acc;
    }
  EXPECT_LT(relative_l2(y, ref), 2e-6);
}

TEST_P(LinearSweep, W8A8PromotesEachBlockByBothScales) {
  const Shape s = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(s.tokens * 17 + s.rows * 3 + s.cols));
  WeightMatrix w = random_fp8_weight(rng, s.rows, s.cols);
  std::vector<float> x = random_vector(rng, static_cast<size_t>(s.tokens * s.cols));
  std::vector<float> y(static_cast<size_t>(s.tokens * s.rows), NAN);
  ThreadPool pool(2);
  linear(x.data(), s.tokens, w, NumericMode::kW8A8, y.data(), pool);
  const int64_t blocks = (s.cols + 127) / 128;
  std::vector<float> xq(x.size()), xs(static_cast<size_t>(s.tokens * blocks));
  quantize_activations_fp8(x.data(), s.tokens, s.cols, xq.data(), xs.data());
  std::vector<double> ref(y.size()), exact(y.size());
  for (int64_t t = 0; t < s.tokens; ++t)
    for (int64_t r = 0; r < s.rows; ++r) {
      double acc = 0, acc_exact = 0;
      for (int64_t c = 0; c < s.cols; ++c) {
        acc += static_cast<double>(xq[t * s.cols + c]) * xs[t * blocks + c / 128] * dequantized(w, r, c);
        acc_exact += x[t * s.cols + c] * dequantized(w, r, c);
      }
      ref[t * s.rows + r] = acc;
      exact[t * s.rows + r] = acc_exact;
    }
  EXPECT_LT(relative_l2(y, ref), 2e-6);
  // Activation quantization costs a few percent at most.
  EXPECT_LT(relative_l2(y, exact), 5e-2);
  if (s.cols > 1) EXPECT_GT(relative_l2(y, exact), 1e-4);  // a lone value quantizes exactly to 448
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearSweep,
                         ::testing::Values(Shape{1, 1, 1}, Shape{1, 576, 256}, Shape{3, 200, 300}, Shape{5, 128, 128},
                                           Shape{2, 129, 257}, Shape{7, 64, 1000}));

TEST(ActivationQuant, ScaleIsAmaxOver448WithFloor) {
  std::vector<float> x = {0.0f, 0.0f, 0.0f};
  std::vector<float> q(3), s(1);
  quantize_activations_fp8(x.data(), 1, 3, q.data(), s.data());
  EXPECT_FLOAT_EQ(s[0], 1e-4f / 448.0f);
  x = {-896.0f, 1.0f, 3.0f};
  quantize_activations_fp8(x.data(), 1, 3, q.data(), s.data());
  EXPECT_FLOAT_EQ(s[0], 2.0f);
  EXPECT_EQ(q[0], -448.0f);
  EXPECT_EQ(q[1], 0.5f);
  EXPECT_EQ(q[2], 1.5f);
}

TEST(Linear, Bf16WeightsIgnoreTheMode) {
  std::mt19937 rng(5);
  WeightMatrix w;
  w.name = "bf16";
  w.rows = 33;
  w.cols = 70;
  w.weight = Tensor::allocate(DType::BF16, {33, 70});
  std::vector<float> wf = random_vector(rng, 33 * 70);
  for (size_t i = 0; i < wf.size(); ++i) w.weight.data<uint16_t>()[i] = float_to_bf16(wf[i]);
  std::vector<float> x = random_vector(rng, 2 * 70);
  std::vector<float> a(66), b(66);
  ThreadPool pool(2);
  linear(x.data(), 2, w, NumericMode::kExact, a.data(), pool);
  linear(x.data(), 2, w, NumericMode::kW8A8, b.data(), pool);
  EXPECT_EQ(a, b);
  double acc = 0;
  for (int c = 0; c < 70; ++c) acc += x[c] * bf16_to_float(w.weight.data<uint16_t>()[5 * 70 + c]);
  EXPECT_NEAR(a[5], acc, 1e-4);
}

TEST(Linear, RejectsMismatchedScales) {
  std::mt19937 rng(9);
  WeightMatrix w = random_fp8_weight(rng, 10, 10);
  w.scale_inv = Tensor::allocate(DType::F32, {2, 1});
  std::vector<float> x(10), y(10);
  ThreadPool pool(1);
  EXPECT_THROW(linear(x.data(), 1, w, NumericMode::kExact, y.data(), pool), Error);
}

}  // namespace
}  // namespace fathom::kernels::cpu
