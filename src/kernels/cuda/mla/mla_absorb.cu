// Host side of the MLA absorption products: argument checks and launches of the per-head bmm kernels (the decode
// kernel for <= 64 tokens where the shape allows, else the tiled ones; bit-identical, see the decode kernel).
#include "kernels/cuda/mla/mla_absorb.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mla/sm90/mla_head_bmm_decode_kernel.cuh"
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

// Above this the decode kernel would hold too few CTAs per multiprocessor (the staged tokens are tokens x k x 2 B).
constexpr int kDecodeMaxSmemBytes = 96 * 1024;

template <bool kWeightRowsAreK, bool kFp8, int kTokens>
void launch_decode_tokens(const HeadBmmParams& params, int32_t num_heads, cudaStream_t stream) {
  auto kernel = mla_detail::mla_head_bmm_decode_kernel<kWeightRowsAreK, kFp8, kTokens>;
  const int smem_bytes = mla_detail::decode_smem_bytes<kWeightRowsAreK, kFp8, kTokens>(params.k);
  FATHOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  constexpr int kCtaCols = mla_detail::kDecodeWarps * mla_detail::DecodeLayout<kWeightRowsAreK, kFp8>::kWarpCols;
  const dim3 grid(static_cast<unsigned>((params.n + kCtaCols - 1) / kCtaCols), static_cast<unsigned>(num_heads));
  launch_programmatic(kernel, grid, dim3(mla_detail::kDecodeThreads), smem_bytes, stream, params,
                      mla_detail::SplitPartialsA{});
}

// Where the decode kernel is faster than the tiled one (mla_bench on an H200, L2 flushed): fp8 weights up to 32
// tokens (1.1-1.2x); at 64 tokens and with bf16 weights it was slower (0.6-0.9x), so those keep the tiled kernel.
constexpr int32_t kDecodeKernelMaxTokens = 32;
static_assert(kDecodeKernelMaxTokens <= mla_detail::kDecodeMaxTokens);

template <bool kWeightRowsAreK>
void launch_decode(const HeadBmmParams& params, int32_t num_heads, cudaStream_t stream) {
  if (params.m <= 8) launch_decode_tokens<kWeightRowsAreK, true, 8>(params, num_heads, stream);
  else if (params.m <= 16) launch_decode_tokens<kWeightRowsAreK, true, 16>(params, num_heads, stream);
  else launch_decode_tokens<kWeightRowsAreK, true, 32>(params, num_heads, stream);
}

// Whether the decode kernel runs: fp8 weights, at most kDecodeKernelMaxTokens tokens, and the kernel's shape
// requirements (see mla_head_bmm_decode_kernel.cuh); params.w* must be filled in.
bool decode_kernel_fits(const HeadBmmParams& params, const MlaKvBWeights& w) {
  if (!w.is_fp8 || params.m > kDecodeKernelMaxTokens) return false;
  const bool shape_ok = params.a_vector && params.k % 16 == 0 && params.n % 16 == 0 && w.kv_lora_dim % 16 == 0 &&
                        params.w_rows_per_head % 16 == 0 && params.w_row_offset % 16 == 0 && aligned16(w.weight);
  if (!shape_ok) return false;
  // Largest staging of the variant that params.m selects (the layouts differ only in the per-warp buffers).
  const int tokens = params.m <= 8 ? 8 : params.m <= 16 ? 16 : 32;
  const int64_t smem_bytes = static_cast<int64_t>(tokens) * 4 * ((params.k + 63) / 64) * 32 +
                             mla_detail::kDecodeWarps * 2 * 2048;
  return smem_bytes <= kDecodeMaxSmemBytes;
}

// Fills the W fields of params from w.
void set_weights(HeadBmmParams& params, const MlaKvBWeights& w) {
  params.w = w.weight;
  params.w_scale_inv = w.scale_inv;
  params.w_cols = w.kv_lora_dim;
  params.w_rows_per_head = w.nope_dim + w.v_dim;
  params.scale_cols = (w.kv_lora_dim + 127) / 128;
  params.w_vector = w.kv_lora_dim % 8 == 0 && (w.is_fp8 ? (reinterpret_cast<uintptr_t>(w.weight) & 7u) == 0
                                                         : aligned16(w.weight));
}

// allow_decode = false: the tiled kernels only (the reference the decode kernel is tested and timed against).
template <bool kWeightRowsAreK>
void launch(const HeadBmmParams& params, const MlaKvBWeights& w, bool allow_decode, cudaStream_t stream) {
  if (allow_decode && decode_kernel_fits(params, w)) {
    launch_decode<kWeightRowsAreK>(params, w.num_heads, stream);
    FATHOM_CUDA_CHECK_LAUNCH();
    return;
  }
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
    launch_programmatic(mla_detail::mla_head_bmm_kernel<kWeightRowsAreK, true>, grid, dim3(mla_detail::kBmmThreads), 0,
                        stream, params);
  } else {
    launch_programmatic(mla_detail::mla_head_bmm_kernel<kWeightRowsAreK, false>, grid, dim3(mla_detail::kBmmThreads), 0,
                        stream, params);
  }
}

// Checked parameters of q_latent = W_UK^T q_nope (num_tokens > 0).
HeadBmmParams absorb_params(const __nv_bfloat16* q_nope, int64_t q_head_stride, int32_t num_tokens,
                            const MlaKvBWeights& w, __nv_bfloat16* q_latent) {
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
  set_weights(params, w);
  return params;
}

// Checked parameters of out = W_UV out_latent (num_tokens > 0).
HeadBmmParams project_params(const __nv_bfloat16* out_latent, int32_t num_tokens, const MlaKvBWeights& w,
                             __nv_bfloat16* out) {
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
  set_weights(params, w);
  return params;
}

void check_absorb_args(int64_t q_head_stride, int32_t num_tokens, const MlaKvBWeights& w) {
  check_weights(w, "mla_absorb_query");
  FATHOM_CHECK(num_tokens >= 0 && q_head_stride >= w.nope_dim,
               "mla_absorb_query: num_tokens " << num_tokens << ", q_head_stride " << q_head_stride);
}

void check_project_args(int32_t num_tokens, const MlaKvBWeights& w) {
  check_weights(w, "mla_project_values");
  FATHOM_CHECK(num_tokens >= 0, "mla_project_values: num_tokens " << num_tokens);
}

void absorb_query(const __nv_bfloat16* q_nope, int64_t q_head_stride, int32_t num_tokens, const MlaKvBWeights& w,
                  __nv_bfloat16* q_latent, bool allow_decode, bool q_nope_settled, cudaStream_t stream) {
  check_absorb_args(q_head_stride, num_tokens, w);
  if (num_tokens == 0) return;
  HeadBmmParams params = absorb_params(q_nope, q_head_stride, num_tokens, w, q_latent);
  params.a_settled = q_nope_settled ? 1 : 0;  // read by the decode kernel only; the tiled kernels wait first
  launch<true>(params, w, allow_decode, stream);
}

void project_values(const __nv_bfloat16* out_latent, int32_t num_tokens, const MlaKvBWeights& w, __nv_bfloat16* out,
                    bool allow_decode, cudaStream_t stream) {
  check_project_args(num_tokens, w);
  if (num_tokens == 0) return;
  launch<false>(project_params(out_latent, num_tokens, w, out), w, allow_decode, stream);
}

}  // namespace

void mla_absorb_query(const __nv_bfloat16* q_nope, int64_t q_head_stride, int32_t num_tokens, const MlaKvBWeights& w,
                      __nv_bfloat16* q_latent, cudaStream_t stream, bool q_nope_settled) {
  absorb_query(q_nope, q_head_stride, num_tokens, w, q_latent, true, q_nope_settled, stream);
}

void mla_project_values(const __nv_bfloat16* out_latent, int32_t num_tokens, const MlaKvBWeights& w,
                        __nv_bfloat16* out, cudaStream_t stream) {
  project_values(out_latent, num_tokens, w, out, true, stream);
}

void mla_absorb_query_reference(const __nv_bfloat16* q_nope, int64_t q_head_stride, int32_t num_tokens,
                                const MlaKvBWeights& w, __nv_bfloat16* q_latent, cudaStream_t stream) {
  absorb_query(q_nope, q_head_stride, num_tokens, w, q_latent, false, false, stream);
}

void mla_project_values_reference(const __nv_bfloat16* out_latent, int32_t num_tokens, const MlaKvBWeights& w,
                                  __nv_bfloat16* out, cudaStream_t stream) {
  project_values(out_latent, num_tokens, w, out, false, stream);
}

bool mla_absorb_query_uses_decode_kernel(const __nv_bfloat16* q_nope, int64_t q_head_stride, int32_t num_tokens,
                                         const MlaKvBWeights& w, __nv_bfloat16* q_latent) {
  check_absorb_args(q_head_stride, num_tokens, w);
  return num_tokens > 0 && decode_kernel_fits(absorb_params(q_nope, q_head_stride, num_tokens, w, q_latent), w);
}

bool mla_project_values_uses_decode_kernel(const __nv_bfloat16* out_latent, int32_t num_tokens,
                                           const MlaKvBWeights& w, __nv_bfloat16* out) {
  check_project_args(num_tokens, w);
  return num_tokens > 0 && decode_kernel_fits(project_params(out_latent, num_tokens, w, out), w);
}

bool mla_project_split_values_fits(int32_t num_tokens, const MlaKvBWeights& w, const __nv_bfloat16* partial_out,
                                   __nv_bfloat16* out) {
  check_project_args(num_tokens, w);
  if (num_tokens < 1 || num_tokens > kProjectSplitValuesMaxTokens || partial_out == nullptr || !aligned16(partial_out))
    return false;
  // The combined A tile: 4 sum lanes x 64 column octets, exactly DeepSeek-V3's 512 latent columns (the kernel
  // handles any multiple of 64 up to 512, but only 512 is tested on a GPU); partial_out stands in for A, which is
  // never read, only checked (project_params reads no memory).
  if (w.kv_lora_dim != mla_detail::kCombineMaxLatent) return false;
  return decode_kernel_fits(project_params(partial_out, num_tokens, w, out), w);
}

void mla_project_split_values(const MlaSplitPartials& partials, int32_t num_tokens, const MlaKvBWeights& w,
                              __nv_bfloat16* out, cudaStream_t stream) {
  FATHOM_CHECK(partials.partial_lse && partials.seq_lens && partials.num_splits >= 1 &&
                   partials.num_splits <= mla_detail::kCombineMaxSplits && partials.min_tiles_per_split >= 1,
               "mla_project_split_values: partials (lse " << partials.partial_lse << ", seq_lens " << partials.seq_lens
                                                          << ", splits " << partials.num_splits << ")");
  FATHOM_CHECK(mla_project_split_values_fits(num_tokens, w, partials.partial_out, out),
               "mla_project_split_values: " << num_tokens << " tokens, kv_lora " << w.kv_lora_dim
                                            << (w.is_fp8 ? "" : ", bf16 weights")
                                            << " (see mla_project_split_values_fits)");
  const HeadBmmParams params = project_params(partials.partial_out, num_tokens, w, out);
  const mla_detail::SplitPartialsA combined{partials.partial_out, partials.partial_lse, partials.seq_lens, w.num_heads,
                                            partials.num_splits, partials.tiles_per_split,
                                            partials.min_tiles_per_split};
  auto kernel = mla_detail::mla_head_bmm_decode_kernel<false, true, kProjectSplitValuesMaxTokens, true>;
  const int smem_bytes = mla_detail::decode_smem_bytes<false, true, kProjectSplitValuesMaxTokens, true>(params.k);
  FATHOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  constexpr int kCtaCols = mla_detail::kCombinedWarps * mla_detail::DecodeLayout<false, true>::kWarpCols;
  const dim3 grid(static_cast<unsigned>((params.n + kCtaCols - 1) / kCtaCols), static_cast<unsigned>(w.num_heads));
  launch_programmatic(kernel, grid, dim3(mla_detail::kCombinedWarps * 32), smem_bytes, stream, params, combined);
  FATHOM_CUDA_CHECK_LAUNCH();
}

}  // namespace fathom::kernels::cuda
