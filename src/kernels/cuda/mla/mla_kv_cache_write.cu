#include "kernels/cuda/mla/mla_kv_cache_write.h"

#include "kernels/cuda/cuda_check.h"

namespace fathom::kernels::cuda {

namespace {

constexpr int kWriteThreads = 256;  // 8 warps, one token per warp

// grid ceil(num_tokens / 8); each warp copies one token's row.
__global__ void __launch_bounds__(kWriteThreads) mla_write_kv_cache_kernel(
    const __nv_bfloat16* __restrict__ latent,  // [num_tokens, latent_stride]
    int64_t latent_stride,
    const __nv_bfloat16* __restrict__ k_pe,  // [num_tokens, k_pe_stride]
    int64_t k_pe_stride,
    const int32_t* __restrict__ slots,  // [num_tokens]
    int32_t num_tokens,
    __nv_bfloat16* __restrict__ pool,  // [num_slots, kv_lora + rope]
    int64_t num_slots, int32_t kv_lora, int32_t rope, bool vector_copy) {
  const int token = blockIdx.x * (kWriteThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (token >= num_tokens) return;
  const int32_t slot = slots[token];
  if (slot < 0 || slot >= num_slots) return;
  const int64_t row_elems = static_cast<int64_t>(kv_lora) + rope;
  __nv_bfloat16* dst = pool + static_cast<int64_t>(slot) * row_elems;
  const __nv_bfloat16* src_latent = latent + token * latent_stride;
  const __nv_bfloat16* src_pe = k_pe + token * k_pe_stride;
  if (vector_copy) {  // 16-byte chunks: kv_lora, rope, strides multiples of 8 and aligned pointers
    const int latent_chunks = kv_lora / 8, total_chunks = static_cast<int>(row_elems / 8);
    for (int c = lane; c < total_chunks; c += 32) {
      const uint4 value = c < latent_chunks ? reinterpret_cast<const uint4*>(src_latent)[c]
                                            : reinterpret_cast<const uint4*>(src_pe)[c - latent_chunks];
      reinterpret_cast<uint4*>(dst)[c] = value;
    }
  } else {
    for (int i = lane; i < row_elems; i += 32) dst[i] = i < kv_lora ? src_latent[i] : src_pe[i - kv_lora];
  }
}

bool aligned16(const void* pointer) { return (reinterpret_cast<uintptr_t>(pointer) & 15u) == 0; }

}  // namespace

void mla_write_kv_cache(const MlaKvCacheWriteArgs& args, const LatentCacheView& cache, cudaStream_t stream) {
  FATHOM_CHECK(args.num_tokens >= 0, "mla_write_kv_cache: num_tokens " << args.num_tokens);
  if (args.num_tokens == 0) return;
  FATHOM_CHECK(args.latent && args.k_pe && args.slots && cache.pool, "mla_write_kv_cache: null tensor pointer");
  FATHOM_CHECK(cache.kv_lora_dim > 0 && cache.rope_dim >= 0 && args.latent_token_stride >= cache.kv_lora_dim &&
                   args.k_pe_token_stride >= cache.rope_dim,
               "mla_write_kv_cache: kv_lora " << cache.kv_lora_dim << ", rope " << cache.rope_dim << ", strides "
                                              << args.latent_token_stride << "/" << args.k_pe_token_stride);
  const bool vector_copy = cache.kv_lora_dim % 8 == 0 && cache.rope_dim % 8 == 0 && args.latent_token_stride % 8 == 0 &&
                           args.k_pe_token_stride % 8 == 0 && aligned16(args.latent) && aligned16(args.k_pe) &&
                           aligned16(cache.pool);
  const int blocks = (args.num_tokens + kWriteThreads / 32 - 1) / (kWriteThreads / 32);
  mla_write_kv_cache_kernel<<<blocks, kWriteThreads, 0, stream>>>(
      args.latent, args.latent_token_stride, args.k_pe, args.k_pe_token_stride, args.slots, args.num_tokens,
      cache.pool, cache.num_slots(), cache.kv_lora_dim, cache.rope_dim, vector_copy);
  FATHOM_CUDA_CHECK_LAUNCH();
}

}  // namespace fathom::kernels::cuda
