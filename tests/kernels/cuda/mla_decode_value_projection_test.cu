// The MLA decode with the value projection in the same call (MlaDecodeArgs::value_weights): where the plan fuses it
// with the split combine (mla_project_split_values), values_out must hold the bits of the unfused sequence --
// mla_decode into out_latent, then mla_project_values -- for every sequence of the batch, whatever its split count
// (empty splits, one-tile sequences), at V3's 128 heads and TP8's 16, on pages of 1, 16 and 64 tokens; also when
// launched programmatically behind the kernel that writes q_latent, with the combine let launch early or late.
#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/mla/mla_absorb.h"
#include "kernels/cuda/mla/mla_decode.h"
#include "mla_test_util.h"
#include "programmatic_copy.cuh"

namespace fathom::testing {
namespace {

using kernels::cuda::MlaDecodeArgs;
using kernels::cuda::MlaDecodePlan;
using kernels::cuda::MlaKvBWeights;

constexpr int32_t kNope = 128, kV = 128, kLora = 512, kRope = 64;

struct ProjectionCase {
  std::string name;
  int32_t heads, page_size;
  std::vector<int32_t> seq_lens;
};

// Random e4m3 kv_b weights [heads * (nope + v), kv_lora] (no NaN encodings) with positive 128 x 128 block scales.
struct Fp8KvB {
  DeviceBuffer<uint8_t> values;
  DeviceBuffer<float> scales;
  MlaKvBWeights view(int32_t heads) const { return v3_fp8_kv_b(values.data(), scales.data(), heads); }
};

Fp8KvB make_kv_b(std::mt19937& rng, int32_t heads) {
  const size_t rows = static_cast<size_t>(heads) * (kNope + kV);
  std::vector<uint8_t> values(rows * kLora);
  for (uint8_t& value : values) {
    value = static_cast<uint8_t>(rng() & 0xffu);
    if ((value & 0x7fu) == 0x7fu) value ^= 1u;  // 0x7f / 0xff are NaN in e4m3
  }
  std::uniform_real_distribution<float> scale(2e-4f, 2e-3f);
  std::vector<float> scales(rows / 128 * (kLora / 128));
  for (float& s : scales) s = scale(rng);
  return {DeviceBuffer<uint8_t>(values), DeviceBuffer<float>(scales)};
}

struct ProjectionSetup {
  PagedLatentCache cache;
  DeviceBuffer<__nv_bfloat16> q_latent[2], q_latent_live, q_pe, out_latent, values_out;
  Fp8KvB kv_b;
};

ProjectionSetup make_setup(const ProjectionCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  ProjectionSetup s;
  s.cache = make_paged_cache(rng, c.seq_lens, kLora, kRope, c.page_size);
  const size_t batch = c.seq_lens.size();
  for (auto& q : s.q_latent)
    q = DeviceBuffer<__nv_bfloat16>(float_to_bf16_vector(round_to_bf16(random_normal(rng, batch * c.heads * kLora))));
  s.q_latent_live = DeviceBuffer<__nv_bfloat16>(batch * c.heads * kLora);
  s.q_pe =
      DeviceBuffer<__nv_bfloat16>(float_to_bf16_vector(round_to_bf16(random_normal(rng, batch * c.heads * kRope))));
  s.out_latent = DeviceBuffer<__nv_bfloat16>(batch * c.heads * kLora);
  s.values_out = DeviceBuffer<__nv_bfloat16>(batch * c.heads * kV);
  s.kv_b = make_kv_b(rng, c.heads);
  return s;
}

MlaDecodeArgs decode_args(const ProjectionCase& c, ProjectionSetup& s, const __nv_bfloat16* q_latent) {
  MlaDecodeArgs args;
  args.q_latent = q_latent;
  args.q_pe = s.q_pe.data();
  args.q_pe_head_stride = kRope;
  args.cache = s.cache.view();
  args.batch = s.cache.batch_view();
  args.out_latent = s.out_latent.data();
  args.num_heads = c.heads;
  args.softmax_scale = 1.0f / std::sqrt(static_cast<float>(kNope + kRope));
  return args;
}

std::vector<uint16_t> bits_of(const DeviceBuffer<__nv_bfloat16>& buffer) {
  const std::vector<__nv_bfloat16> values = buffer.download();
  std::vector<uint16_t> bits(values.size());
  std::memcpy(bits.data(), values.data(), bits.size() * sizeof(uint16_t));
  return bits;
}

class MlaDecodeValueProjection : public ::testing::TestWithParam<ProjectionCase> {};

TEST_P(MlaDecodeValueProjection, FusedMatchesCombineThenProjection) {
  FATHOM_REQUIRE_GPU();
  const ProjectionCase& c = GetParam();
  ProjectionSetup s = make_setup(c, 1234);
  const int32_t batch = static_cast<int32_t>(c.seq_lens.size());
  const int32_t max_len = *std::max_element(c.seq_lens.begin(), c.seq_lens.end());
  const MlaKvBWeights w = s.kv_b.view(c.heads);
  MlaDecodePlan heuristic = kernels::cuda::mla_decode_plan(device_sm_count(), batch, c.heads, max_len);
  MlaDecodePlan uneven = heuristic;  // 5 splits of an even division (some empty for short sequences)
  uneven.num_splits = 5;
  MlaDecodePlan fixed = heuristic;   // fixed 3-tile splits
  fixed.num_splits = (max_len + 3 * 64 - 1) / (3 * 64);
  fixed.tiles_per_split = 3;
  const MlaDecodePlan invariant =
      kernels::cuda::mla_decode_plan_batch_invariant(device_sm_count(), batch, c.heads, max_len, 163840);
  for (MlaDecodePlan plan : {heuristic, uneven, fixed, invariant}) {
    if (plan.num_splits < 2) continue;  // nothing to fuse with (the heuristic plan of a large batch)
    plan.fused_value_projection = true;
    SCOPED_TRACE(std::to_string(plan.num_splits) + " splits of " + std::to_string(plan.tiles_per_split) +
                 " tiles, at least " + std::to_string(plan.min_tiles_per_split));
    const size_t bytes = kernels::cuda::mla_decode_workspace_bytes(plan, batch, c.heads, kLora);
    DeviceBuffer<uint8_t> workspace(bytes);
    workspace.fill_bytes(0xff);  // poisoned: a split read but never written shows as NaN
    std::vector<uint16_t> expected[2];  // per q_latent source: mla_decode, then mla_project_values
    for (int source = 0; source < 2; ++source) {
      MlaDecodePlan unfused = plan;
      unfused.fused_value_projection = false;
      MlaDecodeArgs args = decode_args(c, s, s.q_latent[source].data());
      args.value_weights = &w;
      args.values_out = s.values_out.data();
      ASSERT_FALSE(kernels::cuda::mla_decode_fuses_value_projection(args, unfused, workspace.data()));
      s.values_out.fill_bytes(0xff);
      kernels::cuda::mla_decode(args, unfused, workspace.data(), bytes, nullptr);
      FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
      expected[source] = bits_of(s.values_out);
      // The same through the two public calls.
      MlaDecodeArgs plain = decode_args(c, s, s.q_latent[source].data());
      s.values_out.fill_bytes(0xff);
      kernels::cuda::mla_decode(plain, unfused, workspace.data(), bytes, nullptr);
      kernels::cuda::mla_project_values(s.out_latent.data(), batch, w, s.values_out.data(), nullptr);
      FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
      ASSERT_EQ(bits_of(s.values_out), expected[source]);
      ASSERT_EQ(std::count(expected[source].begin(), expected[source].end(), uint16_t{0xffff}), 0);
    }
    ASSERT_NE(expected[0], expected[1]);
    cudaStream_t stream;
    FATHOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (const bool late_combine_launch : {false, true}) {
      plan.late_combine_launch = late_combine_launch;
      MlaDecodeArgs args = decode_args(c, s, s.q_latent_live.data());
      args.value_weights = &w;
      args.values_out = s.values_out.data();
      ASSERT_TRUE(kernels::cuda::mla_decode_fuses_value_projection(args, plan, workspace.data()));
      for (int run = 0; run < 6; ++run) {
        FATHOM_CUDA_CHECK(cudaMemsetAsync(s.values_out.data(), 0xff, s.values_out.bytes(), stream));
        FATHOM_CUDA_CHECK(cudaMemsetAsync(workspace.data(), 0xff, workspace.bytes(), stream));
        programmatic_copy(s.q_latent[run % 2].data(), s.q_latent_live.data(), s.q_latent_live.bytes(), stream);
        kernels::cuda::mla_decode(args, plan, workspace.data(), bytes, stream);
        FATHOM_CUDA_CHECK(cudaStreamSynchronize(stream));
        const std::vector<uint16_t> got = bits_of(s.values_out);
        size_t first_diff = got.size();
        for (size_t i = 0; i < got.size() && first_diff == got.size(); ++i)
          if (got[i] != expected[run % 2][i]) first_diff = i;
        ASSERT_EQ(first_diff, got.size()) << "late launch " << late_combine_launch << ", run " << run
                                          << ": first difference at element " << first_diff << " (sequence "
                                          << first_diff / (static_cast<size_t>(c.heads) * kV) << ")";
      }
    }
    FATHOM_CUDA_CHECK(cudaStreamDestroy(stream));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MlaDecodeValueProjection,
    ::testing::Values(ProjectionCase{"v3_b1_page64", 128, 64, {4096}},
                      ProjectionCase{"v3_b3_page1", 128, 1, {700, 1, 2500}},
                      ProjectionCase{"tp8_b1_page64", 16, 64, {16384}},
                      ProjectionCase{"tp8_b8_page16", 16, 16, {5000, 64, 1, 900, 2048, 130, 77, 4000}},
                      ProjectionCase{"v3_b8_page64", 128, 64, {1000, 65, 3000, 1, 64, 2000, 129, 800}}),
    [](const ::testing::TestParamInfo<ProjectionCase>& info) { return info.param.name; });

TEST(MlaDecodeValueProjection, PlanFusesSmallSplitBatchesAt128Heads) {  // host code: runs without a GPU (CI)
  using kernels::cuda::mla_decode_plan;
  EXPECT_TRUE(mla_decode_plan(132, 1, 128, 4096).fused_value_projection);
  EXPECT_TRUE(mla_decode_plan(132, 4, 128, 16384).fused_value_projection);
  EXPECT_FALSE(mla_decode_plan(132, 8, 128, 4096).fused_value_projection);  // more than 4 sequences
  EXPECT_FALSE(mla_decode_plan(132, 1, 16, 4096).fused_value_projection);   // TP8's 16 heads: W_UV too small
  EXPECT_FALSE(mla_decode_plan(132, 128, 128, 4096).fused_value_projection);  // one split: no combine
  using kernels::cuda::mla_decode_plan_batch_invariant;
  EXPECT_FALSE(mla_decode_plan_batch_invariant(132, 1, 128, 100, 163840).fused_value_projection);  // one split
  EXPECT_TRUE(mla_decode_plan_batch_invariant(132, 1, 128, 4096, 163840).fused_value_projection);
  EXPECT_FALSE(mla_decode_plan_batch_invariant(132, 8, 128, 4096, 163840).fused_value_projection);
}

}  // namespace
}  // namespace fathom::testing
