#include "kernels/cpu/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/cpu/vector_math.h"

namespace fathom::kernels::cpu {

void route_experts(const float* router_logits, int64_t num_tokens, const float* correction_bias,
                   const MoeRoutingParams& params, int32_t* expert_ids, float* expert_weights) {
  const int64_t num_experts = params.num_experts;
  const int64_t group_size = num_experts / params.num_groups;
  std::vector<float> scores(static_cast<size_t>(num_experts)), choice(static_cast<size_t>(num_experts));
  std::vector<float> group_scores(static_cast<size_t>(params.num_groups));
  std::vector<int32_t> order(static_cast<size_t>(std::max(num_experts, params.num_groups)));
  // Ties break toward the lower index, like a stable sort.
  auto top_indices = [&](const std::vector<float>& values, int64_t count, int64_t k) {
    std::iota(order.begin(), order.begin() + count, 0);
    std::partial_sort(order.begin(), order.begin() + k, order.begin() + count,
                      [&](int32_t a, int32_t b) { return values[a] > values[b] || (values[a] == values[b] && a < b); });
  };
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t e = 0; e < num_experts; ++e) {
      scores[e] = sigmoid(router_logits[t * num_experts + e]);
      choice[e] = scores[e] + (correction_bias ? correction_bias[e] : 0.0f);
    }
    if (params.num_groups > 1) {
      for (int64_t g = 0; g < params.num_groups; ++g) {
        const float* begin = choice.data() + g * group_size;
        float best = -std::numeric_limits<float>::infinity(), second = best;
        for (int64_t i = 0; i < group_size; ++i) {
          if (begin[i] > best) { second = best; best = begin[i]; }
          else if (begin[i] > second) { second = begin[i]; }
        }
        group_scores[g] = best + second;
      }
      top_indices(group_scores, params.num_groups, params.top_groups);
      std::vector<bool> keep(static_cast<size_t>(params.num_groups), false);
      for (int64_t i = 0; i < params.top_groups; ++i) keep[order[i]] = true;
      for (int64_t e = 0; e < num_experts; ++e) {
        if (!keep[e / group_size]) choice[e] = -std::numeric_limits<float>::infinity();
      }
    }
    top_indices(choice, num_experts, params.top_k);
    float weight_sum = 0.0f;
    for (int64_t i = 0; i < params.top_k; ++i) {
      expert_ids[t * params.top_k + i] = order[i];
      expert_weights[t * params.top_k + i] = scores[order[i]];
      weight_sum += scores[order[i]];
    }
    for (int64_t i = 0; i < params.top_k; ++i) {
      float& weight = expert_weights[t * params.top_k + i];
      if (params.normalize) weight /= (weight_sum + 1e-20f);
      weight *= params.routed_scaling_factor;
    }
  }
}

}  // namespace fathom::kernels::cpu
