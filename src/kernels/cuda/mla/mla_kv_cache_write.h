#pragma once
// Writes new tokens' latent rows [normed latent ; rotated k_pe] into one layer's paged latent cache.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/mla/mla_types.h"

namespace fathom::kernels::cuda {

struct MlaKvCacheWriteArgs {
  const __nv_bfloat16* latent = nullptr;  // [num_tokens, latent_token_stride]: normed latent, first kv_lora_dim
  int64_t latent_token_stride = 0;        // elements between tokens (kv_lora_dim when packed)
  const __nv_bfloat16* k_pe = nullptr;    // [num_tokens, k_pe_token_stride]: rotated k_pe, first rope_dim
  int64_t k_pe_token_stride = 0;          // elements between tokens (rope_dim when packed)
  const int32_t* slots = nullptr;         // [num_tokens] slot = page * page_size + offset; < 0: token skipped
  int32_t num_tokens = 0;
};

// cache.pool[slots[t]] = [latent[t] ; k_pe[t]] for every t with 0 <= slots[t] < cache.num_slots()
// (slots outside the pool are skipped: a kernel cannot report them; callers validate slots on the host).
void mla_write_kv_cache(const MlaKvCacheWriteArgs& args, const LatentCacheView& cache, cudaStream_t stream);

}  // namespace fathom::kernels::cuda
