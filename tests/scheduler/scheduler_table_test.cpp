// The scheduler stepped one iteration at a time against tables of expected states: who waits, who runs, what each
// step scheduled (new tokens, cached prefix, sampled or not), KV in use and who finished.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "scheduler_harness.h"

namespace fathom::testing {
namespace {

using scheduler::StepRecord;
using Ids = std::vector<std::string>;

struct ExpectedStep {
  std::vector<StepRecord> scheduled;
  Ids running;
  Ids waiting;
  int64_t kv_used;
  Ids finished;
};

void expect_steps(SchedulerHarness& harness, const std::vector<ExpectedStep>& table) {
  for (size_t row = 0; row < table.size(); ++row) {
    SCOPED_TRACE("step " + std::to_string(row + 1));
    const ExpectedStep& expected = table[row];
    ASSERT_TRUE(harness.step());
    const scheduler::SchedulerSnapshot state = harness.scheduler().snapshot();
    EXPECT_EQ(state.last_step, expected.scheduled);
    EXPECT_EQ(state.running, expected.running);
    EXPECT_EQ(state.waiting, expected.waiting);
    EXPECT_EQ(state.kv_used, expected.kv_used);
    EXPECT_EQ(harness.finished(), expected.finished);
  }
}

std::vector<int32_t> iota_tokens(int32_t first, int count) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < count; ++i) tokens.push_back(first + i);
  return tokens;
}

TEST(SchedulerTable, SingleRequest) {
  SchedulerHarness harness(table_config());
  harness.submit("a", {10, 11, 12, 13}, 3);
  expect_steps(harness, {
      {{{"a", 4, 0, true}}, {"a"}, {}, 4, {}},
      {{{"a", 1, 4, true}}, {"a"}, {}, 5, {}},
      {{{"a", 1, 5, true}}, {}, {}, 0, {"a"}},
  });
  EXPECT_FALSE(harness.step());
  EXPECT_EQ(harness.log("a").tokens(), reference_greedy(harness.model(), {10, 11, 12, 13}, 3));
  EXPECT_EQ(harness.log("a").last().finish_reason, FinishReason::kLength);
  EXPECT_EQ(harness.log("a").events.size(), 3u);
  EXPECT_EQ(harness.log("a").last().completion_tokens, 3);
  EXPECT_EQ(harness.scheduler().snapshot().kv_evictable, 6);  // prompt + 2 outputs with KV stay cached
}

TEST(SchedulerTable, ChunkedPrefillOverSeveralSteps) {
  scheduler::SchedulerConfig config = table_config();
  config.chunked_prefill_size = 3;
  SchedulerHarness harness(config);
  const std::vector<int32_t> prompt = iota_tokens(20, 7);
  harness.submit("a", prompt, 2);
  expect_steps(harness, {
      {{{"a", 3, 0, false}}, {"a"}, {}, 3, {}},  // committed chunks stay locked by the request
      {{{"a", 3, 3, false}}, {"a"}, {}, 6, {}},
      {{{"a", 1, 6, true}}, {"a"}, {}, 7, {}},
      {{{"a", 1, 7, true}}, {}, {}, 0, {"a"}},
  });
  EXPECT_EQ(harness.log("a").tokens(), reference_greedy(harness.model(), prompt, 2));
  EXPECT_EQ(harness.log("a").events.size(), 2u);  // no events for chunks that sample nothing
}

TEST(SchedulerTable, PrefixHitSkipsCachedTokens) {
  SchedulerHarness harness(table_config());
  harness.submit("a", {20, 21, 22, 23, 24, 25}, 1);
  expect_steps(harness, {{{{"a", 6, 0, true}}, {}, {}, 0, {"a"}}});
  harness.submit("b", {20, 21, 22, 23, 24, 99, 98}, 2);
  expect_steps(harness, {
      {{{"b", 2, 5, true}}, {"b"}, {}, 7, {"a"}},
      {{{"b", 1, 7, true}}, {}, {}, 0, {"a", "b"}},
  });
  EXPECT_EQ(harness.log("b").last().cached_prompt_tokens, 5);
  EXPECT_EQ(harness.log("b").tokens(), reference_greedy(harness.model(), {20, 21, 22, 23, 24, 99, 98}, 2));
  // The same prompt again: everything but the last token comes from the cache.
  harness.submit("c", {20, 21, 22, 23, 24, 25}, 1);
  expect_steps(harness, {{{{"c", 1, 5, true}}, {}, {}, 0, {"a", "b", "c"}}});
  EXPECT_EQ(harness.log("c").tokens(), harness.log("a").tokens());
  EXPECT_EQ(harness.scheduler().stats().cached_prompt_tokens_total, 10);
}

TEST(SchedulerTable, BatchAdmissionUnderMaxRunningAndPrefillBudget) {
  scheduler::SchedulerConfig config = table_config();
  config.max_running_requests = 2;
  config.chunked_prefill_size = 8;
  SchedulerHarness harness(config);
  harness.submit("a", iota_tokens(100, 5), 2);
  harness.submit("b", iota_tokens(110, 5), 2);
  harness.submit("c", iota_tokens(120, 5), 2);
  expect_steps(harness, {
      {{{"a", 5, 0, true}, {"b", 3, 0, false}}, {"a", "b"}, {"c"}, 8, {}},
      {{{"a", 1, 5, true}, {"b", 2, 3, true}}, {"b"}, {"c"}, 5, {"a"}},
      {{{"b", 1, 5, true}, {"c", 5, 0, true}}, {"c"}, {}, 5, {"a", "b"}},
      {{{"c", 1, 5, true}}, {}, {}, 0, {"a", "b", "c"}},
  });
  for (const auto& [id, first] : {std::pair{"a", 100}, std::pair{"b", 110}, std::pair{"c", 120}}) {
    EXPECT_EQ(harness.log(id).tokens(), reference_greedy(harness.model(), iota_tokens(first, 5), 2)) << id;
  }
}

// The key budget (max_prefill_keys): from a step's second prefill on, its prefill sequences together attend to at
// most that many keys (each its cached prefix plus its new tokens); the first always runs, alone when its own keys
// exceed it; a prefill the keys left cannot fully take gets a shorter chunk; decode tokens do not count.
TEST(SchedulerTable, PrefillKeyBudgetSpreadsLongCachedPrefixesOverSteps) {
  scheduler::SchedulerConfig config = table_config();
  config.max_prefill_keys = 10;
  SchedulerHarness harness(config);
  using Steps = std::vector<StepRecord>;
  auto next_step = [&] {
    EXPECT_TRUE(harness.step());
    return harness.scheduler().snapshot().last_step;
  };
  const std::vector<int32_t> history = iota_tokens(40, 8);
  harness.submit("a", history, 1);
  EXPECT_EQ(next_step(), (Steps{{"a", 8, 0, true}}));
  std::vector<int32_t> b = history, c = history;
  b.insert(b.end(), {90, 91, 92});
  c.insert(c.end(), {93, 94});
  harness.submit("b", b, 2);
  harness.submit("c", c, 1);
  EXPECT_EQ(next_step(), (Steps{{"b", 3, 8, true}}));                      // 11 keys: alone, over the budget
  EXPECT_EQ(next_step(), (Steps{{"b", 1, 11, true}, {"c", 2, 8, true}}));  // a decode token, then c's 10 keys
  harness.submit("f", iota_tokens(200, 6), 1);
  harness.submit("g", iota_tokens(210, 6), 1);
  EXPECT_EQ(next_step(), (Steps{{"f", 6, 0, true}, {"g", 4, 0, false}}));  // g gets the 4 keys left
  EXPECT_EQ(next_step(), (Steps{{"g", 2, 4, true}}));
  harness.run_until_idle();
  EXPECT_EQ(harness.log("b").tokens(), reference_greedy(harness.model(), b, 2));
  EXPECT_EQ(harness.log("c").tokens(), reference_greedy(harness.model(), c, 1));
  EXPECT_EQ(harness.log("g").tokens(), reference_greedy(harness.model(), iota_tokens(210, 6), 1));
}

// A running prefill whose prefix the keys left cannot cover waits for a later step while the requests behind it run:
// step 2's first prefill (b) spends the keys, c's next chunk is skipped, and d, behind c, still takes its token. A
// one-token chunk runs in the decode form and costs no keys (step 1: every prompt starts at the keys left).
TEST(SchedulerTable, PrefillKeyBudgetSkipsARunningPrefillAndGoesOn) {
  scheduler::SchedulerConfig config = table_config(128);
  config.max_prefill_keys = 7;
  config.chunked_prefill_size = 12;
  SchedulerHarness harness(config);
  harness.submit("a", iota_tokens(10, 6), 3);
  harness.submit("b", iota_tokens(30, 8), 1);
  harness.submit("c", iota_tokens(50, 4), 1);
  harness.submit("d", iota_tokens(70, 2), 3);
  expect_steps(harness, {
      {{{"a", 6, 0, true}, {"b", 1, 0, false}, {"c", 1, 0, false}, {"d", 1, 0, false}}, {"a", "b", "c", "d"}, {}, 9, {}},
      {{{"a", 1, 6, true}, {"b", 7, 1, true}, {"d", 1, 1, true}}, {"a", "c", "d"}, {}, 10, {"b"}},
      {{{"a", 1, 7, true}, {"c", 3, 1, true}, {"d", 1, 2, true}}, {"d"}, {}, 3, {"a", "b", "c"}},
      {{{"d", 1, 3, true}}, {}, {}, 0, {"a", "b", "c", "d"}},
  });
  EXPECT_EQ(harness.log("c").tokens(), reference_greedy(harness.model(), iota_tokens(50, 4), 1));
  EXPECT_EQ(harness.log("d").tokens(), reference_greedy(harness.model(), iota_tokens(70, 2), 3));
}

// The key budget counts each prefill's cached prefix: a chunk is cut to the keys left after its own prefix.
TEST(SchedulerTable, PrefillKeyBudgetCountsEachPrefix) {
  scheduler::SchedulerConfig config = table_config();
  config.max_prefill_keys = 20;
  using Steps = std::vector<StepRecord>;
  SchedulerHarness cached(config);
  const std::vector<int32_t> history = iota_tokens(40, 8);
  cached.submit("a", history, 1);
  EXPECT_TRUE(cached.step());
  std::vector<int32_t> q = history;
  for (int32_t t = 60; t < 68; ++t) q.push_back(t);
  cached.submit("p", iota_tokens(200, 6), 1);
  cached.submit("q", q, 1);
  EXPECT_TRUE(cached.step());
  EXPECT_EQ(cached.scheduler().snapshot().last_step, (Steps{{"p", 6, 0, true}, {"q", 6, 8, false}}));  // 20 - 6 - 8
  cached.run_until_idle();
  EXPECT_EQ(cached.log("q").tokens(), reference_greedy(cached.model(), q, 1));
}

// A single new token runs in the absorbed (decode) form and costs no keys, except a prompt's token under deterministic
// inference, which runs in the prefill form: it takes the prefill budgets (new tokens and keys), also when it is the
// last token of a chunked prompt, so a step's prefill forward never holds more than chunked_prefill_size tokens.
TEST(SchedulerTable, PrefillKeyBudgetFollowsTheAttentionForm) {
  using Steps = std::vector<StepRecord>;
  for (const bool deterministic : {false, true}) {
    SCOPED_TRACE(deterministic ? "deterministic" : "default");
    scheduler::SchedulerConfig config = table_config();
    config.deterministic = deterministic;
    config.max_prefill_keys = 10;
    config.chunked_prefill_size = 8;
    SchedulerHarness harness(config);
    const std::vector<int32_t> history = iota_tokens(40, 8);
    harness.submit("a", history, 1);
    EXPECT_TRUE(harness.step());
    harness.submit("b", history, 1);             // all but its last token cached
    harness.submit("c", iota_tokens(80, 5), 1);
    EXPECT_TRUE(harness.step());
    EXPECT_EQ(harness.scheduler().snapshot().last_step,
              deterministic ? (Steps{{"b", 1, 7, true}, {"c", 2, 0, false}})   // b: 8 keys in the prefill form
                            : (Steps{{"b", 1, 7, true}, {"c", 5, 0, true}}));  // b: decode form, no keys
    harness.run_until_idle();

    SchedulerHarness chunked(config);
    chunked.submit("x", iota_tokens(100, 9), 1);
    chunked.submit("y", iota_tokens(120, 8), 1);
    EXPECT_TRUE(chunked.step());
    EXPECT_EQ(chunked.scheduler().snapshot().last_step, (Steps{{"x", 8, 0, false}}));
    EXPECT_TRUE(chunked.step());  // x's last prompt token, then y under the budgets left
    EXPECT_EQ(chunked.scheduler().snapshot().last_step,
              deterministic ? (Steps{{"x", 1, 8, true}, {"y", 1, 0, false}})   // 8 - 1 tokens, 10 - 9 keys
                            : (Steps{{"x", 1, 8, true}, {"y", 8, 0, true}}));
    chunked.run_until_idle();
    EXPECT_EQ(chunked.log("y").tokens(), reference_greedy(chunked.model(), iota_tokens(120, 8), 1));
  }
}

TEST(SchedulerTable, KvExhaustionRetractsAndLaterCompletes) {
  SchedulerHarness harness(table_config(16));
  harness.submit("a", {30, 31, 32, 33}, 8);
  harness.submit("b", {40, 41, 42, 43}, 8);
  expect_steps(harness, {
      {{{"a", 4, 0, true}, {"b", 4, 0, true}}, {"a", "b"}, {}, 8, {}},
      {{{"a", 1, 4, true}, {"b", 1, 4, true}}, {"a", "b"}, {}, 10, {}},
      {{{"a", 1, 5, true}, {"b", 1, 5, true}}, {"a", "b"}, {}, 12, {}},
      {{{"a", 1, 6, true}, {"b", 1, 6, true}}, {"a", "b"}, {}, 14, {}},
      {{{"a", 1, 7, true}, {"b", 1, 7, true}}, {"a", "b"}, {}, 16, {}},
      // KV is full: b (newest) is retracted, its KV cached then evicted for a; b keeps its 5 tokens.
      {{{"a", 1, 8, true}}, {"a"}, {"b"}, 9, {}},
      {{{"a", 1, 9, true}}, {"a"}, {"b"}, 10, {}},    // b's 9 tokens do not fit in the 6 free slots
      {{{"a", 1, 10, true}}, {}, {"b"}, 0, {"a"}},
      {{{"b", 9, 0, true}}, {"b"}, {}, 9, {"a"}},      // recomputed prompt + generated tokens
      {{{"b", 1, 9, true}}, {"b"}, {}, 10, {"a"}},
      {{{"b", 1, 10, true}}, {}, {}, 0, {"a", "b"}},
  });
  EXPECT_EQ(harness.scheduler().snapshot().num_retractions, 1);
  EXPECT_EQ(harness.log("a").tokens(), reference_greedy(harness.model(), {30, 31, 32, 33}, 8));
  EXPECT_EQ(harness.log("b").tokens(), reference_greedy(harness.model(), {40, 41, 42, 43}, 8));
  EXPECT_EQ(harness.log("b").events.size(), 8u);
}

// Deterministic inference (KvSharingPolicy::kPromptPositions): a finished request publishes its prompt positions
// only; a later prompt holding its prompt and answer matches the prompt part and computes the answer's positions
// itself; that prompt's own positions (answer tokens included, computed as prompt) are shared afterwards.
TEST(SchedulerTable, DeterministicSharesPromptPositionsOnly) {
  scheduler::SchedulerConfig config = table_config();
  config.deterministic = true;
  SchedulerHarness harness(config);
  harness.submit("a", {20, 21, 22, 23}, 3);
  expect_steps(harness, {
      {{{"a", 4, 0, true}}, {"a"}, {}, 4, {}},
      {{{"a", 1, 4, true}}, {"a"}, {}, 5, {}},
      {{{"a", 1, 5, true}}, {}, {}, 0, {"a"}},
  });
  EXPECT_EQ(harness.scheduler().snapshot().kv_evictable, 4);  // the default shares 6 (SingleRequest)
  std::vector<int32_t> second = {20, 21, 22, 23};
  const std::vector<int32_t> answer = harness.log("a").tokens();
  second.insert(second.end(), answer.begin(), answer.end());
  second.push_back(99);
  harness.submit("b", second, 2);
  expect_steps(harness, {
      {{{"b", 4, 4, true}}, {"b"}, {}, 8, {"a"}},
      {{{"b", 1, 8, true}}, {}, {}, 0, {"a", "b"}},
  });
  EXPECT_EQ(harness.log("b").last().cached_prompt_tokens, 4);
  EXPECT_EQ(harness.log("b").tokens(), reference_greedy(harness.model(), second, 2));
  harness.submit("c", second, 1);
  expect_steps(harness, {{{{"c", 1, 7, true}}, {}, {}, 0, {"a", "b", "c"}}});
  EXPECT_EQ(harness.log("c").tokens(), reference_greedy(harness.model(), second, 1));
}

// Deterministic inference: a retracted request publishes its prompt positions only and, readmitted, recomputes its
// generated positions one token per step (decode form, as they first ran), sampling only past the last known token.
TEST(SchedulerTable, DeterministicRetractionRecomputesGeneratedTokensOnePerStep) {
  scheduler::SchedulerConfig config = table_config(16);
  config.deterministic = true;
  SchedulerHarness harness(config);
  harness.submit("a", {30, 31, 32, 33}, 8);
  harness.submit("b", {40, 41, 42, 43}, 8);
  expect_steps(harness, {
      {{{"a", 4, 0, true}, {"b", 4, 0, true}}, {"a", "b"}, {}, 8, {}},
      {{{"a", 1, 4, true}, {"b", 1, 4, true}}, {"a", "b"}, {}, 10, {}},
      {{{"a", 1, 5, true}, {"b", 1, 5, true}}, {"a", "b"}, {}, 12, {}},
      {{{"a", 1, 6, true}, {"b", 1, 6, true}}, {"a", "b"}, {}, 14, {}},
      {{{"a", 1, 7, true}, {"b", 1, 7, true}}, {"a", "b"}, {}, 16, {}},
      {{{"a", 1, 8, true}}, {"a"}, {"b"}, 9, {}},                           // b retracted: its prompt stays cached
      {{{"a", 1, 9, true}, {"b", 1, 4, false}}, {"a", "b"}, {}, 15, {}},    // readmitted on its cached prompt
      {{{"a", 1, 10, true}}, {}, {"b"}, 0, {"a"}},                          // retracted again for a's last token
      {{{"b", 1, 4, false}}, {"b"}, {}, 5, {"a"}},                          // generated positions 4..7, one a step
      {{{"b", 1, 5, false}}, {"b"}, {}, 6, {"a"}},
      {{{"b", 1, 6, false}}, {"b"}, {}, 7, {"a"}},
      {{{"b", 1, 7, false}}, {"b"}, {}, 8, {"a"}},
      {{{"b", 1, 8, true}}, {"b"}, {}, 9, {"a"}},                           // the last known token samples
      {{{"b", 1, 9, true}}, {"b"}, {}, 10, {"a"}},
      {{{"b", 1, 10, true}}, {}, {}, 0, {"a", "b"}},
  });
  EXPECT_EQ(harness.scheduler().snapshot().num_retractions, 2);
  EXPECT_EQ(harness.scheduler().snapshot().kv_evictable, 8);  // both prompts, no generated positions
  EXPECT_EQ(harness.log("a").tokens(), reference_greedy(harness.model(), {30, 31, 32, 33}, 8));
  EXPECT_EQ(harness.log("b").tokens(), reference_greedy(harness.model(), {40, 41, 42, 43}, 8));
  EXPECT_EQ(harness.log("b").events.size(), 8u);
}

TEST(SchedulerTable, ChunkShrinksToFreeKvThenRetractionKeepsCachedChunks) {
  scheduler::SchedulerConfig config = table_config(16);
  config.chunked_prefill_size = 4;
  SchedulerHarness harness(config);
  const std::vector<int32_t> prompt_b = iota_tokens(60, 10);
  harness.submit("a", {50, 51, 52, 53}, 8);
  harness.submit("b", prompt_b, 2);
  expect_steps(harness, {
      {{{"a", 4, 0, true}}, {"a"}, {"b"}, 4, {}},
      {{{"a", 1, 4, true}, {"b", 4, 0, false}}, {"a", "b"}, {}, 9, {}},
      {{{"a", 1, 5, true}, {"b", 4, 4, false}}, {"a", "b"}, {}, 14, {}},
      {{{"a", 1, 6, true}, {"b", 1, 8, false}}, {"a", "b"}, {}, 16, {}},  // only one slot left for b's chunk
      {{{"a", 1, 7, true}}, {"a"}, {"b"}, 8, {}},   // b retracted into the cache; evicting its 1-token leaf suffices
      {{{"a", 1, 8, true}}, {"a"}, {"b"}, 9, {}},   // b's first chunk is still cached but 4 more slots are not free
  });
  EXPECT_EQ(harness.scheduler().snapshot().num_retractions, 1);
  harness.run_until_idle();
  EXPECT_EQ(harness.log("a").tokens(), reference_greedy(harness.model(), {50, 51, 52, 53}, 8));
  EXPECT_EQ(harness.log("b").tokens(), reference_greedy(harness.model(), prompt_b, 2));
}

TEST(SchedulerTable, AbortMidRunFreesKv) {
  SchedulerHarness harness(table_config());
  harness.submit("a", {50, 51, 52, 53}, 4);
  harness.submit("b", {60, 61, 62, 63}, 10);
  harness.submit("c", {70, 71}, 3);
  ASSERT_TRUE(harness.scheduler().abort("c"));  // still waiting
  EXPECT_EQ(harness.log("c").last().finish_reason, FinishReason::kAbort);
  expect_steps(harness, {
      {{{"a", 4, 0, true}, {"b", 4, 0, true}}, {"a", "b"}, {}, 8, {"c"}},
      {{{"a", 1, 4, true}, {"b", 1, 4, true}}, {"a", "b"}, {}, 10, {"c"}},
  });
  ASSERT_TRUE(harness.scheduler().abort("b"));
  EXPECT_FALSE(harness.scheduler().abort("b"));
  EXPECT_FALSE(harness.scheduler().abort("unknown"));
  EXPECT_EQ(harness.log("b").last().finish_reason, FinishReason::kAbort);
  EXPECT_EQ(harness.log("b").last().completion_tokens, 2);
  harness.scheduler().check_invariants();
  EXPECT_EQ(harness.scheduler().snapshot().kv_used, 5);  // only a's KV
  expect_steps(harness, {
      {{{"a", 1, 5, true}}, {"a"}, {}, 6, {"b", "c"}},
      {{{"a", 1, 6, true}}, {}, {}, 0, {"a", "b", "c"}},
  });
  EXPECT_EQ(harness.log("a").tokens(), reference_greedy(harness.model(), {50, 51, 52, 53}, 4));
}

TEST(SchedulerTable, PagedRequestFillingThePoolIsAdmittedDespiteReservation) {
  scheduler::SchedulerConfig config = table_config(12);
  config.page_size = 4;
  config.init_new_token_ratio = 0.7;  // 8 prompt slots + 5 reserved > 12: only valid with nothing running
  config.min_new_token_ratio = 0.7;
  SchedulerHarness harness(config);
  harness.submit("a", {2, 3, 4, 5, 6}, 7);
  expect_steps(harness, {
      {{{"a", 5, 0, true}}, {"a"}, {}, 8, {}},
      {{{"a", 1, 5, true}}, {"a"}, {}, 8, {}},
      {{{"a", 1, 6, true}}, {"a"}, {}, 8, {}},
      {{{"a", 1, 7, true}}, {"a"}, {}, 8, {}},
      {{{"a", 1, 8, true}}, {"a"}, {}, 12, {}},
  });
  harness.run_until_idle();
  EXPECT_EQ(harness.log("a").tokens(), reference_greedy(harness.model(), {2, 3, 4, 5, 6}, 7));
  EXPECT_EQ(harness.scheduler().snapshot().kv_evictable, 8);  // 11 tokens with KV: two whole pages cached
}

TEST(SchedulerTable, ThrowingCallbackDoesNotBreakTheScheduler) {
  SchedulerHarness harness(table_config());
  scheduler::GenerateRequest request;
  request.request_id = "throws";
  request.input_ids = {4, 5};
  request.sampling = SchedulerHarness::greedy();
  request.sampling.max_new_tokens = 3;
  harness.scheduler().submit(request, [](const GenerationEvent&) { throw std::runtime_error("callback failed"); });
  harness.submit("fine", {6, 7}, 3);
  harness.run_until_idle();
  EXPECT_EQ(harness.log("fine").tokens().size(), 3u);
}

TEST(SchedulerTable, LongestPrefixMatchPolicyAdmitsCachedPromptsFirst) {
  for (const auto policy : {scheduler::SchedulePolicy::kFcfs, scheduler::SchedulePolicy::kLpm}) {
    SCOPED_TRACE(policy == scheduler::SchedulePolicy::kLpm ? "lpm" : "fcfs");
    scheduler::SchedulerConfig config = table_config();
    config.max_running_requests = 1;
    config.schedule_policy = policy;
    SchedulerHarness harness(config);
    harness.submit("warm", {7, 7, 7, 7, 7}, 1);
    harness.run_until_idle();
    harness.submit("cold", {9, 9, 9}, 1);
    harness.submit("hot", {7, 7, 7, 7, 8}, 1);
    ASSERT_TRUE(harness.step());
    const auto& scheduled = harness.scheduler().snapshot().last_step;
    ASSERT_EQ(scheduled.size(), 1u);
    if (policy == scheduler::SchedulePolicy::kLpm) EXPECT_EQ(scheduled[0], (StepRecord{"hot", 1, 4, true}));
    else EXPECT_EQ(scheduled[0], (StepRecord{"cold", 3, 0, true}));
    harness.run_until_idle();
  }
  EXPECT_EQ(scheduler::parse_schedule_policy("lpm"), scheduler::SchedulePolicy::kLpm);
  EXPECT_THROW(scheduler::parse_schedule_policy("random"), Error);
}

TEST(SchedulerTable, LogprobsAreReportedPerToken) {
  SchedulerHarness harness(table_config());
  scheduler::SamplingParams params = SchedulerHarness::greedy();
  params.logprobs = true;
  params.top_logprobs = 2;
  harness.submit("a", {3, 4, 5}, 2, params);
  harness.run_until_idle();
  std::vector<int32_t> sequence = {3, 4, 5};
  for (const GenerationEvent& event : harness.log("a").events) {
    ASSERT_EQ(event.logprobs.size(), 1u);
    const scheduler::TokenLogprob& logprob = event.logprobs[0];
    EXPECT_EQ(logprob.token_id, event.new_token_ids[0]);
    ASSERT_EQ(logprob.top.size(), 2u);
    EXPECT_EQ(logprob.top[0].first, logprob.token_id);  // the fake model's chosen token is the most likely
    EXPECT_FLOAT_EQ(logprob.top[0].second, logprob.logprob);
    EXPECT_LT(logprob.top[1].second, logprob.logprob);
    std::vector<float> row = harness.model().logits_for(sequence);
    double sum = 0;
    for (float value : row) sum += std::exp(static_cast<double>(value));
    EXPECT_NEAR(logprob.logprob, 4.0 - std::log(sum), 1e-4);
    sequence.push_back(logprob.token_id);
  }
}

TEST(SchedulerTable, InvalidRequestsGetOneErrorEvent) {
  scheduler::SchedulerConfig config = table_config(32);
  config.max_position_embeddings = 24;
  SchedulerHarness harness(config);
  harness.submit("long", iota_tokens(2, 20), 5);  // 25 > 24 positions
  harness.submit("empty", {}, 5);
  harness.submit("vocab", {5, 300}, 5);
  scheduler::SamplingParams bad = SchedulerHarness::greedy();
  bad.top_p = 1.5f;
  harness.submit("params", {5}, 5, bad);
  harness.submit("zero", {5}, 0);
  for (const char* id : {"long", "empty", "vocab", "params"}) {
    ASSERT_EQ(harness.log(id).events.size(), 1u) << id;
    EXPECT_EQ(harness.log(id).last().finish_reason, FinishReason::kError) << id;
    EXPECT_NE(harness.log(id).last().error_message.find(id), std::string::npos) << harness.log(id).last().error_message;
  }
  EXPECT_NE(harness.log("long").last().error_message.find("exceeds the context of 24 tokens"), std::string::npos);
  EXPECT_EQ(harness.log("zero").last().finish_reason, FinishReason::kLength);
  harness.submit("ok", {5, 6}, 2);
  harness.submit("ok", {5, 6}, 2);  // duplicate id while the first is queued
  EXPECT_EQ(harness.log("ok").events.size(), 1u);
  EXPECT_EQ(harness.log("ok").last().finish_reason, FinishReason::kError);
  EXPECT_TRUE(harness.scheduler().has_requests());
  EXPECT_EQ(harness.scheduler().max_context_tokens(), 24);
}

TEST(SchedulerTable, EosAndStopTokenIds) {
  // Token 7 follows any sequence ending in 6; token 1 (EOS) follows 7.
  NextTokenFn next = [](const std::vector<int32_t>& sequence) {
    return sequence.back() == 6 ? 7 : sequence.back() == 7 ? 1 : 6;
  };
  SchedulerHarness harness(table_config(), false, next);
  harness.submit("eos", {5}, 10);
  scheduler::SamplingParams stop_on_7 = SchedulerHarness::greedy();
  stop_on_7.stop_token_ids = {7};
  harness.submit("stop_token", {5}, 10, stop_on_7);
  scheduler::SamplingParams ignore = SchedulerHarness::greedy();
  ignore.ignore_eos = true;
  harness.submit("ignore_eos", {5}, 5, ignore);
  harness.run_until_idle();
  EXPECT_EQ(harness.log("eos").tokens(), (std::vector<int32_t>{6, 7, 1}));
  EXPECT_EQ(harness.log("eos").last().finish_reason, FinishReason::kStop);
  EXPECT_EQ(harness.log("eos").last().matched_stop_token, 1);
  EXPECT_EQ(harness.log("stop_token").tokens(), (std::vector<int32_t>{6, 7}));
  EXPECT_EQ(harness.log("stop_token").last().matched_stop_token, 7);
  EXPECT_EQ(harness.log("ignore_eos").tokens(), (std::vector<int32_t>{6, 7, 1, 6, 7}));
  EXPECT_EQ(harness.log("ignore_eos").last().finish_reason, FinishReason::kLength);
}

class StopStringTest : public ::testing::Test {
 protected:
  // The fake model spells `script` byte by byte after the prompt (one token per byte).
  NextTokenFn spell(std::string script, size_t prompt_len) {
    return [script, prompt_len](const std::vector<int32_t>& sequence) {
      const size_t index = sequence.size() - prompt_len;
      return index < script.size() ? static_cast<int32_t>(static_cast<unsigned char>(script[index])) : 256;
    };
  }
  tokenizer::Tokenizer tokenizer_ = tokenizer::Tokenizer::from_json(byte_tokenizer_json(), byte_tokenizer_config_json());
};

TEST_F(StopStringTest, StopStringSplitAcrossTokensIsHeldBackAndRemoved) {
  scheduler::SchedulerConfig config = table_config();
  config.eos_token_ids = {};
  SchedulerHarness harness(config, false, spell("Hi <STX é<STOP> tail", 1), &tokenizer_);
  scheduler::SamplingParams params = SchedulerHarness::greedy();
  params.stop = {"<STOP>"};
  harness.submit("a", {65}, 40, params);
  harness.run_until_idle();
  const RequestLog& log = harness.log("a");
  std::vector<std::string> deltas;
  for (const GenerationEvent& event : log.events) deltas.push_back(event.text_delta);
  const std::vector<std::string> expected = {"H", "i", " ", "", "", "", "<STX", " ", "", "é", "", "", "", "", "", ""};
  EXPECT_EQ(deltas, expected);
  EXPECT_EQ(log.text(), "Hi <STX é");
  EXPECT_EQ(log.last().finish_reason, FinishReason::kStop);
  EXPECT_EQ(log.last().matched_stop, "<STOP>");
  EXPECT_EQ(log.tokens().size(), 16u);  // the tokens of the stop string are reported, its text is not
}

TEST_F(StopStringTest, HeldTextIsReleasedAtLengthAndEos) {
  scheduler::SchedulerConfig config = table_config();
  config.eos_token_ids = {};  // the tokenizer's <eos> (256) is added by the scheduler
  SchedulerHarness harness(config, false, spell("ab<S", 1), &tokenizer_);
  scheduler::SamplingParams params = SchedulerHarness::greedy();
  params.stop = {"<STOP>", "zz"};
  harness.submit("length", {65}, 4, params);
  harness.submit("eos", {66}, 10, params);
  harness.run_until_idle();
  EXPECT_EQ(harness.log("length").text(), "ab<S");
  EXPECT_EQ(harness.log("length").last().finish_reason, FinishReason::kLength);
  EXPECT_EQ(harness.log("eos").text(), "ab<S");
  EXPECT_EQ(harness.log("eos").last().finish_reason, FinishReason::kStop);
  EXPECT_EQ(harness.log("eos").last().matched_stop_token, 256);
}

}  // namespace
}  // namespace fathom::testing
