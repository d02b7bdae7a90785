// GPU SwiGLU (bf16 out, and fused e4m3 + per-128 scales) vs the CPU silu * up and quantize_activations_fp8.
#include <algorithm>
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
// block_major_rows > 0: the scales of those first rows also block-major ([groups, block_major_rows]), and nothing
// else written there.
void check_fp8(int64_t rows, int64_t intermediate, bool column_major_scales, bool with_skipped_rows, uint32_t seed,
               SwigluQuantTuning tuning = {}, int64_t block_major_rows = 0) {
  SCOPED_TRACE(::testing::Message() << "rows " << rows << " I " << intermediate << " column-major scales "
                                    << column_major_scales << " skipped " << with_skipped_rows << " pairs per warp "
                                    << tuning.pairs_per_warp << " block-major rows " << block_major_rows);
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
  DeviceBuffer<float> d_block_major(static_cast<size_t>(std::max<int64_t>(1, groups * block_major_rows) + 1));
  d_codes.fill_bytes(0xff);
  d_scales.fill_bytes(0xff);
  d_block_major.fill_bytes(0xff);
  swiglu_bf16(d_in.data(), rows, intermediate, nullptr, d_bf16.data(), nullptr);
  swiglu_quant_fp8(d_in.data(), rows, intermediate, row_expert, d_codes.data(), d_scales.data(), scale_row_stride,
                   scale_group_stride, nullptr,
                   SwigluBlockMajorScales{block_major_rows > 0 ? d_block_major.data() : nullptr, block_major_rows},
                   tuning);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> block_major = d_block_major.download();
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
  int64_t block_major_mismatches = 0;
  for (int64_t r = 0; r < block_major_rows; ++r) {
    const bool skipped = d.row_expert[r] < 0 && with_skipped_rows;
    for (int64_t g = 0; g < groups; ++g) {
      const float got = block_major[g * block_major_rows + r];
      uint32_t got_bits;
      std::memcpy(&got_bits, &got, 4);
      block_major_mismatches += skipped ? got_bits != 0xffffffffu
                                        : std::memcmp(&got, &expected_scales[r * groups + g], 4) != 0;
    }
  }
  uint32_t past_end_bits;
  std::memcpy(&past_end_bits, &block_major.back(), 4);
  EXPECT_EQ(code_mismatches, 0);
  EXPECT_EQ(scale_mismatches, 0);
  EXPECT_EQ(skipped_written, 0);
  EXPECT_EQ(block_major_mismatches, 0);
  EXPECT_EQ(past_end_bits, 0xffffffffu);  // nothing past [groups, block_major_rows]
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

// Aligned rows take the pipelined kernel: every walk length gives the same bits, including a last walk cut short by the
// row (9 pairs in walks of 2, 4 or 8; walks longer than a row's pairs are clamped to it), a last group of fewer than
// 128 columns (I = 136, 200, 2056) and one group in a pair (I = 128 * odd), skipped rows, both scale layouts and enough
// rows for the heuristic's longest walk (9000 rows x 8 pairs: 4-pair walks on devices of up to 140 SMs).
TEST(CudaSwiglu, PipelinedWalksMatchCpuQuantization) {
  FATHOM_REQUIRE_GPU();
  uint32_t seed = 90;
  for (int pairs : {1, 2, 3, 4, 8}) {
    const SwigluQuantTuning tuning{pairs};
    check_fp8(37, 2048, false, false, seed++, tuning);
    check_fp8(41, 2048, true, true, seed++, tuning);
    check_fp8(9, 2056, false, true, seed++, tuning);
    check_fp8(5, 640, true, false, seed++, tuning);
    for (int64_t intermediate : {8, 136, 200}) check_fp8(7, intermediate, false, false, seed++, tuning);
  }
  check_fp8(9000, 2048, false, true, seed++);  // the heuristic's longest walks (4 pairs)
  check_fp8(1200, 18432, true, false, seed++);
}

// The prefill MLP's form: row-major scales plus the block-major copy of a multiple-of-128 row prefix (cuBLASLt's
// rows), on both kernels (aligned rows and I % 8 != 0).
TEST(CudaSwiglu, BlockMajorScalesOfARowPrefix) {
  FATHOM_REQUIRE_GPU();
  uint32_t seed = 300;
  check_fp8(300, 2048, false, false, seed++, {}, 256);
  check_fp8(300, 2048, false, true, seed++, {4}, 128);
  check_fp8(128, 18432, false, false, seed++, {}, 128);
  check_fp8(131, 100, false, false, seed++, {}, 128);
  check_fp8(5, 136, true, false, seed++, {}, 5);
}

TEST(CudaSwiglu, PairsPerWarpHeuristic) {
  EXPECT_EQ(swiglu_pairs_per_warp(8, 8, 132), 1);        // decode: every pair its own warp
  EXPECT_EQ(swiglu_pairs_per_warp(2048, 8, 132), 1);     // 256 tokens: 16384 warps of one pair
  EXPECT_EQ(swiglu_pairs_per_warp(8192, 8, 132), 2);     // 1024 tokens: 32768 warps of two
  EXPECT_EQ(swiglu_pairs_per_warp(32768, 8, 132), 4);    // 4096 tokens
  EXPECT_EQ(swiglu_pairs_per_warp(65536, 3, 132), 2);    // never past the row (two walks of 2 cover 3 pairs)
  EXPECT_EQ(swiglu_pairs_per_warp(100000, 72, 132), 4);  // dense intermediate: capped at 4
}

}  // namespace
}  // namespace fathom::kernels::cuda
