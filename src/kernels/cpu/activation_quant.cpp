#include "kernels/cpu/activation_quant.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"

namespace fathom::kernels::cpu {

void quantize_activations_fp8(const float* x, int64_t num_tokens, int64_t dim, float* values_out, float* scales_out) {
  const int64_t num_groups = (dim + kActQuantGroup - 1) / kActQuantGroup;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t g = 0; g < num_groups; ++g) {
      const int64_t begin = g * kActQuantGroup;
      const int64_t end = std::min(dim, begin + kActQuantGroup);
      float amax = 0.0f;
      for (int64_t k = begin; k < end; ++k) amax = std::max(amax, std::fabs(x[t * dim + k]));
      const float scale = std::max(amax, 1e-4f) / kFp8E4M3Max;
      scales_out[t * num_groups + g] = scale;
      for (int64_t k = begin; k < end; ++k) {
        values_out[t * dim + k] = fp8_e4m3_to_float(float_to_fp8_e4m3(x[t * dim + k] / scale));
      }
    }
  }
}

}  // namespace fathom::kernels::cpu
