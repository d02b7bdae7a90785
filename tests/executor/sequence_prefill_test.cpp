// prefill_sequence and the backend's MTP seam on the CPU backend: MTP logits through chunked forwards against
// transformers' golden MTP logits (the fixtures), chained drafts against the model's own MtpModule, and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "core/error.h"
#include "executor/cpu_model_backend.h"
#include "executor/sequence_prefill.h"
#include "golden_logits.h"
#include "model/generation.h"

namespace fathom::executor {
namespace {

using fathom::testing::GoldenSequence;
using fathom::testing::read_golden;
using fathom::testing::relative_l2;

BackendConfig cpu_config(const std::string& fixture, bool load_mtp) {
  BackendConfig config;
  config.load.model_dir = std::string(FATHOM_FIXTURES_DIR) + "/" + fixture;
  config.load.load_mtp = load_mtp;
  config.num_threads = 2;
  config.num_kv_slots = 64;
  return config;
}

std::vector<int32_t> iota_slots(int64_t count, int32_t first) {
  std::vector<int32_t> slots(static_cast<size_t>(count));
  std::iota(slots.begin(), slots.end(), first);
  return slots;
}

class MtpFixture : public ::testing::TestWithParam<std::string> {};

// transformers' NextN reference ran the module over the whole sequence at once; here it runs behind each chunk.
TEST_P(MtpFixture, ChunkedPrefillWithMtpMatchesTransformers) {
  CpuModelBackend backend(cpu_config(GetParam(), true));
  ASSERT_TRUE(backend.has_mtp());
  const std::vector<GoldenSequence> goldens = read_golden(std::string(FATHOM_FIXTURES_DIR) + "/" + GetParam());
  int checked = 0;
  for (const GoldenSequence& golden : goldens) {
    if (golden.ids.size() < 2) continue;
    for (int64_t chunk : {int64_t{0}, int64_t{1}, int64_t{3}}) {
      SequencePrefillOptions options;
      options.chunk_size = chunk;
      options.with_mtp = true;
      // Slots start at 5: the MTP cache must use the same slots as the main one.
      const SequencePrefillResult result = prefill_sequence(backend, golden.ids, iota_slots(64, 5), options);
      EXPECT_LE(relative_l2(result.logits, golden.logits), 1e-4) << "T=" << golden.ids.size() << " chunk " << chunk;
      EXPECT_LE(relative_l2(result.mtp_logits, golden.mtp_logits), 1e-4) << "T=" << golden.ids.size() << " chunk " << chunk;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

// A draft chain: MTP at the last prompt position, then MTP again on its own output (one position later), against
// the same two steps through the model's MtpModule directly.
TEST_P(MtpFixture, ChainedMtpStepsMatchTheModule) {
  CpuModelBackend backend(cpu_config(GetParam(), true));
  const std::vector<GoldenSequence> goldens = read_golden(std::string(FATHOM_FIXTURES_DIR) + "/" + GetParam());
  const GoldenSequence& golden = *std::max_element(goldens.begin(), goldens.end(), [](const auto& a, const auto& b) {
    return a.ids.size() < b.ids.size();
  });
  const int64_t count = static_cast<int64_t>(golden.ids.size()), dim = backend.config().hidden_size;
  const std::vector<int32_t> slots = iota_slots(count + 2, 0);
  SequencePrefillOptions options;
  options.with_mtp = true;
  prefill_sequence(backend, golden.ids, slots, options);  // main and MTP caches hold positions [0, count - 1)
  // The main forward of the last token was the final chunk; redo it alone so its hidden row is row 0.
  model::ForwardBatch last;
  last.add_sequence({golden.ids.back()}, count - 1, slots.data());
  last.attention_form = model::AttentionForm::kExpanded;
  backend.forward(last, {});
  const int32_t draft_a = 17, draft_b = 23;
  model::ForwardBatch step1, step2;
  step1.add_sequence({draft_a}, count - 1, slots.data());
  step2.add_sequence({draft_b}, count, slots.data());
  const std::vector<float> ours1 = backend.forward_mtp(step1, {0}, {0});
  const std::vector<float> ours2 = backend.forward_mtp(step2, {0}, {0});

  // The same through the model: main hidden of the whole sequence, the MTP over positions [0, count - 1), then the
  // two steps.
  model::DeepseekV3Model& deepseek = backend.model();
  kv_cache::LatentKvCache main_cache(deepseek.num_cache_layers(), count + 2, deepseek.cache_row_dim());
  kv_cache::LatentKvCache mtp_cache(1, count + 2, deepseek.cache_row_dim());
  model::ForwardBatch whole;
  whole.add_sequence(golden.ids, 0, slots.data());
  const std::vector<float> hidden = deepseek.forward(whole, main_cache, backend.context());
  model::ForwardBatch shifted;
  shifted.add_sequence(std::vector<int32_t>(golden.ids.begin() + 1, golden.ids.end()), 0, slots.data());
  deepseek.mtp()->forward(shifted, hidden.data(), mtp_cache, backend.context());
  const std::vector<float> h1 = deepseek.mtp()->forward(step1, hidden.data() + (count - 1) * dim, mtp_cache, backend.context());
  const std::vector<float> h2 = deepseek.mtp()->forward(step2, h1.data(), mtp_cache, backend.context());
  EXPECT_LE(relative_l2(ours1, deepseek.compute_logits(h1.data(), 1, backend.context())), 1e-5);
  EXPECT_LE(relative_l2(ours2, deepseek.compute_logits(h2.data(), 1, backend.context())), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MtpFixture, ::testing::Values("tiny-noqlora", "tiny-qlora-yarn"));

TEST(MtpSeam, ErrorsNameTheProblem) {
  CpuModelBackend without(cpu_config("tiny-noqlora", false));
  EXPECT_FALSE(without.has_mtp());
  SequencePrefillOptions options;
  options.with_mtp = true;
  const std::vector<int32_t> ids{3, 4, 5}, slots = iota_slots(8, 0);
  EXPECT_THROW(prefill_sequence(without, ids, slots, options), Error);
  model::ForwardBatch batch;
  batch.add_sequence({4}, 0, slots.data());
  EXPECT_THROW(without.forward_mtp(batch, {0}, {0}), Error);

  CpuModelBackend with(cpu_config("tiny-noqlora", true));
  EXPECT_THROW(with.forward_mtp(batch, {0}, {0}), Error);  // no previous forward: no hidden rows yet
  model::ForwardBatch main;
  main.add_sequence({3}, 0, slots.data());
  with.forward(main, {});
  EXPECT_THROW(with.forward_mtp(batch, {1}, {0}), Error);     // the previous forward had one row
  EXPECT_THROW(with.forward_mtp(batch, {0, 0}, {0}), Error);  // one hidden row per token
  EXPECT_THROW(with.forward_mtp(batch, {0}, {1}), Error);     // logit row past the batch
  EXPECT_THROW(with.forward_mtp(batch, {0}, {0}), Error);     // ... a failed forward leaves no hidden rows
  with.forward(main, {});
  EXPECT_EQ(with.forward_mtp(batch, {0}, {0}).size(), static_cast<size_t>(with.config().vocab_size));
  EXPECT_THROW(with.forward(main, {1}), Error);               // a failed main forward too
  EXPECT_THROW(with.forward_mtp(batch, {0}, {0}), Error);
  with.forward(main, {});
  // The CPU backend samples on the host: forward_mtp_sampled takes logit rows only.
  with.forward(main, {});
  EXPECT_THROW(with.forward_mtp_sampled(batch, {0}, {}, {0}, std::vector<sampling::DeviceSamplingRow>(1)), Error);
  with.forward(main, {});
  EXPECT_EQ(with.forward_mtp_sampled(batch, {0}, {0}, {}, {}).logits.size(), static_cast<size_t>(with.config().vocab_size));
}

}  // namespace
}  // namespace fathom::executor
