#include "model/mla_attention_layer.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/rms_norm.h"

namespace fathom::model {

namespace cpu = kernels::cpu;

MlaAttentionLayer::MlaAttentionLayer(const ModelConfig& config, const AttentionWeights& weights,
                                     const cpu::RopeFrequencies& rope)
    : config_(config), weights_(weights), rope_(rope) {
  shape_.num_heads = config.num_attention_heads;
  shape_.qk_nope_dim = config.qk_nope_head_dim;
  shape_.qk_rope_dim = config.qk_rope_head_dim;
  shape_.v_dim = config.v_head_dim;
  shape_.kv_lora_rank = config.kv_lora_rank;
  shape_.softmax_scale = static_cast<float>(config.attention_softmax_scale());
}

const std::vector<float>& MlaAttentionLayer::dequantized_kv_b() {
  if (kv_b_dequantized_.empty()) kv_b_dequantized_ = cpu::dequantize(weights_.kv_b_proj);
  return kv_b_dequantized_;
}

void MlaAttentionLayer::forward(const float* x, const ForwardBatch& batch, kv_cache::LatentKvCache& cache,
                                int64_t cache_layer, const ExecutionContext& context, float* out) {
  const int64_t n = batch.num_tokens();
  const int64_t heads = shape_.num_heads, lora = shape_.kv_lora_rank, rope = shape_.qk_rope_dim;
  ThreadPool& pool = *context.pool;
  FATHOM_CHECK(cache.row_dim() == shape_.latent_dim(),
               "KV cache rows hold " << cache.row_dim() << " values, MLA needs " << shape_.latent_dim());

  // q: [n, heads, nope+rope]
  std::vector<float> q(static_cast<size_t>(n * heads * shape_.qk_dim()));
  if (weights_.q_a_proj) {
    std::vector<float> q_compressed(static_cast<size_t>(n * weights_.q_a_proj->rows));  // [n, q_lora]
    cpu::linear(x, n, *weights_.q_a_proj, context.mode, q_compressed.data(), pool);
    cpu::rms_norm(q_compressed.data(), n, weights_.q_a_proj->rows, weights_.q_a_layernorm,
                  static_cast<float>(config_.rms_norm_eps), q_compressed.data());
    cpu::linear(q_compressed.data(), n, *weights_.q_b_proj, context.mode, q.data(), pool);
  } else {
    cpu::linear(x, n, *weights_.q_proj, context.mode, q.data(), pool);
  }
  // kv_a: [n, lora + rope] = [latent ; k_pe]; the latent is normed, k_pe rotated, then both are cached.
  std::vector<float> kv_a(static_cast<size_t>(n * (lora + rope)));
  cpu::linear(x, n, weights_.kv_a_proj_with_mqa, context.mode, kv_a.data(), pool);
  for (int64_t t = 0; t < n; ++t) {
    float* row = kv_a.data() + t * (lora + rope);
    cpu::rms_norm(row, 1, lora, weights_.kv_a_layernorm, static_cast<float>(config_.rms_norm_eps), row);
  }
  cpu::apply_rope(q.data() + shape_.qk_nope_dim, n * heads, shape_.qk_dim(), heads, batch.positions.data(), rope_);
  cpu::apply_rope(kv_a.data() + lora, n, lora + rope, 1, batch.positions.data(), rope_);
  for (const SequenceChunk& chunk : batch.sequences) {
    for (int64_t i = 0; i < chunk.num_tokens; ++i) {
      const float* src = kv_a.data() + (chunk.token_begin + i) * (lora + rope);
      std::copy(src, src + lora + rope, cache.row(cache_layer, chunk.kv_slots[chunk.num_cached + i]));
    }
  }

  // attn_out: [n, heads, v]
  std::vector<float> attn_out(static_cast<size_t>(n * heads * shape_.v_dim));
  const bool absorbed = batch.attention_form == AttentionForm::kAbsorbed ||
                        (batch.attention_form == AttentionForm::kAuto && batch.is_pure_decode());
  for (const SequenceChunk& chunk : batch.sequences) {
    float* chunk_out = attn_out.data() + chunk.token_begin * heads * shape_.v_dim;
    if (absorbed) attend_absorbed(q, chunk, batch, cache, cache_layer, context, chunk_out);
    else attend_expanded(q, chunk, batch, cache, cache_layer, context, chunk_out);
  }
  cpu::linear(attn_out.data(), n, weights_.o_proj, context.mode, out, pool);
}

void MlaAttentionLayer::attend_expanded(const std::vector<float>& q, const SequenceChunk& chunk,
                                        const ForwardBatch& batch, const kv_cache::LatentKvCache& cache,
                                        int64_t cache_layer, const ExecutionContext& context, float* attn_out) {
  const int64_t num_keys = chunk.num_cached + chunk.num_tokens;
  const int64_t lora = shape_.kv_lora_rank;
  std::vector<const float*> key_rows(static_cast<size_t>(num_keys));
  std::vector<float> latents(static_cast<size_t>(num_keys * lora));  // [num_keys, kv_lora]
  for (int64_t k = 0; k < num_keys; ++k) {
    key_rows[k] = cache.row(cache_layer, chunk.kv_slots[k]);
    std::copy(key_rows[k], key_rows[k] + lora, latents.data() + k * lora);
  }
  // kv: [num_keys, heads, nope+v]
  std::vector<float> kv(static_cast<size_t>(num_keys * weights_.kv_b_proj.rows));
  cpu::linear(latents.data(), num_keys, weights_.kv_b_proj, context.mode, kv.data(), *context.pool);
  cpu::mla_attention_expanded(q.data() + chunk.token_begin * shape_.num_heads * shape_.qk_dim(), chunk.num_tokens,
                              batch.positions.data() + chunk.token_begin, kv.data(), key_rows.data(), num_keys,
                              shape_, attn_out, *context.pool);
}

void MlaAttentionLayer::attend_absorbed(const std::vector<float>& q, const SequenceChunk& chunk,
                                        const ForwardBatch& batch, const kv_cache::LatentKvCache& cache,
                                        int64_t cache_layer, const ExecutionContext& context, float* attn_out) {
  const int64_t num_keys = chunk.num_cached + chunk.num_tokens;
  const int64_t heads = shape_.num_heads, lora = shape_.kv_lora_rank;
  std::vector<const float*> key_rows(static_cast<size_t>(num_keys));
  for (int64_t k = 0; k < num_keys; ++k) key_rows[k] = cache.row(cache_layer, chunk.kv_slots[k]);
  const std::vector<float>& kv_b = dequantized_kv_b();
  const float* chunk_q = q.data() + chunk.token_begin * heads * shape_.qk_dim();
  std::vector<float> q_latent(static_cast<size_t>(chunk.num_tokens * heads * lora));    // [t, heads, kv_lora]
  std::vector<float> out_latent(static_cast<size_t>(chunk.num_tokens * heads * lora));  // [t, heads, kv_lora]
  cpu::mla_absorb_query(chunk_q, chunk.num_tokens, kv_b.data(), shape_, q_latent.data(), *context.pool);
  cpu::mla_attention_absorbed(q_latent.data(), chunk_q, chunk.num_tokens, batch.positions.data() + chunk.token_begin,
                              key_rows.data(), num_keys, shape_, out_latent.data(), *context.pool);
  cpu::mla_project_values(out_latent.data(), chunk.num_tokens, kv_b.data(), shape_, attn_out, *context.pool);
}

}  // namespace fathom::model
