#include "kernels/cpu/mla_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/vector_math.h"

namespace fathom::kernels::cpu {

namespace {

// Softmax over scores[0..count) in place, fp32, max-subtracted.
void softmax_in_place(float* scores, int64_t count) {
  float max_score = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < count; ++i) max_score = std::max(max_score, scores[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < count; ++i) {
    scores[i] = std::exp(scores[i] - max_score);
    sum += scores[i];
  }
  const float inv_sum = 1.0f / sum;
  for (int64_t i = 0; i < count; ++i) scores[i] *= inv_sum;
}

int64_t visible_keys(int32_t query_position, int64_t num_keys) {
  FATHOM_CHECK(query_position >= 0 && query_position < num_keys,
               "attention: query position " << query_position << " outside the " << num_keys << " cached keys");
  return static_cast<int64_t>(query_position) + 1;
}

}  // namespace

void mla_attention_expanded(const float* q, int64_t num_queries, const int32_t* query_positions, const float* kv,
                            const float* const* key_rows, int64_t num_keys, const MlaShape& shape, float* out,
                            ThreadPool& pool) {
  const int64_t heads = shape.num_heads, nope = shape.qk_nope_dim, rope = shape.qk_rope_dim, v_dim = shape.v_dim;
  const int64_t kv_stride = heads * (nope + v_dim);
  pool.parallel_for(num_queries * heads, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(static_cast<size_t>(num_keys));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / heads, h = item % heads;
      const float* q_head = q + (t * heads + h) * shape.qk_dim();
      const int64_t count = visible_keys(query_positions[t], num_keys);
      for (int64_t k = 0; k < count; ++k) {
        const float* k_nope = kv + k * kv_stride + h * (nope + v_dim);
        const float* k_pe = key_rows[k] + shape.kv_lora_rank;
        scores[k] = (dot(q_head, k_nope, nope) + dot(q_head + nope, k_pe, rope)) * shape.softmax_scale;
      }
      softmax_in_place(scores.data(), count);
      float* out_head = out + (t * heads + h) * v_dim;
      std::fill(out_head, out_head + v_dim, 0.0f);
      for (int64_t k = 0; k < count; ++k) axpy(scores[k], kv + k * kv_stride + h * (nope + v_dim) + nope, out_head, v_dim);
    }
  });
}

void mla_attention_absorbed(const float* q_latent, const float* q, int64_t num_queries, const int32_t* query_positions,
                            const float* const* key_rows, int64_t num_keys, const MlaShape& shape, float* out_latent,
                            ThreadPool& pool) {
  const int64_t heads = shape.num_heads, lora = shape.kv_lora_rank, rope = shape.qk_rope_dim;
  pool.parallel_for(num_queries * heads, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(static_cast<size_t>(num_keys));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / heads, h = item % heads;
      const float* q_lat = q_latent + (t * heads + h) * lora;
      const float* q_pe = q + (t * heads + h) * shape.qk_dim() + shape.qk_nope_dim;
      const int64_t count = visible_keys(query_positions[t], num_keys);
      for (int64_t k = 0; k < count; ++k) {
        scores[k] = (dot(q_lat, key_rows[k], lora) + dot(q_pe, key_rows[k] + lora, rope)) * shape.softmax_scale;
      }
      softmax_in_place(scores.data(), count);
      float* out_head = out_latent + (t * heads + h) * lora;
      std::fill(out_head, out_head + lora, 0.0f);
      for (int64_t k = 0; k < count; ++k) axpy(scores[k], key_rows[k], out_head, lora);
    }
  });
}

void mla_absorb_query(const float* q, int64_t num_queries, const float* kv_b, const MlaShape& shape, float* q_latent,
                      ThreadPool& pool) {
  const int64_t heads = shape.num_heads, nope = shape.qk_nope_dim, lora = shape.kv_lora_rank;
  pool.parallel_for(num_queries * heads, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / heads, h = item % heads;
      const float* q_nope = q + (t * heads + h) * shape.qk_dim();
      float* result = q_latent + (t * heads + h) * lora;
      std::fill(result, result + lora, 0.0f);
      for (int64_t d = 0; d < nope; ++d) axpy(q_nope[d], kv_b + (h * (nope + shape.v_dim) + d) * lora, result, lora);
    }
  });
}

void mla_project_values(const float* out_latent, int64_t num_queries, const float* kv_b, const MlaShape& shape,
                        float* out, ThreadPool& pool) {
  const int64_t heads = shape.num_heads, nope = shape.qk_nope_dim, v_dim = shape.v_dim, lora = shape.kv_lora_rank;
  pool.parallel_for(num_queries * heads, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / heads, h = item % heads;
      const float* latent = out_latent + (t * heads + h) * lora;
      for (int64_t j = 0; j < v_dim; ++j) {
        out[(t * heads + h) * v_dim + j] = dot(kv_b + (h * (nope + v_dim) + nope + j) * lora, latent, lora);
      }
    }
  });
}

}  // namespace fathom::kernels::cpu
