// The whole model on the GPU (model/cuda) against transformers' golden logits (the fixtures, w8a8 tolerances of
// the CPU path) and against the CPU w8a8 forward at DeepSeek-V3's real dimensions (dummy weights). Skips without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "core/error.h"
#include "kernels/cpu/rms_norm.h"
#include "model/cuda/cuda_model.h"
#include "model/deepseek_v3_model.h"
#include "model/generation.h"
#include "model/safetensors.h"
#include "model/weight_loader.h"
#include "sampling/sampler.h"
#include "cuda_model_test_support.h"

namespace fathom::model {
namespace {

using namespace cuda_test;  // NOLINT: the shared fixtures and tolerances

uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// All-row logits of a prefill of `ids` in chunks of `chunk` tokens (0: one chunk) at slots `slots`.
std::vector<float> prefill_logits(cuda::CudaDeepseekV3Model& model, const std::vector<int32_t>& ids,
                                  const std::vector<int32_t>& slots, int64_t chunk) {
  const int64_t count = static_cast<int64_t>(ids.size()), step = chunk > 0 ? chunk : count;
  std::vector<float> logits;
  for (int64_t begin = 0; begin < count; begin += step) {
    const int64_t end = std::min(count, begin + step);
    ForwardBatch batch;
    batch.add_sequence(std::vector<int32_t>(ids.begin() + begin, ids.begin() + end), begin, slots.data());
    batch.attention_form = AttentionForm::kExpanded;
    std::vector<int64_t> rows(static_cast<size_t>(end - begin));
    std::iota(rows.begin(), rows.end(), 0);
    std::vector<float> part = model.forward(batch, rows);
    logits.insert(logits.end(), part.begin(), part.end());
  }
  return logits;
}

class CudaGoldenFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGoldenFixture, LogitsMatchTransformersWithinW8A8Tolerance) {
  REQUIRE_GPU();
  LoadedModel loaded = load_fixture(GetParam());
  cuda::CudaDeepseekV3Model model(loaded.config, loaded.weights, small_options(1024));
  const int64_t vocab = loaded.config.vocab_size;
  double worst = 0;
  int64_t rows = 0, agree = 0;
  for (const GoldenSequence& golden : read_golden(GetParam())) {
    const std::vector<float> ours = prefill_logits(model, golden.ids, iota_slots(static_cast<int64_t>(golden.ids.size()), 7), 0);
    const double error = relative_l2(ours, golden.logits);
    worst = std::max(worst, error);
    EXPECT_LE(error, kFixtureTolerance) << "T=" << golden.ids.size();
    for (size_t row = 0; row < golden.ids.size(); ++row) {
      ++rows;
      agree += argmax(ours.data() + row * vocab, vocab) == argmax(golden.logits.data() + row * vocab, vocab);
    }
  }
  EXPECT_GE(static_cast<double>(agree) / static_cast<double>(rows), 0.98) << agree << " of " << rows;
  std::printf("[cuda] %s: worst rel L2 logits %.2e, top-1 agreement %lld/%lld\n", GetParam().c_str(), worst,
              static_cast<long long>(agree), static_cast<long long>(rows));
}

TEST_P(CudaGoldenFixture, ChunkedPrefillAndDecodeAgreeWithOneShot) {
  REQUIRE_GPU();
  LoadedModel loaded = load_fixture(GetParam());
  cuda::CudaDeepseekV3Model model(loaded.config, loaded.weights, small_options(1024));
  const int64_t vocab = loaded.config.vocab_size;
  std::vector<GoldenSequence> goldens = read_golden(GetParam());
  const GoldenSequence& golden = *std::max_element(goldens.begin(), goldens.end(), [](const auto& a, const auto& b) {
    return a.ids.size() < b.ids.size();
  });
  const int64_t count = static_cast<int64_t>(golden.ids.size());
  ASSERT_GE(count, 4);
  const std::vector<int32_t> slots = iota_slots(count, 100);
  const std::vector<float> one_shot = prefill_logits(model, golden.ids, slots, 0);
  const std::vector<float> chunked = prefill_logits(model, golden.ids, slots, 3);
  // Chunks of 3 tokens run the gemv GEMMs, the one-shot prefill of 9+ tokens the wgmma decode kernel: different
  // bf16 roundings, which the tiny models' near-tied routes amplify (1.9e-2 to 4.5e-2 measured on an H200), so the
  // bound is the fixtures' rounding bound; the deterministic-inference test checks this comparison bit for bit.
  EXPECT_LE(relative_l2(chunked, one_shot), kFixtureTolerance);
  for (int64_t row = 0; row < count; ++row) {
    EXPECT_EQ(argmax(chunked.data() + row * vocab, vocab), argmax(one_shot.data() + row * vocab, vocab)) << "row " << row;
  }
  // Prefill all but the last token, then decode it with absorbed attention.
  std::vector<int32_t> prefix(golden.ids.begin(), golden.ids.end() - 1);
  prefill_logits(model, prefix, slots, 0);
  ForwardBatch decode;
  decode.add_sequence({golden.ids.back()}, count - 1, slots.data());
  const std::vector<float> decoded = model.forward(decode, {0});
  const float* last = one_shot.data() + (count - 1) * vocab;
  EXPECT_LE(relative_l2(decoded.data(), last, static_cast<size_t>(vocab)), 2e-2);
  EXPECT_EQ(argmax(decoded.data(), vocab), argmax(last, vocab));
}

TEST_P(CudaGoldenFixture, DecodeDoesNotDependOnBatchComposition) {
  REQUIRE_GPU();
  LoadedModel loaded = load_fixture(GetParam());
  cuda::CudaDeepseekV3Model model(loaded.config, loaded.weights, small_options(4096));
  const int64_t vocab = loaded.config.vocab_size;
  const std::vector<GoldenSequence> goldens = read_golden(GetParam());
  // Every sequence prefilled into its own slot range; then one decode step alone and all together.
  std::vector<std::vector<int32_t>> slots;
  for (size_t s = 0; s < goldens.size(); ++s) {
    slots.push_back(iota_slots(static_cast<int64_t>(goldens[s].ids.size()) + 1, static_cast<int32_t>(s * 256)));
    prefill_logits(model, goldens[s].ids, slots.back(), 0);
  }
  std::vector<float> alone;
  for (size_t s = 0; s < goldens.size(); ++s) {
    ForwardBatch decode;
    decode.add_sequence({goldens[s].ids.front()}, static_cast<int64_t>(goldens[s].ids.size()), slots[s].data());
    std::vector<float> logits = model.forward(decode, {0});
    alone.insert(alone.end(), logits.begin(), logits.end());
  }
  ForwardBatch together;
  std::vector<int64_t> rows;
  for (size_t s = 0; s < goldens.size(); ++s) {
    together.add_sequence({goldens[s].ids.front()}, static_cast<int64_t>(goldens[s].ids.size()), slots[s].data());
    rows.push_back(static_cast<int64_t>(s));
  }
  const std::vector<float> batched = model.forward(together, rows);
  EXPECT_LE(relative_l2(batched, alone), 1e-3);
  for (size_t s = 0; s < goldens.size(); ++s) {
    EXPECT_EQ(argmax(batched.data() + s * vocab, vocab), argmax(alone.data() + s * vocab, vocab)) << "sequence " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGoldenFixture, ::testing::ValuesIn(fixture_dirs()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = std::filesystem::path(info.param).filename().string();
                           for (char& c : name) if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaGoldenFixture);

// Decode through captured CUDA graphs (batch 3 padded to the captured 4, and batch 20 padded to 24, whose GEMMs run
// the wgmma decode kernel) against the same padded shapes run eagerly (--disable-cuda-graph): bit-identical logits,
// so greedy output does not depend on graphs. Against unpadded eager decode (no padded sizes at all): equal up to
// the split-KV plan's fp32 rounding, same greedy tokens.
// kv_page_size 64: the decode reads a page-granular table (graph replays and padded entries included); the slots
// below come in whole 64-slot pages (each sequence from a multiple of 128).
void check_graph_decode(const LoadedModel& loaded, const std::string& fixture, size_t num_sequences,
                        int64_t kv_page_size = 1) {
  cuda::CudaModelOptions graph_options = small_options(4096);
  graph_options.kv_page_size = kv_page_size;
  graph_options.max_decode_batch = 32;
  graph_options.cuda_graph_batch_sizes = {1, 4, 24};
  cuda::CudaModelOptions padded_eager_options = graph_options;
  padded_eager_options.capture_cuda_graphs = false;
  cuda::CudaModelOptions unpadded_options = small_options(4096);
  unpadded_options.max_decode_batch = 32;
  unpadded_options.kv_page_size = kv_page_size;
  cuda::CudaDeepseekV3Model unpadded(loaded.config, loaded.weights, unpadded_options);
  cuda::CudaDeepseekV3Model eager(loaded.config, loaded.weights, padded_eager_options);
  cuda::CudaDeepseekV3Model graphed(loaded.config, loaded.weights, graph_options);
  EXPECT_GE(graphed.stats().num_cuda_graphs, 3);  // 3 sizes x 1 or 2 context buckets
  EXPECT_EQ(eager.stats().num_cuda_graphs, 0);
  const int64_t vocab = loaded.config.vocab_size;
  const std::vector<GoldenSequence> all = read_golden(fixture);
  std::vector<GoldenSequence> goldens;  // the fixture's sequences, repeated up to num_sequences
  for (size_t s = 0; s < num_sequences; ++s) goldens.push_back(all[s % all.size()]);
  std::vector<std::vector<int32_t>> slots;
  std::vector<int32_t> next;
  for (size_t s = 0; s < goldens.size(); ++s) {
    slots.push_back(iota_slots(static_cast<int64_t>(goldens[s].ids.size()) + 8, static_cast<int32_t>(s * 128)));
    const std::vector<float> a = prefill_logits(eager, goldens[s].ids, slots.back(), 0);
    const std::vector<float> b = prefill_logits(graphed, goldens[s].ids, slots.back(), 0);
    ASSERT_EQ(a, b);  // prefill is eager in both
    ASSERT_EQ(prefill_logits(unpadded, goldens[s].ids, slots.back(), 0), a);
    next.push_back(argmax(a.data() + a.size() - vocab, vocab));
  }
  for (int step = 0; step < 6; ++step) {
    ForwardBatch decode;
    std::vector<int64_t> rows;
    for (size_t s = 0; s < goldens.size(); ++s) {
      decode.add_sequence({next[s]}, static_cast<int64_t>(goldens[s].ids.size()) + step, slots[s].data());
      rows.push_back(static_cast<int64_t>(s));
    }
    const std::vector<float> a = eager.forward(decode, rows);
    const std::vector<float> b = graphed.forward(decode, rows);
    const std::vector<float> c = unpadded.forward(decode, rows);
    EXPECT_EQ(a, b) << "step " << step << ": graph replay and padded eager decode differ";
    EXPECT_LE(relative_l2(c, a), 1e-3) << "step " << step;
    for (size_t s = 0; s < goldens.size(); ++s) {
      const int32_t token = argmax(a.data() + s * vocab, vocab);
      EXPECT_EQ(argmax(c.data() + s * vocab, vocab), token) << "step " << step << " sequence " << s;
      next[s] = token;
    }
  }
  EXPECT_EQ(graphed.stats().graph_forwards, 6);
  EXPECT_EQ(eager.stats().graph_forwards, 0);
}

TEST_P(CudaGoldenFixture, CudaGraphDecodeMatchesEagerDecode) {
  REQUIRE_GPU();
  const LoadedModel loaded = load_fixture(GetParam());
  check_graph_decode(loaded, GetParam(), 3);
  check_graph_decode(loaded, GetParam(), 20);
  check_graph_decode(loaded, GetParam(), 3, /*kv_page_size=*/64);
}

double log_softmax_at(const float* logits, int64_t vocab, int32_t token) {
  const float max_logit = *std::max_element(logits, logits + vocab);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - max_logit);
  return double(logits[token]) - max_logit - std::log(sum);
}

// Device sampling (the serving path): greedy rows give the argmax of the logits the host would have received, the
// log-probability is log_softmax(logits)[token], seeded rows draw the same token alone or batched, in graph replays
// and in eager forwards, and rows sampled on the host and on the device can be mixed in one forward.
// The fixture's first three golden sequences (fewer if it has fewer), prefilled at slots from s * 512 with 8 slots
// each to grow into (`slots`).
std::vector<GoldenSequence> prefill_three_goldens(cuda::CudaDeepseekV3Model& model, const std::string& fixture,
                                                  std::vector<std::vector<int32_t>>& slots) {
  std::vector<GoldenSequence> goldens = read_golden(fixture);
  goldens.resize(std::min<size_t>(goldens.size(), 3));
  for (size_t s = 0; s < goldens.size(); ++s) {
    slots.push_back(iota_slots(static_cast<int64_t>(goldens[s].ids.size()) + 8, static_cast<int32_t>(s * 512)));
    prefill_logits(model, goldens[s].ids, slots.back(), 0);
  }
  return goldens;
}

TEST_P(CudaGoldenFixture, DeviceSamplingMatchesHostLogits) {
  REQUIRE_GPU();
  LoadedModel loaded = load_fixture(GetParam());
  cuda::CudaModelOptions options = small_options(4096);
  options.cuda_graph_batch_sizes = {1, 4};
  cuda::CudaDeepseekV3Model model(loaded.config, loaded.weights, options);
  const int64_t vocab = loaded.config.vocab_size;
  std::vector<std::vector<int32_t>> slots;
  const std::vector<GoldenSequence> goldens = prefill_three_goldens(model, GetParam(), slots);
  ASSERT_EQ(goldens.size(), 3u);
  auto decode_batch = [&](const std::vector<size_t>& members) {
    ForwardBatch batch;
    for (size_t s : members) batch.add_sequence({goldens[s].ids.back()}, static_cast<int64_t>(goldens[s].ids.size()), slots[s].data());
    return batch;
  };
  sampling::DeviceSamplingRow greedy;
  sampling::DeviceSamplingRow seeded;
  seeded.temperature = 0.9f;
  seeded.top_p = 0.95f;
  seeded.top_k = 50;
  seeded.seed = 1234;
  seeded.step = 3;
  const std::vector<float> host = model.forward(decode_batch({0, 1, 2}), {0, 1, 2});  // [3, V]
  const cuda::ForwardResult all_greedy = model.forward(decode_batch({0, 1, 2}), {}, {0, 1, 2}, {greedy, greedy, greedy});
  ASSERT_EQ(all_greedy.tokens.size(), 3u);
  EXPECT_TRUE(all_greedy.logits.empty());
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(all_greedy.tokens[s], argmax(host.data() + s * vocab, vocab)) << s;
    EXPECT_NEAR(all_greedy.logprobs[s], log_softmax_at(host.data() + s * vocab, vocab, all_greedy.tokens[s]), 1e-4) << s;
  }
  // Sequence 1 seeded, alone (graph of 1) and in a batch of 3 (graph of 4) and eagerly (prefill form, one chunk).
  const cuda::ForwardResult alone = model.forward(decode_batch({1}), {}, {0}, {seeded});
  const cuda::ForwardResult batched = model.forward(decode_batch({0, 1, 2}), {0}, {1, 2}, {seeded, greedy});
  ASSERT_EQ(alone.tokens.size(), 1u);
  ASSERT_EQ(batched.tokens.size(), 2u);
  EXPECT_EQ(batched.tokens[0], alone.tokens[0]);
  EXPECT_EQ(batched.tokens[1], all_greedy.tokens[2]);
  // Beside a sampled row the greedy row goes through sample_tokens; alone, through greedy_tokens: the same bits.
  EXPECT_EQ(bits_of(batched.logprobs[1]), bits_of(all_greedy.logprobs[2]));
  // The other greedy rows (top_k 1 at a temperature, a negative or NaN temperature): all-greedy steps and beside a
  // sampled row give the same tokens and logprob bits as temperature 0.
  sampling::DeviceSamplingRow top_k_one = seeded, negative, not_a_number;
  top_k_one.top_k = 1;
  negative.temperature = -1.0f;
  not_a_number.temperature = std::nanf("");
  const cuda::ForwardResult other_greedy =
      model.forward(decode_batch({0, 1, 2}), {}, {0, 1, 2}, {top_k_one, negative, not_a_number});
  const cuda::ForwardResult other_beside_seeded =
      model.forward(decode_batch({0, 1, 2}), {}, {0, 1, 2}, {top_k_one, seeded, not_a_number});
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(other_greedy.tokens[s], all_greedy.tokens[s]) << s;
    EXPECT_EQ(bits_of(other_greedy.logprobs[s]), bits_of(all_greedy.logprobs[s])) << s;
    if (s == 1) continue;  // sampled
    EXPECT_EQ(other_beside_seeded.tokens[s], all_greedy.tokens[s]) << s;
    EXPECT_EQ(bits_of(other_beside_seeded.logprobs[s]), bits_of(all_greedy.logprobs[s])) << s;
  }
  ASSERT_EQ(batched.logits.size(), static_cast<size_t>(vocab));
  EXPECT_EQ(std::vector<float>(host.begin(), host.begin() + vocab), batched.logits);
  EXPECT_NEAR(alone.logprobs[0], log_softmax_at(host.data() + vocab, vocab, alone.tokens[0]), 1e-4);
  // Different steps of the same seed draw independently: over 64 steps, more than one distinct token (a high
  // temperature: the fixtures' distributions are peaked, p(top) > 0.999 at temperature 1.5).
  std::vector<int32_t> draws;
  for (uint64_t step = 0; step < 64; ++step) {
    sampling::DeviceSamplingRow row = seeded;
    row.temperature = 100.0f;
    row.top_k = 0;
    row.top_p = 1.0f;
    row.step = step;
    draws.push_back(model.forward(decode_batch({1}), {}, {0}, {row}).tokens[0]);
  }
  std::sort(draws.begin(), draws.end());
  EXPECT_GT(std::unique(draws.begin(), draws.end()) - draws.begin(), 1);
  EXPECT_THROW(model.forward(decode_batch({0}), {}, {0, 1}, {greedy}), Error);  // one sampling entry per sampled row
}

// Device scoring (prompt logprobs, top_logprobs of sampled tokens) against sampling::score_token on the logits the
// host would have received: decode rows (graph replay) and a prefill's rows, scored and sampled in one forward.
void expect_scores_match(const sampling::SampledToken& got, const float* host_row, int64_t vocab, int32_t target,
                         int32_t top_n, const std::string& what) {
  const sampling::SampledToken want = sampling::score_token(host_row, vocab, target, top_n);
  EXPECT_EQ(got.token_id, target) << what;
  EXPECT_NEAR(got.logprob, want.logprob, 1e-3) << what;
  EXPECT_NEAR(static_cast<double>(got.rank), static_cast<double>(want.rank), 2.0) << what;
  ASSERT_EQ(got.top.size(), want.top.size()) << what;
  for (size_t k = 0; k < want.top.size(); ++k) {
    // Rows of other forwards may round differently: the device's k-th token holds the host's k-th value.
    EXPECT_NEAR(log_softmax_at(host_row, vocab, got.top[k].first), want.top[k].second, 1e-3) << what << " entry " << k;
    EXPECT_NEAR(got.top[k].second, want.top[k].second, 1e-3) << what << " entry " << k;
  }
}

TEST_P(CudaGoldenFixture, DeviceScoringMatchesHostLogits) {
  REQUIRE_GPU();
  LoadedModel loaded = load_fixture(GetParam());
  cuda::CudaModelOptions options = small_options(4096);
  options.cuda_graph_batch_sizes = {1, 4};
  options.max_batch_tokens = 2048;
  options.max_context_tokens = 2048;  // the long prefill below, past some fixtures' max_position_embeddings
  cuda::CudaDeepseekV3Model model(loaded.config, loaded.weights, options);
  const int64_t vocab = loaded.config.vocab_size;
  std::vector<std::vector<int32_t>> slots;
  const std::vector<GoldenSequence> goldens = prefill_three_goldens(model, GetParam(), slots);
  ASSERT_EQ(goldens.size(), 3u);
  ForwardBatch decode;
  for (size_t s = 0; s < 3; ++s) {
    decode.add_sequence({goldens[s].ids.back()}, static_cast<int64_t>(goldens[s].ids.size()), slots[s].data());
  }
  const std::vector<float> host = model.forward(decode, {0, 1, 2});  // [3, V]
  sampling::DeviceSamplingRow with_top;
  with_top.top_logprobs = 5;
  const sampling::DeviceSamplingRow plain;
  const cuda::ForwardResult decoded =
      model.forward(decode, {}, {0, 1}, {with_top, plain}, {{2, 17, 3}, {0, 5, 0}, {1, 0, 20}});
  ASSERT_EQ(decoded.tokens.size(), 2u);
  ASSERT_EQ(decoded.sample_scores.size(), 1u);
  EXPECT_EQ(decoded.sample_scores[0].first, 0u);
  EXPECT_EQ(decoded.sample_scores[0].second.logprob, decoded.logprobs[0]);  // the sampler's bits
  EXPECT_EQ(decoded.sample_scores[0].second.top.at(0).first, decoded.tokens[0]);  // greedy: the top token
  expect_scores_match(decoded.sample_scores[0].second, host.data(), vocab, decoded.tokens[0], 5, "sampled row 0");
  ASSERT_EQ(decoded.scored.size(), 3u);
  expect_scores_match(decoded.scored[0], host.data() + 2 * vocab, vocab, 17, 3, "decode row 2");
  expect_scores_match(decoded.scored[1], host.data(), vocab, 5, 0, "decode row 0");
  expect_scores_match(decoded.scored[2], host.data() + vocab, vocab, 0, 20, "decode row 1");
  // A prefill (eager, expanded attention) scoring every row but the last, which samples with alternatives.
  const std::vector<int32_t>& ids = goldens[0].ids;
  const int64_t count = static_cast<int64_t>(ids.size());
  ForwardBatch prefill;
  prefill.add_sequence(ids, 0, slots[0].data());
  prefill.attention_form = AttentionForm::kExpanded;
  std::vector<int64_t> all_rows(static_cast<size_t>(count));
  std::iota(all_rows.begin(), all_rows.end(), 0);
  const std::vector<float> prefill_host = model.forward(prefill, all_rows);  // [count, V]
  std::vector<sampling::DeviceScoredRow> scored_rows;
  for (int64_t r = 0; r + 1 < count; ++r) scored_rows.push_back({r, ids[static_cast<size_t>(r + 1)], static_cast<int32_t>(r % 6)});
  sampling::DeviceSamplingRow last = with_top;
  last.top_logprobs = 2;
  const cuda::ForwardResult scored = model.forward(prefill, {}, {count - 1}, {last}, scored_rows);
  ASSERT_EQ(scored.scored.size(), scored_rows.size());
  for (size_t r = 0; r < scored_rows.size(); ++r) {
    expect_scores_match(scored.scored[r], prefill_host.data() + static_cast<int64_t>(r) * vocab, vocab,
                        scored_rows[r].target, scored_rows[r].top_n, "prefill row " + std::to_string(r));
  }
  ASSERT_EQ(scored.sample_scores.size(), 1u);
  expect_scores_match(scored.sample_scores[0].second, prefill_host.data() + (count - 1) * vocab, vocab, scored.tokens[0],
                      2, "prefill sampled row");
  // More scored rows than one pass of logits holds (kScoredRowsPerPass, 512), beside a host row and a sampled row
  // with more alternatives than any scored row (the scores' stride), before any forward grew the logits past a pass.
  std::mt19937 rng(3);
  std::vector<int32_t> long_ids(1100);
  for (int32_t& id : long_ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  const std::vector<int32_t> long_slots = iota_slots(static_cast<int64_t>(long_ids.size()), 2048);
  ForwardBatch long_prefill;
  long_prefill.add_sequence(long_ids, 0, long_slots.data());
  long_prefill.attention_form = AttentionForm::kExpanded;
  const int64_t long_count = static_cast<int64_t>(long_ids.size());
  std::vector<sampling::DeviceScoredRow> long_scored;
  for (int64_t r = 0; r + 1 < long_count; ++r) {
    long_scored.push_back({r, long_ids[static_cast<size_t>(r + 1)], static_cast<int32_t>(r % 3)});
  }
  sampling::DeviceSamplingRow five;
  five.top_logprobs = 5;
  const cuda::ForwardResult passes = model.forward(long_prefill, {long_count - 2}, {long_count - 1}, {five}, long_scored);
  std::vector<int64_t> long_rows(static_cast<size_t>(long_count));
  std::iota(long_rows.begin(), long_rows.end(), 0);
  const std::vector<float> long_host = model.forward(long_prefill, long_rows);  // [long_count, V]
  ASSERT_EQ(passes.scored.size(), long_scored.size());
  ASSERT_EQ(passes.logits.size(), static_cast<size_t>(vocab));
  for (int64_t v = 0; v < vocab; ++v) {
    ASSERT_NEAR(passes.logits[static_cast<size_t>(v)], long_host[static_cast<size_t>((long_count - 2) * vocab + v)], 1e-2);
  }
  for (size_t r = 0; r < long_scored.size(); ++r) {
    expect_scores_match(passes.scored[r], long_host.data() + static_cast<int64_t>(r) * vocab, vocab, long_scored[r].target,
                        long_scored[r].top_n, "long prefill row " + std::to_string(r));
  }
  ASSERT_EQ(passes.sample_scores.size(), 1u);
  expect_scores_match(passes.sample_scores[0].second, long_host.data() + (long_count - 1) * vocab, vocab,
                      passes.tokens.at(0), 5, "long prefill sampled row");
  EXPECT_THROW(model.forward(prefill, {}, {}, {}, {{count, 1, 0}}), Error);             // a row past the batch
  EXPECT_THROW(model.forward(prefill, {}, {}, {}, {{0, static_cast<int32_t>(vocab), 0}}), Error);  // a token past V
}

// --enable-deterministic-inference: a token's logits are bit-identical whether its prompt runs in one chunk or in
// chunks of 3, alone or batched with other prompts, or with all but its last token cached (a prefix-cache hit:
// the last token runs alone, in prefill form); and decode results are bit-identical alone or batched.
TEST_P(CudaGoldenFixture, DeterministicInferenceIsBatchInvariant) {
  REQUIRE_GPU();
  LoadedModel loaded = load_fixture(GetParam());
  cuda::CudaModelOptions options = small_options(4096);
  options.cuda_graph_batch_sizes = {1, 4};
  options.deterministic = true;
  cuda::CudaDeepseekV3Model model(loaded.config, loaded.weights, options);
  const int64_t vocab = loaded.config.vocab_size;
  std::vector<GoldenSequence> goldens = read_golden(GetParam());
  goldens.resize(std::min<size_t>(goldens.size(), 3));
  ASSERT_EQ(goldens.size(), 3u);
  auto last_row = [&](const std::vector<float>& logits) { return std::vector<float>(logits.end() - vocab, logits.end()); };
  std::vector<std::vector<float>> alone;
  for (size_t s = 0; s < goldens.size(); ++s) {
    const std::vector<int32_t>& ids = goldens[s].ids;
    const std::vector<int32_t> slots = iota_slots(static_cast<int64_t>(ids.size()) + 8, static_cast<int32_t>(s * 512));
    alone.push_back(last_row(prefill_logits(model, ids, slots, 0)));
    EXPECT_EQ(last_row(prefill_logits(model, ids, slots, 3)), alone.back()) << "chunked prefill, sequence " << s;
    ForwardBatch cached;  // everything but the last token is in the cache (written by the prefills above)
    cached.add_sequence({ids.back()}, static_cast<int64_t>(ids.size()) - 1, slots.data());
    cached.attention_form = AttentionForm::kExpanded;
    EXPECT_EQ(model.forward(cached, {0}), alone.back()) << "prefix-cache hit, sequence " << s;
  }
  // All three prompts in one forward, at other slots.
  ForwardBatch together;
  std::vector<std::vector<int32_t>> slots;
  std::vector<int64_t> rows;
  for (size_t s = 0; s < goldens.size(); ++s) {
    slots.push_back(iota_slots(static_cast<int64_t>(goldens[s].ids.size()) + 8, static_cast<int32_t>(2048 + s * 512)));
    together.add_sequence(goldens[s].ids, 0, slots.back().data());
    rows.push_back(together.num_tokens() - 1);
  }
  together.attention_form = AttentionForm::kExpanded;
  const std::vector<float> batched = model.forward(together, rows);
  for (size_t s = 0; s < goldens.size(); ++s) {
    EXPECT_EQ(std::vector<float>(batched.begin() + static_cast<int64_t>(s) * vocab, batched.begin() + static_cast<int64_t>(s + 1) * vocab),
              alone[s]) << "batched prefill, sequence " << s;
  }
  // The three behind a 100-token filler in one forward (past 64 rows: the FP8 GEMMs take the tiled kernel).
  ForwardBatch crowded;
  std::vector<int32_t> filler(100);
  for (size_t i = 0; i < filler.size(); ++i) filler[i] = static_cast<int32_t>((i * 37 + 11) % static_cast<size_t>(vocab));
  const std::vector<int32_t> filler_slots = iota_slots(100, 3584);
  crowded.add_sequence(filler, 0, filler_slots.data());
  std::vector<int64_t> crowded_rows;
  for (size_t s = 0; s < goldens.size(); ++s) {
    crowded.add_sequence(goldens[s].ids, 0, slots[s].data());
    crowded_rows.push_back(crowded.num_tokens() - 1);
  }
  crowded.attention_form = AttentionForm::kExpanded;
  ASSERT_GT(crowded.num_tokens(), 64);
  const std::vector<float> crowded_logits = model.forward(crowded, crowded_rows);
  for (size_t s = 0; s < goldens.size(); ++s) {
    EXPECT_EQ(std::vector<float>(crowded_logits.begin() + static_cast<int64_t>(s) * vocab,
                                 crowded_logits.begin() + static_cast<int64_t>(s + 1) * vocab),
              alone[s]) << "prefill behind a 100-token filler, sequence " << s;
  }
  // Decode: each sequence alone (a graph of 1) and the three together (a graph of 4, padded).
  std::vector<std::vector<float>> decoded_alone;
  for (size_t s = 0; s < goldens.size(); ++s) {
    ForwardBatch one;
    one.add_sequence({argmax(alone[s].data(), vocab)}, static_cast<int64_t>(goldens[s].ids.size()), slots[s].data());
    decoded_alone.push_back(model.forward(one, {0}));
  }
  ForwardBatch three;
  for (size_t s = 0; s < goldens.size(); ++s) {
    three.add_sequence({argmax(alone[s].data(), vocab)}, static_cast<int64_t>(goldens[s].ids.size()), slots[s].data());
  }
  const std::vector<float> decoded = model.forward(three, {0, 1, 2});
  for (size_t s = 0; s < goldens.size(); ++s) {
    EXPECT_EQ(std::vector<float>(decoded.begin() + static_cast<int64_t>(s) * vocab, decoded.begin() + static_cast<int64_t>(s + 1) * vocab),
              decoded_alone[s]) << "batched decode, sequence " << s;
  }
  EXPECT_GE(model.stats().graph_forwards, 4);
}

// Both variants avoid near-tied routing (the dummy router is random, so the CPU's fp32 and the GPU's bf16
// activations would pick different experts for some tokens and the comparison would measure that, not the
// kernels): all dense layers, or MoE layers that select all of their experts.
class CudaV3Dims : public ::testing::TestWithParam<std::string> {};

// A 150-token prefill and one decode token on the GPU against the CPU w8a8 forward (label: the printed variant).
void expect_matches_cpu_w8a8(const LoadedModel& loaded, const std::string& label) {
  const int64_t vocab = loaded.config.vocab_size;
  cuda::CudaDeepseekV3Model gpu(loaded.config, loaded.weights, small_options(256));
  DeepseekV3Model cpu(loaded.config, loaded.weights);
  ThreadPool pool;
  ExecutionContext context{&pool, kernels::NumericMode::kW8A8};
  kv_cache::LatentKvCache cache(loaded.config.num_hidden_layers, 256, loaded.config.kv_latent_dim());

  // 150 tokens: the GEMMs run cuBLASLt on the first 128 rows and the small-M kernel on the other 22.
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 150; ++i) prompt.push_back((i * 7919 + 13) % 4096);
  const std::vector<int32_t> slots = iota_slots(160, 40);
  ForwardBatch prefill;
  prefill.add_sequence(prompt, 0, slots.data());
  prefill.attention_form = AttentionForm::kExpanded;
  std::vector<int64_t> rows(prompt.size());
  std::iota(rows.begin(), rows.end(), 0);
  const std::vector<float> gpu_prefill = gpu.forward(prefill, rows);
  const std::vector<float> cpu_hidden = cpu.forward(prefill, cache, context);
  const std::vector<float> cpu_prefill = cpu.compute_logits(cpu_hidden.data(), static_cast<int64_t>(prompt.size()), context);
  const double prefill_error = relative_l2(gpu_prefill, cpu_prefill);
  EXPECT_LE(prefill_error, kV3DimsTolerance);

  ForwardBatch decode;
  decode.add_sequence({1234}, static_cast<int64_t>(prompt.size()), slots.data());
  const std::vector<float> gpu_decode = gpu.forward(decode, {0});
  decode.attention_form = AttentionForm::kAbsorbed;
  const std::vector<float> cpu_decode_hidden = cpu.forward(decode, cache, context);
  const std::vector<float> cpu_decode = cpu.compute_logits(cpu_decode_hidden.data(), 1, context);
  const double decode_error = relative_l2(gpu_decode, cpu_decode);
  EXPECT_LE(decode_error, kV3DimsTolerance);
  int64_t agree = argmax(gpu_decode.data(), vocab) == argmax(cpu_decode.data(), vocab);
  for (size_t row = 0; row < prompt.size(); ++row) {
    agree += argmax(gpu_prefill.data() + row * vocab, vocab) == argmax(cpu_prefill.data() + row * vocab, vocab);
  }
  // Top-1 is reported, not required: random weights leave near-ties that bf16 activations flip (~80% agree).
  std::printf("[cuda v3 dims %s] rel L2 vs CPU w8a8: prefill %.2e, decode %.2e, top-1 agreement %lld/%zu\n",
              label.c_str(), prefill_error, decode_error, static_cast<long long>(agree), prompt.size() + 1);
}

TEST_P(CudaV3Dims, MatchesTheCpuW8A8Forward) {
  REQUIRE_GPU();
  const LoadedModel loaded = load_v3_dims("fathom-cuda-v3-dims", GetParam(), /*load_mtp=*/false);
  expect_matches_cpu_w8a8(loaded, GetParam());
}

// A gate whose values bf16 cannot hold (checkpoints store it in bf16; an fp32 one is legal) keeps the router on fp32
// weights: the decode kernel's fp32 overload and cuBLASLt's fp32 GEMM for prefill instead of the bf16-plane form.
TEST(CudaV3DimsFp32Gate, MatchesTheCpuW8A8Forward) {
  REQUIRE_GPU();
  LoadedModel loaded = load_v3_dims("fathom-cuda-v3-dims-fp32-gate",
                                     R"({"n_routed_experts": 8, "n_group": 1, "topk_group": 1})", /*load_mtp=*/false);
  int64_t converted = 0;
  for (DecoderLayerWeights& layer : loaded.weights.layers) {
    if (!layer.moe) continue;
    const Tensor& gate = layer.moe->gate;
    Tensor fp32_gate = Tensor::allocate(DType::F32, gate.shape());
    kernels::cpu::to_float(gate, fp32_gate.data<float>());
    // Nudge every value off the bf16 grid (relative 2^-12, far below the gate's spread).
    for (int64_t i = 0; i < fp32_gate.numel(); ++i) fp32_gate.data<float>()[i] *= 1.0f + 0x1p-12f * ((i % 7) + 1);
    layer.moe->gate = std::move(fp32_gate);
    ++converted;
  }
  ASSERT_GT(converted, 0);
  expect_matches_cpu_w8a8(loaded, "fp32 gate");
}

// A prefix longer than one expansion of keys (prefill_window_keys_: 2 x max_batch_tokens = 128 here) runs in passes
// over windows of 128 positions, merged by log-sum-exp. Deterministic mode: the logits are the same bits in chunks of
// 64 or of 50 (the chunk [100, 150) straddles the first window's end: its rows below 128 equal a model whose window
// holds the whole prompt, bit for bit); a short prompt batched behind the long one (its only window deferred to the
// long one's last pass) equals the short prompt alone; and the rows past the first window stay within the w8a8 bound
// of the CPU forward.
TEST(CudaV3DimsKeyWindows, LongPrefixInWindowsMatchesTheCpuAndDoesNotDependOnChunking) {
  REQUIRE_GPU();
  LoadedModel loaded = load_v3_dims("fathom-cuda-v3-dims-key-windows",
                                     R"({"n_routed_experts": 8, "n_group": 1, "topk_group": 1})", /*load_mtp=*/false);
  const int64_t vocab = loaded.config.vocab_size, count = 300;
  cuda::CudaModelOptions windowed_options = small_options(1024), whole_options = small_options(1024);
  windowed_options.deterministic = whole_options.deterministic = true;
  windowed_options.max_batch_tokens = 64;  // windows of 128 keys
  std::vector<int32_t> prompt, short_prompt;
  for (int32_t i = 0; i < count; ++i) prompt.push_back((i * 7919 + 13) % 4096);
  for (int32_t i = 0; i < 30; ++i) short_prompt.push_back((i * 104729 + 5) % 4096);
  auto row = [&](const std::vector<float>& logits, int64_t r) {
    return std::vector<float>(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
  };
  std::vector<float> windowed, rechunked, whole;
  {
    cuda::CudaDeepseekV3Model gpu(loaded.config, loaded.weights, windowed_options);
    windowed = prefill_logits(gpu, prompt, iota_slots(count, 0), 64);
    rechunked = prefill_logits(gpu, prompt, iota_slots(count, 400), 50);
    const std::vector<int32_t> short_slots = iota_slots(30, 800), batched_short_slots = iota_slots(30, 850);
    const std::vector<float> short_alone = prefill_logits(gpu, short_prompt, short_slots, 0);
    ForwardBatch batched;  // the long prompt's last 30 tokens behind its cached 270 (3 windows), then the short one
    const std::vector<int32_t> long_slots = iota_slots(count, 0);
    batched.add_sequence(std::vector<int32_t>(prompt.begin() + 270, prompt.end()), 270, long_slots.data());
    batched.add_sequence(short_prompt, 0, batched_short_slots.data());
    batched.attention_form = AttentionForm::kExpanded;
    const std::vector<float> together = gpu.forward(batched, {29, 59});
    EXPECT_EQ(row(together, 0), row(windowed, count - 1)) << "the long prompt's last row, batched";
    EXPECT_EQ(row(together, 1), row(short_alone, 29)) << "the short prompt's last row behind the long one";
  }
  {
    cuda::CudaDeepseekV3Model gpu(loaded.config, loaded.weights, whole_options);
    whole = prefill_logits(gpu, prompt, iota_slots(count, 0), 64);
  }
  ASSERT_EQ(windowed.size(), static_cast<size_t>(count * vocab));
  EXPECT_EQ(rechunked, windowed) << "chunks of 50 vs 64 with windows of 128 keys";
  EXPECT_TRUE(std::equal(rechunked.begin() + 100 * vocab, rechunked.begin() + 128 * vocab, whole.begin() + 100 * vocab))
      << "rows 100..127 (a windowed forward) differ from the unwindowed model's";

  DeepseekV3Model cpu(loaded.config, loaded.weights);
  ThreadPool pool;
  ExecutionContext context{&pool, kernels::NumericMode::kW8A8};
  kv_cache::LatentKvCache cache(loaded.config.num_hidden_layers, count, loaded.config.kv_latent_dim());
  const std::vector<int32_t> slots = iota_slots(count, 0);
  ForwardBatch prefill;
  prefill.add_sequence(prompt, 0, slots.data());
  prefill.attention_form = AttentionForm::kExpanded;
  const std::vector<float> cpu_hidden = cpu.forward(prefill, cache, context);
  const std::vector<float> cpu_logits = cpu.compute_logits(cpu_hidden.data(), count, context);
  const std::vector<float> late_windowed(windowed.begin() + 128 * vocab, windowed.end()),
      late_whole(whole.begin() + 128 * vocab, whole.end()), late_cpu(cpu_logits.begin() + 128 * vocab, cpu_logits.end());
  const double windowed_error = relative_l2(late_windowed, late_cpu), whole_error = relative_l2(late_whole, late_cpu);
  EXPECT_LE(windowed_error, kV3DimsTolerance);
  std::printf("[cuda v3 dims key windows] rows past the first window, rel L2 vs CPU w8a8: windows of 128 %.2e, "
              "one window %.2e; windowed vs one window %.2e\n",
              windowed_error, whole_error, relative_l2(late_windowed, late_whole));
}

// Deterministic inference at V3 dimensions. Prefill form: a token's logits are the same bits in a forward of 150 rows
// as in a 50-row chunk behind a cached prefix (dense weights with rows % 128 == 0 on the wgmma kernel at 150 and 50
// rows, the fused q_a + kv_a on the tiled kernel vs the small-M path, experts on 192- vs 64-token wgmma tiles).
// Decode form: a decode row alone (small-M GEMMs, some K splits summed by the next add+RMSNorm; 64-token expert tiles,
// 32-wide MMAs) equals the same row in the middle of 70 (tiled GEMMs; 128-token expert tiles, 96-wide MMAs).
TEST(CudaV3DimsDeterministic, RowsPastAndBelow64MatchBitForBit) {
  REQUIRE_GPU();
  LoadedModel loaded = load_v3_dims("fathom-cuda-v3-dims-deterministic",
                                     R"({"n_routed_experts": 8, "n_group": 1, "topk_group": 1})", /*load_mtp=*/false);
  cuda::CudaModelOptions options = small_options(512);
  options.deterministic = true;
  options.max_decode_batch = 70;
  cuda::CudaDeepseekV3Model gpu(loaded.config, loaded.weights, options);
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 150; ++i) prompt.push_back((i * 7919 + 13) % 4096);
  const std::vector<int32_t> one_shot_slots = iota_slots(151, 0), chunked_slots = iota_slots(151, 200);
  ForwardBatch whole;
  whole.add_sequence(prompt, 0, one_shot_slots.data());
  whole.attention_form = AttentionForm::kExpanded;
  const std::vector<float> one_shot = gpu.forward(whole, {149});
  ForwardBatch head, tail;
  head.add_sequence(std::vector<int32_t>(prompt.begin(), prompt.begin() + 100), 0, chunked_slots.data());
  tail.add_sequence(std::vector<int32_t>(prompt.begin() + 100, prompt.end()), 100, chunked_slots.data());
  head.attention_form = tail.attention_form = AttentionForm::kExpanded;
  gpu.forward(head, {});
  EXPECT_EQ(gpu.forward(tail, {49}), one_shot);
  // Both slot ranges now hold the same prompt's KV bits: decode a token on one alone, then on the other as row 35 of
  // 70 decode rows (the others: one-token sequences with empty caches, in slots 360..428).
  ForwardBatch alone, crowd;
  alone.add_sequence({777}, 150, chunked_slots.data());
  const std::vector<float> decoded_alone = gpu.forward(alone, {0});
  const std::vector<int32_t> crowd_slots = iota_slots(69, 360);
  for (int32_t s = 0; s < 70; ++s) {
    if (s == 35) crowd.add_sequence({777}, 150, one_shot_slots.data());
    else crowd.add_sequence({(s * 131 + 7) % 4096}, 0, crowd_slots.data() + (s < 35 ? s : s - 1));
  }
  ASSERT_TRUE(crowd.is_pure_decode());
  const std::vector<float> decoded_crowd = gpu.forward(crowd, {35});
  EXPECT_EQ(decoded_crowd, decoded_alone);
}

// Pages of 64 tokens (--page-size 64): the decode reads the cache through a page-granular table. Where the plan picks
// the same kernel as with pages of one token (batch 1 x 301 tokens: 16-head groups) the logits are the same bits;
// deterministic mode's 40-tile splits (the model's 163840-token context) run the seesaw kernel at 64-head groups,
// which agrees with the warp-specialized one to rounding (H100: 9.2e-3 on the logits, the attention's bf16 rounding
// of P and of the output carried through two layers of random weights; per op ~2e-3, cuda_mla_decode_test) and with
// the CPU w8a8 forward like every decode. Slots not in whole pages are rejected with a clear error.
TEST(CudaV3DimsPagedDecode, Pages64MatchPagesOfOneToken) {
  REQUIRE_GPU();
  LoadedModel loaded = load_v3_dims("fathom-cuda-v3-dims", R"({"first_k_dense_replace": 2})", /*load_mtp=*/false);
  const int64_t vocab = loaded.config.vocab_size;
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 300; ++i) prompt.push_back((i * 7919 + 13) % 4096);
  const std::vector<int32_t> slots = iota_slots(320, 128);  // pages 2..6
  auto decode_logits = [&](cuda::CudaModelOptions options) {
    cuda::CudaDeepseekV3Model gpu(loaded.config, loaded.weights, options);
    ForwardBatch prefill;
    prefill.add_sequence(prompt, 0, slots.data());
    prefill.attention_form = AttentionForm::kExpanded;
    gpu.forward(prefill, {});
    ForwardBatch decode;
    decode.add_sequence({1234}, static_cast<int64_t>(prompt.size()), slots.data());
    return gpu.forward(decode, {0});
  };
  cuda::CudaModelOptions options = small_options(1024);
  const std::vector<float> slot_table = decode_logits(options);
  options.kv_page_size = 64;
  EXPECT_EQ(decode_logits(options), slot_table);
  options.deterministic = true;
  const std::vector<float> seesaw = decode_logits(options);
  options.kv_page_size = 1;
  const std::vector<float> warp_specialized = decode_logits(options);
  EXPECT_LE(relative_l2(seesaw, warp_specialized), 3e-2);
  EXPECT_EQ(argmax(seesaw.data(), vocab), argmax(warp_specialized.data(), vocab));

  DeepseekV3Model cpu(loaded.config, loaded.weights);
  ThreadPool pool;
  ExecutionContext context{&pool, kernels::NumericMode::kW8A8};
  kv_cache::LatentKvCache cache(loaded.config.num_hidden_layers, 1024, loaded.config.kv_latent_dim());
  ForwardBatch prefill;
  prefill.add_sequence(prompt, 0, slots.data());
  prefill.attention_form = AttentionForm::kExpanded;
  cpu.forward(prefill, cache, context);
  ForwardBatch decode;
  decode.add_sequence({1234}, static_cast<int64_t>(prompt.size()), slots.data());
  decode.attention_form = AttentionForm::kAbsorbed;
  const std::vector<float> cpu_hidden = cpu.forward(decode, cache, context);
  const double error = relative_l2(seesaw, cpu.compute_logits(cpu_hidden.data(), 1, context));
  EXPECT_LE(error, kV3DimsTolerance);
  std::printf("[cuda v3 dims paged] seesaw vs warp-specialized rel L2 %.2e, vs CPU w8a8 %.2e\n",
              relative_l2(seesaw, warp_specialized), error);

  // A sequence whose second page is split across two pages of the pool.
  options.kv_page_size = 64;
  cuda::CudaDeepseekV3Model gpu(loaded.config, loaded.weights, options);
  std::vector<int32_t> broken = iota_slots(100, 0);
  for (size_t i = 64; i < broken.size(); ++i) broken[i] = static_cast<int32_t>(192 + i - 64 + (i >= 80 ? 64 : 0));
  // A run that starts mid-page, and a last page that runs past the cache of 1024 slots.
  std::vector<int32_t> misaligned = iota_slots(100, 1), past_end = iota_slots(100, 1024 - 64);
  struct Case { const std::vector<int32_t>* slots; std::string expected; };
  for (const Case& c : {Case{&broken, "position 80 of a sequence is in KV slot 272, not in the page of 64 slots its run "
                                      "began in (slot 192)"},
                        Case{&misaligned, "position 0 of a sequence is in KV slot 1, not in the page of 64"},
                        Case{&past_end, "KV slot 1024 outside the cache of 1024 slots"}}) {
    ForwardBatch bad;
    bad.add_sequence({5}, 99, c.slots->data());
    try {
      gpu.forward(bad, {0});
      ADD_FAILURE() << "accepted: " << c.expected;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(c.expected), std::string::npos) << error.what();
    }
  }
  // The same model then decodes whole pages.
  const std::vector<int32_t> whole_pages = iota_slots(100, 128);
  ForwardBatch good;
  good.add_sequence({5}, 99, whole_pages.data());
  EXPECT_EQ(gpu.forward(good, {0}).size(), static_cast<size_t>(vocab));
}

INSTANTIATE_TEST_SUITE_P(Variants, CudaV3Dims,
                         ::testing::Values(R"({"first_k_dense_replace": 2})",
                                           R"({"n_routed_experts": 8, "n_group": 1, "topk_group": 1})"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.index == 0 ? std::string("dense") : std::string("moe_all_experts_selected");
                         });

}  // namespace
}  // namespace fathom::model
