// The CPU forward against golden logits from transformers' DeepseekV3ForCausalLM (tools/fixtures/make_fixtures.py).
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <gtest/gtest.h>

#include "model/generation.h"
#include "model/safetensors.h"
#include "model/weight_loader.h"

namespace fathom::model {
namespace {

struct GoldenSequence {
  std::vector<int32_t> ids;
  std::vector<float> logits;      // [T, V]
  std::vector<float> mtp_logits;  // [T-1, V]
  std::vector<int32_t> greedy;    // 8 new tokens
};

std::vector<std::string> fixture_dirs() {
  std::vector<std::string> dirs;
  for (const auto& entry : std::filesystem::directory_iterator(FATHOM_FIXTURES_DIR)) {
    if (std::filesystem::exists(entry.path() / "golden.safetensors")) dirs.push_back(entry.path().string());
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

std::vector<float> floats(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }
std::vector<int32_t> ints(const Tensor& t) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(static_cast<int32_t>(t.data<int64_t>()[i]));
  return out;
}

std::vector<GoldenSequence> read_golden(const std::string& dir) {
  auto file = SafetensorsFile::open(dir + "/golden.safetensors");
  std::vector<GoldenSequence> sequences;
  for (int i = 0; file->contains("seq" + std::to_string(i) + ".ids"); ++i) {
    const std::string prefix = "seq" + std::to_string(i) + ".";
    GoldenSequence s;
    s.ids = ints(file->tensor(prefix + "ids"));
    s.logits = floats(file->tensor(prefix + "logits"));
    if (file->contains(prefix + "mtp_logits")) s.mtp_logits = floats(file->tensor(prefix + "mtp_logits"));
    if (file->contains(prefix + "greedy")) s.greedy = ints(file->tensor(prefix + "greedy"));
    sequences.push_back(std::move(s));
  }
  return sequences;
}

double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

// Counts rows whose argmax agrees.
int64_t top1_agreements(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab) {
  int64_t agree = 0;
  for (size_t row = 0; row * vocab < a.size(); ++row) {
    agree += argmax(a.data() + row * vocab, vocab) == argmax(b.data() + row * vocab, vocab);
  }
  return agree;
}

class GoldenFixture : public ::testing::TestWithParam<std::string> {};

TEST(GoldenFixtures, ArePresent) { EXPECT_GE(fixture_dirs().size(), 2u) << "tests/fixtures/*/golden.safetensors missing"; }

TEST_P(GoldenFixture, ExactModeMatchesTransformers) {
  LoadOptions options;
  options.model_dir = GetParam();
  LoadedModel loaded = load_model(options);
  const std::vector<GoldenSequence> goldens = read_golden(GetParam());
  const bool with_mtp = goldens.size() > 1 && !goldens[1].mtp_logits.empty();
  EXPECT_EQ(loaded.weights.mtp.has_value(), with_mtp);
  DeepseekV3Model model(loaded.config, loaded.weights);
  ThreadPool pool;
  ExecutionContext context{&pool, kernels::NumericMode::kExact};
  double worst = 0, worst_mtp = 0;
  for (const GoldenSequence& golden : goldens) {
    SequenceLogits ours = compute_sequence_logits(model, golden.ids, with_mtp, context);
    ASSERT_EQ(ours.logits.size(), golden.logits.size());
    worst = std::max(worst, relative_l2(ours.logits, golden.logits));
    EXPECT_LE(relative_l2(ours.logits, golden.logits), 1e-4) << "T=" << golden.ids.size();
    if (with_mtp && golden.ids.size() > 1) {
      ASSERT_EQ(ours.mtp_logits.size(), golden.mtp_logits.size());
      worst_mtp = std::max(worst_mtp, relative_l2(ours.mtp_logits, golden.mtp_logits));
      EXPECT_LE(relative_l2(ours.mtp_logits, golden.mtp_logits), 1e-4) << "MTP, T=" << golden.ids.size();
    }
    if (!golden.greedy.empty()) {
      GreedyOptions greedy;
      greedy.max_new_tokens = static_cast<int64_t>(golden.greedy.size());
      greedy.ignore_eos = true;
      EXPECT_EQ(greedy_generate(model, golden.ids, greedy, context), golden.greedy) << "T=" << golden.ids.size();
    }
  }
  std::printf("[exact] %s: worst rel L2 logits %.2e, mtp %.2e\n", GetParam().c_str(), worst, worst_mtp);
}

TEST_P(GoldenFixture, W8A8ModeIsWithinTolerance) {
  LoadOptions options;
  options.model_dir = GetParam();
  LoadedModel loaded = load_model(options);
  DeepseekV3Model model(loaded.config, loaded.weights);
  ThreadPool pool;
  ExecutionContext context{&pool, kernels::NumericMode::kW8A8};
  const int64_t vocab = loaded.config.vocab_size;
  const bool with_mtp = loaded.weights.mtp.has_value();
  int64_t rows = 0, agree = 0;
  double worst = 0;
  for (const GoldenSequence& golden : read_golden(GetParam())) {
    SequenceLogits ours = compute_sequence_logits(model, golden.ids, with_mtp, context);
    worst = std::max(worst, relative_l2(ours.logits, golden.logits));
    EXPECT_LE(relative_l2(ours.logits, golden.logits), 3e-2) << "T=" << golden.ids.size();
    rows += static_cast<int64_t>(golden.ids.size());
    agree += top1_agreements(ours.logits, golden.logits, vocab);
    if (with_mtp && golden.ids.size() > 1) {
      EXPECT_LE(relative_l2(ours.mtp_logits, golden.mtp_logits), 3e-2) << "MTP, T=" << golden.ids.size();
      rows += static_cast<int64_t>(golden.ids.size()) - 1;
      agree += top1_agreements(ours.mtp_logits, golden.mtp_logits, vocab);
    }
  }
  EXPECT_GE(static_cast<double>(agree) / static_cast<double>(rows), 0.98) << agree << " of " << rows;
  std::printf("[w8a8] %s: worst rel L2 logits %.2e, top-1 agreement %lld/%lld\n", GetParam().c_str(), worst,
              static_cast<long long>(agree), static_cast<long long>(rows));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenFixture, ::testing::ValuesIn(fixture_dirs()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = std::filesystem::path(info.param).filename().string();
                           for (char& c : name) if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GoldenFixture);

}  // namespace
}  // namespace fathom::model
