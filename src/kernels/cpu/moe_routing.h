#pragma once
// DeepSeek-V3 routing (noaux_tc) in fp32: sigmoid scores, bias for selection only, group-limited top-k.
#include <cstdint>

namespace fathom::kernels::cpu {

struct MoeRoutingParams {
  int64_t num_experts = 0;
  int64_t num_groups = 1;
  int64_t top_groups = 1;          // groups kept per token (topk_group)
  int64_t top_k = 1;               // experts per token (num_experts_per_tok)
  bool normalize = true;           // norm_topk_prob
  float routed_scaling_factor = 1.0f;
};

// router_logits: [num_tokens, num_experts]; correction_bias: [num_experts] (may be null);
// expert_ids / expert_weights: [num_tokens, top_k], ordered by descending biased score.
// Group score = sum of the group's top-2 biased scores; dropped groups' experts are masked to -inf;
// weights are the unbiased sigmoid scores, normalised (sum + 1e-20) when requested, times the scaling factor.
void route_experts(const float* router_logits, int64_t num_tokens, const float* correction_bias,
                   const MoeRoutingParams& params, int32_t* expert_ids, float* expert_weights);

}  // namespace fathom::kernels::cpu
