// The fused decode routing + permutation launch == moe_route followed by moe_build_permutation, every output bit for
// bit (the two-launch pair is itself checked against the CPU in moe_routing_test / moe_permutation_test).
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/moe/moe_route_permute.h"

namespace fathom::kernels::cuda {
namespace {

struct Outputs {
  DeviceBuffer<int32_t> ids, offsets, counts, row_token_slot, row_expert, token_slot_row, active;
  DeviceBuffer<float> weights;
  DeviceBuffer<uint8_t> workspace;

  Outputs(const MoePermutationShape& shape, int poison)
      : ids(static_cast<size_t>(shape.num_tokens * shape.top_k)),
        offsets(static_cast<size_t>(shape.num_experts + 1)),
        counts(static_cast<size_t>(shape.num_experts)),
        row_token_slot(static_cast<size_t>(moe_max_permuted_rows(shape))),
        row_expert(static_cast<size_t>(moe_max_permuted_rows(shape))),
        token_slot_row(static_cast<size_t>(shape.num_tokens * shape.top_k)),
        active(static_cast<size_t>(shape.num_experts)),
        weights(static_cast<size_t>(shape.num_tokens * shape.top_k)),
        workspace(std::max<size_t>(16, moe_permutation_workspace_bytes(shape))) {
    for (DeviceBuffer<int32_t>* b : {&ids, &offsets, &counts, &row_token_slot, &row_expert, &token_slot_row, &active}) {
      b->fill_bytes(poison);  // each run its own poison: an element one of them leaves unwritten differs
    }
    weights.fill_bytes(poison);
  }
  MoePermutation view() const {
    return {offsets.data(), counts.data(), row_token_slot.data(), row_expert.data(), token_slot_row.data(), active.data()};
  }
};

void check(const MoeRoutingConfig& config, int64_t tokens, bool with_bias, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "E " << config.num_experts << " G " << config.num_groups << " k " << config.top_k
                                    << " tokens " << tokens << " bias " << with_bias);
  std::mt19937 rng(seed);
  std::vector<float> logits = testing::random_normal(rng, static_cast<size_t>(tokens * config.num_experts), 2.0f);
  for (size_t i = 0; i < logits.size(); i += 7) logits[i] = std::round(logits[i]);  // some exact ties
  DeviceBuffer<float> d_logits(logits);
  DeviceBuffer<float> d_bias(testing::random_normal(rng, static_cast<size_t>(config.num_experts), 0.05f));
  const float* bias = with_bias ? d_bias.data() : nullptr;
  const MoePermutationShape shape{tokens, config.top_k, config.num_experts, 1};
  Outputs expected(shape, 0x55), got(shape, 0x66);
  moe_route(d_logits.data(), tokens, bias, config, expected.ids.data(), expected.weights.data(), nullptr);
  moe_build_permutation(expected.ids.data(), shape, expected.workspace.data(), expected.workspace.size(),
                        expected.view(), nullptr);
  moe_route_and_permute(d_logits.data(), bias, config, shape, got.ids.data(), got.weights.data(), got.workspace.data(),
                        got.workspace.size(), got.view(), nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  testing::expect_same_device_bits(got.ids, expected.ids, "expert ids");
  testing::expect_same_device_bits(got.weights, expected.weights, "expert weights");
  testing::expect_same_device_bits(got.offsets, expected.offsets, "expert offsets");
  testing::expect_same_device_bits(got.counts, expected.counts, "expert counts");
  testing::expect_same_device_bits(got.row_token_slot, expected.row_token_slot, "row_token_slot");
  testing::expect_same_device_bits(got.row_expert, expected.row_expert, "row_expert");
  testing::expect_same_device_bits(got.token_slot_row, expected.token_slot_row, "token_slot_row");
  testing::expect_same_device_bits(got.active, expected.active, "active experts");
  if (tokens == 0) {  // both paths are the two-launch pair here, so pin the values too
    EXPECT_EQ(got.offsets.download(), std::vector<int32_t>(static_cast<size_t>(config.num_experts + 1), 0));
    EXPECT_EQ(got.counts.download(), std::vector<int32_t>(static_cast<size_t>(config.num_experts), 0));
  }
}

TEST(CudaMoeRoutePermute, DeepSeekV3DecodeBatches) {
  FATHOM_REQUIRE_GPU();
  const MoeRoutingConfig v3{256, 8, 4, 8, true, 2.5f};
  uint32_t seed = 1;
  // 128 tokens x 8 = 1024 entries: the largest fused batch; 129 and 600 take the two-launch path.
  for (int64_t tokens : {1, 2, 7, 16, 17, 33, 64, 127, 128, 129, 600}) {
    EXPECT_EQ(moe_route_permute_fuses({tokens, 8, 256, 1}), tokens <= 128);
    check(v3, tokens, true, seed++);
  }
  check(v3, 5, false, seed++);
  check(v3, 0, true, seed++);  // an empty batch: offsets, counts and active experts still written (all zero)
}

TEST(CudaMoeRoutePermute, OtherConfigurations) {
  FATHOM_REQUIRE_GPU();
  const MoeRoutingConfig configs[] = {
      {64, 1, 1, 6, false, 1.0f},    // no groups, unnormalised
      {24, 3, 2, 5, true, 16.0f},    // not a power of two
      {96, 4, 2, 6, true, 2.5f},     // 65-128 experts: four per lane
      {128, 8, 3, 8, true, 2.5f},
      {512, 16, 5, 12, true, 2.0f},  // largest supported (shared memory above 48 KB)
      {7, 1, 1, 1, true, 1.0f},      // k = 1
  };
  uint32_t seed = 100;
  for (const MoeRoutingConfig& c : configs) {
    for (int64_t tokens : {1, 3, 40}) check(c, tokens, true, seed++);
  }
}

TEST(CudaMoeRoutePermute, RejectsAShapeThatDisagreesWithTheConfig) {
  const MoeRoutingConfig v3{256, 8, 4, 8, true, 2.5f};
  const MoePermutationShape other_k{1, 6, 256, 1};
  EXPECT_THROW(moe_route_and_permute(nullptr, nullptr, v3, other_k, nullptr, nullptr, nullptr, 0, MoePermutation{}, nullptr),
               std::exception);
}

}  // namespace
}  // namespace fathom::kernels::cuda
