// Grouped (per-expert) FP8 GEMM on the GPU against the CPU w8a8 linear, expert by expert.
#include <cuda_bf16.h>

#include <cstring>
#include <numeric>

#include "cuda_test_util.h"
#include "fp8_test_util.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/fp8_gemm/act_quant.h"
#include "kernels/cuda/fp8_gemm/fp8_grouped_gemm.h"
#include "kernels/cuda/fp8_gemm/fp8_types.h"
#include "programmatic_copy.cuh"
#include "test_util.h"

namespace fathom::kernels::cuda {
namespace {

struct GroupedShape {
  int32_t num_experts;
  int64_t rows, cols;
  std::vector<int32_t> counts;  // rows per expert (0 = unselected)
};

class GroupedGemm : public ::testing::TestWithParam<GroupedShape> {};

TEST_P(GroupedGemm, MatchesCpuW8A8PerExpert) {
  FATHOM_REQUIRE_GPU();
  const GroupedShape s = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(s.rows * 31 + s.cols + s.num_experts));
  // Weights: one random fp8 matrix per expert, stacked on the device.
  const StackedExperts experts = make_stacked_experts(rng, s.num_experts, s.rows, s.cols);
  std::vector<int32_t> offsets(static_cast<size_t>(s.num_experts) + 1, 0);
  for (int32_t e = 0; e < s.num_experts; ++e) offsets[e + 1] = offsets[e] + s.counts[e];
  const int64_t total_rows = offsets.back();
  const int32_t max_count = *std::max_element(s.counts.begin(), s.counts.end());

  std::vector<float> x = fathom::testing::round_to_bf16(fathom::testing::random_normal(rng, static_cast<size_t>(total_rows * s.cols), 2.0f));
  const int64_t k_blocks = ceil_div(s.cols, 128);
  DeviceBuffer<__nv_bfloat16> x_device(fathom::testing::float_to_bf16_vector(x));
  DeviceBuffer<uint8_t> x_values(static_cast<size_t>(total_rows * s.cols));
  DeviceBuffer<float> x_scales(static_cast<size_t>(total_rows * k_blocks));
  quantize_activations_fp8(x_device.data(), total_rows, s.cols, x_values.data(), x_scales.data(), nullptr, nullptr);

  DeviceBuffer<int32_t> offsets_device(offsets), counts_device(s.counts);
  DeviceBuffer<__nv_bfloat16> out(static_cast<size_t>(total_rows * s.rows));
  out.fill_bytes(0xff);
  Fp8GroupedGemmArgs args;
  args.x_values = x_values.data();
  args.x_scales = x_scales.data();
  args.expert_offsets = offsets_device.data();
  args.expert_counts = counts_device.data();
  args.w_values = experts.values.data();
  args.w_scales = experts.scales.data();
  args.num_experts = s.num_experts;
  args.rows = s.rows;
  args.cols = s.cols;
  args.max_rows_per_expert = max_count;
  fp8_grouped_gemm(args, out.data(), nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> gpu = fathom::testing::bf16_to_float_vector(out.download());

  // The decode path (grid over the active experts only, gemv kernel) gives the same bits, with the slot bound exact
  // or loose (slots past the active experts read -1 and exit).
  std::vector<int32_t> active;
  for (int32_t e = 0; e < s.num_experts; ++e) {
    if (s.counts[e] > 0) active.push_back(e);
  }
  const int32_t num_active = static_cast<int32_t>(active.size());
  active.resize(static_cast<size_t>(s.num_experts), -1);
  DeviceBuffer<int32_t> active_device(active);
  for (int32_t bound : {num_active, s.num_experts, -num_active}) {  // negative: the exact bound, experts settled
    Fp8GroupedGemmArgs gemv_args = args;
    gemv_args.active_experts = active_device.data();
    gemv_args.max_active_experts = bound < 0 ? -bound : bound;
    gemv_args.experts_settled = bound < 0;
    DeviceBuffer<__nv_bfloat16> gemv_out(static_cast<size_t>(total_rows * s.rows));
    gemv_out.fill_bytes(0xff);
    fp8_grouped_gemm(gemv_args, gemv_out.data(), nullptr);
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> gemv = fathom::testing::bf16_to_float_vector(gemv_out.download());
    for (size_t i = 0; i < gpu.size(); ++i) {
      ASSERT_EQ(std::memcmp(&gemv[i], &gpu[i], sizeof(float)), 0)
          << "gemv path differs at row " << i / s.rows << " col " << i % s.rows << " (slot bound " << bound << ")";
    }
  }

  // Reading the rows through x_row_source (row r = source row row_source[r] / divisor of an unpermuted x, as the
  // model passes MoePermutation::row_token_slot and top_k) gives the same bits as the permuted copy.
  {
    const int32_t divisor = s.num_experts >= 256 ? 8 : 3;  // V3's top-8 with its 256 experts
    std::vector<int32_t> source_of(static_cast<size_t>(total_rows));
    std::iota(source_of.begin(), source_of.end(), 0);
    std::shuffle(source_of.begin(), source_of.end(), rng);
    const std::vector<uint8_t> permuted_values = x_values.download();
    const std::vector<float> permuted_scales = x_scales.download();
    std::vector<uint8_t> source_values(permuted_values.size());
    std::vector<float> source_scales(permuted_scales.size());
    std::vector<int32_t> row_source(static_cast<size_t>(total_rows));
    for (int64_t r = 0; r < total_rows; ++r) {
      const int64_t source = source_of[r];
      std::memcpy(&source_values[source * s.cols], &permuted_values[r * s.cols], static_cast<size_t>(s.cols));
      std::memcpy(&source_scales[source * k_blocks], &permuted_scales[r * k_blocks], sizeof(float) * k_blocks);
      row_source[r] = static_cast<int32_t>(source * divisor + r % divisor);
    }
    DeviceBuffer<uint8_t> source_values_device(source_values);
    DeviceBuffer<float> source_scales_device(source_scales);
    DeviceBuffer<int32_t> row_source_device(row_source);
    Fp8GroupedGemmArgs indirect_args = args;
    indirect_args.x_values = source_values_device.data();
    indirect_args.x_scales = source_scales_device.data();
    indirect_args.active_experts = active_device.data();
    indirect_args.max_active_experts = num_active;
    indirect_args.x_row_source = row_source_device.data();
    indirect_args.x_row_divisor = divisor;
    indirect_args.x_source_rows = total_rows;
    DeviceBuffer<__nv_bfloat16> indirect_out(static_cast<size_t>(total_rows * s.rows));
    indirect_out.fill_bytes(0xff);
    fp8_grouped_gemm(indirect_args, indirect_out.data(), nullptr);
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> indirect = fathom::testing::bf16_to_float_vector(indirect_out.download());
    for (size_t i = 0; i < gpu.size(); ++i) {
      ASSERT_EQ(std::memcmp(&indirect[i], &gpu[i], sizeof(float)), 0)
          << "x_row_source path differs at row " << i / s.rows << " col " << i % s.rows;
    }
    Fp8GroupedGemmArgs unsized = indirect_args;  // the source row count bounds the kernel's int offsets
    unsized.x_source_rows = 0;
    EXPECT_THROW(fp8_grouped_gemm(unsized, indirect_out.data(), nullptr), Error);
    indirect_args.kernel = Fp8GroupedKernel::kTiled;  // only the decode kernel reads through a row map
    EXPECT_THROW(fp8_grouped_gemm(indirect_args, indirect_out.data(), nullptr), Error);
  }

  ThreadPool pool;
  for (int32_t e = 0; e < s.num_experts; ++e) {
    if (s.counts[e] == 0) continue;
    std::vector<float> expected(static_cast<size_t>(s.counts[e] * s.rows));
    cpu::linear(x.data() + offsets[e] * s.cols, s.counts[e], experts.cpu[e], NumericMode::kW8A8, expected.data(), pool);
    std::vector<float> actual(gpu.begin() + offsets[e] * s.rows, gpu.begin() + offsets[e + 1] * s.rows);
    EXPECT_LT(fathom::testing::relative_l2_error(actual, expected), 8e-3) << "expert " << e << " rows " << s.counts[e];
  }

  // Row invariance: expert 0's first row alone gives the same bits as inside its segment.
  if (s.counts[0] > 0) {
    std::vector<int32_t> one_counts(static_cast<size_t>(s.num_experts), 0);
    one_counts[0] = 1;
    DeviceBuffer<int32_t> one_counts_device(one_counts);
    DeviceBuffer<__nv_bfloat16> alone(static_cast<size_t>(s.rows));
    alone.fill_bytes(0xff);
    args.expert_counts = one_counts_device.data();
    args.max_rows_per_expert = 1;
    fp8_grouped_gemm(args, alone.data(), nullptr);
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> first = fathom::testing::bf16_to_float_vector(alone.download());
    for (int64_t r = 0; r < s.rows; ++r) ASSERT_EQ(first[r], gpu[r]) << "row " << r;
  }
}

// The down GEMM's settled-experts path as the model chains it: the expert list, offsets and counts are rewritten
// two or more programmatic launches before the GEMM and the activations by the launch right before it, alternating
// between two routings so a read of the previous routing (too early, or a stale cached line) changes the output.
// Every run must give the bits of a plain launch of the same routing.
TEST(GroupedGemmDecode, SettledExpertsInProgrammaticChain) {
  FATHOM_REQUIRE_GPU();
  constexpr int32_t kExperts = 16;
  constexpr int64_t kRows = 1024, kCols = 2048, kBlocks = kCols / 128;
  std::mt19937 rng(404);
  const StackedExperts experts = make_stacked_experts(rng, kExperts, kRows, kCols);
  struct Routing {
    std::vector<int32_t> counts, offsets, active;
    int64_t total = 0;
    DeviceBuffer<uint8_t> x_values;
    DeviceBuffer<float> x_scales;
    std::vector<__nv_bfloat16> expected;
  };
  const std::vector<int32_t> counts_of[2] = {{1, 0, 2, 0, 0, 1, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0},
                                             {0, 4, 0, 1, 1, 0, 0, 2, 0, 0, 1, 0, 0, 0, 0, 5}};
  Routing routing[2];
  int64_t max_total = 0;
  for (int r = 0; r < 2; ++r) {
    Routing& R = routing[r];
    R.counts = counts_of[r];
    R.offsets.assign(kExperts + 1, 0);
    for (int32_t e = 0; e < kExperts; ++e) {
      R.offsets[e + 1] = R.offsets[e] + R.counts[e];
      if (R.counts[e] > 0) R.active.push_back(e);
    }
    R.active.resize(kExperts, -1);
    R.total = R.offsets.back();
    max_total = std::max(max_total, R.total);
    const std::vector<float> x = fathom::testing::round_to_bf16(
        fathom::testing::random_normal(rng, static_cast<size_t>(R.total * kCols), 2.0f));
    DeviceBuffer<__nv_bfloat16> x_device(fathom::testing::float_to_bf16_vector(x));
    R.x_values = DeviceBuffer<uint8_t>(static_cast<size_t>(R.total * kCols));
    R.x_scales = DeviceBuffer<float>(static_cast<size_t>(R.total * kBlocks));
    quantize_activations_fp8(x_device.data(), R.total, kCols, R.x_values.data(), R.x_scales.data(), nullptr, nullptr);
  }
  Fp8GroupedGemmArgs args;
  args.w_values = experts.values.data();
  args.w_scales = experts.scales.data();
  args.num_experts = kExperts;
  args.rows = kRows;
  args.cols = kCols;
  args.max_rows_per_expert = 5;
  args.max_active_experts = kExperts;
  for (Routing& R : routing) {  // references: plain launches, experts not settled
    DeviceBuffer<int32_t> offsets(R.offsets), counts(R.counts), active(R.active);
    DeviceBuffer<__nv_bfloat16> out(static_cast<size_t>(R.total * kRows));
    out.fill_bytes(0xff);
    Fp8GroupedGemmArgs plain = args;
    plain.x_values = R.x_values.data();
    plain.x_scales = R.x_scales.data();
    plain.expert_offsets = offsets.data();
    plain.expert_counts = counts.data();
    plain.active_experts = active.data();
    fp8_grouped_gemm(plain, out.data(), nullptr);
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
    R.expected = out.download();
  }
  DeviceBuffer<int32_t> offsets_of[2] = {DeviceBuffer<int32_t>(routing[0].offsets), DeviceBuffer<int32_t>(routing[1].offsets)};
  DeviceBuffer<int32_t> counts_of_device[2] = {DeviceBuffer<int32_t>(routing[0].counts), DeviceBuffer<int32_t>(routing[1].counts)};
  DeviceBuffer<int32_t> active_of[2] = {DeviceBuffer<int32_t>(routing[0].active), DeviceBuffer<int32_t>(routing[1].active)};
  DeviceBuffer<int32_t> offsets(static_cast<size_t>(kExperts + 1)), counts(static_cast<size_t>(kExperts)),
      active(static_cast<size_t>(kExperts));
  DeviceBuffer<uint8_t> x_values(static_cast<size_t>(max_total * kCols));
  DeviceBuffer<float> x_scales(static_cast<size_t>(max_total * kBlocks));
  DeviceBuffer<__nv_bfloat16> out(static_cast<size_t>(max_total * kRows));
  args.x_values = x_values.data();
  args.x_scales = x_scales.data();
  args.expert_offsets = offsets.data();
  args.expert_counts = counts.data();
  args.active_experts = active.data();
  args.experts_settled = true;
  cudaStream_t stream;
  FATHOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int run = 0; run < 40; ++run) {
    const int r = run % 2;
    const Routing& R = routing[r];
    FATHOM_CUDA_CHECK(cudaMemsetAsync(out.data(), 0xff, out.bytes(), stream));
    fathom::testing::programmatic_copy(active_of[r].data(), active.data(), active.bytes(), stream);
    fathom::testing::programmatic_copy(offsets_of[r].data(), offsets.data(), offsets.bytes(), stream);
    fathom::testing::programmatic_copy(R.x_scales.data(), x_scales.data(), R.x_scales.bytes(), stream);
    fathom::testing::programmatic_copy(counts_of_device[r].data(), counts.data(), counts.bytes(), stream);  // two launches back
    fathom::testing::programmatic_copy(R.x_values.data(), x_values.data(), R.x_values.bytes(), stream);    // the previous launch
    fp8_grouped_gemm(args, out.data(), stream);
    FATHOM_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<__nv_bfloat16> got = out.download();
    got.resize(R.expected.size());
    ASSERT_EQ(std::memcmp(got.data(), R.expected.data(), got.size() * sizeof(__nv_bfloat16)), 0)
        << "run " << run << " (routing " << r << ")";
  }
  FATHOM_CUDA_CHECK(cudaStreamDestroy(stream));
}

// V3's 256 experts at decode, small weights: 57 rows (about 7 tokens x top-8) over 48 experts (1-3 rows each, expert
// 0 among them for the row-invariance check), the rest idle.
GroupedShape v3_expert_count_decode() {
  GroupedShape s{256, 256, 384, std::vector<int32_t>(256, 0)};
  for (int32_t i = 0; i < 48; ++i) {
    s.counts[static_cast<size_t>((i * 37) % 256)] = 1 + (i % 8 == 0) + (i % 16 == 0);
  }
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GroupedGemm,
    ::testing::Values(GroupedShape{4, 128, 128, {1, 0, 3, 2}},
                      GroupedShape{4, 4096, 7168, {1, 0, 0, 1}},            // V3 gate_up, decode
                      GroupedShape{4, 7168, 2048, {2, 1, 0, 3}},            // V3 down
                      GroupedShape{3, 200, 96, {70, 0, 9}},                             // odd dims, > 64 rows
                      GroupedShape{16, 256, 160, {130, 5, 0, 0, 64, 65, 1, 0, 0, 0, 0, 0, 0, 0, 0, 8}},
                      GroupedShape{9, 4096, 7168, {1, 1, 0, 1, 9, 1, 1, 16, 1}},  // 9-16 rows: two token tiles
                      GroupedShape{5, 200, 96, {0, 17, 0, 3, 0}},                // odd rows, 17 rows: two passes
                      v3_expert_count_decode()));

}  // namespace
}  // namespace fathom::kernels::cuda
