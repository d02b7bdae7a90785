#pragma once
// Merging two attention results over disjoint key sets of the same queries (flash-attention's state merge): each
// row's output weighted by its softmax sum, given as a log-sum-exp in the log2 domain. How attention over a prefix too
// long to expand at once is put together from windows of keys.
#include <cstdint>

namespace fathom::kernels::cpu {

// Per row r and head h, with M = max(acc_lse, part_lse), w_acc = 2^(acc_lse - M), w_part = 2^(part_lse - M):
//   acc = (acc * w_acc + part * w_part) / (w_acc + w_part),  acc_lse = M + log2(w_acc + w_part);
// both -inf (neither saw a key): acc = 0, acc_lse = -inf. A -inf side weighs 0: the other is kept exactly.
// acc, part: [num_rows, num_heads, v_dim]; acc_lse, part_lse: [num_rows, num_heads].
void merge_attention_states(float* acc, float* acc_lse, const float* part, const float* part_lse, int64_t num_rows,
                            int64_t num_heads, int64_t v_dim);

}  // namespace fathom::kernels::cpu
