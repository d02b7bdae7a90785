#pragma once
// A linear layer's weight as stored in the checkpoint: [rows=out, cols=in], FP8 with block scales or a float type.
#include <string>

#include "core/tensor.h"

namespace fathom::kernels {

struct WeightMatrix {
  std::string name;      // checkpoint name without ".weight", for error messages
  int64_t rows = 0;      // output features
  int64_t cols = 0;      // input features
  Tensor weight;         // [rows, cols] F8_E4M3, BF16, F16 or F32
  Tensor scale_inv;      // [ceil(rows/128), ceil(cols/128)] F32 when weight is F8_E4M3, else empty
  static constexpr int64_t kBlock = 128;

  bool is_fp8() const { return weight.dtype() == DType::F8_E4M3; }
};

// Numerics of the linear layers: `exact` dequantizes weights and keeps fp32 activations;
// `w8a8` also quantizes activations per token per 128 channels to e4m3 (the GPU path's numerics).
enum class NumericMode { kExact, kW8A8 };

NumericMode parse_numeric_mode(const std::string& name);  // "exact" | "w8a8"

}  // namespace fathom::kernels
