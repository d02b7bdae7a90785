#pragma once
// Rotary position embedding on the rope dims of q and k_pe.
#include <cstdint>
#include <vector>

namespace fathom::kernels::cpu {

// Frequencies of one rope head: inv_freq[rope_dim/2] and the YaRN magnitude `attention_factor` applied to cos/sin.
struct RopeFrequencies {
  std::vector<float> inv_freq;
  float attention_factor = 1.0f;
  bool interleaved = true;  // pairs (x[2i], x[2i+1]) as in DeepSeek's checkpoints; else (x[i], x[i+d/2])
};

// Rotates, in place, `num_vectors` vectors of length rope_dim = 2*inv_freq.size(); vector v sits at
// x + v * stride and is at position positions[v / vectors_per_position].
void apply_rope(float* x, int64_t num_vectors, int64_t stride, int64_t vectors_per_position, const int32_t* positions,
                const RopeFrequencies& freqs);

}  // namespace fathom::kernels::cpu
