// StepExecutor: placeholders take the token the sequence sampled in the previous step; sampling state advances.
#include <gtest/gtest.h>

#include <algorithm>

#include "../scheduler/fake_model.h"
#include "core/error.h"
#include "executor/step_executor.h"
#include "sampling/sampler.h"

namespace fathom::executor {
namespace {

SequenceStep make_step(uint64_t id, std::vector<int32_t> tokens, int64_t cached, std::vector<int32_t> slots,
                       std::shared_ptr<sampling::SamplingState> state) {
  SequenceStep step;
  step.sequence_id = id;
  step.new_tokens = std::move(tokens);
  step.num_cached = cached;
  step.kv_slots = std::move(slots);
  step.sample = state != nullptr;
  step.sampling.temperature = 0.0f;
  step.sampling_state = std::move(state);
  return step;
}

TEST(StepExecutor, ResolvesPlaceholdersFromThePreviousStep) {
  fathom::testing::FakeModel model(300, 32);
  ThreadPool pool(2);
  StepExecutor executor(model, &pool);
  auto state_a = std::make_shared<sampling::SamplingState>();
  auto state_b = std::make_shared<sampling::SamplingState>();
  StepBatch first;
  first.sequences.push_back(make_step(1, {10, 11, 12}, 0, {0, 1, 2}, state_a));
  first.sequences.push_back(make_step(2, {20, 21}, 0, {5, 6}, state_b));
  first.sequences.push_back(make_step(3, {30, 31}, 0, {8, 9}, nullptr));  // a prefill chunk: no token
  StepOutput out1 = executor.execute(first);
  ASSERT_TRUE(out1.tokens[0] && out1.tokens[1]);
  EXPECT_FALSE(out1.tokens[2]);
  EXPECT_EQ(out1.tokens[0]->token_id, model.next_token({10, 11, 12}));
  EXPECT_EQ(state_a->num_sampled, 1);

  StepBatch second;  // built before the first step's tokens were known
  second.sequences.push_back(make_step(2, {0}, 2, {5, 6, 7}, state_b));
  second.sequences.back().last_token_from_previous_step = true;
  second.sequences.push_back(make_step(1, {0}, 3, {0, 1, 2, 3}, state_a));
  second.sequences.back().last_token_from_previous_step = true;
  StepOutput out2 = executor.execute(second);
  EXPECT_EQ(out2.tokens[0]->token_id, model.next_token({20, 21, out1.tokens[1]->token_id}));
  EXPECT_EQ(out2.tokens[1]->token_id, model.next_token({10, 11, 12, out1.tokens[0]->token_id}));
  EXPECT_EQ(state_a->num_sampled, 2);

  StepBatch orphan;  // sequence 3 sampled nothing in the previous step
  orphan.sequences.push_back(make_step(3, {0}, 2, {8, 9, 10}, state_a));
  orphan.sequences.back().last_token_from_previous_step = true;
  EXPECT_THROW(executor.execute(orphan), Error);
}

// A model that "samples on the device": the chunks that carry device_sampling get the argmax of their logits row
// (a marker log-probability, and the alternatives asked for); scored rows come from FakeModel; the parameters it was
// given are recorded.
class DeviceSamplingModel : public LogitsSource {
 public:
  explicit DeviceSamplingModel(fathom::testing::FakeModel& model) : model_(model) {}
  int64_t vocab_size() const override { return model_.vocab_size(); }
  std::vector<float> forward(const std::vector<ForwardChunk>& chunks) override { return model_.forward(chunks); }
  bool samples_on_device() const override { return true; }
  ForwardOutput forward_sampled(const std::vector<ForwardChunk>& chunks) override {
    std::vector<ForwardChunk> plain = chunks;
    for (ForwardChunk& chunk : plain) chunk.device_sampling.reset();
    ForwardOutput scored = model_.forward_sampled(plain);  // logits [needs_logits chunks, V] and the scored rows
    const std::vector<float>& all = scored.logits;
    const int64_t vocab = vocab_size();
    ForwardOutput output;
    output.scored = std::move(scored.scored);
    int64_t row = 0;
    for (const ForwardChunk& chunk : chunks) {
      if (!chunk.needs_logits) continue;
      const float* logits = all.data() + row++ * vocab;
      if (chunk.device_sampling) {
        received.push_back(*chunk.device_sampling);
        sampling::SampledToken token;
        token.token_id = static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
        token.top = sampling::score_token(logits, vocab, token.token_id, chunk.device_sampling->top_logprobs).top;
        token.logprob = -0.5f;
        output.samples.push_back(token);
      } else {
        output.logits.insert(output.logits.end(), logits, logits + vocab);
      }
    }
    return output;
  }
  std::vector<sampling::DeviceSamplingRow> received;

 private:
  fathom::testing::FakeModel& model_;
};

TEST(StepExecutor, SamplesOnTheDeviceUnlessChangedLogitsNeedTheHost) {
  fathom::testing::FakeModel fake(300, 32);
  DeviceSamplingModel model(fake);
  StepExecutor executor(model, nullptr);
  auto greedy = std::make_shared<sampling::SamplingState>();
  auto penalized = std::make_shared<sampling::SamplingState>();
  auto alternatives = std::make_shared<sampling::SamplingState>();
  auto seeded = std::make_shared<sampling::SamplingState>();
  seeded->seed = 77;
  seeded->num_sampled = 5;
  StepBatch batch;
  batch.sequences.push_back(make_step(1, {10, 11}, 0, {0, 1}, greedy));
  batch.sequences.push_back(make_step(2, {20, 21}, 0, {2, 3}, penalized));
  batch.sequences.back().sampling.presence_penalty = 0.5f;
  batch.sequences.push_back(make_step(3, {30, 31}, 0, {4, 5}, alternatives));
  batch.sequences.back().sampling.logprobs = true;
  batch.sequences.back().sampling.top_logprobs = 2;
  batch.sequences.push_back(make_step(4, {40, 41}, 0, {6, 7}, seeded));
  batch.sequences.back().sampling.temperature = 0.7f;
  batch.sequences.back().sampling.top_k = 20;
  batch.sequences.back().sampling.top_p = 0.9f;
  batch.sequences.back().sampling.logprobs = true;
  auto biased = std::make_shared<sampling::SamplingState>();
  batch.sequences.push_back(make_step(5, {50, 51}, 0, {8, 9}, biased));
  batch.sequences.back().sampling.logit_bias = {{123, 100.0f}};  // on the host, where the bias is applied
  StepOutput out = executor.execute(batch);
  ASSERT_EQ(model.received.size(), 3u);  // sequences 1, 3 (alternatives come from the device too) and 4
  ASSERT_TRUE(out.tokens[4]);
  EXPECT_EQ(out.tokens[4]->token_id, 123);
  EXPECT_EQ(model.received[0].temperature, 0.0f);
  EXPECT_EQ(model.received[0].top_logprobs, 0);
  EXPECT_EQ(model.received[1].top_logprobs, 2);
  EXPECT_EQ(model.received[2].temperature, 0.7f);
  EXPECT_EQ(model.received[2].top_k, 20);
  EXPECT_EQ(model.received[2].top_p, 0.9f);
  EXPECT_EQ(model.received[2].seed, 77u);
  EXPECT_EQ(model.received[2].step, 5u);
  EXPECT_EQ(model.received[2].top_logprobs, 0);  // logprobs without alternatives
  for (size_t i = 0; i < 4; ++i) ASSERT_TRUE(out.tokens[i]) << i;
  EXPECT_EQ(out.tokens[0]->token_id, fake.next_token({10, 11}));
  EXPECT_EQ(out.tokens[0]->logprob, 0.0f);  // not requested
  EXPECT_EQ(out.tokens[3]->logprob, -0.5f);
  EXPECT_EQ(out.tokens[2]->top.size(), 2u);  // the device sampler reported the alternatives
  EXPECT_EQ(out.tokens[2]->top[0].first, out.tokens[2]->token_id);
  EXPECT_EQ(greedy->num_sampled, 1);
  EXPECT_EQ(seeded->num_sampled, 6);
  EXPECT_EQ(seeded->output_counts[out.tokens[3]->token_id], 1);
  EXPECT_EQ(penalized->num_sampled, 1);

  StepBatch next;  // device-sampled tokens feed the next step's placeholders like host-sampled ones
  next.sequences.push_back(make_step(1, {0}, 2, {0, 1, 8}, greedy));
  next.sequences.back().last_token_from_previous_step = true;
  StepOutput out2 = executor.execute(next);
  EXPECT_EQ(out2.tokens[0]->token_id, fake.next_token({10, 11, out.tokens[0]->token_id}));

  StepBatch invalid;  // options are validated on the device path too
  invalid.sequences.push_back(make_step(5, {50}, 0, {9}, std::make_shared<sampling::SamplingState>()));
  invalid.sequences.back().sampling.temperature = 0.5f;
  invalid.sequences.back().sampling.top_p = 1.5f;
  EXPECT_THROW(executor.execute(invalid), Error);

  // A min_new_tokens ban keeps a sequence on the host while it lasts, then lets the device sample it.
  auto banned = std::make_shared<sampling::SamplingState>();
  for (int64_t drawn : {0, 1}) {
    banned->num_sampled = drawn;
    StepBatch ban;
    ban.sequences.push_back(make_step(6, {60, 61}, 0, {10, 11}, banned));
    ban.sequences.back().sampling.min_new_tokens = 1;
    ban.sequences.back().sampling.ending_token_ids = {fake.next_token({60, 61})};
    const size_t received_before = model.received.size();
    const StepOutput banned_out = executor.execute(ban);
    EXPECT_EQ(model.received.size() - received_before, drawn == 0 ? 0u : 1u) << drawn;
    EXPECT_EQ(banned_out.tokens[0]->token_id == fake.next_token({60, 61}), drawn == 1) << drawn;
  }
}

// Prompt rows scored by the model go back to their sequences, in row order, beside device-sampled tokens: a
// sequence scoring three rows and sampling, one scoring a row of a chunk that does not sample, one not scoring.
TEST(StepExecutor, ScoredRowsReachTheirSequences) {
  fathom::testing::FakeModel fake(300, 32);
  DeviceSamplingModel model(fake);
  StepExecutor executor(model, nullptr);
  auto state = std::make_shared<sampling::SamplingState>();
  StepBatch batch;
  batch.sequences.push_back(make_step(1, {10, 11, 12, 13}, 0, {0, 1, 2, 3}, state));
  batch.sequences.back().scored_row_begin = 0;
  batch.sequences.back().scored_targets = {11, 12, 13};
  batch.sequences.back().scored_top_n = 2;
  batch.sequences.push_back(make_step(2, {20, 21}, 0, {4, 5}, std::make_shared<sampling::SamplingState>()));
  batch.sequences.push_back(make_step(3, {30, 31, 32}, 0, {6, 7, 8}, nullptr));
  batch.sequences.back().scored_row_begin = 1;
  batch.sequences.back().scored_targets = {32};
  const StepOutput out = executor.execute(batch);
  ASSERT_EQ(out.scored.size(), 3u);
  ASSERT_EQ(out.scored[0].size(), 3u);
  EXPECT_TRUE(out.scored[1].empty());
  ASSERT_EQ(out.scored[2].size(), 1u);
  const std::vector<int32_t> first = {10, 11, 12, 13};
  for (size_t r = 0; r < 3; ++r) {
    const std::vector<int32_t> prefix(first.begin(), first.begin() + static_cast<std::ptrdiff_t>(r) + 1);
    const std::vector<float> logits = fake.logits_for(prefix);
    const sampling::SampledToken want = sampling::score_token(logits.data(), 300, first[r + 1], 2);
    EXPECT_EQ(out.scored[0][r].token_id, first[r + 1]);
    EXPECT_EQ(out.scored[0][r].logprob, want.logprob) << r;
    EXPECT_EQ(out.scored[0][r].top, want.top) << r;
  }
  const std::vector<float> logits = fake.logits_for({30, 31});
  EXPECT_EQ(out.scored[2][0].logprob, sampling::score_token(logits.data(), 300, 32, 0).logprob);
  ASSERT_TRUE(out.tokens[0] && out.tokens[1]);
  EXPECT_FALSE(out.tokens[2]);
  EXPECT_EQ(out.tokens[0]->token_id, fake.next_token(first));
}

}  // namespace
}  // namespace fathom::executor
