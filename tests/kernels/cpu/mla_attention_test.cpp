#include "kernels/cpu/mla_attention.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "core/error.h"
#include "test_util.h"

namespace fathom::kernels::cpu {
namespace {

using fathom::testing::random_vector;
using fathom::testing::relative_l2;

struct AttentionInputs {
  MlaShape shape;
  int64_t num_keys, num_queries;
  std::vector<float> q, rows, kv_b, kv;  // q [nq,H,nope+rope], rows [keys, lora+rope], kv_b [H*(nope+v), lora], kv [keys, H*(nope+v)]
  std::vector<int32_t> positions;
  std::vector<const float*> row_ptrs;
};

AttentionInputs make_setup(int64_t heads, int64_t nope, int64_t rope, int64_t v, int64_t lora, int64_t keys, int64_t queries,
                 uint32_t seed) {
  AttentionInputs s;
  s.shape = {heads, nope, rope, v, lora, 1.0f / std::sqrt(static_cast<float>(nope + rope))};
  s.num_keys = keys;
  s.num_queries = queries;
  std::mt19937 rng(seed);
  s.q = random_vector(rng, static_cast<size_t>(queries * heads * (nope + rope)));
  s.rows = random_vector(rng, static_cast<size_t>(keys * (lora + rope)));
  s.kv_b = random_vector(rng, static_cast<size_t>(heads * (nope + v) * lora), 0.2f);
  s.kv.assign(static_cast<size_t>(keys * heads * (nope + v)), 0.0f);
  for (int64_t k = 0; k < keys; ++k)
    for (int64_t r = 0; r < heads * (nope + v); ++r) {
      double acc = 0;
      for (int64_t c = 0; c < lora; ++c) acc += double(s.kv_b[r * lora + c]) * s.rows[k * (lora + rope) + c];
      s.kv[k * heads * (nope + v) + r] = static_cast<float>(acc);
    }
  for (int64_t i = 0; i < queries; ++i) s.positions.push_back(static_cast<int32_t>(keys - queries + i));
  for (int64_t k = 0; k < keys; ++k) s.row_ptrs.push_back(s.rows.data() + k * (lora + rope));
  return s;
}

std::vector<double> reference(const AttentionInputs& s) {
  const MlaShape& m = s.shape;
  std::vector<double> out(static_cast<size_t>(s.num_queries * m.num_heads * m.v_dim), 0.0);
  for (int64_t t = 0; t < s.num_queries; ++t)
    for (int64_t h = 0; h < m.num_heads; ++h) {
      const float* q = s.q.data() + (t * m.num_heads + h) * m.qk_dim();
      const int64_t count = s.positions[t] + 1;
      std::vector<double> p(static_cast<size_t>(count));
      double max_score = -1e300, sum = 0;
      for (int64_t k = 0; k < count; ++k) {
        const float* kvh = s.kv.data() + (k * m.num_heads + h) * (m.qk_nope_dim + m.v_dim);
        double score = 0;
        for (int64_t d = 0; d < m.qk_nope_dim; ++d) score += double(q[d]) * kvh[d];
        for (int64_t d = 0; d < m.qk_rope_dim; ++d) score += double(q[m.qk_nope_dim + d]) * s.row_ptrs[k][m.kv_lora_rank + d];
        p[k] = score * m.softmax_scale;
        max_score = std::max(max_score, p[k]);
      }
      for (double& x : p) sum += (x = std::exp(x - max_score));
      for (int64_t k = 0; k < count; ++k) {
        const float* vh = s.kv.data() + (k * m.num_heads + h) * (m.qk_nope_dim + m.v_dim) + m.qk_nope_dim;
        for (int64_t d = 0; d < m.v_dim; ++d) out[(t * m.num_heads + h) * m.v_dim + d] += p[k] / sum * vh[d];
      }
    }
  return out;
}

struct Dims { int64_t heads, nope, rope, v, lora, keys, queries; };
class MlaSweep : public ::testing::TestWithParam<Dims> {};

TEST_P(MlaSweep, ExpandedMatchesReferenceAndAbsorbedMatchesExpanded) {
  const Dims d = GetParam();
  AttentionInputs s = make_setup(d.heads, d.nope, d.rope, d.v, d.lora, d.keys, d.queries, static_cast<uint32_t>(d.keys * 7 + d.queries));
  ThreadPool pool(3);
  std::vector<float> expanded(static_cast<size_t>(d.queries * d.heads * d.v), NAN);
  mla_attention_expanded(s.q.data(), d.queries, s.positions.data(), s.kv.data(), s.row_ptrs.data(), d.keys, s.shape,
                         expanded.data(), pool);
  EXPECT_LT(relative_l2(expanded, reference(s)), 1e-5);

  std::vector<float> q_latent(static_cast<size_t>(d.queries * d.heads * d.lora), NAN);
  std::vector<float> out_latent(q_latent.size(), NAN);
  std::vector<float> absorbed(expanded.size(), NAN);
  mla_absorb_query(s.q.data(), d.queries, s.kv_b.data(), s.shape, q_latent.data(), pool);
  mla_attention_absorbed(q_latent.data(), s.q.data(), d.queries, s.positions.data(), s.row_ptrs.data(), d.keys, s.shape,
                         out_latent.data(), pool);
  mla_project_values(out_latent.data(), d.queries, s.kv_b.data(), s.shape, absorbed.data(), pool);
  EXPECT_LT(relative_l2(absorbed, expanded), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MlaSweep,
                         ::testing::Values(Dims{1, 4, 2, 4, 8, 1, 1}, Dims{3, 16, 8, 12, 40, 9, 4}, Dims{4, 32, 32, 32, 160, 33, 33},
                                           Dims{2, 128, 64, 128, 512, 5, 1}));

TEST(MlaAttention, QueryBeyondCachedKeysIsAnError) {
  AttentionInputs s = make_setup(1, 4, 2, 4, 8, 3, 1, 1);
  s.positions[0] = 3;
  ThreadPool pool(1);
  std::vector<float> out(4);
  EXPECT_THROW(mla_attention_expanded(s.q.data(), 1, s.positions.data(), s.kv.data(), s.row_ptrs.data(), 3, s.shape,
                                      out.data(), pool), Error);
}

}  // namespace
}  // namespace fathom::kernels::cpu
