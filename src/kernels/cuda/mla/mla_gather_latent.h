#pragma once
// Gathers cached latent rows (the first kv_lora_dim values of [latent ; k_pe]) of arbitrary slots into a dense
// matrix: the input of the kv_b_proj expansion in prefill / extend attention (keys of the cached prefix included).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/mla/mla_types.h"

namespace fathom::kernels::cuda {

// slots: [num_rows] int32 (device), each in [0, cache.num_slots()) (validated on the host by callers; a slot outside
// the pool yields a zero row). out: [num_rows, cache.kv_lora_dim] bf16 (device). No sync, no allocation.
void mla_gather_latent(const LatentCacheView& cache, const int32_t* slots, int64_t num_rows, __nv_bfloat16* out,
                       cudaStream_t stream);

}  // namespace fathom::kernels::cuda
