// The tiled FP8 GEMM (Fp8GemmPath::kTiled, grouped Fp8GroupedKernel::kTiled) against the CPU w8a8 linear, and bit for bit against
// the small-M path as deterministic inference runs it (its K splits included): the deterministic mode's promise is that a token's output row has the
// same bits whatever the batch size, position or path.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "cuda_test_util.h"
#include "fp8_test_util.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/fp8_gemm/act_quant.h"
#include "kernels/cuda/fp8_gemm/fp8_gemm.h"
#include "kernels/cuda/fp8_gemm/fp8_grouped_gemm.h"
#include "kernels/cuda/fp8_gemm/sm90/fp8_gemm_small_m.cuh"
#include "test_util.h"

namespace fathom::kernels::cuda {
namespace {

using fathom::testing::relative_l2_error;

// Activations quantized on the device from bf16; the CPU sees the same bf16 values.
struct TestActivations {
  std::vector<float> host;       // [tokens, cols], bf16-representable
  DeviceBuffer<uint8_t> values;  // [tokens, cols] e4m3
  DeviceBuffer<float> scales;    // [tokens, k_blocks]
  int64_t tokens = 0, cols = 0;
  DeviceFp8Activations view() const { return {values.data(), scales.data(), tokens, cols}; }
  // Tokens [first, first + count) as a GEMM input of their own (a row-major slice).
  DeviceFp8Activations slice(int64_t first, int64_t count) const {
    return {values.data() + first * cols, scales.data() + first * ceil_div(cols, 128), count, cols};
  }
};

TestActivations make_activations(std::mt19937& rng, int64_t tokens, int64_t cols) {
  TestActivations a;
  a.tokens = tokens;
  a.cols = cols;
  a.host = fathom::testing::random_normal(rng, static_cast<size_t>(tokens * cols), 2.0f);
  // Uneven magnitudes across 128-blocks exercise the per-block scales.
  for (int64_t i = 0; i < tokens * cols; ++i) a.host[i] *= ((i % cols) / 128) % 3 == 0 ? 10.0f : 0.1f;
  a.host = fathom::testing::round_to_bf16(a.host);
  DeviceBuffer<__nv_bfloat16> x(fathom::testing::float_to_bf16_vector(a.host));
  a.values = DeviceBuffer<uint8_t>(static_cast<size_t>(tokens * cols));
  a.scales = DeviceBuffer<float>(static_cast<size_t>(tokens * ceil_div(cols, 128)));
  quantize_activations_fp8(x.data(), tokens, cols, a.values.data(), a.scales.data(), nullptr, nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  return a;
}

// The small-M path as deterministic inference runs it (mma.sync kernels, the weight's K splits with their
// reduction) on 64-token chunks: the arithmetic the tiled kernel must reproduce bit for bit.
template <typename Output>
void run_small_m_path(const DeviceFp8Activations& x, const DeviceFp8Weight& w, Output* out) {
  Fp8Gemm gemm(device_sm_count());
  gemm.set_decode_kernel(DecodeKernel::kMmaSync);
  DeviceBuffer<float> partials(std::max<size_t>(1, gemm.small_m_workspace_bytes(w.rows, w.cols) / sizeof(float)));
  partials.fill_bytes(0xff);  // poisoned: only the used splits are written
  DeviceBuffer<uint32_t> counters(std::max<size_t>(1, gemm.small_m_counter_bytes(w.rows, w.cols) / sizeof(uint32_t)));
  counters.fill_bytes(0);
  Fp8GemmWorkspace workspace{partials.data(), partials.bytes(), counters.data(), counters.bytes()};
  const int64_t k_blocks = ceil_div(w.cols, 128);
  for (int64_t t0 = 0; t0 < x.tokens; t0 += 64) {
    const DeviceFp8Activations chunk{x.values + t0 * w.cols, x.scales + t0 * k_blocks, std::min<int64_t>(64, x.tokens - t0),
                                     w.cols};
    gemm.run(chunk, nullptr, w, out + t0 * w.rows, workspace, nullptr, Fp8GemmPath::kSmallM);
  }
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
}

template <typename T>
bool all_finite(const std::vector<T>& values) {
  for (const T& v : values) {
    if (!std::isfinite(static_cast<float>(v))) return false;
  }
  return true;
}

// Index of the first element whose bits differ, or -1.
template <typename T>
int64_t first_bit_difference(const std::vector<T>& a, const std::vector<T>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return static_cast<int64_t>(i);
  }
  return -1;
}

struct GemmShape { int64_t tokens, rows, cols; };

std::ostream& operator<<(std::ostream& os, const GemmShape& s) {
  return os << "tokens " << s.tokens << " rows " << s.rows << " cols " << s.cols;
}

class TiledGemm : public ::testing::TestWithParam<GemmShape> {};

// (a) close to the CPU w8a8 reference (on up to 64 token rows: the first and last 32), (b) bit-identical to the
// small-M kernel, fp32 and bf16 outputs, every element written.
TEST_P(TiledGemm, MatchesCpuAndSmallMBits) {
  FATHOM_REQUIRE_GPU();
  const GemmShape s = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(s.tokens * 7919 + s.rows * 31 + s.cols));
  TestWeight w = make_weight(rng, s.rows, s.cols);
  TestActivations a = make_activations(rng, s.tokens, s.cols);
  Fp8Gemm gemm(device_sm_count());
  const size_t count = static_cast<size_t>(s.tokens * s.rows);

  DeviceBuffer<float> tiled(count), reference(count);
  tiled.fill_bytes(0xff);
  reference.fill_bytes(0xff);
  gemm.run(a.view(), nullptr, w.view(), tiled.data(), Fp8GemmWorkspace{}, nullptr, Fp8GemmPath::kTiled);
  run_small_m_path(a.view(), w.view(), reference.data());
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> gpu = tiled.download(), expected_bits = reference.download();
  ASSERT_TRUE(all_finite(gpu)) << s << ": unwritten (poisoned) or non-finite fp32 output";
  ASSERT_TRUE(all_finite(expected_bits)) << s << ": small-M reference left outputs unwritten";
  const int64_t diff = first_bit_difference(gpu, expected_bits);
  EXPECT_EQ(diff, -1) << s << ": fp32 bits differ from small-M at token " << diff / s.rows << " row "
                      << diff % s.rows << " (" << gpu[diff < 0 ? 0 : diff] << " vs "
                      << expected_bits[diff < 0 ? 0 : diff] << ")";

  // CPU reference on the first and last (up to) 32 tokens.
  ThreadPool pool;
  std::vector<std::pair<int64_t, int64_t>> ranges = {{0, std::min<int64_t>(32, s.tokens)}};
  if (s.tokens > 32) ranges.push_back({std::max<int64_t>(32, s.tokens - 32), s.tokens});
  for (auto [begin, end] : ranges) {
    std::vector<float> expected(static_cast<size_t>((end - begin) * s.rows));
    cpu::linear(a.host.data() + begin * s.cols, end - begin, w.cpu, NumericMode::kW8A8, expected.data(), pool);
    const std::vector<float> actual(gpu.begin() + begin * s.rows, gpu.begin() + end * s.rows);
    EXPECT_LT(relative_l2_error(actual, expected), 1e-3) << s << ", tokens [" << begin << ", " << end << ")";
  }

  // bf16 output: the same conversion of the same accumulators.
  DeviceBuffer<__nv_bfloat16> tiled_bf16(count), reference_bf16(count);
  tiled_bf16.fill_bytes(0xff);
  reference_bf16.fill_bytes(0xff);
  gemm.run(a.view(), nullptr, w.view(), tiled_bf16.data(), Fp8GemmWorkspace{}, nullptr, Fp8GemmPath::kTiled);
  run_small_m_path(a.view(), w.view(), reference_bf16.data());
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<__nv_bfloat16> gpu_bf16 = tiled_bf16.download(), expected_bf16 = reference_bf16.download();
  ASSERT_TRUE(all_finite(gpu_bf16)) << s << ": unwritten (poisoned) or non-finite bf16 output";
  const int64_t diff_bf16 = first_bit_difference(gpu_bf16, expected_bf16);
  EXPECT_EQ(diff_bf16, -1) << s << ": bf16 bits differ from small-M at token " << diff_bf16 / s.rows << " row "
                           << diff_bf16 % s.rows;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TiledGemm,
    ::testing::Values(
        // M sweep on an odd weight: rows not a multiple of 128, K = 7*128 + 16.
        GemmShape{1, 200, 912}, GemmShape{7, 200, 912}, GemmShape{64, 200, 912}, GemmShape{65, 200, 912},
        GemmShape{127, 200, 912}, GemmShape{128, 200, 912}, GemmShape{129, 200, 912}, GemmShape{300, 200, 912},
        GemmShape{1024, 200, 912}, GemmShape{4097, 200, 912},
        // Tiny and ragged: one row, K = 16, rows crossing a scale block by one.
        GemmShape{3, 1, 16}, GemmShape{130, 129, 48}, GemmShape{257, 17, 1040},
        // DeepSeek-V3 linear shapes (rows = out features, cols = in features).
        GemmShape{129, 1536, 7168}, GemmShape{300, 24576, 1536}, GemmShape{1024, 576, 7168},
        GemmShape{65, 32768, 512}, GemmShape{4097, 576, 7168}, GemmShape{200, 7168, 16384},
        GemmShape{1024, 4096, 7168}, GemmShape{513, 7168, 2048}));

// (c) Row invariance: a token's row has the same bits whatever GEMM it is in and wherever it sits there (other
// 8-token tile lanes, warps and 128-token tiles), including decode-sized GEMMs.
TEST(TiledGemmInvariance, TokenRowBitsIndependentOfBatch) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(2024);
  const int64_t tokens = 300, rows = 1536 + 72, cols = 7168 - 112;  // ragged rows and K on purpose
  TestWeight w = make_weight(rng, rows, cols);
  TestActivations a = make_activations(rng, tokens, cols);
  Fp8Gemm gemm(device_sm_count());
  DeviceBuffer<float> full(static_cast<size_t>(tokens * rows));
  full.fill_bytes(0xff);
  gemm.run(a.view(), nullptr, w.view(), full.data(), Fp8GemmWorkspace{}, nullptr, Fp8GemmPath::kTiled);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> expected = full.download();
  ASSERT_TRUE(all_finite(expected));
  // (first token, count): shifts by 1, by odd amounts, across 64/128 boundaries; single tokens; the whole tail.
  const std::pair<int64_t, int64_t> slices[] = {{0, 1},    {1, 1},   {299, 1}, {5, 7},    {37, 64},
                                                {63, 66},  {100, 129}, {171, 129}, {1, 299}, {128, 172}};
  for (auto [first, count] : slices) {
    DeviceBuffer<float> part(static_cast<size_t>(count * rows));
    part.fill_bytes(0xff);
    gemm.run(a.slice(first, count), nullptr, w.view(), part.data(), Fp8GemmWorkspace{}, nullptr, Fp8GemmPath::kTiled);
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> got = part.download();
    const std::vector<float> want(expected.begin() + first * rows, expected.begin() + (first + count) * rows);
    const int64_t diff = first_bit_difference(got, want);
    EXPECT_EQ(diff, -1) << "tokens [" << first << ", " << first + count << "): bits differ at token "
                        << first + diff / rows << " row " << diff % rows;
  }
}

// (d) Grouped: tiled == small-M bit for bit on random expert assignments, every segment row written.
struct GroupedCase {
  int64_t rows, cols;
  std::vector<int32_t> counts;  // shuffled over the experts
};

class TiledGroupedGemm : public ::testing::TestWithParam<GroupedCase> {};

TEST_P(TiledGroupedGemm, BitIdenticalToSmallM) {
  FATHOM_REQUIRE_GPU();
  GroupedCase c = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(c.rows * 131 + c.cols + c.counts.size()));
  std::shuffle(c.counts.begin(), c.counts.end(), rng);
  const int32_t experts = static_cast<int32_t>(c.counts.size());
  const StackedExperts weights = make_stacked_experts(rng, experts, c.rows, c.cols);
  std::vector<int32_t> offsets(static_cast<size_t>(experts) + 1, 0);
  for (int32_t e = 0; e < experts; ++e) offsets[e + 1] = offsets[e] + c.counts[e];
  const int64_t total = offsets.back();
  TestActivations a = make_activations(rng, total, c.cols);
  DeviceBuffer<int32_t> offsets_device(offsets), counts_device(c.counts);

  Fp8GroupedGemmArgs args;
  args.x_values = a.values.data();
  args.x_scales = a.scales.data();
  args.expert_offsets = offsets_device.data();
  args.expert_counts = counts_device.data();
  args.w_values = weights.values.data();
  args.w_scales = weights.scales.data();
  args.num_experts = experts;
  args.rows = c.rows;
  args.cols = c.cols;
  args.max_rows_per_expert = *std::max_element(c.counts.begin(), c.counts.end());
  DeviceBuffer<__nv_bfloat16> small_m(static_cast<size_t>(total * c.rows)), tiled(static_cast<size_t>(total * c.rows));
  small_m.fill_bytes(0xff);
  tiled.fill_bytes(0xff);
  args.kernel = Fp8GroupedKernel::kSmallM;
  fp8_grouped_gemm(args, small_m.data(), nullptr);
  args.kernel = Fp8GroupedKernel::kTiled;
  fp8_grouped_gemm(args, tiled.data(), nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<__nv_bfloat16> got = tiled.download(), want = small_m.download();
  ASSERT_TRUE(all_finite(got)) << "tiled grouped GEMM left rows unwritten";
  ASSERT_TRUE(all_finite(want)) << "small-M grouped GEMM left rows unwritten";
  const int64_t diff = first_bit_difference(got, want);
  EXPECT_EQ(diff, -1) << "bits differ at permuted row " << diff / c.rows << " column " << diff % c.rows;

  // One expert's segment against the CPU as well (the largest, its first 32 rows).
  const int32_t big = static_cast<int32_t>(std::max_element(c.counts.begin(), c.counts.end()) - c.counts.begin());
  const int64_t n = std::min<int64_t>(32, c.counts[big]);
  std::vector<float> expected(static_cast<size_t>(n * c.rows));
  ThreadPool pool;
  cpu::linear(a.host.data() + offsets[big] * c.cols, n, weights.cpu[big], NumericMode::kW8A8, expected.data(), pool);
  const std::vector<float> all = fathom::testing::bf16_to_float_vector(got);
  const std::vector<float> actual(all.begin() + offsets[big] * c.rows, all.begin() + (offsets[big] + n) * c.rows);
  EXPECT_LT(relative_l2_error(actual, expected), 8e-3) << "expert " << big;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TiledGroupedGemm,
    ::testing::Values(GroupedCase{256, 912, {0, 1, 63, 64, 65, 300}},
                      GroupedCase{200, 160, {0, 1, 63, 64, 65, 300, 0, 129, 2}},
                      GroupedCase{4096, 7168, {0, 65, 300}},   // V3 expert gate_up (fewer experts: host time)
                      GroupedCase{7168, 2048, {1, 63, 64, 0}}));  // V3 expert down

}  // namespace
}  // namespace fathom::kernels::cuda
