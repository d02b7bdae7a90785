#include "kernels/cpu/linear.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/activation_quant.h"
#include "kernels/cpu/vector_math.h"

namespace fathom::kernels::cpu {

namespace {

constexpr int64_t kBlock = WeightMatrix::kBlock;

// Unscaled row values (fp8 codes decoded, or float values) and, for FP8, the per-block scales of that row.
void load_row(const WeightMatrix& weight, int64_t row, float* values, const float** block_scales) {
  const int64_t cols = weight.cols;
  switch (weight.weight.dtype()) {
    case DType::F8_E4M3: {
      const uint8_t* codes = weight.weight.data<uint8_t>() + row * cols;
      for (int64_t k = 0; k < cols; ++k) values[k] = fp8_e4m3_to_float(codes[k]);
      const int64_t scale_cols = weight.scale_inv.dim(1);
      *block_scales = weight.scale_inv.data<float>() + (row / kBlock) * scale_cols;
      return;
    }
    case DType::BF16: {
      const uint16_t* bits = weight.weight.data<uint16_t>() + row * cols;
      for (int64_t k = 0; k < cols; ++k) values[k] = bf16_to_float(bits[k]);
      break;
    }
    case DType::F16: {
      const uint16_t* bits = weight.weight.data<uint16_t>() + row * cols;
      for (int64_t k = 0; k < cols; ++k) values[k] = f16_to_float(bits[k]);
      break;
    }
    case DType::F32:
      std::copy_n(weight.weight.data<float>() + row * cols, cols, values);
      break;
    default:
      FATHOM_FAIL("weight " << weight.name << ": unsupported dtype " << dtype_name(weight.weight.dtype()));
  }
  *block_scales = nullptr;
}

void check_weight(const WeightMatrix& weight) {
  FATHOM_CHECK(weight.weight.rank() == 2 && weight.weight.dim(0) == weight.rows && weight.weight.dim(1) == weight.cols,
               "weight " << weight.name << ": tensor shape " << weight.weight.shape_string() << " != [" << weight.rows
                         << ", " << weight.cols << "]");
  if (weight.is_fp8()) {
    FATHOM_CHECK(!weight.scale_inv.empty() && weight.scale_inv.dtype() == DType::F32 &&
                     weight.scale_inv.dim(0) == (weight.rows + kBlock - 1) / kBlock &&
                     weight.scale_inv.dim(1) == (weight.cols + kBlock - 1) / kBlock,
                 "weight " << weight.name << ": FP8 weight needs F32 scale_inv of shape [ceil(rows/128), ceil(cols/128)]");
  }
}

}  // namespace

void dequantize_row(const WeightMatrix& weight, int64_t row, float* out) {
  const float* block_scales = nullptr;
  load_row(weight, row, out, &block_scales);
  if (!block_scales) return;
  for (int64_t k = 0; k < weight.cols; ++k) out[k] *= block_scales[k / kBlock];
}

std::vector<float> dequantize(const WeightMatrix& weight) {
  check_weight(weight);
  std::vector<float> result(static_cast<size_t>(weight.rows * weight.cols));
  for (int64_t row = 0; row < weight.rows; ++row) dequantize_row(weight, row, result.data() + row * weight.cols);
  return result;
}

void linear(const float* x, int64_t num_tokens, const WeightMatrix& weight, NumericMode mode, float* y,
            ThreadPool& pool) {
  check_weight(weight);
  const int64_t rows = weight.rows;
  const int64_t cols = weight.cols;
  const int64_t num_blocks = (cols + kBlock - 1) / kBlock;
  const bool quantize_x = mode == NumericMode::kW8A8 && weight.is_fp8();

  // [num_tokens, cols] activation values and [num_tokens, num_blocks] scales (all ones unless quantized).
  std::vector<float> x_values;
  std::vector<float> x_scales;
  if (quantize_x) {
    x_values.resize(static_cast<size_t>(num_tokens * cols));
    x_scales.resize(static_cast<size_t>(num_tokens * num_blocks));
    quantize_activations_fp8(x, num_tokens, cols, x_values.data(), x_scales.data());
    x = x_values.data();
  }

  pool.parallel_for(rows, [&](int64_t row_begin, int64_t row_end) {
    std::vector<float> row_values(static_cast<size_t>(cols));
    for (int64_t row = row_begin; row < row_end; ++row) {
      const float* block_scales = nullptr;
      load_row(weight, row, row_values.data(), &block_scales);
      if (block_scales && !quantize_x) {
        // exact: dequantize the weight row once, then plain fp32 dots.
        for (int64_t k = 0; k < cols; ++k) row_values[k] *= block_scales[k / kBlock];
        block_scales = nullptr;
      }
      for (int64_t t = 0; t < num_tokens; ++t) {
        const float* x_row = x + t * cols;
        float acc = 0.0f;
        if (!block_scales) {
          acc = dot(x_row, row_values.data(), cols);
        } else {
          // w8a8: fp32 partial sum per 128-wide K block, promoted by both scales.
          for (int64_t b = 0; b < num_blocks; ++b) {
            const int64_t begin = b * kBlock;
            const int64_t len = std::min(kBlock, cols - begin);
            acc += dot(x_row + begin, row_values.data() + begin, len) * (x_scales[t * num_blocks + b] * block_scales[b]);
          }
        }
        y[t * rows + row] = acc;
      }
    }
  }, /*min_chunk=*/4);
}

}  // namespace fathom::kernels::cpu
