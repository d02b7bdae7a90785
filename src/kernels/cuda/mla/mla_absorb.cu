// Host side of the MLA absorption products: argument checks and launches of the per-head bmm kernel.
#include "kernels/cuda/mla/mla_absorb.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mla/sm90/mla_head_bmm_kernel.cuh"
#include "kernels/cuda/mla/sm90/mla_head_bmm_pipelined_kernel.cuh"

namespace fathom::kernels::cuda {

namespace {

using mla_detail::HeadBmmParams;

bool aligned16(const void* pointer) { return (reinterpret_cast<uintptr_t>(pointer) & 15u) == 0; }

void check_weights(const MlaKvBWeights& w, const char* op) {
  FATHOM_CHECK(w.weight != nullptr && (!w.is_fp8 || w.scale_inv != nullptr), op << ": null weight or scale_inv");
  FATHOM_CHECK(w.num_heads > 0 && w.nope_dim > 0 && w.v_dim > 0 && w.kv_lora_dim > 0,
               op << ": heads " << w.num_heads << ", nope " << w.nope_dim << ", v " << w.v_dim << ", kv_lora "
                  << w.kv_lora_dim);
}

template <bool kWeightRowsAreK, bool kFp8, int kStages>
void launch_pipelined(const HeadBmmParams& params, const dim3& grid, cudaStream_t stream) {
  auto kernel = mla_detail::mla_head_bmm_pipelined_kernel<kWeightRowsAreK, kFp8, kStages>;
  constexpr int kSmemBytes = mla_detail::bmm_pipelined_smem_bytes<kFp8, kStages>();
  FATHOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  kernel<<<grid, mla_detail::kBmmThreads, kSmemBytes, stream>>>(params);
}

template <bool kWeightRowsAreK>
void launch(HeadBmmParams params, const MlaKvBWeights& w, cudaStream_t stream) {
  params.w = w.weight;
  params.w_scale_inv = w.scale_inv;
  params.w_cols = w.kv_lora_dim;
  params.w_rows_per_head = w.nope_dim + w.v_dim;
  params.scale_cols = (w.kv_lora_dim + 127) / 128;
  params.w_vector = w.kv_lora_dim % 8 == 0 && (w.is_fp8 ? (reinterpret_cast<uintptr_t>(w.weight) & 7u) == 0
                                                         : aligned16(w.weight));
  const dim3 grid(static_cast<unsigned>((params.n + mla_detail::kBmmTile - 1) / mla_detail::kBmmTile),
                  static_cast<unsigned>((params.m + mla_detail::kBmmTile - 1) / mla_detail::kBmmTile),
                  static_cast<unsigned>(w.num_heads));
  // The cp.async pipeline needs whole 16-element chunks of A and W (DeepSeek-V3 dims); others: register path.
  const bool pipelined = params.a_vector && params.k % 16 == 0 && params.n % 16 == 0 && w.kv_lora_dim % 16 == 0 &&
                         aligned16(w.weight);
  if (pipelined) {
    // Stages: a k extent of <= 2 tiles (W_UK: k = nope = 128) needs only 2, so more CTAs fit per multiprocessor.
    const bool short_k = params.k <= 2 * mla_detail::kBmmTile;
    if (w.is_fp8) {
      if (short_k) launch_pipelined<kWeightRowsAreK, true, 2>(params, grid, stream);
      else launch_pipelined<kWeightRowsAreK, true, 4>(params, grid, stream);
    } else {
      if (short_k) launch_pipelined<kWeightRowsAreK, false, 2>(params, grid, stream);
      else launch_pipelined<kWeightRowsAreK, false, 4>(params, grid, stream);
    }
  } else if (w.is_fp8) {
    mla_detail::mla_head_bmm_kernel<kWeightRowsAreK, true><<<grid, mla_detail::kBmmThreads, 0, stream>>>(params);
  } else {
    mla_detail::mla_head_bmm_kernel<kWeightRowsAreK, false><<<grid, mla_detail::kBmmThreads, 0, stream>>>(params);
  }
  FATHOM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void mla_absorb_query(const __nv_bfloat16* q_nope, int64_t q_head_stride, int32_t num_tokens, const MlaKvBWeights& w,
                      __nv_bfloat16* q_latent, cudaStream_t stream) {
  check_weights(w, "mla_absorb_query");
  FATHOM_CHECK(num_tokens >= 0 && q_head_stride >= w.nope_dim,
               "mla_absorb_query: num_tokens " << num_tokens << ", q_head_stride " << q_head_stride);
  if (num_tokens == 0) return;
  FATHOM_CHECK(q_nope && q_latent, "mla_absorb_query: null tensor pointer");
  HeadBmmParams params{};
  params.a = q_nope;
  params.a_head_stride = q_head_stride;
  params.a_token_stride = q_head_stride * w.num_heads;
  params.out = q_latent;
  params.out_head_stride = w.kv_lora_dim;
  params.out_token_stride = static_cast<int64_t>(w.kv_lora_dim) * w.num_heads;
  params.w_row_offset = 0;
  params.m = num_tokens;
  params.k = w.nope_dim;
  params.n = w.kv_lora_dim;
  params.a_vector = q_head_stride % 8 == 0 && aligned16(q_nope);
  params.out_pairs = w.kv_lora_dim % 2 == 0;
  launch<true>(params, w, stream);
}

void mla_project_values(const __nv_bfloat16* out_latent, int32_t num_tokens, const MlaKvBWeights& w,
                        __nv_bfloat16* out, cudaStream_t stream) {
  check_weights(w, "mla_project_values");
  FATHOM_CHECK(num_tokens >= 0, "mla_project_values: num_tokens " << num_tokens);
  if (num_tokens == 0) return;
  FATHOM_CHECK(out_latent && out, "mla_project_values: null tensor pointer");
  HeadBmmParams params{};
  params.a = out_latent;
  params.a_head_stride = w.kv_lora_dim;
  params.a_token_stride = static_cast<int64_t>(w.kv_lora_dim) * w.num_heads;
  params.out = out;
  params.out_head_stride = w.v_dim;
  params.out_token_stride = static_cast<int64_t>(w.v_dim) * w.num_heads;
  params.w_row_offset = w.nope_dim;
  params.m = num_tokens;
  params.k = w.kv_lora_dim;
  params.n = w.v_dim;
  params.a_vector = w.kv_lora_dim % 8 == 0 && aligned16(out_latent);
  params.out_pairs = w.v_dim % 2 == 0;
  launch<false>(params, w, stream);
}

}  // namespace fathom::kernels::cuda
