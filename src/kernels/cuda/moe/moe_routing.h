#pragma once
// DeepSeek-V3 MoE routing (noaux_tc) on the GPU: sigmoid scores, correction bias for selection only,
// group-limited top-k. Selects exactly the experts of kernels::cpu::route_experts (ties -> lower index).
#include <cuda_runtime.h>

#include <cstdint>

namespace fathom::kernels::cuda {

struct MoeRoutingConfig {
  int32_t num_experts = 0;            // E, at most 512
  int32_t num_groups = 1;             // G (n_group), divides E, at most 32
  int32_t top_groups = 1;             // groups kept per token (topk_group), in [1, G]
  int32_t top_k = 1;                  // experts per token, in [1, 32] and <= top_groups * E / G
  bool normalize = true;              // norm_topk_prob: weights /= (sum + 1e-20)
  float routed_scaling_factor = 1.0f; // applied after normalization
};

// Throws fathom::Error naming the offending field when the configuration is unsupported.
void validate_moe_routing_config(const MoeRoutingConfig& config);

// router_logits:   [num_tokens, E] fp32 (device)
// correction_bias: [E] fp32 (device) or nullptr
// expert_ids:      [num_tokens, top_k] int32 (device), by descending biased score
// expert_weights:  [num_tokens, top_k] fp32 (device), unbiased sigmoid scores, normalized, times the scaling factor
// One warp per token; no host sync, no allocation (graph-capturable).
void moe_route(const float* router_logits, int64_t num_tokens, const float* correction_bias,
               const MoeRoutingConfig& config, int32_t* expert_ids, float* expert_weights, cudaStream_t stream);

}  // namespace fathom::kernels::cuda
