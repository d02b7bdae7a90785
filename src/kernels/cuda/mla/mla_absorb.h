#pragma once
// MLA weight absorption (decode path): per-head products with the slices of kv_b_proj.
//   W_UK[h] = kv_b rows [h*(nope+v), h*(nope+v)+nope)        (nope x kv_lora)
//   W_UV[h] = kv_b rows [h*(nope+v)+nope, (h+1)*(nope+v))    (v x kv_lora)
// Weights are bf16 (dequantized at load) or the checkpoint's fp8 e4m3 with per-128x128-block scale_inv;
// fp8 weights are dequantized to bf16 (same tensor-core path, half the weight bytes).
// Up to 64 tokens (decode) run a kernel that streams W with many warps per multiprocessor; it gives the same bits
// as the tiled kernels used for larger batches, so a token's result never depends on the batch it is in.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace fathom::kernels::cuda {

struct MlaKvBWeights {
  const void* weight = nullptr;        // [num_heads * (nope_dim + v_dim), kv_lora_dim]: bf16, or e4m3 bytes if is_fp8
  const float* scale_inv = nullptr;    // fp8 only: [ceil(rows / 128), ceil(kv_lora_dim / 128)] fp32
  bool is_fp8 = false;
  int32_t num_heads = 0;
  int32_t nope_dim = 0;                // 128 for DeepSeek-V3
  int32_t v_dim = 0;                   // 128
  int32_t kv_lora_dim = 0;             // 512
};

// q_latent[t,h,:] = W_UK[h]ᵀ · q_nope[t,h,:].
// q_nope: [num_tokens, num_heads, q_head_stride] (its first nope_dim values per head are read, so q [T, H, nope+rope]
// can be passed with q_head_stride = nope+rope); q_latent: [num_tokens, num_heads, kv_lora_dim].
// q_nope_settled: the caller's promise that q_nope was written by a kernel launched at least two launches earlier on
// this stream (the decode step: the q_b GEMM, then mla_prepare, then this), so the decode kernel loads it before
// waiting for the previous kernel (programmatic launch). Same bits either way.
void mla_absorb_query(const __nv_bfloat16* q_nope, int64_t q_head_stride, int32_t num_tokens, const MlaKvBWeights& w,
                      __nv_bfloat16* q_latent, cudaStream_t stream, bool q_nope_settled = false);

// out[t,h,:] = W_UV[h] · out_latent[t,h,:].
// out_latent: [num_tokens, num_heads, kv_lora_dim]; out: [num_tokens, num_heads, v_dim].
void mla_project_values(const __nv_bfloat16* out_latent, int32_t num_tokens, const MlaKvBWeights& w,
                        __nv_bfloat16* out, cudaStream_t stream);

// The same products through the tiled kernels only, whatever the token count: the reference the decode kernel is
// tested (bit for bit) and benchmarked against.
void mla_absorb_query_reference(const __nv_bfloat16* q_nope, int64_t q_head_stride, int32_t num_tokens,
                                const MlaKvBWeights& w, __nv_bfloat16* q_latent, cudaStream_t stream);
void mla_project_values_reference(const __nv_bfloat16* out_latent, int32_t num_tokens, const MlaKvBWeights& w,
                                  __nv_bfloat16* out, cudaStream_t stream);

// The split-KV MLA decode's partials (mla_decode's workspace when its plan splits), as mla_decode_combine reads them.
struct MlaSplitPartials {
  const __nv_bfloat16* partial_out = nullptr;  // [num_tokens, num_splits, num_heads, kv_lora_dim] bf16, normalized
  const float* partial_lse = nullptr;          // [num_tokens, num_splits, num_heads] log2-sum-exp
  const int32_t* seq_lens = nullptr;           // [num_tokens] cache rows of each sequence (its split rule's input)
  int32_t num_splits = 0;                      // allocated splits (the plan's)
  int32_t tiles_per_split = 0;                 // the plan's split rule (MlaDecodePlan)
  int32_t min_tiles_per_split = 1;
};

// Up to this many tokens (sequences), mla_project_split_values can run.
inline constexpr int32_t kProjectSplitValuesMaxTokens = 8;

// mla_decode_combine of the partials, then mla_project_values, in one launch with the same bits: the combined rows
// (out_latent) stay in shared memory, and the W_UV stream and the combine's reads overlap. out: [num_tokens,
// num_heads, v_dim]. Only where mla_project_split_values_fits.
void mla_project_split_values(const MlaSplitPartials& partials, int32_t num_tokens, const MlaKvBWeights& w,
                              __nv_bfloat16* out, cudaStream_t stream);
// fp8 weights, 1..kProjectSplitValuesMaxTokens tokens, kv_lora_dim 512 (DeepSeek-V3's), and the decode kernel's
// shapes (partial_out 16-byte aligned).
bool mla_project_split_values_fits(int32_t num_tokens, const MlaKvBWeights& w, const __nv_bfloat16* partial_out,
                                   __nv_bfloat16* out);

// Whether mla_absorb_query / mla_project_values would run the decode kernel for these arguments (tests, benchmarks).
bool mla_absorb_query_uses_decode_kernel(const __nv_bfloat16* q_nope, int64_t q_head_stride, int32_t num_tokens,
                                         const MlaKvBWeights& w, __nv_bfloat16* q_latent);
bool mla_project_values_uses_decode_kernel(const __nv_bfloat16* out_latent, int32_t num_tokens,
                                           const MlaKvBWeights& w, __nv_bfloat16* out);

}  // namespace fathom::kernels::cuda
