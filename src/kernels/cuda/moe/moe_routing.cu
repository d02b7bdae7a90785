#include "kernels/cuda/moe/moe_routing.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe/moe_routing_warp.cuh"
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda {
namespace {

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 4;
constexpr int kMaxExpertsPerLane = 16;  // E <= 512

// One warp per token (moe_routing_warp.cuh). Shared memory: [kWarpsPerBlock][E] biased scores.
template <int kPerLane>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarpSize)
    moe_routing_kernel(const float* __restrict__ router_logits,   // [T, E]
                       int64_t num_tokens,
                       const float* __restrict__ correction_bias, // [E] or null
                       int num_experts, int num_groups, int top_groups, int top_k,
                       int lanes_per_group,                       // power of two, lanes_per_group * G <= 32
                       bool normalize, float routed_scaling_factor,
                       int32_t* __restrict__ expert_ids,          // [T, k]
                       float* __restrict__ expert_weights) {      // [T, k]
  begin_dependent_kernel();  // launched programmatically (programmatic_launch.cuh)
  extern __shared__ float choice_shared[];  // [kWarpsPerBlock][E]
  const int warp = threadIdx.x / kWarpSize;
  const int64_t token = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (token >= num_tokens) return;  // whole warp leaves; the kernel has no block-wide barrier
  moe_routing_detail::route_token_in_warp<kPerLane>(router_logits + token * num_experts, correction_bias, num_experts,
                                            num_groups, top_groups, top_k, lanes_per_group, normalize,
                                            routed_scaling_factor, choice_shared + warp * num_experts,
                                            expert_ids + token * top_k, expert_weights + token * top_k, nullptr);
}

template <int kPerLane>
void launch_routing(const float* router_logits, int64_t num_tokens, const float* correction_bias,
                    const MoeRoutingConfig& config, int lanes_per_group, int32_t* expert_ids, float* expert_weights,
                    cudaStream_t stream) {
  const int64_t blocks = (num_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const size_t shared_bytes = sizeof(float) * kWarpsPerBlock * static_cast<size_t>(config.num_experts);
  launch_programmatic(moe_routing_kernel<kPerLane>, dim3(static_cast<unsigned>(blocks)), dim3(kWarpsPerBlock * kWarpSize),
                      shared_bytes, stream, router_logits, num_tokens, correction_bias, config.num_experts,
                      config.num_groups, config.top_groups, config.top_k, lanes_per_group, config.normalize,
                      config.routed_scaling_factor, expert_ids, expert_weights);
}

}  // namespace

void validate_moe_routing_config(const MoeRoutingConfig& config) {
  FATHOM_CHECK(config.num_experts > 0 && config.num_experts <= kWarpSize * kMaxExpertsPerLane,
               "moe routing: num_experts " << config.num_experts << " outside [1, " << kWarpSize * kMaxExpertsPerLane << "]");
  FATHOM_CHECK(config.num_groups >= 1 && config.num_groups <= kWarpSize && config.num_experts % config.num_groups == 0,
               "moe routing: num_groups " << config.num_groups << " must be in [1, 32] and divide num_experts "
                                          << config.num_experts);
  FATHOM_CHECK(config.top_groups >= 1 && config.top_groups <= config.num_groups,
               "moe routing: top_groups " << config.top_groups << " outside [1, num_groups=" << config.num_groups << "]");
  const int32_t selectable = config.top_groups * (config.num_experts / config.num_groups);
  FATHOM_CHECK(config.top_k >= 1 && config.top_k <= kWarpSize && config.top_k <= selectable,
               "moe routing: top_k " << config.top_k << " outside [1, min(32, " << selectable << ")]");
}

void moe_route(const float* router_logits, int64_t num_tokens, const float* correction_bias,
               const MoeRoutingConfig& config, int32_t* expert_ids, float* expert_weights, cudaStream_t stream) {
  validate_moe_routing_config(config);
  FATHOM_CHECK(num_tokens >= 0, "moe routing: num_tokens " << num_tokens);
  if (num_tokens == 0) return;
  const int lanes_per_group = moe_routing_detail::routing_lanes_per_group(config.num_groups);
  const int per_lane = (config.num_experts + kWarpSize - 1) / kWarpSize;
  if (per_lane <= 1) {
    launch_routing<1>(router_logits, num_tokens, correction_bias, config, lanes_per_group, expert_ids, expert_weights, stream);
  } else if (per_lane <= 2) {
    launch_routing<2>(router_logits, num_tokens, correction_bias, config, lanes_per_group, expert_ids, expert_weights, stream);
  } else if (per_lane <= 4) {
    launch_routing<4>(router_logits, num_tokens, correction_bias, config, lanes_per_group, expert_ids, expert_weights, stream);
  } else if (per_lane <= 8) {
    launch_routing<8>(router_logits, num_tokens, correction_bias, config, lanes_per_group, expert_ids, expert_weights, stream);
  } else {
    launch_routing<16>(router_logits, num_tokens, correction_bias, config, lanes_per_group, expert_ids, expert_weights, stream);
  }
}

}  // namespace fathom::kernels::cuda
