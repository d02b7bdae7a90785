#include "kernels/cpu/attention_merge.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fathom::kernels::cpu {

void merge_attention_states(float* acc, float* acc_lse, const float* part, const float* part_lse, int64_t num_rows,
                            int64_t num_heads, int64_t v_dim) {
  for (int64_t pair = 0; pair < num_rows * num_heads; ++pair) {
    float* out = acc + pair * v_dim;
    const float* other = part + pair * v_dim;
    const float lse_a = acc_lse[pair], lse_b = part_lse[pair];
    const float max_lse = std::max(lse_a, lse_b);
    if (max_lse == -std::numeric_limits<float>::infinity()) {
      std::fill(out, out + v_dim, 0.0f);
      acc_lse[pair] = max_lse;
      continue;
    }
    const float w_a = std::exp2(lse_a - max_lse), w_b = std::exp2(lse_b - max_lse), sum = w_a + w_b;
    for (int64_t d = 0; d < v_dim; ++d) out[d] = (out[d] * w_a + other[d] * w_b) / sum;
    acc_lse[pair] = max_lse + std::log2(sum);
  }
}

}  // namespace fathom::kernels::cpu
