#pragma once
// Multi-head latent attention (MLA) for one sequence, in fp32 with an fp32 softmax.
// Keys are the sequence's positions 0..num_keys-1; a query at position p attends keys 0..p (causal).
#include <cstdint>

#include "core/thread_pool.h"

namespace fathom::kernels::cpu {

struct MlaShape {
  int64_t num_heads = 0;
  int64_t qk_nope_dim = 0;
  int64_t qk_rope_dim = 0;
  int64_t v_dim = 0;
  int64_t kv_lora_rank = 0;
  float softmax_scale = 1.0f;
  int64_t qk_dim() const { return qk_nope_dim + qk_rope_dim; }
  int64_t latent_dim() const { return kv_lora_rank + qk_rope_dim; }  // one cache row: [latent ; k_pe]
};

// Expanded form (prefill / extend): K and V expanded from the latent through kv_b_proj.
// q: [num_queries, H, nope+rope]; query_positions: [num_queries];
// kv: [num_keys, H, nope+v]; key_rows: [num_keys] pointers to cache rows [latent ; k_pe] (k_pe is read);
// out: [num_queries, H, v].
void mla_attention_expanded(const float* q, int64_t num_queries, const int32_t* query_positions, const float* kv,
                            const float* const* key_rows, int64_t num_keys, const MlaShape& shape, float* out,
                            ThreadPool& pool);

// Absorbed form (decode): attention in the latent space, keys and values are the cache rows themselves.
// q_latent: [num_queries, H, kv_lora] (q_nope · W_UK); q: [num_queries, H, nope+rope] (its rope part is read);
// key_rows: [num_keys] pointers to cache rows; out_latent: [num_queries, H, kv_lora].
void mla_attention_absorbed(const float* q_latent, const float* q, int64_t num_queries, const int32_t* query_positions,
                            const float* const* key_rows, int64_t num_keys, const MlaShape& shape, float* out_latent,
                            ThreadPool& pool);

// q_latent[t,h,:] = W_UK[h]ᵀ · q_nope[t,h,:], with W_UK[h] = kv_b rows [h*(nope+v), h*(nope+v)+nope).
// q: [num_queries, H, nope+rope]; kv_b: [H*(nope+v), kv_lora] fp32; q_latent: [num_queries, H, kv_lora].
void mla_absorb_query(const float* q, int64_t num_queries, const float* kv_b, const MlaShape& shape, float* q_latent,
                      ThreadPool& pool);

// out[t,h,:] = W_UV[h] · out_latent[t,h,:], with W_UV[h] = kv_b rows [h*(nope+v)+nope, (h+1)*(nope+v)).
// out_latent: [num_queries, H, kv_lora]; out: [num_queries, H, v].
void mla_project_values(const float* out_latent, int64_t num_queries, const float* kv_b, const MlaShape& shape,
                        float* out, ThreadPool& pool);

}  // namespace fathom::kernels::cpu
