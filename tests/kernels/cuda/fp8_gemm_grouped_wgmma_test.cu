// The grouped FP8 GEMM's warpgroup-MMA prefill kernel (Fp8GroupedKernel::kWgmma) against the CPU w8a8 linear
// expert by expert and against the tiled kernel; rows outside every segment untouched; deterministic; a token's
// row independent of the other tokens of its tile and of the tile size; graph capture; argument checks; the dense
// form (fp8_dense_wgmma_gemm).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "cuda_test_util.h"
#include "fp8_test_util.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/fp8_gemm/act_quant.h"
#include "kernels/cuda/fp8_gemm/fp8_grouped_gemm.h"
#include "kernels/cuda/fp8_gemm/fp8_types.h"
#include "test_util.h"

namespace fathom::kernels::cuda {
namespace {

struct WgmmaShape {
  int32_t num_experts;
  int64_t rows, cols;
  std::vector<int32_t> counts;  // rows per expert (0 = unselected); empty = random counts (seeded)
  int32_t gap_rows;             // unrouted rows after each segment (must stay untouched)
  int32_t max_random_count;     // with random counts: each in [0, max_random_count]
};

// One routed problem on both sides: stacked expert weights, permuted activations (bf16 rounded and fp8
// quantized on the device), segment offsets with gaps, and the output poisoned with 0xff.
struct Problem {
  StackedExperts experts;
  std::vector<int32_t> counts, offsets;
  int64_t x_rows = 0;
  std::vector<float> x;  // [x_rows, cols] bf16-rounded
  DeviceBuffer<uint8_t> x_values;
  DeviceBuffer<float> x_scales;
  DeviceBuffer<int32_t> offsets_device, counts_device;

  Problem(const WgmmaShape& s, std::mt19937& rng) {
    counts = s.counts;
    if (counts.empty()) {
      std::uniform_int_distribution<int32_t> pick(0, s.max_random_count);
      for (int32_t e = 0; e < s.num_experts; ++e) counts.push_back(pick(rng) % 3 == 0 ? 0 : pick(rng));
    }
    offsets.assign(static_cast<size_t>(s.num_experts) + 1, 0);
    for (int32_t e = 0; e < s.num_experts; ++e) offsets[e + 1] = offsets[e] + counts[e] + s.gap_rows;
    x_rows = std::max<int64_t>(offsets.back(), 1);
    experts = make_stacked_experts(rng, s.num_experts, s.rows, s.cols);
    x = fathom::testing::round_to_bf16(fathom::testing::random_normal(rng, static_cast<size_t>(x_rows * s.cols), 2.0f));
    DeviceBuffer<__nv_bfloat16> x_device(fathom::testing::float_to_bf16_vector(x));
    x_values = DeviceBuffer<uint8_t>(static_cast<size_t>(x_rows * s.cols));
    x_scales = DeviceBuffer<float>(static_cast<size_t>(x_rows * ceil_div(s.cols, 128)));
    quantize_activations_fp8(x_device.data(), x_rows, s.cols, x_values.data(), x_scales.data(), nullptr, nullptr);
    offsets_device = DeviceBuffer<int32_t>(offsets);
    counts_device = DeviceBuffer<int32_t>(counts);
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  }

  Fp8GroupedGemmArgs args(const WgmmaShape& s, Fp8GroupedKernel kernel, int32_t tokens_per_tile) const {
    Fp8GroupedGemmArgs a;
    a.x_values = x_values.data();
    a.x_scales = x_scales.data();
    a.expert_offsets = offsets_device.data();
    a.expert_counts = counts_device.data();
    a.w_values = experts.values.data();
    a.w_scales = experts.scales.data();
    a.num_experts = s.num_experts;
    a.rows = s.rows;
    a.cols = s.cols;
    a.max_rows_per_expert = std::max(1, *std::max_element(counts.begin(), counts.end()));
    a.kernel = kernel;
    a.x_rows = x_rows;
    a.wgmma_tokens_per_tile = tokens_per_tile;
    return a;
  }

  // Runs the GEMM into a fresh 0xff-poisoned output.
  DeviceBuffer<__nv_bfloat16> run(const Fp8GroupedGemmArgs& a, int64_t rows) const {
    DeviceBuffer<__nv_bfloat16> out(static_cast<size_t>(x_rows * rows));
    out.fill_bytes(0xff);
    fp8_grouped_gemm(a, out.data(), nullptr);
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
    return out;
  }
};

class GroupedWgmma : public ::testing::TestWithParam<WgmmaShape> {};

TEST_P(GroupedWgmma, MatchesCpuAndTiledKernel) {
  FATHOM_REQUIRE_GPU();
  const WgmmaShape s = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(s.rows * 131 + s.cols * 7 + s.num_experts));
  const Problem p(s, rng);
  const std::vector<float> tiled = fathom::testing::bf16_to_float_vector(
      p.run(p.args(s, Fp8GroupedKernel::kTiled, 0), s.rows).download());
  ThreadPool pool;
  std::vector<std::vector<float>> expected(static_cast<size_t>(s.num_experts));
  for (int32_t e = 0; e < s.num_experts; ++e) {
    if (p.counts[e] == 0) continue;
    expected[e].resize(static_cast<size_t>(p.counts[e] * s.rows));
    cpu::linear(p.x.data() + p.offsets[e] * s.cols, p.counts[e], p.experts.cpu[e], NumericMode::kW8A8, expected[e].data(),
                pool);
  }
  std::vector<__nv_bfloat16> first_tile_size;  // the 64-token tiles' output
  for (int32_t tokens_per_tile : {64, 128, 192}) {
    SCOPED_TRACE("tokens per tile " + std::to_string(tokens_per_tile));
    const Fp8GroupedGemmArgs args = p.args(s, Fp8GroupedKernel::kWgmma, tokens_per_tile);
    const DeviceBuffer<__nv_bfloat16> out = p.run(args, s.rows);
    const std::vector<__nv_bfloat16> raw = out.download();
    // Batch invariance (deterministic inference runs this kernel at every batch size, whose tile size follows the
    // batch): every tile size gives the same bits, segments and gaps alike.
    if (first_tile_size.empty()) {
      first_tile_size = raw;
    } else {
      ASSERT_EQ(std::memcmp(raw.data(), first_tile_size.data(), raw.size() * sizeof(__nv_bfloat16)), 0)
          << "the output differs from the 64-token tiles' output";
    }
    const std::vector<float> gpu = fathom::testing::bf16_to_float_vector(raw);
    for (int32_t e = 0; e < s.num_experts; ++e) {
      const int64_t begin = p.offsets[e] * s.rows, end = (p.offsets[e] + p.counts[e]) * s.rows;
      if (p.counts[e] > 0) {
        const std::vector<float> actual(gpu.begin() + begin, gpu.begin() + end);
        EXPECT_LT(fathom::testing::relative_l2_error(actual, expected[e]), 8e-3) << "expert " << e << " rows " << p.counts[e];
        const std::vector<float> tiled_rows(tiled.begin() + begin, tiled.begin() + end);
        EXPECT_LT(fathom::testing::relative_l2_error(actual, tiled_rows), 4e-3) << "expert " << e << " vs the tiled kernel";
      }
      // The gap after the segment (and anything past the last one) keeps its poison.
      const int64_t gap_end = p.offsets[e + 1] * s.rows;
      for (int64_t i = end; i < gap_end; ++i) {
        uint16_t bits;
        std::memcpy(&bits, &raw[i], sizeof(bits));
        ASSERT_EQ(bits, 0xffff) << "row " << i / s.rows << " outside expert " << e << "'s segment was written";
      }
    }
    // Deterministic: a second run gives the same bits.
    fathom::testing::expect_same_device_bits(p.run(args, s.rows), out, "second wgmma run");

    // Row independence: the first rows of the largest expert alone == inside its full segment. The kernel covers
    // only a group's existing tokens with MMAs, so these prefixes run narrower wgmmas than the full segment: in
    // the first warpgroup (1, 33 rows) and, with token-split tiles, in the second (65, 97 rows).
    const int32_t largest =
        static_cast<int32_t>(std::max_element(p.counts.begin(), p.counts.end()) - p.counts.begin());
    for (int32_t prefix : {1, 33, 65, 97}) {
      if (p.counts[largest] <= prefix) continue;
      std::vector<int32_t> few(static_cast<size_t>(s.num_experts), 0);
      few[largest] = prefix;
      DeviceBuffer<int32_t> few_device(few);
      Fp8GroupedGemmArgs alone = args;
      alone.expert_counts = few_device.data();
      const std::vector<float> single = fathom::testing::bf16_to_float_vector(p.run(alone, s.rows).download());
      const int64_t first = p.offsets[largest] * s.rows;
      for (int64_t i = 0; i < prefix * s.rows; ++i) {
        ASSERT_EQ(std::memcmp(&single[first + i], &gpu[first + i], sizeof(float)), 0)
            << "prefix " << prefix << ": token " << i / s.rows << " weight row " << i % s.rows;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GroupedWgmma,
    ::testing::Values(WgmmaShape{4, 128, 128, {1, 0, 3, 2}, 0, 0},
                      WgmmaShape{3, 256, 96, {70, 0, 9}, 5, 0},                    // K below one block, gaps
                      WgmmaShape{8, 384, 1040, {130, 5, 0, 64, 65, 1, 128, 129}, 3, 0},  // partial last K block
                      WgmmaShape{8, 256, 384, {95, 96, 97, 191, 192, 193, 0, 385}, 2, 0},  // 192-token tile edges
                      WgmmaShape{3, 200, 256, {70, 0, 9}, 2, 0},   // a partial last row block (the next expert's rows)
                      WgmmaShape{2, 72, 384, {5, 130}, 0, 0},      // fewer rows than one block
                      WgmmaShape{4, 4096, 7168, {200, 0, 1, 64}, 0, 0},             // V3 expert gate_up
                      WgmmaShape{4, 7168, 2048, {129, 3, 0, 256}, 2, 0},            // V3 expert down
                      WgmmaShape{5, 256, 256, {0, 0, 0, 0, 0}, 4, 0},               // no rows at all
                      WgmmaShape{256, 256, 512, {}, 0, 40},                         // V3's expert count, random
                      WgmmaShape{1024, 128, 128, {}, 1, 5}));                       // the largest expert table

TEST(GroupedWgmmaGraph, CapturedLaunchReplaysTheSameBits) {
  FATHOM_REQUIRE_GPU();
  const WgmmaShape s{6, 256, 384, {17, 0, 90, 1, 200, 33}, 1, 0};
  std::mt19937 rng(5);
  const Problem p(s, rng);
  const Fp8GroupedGemmArgs args = p.args(s, Fp8GroupedKernel::kWgmma, 0);
  const DeviceBuffer<__nv_bfloat16> eager = p.run(args, s.rows);
  DeviceBuffer<__nv_bfloat16> replayed(static_cast<size_t>(p.x_rows * s.rows));
  replayed.fill_bytes(0xff);
  cudaStream_t stream;
  FATHOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  FATHOM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  fp8_grouped_gemm(args, replayed.data(), stream);
  FATHOM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  FATHOM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  FATHOM_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  FATHOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  fathom::testing::expect_same_device_bits(replayed, eager, "graph replay");
  FATHOM_CUDA_CHECK(cudaGraphExecDestroy(exec));
  FATHOM_CUDA_CHECK(cudaGraphDestroy(graph));
  FATHOM_CUDA_CHECK(cudaStreamDestroy(stream));
}

// The token tile from the average rows per expert (256 experts, top-8 below; the bench's choices).
TEST(GroupedWgmmaArgs, TokenTileHeuristic) {
  for (int64_t tokens : {1, 128, 512, 1024, 2047}) EXPECT_EQ(wgmma_tokens_per_tile(tokens * 8, 256), 64) << tokens;
  for (int64_t tokens : {2048, 3072, 4095}) EXPECT_EQ(wgmma_tokens_per_tile(tokens * 8, 256), 128) << tokens;
  for (int64_t tokens : {4096, 8192, 65536}) EXPECT_EQ(wgmma_tokens_per_tile(tokens * 8, 256), 192) << tokens;
  EXPECT_EQ(wgmma_tokens_per_tile(0, 256), 64);
  EXPECT_EQ(wgmma_tokens_per_tile(100, 0), 128);  // no experts: counted as one
}

TEST(GroupedWgmmaArgs, RejectsShapesTheKernelCannotTake) {
  FATHOM_REQUIRE_GPU();
  const WgmmaShape s{2, 256, 128, {3, 4}, 0, 0};
  std::mt19937 rng(3);
  const Problem p(s, rng);
  DeviceBuffer<__nv_bfloat16> out(static_cast<size_t>(p.x_rows * s.rows));
  Fp8GroupedGemmArgs odd_rows = p.args(s, Fp8GroupedKernel::kWgmma, 0);
  odd_rows.rows = 100;  // not a multiple of 8 (16-byte output segments)
  EXPECT_THROW(fp8_grouped_gemm(odd_rows, out.data(), nullptr), Error);
  Fp8GroupedGemmArgs no_bound = p.args(s, Fp8GroupedKernel::kWgmma, 0);
  no_bound.x_rows = 0;
  EXPECT_THROW(fp8_grouped_gemm(no_bound, out.data(), nullptr), Error);
  Fp8GroupedGemmArgs bad_tile = p.args(s, Fp8GroupedKernel::kWgmma, 32);
  EXPECT_THROW(fp8_grouped_gemm(bad_tile, out.data(), nullptr), Error);
  Fp8GroupedGemmArgs many = p.args(s, Fp8GroupedKernel::kWgmma, 0);
  many.num_experts = 1025;
  EXPECT_THROW(fp8_grouped_gemm(many, out.data(), nullptr), Error);
}

// fp8_dense_wgmma_gemm (the kernel with all tokens as one expert): against the CPU w8a8 linear and the grouped call
// with explicit offsets, and every prefix of the tokens gives its rows the same bits as the whole batch (the
// batch-invariant prefill's contract: token counts below and past 64, 128 and 192, whose tiles and MMA widths differ).
TEST(DenseWgmma, MatchesCpuAndRowsDoNotDependOnTheTokenCount) {
  FATHOM_REQUIRE_GPU();
  struct DenseShape {
    int64_t rows, cols, tokens;
  };
  // V3's weights as the deterministic prefill runs them: the shared expert's down, q_b, the fused q_a + kv_a, o_proj
  // (128 K blocks), kv_b, the dense MLP's gate_up and down.
  for (const DenseShape& d : {DenseShape{256, 384, 1}, DenseShape{384, 1040, 200}, DenseShape{7168, 2048, 300},
                              DenseShape{24576, 1536, 65}, DenseShape{2112, 7168, 150}, DenseShape{576, 512, 70},
                              DenseShape{7168, 16384, 129}, DenseShape{32768, 512, 200}, DenseShape{36864, 7168, 70},
                              DenseShape{7168, 18432, 66}}) {
    SCOPED_TRACE("rows " + std::to_string(d.rows) + ", cols " + std::to_string(d.cols) + ", tokens " +
                 std::to_string(d.tokens));
    const WgmmaShape s{1, d.rows, d.cols, {static_cast<int32_t>(d.tokens)}, 0, 0};
    std::mt19937 rng(static_cast<uint32_t>(d.rows + d.cols + d.tokens));
    const Problem p(s, rng);
    const DeviceFp8Weight w{p.experts.values.data(), p.experts.scales.data(), d.rows, d.cols};
    auto run_dense = [&](int64_t tokens) {
      DeviceBuffer<__nv_bfloat16> out(static_cast<size_t>(tokens * d.rows));
      out.fill_bytes(0xff);
      fp8_dense_wgmma_gemm(DeviceFp8Activations{p.x_values.data(), p.x_scales.data(), tokens, d.cols}, w, out.data(),
                           nullptr);
      FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
      return out.download();
    };
    const std::vector<__nv_bfloat16> whole = run_dense(d.tokens);
    std::vector<float> expected(static_cast<size_t>(d.tokens * d.rows));
    ThreadPool pool;
    cpu::linear(p.x.data(), d.tokens, p.experts.cpu[0], NumericMode::kW8A8, expected.data(), pool);
    EXPECT_LT(fathom::testing::relative_l2_error(fathom::testing::bf16_to_float_vector(whole), expected), 8e-3);
    const std::vector<__nv_bfloat16> grouped = p.run(p.args(s, Fp8GroupedKernel::kWgmma, 0), d.rows).download();
    ASSERT_EQ(std::memcmp(grouped.data(), whole.data(), whole.size() * sizeof(__nv_bfloat16)), 0)
        << "the dense call differs from the grouped call with one expert";
    for (int64_t prefix : {int64_t{1}, int64_t{33}, int64_t{64}, int64_t{65}, int64_t{129}, int64_t{193}}) {
      if (prefix >= d.tokens) continue;
      const std::vector<__nv_bfloat16> few = run_dense(prefix);
      ASSERT_EQ(std::memcmp(few.data(), whole.data(), few.size() * sizeof(__nv_bfloat16)), 0)
          << "the first " << prefix << " tokens alone differ from the same rows of " << d.tokens;
    }
  }
  const WgmmaShape s{1, 256, 128, {4}, 0, 0};
  std::mt19937 rng(9);
  const Problem p(s, rng);
  DeviceBuffer<__nv_bfloat16> out(4 * 256);
  const DeviceFp8Activations x{p.x_values.data(), p.x_scales.data(), 4, 128};
  EXPECT_THROW(fp8_dense_wgmma_gemm(x, DeviceFp8Weight{p.experts.values.data(), p.experts.scales.data(), 100, 128},
                                    out.data(), nullptr),
               Error);  // rows not a multiple of 8
  EXPECT_THROW(fp8_dense_wgmma_gemm(x, DeviceFp8Weight{p.experts.values.data(), p.experts.scales.data(), 256, 112},
                                    out.data(), nullptr),
               Error);  // K of the weight and the activations differ
}

}  // namespace
}  // namespace fathom::kernels::cuda
