#pragma once
// Device-side views of DeepSeek's FP8 operands: e4m3 values with fp32 block scales.
#include <cstdint>

namespace fathom::kernels::cuda {

constexpr int64_t kFp8ScaleBlock = 128;

// A linear layer's weight as uploaded from the checkpoint.
struct DeviceFp8Weight {
  const uint8_t* values = nullptr;  // [rows, cols] e4m3, row-major (rows = output features)
  const float* scales = nullptr;    // [ceil(rows/128), ceil(cols/128)] fp32, row-major (checkpoint layout)
  int64_t rows = 0;
  int64_t cols = 0;
};

// Activations quantized per token per 128 channels.
struct DeviceFp8Activations {
  const uint8_t* values = nullptr;  // [tokens, cols] e4m3, row-major
  const float* scales = nullptr;    // [tokens, ceil(cols/128)] fp32, row-major
  int64_t tokens = 0;
  int64_t cols = 0;
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace fathom::kernels::cuda
