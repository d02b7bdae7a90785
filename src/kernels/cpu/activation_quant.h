#pragma once
// Per-token, per-128-channel FP8 E4M3 activation quantization (DeepSeek's dynamic activation scheme).
#include <cstdint>

namespace fathom::kernels::cpu {

constexpr int64_t kActQuantGroup = 128;

// x: [num_tokens, dim]; values_out: [num_tokens, dim] e4m3 codes decoded back to float (unscaled);
// scales_out: [num_tokens, ceil(dim/128)] with scale = max(amax, 1e-4) / 448 so that x ≈ value * scale.
void quantize_activations_fp8(const float* x, int64_t num_tokens, int64_t dim, float* values_out, float* scales_out);

}  // namespace fathom::kernels::cpu
