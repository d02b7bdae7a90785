#pragma once
// Helpers for the MLA kernel tests: a paged latent cache filled with random rows (host float copy for the
// CPU reference, device bf16 pool with every unused slot poisoned to NaN) and shared checks.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/mla/mla_absorb.h"
#include "kernels/cuda/mla/mla_types.h"

namespace fathom::testing {

using kernels::cuda::DeviceBuffer;

// e4m3 kv_b weights of `heads` heads at DeepSeek-V3's per-head dims (nope 128, v 128, kv_lora 512): values
// [heads * 256, 512] bytes, scale_inv [heads * 2, 4] fp32.
inline kernels::cuda::MlaKvBWeights v3_fp8_kv_b(const void* values, const float* scale_inv, int32_t heads) {
  kernels::cuda::MlaKvBWeights w;
  w.weight = values;
  w.scale_inv = scale_inv;
  w.is_fp8 = true;
  w.num_heads = heads;
  w.nope_dim = 128;
  w.v_dim = 128;
  w.kv_lora_dim = 512;
  return w;
}

// A paged cache holding `seq_lens.size()` sequences: pages are shuffled over the pool (plus spare pages), so
// consecutive pages of a sequence are not adjacent; unused slots hold NaN so that reading them shows.
struct PagedLatentCache {
  int32_t kv_lora = 0, rope = 0, page_size = 0, max_pages_per_seq = 0, num_pages = 0;
  std::vector<int32_t> seq_lens;                 // [batch]
  std::vector<int32_t> page_table;               // [batch, max_pages_per_seq]
  std::vector<std::vector<float>> rows;          // per sequence: [seq_len, kv_lora + rope], bf16-rounded
  std::vector<__nv_bfloat16> pool_host;          // [num_pages, page_size, kv_lora + rope]
  DeviceBuffer<__nv_bfloat16> pool;
  DeviceBuffer<int32_t> page_table_device, seq_lens_device;

  int64_t row_elems() const { return static_cast<int64_t>(kv_lora) + rope; }
  int64_t slot(int b, int token) const {
    return static_cast<int64_t>(page_table[static_cast<size_t>(b) * max_pages_per_seq + token / page_size]) *
               page_size + token % page_size;
  }
  kernels::cuda::LatentCacheView view() const {
    return {pool.data(), num_pages, page_size, kv_lora, rope};
  }
  kernels::cuda::PagedBatchView batch_view() const {
    return {page_table_device.data(), seq_lens_device.data(), static_cast<int32_t>(seq_lens.size()),
            max_pages_per_seq};
  }
  // Row pointers of sequence b (for the CPU reference).
  std::vector<const float*> row_pointers(int b) const {
    std::vector<const float*> pointers;
    for (int32_t t = 0; t < seq_lens[b]; ++t) pointers.push_back(rows[b].data() + t * row_elems());
    return pointers;
  }
};

inline PagedLatentCache make_paged_cache(std::mt19937& rng, const std::vector<int32_t>& seq_lens, int32_t kv_lora,
                                         int32_t rope, int32_t page_size, int32_t spare_pages = 3) {
  PagedLatentCache cache;
  cache.kv_lora = kv_lora;
  cache.rope = rope;
  cache.page_size = page_size;
  cache.seq_lens = seq_lens;
  int32_t max_len = 1, total_pages = spare_pages;
  for (int32_t len : seq_lens) {
    max_len = std::max(max_len, len);
    total_pages += (len + page_size - 1) / page_size;
  }
  cache.max_pages_per_seq = (max_len + page_size - 1) / page_size + 1;  // one unused entry per row
  cache.num_pages = std::max(total_pages, 1);
  std::vector<int32_t> order(static_cast<size_t>(cache.num_pages));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  const size_t batch = seq_lens.size();
  cache.page_table.assign(batch * cache.max_pages_per_seq, -1);  // unused entries: invalid page index
  size_t next = 0;
  for (size_t b = 0; b < batch; ++b)
    for (int32_t pg = 0; pg < (seq_lens[b] + page_size - 1) / page_size; ++pg)
      cache.page_table[b * cache.max_pages_per_seq + pg] = order[next++];

  const __nv_bfloat16 nan_value = __ushort_as_bfloat16(0xffff);
  cache.pool_host.assign(static_cast<size_t>(cache.num_pages) * page_size * cache.row_elems(), nan_value);
  for (size_t b = 0; b < batch; ++b) {
    cache.rows.push_back(round_to_bf16(random_normal(rng, static_cast<size_t>(seq_lens[b]) * cache.row_elems())));
    for (int32_t t = 0; t < seq_lens[b]; ++t)
      for (int64_t i = 0; i < cache.row_elems(); ++i)
        cache.pool_host[static_cast<size_t>(cache.slot(static_cast<int>(b), t) * cache.row_elems() + i)] =
            __float2bfloat16(cache.rows[b][static_cast<size_t>(t * cache.row_elems() + i)]);
  }
  cache.pool = DeviceBuffer<__nv_bfloat16>(cache.pool_host);
  cache.page_table_device = DeviceBuffer<int32_t>(cache.page_table);
  cache.seq_lens_device = DeviceBuffer<int32_t>(cache.seq_lens);
  return cache;
}

inline bool all_finite(const std::vector<float>& values) {
  return std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); });
}

inline double cosine_similarity(const std::vector<float>& a, const std::vector<float>& b) {
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += double(a[i]) * b[i];
    na += double(a[i]) * a[i];
    nb += double(b[i]) * b[i];
  }
  return dot / std::sqrt(na * nb);
}

inline int device_sm_count() {
  int device = 0, count = 0;
  FATHOM_CUDA_CHECK(cudaGetDevice(&device));
  FATHOM_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

}  // namespace fathom::testing
