#include "kernels/cpu/rope.h"

#include <cmath>

namespace fathom::kernels::cpu {

void apply_rope(float* x, int64_t num_vectors, int64_t stride, int64_t vectors_per_position, const int32_t* positions,
                const RopeFrequencies& freqs) {
  const int64_t half = static_cast<int64_t>(freqs.inv_freq.size());
  std::vector<float> cos_values(static_cast<size_t>(half)), sin_values(static_cast<size_t>(half));
  int64_t cached_position = -1;
  for (int64_t v = 0; v < num_vectors; ++v) {
    const int64_t position = positions[v / vectors_per_position];
    if (position != cached_position) {
      for (int64_t i = 0; i < half; ++i) {
        // fp32 angle as transformers computes it (inv_freq @ position in float32).
        const float angle = static_cast<float>(position) * freqs.inv_freq[i];
        cos_values[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * freqs.attention_factor;
        sin_values[i] = static_cast<float>(std::sin(static_cast<double>(angle))) * freqs.attention_factor;
      }
      cached_position = position;
    }
    float* vec = x + v * stride;
    for (int64_t i = 0; i < half; ++i) {
      float* a = freqs.interleaved ? &vec[2 * i] : &vec[i];
      float* b = freqs.interleaved ? &vec[2 * i + 1] : &vec[i + half];
      const float x0 = *a, x1 = *b;
      *a = x0 * cos_values[i] - x1 * sin_values[i];
      *b = x1 * cos_values[i] + x0 * sin_values[i];
    }
  }
}

}  // namespace fathom::kernels::cpu
