#include "kernels/cuda/mla/mla_prefill_windows.h"

#include <algorithm>

#include "core/error.h"

namespace fathom::kernels::cuda {

int64_t PrefillKeyPlan::max_pass_keys() const {
  int64_t most = 0;
  for (const PrefillKeyPass& pass : passes) most = std::max(most, pass.num_keys);
  return most;
}

PrefillKeyPlan plan_prefill_key_passes(std::span<const int32_t> kv_lens, int64_t window_keys) {
  FATHOM_CHECK(window_keys >= 0, "prefill key windows: window of " << window_keys << " keys");
  const size_t batch = kv_lens.size();
  int64_t total_keys = 0;
  for (size_t b = 0; b < batch; ++b) {
    FATHOM_CHECK(kv_lens[b] >= 0, "prefill key windows: sequence " << b << " has " << kv_lens[b] << " keys");
    total_keys += kv_lens[b];
  }
  PrefillKeyPlan plan;
  if (total_keys == 0) return plan;
  std::vector<int64_t> next_key(batch, 0);  // each sequence's first key not yet in a pass (a window boundary)
  int64_t keys_left = total_keys;
  std::vector<size_t> order(batch);
  while (keys_left > 0) {
    PrefillKeyPass pass;
    pass.key_positions.assign(batch, 0);
    std::vector<int32_t> pass_keys(batch, 0);
    // The sequences with the most keys left first (a long prefix's windows set the pass count; short ones fill in).
    for (size_t b = 0; b < batch; ++b) order[b] = b;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return kv_lens[a] - next_key[a] > kv_lens[b] - next_key[b];
    });
    for (const size_t b : order) {
      const int64_t remaining = kv_lens[b] - next_key[b];
      if (remaining <= 0) break;
      const int64_t take = window_keys == 0 ? remaining : std::min(window_keys, remaining);
      if (window_keys > 0 && pass.num_keys + take > window_keys) continue;  // waits for a later pass
      pass.key_positions[b] = static_cast<int32_t>(next_key[b]);
      pass_keys[b] = static_cast<int32_t>(take);
      next_key[b] += take;
      pass.num_keys += take;
    }
    pass.cu_kv_lens.assign(1, 0);
    for (size_t b = 0; b < batch; ++b) pass.cu_kv_lens.push_back(pass.cu_kv_lens.back() + pass_keys[b]);
    keys_left -= pass.num_keys;
    plan.passes.push_back(std::move(pass));
  }
  return plan;
}

}  // namespace fathom::kernels::cuda
