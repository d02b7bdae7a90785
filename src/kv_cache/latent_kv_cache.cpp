#include "kv_cache/latent_kv_cache.h"

#include "core/error.h"

namespace fathom::kv_cache {

LatentKvCache::LatentKvCache(int64_t num_layers, int64_t num_slots, int64_t row_dim)
    : num_layers_(num_layers), num_slots_(num_slots), row_dim_(row_dim) {
  FATHOM_CHECK(num_layers > 0 && num_slots > 0 && row_dim > 0,
               "latent KV cache needs positive sizes, got layers=" << num_layers << " slots=" << num_slots
                                                                   << " row_dim=" << row_dim);
  values_.assign(static_cast<size_t>(num_layers * num_slots * row_dim), 0.0f);
}

float* LatentKvCache::row(int64_t layer, int64_t slot) {
  return const_cast<float*>(static_cast<const LatentKvCache*>(this)->row(layer, slot));
}

const float* LatentKvCache::row(int64_t layer, int64_t slot) const {
  FATHOM_CHECK(layer >= 0 && layer < num_layers_, "KV cache: layer " << layer << " out of range [0, " << num_layers_ << ")");
  FATHOM_CHECK(slot >= 0 && slot < num_slots_, "KV cache: slot " << slot << " out of range [0, " << num_slots_ << ")");
  return values_.data() + (layer * num_slots_ + slot) * row_dim_;
}

}  // namespace fathom::kv_cache
