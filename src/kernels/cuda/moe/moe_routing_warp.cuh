#pragma once
// One token's DeepSeek-V3 routing by one warp (sigmoid scores, correction bias for selection only, group-limited
// top-k, ties -> lower index as kernels::cpu::route_experts): shared by the routing kernel (moe_routing.cu) and the
// fused decode routing + permutation kernel (moe_route_permute.cu). Device-only.
#include <climits>
#include <cmath>
#include <cstdint>

namespace fathom::kernels::cuda::moe_routing_detail {

constexpr int kWarpSize = 32;
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

// The calling warp routes one token. Lane l holds experts e = j * 32 + l for j < kPerLane (coalesced loads).
// choice_row: shared [E] scratch of this warp (biased scores, read back per group for the group top-2).
// Lane i < top_k writes the i-th choice to expert_ids[i] / expert_weights[i] (and expert_ids_copy[i] if not null).
template <int kPerLane>
__device__ __forceinline__ void route_token_in_warp(const float* __restrict__ logits_row,     // [E]
                                                    const float* __restrict__ correction_bias,  // [E] or null
                                                    int num_experts, int num_groups, int top_groups, int top_k,
                                                    int lanes_per_group,  // power of two, lanes_per_group * G <= 32
                                                    bool normalize, float routed_scaling_factor, float* choice_row,
                                                    int32_t* expert_ids, float* expert_weights,
                                                    int32_t* expert_ids_copy) {
  const int lane = threadIdx.x % kWarpSize;

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
    expert_ids[lane] = my_expert;
    expert_weights[lane] = weight;
    if (expert_ids_copy) expert_ids_copy[lane] = my_expert;
  }
}


// Host: lanes that scan one group for the group top-2 (the largest power of two with lanes * G <= 32).
inline int routing_lanes_per_group(int num_groups) {
  int lanes = 1;
  while (lanes * 2 * num_groups <= kWarpSize) lanes *= 2;
  return lanes;
}

}  // namespace fathom::kernels::cuda::moe_routing_detail
