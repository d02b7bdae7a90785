#pragma once
// MLA prefill / extend attention in the expanded form (keys and values expanded through kv_b_proj by a
// GEMM outside this kernel), causal, variable-length batch. Sequence b has q_len = cu_q_lens[b+1]-cu_q_lens[b]
// queries, the last q_len of its kv_len = cu_kv_lens[b+1]-cu_kv_lens[b] positions (a cached prefix = chunked
// prefill): its query j is at position kv_len - q_len + j and attends keys 0..that position.
//   score(q, key p) = scale * (q_nope · k_nope[p] + q_pe · k_pe[p]),  k_pe[p] read from the paged latent cache.
// Key windows: with key_positions and query_positions, the keys of sequence b are the window of its positions
// [key_positions[b], + kv_len) and its queries sit at positions query_positions[b] + j; a query attends the window's
// keys at positions up to its own (none: a zero row, log-sum-exp -inf). With lse_log2, the rows of a window are merged
// with the other windows' by mla_merge_attention (mla_merge.h): how a prefix too long to expand at once is attended.
// bf16 inputs/outputs, fp32 scores, softmax and accumulation. CUDA-graph safe (no sync, no allocation).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/mla/mla_types.h"

namespace fathom::kernels::cuda {

// kTma: persistent, a CTA per SM working through items of 128 queries x one head in two warpgroups fed by a TMA
// producer warpgroup, and kWgmma: 64 queries per CTA loading its own tiles; both warpgroup-MMA kernels for
// DeepSeek-V3's head dims (nope 128, rope 64, v 128) with 16-byte aligned rows, kTma also needs total_kv_rows.
// kMmaSync: the mma.sync kernel, any dims. kAuto: kTma, else kWgmma, where they apply. Same algorithm, results within
// bf16 rounding of each other (the tensor cores sum in their own order); each is row-independent.
enum class MlaPrefillKernel { kAuto, kMmaSync, kWgmma, kTma };

struct MlaPrefillArgs {
  const __nv_bfloat16* q = nullptr;       // [total_q, num_heads, q_head_stride]: [q_nope (nope) ; rotated q_pe (rope)]
  int64_t q_head_stride = 0;              // elements between heads of q (nope + rope when packed)
  const __nv_bfloat16* k_nope = nullptr;  // [total_kv, num_heads, k_head_stride]: the first nope of each head
  const __nv_bfloat16* v = nullptr;       // [total_kv, num_heads, v_head_stride]: the first v_dim of each head
  int64_t k_head_stride = 0;              // elements between heads of k_nope; 0: nope (packed)
  int64_t v_head_stride = 0;              // elements between heads of v; 0: v_dim (packed). kv_b_proj's output
                                          // [keys, heads, nope + v] is read in place with both = nope + v_dim
  LatentCacheView cache;                  // k_pe = cache row[kv_lora : kv_lora + rope] of each key
  const int32_t* page_table = nullptr;    // [batch, max_pages_per_seq]
  int32_t max_pages_per_seq = 0;
  const int32_t* cu_q_lens = nullptr;     // [batch + 1] prefix sums of q_len
  const int32_t* cu_kv_lens = nullptr;    // [batch + 1] prefix sums of kv_len (kv_len >= q_len)
  int64_t total_kv_rows = 0;              // rows of k_nope and v (>= cu_kv_lens[batch]); 0: unknown (no kTma)
  int32_t batch = 0;
  int32_t max_q_len = 0;                  // upper bound of q_len over the batch (host-side, sets the grid)
  __nv_bfloat16* out = nullptr;           // [total_q, num_heads, v_dim]
  const int32_t* key_positions = nullptr;    // [batch] position of each sequence's first key row; null: all 0
                                             // (set: query_positions must be too)
  const int32_t* query_positions = nullptr;  // [batch] position of each sequence's first query; null: kv_len - q_len
  float* lse_log2 = nullptr;              // [total_q, num_heads] log2 of each row's softmax sum, scores in the log2
                                          // domain (softmax_scale * log2(e) * q·k); -inf: no key; null: not written
  int32_t num_heads = 0;
  int32_t nope_dim = 0;                   // 128 for DeepSeek-V3 (<= 128)
  int32_t v_dim = 0;                      // 128 (<= 128); rope = cache.rope_dim (<= 64)
  float softmax_scale = 1.0f;
  MlaPrefillKernel kernel = MlaPrefillKernel::kAuto;
  int32_t max_ctas = 0;                   // kTma: persistent CTAs at most (0: one per SM); results do not depend on it
};

void mla_prefill(const MlaPrefillArgs& args, cudaStream_t stream);

}  // namespace fathom::kernels::cuda
