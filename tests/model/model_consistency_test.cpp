// Internal consistency of the CPU forward: attention forms, chunking, batching, decode vs prefill, checkpoint I/O.
#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"
#include "model/generation.h"
#include "model/weight_loader.h"
#include "tiny_model.h"

namespace fathom::model {
namespace {

double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

class TinyModel : public ::testing::Test {
 protected:
  void SetUp() override {
    fathom::testing::write_config(dir_.path(), fathom::testing::tiny_config_json());
    LoadOptions options;
    options.model_dir = dir_.path();
    options.format = LoadFormat::kDummy;
    options.dummy_seed = 3;
    loaded_ = load_model(options);
    model_ = std::make_unique<DeepseekV3Model>(loaded_.config, loaded_.weights);
  }
  std::vector<int32_t> prompt(int n, int salt = 0) {
    std::vector<int32_t> ids;
    for (int i = 0; i < n; ++i) ids.push_back((i * 37 + salt * 11 + 5) % 300);
    return ids;
  }
  fathom::testing::TempDir dir_{"consistency"};
  LoadedModel loaded_;
  std::unique_ptr<DeepseekV3Model> model_;
  ThreadPool pool_{2};
  ExecutionContext exact_{&pool_, kernels::NumericMode::kExact};
};

TEST_F(TinyModel, AbsorbedAttentionEqualsExpanded) {
  auto ids = prompt(13);
  PrefillOptions expanded{0, AttentionForm::kExpanded}, absorbed{0, AttentionForm::kAbsorbed};
  SequenceLogits a = compute_sequence_logits(*model_, ids, true, exact_, expanded);
  SequenceLogits b = compute_sequence_logits(*model_, ids, true, exact_, absorbed);
  EXPECT_LT(relative_l2(b.logits, a.logits), 1e-5);
  EXPECT_LT(relative_l2(b.mtp_logits, a.mtp_logits), 1e-5);
  EXPECT_EQ(a.mtp_logits.size(), 12u * 300);
}

TEST_F(TinyModel, ChunkedPrefillEqualsOneShot) {
  auto ids = prompt(17);
  SequenceLogits whole = compute_sequence_logits(*model_, ids, false, exact_);
  for (int64_t chunk : {1, 4, 16}) {
    SequenceLogits chunked = compute_sequence_logits(*model_, ids, false, exact_, {chunk, AttentionForm::kAuto});
    EXPECT_LT(relative_l2(chunked.logits, whole.logits), 1e-5) << "chunk " << chunk;
  }
}

TEST_F(TinyModel, BatchCompositionDoesNotChangeResults) {
  auto a = prompt(9, 1), b = prompt(4, 2);
  kv_cache::LatentKvCache cache(model_->num_cache_layers(), 13, model_->cache_row_dim());
  std::vector<int32_t> slots_a = {12, 0, 1, 2, 3, 4, 5, 6, 7}, slots_b = {11, 10, 9, 8};  // scattered slots
  ForwardBatch batch;
  batch.add_sequence(a, 0, slots_a.data());
  batch.add_sequence(b, 0, slots_b.data());
  std::vector<float> together = model_->forward(batch, cache, exact_);
  for (auto [ids, offset] : {std::pair{a, 0}, std::pair{b, 9}}) {
    kv_cache::LatentKvCache alone_cache(model_->num_cache_layers(), 13, model_->cache_row_dim());
    std::vector<int32_t> slots(ids.size());
    std::iota(slots.begin(), slots.end(), 0);
    ForwardBatch alone;
    alone.add_sequence(ids, 0, slots.data());
    std::vector<float> hidden = model_->forward(alone, alone_cache, exact_);
    std::vector<float> part(together.begin() + offset * 200, together.begin() + (offset + ids.size()) * 200);
    EXPECT_EQ(part, hidden);  // bit-identical: every row is computed independently
  }
}

TEST_F(TinyModel, GreedyDecodeAgreesWithFullRecompute) {
  auto ids = prompt(6);
  GreedyOptions options;
  options.max_new_tokens = 6;
  options.ignore_eos = true;
  std::vector<int32_t> generated = greedy_generate(*model_, ids, options, exact_);
  ASSERT_EQ(generated.size(), 6u);
  std::vector<int32_t> sequence = ids;
  for (int32_t token : generated) {
    SequenceLogits full = compute_sequence_logits(*model_, sequence, false, exact_);
    EXPECT_EQ(argmax(full.logits.data() + (sequence.size() - 1) * 300, 300), token);
    sequence.push_back(token);
  }
  options.prefill.chunk_size = 2;
  EXPECT_EQ(greedy_generate(*model_, ids, options, exact_), generated);
}

TEST_F(TinyModel, W8A8StaysCloseToExact) {
  // One dense layer: random MoE layers amplify quantization noise through routing flips.
  LoadOptions options;
  options.model_dir = dir_.path();
  options.format = LoadFormat::kDummy;
  options.override_config = R"({"num_hidden_layers": 1})";
  LoadedModel one_layer = load_model(options);
  DeepseekV3Model model(one_layer.config, one_layer.weights);
  auto ids = prompt(20);
  ExecutionContext w8a8{&pool_, kernels::NumericMode::kW8A8};
  SequenceLogits exact = compute_sequence_logits(model, ids, false, exact_);
  SequenceLogits quantized = compute_sequence_logits(model, ids, false, w8a8);
  EXPECT_LT(relative_l2(quantized.logits, exact.logits), 0.1);
  EXPECT_GT(relative_l2(quantized.logits, exact.logits), 1e-3);  // activations really were quantized
}

TEST_F(TinyModel, CheckpointRoundTripGivesIdenticalLogits) {
  fathom::testing::TempDir checkpoint_dir("roundtrip");
  fathom::testing::write_config(checkpoint_dir.path(), fathom::testing::tiny_config_json());
  ModelConfig config = parse_model_config(fathom::testing::tiny_config_json());
  fathom::testing::write_checkpoint(checkpoint_dir.path(), make_dummy_tensors(config, 3, true).all(), 2);
  LoadOptions options;
  options.model_dir = checkpoint_dir.path();
  LoadedModel from_disk = load_model(options);
  DeepseekV3Model disk_model(from_disk.config, from_disk.weights);
  auto ids = prompt(8);
  EXPECT_EQ(compute_sequence_logits(disk_model, ids, true, exact_).logits,
            compute_sequence_logits(*model_, ids, true, exact_).logits);
}

TEST_F(TinyModel, OutOfVocabularyTokenIsAnError) {
  EXPECT_THROW(compute_sequence_logits(*model_, {1, 300}, false, exact_), Error);
  EXPECT_THROW(compute_sequence_logits(*model_, {-1}, false, exact_), Error);
}

}  // namespace
}  // namespace fathom::model
