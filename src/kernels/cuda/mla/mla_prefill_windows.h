#pragma once
// Key windows of an MLA prefill: the plan that bounds the keys expanded through kv_b_proj at once. Window w of a
// sequence is its keys at positions [w * window_keys, (w + 1) * window_keys); a pass expands at most one window of
// each sequence, window_keys keys in all, and runs mla_prefill on them (its key windows); the passes after the first
// are merged into the first's rows (mla_merge_attention). Windows are cut at fixed positions, so a query's result
// depends on its position and window_keys, not on the batch, the chunking or how windows were packed into passes:
// a sequence's windows run in order, and merging a window a row does not see keeps the row's bits (the attention's
// part; the kv_b_proj GEMM over a pass's keys is row-invariant only with deterministic inference). Passes are filled
// from the sequences with the most keys left: a long prefix's windows set the pass count, shorter ones ride along.
// Host arithmetic (no CUDA headers), tested on the CPU.
#include <cstdint>
#include <span>
#include <vector>

namespace fathom::kernels::cuda {

struct PrefillKeyPass {
  int64_t num_keys = 0;                // keys the pass expands (>= 1), rows [0, num_keys) of its k_nope / v
  std::vector<int32_t> cu_kv_lens;     // [batch + 1] prefix sums of each sequence's keys in the pass (0: none)
  std::vector<int32_t> key_positions;  // [batch] position of each sequence's first key in the pass (0 when none)
};

struct PrefillKeyPlan {
  std::vector<PrefillKeyPass> passes;  // in order; a sequence's windows in increasing position
  int64_t max_pass_keys() const;       // the most keys one pass expands
};

// kv_lens: [batch] keys of each sequence (cached prefix + new), each >= 0. window_keys > 0: windows and passes as
// above; 0: one pass of every key (no windows). Throws on a negative length or window size.
PrefillKeyPlan plan_prefill_key_passes(std::span<const int32_t> kv_lens, int64_t window_keys);

}  // namespace fathom::kernels::cuda
