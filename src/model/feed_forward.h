#pragma once
// The feed-forward half of a decoder layer: a dense SwiGLU MLP, or DeepSeekMoE (routed + shared experts).
#include "model/config.h"
#include "model/forward_batch.h"
#include "model/weights.h"

namespace fathom::model {

// out = down(silu(gate(x)) * up(x)); x: [num_tokens, H], out: [num_tokens, H].
void swiglu_mlp(const float* x, int64_t num_tokens, const MlpWeights& weights, const ExecutionContext& context, float* out);

// out = Σ_top-k weight_e · expert_e(x) + shared(x); routing in fp32 (kernels/cpu/moe_routing.h).
// x: [num_tokens, H], out: [num_tokens, H].
void moe_forward(const float* x, int64_t num_tokens, const ModelConfig& config, const MoeWeights& weights,
                 const ExecutionContext& context, float* out);

}  // namespace fathom::model
