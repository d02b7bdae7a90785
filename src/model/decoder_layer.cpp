#include "model/decoder_layer.h"

#include <vector>

#include "kernels/cpu/rms_norm.h"
#include "model/feed_forward.h"

namespace fathom::model {

DecoderLayer::DecoderLayer(const ModelConfig& config, const DecoderLayerWeights& weights,
                           const kernels::cpu::RopeFrequencies& rope)
    : config_(config), weights_(weights), attention_(config, weights.attention, rope) {}

void DecoderLayer::forward(float* hidden, const ForwardBatch& batch, kv_cache::LatentKvCache& cache, int64_t cache_layer,
                           const ExecutionContext& context) {
  const int64_t n = batch.num_tokens(), dim = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  std::vector<float> normed(static_cast<size_t>(n * dim));  // [n, H]
  std::vector<float> delta(static_cast<size_t>(n * dim));   // [n, H]
  {
    TraceSpan span(context.trace, "input_layernorm", "op", 1);
    kernels::cpu::rms_norm(hidden, n, dim, weights_.input_layernorm, eps, normed.data());
  }
  {
    TraceSpan span(context.trace, "self_attn", "op", 1);
    attention_.forward(normed.data(), batch, cache, cache_layer, context, delta.data());
    for (size_t i = 0; i < delta.size(); ++i) hidden[i] += delta[i];
  }
  {
    TraceSpan span(context.trace, "post_attention_layernorm", "op", 1);
    kernels::cpu::rms_norm(hidden, n, dim, weights_.post_attention_layernorm, eps, normed.data());
  }
  {
    TraceSpan span(context.trace, weights_.moe ? "moe" : "mlp", "op", 1);
    if (weights_.moe) moe_forward(normed.data(), n, config_, *weights_.moe, context, delta.data());
    else swiglu_mlp(normed.data(), n, *weights_.dense_mlp, context, delta.data());
    for (size_t i = 0; i < delta.size(); ++i) hidden[i] += delta[i];
  }
}

}  // namespace fathom::model
