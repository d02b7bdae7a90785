#pragma once
// Token-granular storage of MLA's compressed KV: one row [normed latent ; rotated k_pe] per (layer, slot).
#include <cstdint>
#include <vector>

namespace fathom::kv_cache {

class LatentKvCache {
 public:
  // row_dim = kv_lora_rank + qk_rope_head_dim (576 for DeepSeek-V3). Rows start zeroed.
  LatentKvCache(int64_t num_layers, int64_t num_slots, int64_t row_dim);

  int64_t num_layers() const { return num_layers_; }
  int64_t num_slots() const { return num_slots_; }
  int64_t row_dim() const { return row_dim_; }

  // [row_dim] row of `slot` in `layer`; throws fathom::Error when either index is out of range.
  float* row(int64_t layer, int64_t slot);
  const float* row(int64_t layer, int64_t slot) const;

 private:
  int64_t num_layers_;
  int64_t num_slots_;
  int64_t row_dim_;
  std::vector<float> values_;  // [num_layers, num_slots, row_dim]
};

}  // namespace fathom::kv_cache
