// The dense wgmma decode GEMM (sm90/fp8_gemm_decode_wgmma.cuh, DecodeKernel::kWgmma / kAuto from 9 tokens)
// against the CPU w8a8 linear, over token counts around its 32/64-token tiles, weights whose rows and columns are
// not multiples of 128, and split-K counts from 1 to many; plus its contracts: every output element written and
// nothing past the batch, a token's bits independent of the other tokens of its tile size, the deferred partials
// summing to the stored output, and kAuto's choice of kernel by token count.
#include <cuda_bf16.h>

#include <cstring>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "fp8_test_util.h"
#include "kernels/cuda/fp8_gemm/fp8_gemm.h"
#include "kernels/cuda/fp8_gemm/fp8_gemm_heuristics.h"
#include "test_util.h"

namespace fathom::kernels::cuda {
namespace {

using fathom::testing::relative_l2_error;

constexpr uint16_t kPoison = 0xffff;  // a bf16 NaN

// bf16 output of `tokens` rows of x through the small-M path (fresh poisoned buffer with one spare row), as bits.
std::vector<uint16_t> run_bf16(Fp8Gemm& gemm, const TestActivations& a, int64_t tokens, const DeviceFp8Weight& w,
                               const Fp8GemmWorkspace& ws) {
  DeviceFp8Activations x = a.view();
  x.tokens = tokens;
  DeviceBuffer<__nv_bfloat16> out(static_cast<size_t>((tokens + 1) * w.rows));
  out.fill_bytes(0xff);
  gemm.run(x, nullptr, w, out.data(), ws, nullptr, Fp8GemmPath::kSmallM);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<__nv_bfloat16> values = out.download();
  std::vector<uint16_t> bits(values.size());
  std::memcpy(bits.data(), values.data(), values.size() * sizeof(uint16_t));
  return bits;
}

std::vector<float> bits_to_float(const std::vector<uint16_t>& bits, size_t count) {
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) {
    const uint32_t word = static_cast<uint32_t>(bits[i]) << 16;
    std::memcpy(&out[i], &word, sizeof(float));
  }
  return out;
}

struct DecodeShape { int64_t rows, cols; };

class DecodeWgmmaGemm : public ::testing::TestWithParam<DecodeShape> {};

TEST_P(DecodeWgmmaGemm, MatchesCpuW8A8AtEverySplitCount) {
  FATHOM_REQUIRE_GPU();
  const DecodeShape s = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(s.rows * 31 + s.cols));
  TestWeight w = make_weight(rng, s.rows, s.cols);
  TestActivations a = make_activations(rng, 64, s.cols);
  const std::vector<float> reference = cpu_w8a8(a, w);  // [64, rows]
  Fp8Gemm gemm(device_sm_count());
  gemm.set_decode_kernel(DecodeKernel::kWgmma);
  const int64_t k_blocks = ceil_div(s.cols, 128);
  for (int splits : {0, 1, 2, 3, 7, 1000}) {  // 0: the heuristic; 1000: clamped to one K block per split
    gemm.set_wgmma_decode_splits_override(splits);
    const int used = gemm.wgmma_decode_splits(s.rows, s.cols);
    ASSERT_GE(used, 1);
    ASSERT_LE(used, k_blocks);
    DeviceBuffer<float> partials(gemm.small_m_workspace_bytes(s.rows, s.cols) / sizeof(float) + 1);
    partials.fill_bytes(0xff);  // poisoned: only the used splits are written
    const Fp8GemmWorkspace ws{partials.data(), partials.bytes()};
    std::vector<uint16_t> full_batch;  // 64 tokens: the bits the smaller batches of the same tile size must give
    std::vector<uint16_t> tile32_batch;
    for (int64_t tokens : {64, 63, 40, 33, 32, 31, 17, 16, 9, 8, 2, 1}) {
      const std::string where = std::to_string(s.rows) + "x" + std::to_string(s.cols) + " tokens " +
                                std::to_string(tokens) + " splits " + std::to_string(used);
      const std::vector<uint16_t> bits = run_bf16(gemm, a, tokens, w.view(), ws);
      const size_t count = static_cast<size_t>(tokens * s.rows);
      for (size_t i = count; i < bits.size(); ++i) ASSERT_EQ(bits[i], kPoison) << where << ": wrote past the batch at " << i;
      const std::vector<float> got = bits_to_float(bits, count);
      const std::vector<float> expected(reference.begin(), reference.begin() + static_cast<std::ptrdiff_t>(count));
      ASSERT_LT(relative_l2_error(got, expected), 4e-3) << where;  // bf16 output rounding (poison would be NaN)
      if (tokens == 64) full_batch = bits;
      if (tokens == 32) tile32_batch = bits;
      // Tokens are wgmma columns: a token's bits do not depend on the others sharing its tile size.
      const std::vector<uint16_t>& same_tile = tokens > 32 ? full_batch : tile32_batch;
      if (!same_tile.empty()) {
        ASSERT_EQ(std::memcmp(bits.data(), same_tile.data(), count * sizeof(uint16_t)), 0) << where << ": batch-dependent bits";
      }
      if (tokens == 40) {  // deterministic: the same call again gives the same bits
        ASSERT_EQ(run_bf16(gemm, a, tokens, w.view(), ws), bits) << where << ": second run differs";
      }
    }
  }
}

// V3 decode weights (the fused q_a + kv_a has 2112 rows: a half 128-row block; q_b, o_proj, the dense MLP's gate_up
// and down, the shared expert's), a weight narrower than one row block, and columns that are not a multiple of 128
// (a partial last K block).
INSTANTIATE_TEST_SUITE_P(Shapes, DecodeWgmmaGemm,
                         ::testing::Values(DecodeShape{256, 512}, DecodeShape{2112, 7168}, DecodeShape{576, 1536},
                                           DecodeShape{7168, 2048}, DecodeShape{200, 1040}, DecodeShape{72, 272},
                                           DecodeShape{4096, 7168}, DecodeShape{24576, 1536},
                                           DecodeShape{7168, 16384}, DecodeShape{36864, 7168},
                                           DecodeShape{7168, 18432}));

// run_small_m_deferred hands back the split partials instead of storing; summed in split order and rounded they are
// the bf16 output the reduce stores.
TEST(DecodeWgmma, DeferredPartialsSumToTheStoredOutput) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(5);
  const int64_t rows = 1536, cols = 7168, tokens = 24;
  TestWeight w = make_weight(rng, rows, cols);
  TestActivations a = make_activations(rng, tokens, cols);
  Fp8Gemm gemm(device_sm_count());
  gemm.set_wgmma_decode_splits_override(4);
  ASSERT_EQ(gemm.wgmma_decode_splits(rows, cols), 4);
  DeviceBuffer<float> partials(gemm.small_m_workspace_bytes(rows, cols) / sizeof(float) + 1);
  partials.fill_bytes(0xff);  // poisoned: only the used splits are written
  const Fp8GemmWorkspace ws{partials.data(), partials.bytes()};
  const std::vector<uint16_t> stored = run_bf16(gemm, a, tokens, w.view(), ws);  // kAuto at 24 tokens: wgmma

  DeviceBuffer<__nv_bfloat16> untouched(static_cast<size_t>(tokens * rows));
  untouched.fill_bytes(0xff);
  const SplitKPartials deferred = gemm.run_small_m_deferred(a.view(), w.view(), untouched.data(), ws, nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  ASSERT_FALSE(deferred.empty());
  ASSERT_EQ(deferred.splits, 4);
  ASSERT_EQ(deferred.split_stride, tokens * rows);
  const std::vector<float> all = partials.download();
  std::vector<float> sums(static_cast<size_t>(tokens * rows));
  for (int64_t i = 0; i < tokens * rows; ++i) {
    float sum = 0.0f;
    for (int s = 0; s < deferred.splits; ++s) sum += all[static_cast<size_t>(s * deferred.split_stride + i)];
    sums[static_cast<size_t>(i)] = sum;
    const __nv_bfloat16 rounded = __float2bfloat16_rn(sum);
    uint16_t bits;
    std::memcpy(&bits, &rounded, sizeof(bits));
    ASSERT_EQ(bits, stored[static_cast<size_t>(i)]) << "element " << i;
  }
  // Before the bf16 rounding the kernel is as close to the CPU as the mma.sync kernels' fp32 output (fp8_gemm_test).
  EXPECT_LT(relative_l2_error(sums, cpu_w8a8(a, w)), 1e-3);
  const std::vector<__nv_bfloat16> left = untouched.download();
  for (const __nv_bfloat16& v : left) {
    uint16_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    ASSERT_EQ(bits, kPoison) << "the deferred call stored its output";
  }
}

// kAuto: the mma.sync kernels up to 8 tokens, wgmma from 9; kMmaSync never wgmma; a weight whose rows are not a
// multiple of 8 stays on mma.sync even when wgmma is forced.
TEST(DecodeWgmma, KernelChoice) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(6);
  for (const int64_t rows : {int64_t{512}, int64_t{100}}) {
    const int64_t cols = 1024;
    TestWeight w = make_weight(rng, rows, cols);
    TestActivations a = make_activations(rng, 64, cols);
    Fp8Gemm gemm(device_sm_count());
    DeviceBuffer<float> partials(gemm.small_m_workspace_bytes(rows, cols) / sizeof(float) + 1);
    partials.fill_bytes(0xff);  // poisoned: only the used splits are written
    const Fp8GemmWorkspace ws{partials.data(), partials.bytes()};
    for (const int64_t tokens : {int64_t{8}, int64_t{9}, int64_t{17}, int64_t{64}}) {
      gemm.set_decode_kernel(DecodeKernel::kMmaSync);
      const std::vector<uint16_t> mma_sync = run_bf16(gemm, a, tokens, w.view(), ws);
      gemm.set_decode_kernel(DecodeKernel::kWgmma);
      const std::vector<uint16_t> wgmma = run_bf16(gemm, a, tokens, w.view(), ws);
      gemm.set_decode_kernel(DecodeKernel::kAuto);
      const std::vector<uint16_t> automatic = run_bf16(gemm, a, tokens, w.view(), ws);
      const bool wgmma_applies = rows % 8 == 0;
      const std::string where = "rows " + std::to_string(rows) + " tokens " + std::to_string(tokens);
      EXPECT_EQ(automatic, tokens >= kWgmmaDecodeMinTokens && wgmma_applies ? wgmma : mma_sync) << where;
      if (!wgmma_applies) EXPECT_EQ(wgmma, mma_sync) << where << ": wgmma forced on an unsupported shape";
    }
  }
}

struct ChainCase { int64_t rows, cols, tokens; int splits; };

class DecodeWgmmaGraphChain : public ::testing::TestWithParam<ChainCase> {};

// Decode runs these GEMMs back to back inside CUDA graphs with programmatic launches (each kernel's prologue overlaps
// its predecessor, and the split-K reduce follows each GEMM): a captured chain alternating two weights gives, replay
// after replay, the bits of the same GEMMs run one at a time.
TEST_P(DecodeWgmmaGraphChain, ReplaysMatchSingleRuns) {
  FATHOM_REQUIRE_GPU();
  const ChainCase c = GetParam();
  constexpr int kChain = 12, kReplays = 4;
  std::mt19937 rng(static_cast<uint32_t>(c.rows + c.cols + c.tokens));
  const TestWeight weights[2] = {make_weight(rng, c.rows, c.cols), make_weight(rng, c.rows, c.cols)};
  const TestActivations a = make_activations(rng, c.tokens, c.cols);
  Fp8Gemm gemm(device_sm_count());
  gemm.set_decode_kernel(DecodeKernel::kWgmma);
  gemm.set_wgmma_decode_splits_override(c.splits);
  DeviceBuffer<float> partials(gemm.small_m_workspace_bytes(c.rows, c.cols) / sizeof(float) + 1);
  partials.fill_bytes(0xff);  // poisoned: only the used splits are written
  const Fp8GemmWorkspace ws{partials.data(), partials.bytes()};
  const std::vector<uint16_t> single[2] = {run_bf16(gemm, a, c.tokens, weights[0].view(), ws),
                                           run_bf16(gemm, a, c.tokens, weights[1].view(), ws)};
  std::vector<DeviceBuffer<__nv_bfloat16>> outs;
  for (int i = 0; i < kChain; ++i) outs.emplace_back(static_cast<size_t>((c.tokens + 1) * c.rows));
  cudaStream_t stream;
  FATHOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t graph_exec;
  FATHOM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kChain; ++i) {
    gemm.run(a.view(), nullptr, weights[i % 2].view(), outs[i].data(), ws, stream, Fp8GemmPath::kSmallM);
  }
  FATHOM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  FATHOM_CUDA_CHECK(cudaGraphInstantiate(&graph_exec, graph, 0));
  const std::string where = std::to_string(c.rows) + "x" + std::to_string(c.cols) + " tokens " +
                            std::to_string(c.tokens) + " splits " + std::to_string(gemm.wgmma_decode_splits(c.rows, c.cols));
  for (int replay = 0; replay < kReplays; ++replay) {
    for (auto& out : outs) out.fill_bytes(0xff);
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());  // the fills (legacy stream) before the non-blocking stream's replay
    FATHOM_CUDA_CHECK(cudaGraphLaunch(graph_exec, stream));
    FATHOM_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (int i = 0; i < kChain; ++i) {
      const std::vector<__nv_bfloat16> got = outs[i].download();
      ASSERT_EQ(std::memcmp(got.data(), single[i % 2].data(), got.size() * sizeof(uint16_t)), 0)
          << where << ": replay " << replay << " GEMM " << i << " differs from its single run";
    }
  }
  FATHOM_CUDA_CHECK(cudaGraphExecDestroy(graph_exec));
  FATHOM_CUDA_CHECK(cudaGraphDestroy(graph));
  FATHOM_CUDA_CHECK(cudaStreamDestroy(stream));
}

// Splits 0: the heuristic. Tiles of an odd number of K blocks (the two consumer warpgroups' shares of the stages
// shift from tile to tile), several tiles per CTA, one K block per tile, unsplit long-K tiles.
INSTANTIATE_TEST_SUITE_P(Chains, DecodeWgmmaGraphChain,
                         ::testing::Values(ChainCase{1536, 7168, 16, 0}, ChainCase{1536, 7168, 16, 3},
                                           ChainCase{2112, 7168, 32, 0}, ChainCase{24576, 1536, 64, 5},
                                           ChainCase{7168, 2048, 40, 0}, ChainCase{576, 7168, 64, 1},
                                           ChainCase{32768, 512, 24, 4}, ChainCase{4096, 7168, 9, 8}));

// The split heuristic: shape-only, never an empty split, within the cap; several splits for the long-K weights of a
// V3 decode step that have few row blocks, one for a weight with enough row blocks to fill the SMs.
TEST(DecodeWgmma, SplitHeuristic) {
  for (const int sms : {78, 114, 132}) {
    for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
             {2112, 7168}, {24576, 1536}, {32768, 512}, {7168, 16384}, {36864, 7168}, {7168, 18432}, {4096, 7168},
             {7168, 2048}, {72, 272}}) {
      const int splits = wgmma_decode_split_count(rows, cols, sms);
      const int64_t k_blocks = ceil_div(cols, 128);
      const int64_t per_split = ceil_div(k_blocks, splits);
      EXPECT_GE(splits, 1);
      EXPECT_LE(splits, kWgmmaDecodeMaxSplits);
      EXPECT_EQ(ceil_div(k_blocks, per_split), splits) << rows << "x" << cols << " on " << sms << " SMs";
    }
    EXPECT_GT(wgmma_decode_split_count(2112, 7168, sms), 1) << sms;  // 17 row blocks, 56 K blocks
  }
  // H200 (132 SMs), as bench_fp8_gemm's split sweep measured: o_proj's 56 row blocks x 128 K blocks split in two;
  // expert down's 16 K blocks and dense gate_up's 288 row blocks are fastest unsplit.
  EXPECT_EQ(wgmma_decode_split_count(7168, 16384, 132), 2);
  EXPECT_EQ(wgmma_decode_split_count(7168, 2048, 132), 1);
  EXPECT_EQ(wgmma_decode_split_count(36864, 7168, 132), 1);
}

}  // namespace
}  // namespace fathom::kernels::cuda
