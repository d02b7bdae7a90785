// A decode GEMM's split-K partials summed by the kernel that consumes the GEMM output (add+RMSNorm, MoE combine,
// SwiGLU + fp8 quantization) == the split-K reduce to bf16 followed by the same consumer, bit for bit.
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "fp8_test_util.h"
#include "kernels/cuda/fp8_gemm/act_quant.h"
#include "kernels/cuda/fp8_gemm/fp8_gemm_heuristics.h"
#include "kernels/cuda/moe/moe_combine.h"
#include "kernels/cuda/moe/swiglu.h"
#include "kernels/cuda/norm/rms_norm.h"

namespace fathom::kernels::cuda {
namespace {

// One GEMM run both ways: reduced to bf16 (`reduced`) and left in split-K partials (`partials`).
struct SplitGemm {
  DeviceBuffer<uint8_t> x_values;
  DeviceBuffer<float> x_scales;
  DeviceBuffer<float> workspace;
  DeviceBuffer<__nv_bfloat16> reduced;  // [tokens, rows]
  SplitKPartials partials;
};

SplitGemm run_split_gemm(Fp8Gemm& gemm, const TestWeight& w, int64_t tokens, std::mt19937& rng) {
  const int64_t rows = w.cpu.rows, cols = w.cpu.cols;
  SplitGemm g;
  // A gemv that leaves partials (the default, kCta, sums them in the CTA on the weights it takes).
  gemm.set_small_m_variant(SmallMVariant::kW4D2P2);
  // From 9 tokens the wgmma decode kernel runs, with its own split count; where its heuristic takes one split (V3's
  // 7168 x 2048 on 132 SMs: the GEMM writes its output itself) two are forced, so there are partials to consume.
  const bool wgmma = tokens >= kWgmmaDecodeMinTokens;
  gemm.set_wgmma_decode_splits_override(0);
  if (wgmma && gemm.wgmma_decode_splits(rows, cols) < 2) gemm.set_wgmma_decode_splits_override(2);
  DeviceBuffer<__nv_bfloat16> x(testing::float_to_bf16_vector(testing::random_normal(rng, tokens * cols)));
  g.x_values = DeviceBuffer<uint8_t>(static_cast<size_t>(tokens * cols));
  g.x_scales = DeviceBuffer<float>(static_cast<size_t>(tokens * ((cols + 127) / 128)));
  quantize_activations_fp8(x.data(), tokens, cols, g.x_values.data(), g.x_scales.data(), nullptr, nullptr);
  const DeviceFp8Activations activations{g.x_values.data(), g.x_scales.data(), tokens, cols};
  const size_t bytes = gemm.small_m_workspace_bytes(rows, cols);
  g.workspace = DeviceBuffer<float>(bytes / sizeof(float));
  g.workspace.fill_bytes(0xff);  // poisoned: only the used splits are written
  Fp8GemmWorkspace workspace{g.workspace.data(), bytes};
  g.reduced = DeviceBuffer<__nv_bfloat16>(static_cast<size_t>(tokens * rows));
  g.reduced.fill_bytes(0xff);
  gemm.run(activations, nullptr, w.view(), g.reduced.data(), workspace, nullptr, Fp8GemmPath::kSmallM);
  // Same GEMM again, its reduce left to the consumer: the partials it returns stay in the workspace.
  DeviceBuffer<__nv_bfloat16> untouched(static_cast<size_t>(tokens * rows));
  untouched.fill_bytes(0x7f);
  g.partials = gemm.run_small_m_deferred(activations, w.view(), untouched.data(), workspace, nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_FALSE(g.partials.empty()) << rows << " x " << cols << " should split K";
  // Both counts are shape-only; the mma.sync family leaves no split empty (56 K blocks asked for 16 splits: 14).
  EXPECT_EQ(g.partials.splits, wgmma ? gemm.wgmma_decode_splits(rows, cols)
                                     : used_split_count(ceil_div(cols, kFp8ScaleBlock), gemm.small_m_splits(rows, cols)));
  for (const __nv_bfloat16 v : untouched.download()) {
    uint16_t bits;
    std::memcpy(&bits, &v, 2);
    if (bits != 0x7f7f) {
      ADD_FAILURE() << "the deferred GEMM wrote its output";
      break;
    }
  }
  return g;
}

class SplitKConsumers : public ::testing::TestWithParam<int64_t> {};

TEST_P(SplitKConsumers, AddRmsNormEqualsReduceThenNorm) {
  FATHOM_REQUIRE_GPU();
  const int64_t tokens = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(100 + tokens));
  Fp8Gemm gemm(device_sm_count());
  // 1024 wide (fp8 output fused into the norm), 1000 wide (separate quantize launch after the norm) and V3's 7168
  // (o_proj's partials into the post-attention norm), each with the fp32 copy alone and with the router's bf16 planes.
  for (const int64_t dim : {int64_t{1024}, int64_t{1000}, int64_t{7168}}) {
    for (const bool with_planes : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "tokens " << tokens << " dim " << dim << " planes " << with_planes);
      const TestWeight w = make_weight(rng, dim, 4096);
      const SplitGemm g = run_split_gemm(gemm, w, tokens, rng);
      const std::vector<__nv_bfloat16> residual =
          testing::float_to_bf16_vector(testing::random_normal(rng, tokens * dim));
      const std::vector<__nv_bfloat16> weight = testing::float_to_bf16_vector(testing::random_normal(rng, dim));
      DeviceBuffer<__nv_bfloat16> d_weight(weight);
      struct Outputs {
        DeviceBuffer<__nv_bfloat16> residual, out, planes;
        DeviceBuffer<float> out_f32, scales;
        DeviceBuffer<uint8_t> values;
      };
      auto make_outputs = [&] {
        Outputs o{DeviceBuffer<__nv_bfloat16>(residual), DeviceBuffer<__nv_bfloat16>(static_cast<size_t>(tokens * dim)),
                  DeviceBuffer<__nv_bfloat16>(with_planes ? static_cast<size_t>(3 * tokens * dim) : 0),
                  DeviceBuffer<float>(static_cast<size_t>(tokens * dim)),
                  DeviceBuffer<float>(static_cast<size_t>(tokens * ((dim + 127) / 128))),
                  DeviceBuffer<uint8_t>(static_cast<size_t>(tokens * dim))};
        o.out.fill_bytes(0xff);
        o.planes.fill_bytes(0xff);
        o.out_f32.fill_bytes(0xff);
        o.scales.fill_bytes(0xff);
        o.values.fill_bytes(0xff);
        return o;
      };
      Outputs expected = make_outputs(), got = make_outputs();
      Fp8RowsOut fp8_expected{expected.values.data(), expected.scales.data()};
      Fp8RowsOut fp8_got{got.values.data(), got.scales.data()};
      add_rms_norm_bf16(g.reduced.data(), SplitKPartials{}, expected.residual.data(), tokens, dim, d_weight.data(),
                        1e-6f, expected.out.data(),
                        UnroundedRowsOut{expected.out_f32.data(), with_planes ? expected.planes.data() : nullptr},
                        &fp8_expected, nullptr);
      add_rms_norm_bf16(nullptr, g.partials, got.residual.data(), tokens, dim, d_weight.data(), 1e-6f, got.out.data(),
                        UnroundedRowsOut{got.out_f32.data(), with_planes ? got.planes.data() : nullptr}, &fp8_got,
                        nullptr);
      FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
      testing::expect_same_device_bits(got.residual, expected.residual, "residual");
      testing::expect_same_device_bits(got.out, expected.out, "bf16 output");
      testing::expect_same_device_bits(got.out_f32, expected.out_f32, "fp32 output");
      if (with_planes) testing::expect_same_device_bits(got.planes, expected.planes, "bf16 planes");
      testing::expect_same_device_bits(got.values, expected.values, "e4m3 output");
      testing::expect_same_device_bits(got.scales, expected.scales, "fp8 scales");
    }
  }
}

TEST_P(SplitKConsumers, MoeCombineEqualsReduceThenCombine) {
  FATHOM_REQUIRE_GPU();
  const int64_t tokens = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(200 + tokens));
  Fp8Gemm gemm(device_sm_count());
  for (const auto [hidden, top_k] : {std::pair<int64_t, int32_t>{1024, 4}, {7168, 8}}) {  // and V3's
    SCOPED_TRACE(::testing::Message() << "tokens " << tokens << " hidden " << hidden << " top_k " << top_k);
    const TestWeight w = make_weight(rng, hidden, 2048);  // the shared expert's down projection
    const SplitGemm g = run_split_gemm(gemm, w, tokens, rng);
    const int64_t rows = tokens * top_k;
    DeviceBuffer<__nv_bfloat16> expert_out(testing::float_to_bf16_vector(testing::random_normal(rng, rows * hidden)));
    DeviceBuffer<float> weights(testing::random_normal(rng, rows));
    std::vector<int32_t> slot_row(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) slot_row[i] = i % 5 == 3 ? -1 : static_cast<int32_t>((i * 7) % rows);
    DeviceBuffer<int32_t> d_slot_row(slot_row);
    DeviceBuffer<__nv_bfloat16> expected(static_cast<size_t>(tokens * hidden));
    DeviceBuffer<__nv_bfloat16> got(static_cast<size_t>(tokens * hidden));
    expected.fill_bytes(0xff);
    got.fill_bytes(0xff);
    moe_combine(expert_out.data(), weights.data(), d_slot_row.data(), g.reduced.data(), tokens, top_k, hidden,
                expected.data(), nullptr);
    moe_combine(expert_out.data(), weights.data(), d_slot_row.data(), g.partials, tokens, top_k, hidden, got.data(),
                nullptr);
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
    testing::expect_same_device_bits(got, expected, "combined output");
  }
}

TEST_P(SplitKConsumers, SwigluQuantEqualsReduceThenSwiglu) {
  FATHOM_REQUIRE_GPU();
  const int64_t tokens = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(300 + tokens));
  Fp8Gemm gemm(device_sm_count());
  // Intermediate 512 (4 groups), 448 (3.5 groups: a partial last group) and V3's shared expert's 2048.
  for (const int64_t intermediate : {int64_t{512}, int64_t{448}, int64_t{2048}}) {
    SCOPED_TRACE(::testing::Message() << "tokens " << tokens << " I " << intermediate);
    const TestWeight w = make_weight(rng, 2 * intermediate, 4096);  // the shared expert's gate_up projection
    const SplitGemm g = run_split_gemm(gemm, w, tokens, rng);
    const int64_t groups = (intermediate + 127) / 128;
    DeviceBuffer<uint8_t> values_expected(static_cast<size_t>(tokens * intermediate)),
        values_got(static_cast<size_t>(tokens * intermediate));
    DeviceBuffer<float> scales_expected(static_cast<size_t>(tokens * groups)), scales_got(static_cast<size_t>(tokens * groups));
    values_expected.fill_bytes(0xff);
    values_got.fill_bytes(0xff);
    scales_expected.fill_bytes(0xff);
    scales_got.fill_bytes(0xff);
    swiglu_quant_fp8(g.reduced.data(), tokens, intermediate, nullptr,
                     reinterpret_cast<__nv_fp8_e4m3*>(values_expected.data()), scales_expected.data(), groups, 1, nullptr);
    swiglu_quant_fp8(g.partials, tokens, intermediate, reinterpret_cast<__nv_fp8_e4m3*>(values_got.data()),
                     scales_got.data(), groups, 1, nullptr);
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
    testing::expect_same_device_bits(values_got, values_expected, "e4m3 values");
    testing::expect_same_device_bits(scales_got, scales_expected, "scales");
  }
}

// 1 token, the gemv kernel's 8-token tile, and the wgmma decode kernel (9..64: its 32- and 64-token tiles).
INSTANTIATE_TEST_SUITE_P(Tokens, SplitKConsumers, ::testing::Values(1, 3, 8, 9, 16, 17, 40, 64));

TEST(SplitKConsumersChecks, RejectsPartialsTooShortForTheRows) {
  const SplitKPartials partials{reinterpret_cast<const float*>(16), 4, 100};
  EXPECT_THROW(add_rms_norm_bf16(nullptr, partials, nullptr, 2, 64, nullptr, 1e-6f, nullptr, nullptr, nullptr, nullptr),
               std::exception);
  EXPECT_THROW(moe_combine(nullptr, nullptr, nullptr, partials, 2, 1, 64, nullptr, nullptr), std::exception);
  EXPECT_THROW(swiglu_quant_fp8(partials, 2, 64, nullptr, nullptr, 1, 1, nullptr), std::exception);
}

}  // namespace
}  // namespace fathom::kernels::cuda
