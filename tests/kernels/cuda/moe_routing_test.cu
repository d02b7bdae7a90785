// GPU MoE routing vs kernels::cpu::route_experts: identical expert ids, weights equal to fp32 rounding.
#include <cstring>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cpu/moe_routing.h"
#include "kernels/cuda/moe/moe_routing.h"

namespace fathom::kernels::cuda {
namespace {

using testing::random_normal;

struct RoutingCase {
  int32_t experts, groups, top_groups, top_k;
  bool normalize;
  float scale;
};

// Logits from a normal distribution (or small integers, for exact ties); bias optional.
void check_routing(const RoutingCase& c, int64_t tokens, bool with_bias, bool integer_logits, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "E " << c.experts << " G " << c.groups << " topk_group " << c.top_groups
                                    << " k " << c.top_k << " tokens " << tokens << " bias " << with_bias
                                    << " integer_logits " << integer_logits);
  std::mt19937 rng(seed);
  std::vector<float> logits = random_normal(rng, static_cast<size_t>(tokens * c.experts), 2.0f);
  if (integer_logits) {
    for (float& v : logits) v = std::round(v);  // many exact ties: checks lower-index tie breaking
  }
  std::vector<float> bias = random_normal(rng, static_cast<size_t>(c.experts), 0.05f);

  cpu::MoeRoutingParams cpu_params;
  cpu_params.num_experts = c.experts;
  cpu_params.num_groups = c.groups;
  cpu_params.top_groups = c.top_groups;
  cpu_params.top_k = c.top_k;
  cpu_params.normalize = c.normalize;
  cpu_params.routed_scaling_factor = c.scale;
  std::vector<int32_t> expected_ids(static_cast<size_t>(tokens * c.top_k));
  std::vector<float> expected_weights(expected_ids.size());
  cpu::route_experts(logits.data(), tokens, with_bias ? bias.data() : nullptr, cpu_params, expected_ids.data(),
                     expected_weights.data());

  DeviceBuffer<float> d_logits(logits), d_bias(bias);
  DeviceBuffer<int32_t> d_ids(expected_ids.size());
  DeviceBuffer<float> d_weights(expected_ids.size());
  d_ids.fill_bytes(0xff);
  d_weights.fill_bytes(0xff);
  MoeRoutingConfig config{c.experts, c.groups, c.top_groups, c.top_k, c.normalize, c.scale};
  moe_route(d_logits.data(), tokens, with_bias ? d_bias.data() : nullptr, config, d_ids.data(), d_weights.data(),
            nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int32_t> ids = d_ids.download();
  const std::vector<float> weights = d_weights.download();

  int64_t id_mismatches = 0, weight_bit_mismatches = 0;
  double max_weight_error = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] != expected_ids[i]) {
      if (id_mismatches < 5) ADD_FAILURE() << "token " << i / c.top_k << " slot " << i % c.top_k << ": id " << ids[i]
                                           << ", expected " << expected_ids[i];
      ++id_mismatches;
    }
    ASSERT_TRUE(std::isfinite(weights[i])) << "weight " << i << " not written";
    if (std::memcmp(&weights[i], &expected_weights[i], sizeof(float)) != 0) ++weight_bit_mismatches;
    max_weight_error = std::max(max_weight_error, std::fabs(double(weights[i]) - expected_weights[i]) /
                                                      std::max(1e-30, std::fabs(double(expected_weights[i]))));
  }
  EXPECT_EQ(id_mismatches, 0);
  EXPECT_LE(max_weight_error, 1e-6);
  // The kernel reproduces the CPU's fp32 operations; bitwise equality is expected and reported.
  EXPECT_EQ(weight_bit_mismatches, 0) << "max relative weight error " << max_weight_error;
}

const RoutingCase kDeepSeekV3{256, 8, 4, 8, true, 2.5f};

TEST(CudaMoeRouting, DeepSeekV3MatchesCpu) {
  FATHOM_REQUIRE_GPU();
  uint32_t seed = 1;
  for (int64_t tokens : {1, 2, 7, 33, 256, 1000, 4096}) check_routing(kDeepSeekV3, tokens, true, false, seed++);
}

TEST(CudaMoeRouting, WithoutBiasAndWithTies) {
  FATHOM_REQUIRE_GPU();
  check_routing(kDeepSeekV3, 517, false, false, 11);
  check_routing(kDeepSeekV3, 517, false, true, 12);  // integer logits, no bias: exact ties everywhere
  check_routing(kDeepSeekV3, 517, true, true, 13);
}

TEST(CudaMoeRouting, OtherConfigurations) {
  FATHOM_REQUIRE_GPU();
  const RoutingCase cases[] = {
      {64, 1, 1, 6, false, 1.0f},    // no groups (V2-Lite-like), unnormalised
      {16, 4, 2, 3, true, 1.0f},     // tiny
      {24, 3, 2, 5, true, 16.0f},    // not a power of two
      {96, 4, 2, 6, true, 2.5f},     // 65-128 experts: four per lane
      {128, 8, 3, 8, true, 2.5f},
      {160, 8, 3, 6, true, 1.0f},    // 5 experts per lane, 20 per group
      {512, 16, 5, 12, true, 2.0f},  // largest supported
      {32, 32, 32, 32, false, 1.0f}, // one expert per group, k = E
      {7, 1, 1, 1, true, 1.0f},      // k = 1
  };
  uint32_t seed = 100;
  for (const RoutingCase& c : cases) {
    for (int64_t tokens : {1, 5, 129}) {
      check_routing(c, tokens, true, false, seed++);
      check_routing(c, tokens, false, true, seed++);
    }
  }
}

TEST(CudaMoeRouting, RejectsUnsupportedConfigurations) {
  FATHOM_REQUIRE_GPU();
  EXPECT_THROW(validate_moe_routing_config({256, 7, 4, 8, true, 1.0f}), Error);   // groups do not divide experts
  EXPECT_THROW(validate_moe_routing_config({256, 8, 9, 8, true, 1.0f}), Error);   // top_groups > groups
  EXPECT_THROW(validate_moe_routing_config({256, 8, 1, 33, true, 1.0f}), Error);  // k > group size * top_groups
  EXPECT_THROW(validate_moe_routing_config({1024, 8, 4, 8, true, 1.0f}), Error);  // too many experts
  EXPECT_NO_THROW(validate_moe_routing_config({256, 8, 4, 8, true, 2.5f}));
}

}  // namespace
}  // namespace fathom::kernels::cuda
