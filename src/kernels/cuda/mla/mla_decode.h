#pragma once
// MLA decode attention in the absorbed form on the paged latent cache (one query token per sequence):
//   out_latent[b,h,:] = softmax_k(scale * (q_latent[b,h]·latent_k + q_pe[b,h]·k_pe_k)) · latent_k
// over the seq_lens[b] cache rows of sequence b. bf16 inputs/outputs, fp32 scores/softmax/accumulation.
// CUDA-graph safe: no host synchronization, no allocation; the workspace is sized up front
// (mla_decode_max_workspace_bytes) and the plan is made on the host from upper bounds.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/mla/mla_absorb.h"
#include "kernels/cuda/mla/mla_decode_heuristics.h"
#include "kernels/cuda/mla/mla_types.h"

namespace fathom::kernels::cuda {

struct MlaDecodeArgs {
  const __nv_bfloat16* q_latent = nullptr;  // [batch, num_heads, kv_lora_dim]  (q_nope · W_UK)
  const __nv_bfloat16* q_pe = nullptr;      // [batch, num_heads, q_pe_head_stride]: rotated q_pe, first rope_dim
  int64_t q_pe_head_stride = 0;             // elements between heads of q_pe (rope_dim when packed)
  LatentCacheView cache;                    // pool [num_pages, page_size, kv_lora_dim + rope_dim]
  PagedBatchView batch;                     // page_table [batch, max_pages], seq_lens [batch] (>= 1 each)
  __nv_bfloat16* out_latent = nullptr;      // [batch, num_heads, kv_lora_dim]
  int32_t num_heads = 0;
  float softmax_scale = 1.0f;               // applied to the raw dot product
  // Optional, both or neither: the value projection values_out = W_UV · out_latent (mla_project_values) in the same
  // call, fused with the split combine where the plan says so (MlaDecodePlan::fused_value_projection) and the shapes
  // allow (mla_project_split_values_fits); out_latent is then scratch, written or not. Same bits either way.
  const MlaKvBWeights* value_weights = nullptr;
  __nv_bfloat16* values_out = nullptr;      // [batch, num_heads, v_dim]
};

// Limits of the kernel instantiations: kv_lora_dim <= 512 and rope_dim <= 64 (padded internally).
inline constexpr int32_t kMlaDecodeMaxKvLora = 512;
inline constexpr int32_t kMlaDecodeMaxRope = 64;

// Launches the decode kernel (and, when plan.num_splits > 1, the combine kernel; with args.value_weights, the value
// projection, alone or fused with the combine) on `stream`.
// workspace: device memory of at least mla_decode_workspace_bytes(plan, batch, heads, kv_lora) bytes, 16-byte aligned.
void mla_decode(const MlaDecodeArgs& args, const MlaDecodePlan& plan, void* workspace, size_t workspace_bytes,
                cudaStream_t stream);

// Whether mla_decode(args, plan, ...) fuses the value projection with the combine (tests, benchmarks).
bool mla_decode_fuses_value_projection(const MlaDecodeArgs& args, const MlaDecodePlan& plan, const void* workspace);

// The combine pass alone (mla_decode runs it after a split decode): merges the partials of plan.num_splits splits,
// partial_out [batch, splits, heads, kv_lora] (bf16, normalized; 16-byte aligned) and partial_lse [batch, splits,
// heads] (fp32 log2-sum-exp), into out_latent [batch, heads, kv_lora]; a sequence reads only its non-empty splits
// under the plan's split rule.
void mla_decode_combine(const __nv_bfloat16* partial_out, const float* partial_lse, __nv_bfloat16* out_latent,
                        const int32_t* seq_lens, int32_t batch, int32_t num_heads, int32_t kv_lora,
                        const MlaDecodePlan& plan, cudaStream_t stream);

}  // namespace fathom::kernels::cuda
