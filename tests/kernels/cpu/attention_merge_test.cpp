// Merging attention over windows of keys: the softmax over all keys equals the windows' softmaxes merged by their
// log-sum-exps, in any split; a window a row does not see (-inf) leaves the row as it was.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/attention_merge.h"

namespace fathom::kernels::cpu {
namespace {

// Softmax-weighted values of keys [begin, end) for each row (log2-domain scores [rows, keys], values [keys, v]):
// out [rows, v] and the log-sum-exps [rows] (-inf and a zero row for an empty range).
void window_attention(const std::vector<float>& scores, const std::vector<float>& values, int64_t rows, int64_t keys,
                      int64_t v_dim, int64_t begin, int64_t end, std::vector<float>& out, std::vector<float>& lse) {
  out.assign(static_cast<size_t>(rows * v_dim), 0.0f);
  lse.assign(static_cast<size_t>(rows), -std::numeric_limits<float>::infinity());
  for (int64_t r = 0; r < rows && begin < end; ++r) {
    double top = -INFINITY, sum = 0.0;
    for (int64_t k = begin; k < end; ++k) top = std::max(top, static_cast<double>(scores[r * keys + k]));
    std::vector<double> acc(static_cast<size_t>(v_dim), 0.0);
    for (int64_t k = begin; k < end; ++k) {
      const double weight = std::exp2(scores[r * keys + k] - top);
      sum += weight;
      for (int64_t d = 0; d < v_dim; ++d) acc[d] += weight * values[k * v_dim + d];
    }
    for (int64_t d = 0; d < v_dim; ++d) out[r * v_dim + d] = static_cast<float>(acc[d] / sum);
    lse[r] = static_cast<float>(top + std::log2(sum));
  }
}

TEST(AttentionMerge, WindowsMergedEqualTheWholeSoftmax) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int64_t rows = 6, keys = 50, v_dim = 5;
  std::vector<float> scores(rows * keys), values(keys * v_dim);
  for (float& s : scores) s = normal(rng);
  for (float& x : values) x = normal(rng);
  std::vector<float> whole, whole_lse;
  window_attention(scores, values, rows, keys, v_dim, 0, keys, whole, whole_lse);
  for (const std::vector<int64_t>& cuts : std::vector<std::vector<int64_t>>{{0, 1, 50}, {0, 25, 50}, {0, 7, 8, 40, 50},
                                                                           {0, 0, 50, 50}}) {
    std::vector<float> acc, acc_lse, part, part_lse;
    window_attention(scores, values, rows, keys, v_dim, cuts[0], cuts[1], acc, acc_lse);
    for (size_t w = 1; w + 1 < cuts.size(); ++w) {
      window_attention(scores, values, rows, keys, v_dim, cuts[w], cuts[w + 1], part, part_lse);
      merge_attention_states(acc.data(), acc_lse.data(), part.data(), part_lse.data(), rows, 1, v_dim);
    }
    for (int64_t i = 0; i < rows * v_dim; ++i) EXPECT_NEAR(acc[i], whole[i], 1e-5f * (1.0f + std::fabs(whole[i])));
    for (int64_t r = 0; r < rows; ++r) EXPECT_NEAR(acc_lse[r], whole_lse[r], 1e-5f * (1.0f + std::fabs(whole_lse[r])));
  }
}

TEST(AttentionMerge, AnUnseenSideKeepsTheOtherExactly) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> acc = {0.1f, -3.7f, 0.0f, 0.0f}, acc_lse = {2.5f, -inf};  // 2 rows, 1 head, v 2
  const std::vector<float> part = {9.0f, 9.0f, 1.25f, -0.3f}, part_lse = {-inf, 4.0f};
  merge_attention_states(acc.data(), acc_lse.data(), part.data(), part_lse.data(), 2, 1, 2);
  EXPECT_EQ(acc, (std::vector<float>{0.1f, -3.7f, 1.25f, -0.3f}));
  EXPECT_EQ(acc_lse, (std::vector<float>{2.5f, 4.0f}));
  std::vector<float> empty = {0.0f, 0.0f}, empty_lse = {-inf};
  const std::vector<float> none = {0.0f, 0.0f}, none_lse = {-inf};
  merge_attention_states(empty.data(), empty_lse.data(), none.data(), none_lse.data(), 1, 1, 2);
  EXPECT_EQ(empty, (std::vector<float>{0.0f, 0.0f}));
  EXPECT_TRUE(std::isinf(empty_lse[0]) && empty_lse[0] < 0);
}

}  // namespace
}  // namespace fathom::kernels::cpu
