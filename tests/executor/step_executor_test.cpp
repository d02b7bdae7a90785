// StepExecutor: placeholders take the token the sequence sampled in the previous step; sampling state advances.
#include <gtest/gtest.h>

#include "../scheduler/fake_model.h"
#include "core/error.h"
#include "executor/step_executor.h"

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

}  // namespace
}  // namespace fathom::executor
