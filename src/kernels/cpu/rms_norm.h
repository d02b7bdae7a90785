#pragma once
// RMSNorm in fp32: y = x / sqrt(mean(x²) + eps) * weight.
#include <cstdint>

#include "core/tensor.h"

namespace fathom::kernels::cpu {

// x, y: [num_rows, dim] (may alias); weight: [dim] of BF16, F16 or F32.
void rms_norm(const float* x, int64_t num_rows, int64_t dim, const Tensor& weight, float eps, float* y);

// Weight vector of a float dtype (BF16/F16/F32) converted to fp32.
void to_float(const Tensor& values, float* out);

}  // namespace fathom::kernels::cpu
