// Requests that change the logits before the draw (logit_bias, repetition_penalty, min_new_tokens) through the
// scheduler and the step executor, sequential and overlapped, against a reference that applies each rule to the
// fake model's logits itself; min_new_tokens also defers stop strings; bad values get one error event.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include "scheduler_harness.h"
#include "tokenizer/tokenizer.h"

namespace fathom::testing {
namespace {

// Greedy continuation of `prompt` by the fake model, each row changed by modify(row, sequence, generated) first.
using RowRule = std::function<void(std::vector<float>& row, const std::vector<int32_t>& sequence, size_t generated)>;

std::vector<int32_t> reference_greedy(const FakeModel& model, std::vector<int32_t> sequence, size_t count,
                                      const RowRule& modify, const std::set<int32_t>& stops = {}) {
  std::vector<int32_t> out;
  while (out.size() < count) {
    std::vector<float> row = model.logits_for(sequence);
    modify(row, sequence, out.size());
    const int32_t next = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    out.push_back(next);
    sequence.push_back(next);
    if (stops.count(next)) break;
  }
  return out;
}

class LogitModifiersTest : public ::testing::TestWithParam<bool> {};  // param: overlap scheduling

TEST_P(LogitModifiersTest, MinNewTokensBansEosAndStopTokensUntilReached) {
  // Token 7 follows any sequence ending in 6; token 1 (EOS) follows 7: unchanged, "6 7 EOS".
  NextTokenFn next = [](const std::vector<int32_t>& sequence) {
    return sequence.back() == 6 ? 7 : sequence.back() == 7 ? 1 : 6;
  };
  SchedulerHarness harness(table_config(), GetParam(), next);
  scheduler::SamplingParams params = SchedulerHarness::greedy();
  params.min_new_tokens = 4;
  harness.submit("eos", {5}, 12, params);
  params.stop_token_ids = {7};
  harness.submit("stop_token", {5}, 12, params);
  harness.run_until_idle();
  auto banned_until = [](std::set<int32_t> ids, size_t min_tokens) {
    return [ids, min_tokens](std::vector<float>& row, const std::vector<int32_t>&, size_t generated) {
      if (generated >= min_tokens) return;
      for (int32_t id : ids) row[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
    };
  };
  const std::vector<int32_t> eos = reference_greedy(harness.model(), {5}, 12, banned_until({1}, 4), {1});
  EXPECT_EQ(harness.log("eos").tokens(), eos);
  ASSERT_GE(eos.size(), 5u);
  EXPECT_EQ(std::count(eos.begin(), eos.begin() + 4, 1), 0);
  const std::vector<int32_t> stop = reference_greedy(harness.model(), {5}, 12, banned_until({1, 7}, 4), {1, 7});
  EXPECT_EQ(harness.log("stop_token").tokens(), stop);
  ASSERT_GE(stop.size(), 5u);
  EXPECT_EQ(stop.front(), 6);
  EXPECT_NE(stop[1], 7);  // 7 is banned at the second token, where the model picks it
  EXPECT_EQ(harness.log("stop_token").last().finish_reason,
            stop.size() == 12 && stop.back() != 1 && stop.back() != 7 ? FinishReason::kLength : FinishReason::kStop);
}

TEST_P(LogitModifiersTest, LogitBiasAndRepetitionPenaltyFollowTheReference) {
  // The model always prefers token 4 (logit 4.0, the rest below 2.5), which the prompt holds: a penalty of 1.9
  // takes it to 2.1, below the best of the rest, so the penalized path differs from "4 4 4 ...".
  SchedulerHarness harness(table_config(), GetParam(), [](const std::vector<int32_t>&) { return 4; });
  scheduler::SamplingParams params = SchedulerHarness::greedy();
  params.ignore_eos = true;
  params.logit_bias = {{9, 5.0f}, {20, -1.0f}};  // 9 reaches >= 5 where the model's choice has 4: always 9
  harness.submit("bias", {3, 4, 5}, 4, params);
  scheduler::SamplingParams repetition = SchedulerHarness::greedy();
  repetition.ignore_eos = true;
  repetition.repetition_penalty = 1.9f;
  const std::vector<int32_t> prompt = {3, 4, 5, 4, 200};
  harness.submit("repetition", prompt, 10, repetition);
  harness.run_until_idle();
  EXPECT_EQ(harness.log("bias").tokens(), (std::vector<int32_t>{9, 9, 9, 9}));
  const std::vector<int32_t> expected = reference_greedy(
      harness.model(), prompt, 10, [](std::vector<float>& row, const std::vector<int32_t>& sequence, size_t) {
        for (int32_t id : std::set<int32_t>(sequence.begin(), sequence.end())) {
          float& logit = row[static_cast<size_t>(id)];
          logit = logit > 0.0f ? logit / 1.9f : logit * 1.9f;
        }
      });
  EXPECT_EQ(harness.log("repetition").tokens(), expected);
  EXPECT_NE(expected.front(), 4);
  EXPECT_EQ(std::set<int32_t>(expected.begin(), expected.end()).size(), expected.size());  // nothing repeats
}

INSTANTIATE_TEST_SUITE_P(Loops, LogitModifiersTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Overlap" : "Sequential"; });

// A stop string matches only if it ends at or after the min_new_tokens-th token (as SGLang and vLLM check them).
TEST(LogitModifiers, MinNewTokensDefersStopStrings) {
  const tokenizer::Tokenizer tokenizer = tokenizer::Tokenizer::from_json(byte_tokenizer_json(), byte_tokenizer_config_json());
  const std::string script = "<STOP>ab<STOP>cd<STOP> tail";
  NextTokenFn spell = [script](const std::vector<int32_t>& sequence) {
    const size_t index = sequence.size() - 1;
    return index < script.size() ? static_cast<int32_t>(static_cast<unsigned char>(script[index])) : 256;
  };
  scheduler::SchedulerConfig config = table_config();
  config.eos_token_ids = {};
  SchedulerHarness harness(config, false, spell, &tokenizer);
  scheduler::SamplingParams params = SchedulerHarness::greedy();
  params.stop = {"<STOP>"};
  params.min_new_tokens = 7;  // the first "<STOP>" ends at token 6: not matched
  harness.submit("deferred", {65}, 40, params);
  params.min_new_tokens = 12;  // the second ends at token 14, after the 12th: matched though it began before
  harness.submit("straddling", {65}, 40, params);
  params.min_new_tokens = 0;
  harness.submit("plain", {65}, 40, params);
  harness.run_until_idle();
  EXPECT_EQ(harness.log("deferred").text(), "<STOP>ab");
  EXPECT_EQ(harness.log("deferred").last().matched_stop, "<STOP>");
  EXPECT_EQ(harness.log("deferred").tokens().size(), 14u);
  EXPECT_EQ(harness.log("straddling").text(), "<STOP>ab");
  EXPECT_EQ(harness.log("straddling").tokens().size(), 14u);
  EXPECT_EQ(harness.log("plain").text(), "");
  EXPECT_EQ(harness.log("plain").tokens().size(), 6u);
}

TEST(LogitModifiers, InvalidValuesGetOneErrorEvent) {
  SchedulerHarness harness(table_config());
  scheduler::SamplingParams params = SchedulerHarness::greedy();
  params.min_new_tokens = 6;
  harness.submit("min_over_max", {5}, 5, params);
  params = SchedulerHarness::greedy();
  params.logit_bias = {{300, 1.0f}};  // vocab 300
  harness.submit("bias_vocab", {5}, 5, params);
  params.logit_bias = {{3, 1.0f}, {3, 2.0f}};
  harness.submit("bias_twice", {5}, 5, params);
  params = SchedulerHarness::greedy();
  params.repetition_penalty = 0.0f;
  harness.submit("repetition_zero", {5}, 5, params);
  for (const char* id : {"min_over_max", "bias_vocab", "bias_twice", "repetition_zero"}) {
    ASSERT_EQ(harness.log(id).events.size(), 1u) << id;
    EXPECT_EQ(harness.log(id).last().finish_reason, FinishReason::kError) << id;
  }
  EXPECT_NE(harness.log("min_over_max").last().error_message.find("exceeds max_new_tokens 5"), std::string::npos);
  EXPECT_NE(harness.log("bias_vocab").last().error_message.find("outside the vocabulary"), std::string::npos);
  EXPECT_NE(harness.log("repetition_zero").last().error_message.find("repetition_penalty"), std::string::npos);
  EXPECT_FALSE(harness.scheduler().has_requests());
}

}  // namespace
}  // namespace fathom::testing
