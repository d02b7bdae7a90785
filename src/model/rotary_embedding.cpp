#include "model/rotary_embedding.h"

#include <algorithm>
#include <cmath>

namespace fathom::model {

namespace {

// Dimension index whose wavelength completes `num_rotations` turns over `max_positions`.
double correction_dim(double num_rotations, int64_t dim, double base, double max_positions) {
  return (static_cast<double>(dim) * std::log(max_positions / (num_rotations * 2.0 * M_PI))) / (2.0 * std::log(base));
}

}  // namespace

kernels::cpu::RopeFrequencies make_rope_frequencies(const ModelConfig& config) {
  const int64_t dim = config.qk_rope_head_dim;
  const int64_t half = dim / 2;
  kernels::cpu::RopeFrequencies freqs;
  freqs.inv_freq.resize(static_cast<size_t>(half));
  freqs.interleaved = config.rope_interleave;
  for (int64_t i = 0; i < half; ++i) {
    // fp32 like transformers: base ** (2i/dim) in float, then its reciprocal.
    const float pos_freq = std::pow(static_cast<float>(config.rope_theta), static_cast<float>(2 * i) / static_cast<float>(dim));
    freqs.inv_freq[i] = 1.0f / pos_freq;
  }
  if (!config.yarn) return freqs;
  const YarnRopeScaling& yarn = *config.yarn;
  const double factor = yarn.factor;
  double low = std::floor(correction_dim(yarn.beta_fast, dim, config.rope_theta, static_cast<double>(yarn.original_max_position_embeddings)));
  double high = std::ceil(correction_dim(yarn.beta_slow, dim, config.rope_theta, static_cast<double>(yarn.original_max_position_embeddings)));
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // avoid a zero-width ramp
  for (int64_t i = 0; i < half; ++i) {
    const float pos_freq = 1.0f / freqs.inv_freq[i];
    const float extrapolation = 1.0f / pos_freq;
    const float interpolation = 1.0f / (static_cast<float>(factor) * pos_freq);
    const float ramp = static_cast<float>(std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0));
    const float extrapolation_weight = 1.0f - ramp;
    freqs.inv_freq[i] = interpolation * (1.0f - extrapolation_weight) + extrapolation * extrapolation_weight;
  }
  // cos/sin magnitude: mscale(factor, mscale) / mscale(factor, mscale_all_dim) when both are given, else mscale(factor).
  if (yarn.mscale != 0.0 && yarn.mscale_all_dim != 0.0) {
    freqs.attention_factor = static_cast<float>(yarn_get_mscale(factor, yarn.mscale) / yarn_get_mscale(factor, yarn.mscale_all_dim));
  } else {
    freqs.attention_factor = static_cast<float>(yarn_get_mscale(factor, 1.0));
  }
  return freqs;
}

}  // namespace fathom::model
