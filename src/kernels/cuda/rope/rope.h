#pragma once
// Rotary position embedding (with YaRN scaling folded into inv_freq / attention_factor by the caller, as
// kernels::cpu::RopeFrequencies) applied in place to bf16 vectors: the rope part of q heads and k_pe rows.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace fathom::kernels::cuda {

struct RopeParams {
  const float* inv_freq = nullptr;  // [rope_dim / 2] fp32 (device)
  int32_t rope_dim = 0;             // even, at most 256
  float attention_factor = 1.0f;    // YaRN magnitude scaling of cos / sin
  bool interleaved = true;          // pairs (x[2i], x[2i+1]) (DeepSeek checkpoints); else (x[i], x[i + rope_dim/2])
  // Optional [max_positions, rope_dim] fp32 table from rope_build_cos_sin_table for these inv_freq / rope_dim /
  // attention_factor: the kernels read a position's cos/sin there instead of a double-precision sincos per launch.
  // Null: computed. Either way the same bits; positions outside [0, max_positions) are computed, never read.
  const float* cos_sin = nullptr;
  int32_t max_positions = 0;  // rows of cos_sin
};

// A set of vectors rotated at each token's position: vector h of token t starts at
// data + (t * vectors_per_token + h) * vector_stride and has rope_dim bf16 values.
//   q rope part:  data = q + nope_dim, vectors_per_token = num_heads, vector_stride = nope_dim + rope_dim
//   k_pe in kv_a: data = kv_a + kv_lora_rank, vectors_per_token = 1, vector_stride = kv_lora_rank + rope_dim
struct RopeTarget {
  __nv_bfloat16* data = nullptr;
  int64_t vectors_per_token = 0;
  int64_t vector_stride = 0;  // elements
};

// positions: [num_tokens] int32 (device). Rotates up to two targets in one launch (one block per token; cos/sin
// once per token: fp32 angle = position * inv_freq, cos/sin in double rounded to fp32, as the CPU op, or the
// table's copy of exactly those values when params.cos_sin is set).
void apply_rope_bf16(const RopeTarget* targets, int num_targets, int64_t num_tokens, const int32_t* positions,
                     const RopeParams& params, cudaStream_t stream);

// Fills cos_sin [max_positions, params.rope_dim] fp32 (device): row p = [cos (rope_dim/2) ; sin (rope_dim/2)] of
// position p, computed with apply_rope_bf16's arithmetic (params.cos_sin and params.interleaved are not read).
// Run once at model init (a double sincos per entry); then set params.cos_sin / params.max_positions.
void rope_build_cos_sin_table(const RopeParams& params, int32_t max_positions, float* cos_sin, cudaStream_t stream);

}  // namespace fathom::kernels::cuda
