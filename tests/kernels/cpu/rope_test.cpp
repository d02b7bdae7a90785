#include "kernels/cpu/rope.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "kernels/cpu/vector_math.h"
#include "test_util.h"

namespace fathom::kernels::cpu {
namespace {

RopeFrequencies frequencies(int64_t dim, bool interleaved, float attention_factor = 1.0f) {
  RopeFrequencies f;
  for (int64_t i = 0; i < dim / 2; ++i) f.inv_freq.push_back(std::pow(10000.0f, -2.0f * i / dim));
  f.interleaved = interleaved;
  f.attention_factor = attention_factor;
  return f;
}

TEST(Rope, PositionZeroIsIdentityAndNormIsKept) {
  std::mt19937 rng(1);
  for (bool interleaved : {true, false}) {
    RopeFrequencies f = frequencies(64, interleaved);
    std::vector<float> x = fathom::testing::random_vector(rng, 64), y = x;
    int32_t position = 0;
    apply_rope(y.data(), 1, 64, 1, &position, f);
    EXPECT_EQ(x, y);
    position = 1234;
    apply_rope(y.data(), 1, 64, 1, &position, f);
    EXPECT_NEAR(dot(x.data(), x.data(), 64), dot(y.data(), y.data(), 64), 1e-3);
    EXPECT_NE(x, y);
  }
}

TEST(Rope, DotProductDependsOnlyOnRelativePosition) {
  std::mt19937 rng(2);
  for (bool interleaved : {true, false}) {
    RopeFrequencies f = frequencies(32, interleaved);
    std::vector<float> q = fathom::testing::random_vector(rng, 32), k = fathom::testing::random_vector(rng, 32);
    auto rotated_dot = [&](int32_t pq, int32_t pk) {
      std::vector<float> a = q, b = k;
      apply_rope(a.data(), 1, 32, 1, &pq, f);
      apply_rope(b.data(), 1, 32, 1, &pk, f);
      return dot(a.data(), b.data(), 32);
    };
    EXPECT_NEAR(rotated_dot(10, 3), rotated_dot(107, 100), 1e-3);
    EXPECT_NEAR(rotated_dot(5, 5), dot(q.data(), k.data(), 32), 1e-3);
  }
}

TEST(Rope, InterleavedRotatesAdjacentPairs) {
  RopeFrequencies f = frequencies(4, true, 2.0f);
  std::vector<float> x = {1.0f, 0.0f, 0.0f, 1.0f};
  int32_t position = 1;
  apply_rope(x.data(), 1, 4, 1, &position, f);
  // pair 0 at angle 1 rad, pair 1 at angle 0.01 rad; both scaled by the attention factor 2.
  EXPECT_NEAR(x[0], 2 * std::cos(1.0), 1e-6);
  EXPECT_NEAR(x[1], 2 * std::sin(1.0), 1e-6);
  EXPECT_NEAR(x[2], -2 * std::sin(0.01), 1e-6);
  EXPECT_NEAR(x[3], 2 * std::cos(0.01), 1e-6);
}

TEST(Rope, StridedHeadsShareTheirTokenPosition) {
  RopeFrequencies f = frequencies(8, true);
  std::mt19937 rng(3);
  // [2 tokens, 3 heads, 10 dims], rope on dims [2, 10) of every head.
  std::vector<float> x = fathom::testing::random_vector(rng, 60), y = x;
  std::vector<int32_t> positions = {4, 9};
  apply_rope(x.data() + 2, 6, 10, 3, positions.data(), f);
  for (int t = 0; t < 2; ++t)
    for (int h = 0; h < 3; ++h) {
      float* v = y.data() + (t * 3 + h) * 10 + 2;
      apply_rope(v, 1, 8, 1, &positions[t], f);
    }
  EXPECT_EQ(x, y);
}

}  // namespace
}  // namespace fathom::kernels::cpu
