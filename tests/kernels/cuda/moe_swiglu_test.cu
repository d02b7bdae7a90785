// GPU SwiGLU (bf16 out, and fused e4m3 + per-128 scales) vs the CPU silu * up and quantize_activations_fp8.
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "cuda_test_util.h"
#include "kernels/cpu/activation_quant.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/cuda/moe/swiglu.h"

namespace fathom::kernels::cuda {
namespace {

struct SwigluData {
  std::vector<float> gate_up;  // [rows, 2I], bf16-exact
  std::vector<int32_t> row_expert;
};

SwigluData make_data(int64_t rows, int64_t intermediate, uint32_t seed, bool with_skipped_rows) {
  std::mt19937 rng(seed);
  SwigluData d;
  d.gate_up = testing::round_to_bf16(testing::random_normal(rng, rows * 2 * intermediate, 2.0f));
  // Some rows with a much larger range, so the per-group scales differ.
  for (int64_t r = 0; r < rows; r += 3) {
    for (int64_t c = 0; c < 2 * intermediate; c += 5) d.gate_up[r * 2 * intermediate + c] *= 40.0f;
  }
  d.gate_up = testing::round_to_bf16(d.gate_up);
  d.row_expert.assign(static_cast<size_t>(rows), 0);
  if (with_skipped_rows) {
    for (int64_t r = 1; r < rows; r += 4) d.row_expert[r] = -1;
  }
  return d;
}

std::vector<float> cpu_swiglu(const std::vector<float>& gate_up, int64_t rows, int64_t intermediate) {
  std::vector<float> out(static_cast<size_t>(rows * intermediate));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < intermediate; ++i) {
      out[r * intermediate + i] = cpu::silu(gate_up[r * 2 * intermediate + i]) * gate_up[r * 2 * intermediate + intermediate + i];
    }
  }
  return out;
}

void check_bf16(int64_t rows, int64_t intermediate, bool with_skipped_rows, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "rows " << rows << " I " << intermediate << " skipped " << with_skipped_rows);
  const SwigluData d = make_data(rows, intermediate, seed, with_skipped_rows);
  DeviceBuffer<__nv_bfloat16> d_in(testing::float_to_bf16_vector(d.gate_up));
  DeviceBuffer<int32_t> d_rows(d.row_expert);
  DeviceBuffer<__nv_bfloat16> d_out(static_cast<size_t>(rows * intermediate));
  d_out.fill_bytes(0xff);
  swiglu_bf16(d_in.data(), rows, intermediate, with_skipped_rows ? d_rows.data() : nullptr, d_out.data(), nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<__nv_bfloat16> out_bits = d_out.download();
  const std::vector<float> expected = cpu_swiglu(d.gate_up, rows, intermediate);
  std::vector<float> got_rows, expected_rows;
  int64_t skipped_written = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < intermediate; ++i) {
      const size_t at = static_cast<size_t>(r * intermediate + i);
      uint16_t bits;
      std::memcpy(&bits, &out_bits[at], 2);
      if (d.row_expert[r] < 0) {
        skipped_written += bits != 0xffff;
      } else {
        got_rows.push_back(__bfloat162float(out_bits[at]));
        expected_rows.push_back(expected[at]);
      }
    }
  }
  EXPECT_EQ(skipped_written, 0);
  EXPECT_LT(testing::relative_l2_error(got_rows, expected_rows), 3e-3);  // bf16 output rounding
}

// The fused kernel must equal the CPU quantization of the GPU's bf16 SwiGLU rows bit for bit.
void check_fp8(int64_t rows, int64_t intermediate, bool column_major_scales, bool with_skipped_rows, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "rows " << rows << " I " << intermediate << " column-major scales "
                                    << column_major_scales << " skipped " << with_skipped_rows);
  const SwigluData d = make_data(rows, intermediate, seed, with_skipped_rows);
  const int64_t groups = (intermediate + 127) / 128;
  const int64_t padded_rows = (rows + 3) / 4 * 4;  // e.g. a TMA-aligned MN-major scale layout
  const int64_t scale_row_stride = column_major_scales ? 1 : groups;
  const int64_t scale_group_stride = column_major_scales ? padded_rows : 1;
  DeviceBuffer<__nv_bfloat16> d_in(testing::float_to_bf16_vector(d.gate_up));
  DeviceBuffer<int32_t> d_rows(d.row_expert);
  const int32_t* row_expert = with_skipped_rows ? d_rows.data() : nullptr;
  DeviceBuffer<__nv_bfloat16> d_bf16(static_cast<size_t>(rows * intermediate));
  DeviceBuffer<__nv_fp8_e4m3> d_codes(static_cast<size_t>(rows * intermediate));
  DeviceBuffer<float> d_scales(static_cast<size_t>(padded_rows * groups));
  d_codes.fill_bytes(0xff);
  d_scales.fill_bytes(0xff);
  swiglu_bf16(d_in.data(), rows, intermediate, nullptr, d_bf16.data(), nullptr);
  swiglu_quant_fp8(d_in.data(), rows, intermediate, row_expert, d_codes.data(), d_scales.data(), scale_row_stride,
                   scale_group_stride, nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> bf16_rows = testing::bf16_to_float_vector(d_bf16.download());
  const std::vector<__nv_fp8_e4m3> codes = d_codes.download();
  const std::vector<float> scales = d_scales.download();
  std::vector<float> expected_values(bf16_rows.size()), expected_scales(static_cast<size_t>(rows * groups));
  cpu::quantize_activations_fp8(bf16_rows.data(), rows, intermediate, expected_values.data(), expected_scales.data());

  int64_t code_mismatches = 0, scale_mismatches = 0, skipped_written = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const bool skipped = d.row_expert[r] < 0 && with_skipped_rows;
    for (int64_t g = 0; g < groups; ++g) {
      const float scale = scales[r * scale_row_stride + g * scale_group_stride];
      uint32_t scale_bits;
      std::memcpy(&scale_bits, &scale, 4);
      if (skipped) {
        skipped_written += scale_bits != 0xffffffffu;
        continue;
      }
      scale_mismatches += std::memcmp(&scale, &expected_scales[r * groups + g], 4) != 0;
    }
    for (int64_t i = 0; i < intermediate; ++i) {
      uint8_t code;
      std::memcpy(&code, &codes[r * intermediate + i], 1);
      if (skipped) {
        skipped_written += code != 0xff;
        continue;
      }
      const float expected = expected_values[r * intermediate + i];
      const float got = fp8_e4m3_to_float(code);
      if (!(got == expected)) {
        if (code_mismatches < 5) ADD_FAILURE() << "row " << r << " col " << i << ": " << got << " vs " << expected;
        ++code_mismatches;
      }
    }
  }
  EXPECT_EQ(code_mismatches, 0);
  EXPECT_EQ(scale_mismatches, 0);
  EXPECT_EQ(skipped_written, 0);
}

TEST(CudaSwiglu, Bf16MatchesCpu) {
  FATHOM_REQUIRE_GPU();
  uint32_t seed = 1;
  for (int64_t rows : {1, 5, 64, 300}) check_bf16(rows, 2048, false, seed++);  // V3 expert intermediate
  check_bf16(3, 18432, false, seed++);                                          // V3 dense intermediate
  check_bf16(40, 2048, true, seed++);
  for (int64_t intermediate : {8, 100, 136, 1}) check_bf16(7, intermediate, false, seed++);
}

TEST(CudaSwiglu, FusedFp8MatchesCpuQuantization) {
  FATHOM_REQUIRE_GPU();
  uint32_t seed = 50;
  for (int64_t rows : {1, 5, 64, 300}) check_fp8(rows, 2048, false, false, seed++);
  check_fp8(3, 18432, false, false, seed++);
  check_fp8(37, 2048, true, false, seed++);
  check_fp8(41, 2048, true, true, seed++);
  for (int64_t intermediate : {8, 100, 136, 200, 1}) check_fp8(7, intermediate, false, false, seed++);
}

}  // namespace
}  // namespace fathom::kernels::cuda
