// Sampler: greedy, seeded determinism, filters never pick excluded tokens (statistically), penalties, logit bias,
// the min_new_tokens ban, logprobs.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "core/error.h"
#include "sampling/philox.h"
#include "sampling/sampler.h"

namespace fathom::sampling {
namespace {

std::vector<float> random_logits(int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (float& value : logits) value = normal(rng);
  return logits;
}

int32_t draw(const std::vector<float>& logits, const SamplingOptions& options, SamplingState& state) {
  std::vector<float> copy = logits;
  return sample_token(copy.data(), static_cast<int64_t>(copy.size()), options, state).token_id;
}

TEST(Philox, MatchesKnownAnswer) {
  // Random123's kat_vectors: philox4x32_10 with zero counter and key.
  const PhiloxBlock zero = philox4x32_10({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(zero, (PhiloxBlock{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  const PhiloxBlock ones = philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu});
  EXPECT_EQ(ones, (PhiloxBlock{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  const double u = philox_uniform(123, 4);
  EXPECT_GE(u, 0.0);
  EXPECT_LT(u, 1.0);
  EXPECT_EQ(u, philox_uniform(123, 4));
  EXPECT_NE(u, philox_uniform(123, 5));
  EXPECT_NE(u, philox_uniform(124, 4));
}

TEST(Sampler, GreedyIsArgmaxWithLowestIndexOnTies) {
  std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f};
  SamplingOptions greedy;
  greedy.temperature = 0.0f;
  SamplingState state;
  EXPECT_EQ(draw(logits, greedy, state), 1);
  SamplingOptions top1;
  top1.top_k = 1;
  top1.temperature = 5.0f;
  EXPECT_EQ(draw(logits, top1, state), 1);
  EXPECT_EQ(state.num_sampled, 2);
  EXPECT_EQ(state.output_counts[1], 2);
  const std::vector<float> big = random_logits(5000, 3);
  EXPECT_EQ(draw(big, greedy, state), std::max_element(big.begin(), big.end()) - big.begin());
}

TEST(Sampler, SameSeedSameTokensIndependentOfOtherDraws) {
  const std::vector<float> logits = random_logits(1000, 11);
  SamplingOptions options;
  options.temperature = 1.3f;
  options.top_p = 0.95f;
  std::vector<int32_t> first, second, other;
  SamplingState a, b, c;
  a.seed = b.seed = 42;
  c.seed = 43;
  SamplingState unrelated;
  unrelated.seed = 7;
  for (int step = 0; step < 50; ++step) {
    first.push_back(draw(logits, options, a));
    draw(logits, options, unrelated);  // interleaved draws of another sequence change nothing
    second.push_back(draw(logits, options, b));
    other.push_back(draw(logits, options, c));
  }
  EXPECT_EQ(first, second);
  EXPECT_NE(first, other);
}

TEST(Sampler, TopKNeverPicksExcludedTokensAndFollowsTheDistribution) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, 3.0f, 2.5f, -1.0f};
  SamplingOptions options;
  options.top_k = 3;  // keeps 3, 4, 1
  std::map<int32_t, int> counts;
  SamplingState state;
  state.seed = 5;
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) ++counts[draw(logits, options, state)];
  for (const auto& [token, count] : counts) EXPECT_TRUE(token == 3 || token == 4 || token == 1) << token;
  const double z = std::exp(3.0) + std::exp(2.5) + std::exp(2.0);
  EXPECT_NEAR(counts[3] / double(draws), std::exp(3.0) / z, 0.015);
  EXPECT_NEAR(counts[4] / double(draws), std::exp(2.5) / z, 0.015);
  EXPECT_NEAR(counts[1] / double(draws), std::exp(2.0) / z, 0.015);
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  // Probabilities 0.5, 0.3, 0.15, 0.05: top_p 0.7 keeps {0, 1}; 0.85 keeps {0, 1, 2}.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingOptions options;
  options.top_p = 0.7f;
  auto kept = filtered_distribution(logits.data(), 4, options);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].first, 0);
  EXPECT_NEAR(kept[0].second, 0.5 / 0.8, 1e-6);
  options.top_p = 0.85f;
  EXPECT_EQ(filtered_distribution(logits.data(), 4, options).size(), 3u);
  options.top_p = 0.01f;
  EXPECT_EQ(filtered_distribution(logits.data(), 4, options).size(), 1u);

  options.top_p = 0.7f;
  SamplingState state;
  state.seed = 9;
  int zero = 0;
  for (int i = 0; i < 10000; ++i) {
    const int32_t token = draw(logits, options, state);
    ASSERT_TRUE(token == 0 || token == 1);
    zero += token == 0;
  }
  EXPECT_NEAR(zero / 10000.0, 0.625, 0.02);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingOptions options;
  options.min_p = 0.25f;  // threshold 0.125: drops token 3
  SamplingState state;
  state.seed = 1;
  for (int i = 0; i < 5000; ++i) ASSERT_NE(draw(logits, options, state), 3);
  const auto kept = filtered_distribution(logits.data(), 4, options);
  EXPECT_EQ(kept.size(), 3u);
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  const std::vector<float> logits = {0.0f, 1.0f};
  SamplingOptions options;
  options.temperature = 0.5f;
  auto sharp = filtered_distribution(logits.data(), 2, options);
  EXPECT_NEAR(sharp[1].second, std::exp(2.0) / (1 + std::exp(2.0)), 1e-9);
  options.temperature = 2.0f;
  auto flat = filtered_distribution(logits.data(), 2, options);
  EXPECT_NEAR(flat[1].second, std::exp(0.5) / (1 + std::exp(0.5)), 1e-9);
}

TEST(Sampler, PenaltiesFollowOpenAiSemantics) {
  std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  SamplingState state;
  state.output_counts = {{1, 1}, {2, 3}};
  SamplingOptions options;
  options.presence_penalty = 0.5f;
  options.frequency_penalty = 0.25f;
  apply_logit_modifiers(logits.data(), 4, state, options);
  EXPECT_FLOAT_EQ(logits[0], 1.0f);
  EXPECT_FLOAT_EQ(logits[1], 1.0f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(logits[2], 1.0f - 0.5f - 0.75f);
  EXPECT_FLOAT_EQ(logits[3], 1.0f);
  // Negative penalties encourage repetition; greedy sees penalized logits.
  std::vector<float> row = {2.0f, 1.9f};
  SamplingState repeat;
  repeat.output_counts = {{0, 2}};
  SamplingOptions greedy;
  greedy.temperature = 0.0f;
  greedy.frequency_penalty = 0.1f;
  EXPECT_EQ(sample_token(row.data(), 2, greedy, repeat).token_id, 1);
  EXPECT_EQ(repeat.output_counts[1], 1);
}

TEST(Sampler, LogprobsAreOfTheRawLogits) {
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f};
  SamplingOptions options;
  options.temperature = 0.0f;
  options.logprobs = true;
  options.top_logprobs = 3;
  options.presence_penalty = 1.5f;
  SamplingState state;
  state.output_counts = {{1, 1}};  // penalized out of the argmax
  const SampledToken result = sample_token(logits.data(), 4, options, state);
  EXPECT_EQ(result.token_id, 3);
  const double log_z = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0));
  EXPECT_NEAR(result.logprob, 3.0 - log_z, 1e-6);
  ASSERT_EQ(result.top.size(), 3u);
  EXPECT_EQ(result.top[0].first, 1);  // ties: lowest id first
  EXPECT_EQ(result.top[1].first, 3);
  EXPECT_EQ(result.top[2].first, 2);
  EXPECT_NEAR(result.top[2].second, 2.0 - log_z, 1e-6);
}

TEST(Sampler, RepetitionPenaltyScalesPromptAndGeneratedTokensOnce) {
  std::vector<float> logits = {2.0f, -2.0f, 1.0f, 3.0f, 0.5f, -1.0f};
  SamplingState state;
  state.prompt_token_ids = {0, 1};              // token 1 is also generated: penalized once
  state.output_counts = {{1, 2}, {2, 1}, {7, 1}};  // 7 is outside the row: skipped
  SamplingOptions options;
  options.repetition_penalty = 2.0f;
  apply_logit_modifiers(logits.data(), 6, state, options);
  EXPECT_FLOAT_EQ(logits[0], 1.0f);   // positive: divided
  EXPECT_FLOAT_EQ(logits[1], -4.0f);  // negative: multiplied
  EXPECT_FLOAT_EQ(logits[2], 0.5f);
  EXPECT_FLOAT_EQ(logits[3], 3.0f);   // neither in the prompt nor generated
  EXPECT_FLOAT_EQ(logits[4], 0.5f);
  EXPECT_FLOAT_EQ(logits[5], -1.0f);
  // Below 1 it rewards repetition; greedy sees the penalized row.
  std::vector<float> row = {1.0f, 1.5f};
  SamplingState repeat;
  repeat.prompt_token_ids = {0};
  SamplingOptions greedy;
  greedy.temperature = 0.0f;
  greedy.repetition_penalty = 0.5f;
  EXPECT_EQ(sample_token(row.data(), 2, greedy, repeat).token_id, 0);
}

TEST(Sampler, LogitBiasIsAddedBeforeTheDrawButNotToLogprobs) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f};
  SamplingOptions greedy;
  greedy.temperature = 0.0f;
  greedy.logprobs = true;
  greedy.logit_bias = {{0, 2.5f}, {1, -1.0f}};
  SamplingState state;
  std::vector<float> row = logits;
  const SampledToken token = sample_token(row.data(), 3, greedy, state);
  EXPECT_EQ(token.token_id, 0);  // 3.5 against 2.0 and 2.0
  const double log_z = std::log(std::exp(1.0) + std::exp(3.0) + std::exp(2.0));
  EXPECT_NEAR(token.logprob, 1.0 - log_z, 1e-6);
  // -100 removes a token from sampling in practice: 2000 seeded draws never pick it.
  SamplingOptions banned;
  banned.logit_bias = {{1, -100.0f}};
  std::map<int32_t, int> counts;
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    SamplingState fresh;
    fresh.seed = seed;
    ++counts[draw(logits, banned, fresh)];
  }
  EXPECT_EQ(counts.count(1), 0u);
  EXPECT_GT(counts[0], 100);
  EXPECT_GT(counts[2], 1000);
}

TEST(Sampler, MinNewTokensBansTheEndingIdsUntilReached) {
  const std::vector<float> logits = {0.0f, 1.0f, 5.0f, 4.0f};
  SamplingOptions options;
  options.temperature = 0.0f;
  options.min_new_tokens = 2;
  options.ending_token_ids = {2, 3};
  SamplingState state;
  EXPECT_EQ(draw(logits, options, state), 1);
  EXPECT_EQ(draw(logits, options, state), 1);
  EXPECT_EQ(draw(logits, options, state), 2);  // two drawn: the ban is over
  // Sampling (not greedy) never draws a banned id either.
  SamplingOptions sampled = options;
  sampled.temperature = 1.0f;
  for (uint64_t seed = 0; seed < 500; ++seed) {
    SamplingState fresh;
    fresh.seed = seed;
    const int32_t id = draw(logits, sampled, fresh);
    EXPECT_TRUE(id == 0 || id == 1) << id;
  }
}

TEST(Sampler, ModifiedLogitsNeedTheHostSampler) {
  SamplingState state;
  SamplingOptions options;
  EXPECT_TRUE(device_can_sample(options, state));
  options.repetition_penalty = 1.1f;
  EXPECT_FALSE(device_can_sample(options, state));
  options = SamplingOptions{};
  options.logit_bias = {{3, 1.0f}};
  EXPECT_FALSE(device_can_sample(options, state));
  options = SamplingOptions{};
  options.min_new_tokens = 4;
  EXPECT_TRUE(device_can_sample(options, state));  // nothing to ban
  options.ending_token_ids = {1};
  EXPECT_FALSE(device_can_sample(options, state));
  state.num_sampled = 4;  // the ban is over
  EXPECT_TRUE(device_can_sample(options, state));
}

// Prompt logprobs: the scored token's log_softmax entry and the top_n of the row, bit for bit, ties by lowest id.
TEST(Sampler, ScoreTokenIsTheLogSoftmaxEntryAndTheRowsTopN) {
  std::vector<float> logits = random_logits(5000, 21);
  logits[17] = logits[4000] = 9.0f;  // a tie at the top
  std::vector<float> logprobs(logits.size());
  log_softmax(logits.data(), 5000, logprobs.data());
  for (int32_t top_n : {0, 1, 2, 7, 20}) {
    const SampledToken scored = score_token(logits.data(), 5000, 123, top_n);
    EXPECT_EQ(scored.token_id, 123);
    EXPECT_EQ(scored.logprob, logprobs[123]);
    const std::vector<int32_t> expected = top_indices(logprobs.data(), 5000, top_n);
    ASSERT_EQ(scored.top.size(), expected.size()) << top_n;
    for (size_t k = 0; k < expected.size(); ++k) {
      EXPECT_EQ(scored.top[k].first, expected[k]) << top_n << " " << k;
      EXPECT_EQ(scored.top[k].second, logprobs[static_cast<size_t>(expected[k])]) << top_n << " " << k;
    }
  }
  EXPECT_EQ(score_token(logits.data(), 5000, 0, 2).top.front().first, 17);
  // rank: 1 + the tokens with a strictly larger logit (tied tops both rank 1).
  EXPECT_EQ(score_token(logits.data(), 5000, 17, 0).rank, 1);
  EXPECT_EQ(score_token(logits.data(), 5000, 4000, 0).rank, 1);
  const int64_t larger = std::count_if(logits.begin(), logits.end(), [&](float value) { return value > logits[123]; });
  EXPECT_EQ(score_token(logits.data(), 5000, 123, 0).rank, larger + 1);
  EXPECT_THROW(score_token(logits.data(), 5000, 5000, 1), Error);
}

TEST(Sampler, RejectsInvalidOptions) {
  std::vector<float> logits = {0.0f, 1.0f};
  SamplingState state;
  SamplingOptions bad;
  bad.top_p = 0.0f;
  EXPECT_THROW(sample_token(logits.data(), 2, bad, state), Error);
  bad = SamplingOptions{};
  bad.top_k = 0;
  EXPECT_FALSE(validate(bad).empty());
  bad = SamplingOptions{};
  bad.temperature = -1.0f;
  EXPECT_FALSE(validate(bad).empty());
  bad = SamplingOptions{};
  bad.top_logprobs = 21;
  EXPECT_FALSE(validate(bad).empty());
  for (float penalty : {0.0f, -1.0f, 2.5f, NAN}) {
    bad = SamplingOptions{};
    bad.repetition_penalty = penalty;
    EXPECT_NE(validate(bad).find("repetition_penalty"), std::string::npos) << penalty;
  }
  bad = SamplingOptions{};
  bad.logit_bias = {{1, 101.0f}};
  EXPECT_NE(validate(bad).find("[-100, 100]"), std::string::npos);
  bad.logit_bias = {{2, 1.0f}, {1, 1.0f}};
  EXPECT_NE(validate(bad).find("ascending"), std::string::npos);
  bad.logit_bias = {{-1, 1.0f}};
  EXPECT_NE(validate(bad).find("negative"), std::string::npos);
  bad = SamplingOptions{};
  bad.min_new_tokens = -1;
  EXPECT_FALSE(validate(bad).empty());
  EXPECT_TRUE(validate(SamplingOptions{}).empty());
}

}  // namespace
}  // namespace fathom::sampling
