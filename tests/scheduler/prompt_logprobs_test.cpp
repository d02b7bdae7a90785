// Prompt logprobs (prompt_logprob_start): every scored prompt token against log_softmax of the fake model's logits
// for its prefix, under chunked prefill, a per-step row budget, prefix-cache hits (which skip rows to score only
// where the cache holds their scores), KV pressure with retractions, and overlap scheduling; bad starts get one
// error event.
#include <gtest/gtest.h>

#include <cmath>

#include "sampling/sampler.h"
#include "scheduler_harness.h"

namespace fathom::testing {
namespace {

// What the first token's event must carry: positions [max(start, 1), prompt size) scored under their prefixes.
std::vector<scheduler::TokenLogprob> reference_prompt_logprobs(const FakeModel& model, const std::vector<int32_t>& prompt,
                                                               int64_t start, int32_t top_n) {
  std::vector<scheduler::TokenLogprob> expected;
  for (size_t position = static_cast<size_t>(std::max<int64_t>(start, 1)); position < prompt.size(); ++position) {
    const std::vector<float> row = model.logits_for(std::vector<int32_t>(prompt.begin(), prompt.begin() + position));
    std::vector<float> logprobs(row.size());
    sampling::log_softmax(row.data(), static_cast<int64_t>(row.size()), logprobs.data());
    scheduler::TokenLogprob entry{prompt[position], logprobs[static_cast<size_t>(prompt[position])], {}, 1};
    for (float logit : row) entry.rank += logit > row[static_cast<size_t>(prompt[position])] ? 1 : 0;
    for (int32_t id : sampling::top_indices(logprobs.data(), static_cast<int64_t>(row.size()), top_n)) {
      entry.top.emplace_back(id, logprobs[static_cast<size_t>(id)]);
    }
    expected.push_back(entry);
  }
  return expected;
}

void expect_prompt_logprobs(const RequestLog& log, const std::vector<scheduler::TokenLogprob>& expected,
                            const std::string& id) {
  ASSERT_FALSE(log.events.empty()) << id;
  const GenerationEvent& first = log.events.front();
  ASSERT_EQ(first.new_token_ids.size(), 1u) << id << ": " << first.error_message;
  ASSERT_EQ(first.prompt_logprobs.size(), expected.size()) << id;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(first.prompt_logprobs[i].token_id, expected[i].token_id) << id << " " << i;
    EXPECT_NEAR(first.prompt_logprobs[i].logprob, expected[i].logprob, 1e-5) << id << " " << i;
    EXPECT_EQ(first.prompt_logprobs[i].rank, expected[i].rank) << id << " " << i;
    ASSERT_EQ(first.prompt_logprobs[i].top.size(), expected[i].top.size()) << id << " " << i;
    for (size_t k = 0; k < expected[i].top.size(); ++k) {
      EXPECT_EQ(first.prompt_logprobs[i].top[k].first, expected[i].top[k].first) << id << " " << i << " " << k;
      EXPECT_NEAR(first.prompt_logprobs[i].top[k].second, expected[i].top[k].second, 1e-5) << id << " " << i << " " << k;
    }
  }
  for (size_t e = 1; e < log.events.size(); ++e) EXPECT_TRUE(log.events[e].prompt_logprobs.empty()) << id << " " << e;
}

scheduler::SamplingParams scored(int64_t start, int32_t top_n) {
  scheduler::SamplingParams params = SchedulerHarness::greedy();
  params.prompt_logprob_start = start;
  params.logprobs = top_n > 0;
  params.top_logprobs = top_n;
  return params;
}

struct Variant {
  const char* name;
  int64_t chunk;        // chunked_prefill_size
  int64_t rows;         // max_scored_rows_per_step
  int64_t kv;           // max_total_tokens
  bool overlap;
};

class PromptLogprobsTest : public ::testing::TestWithParam<Variant> {};

TEST_P(PromptLogprobsTest, MatchTheReferenceUnderEveryScheduling) {
  const Variant& variant = GetParam();
  scheduler::SchedulerConfig config = table_config(variant.kv);
  config.chunked_prefill_size = variant.chunk;
  config.max_scored_rows_per_step = variant.rows;
  SchedulerHarness harness(config, variant.overlap);
  const std::vector<int32_t> prompt = {3, 4, 5, 6, 7, 8, 9, 10, 11};
  harness.submit("warm", prompt, 2);  // puts the prompt in the prefix cache
  harness.run_until_idle();
  harness.submit("all", prompt, 3, scored(0, 2));
  harness.submit("tail", prompt, 3, scored(6, 0));
  harness.submit("other", {20, 21, 22, 23, 24, 25, 26}, 4, scored(1, 3));
  harness.submit("none", prompt, 2, scored(9, 1));  // start == prompt length: nothing to score
  harness.run_until_idle();
  expect_prompt_logprobs(harness.log("all"), reference_prompt_logprobs(harness.model(), prompt, 0, 2), "all");
  expect_prompt_logprobs(harness.log("tail"), reference_prompt_logprobs(harness.model(), prompt, 6, 0), "tail");
  expect_prompt_logprobs(harness.log("other"),
                         reference_prompt_logprobs(harness.model(), {20, 21, 22, 23, 24, 25, 26}, 1, 3), "other");
  expect_prompt_logprobs(harness.log("none"), {}, "none");
  // The cache serves the positions before the first scored row (row start - 1 scores token start), and further
  // positions only with their scores ("all"'s, when it scored them before "tail" was admitted).
  EXPECT_EQ(harness.log("all").last().cached_prompt_tokens, 0);
  if (variant.kv >= 64) EXPECT_GE(harness.log("tail").last().cached_prompt_tokens, 5);  // else evicted, maybe
  for (const char* id : {"all", "tail", "other", "none"}) {
    EXPECT_NE(harness.log(id).last().finish_reason, FinishReason::kError) << id;
  }
  EXPECT_EQ(harness.log("all").tokens(), reference_greedy(harness.model(), prompt, 3));
}

INSTANTIATE_TEST_SUITE_P(
    Scheduling, PromptLogprobsTest,
    ::testing::Values(Variant{"whole_prompts", 2048, 256, 64, false}, Variant{"chunks_of_3", 3, 256, 64, false},
                      Variant{"one_row_per_step", 2048, 1, 64, false}, Variant{"two_rows_overlap", 4, 2, 64, true},
                      Variant{"tight_kv", 5, 3, 24, false}, Variant{"tight_kv_overlap", 5, 3, 24, true}),
    [](const auto& info) { return std::string(info.param.name); });

// Scores kept in the prefix cache serve later requests scoring the same prefix: all of the prompt but its last token
// (which must run) when the cached scores carry enough alternatives, none when they carry too few, the shared part
// of a longer prompt; with pages of 4 tokens the match (and so the reuse) stops at a page boundary. Each request's
// prompt logprobs equal the reference however they were obtained; deterministic inference shares them too.
struct ReuseVariant {
  const char* name;
  int64_t page_size;
  bool deterministic;
  bool overlap;
};

class PromptScoreReuse : public ::testing::TestWithParam<ReuseVariant> {};

TEST_P(PromptScoreReuse, CachedScoresServeLaterRequests) {
  scheduler::SchedulerConfig config = table_config(128);
  config.page_size = GetParam().page_size;
  config.deterministic = GetParam().deterministic;
  SchedulerHarness harness(config, GetParam().overlap);
  const std::vector<int32_t> prompt = {3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};  // 12 tokens: rows 0..10
  const int64_t page = GetParam().page_size;
  harness.submit("first", prompt, 2, scored(0, 3));
  harness.run_until_idle();
  EXPECT_EQ(harness.log("first").last().cached_prompt_tokens, 0);
  const int64_t computed_before = harness.model().tokens_computed();
  harness.submit("same", prompt, 2, scored(0, 2));
  harness.run_until_idle();
  // "first" published its 13 computed positions in whole pages, with the scores of positions 1..11 among them; a
  // match needs the score of every position up to its end: all but the last prompt token, in whole pages.
  const int64_t published = 13 / page * page;
  const int64_t reusable = std::min<int64_t>(11, published - 1) / page * page;
  EXPECT_EQ(harness.log("same").last().cached_prompt_tokens, reusable);
  EXPECT_EQ(harness.model().tokens_computed() - computed_before, 12 - reusable + 1);  // the rest, then one decode
  expect_prompt_logprobs(harness.log("same"), reference_prompt_logprobs(harness.model(), prompt, 0, 2), "same");

  harness.submit("tail", prompt, 2, scored(7, 1));  // rows 6..10, all cached
  harness.run_until_idle();
  EXPECT_EQ(harness.log("tail").last().cached_prompt_tokens, reusable);
  expect_prompt_logprobs(harness.log("tail"), reference_prompt_logprobs(harness.model(), prompt, 7, 1), "tail");

  harness.submit("more_alternatives", prompt, 2, scored(0, 5));  // the cache holds 3 per token: recomputed
  harness.run_until_idle();
  EXPECT_EQ(harness.log("more_alternatives").last().cached_prompt_tokens, 0);
  expect_prompt_logprobs(harness.log("more_alternatives"), reference_prompt_logprobs(harness.model(), prompt, 0, 5),
                         "more_alternatives");

  std::vector<int32_t> longer = prompt;
  longer.insert(longer.end(), {40, 41, 42, 43});
  harness.submit("longer", longer, 2, scored(2, 1));
  harness.run_until_idle();
  // The cached scores reach position 11 at most: rows 1..10 come from the cache, row 11 (position 12's score) runs.
  EXPECT_EQ(harness.log("longer").last().cached_prompt_tokens, reusable);
  expect_prompt_logprobs(harness.log("longer"), reference_prompt_logprobs(harness.model(), longer, 2, 1), "longer");
  EXPECT_EQ(harness.log("longer").tokens(), reference_greedy(harness.model(), longer, 2));
  harness.scheduler().check_invariants();
}

INSTANTIATE_TEST_SUITE_P(Caching, PromptScoreReuse,
                         ::testing::Values(ReuseVariant{"tokens", 1, false, false},
                                           ReuseVariant{"pages_of_4", 4, false, false},
                                           ReuseVariant{"pages_of_5", 5, false, true},
                                           ReuseVariant{"deterministic", 1, true, false},
                                           ReuseVariant{"overlap", 1, false, true}),
                         [](const auto& info) { return std::string(info.param.name); });

// A request retracted while scoring its prompt (or while its sampling chunk is in flight, overlapped) scores the rest
// after re-admission, and keeps what a stale step scored.
class PromptLogprobsRetraction : public ::testing::TestWithParam<bool> {};  // param: overlap scheduling

TEST_P(PromptLogprobsRetraction, SurviveRetraction) {
  scheduler::SchedulerConfig config = table_config(20);
  config.chunked_prefill_size = 4;
  config.max_scored_rows_per_step = 3;
  SchedulerHarness harness(config, GetParam());
  std::vector<std::vector<int32_t>> prompts;
  for (int r = 0; r < 3; ++r) {
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < 7; ++i) prompt.push_back(30 + 20 * r + i);
    prompts.push_back(prompt);
  }
  for (int r = 0; r < 3; ++r) harness.submit("r" + std::to_string(r), prompts[static_cast<size_t>(r)], 6, scored(0, 1));
  harness.run_until_idle();
  EXPECT_GT(harness.scheduler().snapshot().num_retractions, 0);
  for (int r = 0; r < 3; ++r) {
    const std::string id = "r" + std::to_string(r);
    expect_prompt_logprobs(harness.log(id), reference_prompt_logprobs(harness.model(), prompts[static_cast<size_t>(r)], 0, 1), id);
    EXPECT_EQ(harness.log(id).tokens(), reference_greedy(harness.model(), prompts[static_cast<size_t>(r)], 6)) << id;
  }
}

// Overlapped: the newest request's last prompt chunk (scoring rows and sampling) is in flight when the next step's
// preparation retracts it for an older request's decode slot. Its scores and token still count.
TEST(PromptLogprobs, RetractedWhileItsSamplingChunkIsInFlight) {
  SchedulerHarness harness(table_config(11), /*overlap=*/true);
  const std::vector<int32_t> older = {3, 4, 5, 6}, newest = {30, 31, 32, 33, 34, 35, 36};
  scheduler::SamplingParams plain = SchedulerHarness::greedy();
  plain.ignore_eos = true;
  harness.submit("older", older, 6, plain);
  scheduler::SamplingParams params = scored(0, 2);
  params.ignore_eos = true;
  harness.submit("newest", newest, 2, params);
  harness.run_until_idle();
  EXPECT_GE(harness.scheduler().snapshot().num_retractions, 1);
  EXPECT_NE(harness.log("newest").last().finish_reason, FinishReason::kError) << harness.log("newest").last().error_message;
  expect_prompt_logprobs(harness.log("newest"), reference_prompt_logprobs(harness.model(), newest, 0, 2), "newest");
  EXPECT_EQ(harness.log("newest").tokens(), reference_greedy(harness.model(), newest, 2));
  EXPECT_EQ(harness.log("older").tokens(), reference_greedy(harness.model(), older, 6));
}

INSTANTIATE_TEST_SUITE_P(Loops, PromptLogprobsRetraction, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Overlap" : "Sequential"; });

TEST(PromptLogprobs, StartsOutsideThePromptAreErrors) {
  SchedulerHarness harness(table_config());
  harness.submit("past", {5, 6, 7}, 2, scored(4, 0));
  harness.submit("negative", {5, 6, 7}, 2, scored(-2, 0));
  for (const char* id : {"past", "negative"}) {
    ASSERT_EQ(harness.log(id).events.size(), 1u) << id;
    EXPECT_EQ(harness.log(id).last().finish_reason, FinishReason::kError) << id;
    EXPECT_NE(harness.log(id).last().error_message.find("prompt_logprob_start"), std::string::npos);
  }
}

}  // namespace
}  // namespace fathom::testing
