#include "kernels/cuda/moe/moe_routing.h"

#include <climits>
#include <cmath>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda {
namespace {

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 4;
constexpr int kMaxExpertsPerLane = 16;  // E <= 512
constexpr unsigned kFullMask = 0xffffffffu;

// The CPU reference computes 1 / (1 + expf(-x)) in fp32 with glibc's (correctly rounded in practice) expf.
// exp in double rounded once to fp32 reproduces that rounding, so scores, and hence selections, match bit for bit.
__device__ __forceinline__ float sigmoid_like_cpu(float x) {
  const float e = static_cast<float>(exp(-static_cast<double>(x)));
  return __fdiv_rn(1.0f, __fadd_rn(1.0f, e));
}

// Order-preserving map of a (non-NaN) float to uint32: larger float -> larger key; -0 folds onto +0.
__device__ __forceinline__ unsigned order_key(float v) {
  if (v == 0.0f) v = 0.0f;
  const unsigned bits = __float_as_uint(v);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// (value, index) order of the CPU's partial_sort: larger value first, lower index on ties.
__device__ __forceinline__ bool ranks_before(float value_a, int index_a, float value_b, int index_b) {
  return value_a > value_b || (value_a == value_b && index_a < index_b);
}

// One warp per token. Lane l holds experts e = j * 32 + l for j < kPerLane (coalesced 128-byte loads per j).
// Shared memory: [kWarpsPerBlock][E] biased scores, read back per group for the group top-2.
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
  const int lane = threadIdx.x % kWarpSize;
  const int64_t token = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (token >= num_tokens) return;  // whole warp leaves; the kernel has no block-wide barrier
  float* choice_row = choice_shared + warp * num_experts;
  const float* logits_row = router_logits + token * num_experts;

  // All loads are issued before any math (the double-precision exp may be a call the compiler will not move
  // loads across), so the token pays one memory round trip.
  float score[kPerLane];   // logit, then unbiased sigmoid
  float choice[kPerLane];  // bias, then biased score (-inf once masked)
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int e = j * kWarpSize + lane;
    score[j] = e < num_experts ? logits_row[e] : 0.0f;
    choice[j] = (correction_bias && e < num_experts) ? correction_bias[e] : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int e = j * kWarpSize + lane;
    if (e < num_experts) {
      score[j] = sigmoid_like_cpu(score[j]);
      choice[j] = __fadd_rn(score[j], choice[j]);
      choice_row[e] = choice[j];
    } else {
      choice[j] = -INFINITY;
    }
  }

  if (num_groups > 1) {
    __syncwarp();
    // Group score = sum of the group's two largest biased scores; lanes_per_group lanes scan one group.
    const int group_size = num_experts / num_groups;
    const int group = lane / lanes_per_group;
    const int sub_lane = lane % lanes_per_group;
    float best = -INFINITY, second = -INFINITY;
    if (group < num_groups) {
      const float* begin = choice_row + group * group_size;
      for (int i = sub_lane; i < group_size; i += lanes_per_group) {
        const float v = begin[i];
        if (v > best) {
          second = best;
          best = v;
        } else if (v > second) {
          second = v;
        }
      }
    }
    for (int offset = 1; offset < lanes_per_group; offset <<= 1) {
      const float other_best = __shfl_xor_sync(kFullMask, best, offset);
      const float other_second = __shfl_xor_sync(kFullMask, second, offset);
      const float merged_second = fmaxf(fminf(best, other_best), fmaxf(second, other_second));
      best = fmaxf(best, other_best);
      second = merged_second;
    }
    const float group_sum = __fadd_rn(best, second);
    // Lane g < G takes group g's score, then counts the groups ranked before it.
    const float my_group_score = __shfl_sync(kFullMask, group_sum, (lane * lanes_per_group) & (kWarpSize - 1));
    int rank = 0;
    for (int h = 0; h < num_groups; ++h) {
      const float other = __shfl_sync(kFullMask, my_group_score, h);
      rank += ranks_before(other, h, my_group_score, lane) ? 1 : 0;
    }
    const unsigned kept_groups = __ballot_sync(kFullMask, lane < num_groups && rank < top_groups);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int e = j * kWarpSize + lane;
      if (e < num_experts && !((kept_groups >> (e / group_size)) & 1u)) choice[j] = -INFINITY;
    }
  }

  // Top-k by repeated warp argmax; lane i keeps the i-th winner. Each round is two warp reductions (redux.sync):
  // the largest order key, then the lowest expert index holding it (ties -> lower index, as the CPU).
  unsigned key[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) key[j] = order_key(choice[j]);
  unsigned taken = 0;  // bit j: slot j already selected
  int my_expert = 0;
  float my_score = 0.0f;
  for (int i = 0; i < top_k; ++i) {
    unsigned best_key = 0, best_index = UINT_MAX;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int e = j * kWarpSize + lane;
      const bool available = e < num_experts && !((taken >> j) & 1u);
      // Slots run in ascending expert order, so a strict '>' keeps the lower index on ties.
      if (available && (best_index == UINT_MAX || key[j] > best_key)) {
        best_key = key[j];
        best_index = static_cast<unsigned>(e);
      }
    }
    const unsigned max_key = __reduce_max_sync(kFullMask, best_key);
    const int winner = static_cast<int>(__reduce_min_sync(kFullMask, best_key == max_key ? best_index : UINT_MAX));
    const int owner = winner % kWarpSize;
    const int slot = winner / kWarpSize;
    float winner_score = 0.0f;
    if (lane == owner) {
      taken |= 1u << slot;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        if (j == slot) winner_score = score[j];
      }
    }
    winner_score = __shfl_sync(kFullMask, winner_score, owner);
    if (lane == i) {
      my_expert = winner;
      my_score = winner_score;
    }
  }

  // Weights: same summation order as the CPU (winner 0, 1, ...).
  float weight_sum = 0.0f;
  for (int i = 0; i < top_k; ++i) weight_sum = __fadd_rn(weight_sum, __shfl_sync(kFullMask, my_score, i));
  if (lane < top_k) {
    float weight = my_score;
    if (normalize) weight = __fdiv_rn(weight, __fadd_rn(weight_sum, 1e-20f));
    weight = __fmul_rn(weight, routed_scaling_factor);
    expert_ids[token * top_k + lane] = my_expert;
    expert_weights[token * top_k + lane] = weight;
  }
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
  int lanes_per_group = 1;
  while (lanes_per_group * 2 * config.num_groups <= kWarpSize) lanes_per_group *= 2;
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
