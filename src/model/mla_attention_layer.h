#pragma once
// One MLA self-attention block: projections, latent KV write, attention (expanded or absorbed), o_proj.
#include <vector>

#include "kernels/cpu/mla_attention.h"
#include "kernels/cpu/rope.h"
#include "kv_cache/latent_kv_cache.h"
#include "model/config.h"
#include "model/forward_batch.h"
#include "model/weights.h"

namespace fathom::model {

class MlaAttentionLayer {
 public:
  MlaAttentionLayer(const ModelConfig& config, const AttentionWeights& weights, const kernels::cpu::RopeFrequencies& rope);

  // x: [num_tokens, H] (already input-normed); out: [num_tokens, H].
  // Writes each new token's [latent ; k_pe] row into cache layer `cache_layer` at its slot, then attends.
  void forward(const float* x, const ForwardBatch& batch, kv_cache::LatentKvCache& cache, int64_t cache_layer,
               const ExecutionContext& context, float* out);

 private:
  void attend_expanded(const std::vector<float>& q, const SequenceChunk& chunk, const ForwardBatch& batch,
                       const kv_cache::LatentKvCache& cache, int64_t cache_layer, const ExecutionContext& context,
                       float* attn_out);
  void attend_absorbed(const std::vector<float>& q, const SequenceChunk& chunk, const ForwardBatch& batch,
                       const kv_cache::LatentKvCache& cache, int64_t cache_layer, const ExecutionContext& context,
                       float* attn_out);
  const std::vector<float>& dequantized_kv_b();

  const ModelConfig& config_;
  const AttentionWeights& weights_;
  const kernels::cpu::RopeFrequencies& rope_;
  kernels::cpu::MlaShape shape_;
  std::vector<float> kv_b_dequantized_;  // [heads*(nope+v), kv_lora], built on first absorbed use
};

}  // namespace fathom::model
