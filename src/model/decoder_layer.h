#pragma once
// One pre-norm decoder layer: x += attn(norm(x)); x += ffn(norm(x)).
#include <memory>

#include "model/mla_attention_layer.h"

namespace fathom::model {

class DecoderLayer {
 public:
  DecoderLayer(const ModelConfig& config, const DecoderLayerWeights& weights, const kernels::cpu::RopeFrequencies& rope);

  // hidden: [num_tokens, H], updated in place (the residual stream).
  void forward(float* hidden, const ForwardBatch& batch, kv_cache::LatentKvCache& cache, int64_t cache_layer,
               const ExecutionContext& context);

 private:
  const ModelConfig& config_;
  const DecoderLayerWeights& weights_;
  MlaAttentionLayer attention_;
};

}  // namespace fathom::model
