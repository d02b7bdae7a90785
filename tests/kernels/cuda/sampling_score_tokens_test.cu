// GPU token scoring against the host's sampling::score_token: the target's logprob and rank and the top-n list (ids
// exactly, ties included: a few ties at the list's threshold gathered and ranked, thousands by rounds), over a sweep
// of vocabularies and list lengths, sampled-token targets, NaN / -inf logits, invalid targets, batch invariance, and
// the same bits as the sampler's own logprob.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/sampling/sampling.h"
#include "kernels/cuda/sampling/score_tokens.h"
#include "sampling/sampler.h"

namespace fathom::kernels::cuda {
namespace {

struct Scored {
  std::vector<float> logprob;
  std::vector<int64_t> rank;
  std::vector<int32_t> top_ids;     // [rows, max_top_n]
  std::vector<float> top_logprobs;  // [rows, max_top_n]
};

Scored run_scoring(const std::vector<float>& logits, int64_t vocab, const std::vector<ScoreRow>& rows,
                   int32_t max_top_n, const std::vector<int32_t>& sampled = {}) {
  const size_t n = rows.size();
  DeviceBuffer<float> d_logits(logits);
  DeviceBuffer<ScoreRow> d_rows(rows);
  DeviceBuffer<int32_t> d_sampled(sampled.empty() ? std::vector<int32_t>{0} : sampled);
  DeviceBuffer<float> d_logprob(std::max<size_t>(n, 1)), d_top_logprobs(std::max<size_t>(n * max_top_n, 1));
  DeviceBuffer<int64_t> d_rank(std::max<size_t>(n, 1));
  DeviceBuffer<int32_t> d_top_ids(std::max<size_t>(n * max_top_n, 1));
  for (auto* poisoned : {&d_logprob, &d_top_logprobs}) poisoned->fill_bytes(0xff);
  d_rank.fill_bytes(0xff);
  d_top_ids.fill_bytes(0xff);
  score_tokens(d_logits.data(), vocab, d_rows.data(), static_cast<int64_t>(n), d_sampled.data(), max_top_n,
               ScoreOutputs{d_logprob.data(), d_rank.data(), d_top_ids.data(), d_top_logprobs.data()}, nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  return Scored{d_logprob.download(), d_rank.download(), d_top_ids.download(), d_top_logprobs.download()};
}

// The host reference sees NaN as -inf, as the kernel does.
sampling::SampledToken host_score(const float* row, int64_t vocab, int32_t target, int32_t top_n) {
  std::vector<float> clean(row, row + vocab);
  for (float& x : clean) x = std::isnan(x) ? -INFINITY : x;
  return sampling::score_token(clean.data(), vocab, target, top_n);
}

void expect_matches_host(const std::vector<float>& logits, int64_t vocab, const std::vector<ScoreRow>& rows,
                         const std::vector<int32_t>& targets, int32_t max_top_n, const Scored& got, double tolerance) {
  for (size_t i = 0; i < rows.size(); ++i) {
    const float* row = logits.data() + static_cast<int64_t>(rows[i].logits_row) * vocab;
    const sampling::SampledToken want = host_score(row, vocab, targets[i], rows[i].top_n);
    EXPECT_EQ(got.rank[i], want.rank) << "row " << i << " vocab " << vocab;
    if (std::isinf(want.logprob))
      EXPECT_EQ(got.logprob[i], want.logprob) << i;
    else
      EXPECT_NEAR(got.logprob[i], want.logprob, tolerance) << "row " << i << " vocab " << vocab;
    ASSERT_EQ(want.top.size(), static_cast<size_t>(std::min<int64_t>(rows[i].top_n, vocab)));
    for (size_t k = 0; k < want.top.size(); ++k) {
      const size_t at = i * static_cast<size_t>(max_top_n) + k;
      ASSERT_EQ(got.top_ids[at], want.top[k].first) << "row " << i << " entry " << k << " vocab " << vocab;
      if (std::isinf(want.top[k].second))
        EXPECT_EQ(got.top_logprobs[at], want.top[k].second);
      else
        EXPECT_NEAR(got.top_logprobs[at], want.top[k].second, tolerance) << "row " << i << " entry " << k;
    }
  }
}

TEST(CudaScoreTokens, MatchesHostOverVocabulariesAndListLengths) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(91);
  for (const int64_t vocab : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{100}, int64_t{4095}, int64_t{4097},
                              int64_t{129280}, int64_t{393216}}) {
    const int64_t num_logits_rows = 5;
    std::vector<float> logits = testing::random_normal(rng, static_cast<size_t>(num_logits_rows * vocab), 3.0f);
    std::vector<ScoreRow> rows;
    std::vector<int32_t> targets;
    const int32_t max_top_n = kMaxScoreTopN;
    for (const int32_t top_n : {0, 1, 5, 20, 64}) {
      for (int repeat = 0; repeat < 2; ++repeat) {
        const int32_t row = static_cast<int32_t>(rng() % num_logits_rows);
        const int32_t target = static_cast<int32_t>(rng() % vocab);
        rows.push_back(ScoreRow{row, target, top_n});
        targets.push_back(target);
      }
    }
    const Scored got = run_scoring(logits, vocab, rows, max_top_n);
    expect_matches_host(logits, vocab, rows, targets, max_top_n, got, 2e-4);
  }
}

TEST(CudaScoreTokens, TiesNanAndMinusInfinityFollowTheHostOrder) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(7);
  const int64_t vocab = 129280;
  std::vector<float> logits;
  // Row 0: few distinct values (long runs of ties); row 1: all equal; row 2: NaN and -inf sprinkled in, the maximum
  // tied between a high and a low id; row 3: all -inf but a few.
  std::uniform_int_distribution<int> level(-6, 6);
  for (int64_t i = 0; i < vocab; ++i) logits.push_back(0.5f * static_cast<float>(level(rng)));
  logits.insert(logits.end(), static_cast<size_t>(vocab), 1.25f);
  std::vector<float> mixed = testing::random_normal(rng, static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; i += 97) mixed[static_cast<size_t>(i)] = NAN;
  for (int64_t i = 5; i < vocab; i += 89) mixed[static_cast<size_t>(i)] = -INFINITY;
  mixed[vocab - 3] = 9.0f;
  mixed[11] = 9.0f;
  logits.insert(logits.end(), mixed.begin(), mixed.end());
  std::vector<float> sparse(static_cast<size_t>(vocab), -INFINITY);
  sparse[70000] = 2.0f;
  sparse[3] = 1.0f;
  logits.insert(logits.end(), sparse.begin(), sparse.end());
  const std::vector<ScoreRow> rows = {{0, 17, 20}, {0, 129279, 64}, {1, 5000, 20}, {2, 129277, 20},
                                      {2, 97, 8},  {2, 5, 3},       {3, 3, 5},     {3, 4, 5}};
  std::vector<int32_t> targets;
  for (const ScoreRow& row : rows) targets.push_back(row.target);
  const Scored got = run_scoring(logits, vocab, rows, kMaxScoreTopN);
  expect_matches_host(logits, vocab, rows, targets, kMaxScoreTopN, got, 1e-4);
  EXPECT_EQ(got.top_ids[3 * kMaxScoreTopN], 11);  // the tied maximum: lowest id first
  EXPECT_EQ(got.top_ids[3 * kMaxScoreTopN + 1], 129277);
}

// Rows whose top values repeat a few times each (rounded to a coarse grid), so the list's threshold is tied by
// tokens in several blocks yet they fit in the gathered candidates; so does row 2's (200 tokens tied at the top); row
// 3's (700 tied below 10 distinct ones) do not, and its list comes by rounds.
TEST(CudaScoreTokens, FewTiesAtTheThresholdFollowTheHostOrder) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(23);
  for (const int64_t vocab : {int64_t{3000}, int64_t{129280}}) {
    SCOPED_TRACE(::testing::Message() << "vocab " << vocab);
    std::vector<float> logits = testing::random_normal(rng, static_cast<size_t>(4 * vocab), 3.0f);
    for (int64_t i = 0; i < vocab; ++i) {  // row 0: the tail on a 0.25 grid; row 1: everything on a 0.05 grid
      float& tail = logits[static_cast<size_t>(i)];
      if (tail > 7.0f) tail = 0.25f * std::round(4.0f * tail);
      float& grid = logits[static_cast<size_t>(vocab + i)];
      grid = 0.05f * std::round(20.0f * grid);
    }
    for (int64_t i = 0; i < vocab; ++i) {
      logits[static_cast<size_t>(2 * vocab + i)] = std::min(logits[static_cast<size_t>(2 * vocab + i)], 4.0f);
      logits[static_cast<size_t>(3 * vocab + i)] = std::min(logits[static_cast<size_t>(3 * vocab + i)], 1.0f);
    }
    for (int k = 0; k < 200; ++k) logits[static_cast<size_t>(2 * vocab + (k * 7919 + 3) % vocab)] = 9.0f;
    for (int k = 0; k < 700; ++k) logits[static_cast<size_t>(3 * vocab + (k * 6007 + 1) % vocab)] = 2.0f;
    for (int k = 0; k < 10; ++k) logits[static_cast<size_t>(3 * vocab + (k * 104729 + 11) % vocab)] = 5.0f + k;
    std::vector<ScoreRow> rows;
    std::vector<int32_t> targets;
    for (int32_t row = 0; row < 4; ++row) {
      for (const int32_t top_n : {1, 5, 20, 64}) {
        const int32_t target = static_cast<int32_t>(rng() % vocab);
        rows.push_back(ScoreRow{row, target, top_n});
        targets.push_back(target);
      }
    }
    const Scored got = run_scoring(logits, vocab, rows, kMaxScoreTopN);
    expect_matches_host(logits, vocab, rows, targets, kMaxScoreTopN, got, 2e-4);
  }
}

TEST(CudaScoreTokens, SampledTargetsInvalidTargetsAndBatchInvariance) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(23);
  const int64_t vocab = 129280, num_logits_rows = 6;
  const std::vector<float> logits = testing::random_normal(rng, static_cast<size_t>(num_logits_rows * vocab), 2.0f);
  const std::vector<int32_t> sampled = {5, 129279, 0, 77, 4096, 1234};
  std::vector<ScoreRow> rows;
  std::vector<int32_t> targets;
  for (int32_t r = num_logits_rows - 1; r >= 0; --r) {
    rows.push_back(ScoreRow{r, kScoreSampledToken, 20});
    targets.push_back(sampled[static_cast<size_t>(r)]);
  }
  const Scored batch = run_scoring(logits, vocab, rows, 20, sampled);
  expect_matches_host(logits, vocab, rows, targets, 20, batch, 1e-4);
  // Each row alone gives the same bits.
  for (size_t i = 0; i < rows.size(); ++i) {
    const Scored alone = run_scoring(logits, vocab, {rows[i]}, 20, sampled);
    EXPECT_EQ(alone.logprob[0], batch.logprob[i]) << i;
    EXPECT_EQ(alone.rank[0], batch.rank[i]) << i;
    for (int k = 0; k < 20; ++k) {
      EXPECT_EQ(alone.top_ids[k], batch.top_ids[i * 20 + k]);
      EXPECT_EQ(alone.top_logprobs[k], batch.top_logprobs[i * 20 + k]);
    }
  }
  const Scored invalid = run_scoring(logits, vocab, {{0, static_cast<int32_t>(vocab), 2}, {1, -5, 0}}, 2);
  EXPECT_TRUE(std::isnan(invalid.logprob[0]));
  EXPECT_EQ(invalid.rank[0], 0);
  EXPECT_TRUE(std::isnan(invalid.logprob[1]));
  EXPECT_EQ(invalid.rank[1], 0);
  // The top list does not depend on the target.
  const Scored valid = run_scoring(logits, vocab, {{0, 3, 2}}, 2);
  EXPECT_EQ(invalid.top_ids[0], valid.top_ids[0]);
  EXPECT_EQ(invalid.top_ids[1], valid.top_ids[1]);
}

TEST(CudaScoreTokens, SameBitsAsTheSamplersLogprob) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(5);
  const int64_t vocab = 129280, batch = 4;
  const std::vector<float> logits = testing::random_normal(rng, static_cast<size_t>(batch * vocab), 2.5f);
  const std::vector<float> temperature = {0.0f, 0.7f, 1.0f, 1.3f};
  const std::vector<uint64_t> seed = {1, 2, 3, 4};
  DeviceBuffer<float> d_logits(logits), d_temperature(temperature), d_logprobs(static_cast<size_t>(batch));
  DeviceBuffer<uint64_t> d_seed(seed);
  DeviceBuffer<int32_t> d_tokens(static_cast<size_t>(batch));
  SamplingParams params;
  params.temperature = d_temperature.data();
  params.seed = d_seed.data();
  sample_tokens(d_logits.data(), batch, vocab, params, d_tokens.data(), d_logprobs.data(), nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int32_t> tokens = d_tokens.download();
  const std::vector<float> sampler_logprobs = d_logprobs.download();
  std::vector<ScoreRow> rows;
  for (int32_t r = 0; r < batch; ++r) rows.push_back(ScoreRow{r, kScoreSampledToken, 1});
  const Scored scored = run_scoring(logits, vocab, rows, 1, tokens);
  for (int64_t r = 0; r < batch; ++r) {
    EXPECT_EQ(scored.logprob[r], sampler_logprobs[r]) << r;  // bit for bit
  }
  EXPECT_EQ(scored.top_ids[0], tokens[0]);  // greedy: the top entry is the drawn token
  EXPECT_EQ(scored.top_logprobs[0], sampler_logprobs[0]);
}

}  // namespace
}  // namespace fathom::kernels::cuda
