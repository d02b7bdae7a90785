#pragma once
// MLA's per-token preparation between the projections and attention, in one launch. For every token t:
//   kv_a[t][0:kv_lora]           = rms_norm(kv_a[t][0:kv_lora]) * latent_norm_weight          (in place)
//   kv_a[t][kv_lora:kv_lora+rope] = rope(k_pe, positions[t])                                   (in place)
//   q_pe of every head            = rope(q_pe, positions[t])                                   (in place)
//   cache.pool[slots[t]]          = [normed latent ; rotated k_pe]   (0 <= slots[t] < cache.num_slots(), else skipped)
// Bit-identical to rms_norm_bf16 (columns [0, kv_lora) of kv_a, in place) + apply_rope_bf16 (targets q_pe and k_pe)
// + mla_write_kv_cache, which it replaces.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/mla/mla_types.h"
#include "kernels/cuda/rope/rope.h"

namespace fathom::kernels::cuda {

struct MlaPrepareArgs {
  // Rope parts of q, as apply_rope_bf16 takes them: {q + nope_dim, num_heads, nope_dim + rope_dim} for q
  // [num_tokens, num_heads, nope_dim + rope_dim]. Must not overlap kv_a.
  RopeTarget q_pe;
  // [num_tokens, kv_a_token_stride]: [latent (cache.kv_lora_dim) ; k_pe (cache.rope_dim)]
  __nv_bfloat16* kv_a = nullptr;
  int64_t kv_a_token_stride = 0;  // elements between tokens (kv_lora_dim + rope_dim when packed)
  const __nv_bfloat16* latent_norm_weight = nullptr;  // [kv_lora_dim] (kv_a_layernorm)
  float eps = 1e-6f;
  const int32_t* positions = nullptr;  // [num_tokens] (device)
  const int32_t* slots = nullptr;      // [num_tokens] (device) page * page_size + offset; outside the pool: skipped
  int32_t num_tokens = 0;
};

// rope.rope_dim must equal cache.rope_dim; cache.kv_lora_dim at most 16384 (rms_norm_bf16's single-pass range).
// rope.cos_sin (rope_build_cos_sin_table) is optional: without it each block computes its token's cos/sin in double.
void mla_prepare_qkv(const MlaPrepareArgs& args, const RopeParams& rope, const LatentCacheView& cache,
                     cudaStream_t stream);

}  // namespace fathom::kernels::cuda
