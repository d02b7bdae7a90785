// The MTP (NextN) module on the GPU against transformers' golden MTP logits (the fixtures, w8a8 tolerances), its
// decode form against its prefill form (with and without CUDA graphs on the main model), chained drafts and the
// real V3 dimensions against the CPU module (dummy weights). Skips without a GPU.
#include <cstdio>

#include "core/error.h"
#include "core/thread_pool.h"
#include "cuda_model_test_support.h"
#include "model/deepseek_v3_model.h"
#include "model/generation.h"

namespace fathom::model {
namespace {

using namespace cuda_test;  // NOLINT: the shared fixtures and tolerances

struct PrefillWithMtp {
  std::vector<float> logits;      // [T, V]
  std::vector<float> mtp_logits;  // [T-1, V]
};

// Main forward over each chunk [begin, end), then the MTP over positions [begin, min(end, T-1)) with tokens shifted
// by one, reading the chunk's rows (executor::prefill_sequence's order).
PrefillWithMtp prefill_with_mtp(cuda::CudaDeepseekV3Model& model, const std::vector<int32_t>& ids,
                                const std::vector<int32_t>& slots, int64_t chunk) {
  const int64_t count = static_cast<int64_t>(ids.size()), step = chunk > 0 ? chunk : count;
  PrefillWithMtp result;
  for (int64_t begin = 0; begin < count; begin += step) {
    const int64_t end = std::min(count, begin + step);
    ForwardBatch batch;
    batch.attention_form = AttentionForm::kExpanded;
    batch.add_sequence(std::vector<int32_t>(ids.begin() + begin, ids.begin() + end), begin, slots.data());
    std::vector<int64_t> rows(static_cast<size_t>(end - begin));
    std::iota(rows.begin(), rows.end(), 0);
    const std::vector<float> logits = model.forward(batch, rows);
    result.logits.insert(result.logits.end(), logits.begin(), logits.end());
    const int64_t mtp_end = std::min(end, count - 1);
    if (mtp_end <= begin) continue;
    ForwardBatch mtp;
    mtp.attention_form = AttentionForm::kExpanded;
    mtp.add_sequence(std::vector<int32_t>(ids.begin() + begin + 1, ids.begin() + mtp_end + 1), begin, slots.data());
    rows.resize(static_cast<size_t>(mtp_end - begin));
    const std::vector<float> mtp_logits = model.forward_mtp(mtp, rows, rows);
    result.mtp_logits.insert(result.mtp_logits.end(), mtp_logits.begin(), mtp_logits.end());
  }
  return result;
}

bool has_mtp_goldens(const std::string& dir) {
  for (const GoldenSequence& golden : read_golden(dir)) {
    if (!golden.mtp_logits.empty()) return true;
  }
  return false;
}

std::vector<std::string> mtp_fixture_dirs() {
  std::vector<std::string> dirs;
  for (const std::string& dir : fixture_dirs()) {
    if (has_mtp_goldens(dir)) dirs.push_back(dir);
  }
  return dirs;
}

class CudaMtpFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaMtpFixture, MtpLogitsMatchTransformersWithinW8A8Tolerance) {
  REQUIRE_GPU();
  LoadedModel loaded = load_fixture(GetParam(), /*load_mtp=*/true);
  cuda::CudaDeepseekV3Model model(loaded.config, loaded.weights, small_options(1024));
  ASSERT_TRUE(model.has_mtp());
  const int64_t vocab = loaded.config.vocab_size;
  double worst = 0;
  int64_t rows = 0, agree = 0;
  for (const GoldenSequence& golden : read_golden(GetParam())) {
    if (golden.ids.size() < 2) continue;
    for (int64_t chunk : {int64_t{0}, int64_t{3}}) {
      const PrefillWithMtp ours = prefill_with_mtp(model, golden.ids, iota_slots(static_cast<int64_t>(golden.ids.size()), 7), chunk);
      const double error = relative_l2(ours.mtp_logits, golden.mtp_logits);
      worst = std::max(worst, error);
      EXPECT_LE(error, kFixtureTolerance) << "T=" << golden.ids.size() << " chunk " << chunk;
      EXPECT_LE(relative_l2(ours.logits, golden.logits), kFixtureTolerance) << "T=" << golden.ids.size();
      for (size_t row = 0; row + 1 < golden.ids.size(); ++row) {
        ++rows;
        agree += argmax(ours.mtp_logits.data() + row * vocab, vocab) == argmax(golden.mtp_logits.data() + row * vocab, vocab);
      }
    }
  }
  ASSERT_GT(rows, 0);
  EXPECT_GE(static_cast<double>(agree) / static_cast<double>(rows), 0.98) << agree << " of " << rows;
  std::printf("[cuda mtp] %s: worst rel L2 MTP logits %.2e, top-1 agreement %lld/%lld\n", GetParam().c_str(), worst,
              static_cast<long long>(agree), static_cast<long long>(rows));
}

// The speculative-decoding order: the main model decodes token p (absorbed attention; a padded CUDA graph when
// `graphs`), then the MTP decodes position p with token p+1 reading that forward's row 0. Against the one-shot prefill.
void check_mtp_decode(const LoadedModel& loaded, const std::string& fixture, bool graphs) {
  cuda::CudaModelOptions options = small_options(1024);
  if (graphs) options.cuda_graph_batch_sizes = {1, 2, 4};
  cuda::CudaDeepseekV3Model model(loaded.config, loaded.weights, options);
  const int64_t vocab = loaded.config.vocab_size;
  std::vector<GoldenSequence> goldens = read_golden(fixture);
  const GoldenSequence& golden = *std::max_element(goldens.begin(), goldens.end(), [](const auto& a, const auto& b) {
    return a.ids.size() < b.ids.size();
  });
  const int64_t count = static_cast<int64_t>(golden.ids.size()), prompt = count / 2;
  ASSERT_GE(prompt, 2);
  const std::vector<int32_t> slots = iota_slots(count, 300);
  const PrefillWithMtp one_shot = prefill_with_mtp(model, golden.ids, slots, 0);
  // The prompt's main forward, then its MTP over positions [0, prompt) (token `prompt` known, as a sampled one is).
  ForwardBatch main_prompt, mtp_prompt;
  main_prompt.attention_form = mtp_prompt.attention_form = AttentionForm::kExpanded;
  main_prompt.add_sequence(std::vector<int32_t>(golden.ids.begin(), golden.ids.begin() + prompt), 0, slots.data());
  mtp_prompt.add_sequence(std::vector<int32_t>(golden.ids.begin() + 1, golden.ids.begin() + prompt + 1), 0, slots.data());
  std::vector<int64_t> prompt_rows(static_cast<size_t>(prompt));
  std::iota(prompt_rows.begin(), prompt_rows.end(), 0);
  model.forward(main_prompt, {});
  const std::vector<float> prompt_drafts = model.forward_mtp(mtp_prompt, prompt_rows, prompt_rows);
  EXPECT_LE(relative_l2(prompt_drafts.data(), one_shot.mtp_logits.data(), static_cast<size_t>(prompt * vocab)), 2e-2);
  // Decode rows against the one-shot prefill's and transformers' rows of the same positions, together (one row of
  // tiny-noqlora reaches 5.8e-2 against the one-shot on an H200: its near-tied routes, as the main model's chunked
  // prefill; see kFixtureTolerance), and top-1 row by row.
  std::vector<float> drafts, one_shot_rows, golden_rows;
  for (int64_t p = prompt; p + 1 < count; ++p) {
    ForwardBatch main;
    main.add_sequence({golden.ids[p]}, p, slots.data());
    const std::vector<float> logits = model.forward(main, {0});
    EXPECT_EQ(argmax(logits.data(), vocab), argmax(one_shot.logits.data() + p * vocab, vocab)) << "main, position " << p;
    ForwardBatch mtp;
    mtp.add_sequence({golden.ids[p + 1]}, p, slots.data());
    const std::vector<float> draft = model.forward_mtp(mtp, {0}, {0});
    const float* expected = one_shot.mtp_logits.data() + p * vocab;
    EXPECT_EQ(argmax(draft.data(), vocab), argmax(expected, vocab)) << "MTP, position " << p;
    drafts.insert(drafts.end(), draft.begin(), draft.end());
    one_shot_rows.insert(one_shot_rows.end(), expected, expected + vocab);
    golden_rows.insert(golden_rows.end(), golden.mtp_logits.begin() + p * vocab, golden.mtp_logits.begin() + (p + 1) * vocab);
  }
  const double vs_one_shot = relative_l2(drafts, one_shot_rows), vs_golden = relative_l2(drafts, golden_rows);
  EXPECT_LE(vs_one_shot, kFixtureTolerance);
  EXPECT_LE(vs_golden, kFixtureTolerance);
  std::printf("[cuda mtp decode%s] %s: %lld rows, rel L2 vs one-shot %.2e, vs transformers %.2e\n", graphs ? ", graphs" : "",
              fixture.c_str(), static_cast<long long>(count - 1 - prompt), vs_one_shot, vs_golden);
  if (graphs) {  // every main and MTP decode step replayed a graph
    EXPECT_EQ(model.stats().graph_forwards, 2 * (count - 1 - prompt));
  }
}

TEST_P(CudaMtpFixture, MtpDecodeAgreesWithOneShotPrefill) {
  REQUIRE_GPU();
  check_mtp_decode(load_fixture(GetParam(), true), GetParam(), /*graphs=*/false);
}

TEST_P(CudaMtpFixture, MtpDecodeAfterGraphDecodeAgreesWithOneShotPrefill) {
  REQUIRE_GPU();
  check_mtp_decode(load_fixture(GetParam(), true), GetParam(), /*graphs=*/true);
}

// Draft chains through captured CUDA graphs (3 sequences padded to 4: main decode, then two chained MTP steps)
// against the same padded shapes run eagerly: bit-identical logits. (The MTP rows of each prompt's last position
// are never written here, zeros in both models: this compares the two paths, not the drafts' quality.)
TEST_P(CudaMtpFixture, MtpGraphDecodeMatchesEagerPaddedDecode) {
  REQUIRE_GPU();
  LoadedModel loaded = load_fixture(GetParam(), true);
  std::vector<std::vector<float>> runs;
  for (bool capture : {true, false}) {
    cuda::CudaModelOptions options = small_options(1024);
    options.cuda_graph_batch_sizes = {1, 2, 4};
    options.capture_cuda_graphs = capture;
    cuda::CudaDeepseekV3Model model(loaded.config, loaded.weights, options);
    std::vector<float> all;
    std::vector<std::vector<int32_t>> slots;
    const std::vector<std::vector<int32_t>> prompts{{5, 9, 14, 2}, {21, 3, 8}, {30, 31, 32, 33, 34}};
    for (size_t s = 0; s < prompts.size(); ++s) {
      slots.push_back(iota_slots(16, static_cast<int32_t>(s * 32)));
      prefill_with_mtp(model, prompts[s], slots.back(), 0);
    }
    for (int step = 0; step < 3; ++step) {
      ForwardBatch main, draft, chained;
      for (size_t s = 0; s < prompts.size(); ++s) {
        const int64_t position = static_cast<int64_t>(prompts[s].size()) + step;
        main.add_sequence({static_cast<int32_t>(40 + step + s)}, position, slots[s].data());
        draft.add_sequence({static_cast<int32_t>(50 + step + s)}, position, slots[s].data());
        chained.add_sequence({static_cast<int32_t>(60 + step + s)}, position + 1, slots[s].data());
      }
      for (const std::vector<float>& logits : {model.forward(main, {0, 1, 2}), model.forward_mtp(draft, {0, 1, 2}, {0, 1, 2}),
                                               model.forward_mtp(chained, {0, 1, 2}, {0, 1, 2})}) {
        all.insert(all.end(), logits.begin(), logits.end());
      }
    }
    EXPECT_EQ(model.stats().graph_forwards, capture ? 9 : 0);
    runs.push_back(std::move(all));
  }
  EXPECT_EQ(runs[0], runs[1]);
}

// Two sequences in one MTP forward, hidden rows crossed (row 0 reads main row 1 and vice versa), against each alone;
// bit for bit under deterministic inference (eh_proj included: cuBLASLt always sees 64 rows).
void check_mtp_rows(const LoadedModel& loaded, bool deterministic, bool graphs = false) {
  cuda::CudaModelOptions options = small_options(1024);
  options.deterministic = deterministic;
  if (graphs) options.cuda_graph_batch_sizes = {1, 2, 4};  // the two rows padded to 2, alone to 1
  cuda::CudaDeepseekV3Model model(loaded.config, loaded.weights, options);
  const int64_t vocab = loaded.config.vocab_size;
  const std::vector<int32_t> a_slots = iota_slots(8, 0), b_slots = iota_slots(8, 100);
  const std::vector<int32_t> a{5, 9, 14}, b{21, 3, 8, 30};
  prefill_with_mtp(model, a, a_slots, 0);
  prefill_with_mtp(model, b, b_slots, 0);
  ForwardBatch both;  // main decode of both sequences' next token
  both.add_sequence({11}, 3, a_slots.data());
  both.add_sequence({12}, 4, b_slots.data());
  model.forward(both, {});
  ForwardBatch crossed;  // b first, reading main row 1; a second, reading main row 0
  crossed.add_sequence({40}, 4, b_slots.data());
  crossed.add_sequence({41}, 3, a_slots.data());
  const std::vector<float> together = model.forward_mtp(crossed, {1, 0}, {0, 1});
  // Alone: each sequence's main decode again (its KV row rewritten with the same values), then its MTP.
  std::vector<float> alone;
  for (bool is_b : {true, false}) {
    const std::vector<int32_t>& slots = is_b ? b_slots : a_slots;
    ForwardBatch main;
    main.add_sequence({is_b ? 12 : 11}, is_b ? 4 : 3, slots.data());
    model.forward(main, {});
    ForwardBatch mtp;
    mtp.add_sequence({is_b ? 40 : 41}, is_b ? 4 : 3, slots.data());
    const std::vector<float> logits = model.forward_mtp(mtp, {0}, {0});
    alone.insert(alone.end(), logits.begin(), logits.end());
  }
  if (deterministic) {
    EXPECT_EQ(together, alone);
  } else {
    EXPECT_LE(relative_l2(together, alone), 1e-3);
  }
  for (int row = 0; row < 2; ++row) {
    EXPECT_EQ(argmax(together.data() + row * vocab, vocab), argmax(alone.data() + row * vocab, vocab)) << "row " << row;
  }
  EXPECT_THROW(model.forward_mtp(crossed, {0, 1}, {0}), Error);  // the previous (MTP) forward had one row
  if (graphs) {
    EXPECT_GT(model.stats().graph_forwards, 0);
  }
}

TEST_P(CudaMtpFixture, MtpRowsFollowHiddenRows) {
  REQUIRE_GPU();
  check_mtp_rows(load_fixture(GetParam(), true), /*deterministic=*/false);
}

TEST_P(CudaMtpFixture, MtpRowsFollowHiddenRowsThroughGraphs) {
  REQUIRE_GPU();
  check_mtp_rows(load_fixture(GetParam(), true), /*deterministic=*/false, /*graphs=*/true);
}

// No hidden rows survive a forward that throws (main or MTP), eager or padded.
TEST_P(CudaMtpFixture, FailedForwardLeavesNoHiddenRows) {
  REQUIRE_GPU();
  LoadedModel loaded = load_fixture(GetParam(), true);
  cuda::CudaModelOptions options = small_options(64);
  options.cuda_graph_batch_sizes = {1, 2};
  cuda::CudaDeepseekV3Model model(loaded.config, loaded.weights, options);
  const std::vector<int32_t> slots = iota_slots(8, 0), bad_slots{0, 1, 9999};
  ForwardBatch prompt, bad, draft;
  prompt.add_sequence({3, 4}, 0, slots.data());
  bad.add_sequence({5}, 2, bad_slots.data());  // KV slot 9999 is outside the 64-slot cache
  draft.add_sequence({6}, 1, slots.data());
  model.forward(prompt, {});
  EXPECT_EQ(model.forward_mtp(draft, {1}, {0}).size(), static_cast<size_t>(loaded.config.vocab_size));
  model.forward(prompt, {});
  EXPECT_THROW(model.forward(bad, {0}), Error);  // a padded decode shape, rejected
  EXPECT_THROW(model.forward_mtp(draft, {1}, {0}), Error);
  model.forward(prompt, {});
  EXPECT_THROW(model.forward_mtp(draft, {1}, {3}), Error);  // logit row past the batch
  EXPECT_THROW(model.forward_mtp(draft, {0}, {0}), Error);
}

TEST_P(CudaMtpFixture, DeterministicMtpIsBatchInvariant) {
  REQUIRE_GPU();
  check_mtp_rows(load_fixture(GetParam(), true), /*deterministic=*/true);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaMtpFixture, ::testing::ValuesIn(mtp_fixture_dirs()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = std::filesystem::path(info.param).filename().string();
                           for (char& c : name) if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaMtpFixture);

TEST(CudaMtp, ModelWithoutTheModuleSaysSo) {
  REQUIRE_GPU();
  const std::vector<std::string> dirs = mtp_fixture_dirs();
  ASSERT_FALSE(dirs.empty());
  LoadedModel loaded = load_fixture(dirs.front(), /*load_mtp=*/false);
  cuda::CudaDeepseekV3Model model(loaded.config, loaded.weights, small_options(64));
  EXPECT_FALSE(model.has_mtp());
  const std::vector<int32_t> slots = iota_slots(4, 0);
  ForwardBatch batch;
  batch.add_sequence({3}, 0, slots.data());
  model.forward(batch, {});
  EXPECT_THROW(model.forward_mtp(batch, {0}, {0}), Error);
}

// DeepSeek-V3's real layer dimensions with an MTP layer whose MoE selects all of its 8 experts (no near-tied
// routing between the CPU's fp32 and the GPU's bf16 activations), against the CPU MtpModule (w8a8): a prefill of
// 150 tokens (cuBLASLt rows and small-M rows), then one decode step, then a chained step.
TEST(CudaMtp, V3DimsMatchTheCpuModule) {
  REQUIRE_GPU();
  // One dense main layer; the MTP layer is MoE (first_k_dense_replace 1).
  LoadedModel loaded = load_v3_dims(
      "fathom-cuda-mtp-v3-dims",
      R"({"num_hidden_layers": 1, "num_nextn_predict_layers": 1, "n_routed_experts": 8, "n_group": 1, "topk_group": 1})",
      /*load_mtp=*/true);
  ASSERT_TRUE(loaded.weights.mtp.has_value());
  cuda::CudaDeepseekV3Model gpu(loaded.config, loaded.weights, small_options(256));
  DeepseekV3Model cpu(loaded.config, loaded.weights);
  ASSERT_NE(cpu.mtp(), nullptr);
  ThreadPool pool;
  ExecutionContext context{&pool, kernels::NumericMode::kW8A8};
  kv_cache::LatentKvCache cache(loaded.config.num_hidden_layers, 256, loaded.config.kv_latent_dim());
  kv_cache::LatentKvCache mtp_cache(1, 256, loaded.config.kv_latent_dim());

  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 151; ++i) prompt.push_back((i * 7919 + 13) % 4096);
  const std::vector<int32_t> slots = iota_slots(160, 40);
  // Main over 150 tokens, MTP over the same positions carrying tokens 1..150.
  ForwardBatch main;
  main.add_sequence(std::vector<int32_t>(prompt.begin(), prompt.end() - 1), 0, slots.data());
  main.attention_form = AttentionForm::kExpanded;
  ForwardBatch mtp;
  mtp.add_sequence(std::vector<int32_t>(prompt.begin() + 1, prompt.end()), 0, slots.data());
  mtp.attention_form = AttentionForm::kExpanded;
  std::vector<int64_t> rows(150);
  std::iota(rows.begin(), rows.end(), 0);
  gpu.forward(main, {});
  const std::vector<float> gpu_prefill = gpu.forward_mtp(mtp, rows, rows);
  const std::vector<float> cpu_hidden = cpu.forward(main, cache, context);
  const std::vector<float> cpu_mtp_hidden = cpu.mtp()->forward(mtp, cpu_hidden.data(), mtp_cache, context);
  const std::vector<float> cpu_prefill = cpu.compute_logits(cpu_mtp_hidden.data(), 150, context);
  const double prefill_error = relative_l2(gpu_prefill, cpu_prefill);
  EXPECT_LE(prefill_error, kV3DimsTolerance);

  // Decode: main at position 150 (token prompt[150]), then the MTP there with a next token, then a chained step.
  ForwardBatch main_step;
  main_step.add_sequence({prompt.back()}, 150, slots.data());
  ForwardBatch mtp_step, chained_step;
  mtp_step.add_sequence({1234}, 150, slots.data());
  chained_step.add_sequence({2345}, 151, slots.data());
  gpu.forward(main_step, {});
  const std::vector<float> gpu_step = gpu.forward_mtp(mtp_step, {0}, {0});
  const std::vector<float> gpu_chained = gpu.forward_mtp(chained_step, {0}, {0});
  main_step.attention_form = mtp_step.attention_form = chained_step.attention_form = AttentionForm::kAbsorbed;
  const std::vector<float> cpu_main_step = cpu.forward(main_step, cache, context);
  const std::vector<float> cpu_step_hidden = cpu.mtp()->forward(mtp_step, cpu_main_step.data(), mtp_cache, context);
  const std::vector<float> cpu_chained_hidden = cpu.mtp()->forward(chained_step, cpu_step_hidden.data(), mtp_cache, context);
  const double step_error = relative_l2(gpu_step, cpu.compute_logits(cpu_step_hidden.data(), 1, context));
  const double chained_error = relative_l2(gpu_chained, cpu.compute_logits(cpu_chained_hidden.data(), 1, context));
  EXPECT_LE(step_error, kV3DimsTolerance);
  EXPECT_LE(chained_error, kV3DimsTolerance);
  std::printf("[cuda mtp v3 dims] rel L2 vs CPU w8a8: prefill %.2e, decode %.2e, chained %.2e\n", prefill_error,
              step_error, chained_error);
}

}  // namespace
}  // namespace fathom::model
