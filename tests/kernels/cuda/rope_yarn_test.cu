// GPU RoPE (YaRN frequencies, interleaved or split halves) on q heads and k_pe rows vs kernels::cpu::apply_rope;
// its cos/sin table vs the cos/sin it computes without one.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/rope/rope.h"

namespace fathom::kernels::cuda {
namespace {

// YaRN-scaled frequencies as DeepSeek-V3 configures them (factor 40, original context 4096, beta 32 / 1):
// high frequencies kept, low ones divided by the factor, a linear ramp between; attention factor 0.1 ln(40) + 1.
cpu::RopeFrequencies yarn_frequencies(int64_t rope_dim, bool interleaved) {
  const double base = 10000.0, factor = 40.0, original_context = 4096.0, beta_fast = 32.0, beta_slow = 1.0;
  auto correction_dim = [&](double rotations) {
    return rope_dim * std::log(original_context / (rotations * 2 * M_PI)) / (2 * std::log(base));
  };
  const double low = std::max(0.0, std::floor(correction_dim(beta_fast)));
  const double high = std::min(double(rope_dim - 1), std::ceil(correction_dim(beta_slow)));
  cpu::RopeFrequencies f;
  f.interleaved = interleaved;
  for (int64_t i = 0; i < rope_dim / 2; ++i) {
    const double extrapolated = 1.0 / std::pow(base, 2.0 * i / rope_dim);
    const double interpolated = extrapolated / factor;
    const double ramp = std::clamp((i - low) / std::max(high - low, 1e-3), 0.0, 1.0);
    const double keep = 1.0 - ramp;
    f.inv_freq.push_back(static_cast<float>(interpolated * (1 - keep) + extrapolated * keep));
  }
  f.attention_factor = static_cast<float>(0.1 * std::log(factor) + 1.0);
  return f;
}

struct Layout {
  int64_t vectors_per_token, vector_stride, offset;  // rope part of vector h of token t at offset + (t*vpt + h)*stride
};

// Runs q-like and k-like targets in one launch and compares each with the CPU op on fp32 copies of the bf16 inputs.
void check_rope(int64_t tokens, int64_t rope_dim, bool interleaved, const Layout& q, const Layout& k,
                int64_t max_position, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "tokens " << tokens << " rope_dim " << rope_dim << " interleaved "
                                    << interleaved << " q stride " << q.vector_stride << " k stride " << k.vector_stride);
  std::mt19937 rng(seed);
  const cpu::RopeFrequencies freqs = yarn_frequencies(rope_dim, interleaved);
  std::vector<int32_t> positions(static_cast<size_t>(tokens));
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(max_position));
  for (int32_t& p : positions) p = pick(rng);
  if (tokens > 2) positions[1] = positions[0];  // repeated positions

  const Layout layouts[2] = {q, k};
  std::vector<std::vector<float>> host(2), expected(2);
  std::vector<DeviceBuffer<__nv_bfloat16>> device;
  RopeTarget targets[2];
  for (int t = 0; t < 2; ++t) {
    const Layout& l = layouts[t];
    const int64_t elements = l.offset + tokens * l.vectors_per_token * l.vector_stride;
    host[t] = testing::round_to_bf16(testing::random_normal(rng, static_cast<size_t>(elements)));
    expected[t] = host[t];
    cpu::apply_rope(expected[t].data() + l.offset, tokens * l.vectors_per_token, l.vector_stride, l.vectors_per_token,
                    positions.data(), freqs);
    device.emplace_back(testing::float_to_bf16_vector(host[t]));
    targets[t] = RopeTarget{device.back().data() + l.offset, l.vectors_per_token, l.vector_stride};
  }
  DeviceBuffer<int32_t> d_positions(positions);
  DeviceBuffer<float> d_inv_freq(freqs.inv_freq);
  RopeParams params{d_inv_freq.data(), static_cast<int32_t>(rope_dim), freqs.attention_factor, interleaved};
  apply_rope_bf16(targets, 2, tokens, d_positions.data(), params, nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());

  for (int t = 0; t < 2; ++t) {
    const Layout& l = layouts[t];
    const std::vector<float> got = testing::bf16_to_float_vector(device[t].download());
    std::vector<float> got_rope, expected_rope;
    int64_t other_changed = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const int64_t rel = static_cast<int64_t>(i) - l.offset;
      const bool in_rope = rel >= 0 && rel % l.vector_stride < rope_dim;
      if (in_rope) {
        got_rope.push_back(got[i]);
        expected_rope.push_back(expected[t][i]);
      } else {
        other_changed += got[i] != host[t][i];  // nope part and other columns untouched
      }
    }
    EXPECT_EQ(other_changed, 0) << "target " << t;
    EXPECT_LT(testing::relative_l2_error(got_rope, expected_rope), 4e-3) << "target " << t;  // bf16 storage
  }
}

TEST(CudaRope, DeepSeekV3QAndKpe) {
  FATHOM_REQUIRE_GPU();
  // q: [T, 128 heads, 128 nope + 64 rope]; k_pe: the last 64 of kv_a's [T, 512 + 64] rows.
  const Layout q{128, 192, 128}, k_pe{1, 576, 512};
  uint32_t seed = 1;
  for (int64_t tokens : {1, 5, 64, 300}) check_rope(tokens, 64, true, q, k_pe, 163840, seed++);
  check_rope(17, 64, false, q, k_pe, 4096, seed++);
}

TEST(CudaRope, OddShapesUseTheScalarPath) {
  FATHOM_REQUIRE_GPU();
  uint32_t seed = 50;
  check_rope(7, 6, true, Layout{3, 11, 5}, Layout{1, 6, 0}, 1000, seed++);
  check_rope(7, 6, false, Layout{3, 11, 5}, Layout{2, 9, 1}, 1000, seed++);
  check_rope(9, 64, true, Layout{16, 193, 129}, Layout{1, 577, 513}, 100000, seed++);  // misaligned strides
  check_rope(9, 32, false, Layout{4, 40, 8}, Layout{1, 32, 0}, 100000, seed++);
}

// apply_rope_bf16 with a cos/sin table gives the bits it gives without one, positions outside the table included
// (computed, not read); the table holds cos then sin of each position, scaled by attention_factor.
void check_table_matches_computed(int64_t tokens, int32_t rope_dim, bool interleaved, const Layout& q,
                                  int32_t table_positions, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "tokens " << tokens << " rope_dim " << rope_dim << " interleaved "
                                    << interleaved << " table rows " << table_positions);
  std::mt19937 rng(seed);
  const cpu::RopeFrequencies freqs = yarn_frequencies(rope_dim, interleaved);
  std::vector<int32_t> positions = {0, table_positions - 1, table_positions, 163839, -5};
  std::uniform_int_distribution<int32_t> pick(0, 2 * table_positions);
  while (static_cast<int64_t>(positions.size()) < tokens) positions.push_back(pick(rng));
  positions.resize(static_cast<size_t>(tokens));

  const int64_t elements = q.offset + tokens * q.vectors_per_token * q.vector_stride;
  const std::vector<__nv_bfloat16> x = testing::float_to_bf16_vector(testing::random_normal(rng, elements));
  DeviceBuffer<__nv_bfloat16> computed(x), tabled(x);
  DeviceBuffer<int32_t> d_positions(positions);
  DeviceBuffer<float> d_inv_freq(freqs.inv_freq);
  DeviceBuffer<float> table(static_cast<size_t>(table_positions) * rope_dim);
  table.fill_bytes(0xff);  // NaN: an entry the builder skipped would show in the comparison below
  RopeParams params{d_inv_freq.data(), rope_dim, freqs.attention_factor, interleaved};
  rope_build_cos_sin_table(params, table_positions, table.data(), nullptr);
  const RopeTarget computed_target{computed.data() + q.offset, q.vectors_per_token, q.vector_stride};
  apply_rope_bf16(&computed_target, 1, tokens, d_positions.data(), params, nullptr);
  params.cos_sin = table.data();
  params.max_positions = table_positions;
  const RopeTarget tabled_target{tabled.data() + q.offset, q.vectors_per_token, q.vector_stride};
  apply_rope_bf16(&tabled_target, 1, tokens, d_positions.data(), params, nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<__nv_bfloat16> a = computed.download(), b = tabled.download();
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(__nv_bfloat16)));

  const std::vector<float> entries = table.download();
  const int64_t half = rope_dim / 2;
  double max_error = 0;
  for (int64_t p = 0; p < table_positions; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<float>(p) * freqs.inv_freq[i];
      const double expected_cos = std::cos(angle) * freqs.attention_factor;
      const double expected_sin = std::sin(angle) * freqs.attention_factor;
      max_error = std::max({max_error, std::abs(entries[p * rope_dim + i] - expected_cos),
                            std::abs(entries[p * rope_dim + half + i] - expected_sin)});
      if (!(max_error < 1e-6)) FAIL() << "table entry " << p << ", " << i << " off by " << max_error;
    }
  }
}

TEST(CudaRope, CosSinTableMatchesComputedBitForBit) {
  FATHOM_REQUIRE_GPU();
  uint32_t seed = 80;
  for (bool interleaved : {true, false}) {
    check_table_matches_computed(300, 64, interleaved, Layout{128, 192, 128}, 4096, seed++);  // 16-byte path
    check_table_matches_computed(9, 6, interleaved, Layout{3, 11, 5}, 1000, seed++);          // scalar path
  }
  check_table_matches_computed(5, 64, true, Layout{1, 576, 512}, 163840, seed++);  // V3's full table
}

TEST(CudaRope, RejectsBadParameters) {
  FATHOM_REQUIRE_GPU();
  DeviceBuffer<float> inv_freq(4);
  DeviceBuffer<__nv_bfloat16> x(64);
  RopeTarget target{x.data(), 1, 8};
  EXPECT_THROW(apply_rope_bf16(&target, 1, 1, nullptr, RopeParams{inv_freq.data(), 7, 1.0f, true}, nullptr), Error);
  EXPECT_THROW(apply_rope_bf16(&target, 3, 1, nullptr, RopeParams{inv_freq.data(), 8, 1.0f, true}, nullptr), Error);
  target.vector_stride = 4;
  EXPECT_THROW(apply_rope_bf16(&target, 1, 1, nullptr, RopeParams{inv_freq.data(), 8, 1.0f, true}, nullptr), Error);
  target.vector_stride = 8;
  RopeParams no_rows{inv_freq.data(), 8, 1.0f, true};
  no_rows.cos_sin = inv_freq.data();  // a table without max_positions
  EXPECT_THROW(apply_rope_bf16(&target, 1, 1, nullptr, no_rows, nullptr), Error);
  DeviceBuffer<float> table(8);
  EXPECT_THROW(rope_build_cos_sin_table(RopeParams{inv_freq.data(), 8, 1.0f, true}, 0, table.data(), nullptr), Error);
  EXPECT_THROW(rope_build_cos_sin_table(RopeParams{inv_freq.data(), 8, 1.0f, true}, 1, nullptr, nullptr), Error);
  EXPECT_THROW(rope_build_cos_sin_table(RopeParams{nullptr, 8, 1.0f, true}, 1, table.data(), nullptr), Error);
}

}  // namespace
}  // namespace fathom::kernels::cuda
