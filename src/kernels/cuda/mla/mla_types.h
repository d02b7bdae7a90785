#pragma once
// Device views shared by the MLA kernels: one layer's paged latent KV cache and a batch's page table.
//
// Cache layout (per layer): a bf16 pool [num_pages, page_size_tokens, kv_lora_dim + rope_dim]; a row is
// [normed latent (kv_lora_dim) ; rotated k_pe (rope_dim)] — DeepSeek-V3: 512 + 64 = 576 values, 1152 bytes.
// Token `p` of sequence `b` lives at slot page_table[b][p / page_size] * page_size + p % page_size.
#include <cuda_bf16.h>

#include <cstdint>

namespace fathom::kernels::cuda {

struct LatentCacheView {
  __nv_bfloat16* pool = nullptr;  // [num_pages, page_size_tokens, kv_lora_dim + rope_dim]
  int32_t num_pages = 0;
  int32_t page_size_tokens = 0;   // any size >= 1
  int32_t kv_lora_dim = 0;        // 512 for DeepSeek-V3
  int32_t rope_dim = 0;           // 64 for DeepSeek-V3
  int64_t row_elems() const { return static_cast<int64_t>(kv_lora_dim) + rope_dim; }
  int64_t num_slots() const { return static_cast<int64_t>(num_pages) * page_size_tokens; }
};

// Which cache pages hold each sequence of a batch, and how many tokens each has.
struct PagedBatchView {
  const int32_t* page_table = nullptr;  // [batch, max_pages_per_seq] page indices into the pool
  const int32_t* seq_lens = nullptr;    // [batch] tokens in the cache (decode: including this step's token)
  int32_t batch = 0;
  int32_t max_pages_per_seq = 0;
};

}  // namespace fathom::kernels::cuda
