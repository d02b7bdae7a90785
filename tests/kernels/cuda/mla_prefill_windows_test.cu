// The prefill's key windows (host plan, no GPU) and the merge of the windows' attention (GPU vs the CPU reference
// kernels::cpu::merge_attention_states).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cpu/attention_merge.h"
#include "kernels/cuda/mla/mla_merge.h"
#include "kernels/cuda/mla/mla_prefill_windows.h"

namespace fathom::kernels::cuda {
namespace {

// Every key of every sequence in exactly one pass, as windows cut at multiples of window_keys, a sequence's windows in
// increasing position with at most one per pass, no pass over window_keys keys (nor empty), and the prefix sums
// consistent.
void expect_valid_plan(const std::vector<int32_t>& kv_lens, int64_t window_keys) {
  SCOPED_TRACE("window " + std::to_string(window_keys) + ", " + std::to_string(kv_lens.size()) + " sequences");
  const PrefillKeyPlan plan = plan_prefill_key_passes(kv_lens, window_keys);
  const size_t batch = kv_lens.size();
  std::vector<int64_t> covered(batch, 0);
  int64_t total = 0;
  for (int32_t kv_len : kv_lens) total += kv_len;
  int64_t planned = 0;
  for (const PrefillKeyPass& pass : plan.passes) {
    ASSERT_EQ(pass.cu_kv_lens.size(), batch + 1);
    ASSERT_EQ(pass.key_positions.size(), batch);
    ASSERT_EQ(pass.cu_kv_lens[0], 0);
    ASSERT_GE(pass.num_keys, 1);
    if (window_keys > 0) ASSERT_LE(pass.num_keys, window_keys);
    ASSERT_EQ(pass.cu_kv_lens[batch], pass.num_keys);
    for (size_t b = 0; b < batch; ++b) {
      const int32_t keys = pass.cu_kv_lens[b + 1] - pass.cu_kv_lens[b];
      ASSERT_GE(keys, 0);
      if (keys == 0) continue;
      ASSERT_EQ(pass.key_positions[b], covered[b]) << "sequence " << b << ": windows out of order or overlapping";
      if (window_keys > 0) {
        ASSERT_EQ(pass.key_positions[b] % window_keys, 0) << "sequence " << b << ": a window not at a boundary";
        ASSERT_TRUE(keys == window_keys || pass.key_positions[b] + keys == kv_lens[b])
            << "sequence " << b << ": a window cut short before the sequence's end";
      }
      covered[b] += keys;
    }
    planned += pass.num_keys;
  }
  for (size_t b = 0; b < batch; ++b) EXPECT_EQ(covered[b], kv_lens[b]) << "sequence " << b;
  EXPECT_EQ(planned, total);
  EXPECT_EQ(plan.max_pass_keys(), plan.passes.empty() ? 0 : std::max_element(plan.passes.begin(), plan.passes.end(),
                                                                               [](const auto& a, const auto& b) {
                                                                                 return a.num_keys < b.num_keys;
                                                                               })->num_keys);
  if (window_keys == 0 && total > 0) EXPECT_EQ(plan.passes.size(), 1u);
}

TEST(PrefillKeyWindows, EveryKeyOnceInWindowsAtFixedPositions) {
  std::mt19937 rng(11);
  for (const int64_t window : {0, 1, 7, 128, 1000, 32768}) {
    expect_valid_plan({1}, window);
    expect_valid_plan({128, 129, 1}, window);
    expect_valid_plan({100000}, window);
    expect_valid_plan({0, 5, 0}, window);
    expect_valid_plan({}, window);
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<int32_t> kv_lens(std::uniform_int_distribution<size_t>(1, 9)(rng));
      for (int32_t& kv_len : kv_lens) kv_len = std::uniform_int_distribution<int32_t>(0, 5000)(rng);
      expect_valid_plan(kv_lens, window);
    }
  }
}

TEST(PrefillKeyWindows, OnePassWhenEveryKeyFitsAndPackedPassesOtherwise) {
  // Keys within one window: one pass, the whole prefix of every sequence from position 0.
  const PrefillKeyPlan fits = plan_prefill_key_passes(std::vector<int32_t>{100, 300, 1}, 401);
  ASSERT_EQ(fits.passes.size(), 1u);
  EXPECT_EQ(fits.passes[0].cu_kv_lens, (std::vector<int32_t>{0, 100, 400, 401}));
  EXPECT_EQ(fits.passes[0].key_positions, (std::vector<int32_t>{0, 0, 0}));
  // One 2500-key sequence and a short one with windows of 1000: the short one rides along in the last window's pass.
  const PrefillKeyPlan packed = plan_prefill_key_passes(std::vector<int32_t>{2500, 300}, 1000);
  ASSERT_EQ(packed.passes.size(), 3u);
  EXPECT_EQ(packed.passes[0].cu_kv_lens, (std::vector<int32_t>{0, 1000, 1000}));
  EXPECT_EQ(packed.passes[1].cu_kv_lens, (std::vector<int32_t>{0, 1000, 1000}));
  EXPECT_EQ(packed.passes[2].cu_kv_lens, (std::vector<int32_t>{0, 500, 800}));
  EXPECT_EQ(packed.passes[2].key_positions, (std::vector<int32_t>{2000, 0}));
  EXPECT_EQ(packed.max_pass_keys(), 1000);
  // The longest prefix first: a short sequence before it in the batch does not take a pass of its own.
  const PrefillKeyPlan longest_first = plan_prefill_key_passes(std::vector<int32_t>{100, 2500}, 1000);
  ASSERT_EQ(longest_first.passes.size(), 3u);
  EXPECT_EQ(longest_first.passes[2].cu_kv_lens, (std::vector<int32_t>{0, 100, 600}));
  EXPECT_EQ(longest_first.passes[2].key_positions, (std::vector<int32_t>{0, 2000}));
  EXPECT_THROW(plan_prefill_key_passes(std::vector<int32_t>{-1}, 10), Error);
  EXPECT_THROW(plan_prefill_key_passes(std::vector<int32_t>{10}, -1), Error);
}

TEST(MlaMergeAttention, MatchesTheCpuMergeAndKeepsAnUnseenWindowsRowsExactly) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(3);
  for (const auto [rows, heads, v_dim] : std::vector<std::tuple<int64_t, int32_t, int32_t>>{
           {1, 1, 128}, {37, 128, 128}, {5, 3, 29}, {9, 2, 256}, {300, 16, 64}}) {
    SCOPED_TRACE(std::to_string(rows) + " rows, " + std::to_string(heads) + " heads, v " + std::to_string(v_dim));
    const size_t values = static_cast<size_t>(rows * heads * v_dim), pairs = static_cast<size_t>(rows * heads);
    std::vector<float> acc = fathom::testing::round_to_bf16(fathom::testing::random_normal(rng, values));
    const std::vector<float> part = fathom::testing::round_to_bf16(fathom::testing::random_normal(rng, values));
    std::vector<float> acc_lse(pairs), part_lse(pairs);
    std::uniform_real_distribution<float> lse_value(-20.0f, 40.0f);
    std::uniform_int_distribution<int> kind(0, 5);
    const float inf = std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < pairs; ++i) {
      acc_lse[i] = lse_value(rng);
      part_lse[i] = lse_value(rng);
      switch (kind(rng)) {  // rows one side or both did not see: the kernel writes zeros there
        case 0: part_lse[i] = -inf; break;
        case 1: acc_lse[i] = -inf; std::fill_n(acc.begin() + i * v_dim, v_dim, 0.0f); break;
        case 2:
          acc_lse[i] = part_lse[i] = -inf;
          std::fill_n(acc.begin() + i * v_dim, v_dim, 0.0f);
          break;
        case 3: part_lse[i] = acc_lse[i] + 60.0f; break;  // one side dominates (its weight underflows the other's)
        default: break;
      }
    }
    std::vector<float> expected = acc, expected_lse = acc_lse;
    cpu::merge_attention_states(expected.data(), expected_lse.data(), part.data(), part_lse.data(), rows, heads, v_dim);

    DeviceBuffer<__nv_bfloat16> acc_device(fathom::testing::float_to_bf16_vector(acc)),
        part_device(fathom::testing::float_to_bf16_vector(part));
    DeviceBuffer<float> acc_lse_device(acc_lse), part_lse_device(part_lse);
    mla_merge_attention(acc_device.data(), acc_lse_device.data(), part_device.data(), part_lse_device.data(), rows,
                        heads, v_dim, nullptr);
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> merged = fathom::testing::bf16_to_float_vector(acc_device.download());
    const std::vector<float> merged_lse = acc_lse_device.download();
    size_t mismatches = 0;
    for (size_t i = 0; i < pairs; ++i) {
      if (std::isinf(expected_lse[i])) {
        EXPECT_TRUE(std::isinf(merged_lse[i]) && merged_lse[i] < 0) << "pair " << i << ": " << merged_lse[i];
      } else {
        EXPECT_NEAR(merged_lse[i], expected_lse[i], 1e-5f * std::max(1.0f, std::fabs(expected_lse[i]))) << "pair " << i;
      }
      const bool exact = std::isinf(acc_lse[i]) || std::isinf(part_lse[i]);  // one side weighs 0: the other's bits
      for (int32_t d = 0; d < v_dim; ++d) {
        const size_t at = i * v_dim + d;
        if (exact) {
          const float kept = std::isinf(part_lse[i]) ? (std::isinf(acc_lse[i]) ? 0.0f : acc[at]) : part[at];
          mismatches += std::memcmp(&merged[at], &kept, sizeof(float)) != 0 && !(merged[at] == 0.0f && kept == 0.0f);
        } else {
          // bf16 rounding of the result (the CPU keeps fp32): half an ulp of 2^-8 relative, plus fp32 noise
          mismatches += std::fabs(merged[at] - expected[at]) > 4e-3f * std::fabs(expected[at]) + 1e-6f;
        }
      }
    }
    EXPECT_EQ(mismatches, 0u);
  }
  EXPECT_THROW(mla_merge_attention(nullptr, nullptr, nullptr, nullptr, 1, 1, 257, nullptr), Error);
}

}  // namespace
}  // namespace fathom::kernels::cuda
