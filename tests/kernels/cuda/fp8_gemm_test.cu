// FP8 block-scaled GEMM and activation quantization on the GPU against the CPU ops (kernels/cpu).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "core/dtype.h"
#include "cuda_test_util.h"
#include "fp8_test_util.h"
#include "kernels/cpu/activation_quant.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/fp8_gemm/act_quant.h"
#include "kernels/cuda/fp8_gemm/cublaslt_fp8_gemm.h"
#include "kernels/cuda/fp8_gemm/fp8_gemm.h"
#include "kernels/cuda/fp8_gemm/fp8_gemm_heuristics.h"
#include "test_util.h"

namespace fathom::kernels::cuda {
namespace {

using fathom::testing::relative_l2_error;

TEST(ActQuant, BitIdenticalToCpu) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(11);
  // Rows of whole 16-byte vectors take the vector kernel (a partial last group: 96, 136; a warp's last units
  // missing: 17 x 96, 7 x 136, 16385 x 136), with four units per warp from kActQuantFourUnitsMinUnits (600 x 7168,
  // 16385 x 136); 20 and 132 channels (not multiples of 8) the general one.
  static_assert(600 * 56 >= kActQuantFourUnitsMinUnits && 3 * 56 < kActQuantFourUnitsMinUnits);
  for (auto [tokens, cols] : {std::pair<int64_t, int64_t>{1, 128}, {3, 7168}, {17, 96}, {64, 1536}, {5, 20}, {2, 16384},
                              {7, 136}, {3, 132}, {600, 7168}, {16385, 136}}) {
    TestActivations a = make_activations(rng, tokens, cols);
    const int64_t groups = ceil_div(cols, 128);
    std::vector<float> cpu_values(a.host.size()), cpu_scales(static_cast<size_t>(tokens * groups));
    cpu::quantize_activations_fp8(a.host.data(), tokens, cols, cpu_values.data(), cpu_scales.data());
    std::vector<uint8_t> gpu_codes = a.values.download();
    std::vector<float> gpu_scales = a.scales.download(), gpu_block_major = a.scales_block_major.download();
    for (int64_t i = 0; i < tokens * cols; ++i) {
      ASSERT_EQ(fp8_e4m3_to_float(gpu_codes[i]), cpu_values[i]) << "tokens " << tokens << " cols " << cols << " i " << i;
    }
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t g = 0; g < groups; ++g) {
        ASSERT_EQ(gpu_scales[t * groups + g], cpu_scales[t * groups + g]);
        ASSERT_EQ(gpu_block_major[g * tokens + t], cpu_scales[t * groups + g]);
      }
  }
}

// Block-major scales of a row prefix only ([groups, prefix]), as cuBLASLt reads them for a multiple-of-16 prefix, on
// each kernel: two units per warp (83 x 384), four (700 x 7168 and 4100 x 7168: the prefill's hidden rows past a
// multiple of 128) and the general one (20 x 132: channels not a multiple of 8); the token-major scales against the
// CPU quantization.
TEST(ActQuant, BlockMajorScalesOfARowPrefix) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(12);
  struct PrefixCase {
    int64_t tokens, cols, prefix;
  };
  static_assert(700 * 56 >= kActQuantFourUnitsMinUnits && 83 * 3 < kActQuantFourUnitsMinUnits);
  for (const PrefixCase& c : {PrefixCase{83, 384, 80}, PrefixCase{700, 7168, 640}, PrefixCase{4100, 7168, 4096},
                              PrefixCase{20, 132, 16}}) {
    SCOPED_TRACE(::testing::Message() << c.tokens << " x " << c.cols << ", prefix " << c.prefix);
    const int64_t groups = ceil_div(c.cols, 128);
    std::vector<float> x =
        fathom::testing::round_to_bf16(fathom::testing::random_normal(rng, static_cast<size_t>(c.tokens * c.cols)));
    DeviceBuffer<__nv_bfloat16> x_device(fathom::testing::float_to_bf16_vector(x));
    DeviceBuffer<uint8_t> values(static_cast<size_t>(c.tokens * c.cols));
    DeviceBuffer<float> scales(static_cast<size_t>(c.tokens * groups));
    DeviceBuffer<float> block_major(static_cast<size_t>(c.tokens * groups));
    scales.fill_bytes(0xff);
    block_major.fill_bytes(0xff);
    quantize_activations_fp8(x_device.data(), c.tokens, c.cols, values.data(), scales.data(), block_major.data(),
                             c.prefix, nullptr);
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> token_major = scales.download(), prefix_major = block_major.download();
    std::vector<float> cpu_values(x.size()), cpu_scales(static_cast<size_t>(c.tokens * groups));
    cpu::quantize_activations_fp8(x.data(), c.tokens, c.cols, cpu_values.data(), cpu_scales.data());
    ASSERT_EQ(std::memcmp(token_major.data(), cpu_scales.data(), cpu_scales.size() * sizeof(float)), 0);
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t t = 0; t < c.prefix; ++t) ASSERT_EQ(prefix_major[g * c.prefix + t], token_major[t * groups + g]);
    for (size_t i = static_cast<size_t>(c.prefix * groups); i < prefix_major.size(); ++i) {
      ASSERT_TRUE(std::isnan(prefix_major[i])) << "written past the prefix's scales at " << i;
    }
  }
}

struct GemmShape { int64_t tokens, rows, cols; };

class SmallMGemm : public ::testing::TestWithParam<GemmShape> {};

TEST_P(SmallMGemm, MatchesCpuW8A8) {
  FATHOM_REQUIRE_GPU();
  const GemmShape s = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(s.tokens * 1000 + s.rows + s.cols));
  TestWeight w = make_weight(rng, s.rows, s.cols);
  TestActivations a = make_activations(rng, s.tokens, s.cols);
  Fp8Gemm gemm(device_sm_count());
  DeviceBuffer<float> workspace(gemm.small_m_workspace_bytes(s.rows, s.cols) / sizeof(float) + 1);
  workspace.fill_bytes(0xff);  // poisoned: only the used splits are written
  Fp8GemmWorkspace ws{workspace.data(), workspace.bytes()};
  DeviceBuffer<float> out(static_cast<size_t>(s.tokens * s.rows));
  out.fill_bytes(0xff);
  gemm.run(a.view(), nullptr, w.view(), out.data(), ws, nullptr, Fp8GemmPath::kSmallM);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> gpu = out.download();
  const double error = relative_l2_error(gpu, cpu_w8a8(a, w));
  EXPECT_LT(error, 1e-3) << "splits " << gemm.small_m_splits(s.rows, s.cols);

  // bf16 output, and the same numbers again (deterministic).
  DeviceBuffer<__nv_bfloat16> out_bf16(static_cast<size_t>(s.tokens * s.rows));
  out_bf16.fill_bytes(0xff);
  gemm.run(a.view(), nullptr, w.view(), out_bf16.data(), ws, nullptr, Fp8GemmPath::kSmallM);
  DeviceBuffer<float> again(static_cast<size_t>(s.tokens * s.rows));
  again.fill_bytes(0xff);
  gemm.run(a.view(), nullptr, w.view(), again.data(), ws, nullptr, Fp8GemmPath::kSmallM);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_LT(relative_l2_error(fathom::testing::bf16_to_float_vector(out_bf16.download()), gpu), 1e-2);
  EXPECT_EQ(std::memcmp(again.download().data(), gpu.data(), gpu.size() * sizeof(float)), 0);

  // Batch invariance: token 0 alone gives bit-identical results to token 0 inside the batch.
  DeviceFp8Activations first = a.view();
  first.tokens = 1;
  DeviceBuffer<float> alone(static_cast<size_t>(s.rows));
  alone.fill_bytes(0xff);
  gemm.run(first, nullptr, w.view(), alone.data(), ws, nullptr, Fp8GemmPath::kSmallM);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(std::memcmp(alone.download().data(), gpu.data(), static_cast<size_t>(s.rows) * sizeof(float)), 0);
}

// An empty batch (a data-parallel rank with no tokens this step) launches nothing on every path and writes nothing.
TEST(Fp8GemmEmptyBatch, EveryPathIsANoOp) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(5);
  TestWeight w = make_weight(rng, 576, 7168);
  TestActivations a = make_activations(rng, 1, 7168);
  DeviceFp8Activations empty = a.view();
  empty.tokens = 0;
  Fp8Gemm gemm(device_sm_count());
  DeviceBuffer<float> workspace(gemm.small_m_workspace_bytes(576, 7168) / sizeof(float) + 1);
  const Fp8GemmWorkspace ws{workspace.data(), workspace.bytes()};
  DeviceBuffer<__nv_bfloat16> out(576);
  out.fill_bytes(0x7b);
  DeviceBuffer<float> scales_block_major(56);
  for (Fp8GemmPath path : {Fp8GemmPath::kAuto, Fp8GemmPath::kSmallM, Fp8GemmPath::kTiled, Fp8GemmPath::kCublasLt}) {
    gemm.run(empty, scales_block_major.data(), w.view(), out.data(), ws, nullptr, path);
  }
  const SplitKPartials deferred = gemm.run_small_m_deferred(empty, w.view(), out.data(), ws, nullptr);
  EXPECT_TRUE(deferred.empty());
  quantize_activations_fp8(static_cast<const __nv_bfloat16*>(nullptr), 0, 7168, nullptr, nullptr, nullptr, nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  for (__nv_bfloat16 v : out.download()) {
    uint16_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    ASSERT_EQ(bits, 0x7b7b);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SmallMGemm,
                         ::testing::Values(GemmShape{1, 16, 16}, GemmShape{1, 576, 7168}, GemmShape{2, 1536, 7168},
                                           GemmShape{3, 17, 48}, GemmShape{8, 100, 96}, GemmShape{9, 130, 272},
                                           GemmShape{16, 7168, 2048}, GemmShape{33, 256, 512}, GemmShape{64, 4096, 7168},
                                           GemmShape{64, 129, 1040}, GemmShape{5, 32768, 512}));

// Device-side random operands for the variant test (V3 weights are too large to generate on the CPU quickly).
__global__ void fill_hash_fp8(uint8_t* values, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const uint8_t code = static_cast<uint8_t>(h);
    values[i] = (code & 0x7f) == 0x7f ? 0x38 : code;  // every finite e4m3 code, both signs; no NaN
  }
}

__global__ void fill_hash_scales(float* values, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint32_t h = (static_cast<uint32_t>(i) + seed) * 2654435761u;
    values[i] = ldexpf(1.0f + static_cast<float>(h >> 8) * 0x1p-24f, static_cast<int>(h % 7) - 12);
  }
}

// A [rows, cols] weight of hashed e4m3 codes and scales, made on the device.
struct HashedWeight {
  DeviceBuffer<uint8_t> values;
  DeviceBuffer<float> scales;
  DeviceFp8Weight view;
  HashedWeight(int64_t rows, int64_t cols, uint32_t seed)
      : values(static_cast<size_t>(rows * cols)), scales(static_cast<size_t>(ceil_div(rows, 128) * ceil_div(cols, 128))) {
    fill_hash_fp8<<<1024, 256>>>(values.data(), values.size(), seed);
    fill_hash_scales<<<64, 256>>>(scales.data(), scales.size(), seed + 1);
    FATHOM_CUDA_CHECK_LAUNCH();
    view = {values.data(), scales.data(), rows, cols};
  }
};

// One Output type's outputs of a weight under any small-M variant, in a poisoned (0xff) buffer.
template <typename Output>
std::vector<Output> run_small_m(Fp8Gemm& gemm, SmallMVariant variant, const TestActivations& a, int64_t tokens,
                                const DeviceFp8Weight& w, const Fp8GemmWorkspace& ws, DeviceBuffer<Output>& out,
                                Fp8GemmPath path = Fp8GemmPath::kSmallM) {
  gemm.set_small_m_variant(variant);
  DeviceFp8Activations x = a.view();
  x.tokens = tokens;
  out.fill_bytes(0xff);
  gemm.run(x, nullptr, w, out.data(), ws, nullptr, path);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<Output> all = out.download();
  all.resize(static_cast<size_t>(tokens * w.rows));
  return all;
}

template <typename Output>
bool same_bits(const std::vector<Output>& got, const std::vector<Output>& reference) {
  return got.size() <= reference.size() && std::memcmp(got.data(), reference.data(), got.size() * sizeof(Output)) == 0;
}

// Every small-M variant gives the reference kernel's bits for every M in 1..16, at every V3 decode shape and an odd
// one, bf16 and fp32, twice in a row (the fused reduction's counters must reset), and each token's row equals its
// row in a 64-token batch (batch invariance). 17, 33 and 64 tokens through the default dispatch too.
template <typename Output>
void check_variants(Fp8Gemm& gemm, const TestActivations& a, const DeviceFp8Weight& w, const Fp8GemmWorkspace& ws,
                    const Fp8GemmWorkspace& ws_no_counters, const char* type) {
  const std::string where = std::to_string(w.rows) + "x" + std::to_string(w.cols) + " " + type;
  DeviceBuffer<Output> out(static_cast<size_t>(64 * w.rows));
  const std::vector<Output> reference = run_small_m<Output>(gemm, SmallMVariant::kReference, a, 64, w, ws, out);
  for (int v = 0; v < static_cast<int>(SmallMVariant::kCount); ++v) {
    const SmallMVariant variant = static_cast<SmallMVariant>(v);
    for (int64_t tokens = 1; tokens <= 16; ++tokens) {
      for (int rep = 0; rep < 2; ++rep) {
        ASSERT_TRUE(same_bits(run_small_m<Output>(gemm, variant, a, tokens, w, ws, out), reference))
            << where << " variant " << small_m_variant_info(variant).name << " tokens " << tokens << " run " << rep;
      }
    }
  }
  // Fused variants without counters fall back to the two-kernel reduction: same bits.
  for (int64_t tokens : {1, 5, 8, 16}) {
    ASSERT_TRUE(same_bits(run_small_m<Output>(gemm, kSmallMDefaultVariant, a, tokens, w, ws_no_counters, out), reference))
        << where << " default variant without counters, tokens " << tokens;
  }
  for (int64_t tokens : {17, 33, 64}) {
    ASSERT_TRUE(same_bits(run_small_m<Output>(gemm, kSmallMDefaultVariant, a, tokens, w, ws, out, Fp8GemmPath::kAuto),
                          reference))
        << where << " default dispatch, tokens " << tokens;
  }
}

TEST(SmallMVariants, BitIdenticalToReference) {
  FATHOM_REQUIRE_GPU();
  const std::pair<int64_t, int64_t> shapes[] = {{1536, 7168}, {24576, 1536}, {576, 7168},  {32768, 512}, {7168, 16384},
                                                {36864, 7168}, {7168, 18432}, {4096, 7168}, {7168, 2048}, {200, 912}};
  Fp8Gemm gemm(device_sm_count());
  gemm.set_decode_kernel(DecodeKernel::kMmaSync);  // the mma.sync family (fp8_gemm_decode_wgmma_test.cu: wgmma)
  std::mt19937 rng(21);
  uint32_t seed = 1;
  for (auto [rows, cols] : shapes) {
    const HashedWeight weight(rows, cols, seed);
    seed += 2;
    const DeviceFp8Weight& w = weight.view;
    TestActivations a = make_activations(rng, 64, cols);
    DeviceBuffer<float> partials(gemm.small_m_workspace_bytes(rows, cols) / sizeof(float) + 1);
    partials.fill_bytes(0xff);  // poisoned: only the used splits are written
    DeviceBuffer<uint32_t> counters(gemm.small_m_counter_bytes(rows, cols) / sizeof(uint32_t) + 1);
    counters.fill_bytes(0);  // zero at rest
    const Fp8GemmWorkspace ws{partials.data(), partials.bytes(), counters.data(), counters.bytes()};
    const Fp8GemmWorkspace ws_no_counters{partials.data(), partials.bytes()};
    check_variants<float>(gemm, a, w, ws, ws_no_counters, "fp32");
    check_variants<__nv_bfloat16>(gemm, a, w, ws, ws_no_counters, "bf16");
    for (uint32_t c : counters.download()) ASSERT_EQ(c, 0u) << rows << "x" << cols << ": a split-K counter left nonzero";
  }
}

// The default variant's deferred call (run_small_m_deferred) runs small_m_deferred_variant: kW8D2 at 1..8 tokens on
// weights whose 128-row CTAs fit one wave, leaving partials that sum (split order, from 0.0f, rounded to bf16) to the
// bits of w4d2p2 plus its reduce launch; elsewhere kCta, which on the weights it takes writes the output itself.
// On 132 SMs the fused q_a + kv_a, the shared expert's gate_up and down and kv_a alone take kW8D2 (their grids: 238,
// 256, 224 and 140 CTAs); every V3 decode weight's plain call keeps kCta's path.
TEST(SmallMVariants, DefaultDeferredCallMatchesPlainCall) {
  FATHOM_REQUIRE_GPU();
  Fp8Gemm gemm(device_sm_count());
  gemm.set_decode_kernel(DecodeKernel::kMmaSync);  // 9..16 tokens on the gemv too
  std::mt19937 rng(33);
  uint32_t seed = 77;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{2112, 7168}, {4096, 7168}, {7168, 2048}, {576, 7168},
                            {24576, 1536}, {7168, 16384}}) {
    const HashedWeight weight(rows, cols, seed);
    seed += 2;
    const DeviceFp8Weight& w = weight.view;
    TestActivations a = make_activations(rng, 16, cols);
    DeviceBuffer<float> partials(gemm.small_m_workspace_bytes(rows, cols) / sizeof(float) + 1);
    partials.fill_bytes(0xff);  // poisoned: only the used splits are written
    const Fp8GemmWorkspace ws{partials.data(), partials.bytes()};
    const int splits = gemm.small_m_splits(rows, cols);
    const bool cta = gemv_cta_applies(rows, cols, splits, device_sm_count());
    const int used_splits = static_cast<int>(used_split_count((cols + 127) / 128, splits));
    // On 132 SMs, the paths written out: kv_a alone has too few row tiles for cta, o_proj 26 K blocks per split.
    if (device_sm_count() == 132) {
      const bool one_wave = rows == 2112 || rows == 4096 || (rows == 7168 && cols == 2048) || rows == 576;
      EXPECT_EQ(small_m_deferred_variant(rows, cols, 1, 132) == SmallMVariant::kW8D2, one_wave) << rows << "x" << cols;
      EXPECT_EQ(cta, rows != 576 && cols != 16384) << rows << "x" << cols;
    }
    for (int64_t tokens : {1, 3, 8, 9, 16}) {
      const std::string where = std::to_string(rows) + "x" + std::to_string(cols) + " tokens " + std::to_string(tokens);
      DeviceBuffer<__nv_bfloat16> out(static_cast<size_t>(16 * rows));
      const std::vector<__nv_bfloat16> reference = run_small_m<__nv_bfloat16>(gemm, SmallMVariant::kW4D2P2, a, tokens, w, ws, out);
      gemm.set_small_m_variant(kSmallMDefaultVariant);
      DeviceFp8Activations x = a.view();
      x.tokens = tokens;
      out.fill_bytes(0xff);
      partials.fill_bytes(0xff);
      const SplitKPartials deferred = gemm.run_small_m_deferred(x, w, out.data(), ws, nullptr);
      FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
      const SmallMVariant variant = small_m_deferred_variant(rows, cols, tokens, device_sm_count());
      if (tokens > 8) EXPECT_TRUE(variant == kSmallMDefaultVariant) << where;
      const bool writes_output = variant == kSmallMDefaultVariant && cta;
      ASSERT_EQ(deferred.empty(), writes_output) << where;
      std::vector<__nv_bfloat16> got = out.download();
      got.resize(static_cast<size_t>(tokens * rows));
      if (!writes_output) {
        const std::vector<__nv_bfloat16> poisoned(got.size(), __ushort_as_bfloat16(0xffff));
        EXPECT_TRUE(same_bits(got, poisoned)) << where << ": the deferred GEMM wrote its output";
        ASSERT_EQ(deferred.splits, used_splits) << where;
        const std::vector<float> split_partials = partials.download();
        for (int64_t i = 0; i < tokens * rows; ++i) {
          float sum = 0.0f;
          for (int s = 0; s < deferred.splits; ++s) {
            sum += split_partials[static_cast<size_t>(s * deferred.split_stride + i)];
          }
          got[static_cast<size_t>(i)] = __float2bfloat16_rn(sum);
        }
      }
      EXPECT_TRUE(same_bits(got, reference)) << where << (writes_output ? " (output)" : " (partials summed)");
    }
  }
}

class CublasLtGemm : public ::testing::TestWithParam<GemmShape> {};

TEST_P(CublasLtGemm, MatchesCpuW8A8) {
  FATHOM_REQUIRE_GPU();
  const GemmShape s = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(s.tokens * 7 + s.rows + s.cols));
  TestWeight w = make_weight(rng, s.rows, s.cols);
  TestActivations a = make_activations(rng, s.tokens, s.cols);
  Fp8Gemm gemm(device_sm_count());
  ASSERT_TRUE(gemm.cublaslt().supports(s.tokens, s.rows, s.cols, CUDA_R_32F)) << "cuBLASLt offers no algorithm";
  DeviceBuffer<float> out(static_cast<size_t>(s.tokens * s.rows));
  out.fill_bytes(0xff);
  // kAuto sends batches above the small-M limit to cuBLASLt, which reads block-major activation scales.
  gemm.run(a.view(), a.scales_block_major.data(), w.view(), out.data(), Fp8GemmWorkspace{}, nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_LT(relative_l2_error(out.download(), cpu_w8a8(a, w)), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CublasLtGemm,
                         ::testing::Values(GemmShape{128, 256, 512}, GemmShape{200, 576, 7168}, GemmShape{1024, 1536, 7168},
                                           GemmShape{256, 7168, 2048}));

// The model's prefill GEMM (CudaModelImpl::gemm): the largest multiple-of-128 row prefix through cuBLASLt with bf16
// output, reading the block-major scales quantize_activations_fp8 writes for that prefix only, and the rows past it
// through the small-M kernel 64 at a time; every row against the CPU w8a8 linear.
class CublasLtRowPrefix : public ::testing::TestWithParam<GemmShape> {};

TEST_P(CublasLtRowPrefix, Bf16PrefixThenSmallMMatchesCpuW8A8) {
  FATHOM_REQUIRE_GPU();
  const GemmShape s = GetParam();
  const int64_t prefix = s.tokens / 128 * 128, k_blocks = ceil_div(s.cols, 128);
  ASSERT_GT(prefix, 0);
  std::mt19937 rng(static_cast<uint32_t>(s.tokens * 5 + s.rows + s.cols));
  TestWeight w = make_weight(rng, s.rows, s.cols);
  const std::vector<float> x_host =
      fathom::testing::round_to_bf16(fathom::testing::random_normal(rng, static_cast<size_t>(s.tokens * s.cols), 2.0f));
  DeviceBuffer<__nv_bfloat16> x(fathom::testing::float_to_bf16_vector(x_host));
  DeviceBuffer<uint8_t> values(static_cast<size_t>(s.tokens * s.cols));
  DeviceBuffer<float> scales(static_cast<size_t>(s.tokens * k_blocks));
  DeviceBuffer<float> block_major(static_cast<size_t>(prefix * k_blocks));  // [k_blocks, prefix]
  values.fill_bytes(0xff);
  scales.fill_bytes(0xff);
  block_major.fill_bytes(0xff);
  quantize_activations_fp8(x.data(), s.tokens, s.cols, values.data(), scales.data(), block_major.data(), prefix,
                           nullptr);
  const DeviceFp8Activations all{values.data(), scales.data(), s.tokens, s.cols};

  Fp8Gemm gemm(device_sm_count());
  ASSERT_TRUE(gemm.cublaslt().supports(prefix, s.rows, s.cols, CUDA_R_16BF)) << "cuBLASLt offers no algorithm";
  DeviceBuffer<float> partials(gemm.small_m_workspace_bytes(s.rows, s.cols) / sizeof(float) + 1);
  DeviceBuffer<uint32_t> counters(gemm.small_m_counter_bytes(s.rows, s.cols) / sizeof(uint32_t) + 1);
  partials.fill_bytes(0xff);  // poisoned: only the used splits are written
  counters.fill_bytes(0);     // zero at rest
  const Fp8GemmWorkspace ws{partials.data(), partials.bytes(), counters.data(), counters.bytes()};
  DeviceBuffer<__nv_bfloat16> out(static_cast<size_t>(s.tokens * s.rows));
  out.fill_bytes(0xff);
  DeviceFp8Activations head = all;
  head.tokens = prefix;
  gemm.run(head, block_major.data(), w.view(), out.data(), Fp8GemmWorkspace{}, nullptr, Fp8GemmPath::kCublasLt);
  for (int64_t begin = prefix; begin < s.tokens; begin += Fp8Gemm::kSmallMMaxTokens) {
    const DeviceFp8Activations part{values.data() + begin * s.cols, scales.data() + begin * k_blocks,
                                    std::min(Fp8Gemm::kSmallMMaxTokens, s.tokens - begin), s.cols};
    gemm.run(part, nullptr, w.view(), out.data() + begin * s.rows, ws, nullptr, Fp8GemmPath::kSmallM);
  }
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());

  TestActivations reference_input;
  reference_input.host = x_host;
  reference_input.tokens = s.tokens;
  reference_input.cols = s.cols;
  const std::vector<float> expected = cpu_w8a8(reference_input, w);
  const std::vector<float> got = fathom::testing::bf16_to_float_vector(out.download());
  const std::vector<float> got_head(got.begin(), got.begin() + prefix * s.rows);
  const std::vector<float> expected_head(expected.begin(), expected.begin() + prefix * s.rows);
  EXPECT_LT(relative_l2_error(got_head, expected_head), 4e-3) << "cuBLASLt prefix of " << prefix << " rows";
  // bf16 rounding; a row left unwritten stays NaN and fails.
  EXPECT_LT(relative_l2_error(got, expected), 4e-3) << "all " << s.tokens << " rows";
}

// V3 prefill weights (q_b, kv_b, o_proj, the fused q_a + kv_a, the shared expert's down) at batches with and without
// rows past the prefix (1, 44, 72, 77 rows: one and several small-M launches).
INSTANTIATE_TEST_SUITE_P(Shapes, CublasLtRowPrefix,
                         ::testing::Values(GemmShape{200, 24576, 1536}, GemmShape{300, 32768, 512},
                                           GemmShape{129, 7168, 16384}, GemmShape{256, 2112, 7168},
                                           GemmShape{333, 7168, 2048}));

}  // namespace
}  // namespace fathom::kernels::cuda
