#include "kernels/cpu/rms_norm.h"

#include <cmath>
#include <vector>

#include "core/error.h"

namespace fathom::kernels::cpu {

void to_float(const Tensor& values, float* out) {
  const int64_t count = values.numel();
  switch (values.dtype()) {
    case DType::F32:
      for (int64_t i = 0; i < count; ++i) out[i] = values.data<float>()[i];
      return;
    case DType::BF16:
      for (int64_t i = 0; i < count; ++i) out[i] = bf16_to_float(values.data<uint16_t>()[i]);
      return;
    case DType::F16:
      for (int64_t i = 0; i < count; ++i) out[i] = f16_to_float(values.data<uint16_t>()[i]);
      return;
    default:
      FATHOM_FAIL("expected a float tensor, got " << dtype_name(values.dtype()));
  }
}

void rms_norm(const float* x, int64_t num_rows, int64_t dim, const Tensor& weight, float eps, float* y) {
  FATHOM_CHECK(weight.numel() == dim, "rms_norm: weight has " << weight.numel() << " values, expected " << dim);
  std::vector<float> gamma(static_cast<size_t>(dim));
  to_float(weight, gamma.data());
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* row = x + r * dim;
    float sum_squares = 0.0f;
    for (int64_t i = 0; i < dim; ++i) sum_squares += row[i] * row[i];
    const float inv_rms = 1.0f / std::sqrt(sum_squares / static_cast<float>(dim) + eps);
    float* out = y + r * dim;
    for (int64_t i = 0; i < dim; ++i) out[i] = gamma[i] * (row[i] * inv_rms);
  }
}

}  // namespace fathom::kernels::cpu
