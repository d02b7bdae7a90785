#include "kernels/cuda/mla/mla_gather_latent.h"

#include "kernels/cuda/cuda_check.h"

namespace fathom::kernels::cuda {

namespace {

// One warp per row; 16-byte copies when the row starts are aligned (kv_lora and row length multiples of 8).
__global__ void gather_latent_kernel(const __nv_bfloat16* __restrict__ pool,  // [num_slots, row_elems]
                                     int64_t num_slots, int64_t row_elems, int32_t kv_lora,
                                     const int32_t* __restrict__ slots,       // [num_rows]
                                     int64_t num_rows, bool vectorized,
                                     __nv_bfloat16* __restrict__ out) {       // [num_rows, kv_lora]
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= num_rows) return;
  const int lane = threadIdx.x % 32;
  const int64_t slot = slots[row];
  const bool valid = slot >= 0 && slot < num_slots;
  __nv_bfloat16* dst = out + row * kv_lora;
  const __nv_bfloat16* src = pool + (valid ? slot : 0) * row_elems;
  if (vectorized) {
    const int chunks = kv_lora / 8;
    for (int c = lane; c < chunks; c += 32) {
      const uint4 value = valid ? reinterpret_cast<const uint4*>(src)[c] : make_uint4(0, 0, 0, 0);
      reinterpret_cast<uint4*>(dst)[c] = value;
    }
  } else {
    for (int i = lane; i < kv_lora; i += 32) dst[i] = valid ? src[i] : __float2bfloat16(0.0f);
  }
}

}  // namespace

void mla_gather_latent(const LatentCacheView& cache, const int32_t* slots, int64_t num_rows, __nv_bfloat16* out,
                       cudaStream_t stream) {
  FATHOM_CHECK(num_rows >= 0, "mla_gather_latent: num_rows " << num_rows);
  if (num_rows == 0) return;
  FATHOM_CHECK(cache.pool && slots && out, "mla_gather_latent: null pointer argument");
  FATHOM_CHECK(cache.kv_lora_dim > 0, "mla_gather_latent: kv_lora_dim " << cache.kv_lora_dim);
  const bool vectorized = cache.kv_lora_dim % 8 == 0 && cache.row_elems() % 8 == 0 &&
                          reinterpret_cast<uintptr_t>(cache.pool) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  constexpr int kWarpsPerBlock = 8;
  const unsigned blocks = static_cast<unsigned>((num_rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  gather_latent_kernel<<<blocks, kWarpsPerBlock * 32, 0, stream>>>(cache.pool, cache.num_slots(), cache.row_elems(),
                                                                   cache.kv_lora_dim, slots, num_rows, vectorized, out);
  FATHOM_CUDA_CHECK_LAUNCH();
}

}  // namespace fathom::kernels::cuda
