#include "model/feed_forward.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/linear.h"
#include "kernels/cpu/moe_routing.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/cpu/vector_math.h"

namespace fathom::model {

namespace cpu = kernels::cpu;

void swiglu_mlp(const float* x, int64_t num_tokens, const MlpWeights& weights, const ExecutionContext& context, float* out) {
  const int64_t intermediate = weights.gate_proj.rows;
  std::vector<float> gate(static_cast<size_t>(num_tokens * intermediate));  // [n, I]
  std::vector<float> up(static_cast<size_t>(num_tokens * intermediate));    // [n, I]
  cpu::linear(x, num_tokens, weights.gate_proj, context.mode, gate.data(), *context.pool);
  cpu::linear(x, num_tokens, weights.up_proj, context.mode, up.data(), *context.pool);
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = cpu::silu(gate[i]) * up[i];
  cpu::linear(gate.data(), num_tokens, weights.down_proj, context.mode, out, *context.pool);
}

void moe_forward(const float* x, int64_t num_tokens, const ModelConfig& config, const MoeWeights& weights,
                 const ExecutionContext& context, float* out) {
  const int64_t hidden = config.hidden_size, num_experts = config.n_routed_experts, top_k = config.num_experts_per_tok;
  // Router in fp32: logits [n, E].
  kernels::WeightMatrix router{"mlp.gate", num_experts, hidden, weights.gate, Tensor()};
  std::vector<float> router_logits(static_cast<size_t>(num_tokens * num_experts));
  cpu::linear(x, num_tokens, router, kernels::NumericMode::kExact, router_logits.data(), *context.pool);
  std::vector<float> bias(static_cast<size_t>(num_experts), 0.0f);
  if (!weights.e_score_correction_bias.empty()) cpu::to_float(weights.e_score_correction_bias, bias.data());

  cpu::MoeRoutingParams params;
  params.num_experts = num_experts;
  params.num_groups = config.n_group;
  params.top_groups = config.topk_group;
  params.top_k = top_k;
  params.normalize = config.norm_topk_prob;
  params.routed_scaling_factor = static_cast<float>(config.routed_scaling_factor);
  std::vector<int32_t> expert_ids(static_cast<size_t>(num_tokens * top_k));  // [n, k]
  std::vector<float> expert_weights(static_cast<size_t>(num_tokens * top_k));  // [n, k]
  cpu::route_experts(router_logits.data(), num_tokens, bias.data(), params, expert_ids.data(), expert_weights.data());

  // Group tokens by expert so each expert runs once over all of its tokens.
  std::vector<std::vector<std::pair<int64_t, float>>> assignments(static_cast<size_t>(num_experts));
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t i = 0; i < top_k; ++i) assignments[expert_ids[t * top_k + i]].push_back({t, expert_weights[t * top_k + i]});
  }
  std::fill(out, out + num_tokens * hidden, 0.0f);
  std::vector<float> expert_in, expert_out;
  for (int64_t e = 0; e < num_experts; ++e) {
    const auto& tokens = assignments[e];
    if (tokens.empty()) continue;
    const int64_t count = static_cast<int64_t>(tokens.size());
    expert_in.resize(static_cast<size_t>(count * hidden));   // [count, H]
    expert_out.resize(static_cast<size_t>(count * hidden));  // [count, H]
    for (int64_t i = 0; i < count; ++i) std::copy_n(x + tokens[i].first * hidden, hidden, expert_in.data() + i * hidden);
    swiglu_mlp(expert_in.data(), count, weights.experts[e], context, expert_out.data());
    for (int64_t i = 0; i < count; ++i) cpu::axpy(tokens[i].second, expert_out.data() + i * hidden, out + tokens[i].first * hidden, hidden);
  }
  if (weights.shared) {
    std::vector<float> shared_out(static_cast<size_t>(num_tokens * hidden));  // [n, H]
    swiglu_mlp(x, num_tokens, *weights.shared, context, shared_out.data());
    for (size_t i = 0; i < shared_out.size(); ++i) out[i] += shared_out[i];
  }
}

}  // namespace fathom::model
