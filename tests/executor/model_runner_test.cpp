// ModelRunner on the tiny dummy model: batched chunks over scattered KV slots give the single-sequence results.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "../model/tiny_model.h"
#include "core/error.h"
#include "executor/cpu_model_backend.h"
#include "executor/model_runner.h"
#include "sampling/sampler.h"
#include "model/generation.h"

namespace fathom::executor {
namespace {

double relative_l2(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

class ModelRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fathom::testing::write_config(dir_.path(), fathom::testing::tiny_config_json());
    ModelRunnerConfig config;
    config.load.model_dir = dir_.path();
    config.load.format = model::LoadFormat::kDummy;
    config.load.dummy_seed = 3;
    config.num_threads = 2;
    config.num_kv_slots = 64;
    runner_ = std::make_unique<ModelRunner>(config);
  }
  std::vector<float> full_logits(const std::vector<int32_t>& ids) {
    return model::compute_sequence_logits(cpu().model(), ids, false, cpu().context()).logits;
  }
  fathom::testing::TempDir dir_{"runner"};
  CpuModelBackend& cpu() { return dynamic_cast<CpuModelBackend&>(runner_->backend()); }
  std::unique_ptr<ModelRunner> runner_;
};

TEST_F(ModelRunnerTest, MixedBatchesMatchSingleSequences) {
  const int64_t vocab = runner_->vocab_size();
  ASSERT_EQ(vocab, 300);
  const std::vector<int32_t> a = {5, 17, 33, 2, 250, 7, 8, 9};  // prefilled in two chunks
  const std::vector<int32_t> b = {40, 41, 42, 43, 44, 45, 46};  // prefilled, then one decode token
  const std::vector<int32_t> slots_a = {60, 3, 11, 12, 13, 40, 41, 2};
  const std::vector<int32_t> slots_b = {0, 1, 20, 21, 22, 23, 24, 25};
  const std::vector<int32_t> a_first(a.begin(), a.begin() + 5), a_rest(a.begin() + 5, a.end());
  std::vector<float> step1 = runner_->forward({ForwardChunk{a_first, 0, slots_a, false, false, std::nullopt}, ForwardChunk{b, 0, slots_b, true, false, std::nullopt}});
  ASSERT_EQ(step1.size(), static_cast<size_t>(vocab));
  const std::vector<float> b_full = full_logits(b);
  EXPECT_EQ(std::vector<float>(step1.begin(), step1.end()), std::vector<float>(b_full.end() - vocab, b_full.end()));

  const int32_t next_b = model::argmax(step1.data(), vocab);
  const std::vector<int32_t> b_decode = {next_b};
  std::vector<float> step2 = runner_->forward({ForwardChunk{b_decode, 7, slots_b, true, false, std::nullopt}, ForwardChunk{a_rest, 5, slots_a, true, false, std::nullopt}});
  ASSERT_EQ(step2.size(), static_cast<size_t>(2 * vocab));
  std::vector<int32_t> b_extended = b;
  b_extended.push_back(next_b);
  const std::vector<float> b_expected = full_logits(b_extended);
  const std::vector<float> a_expected = full_logits(a);
  EXPECT_LT(relative_l2(step2.data(), b_expected.data() + (b_extended.size() - 1) * vocab, vocab), 1e-5);
  EXPECT_LT(relative_l2(step2.data() + vocab, a_expected.data() + (a.size() - 1) * vocab, vocab), 1e-5);
}

TEST_F(ModelRunnerTest, GreedyStepsMatchGreedyGenerate) {
  const std::vector<int32_t> prompt = {3, 14, 15, 92, 65, 35};
  model::GreedyOptions options;
  options.max_new_tokens = 6;
  options.ignore_eos = true;
  const std::vector<int32_t> expected = model::greedy_generate(cpu().model(), prompt, options, cpu().context());
  std::vector<int32_t> slots(12);
  std::iota(slots.rbegin(), slots.rend(), 30);  // descending, scattered from the model's identity layout
  std::vector<int32_t> generated;
  std::vector<float> logits = runner_->forward({ForwardChunk{prompt, 0, slots, true, false, std::nullopt}});
  for (int step = 0; step < 6; ++step) {
    generated.push_back(model::argmax(logits.data(), runner_->vocab_size()));
    const std::vector<int32_t> token = {generated.back()};
    if (step < 5) logits = runner_->forward({ForwardChunk{token, static_cast<int64_t>(prompt.size()) + step, slots, true, false, std::nullopt}});
  }
  EXPECT_EQ(generated, expected);
}

// Scored rows (prompt logprobs) of a prefill chunk and a decode chunk, beside a sampled row: each scored on the logits
// of its prefix (compute_sequence_logits' row), in chunk then row order.
TEST_F(ModelRunnerTest, ScoredRowsAreScoredOnThePrefixLogits) {
  const int64_t vocab = runner_->vocab_size();
  const std::vector<int32_t> a = {5, 17, 33, 2, 250, 7};
  const std::vector<int32_t> b = {40, 41, 42, 43, 44};
  const std::vector<int32_t> slots_a = {9, 8, 7, 6, 5, 4};
  const std::vector<int32_t> slots_b = {20, 21, 22, 23, 24, 25};
  const std::vector<int32_t> targets_a = {33, 2, 250, 7}, targets_b = {41, 42, 43, 44};
  ForwardChunk chunk_a{a, 0, slots_a, true, false, std::nullopt};
  chunk_a.scored_row_begin = 1;
  chunk_a.scored_targets = targets_a;  // rows 1..4 (row 5 samples)
  chunk_a.scored_top_n = 3;
  const std::vector<int32_t> b_first(b.begin(), b.begin() + 4), b_last(b.begin() + 4, b.end());
  ForwardChunk chunk_b{b_first, 0, slots_b, false, false, std::nullopt};
  chunk_b.scored_targets = targets_b;  // a chunk that does not sample scores all its rows
  const ForwardOutput first = runner_->forward_sampled({chunk_a, chunk_b});
  ASSERT_EQ(first.logits.size(), static_cast<size_t>(vocab));
  ASSERT_EQ(first.scored.size(), 8u);
  const std::vector<float> a_full = full_logits(a), b_full = full_logits(b);
  for (int64_t r = 0; r < 4; ++r) {
    const sampling::SampledToken want_a = sampling::score_token(a_full.data() + (1 + r) * vocab, vocab, targets_a[r], 3);
    const sampling::SampledToken want_b = sampling::score_token(b_full.data() + r * vocab, vocab, targets_b[r], 0);
    EXPECT_EQ(first.scored[r].token_id, targets_a[r]);
    EXPECT_NEAR(first.scored[r].logprob, want_a.logprob, 1e-4) << r;
    EXPECT_EQ(first.scored[r].rank, want_a.rank) << r;
    ASSERT_EQ(first.scored[r].top.size(), 3u);
    for (size_t k = 0; k < 3; ++k) EXPECT_EQ(first.scored[r].top[k].first, want_a.top[k].first) << r;
    EXPECT_EQ(first.scored[4 + r].token_id, targets_b[r]);
    EXPECT_NEAR(first.scored[4 + r].logprob, want_b.logprob, 1e-4) << r;
    EXPECT_TRUE(first.scored[4 + r].top.empty());
  }
  EXPECT_LT(relative_l2(first.logits.data(), a_full.data() + 5 * vocab, vocab), 1e-5);
  ForwardChunk decode_b{b_last, 4, slots_b, false, false, std::nullopt};  // one token: the absorbed form
  const std::vector<int32_t> target_last = {9};
  decode_b.scored_targets = target_last;
  const ForwardOutput second = runner_->forward_sampled({decode_b});
  ASSERT_EQ(second.scored.size(), 1u);
  EXPECT_NEAR(second.scored[0].logprob, sampling::score_token(b_full.data() + 4 * vocab, vocab, 9, 0).logprob, 1e-3);
  // A prefill chunk before a decode chunk (the decode group runs first): the scores stay in chunk order.
  const std::vector<int32_t> c = {60, 61, 62}, next_b = {45}, targets_c = {61, 62}, target_next_b = {3};
  const std::vector<int32_t> slots_c = {40, 41, 42};
  ForwardChunk chunk_c{c, 0, slots_c, false, false, std::nullopt};
  chunk_c.scored_targets = targets_c;
  chunk_c.scored_top_n = 1;
  ForwardChunk decode_b2{next_b, 5, slots_b, false, false, std::nullopt};
  decode_b2.scored_targets = target_next_b;
  const ForwardOutput third = runner_->forward_sampled({chunk_c, decode_b2});
  ASSERT_EQ(third.scored.size(), 3u);
  const std::vector<float> c_full = full_logits(c);
  std::vector<int32_t> b_longer = b;
  b_longer.push_back(45);
  const std::vector<float> b_longer_full = full_logits(b_longer);
  for (int64_t r = 0; r < 2; ++r) {
    EXPECT_EQ(third.scored[r].token_id, targets_c[r]);
    EXPECT_NEAR(third.scored[r].logprob, sampling::score_token(c_full.data() + r * vocab, vocab, targets_c[r], 0).logprob,
                1e-4) << r;
  }
  EXPECT_EQ(third.scored[2].token_id, 3);
  EXPECT_NEAR(third.scored[2].logprob, sampling::score_token(b_longer_full.data() + 5 * vocab, vocab, 3, 0).logprob, 1e-3);
  ForwardChunk outside{b_last, 4, slots_b, false, false, std::nullopt};
  outside.scored_row_begin = 1;
  outside.scored_targets = target_last;
  EXPECT_THROW(runner_->forward_sampled({outside}), Error);
  ForwardChunk bad_target{b_last, 4, slots_b, false, false, std::nullopt};
  const std::vector<int32_t> beyond = {static_cast<int32_t>(vocab)};
  bad_target.scored_targets = beyond;
  EXPECT_THROW(runner_->forward_sampled({bad_target}), Error);
}

TEST_F(ModelRunnerTest, RejectsTooFewSlots) {
  const std::vector<int32_t> tokens = {1, 2, 3};
  const std::vector<int32_t> slots = {0, 1};
  EXPECT_THROW(runner_->forward({ForwardChunk{tokens, 0, slots, true, false, std::nullopt}}), Error);
}

}  // namespace
}  // namespace fathom::executor
