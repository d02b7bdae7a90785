#include "model/deepseek_v3_model.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/rms_norm.h"
#include "model/rotary_embedding.h"

namespace fathom::model {

namespace cpu = kernels::cpu;

std::vector<float> embed_tokens(const Tensor& embedding, const std::vector<int32_t>& token_ids) {
  const int64_t vocab = embedding.dim(0), dim = embedding.dim(1);
  const size_t row_bytes = static_cast<size_t>(dim) * dtype_size_bytes(embedding.dtype());
  std::vector<float> out(token_ids.size() * static_cast<size_t>(dim));
  for (size_t t = 0; t < token_ids.size(); ++t) {
    const int32_t id = token_ids[t];
    FATHOM_CHECK(id >= 0 && id < vocab, "token id " << id << " (at index " << t << ") is outside the vocabulary [0, " << vocab << ")");
    Tensor row(embedding.dtype(), {dim}, static_cast<uint8_t*>(embedding.raw()) + static_cast<size_t>(id) * row_bytes, nullptr);
    cpu::to_float(row, out.data() + t * static_cast<size_t>(dim));
  }
  return out;
}

MtpModule::MtpModule(const ModelConfig& config, const MtpWeights& weights, const Tensor& embedding,
                     const cpu::RopeFrequencies& rope)
    : config_(config), weights_(weights), embedding_(embedding), layer_(config, weights.layer, rope) {}

std::vector<float> MtpModule::forward(const ForwardBatch& batch, const float* main_hidden, kv_cache::LatentKvCache& cache,
                                      const ExecutionContext& context) {
  const int64_t n = batch.num_tokens(), dim = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  std::vector<float> embedded = embed_tokens(embedding_, batch.token_ids);   // [n, H]
  std::vector<float> concatenated(static_cast<size_t>(n * 2 * dim));         // [n, 2H] = [enorm(emb) ; hnorm(h)]
  for (int64_t t = 0; t < n; ++t) {
    cpu::rms_norm(embedded.data() + t * dim, 1, dim, weights_.enorm, eps, concatenated.data() + t * 2 * dim);
    cpu::rms_norm(main_hidden + t * dim, 1, dim, weights_.hnorm, eps, concatenated.data() + t * 2 * dim + dim);
  }
  std::vector<float> hidden(static_cast<size_t>(n * dim));  // [n, H]
  cpu::linear(concatenated.data(), n, weights_.eh_proj, context.mode, hidden.data(), *context.pool);
  layer_.forward(hidden.data(), batch, cache, /*cache_layer=*/0, context);
  cpu::rms_norm(hidden.data(), n, dim, weights_.shared_head_norm, eps, hidden.data());
  return hidden;
}

DeepseekV3Model::DeepseekV3Model(const ModelConfig& config, const ModelWeights& weights)
    : config_(config), weights_(weights), rope_(make_rope_frequencies(config)) {
  for (const DecoderLayerWeights& layer : weights.layers) layers_.push_back(std::make_unique<DecoderLayer>(config, layer, rope_));
  if (weights.mtp) mtp_ = std::make_unique<MtpModule>(config, *weights.mtp, weights.embed_tokens, rope_);
}

std::vector<float> DeepseekV3Model::forward(const ForwardBatch& batch, kv_cache::LatentKvCache& cache,
                                            const ExecutionContext& context) {
  FATHOM_CHECK(cache.num_layers() >= num_cache_layers() && cache.row_dim() == cache_row_dim(),
               "KV cache has " << cache.num_layers() << " layers of rows " << cache.row_dim() << ", model needs "
                               << num_cache_layers() << " of " << cache_row_dim());
  std::vector<float> hidden;  // [n, H]
  {
    TraceSpan span(context.trace, "embed_tokens", "op", 0);
    hidden = embed_tokens(weights_.embed_tokens, batch.token_ids);
  }
  for (size_t layer = 0; layer < layers_.size(); ++layer) {
    TraceSpan span(context.trace, "layer." + std::to_string(layer), "layer", 0);
    layers_[layer]->forward(hidden.data(), batch, cache, static_cast<int64_t>(layer), context);
  }
  TraceSpan span(context.trace, "norm", "op", 0);
  cpu::rms_norm(hidden.data(), batch.num_tokens(), config_.hidden_size, weights_.norm,
                static_cast<float>(config_.rms_norm_eps), hidden.data());
  return hidden;
}

std::vector<float> DeepseekV3Model::compute_logits(const float* hidden, int64_t num_rows,
                                                   const ExecutionContext& context) const {
  TraceSpan span(context.trace, "lm_head", "op", 0);
  std::vector<float> logits(static_cast<size_t>(num_rows * config_.vocab_size));
  cpu::linear(hidden, num_rows, weights_.lm_head, context.mode, logits.data(), *context.pool);
  return logits;
}

}  // namespace fathom::model
