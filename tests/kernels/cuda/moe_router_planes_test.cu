// The MoE router's tensor-core form (moe_router_planes.h): moe_router_sum_planes bit for bit against the host sum, and
// the whole form (fp32 rows split into bf16 planes, one bf16 cuBLASLt GEMM with fp32 output, the plane sum) against a
// double-precision reference at the fp32 router kernel's bound, with a hi-plane-only control that the bound rejects.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/moe/moe_router_gemm.h"
#include "kernels/cuda/moe/moe_router_planes.h"
#include "kernels/cuda/norm/bf16_gemm.h"
#include "kernels/cuda/norm/bf16x3_split.cuh"

namespace fathom::kernels::cuda {
namespace {

using testing::random_normal;


int64_t bit_mismatches(const float* a, const float* b, size_t count) {
  int64_t mismatches = 0;
  for (size_t i = 0; i < count; ++i) mismatches += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return mismatches;
}

// Runs the sum into a poisoned buffer with a poisoned tail; checks the tail and returns [tokens, experts].
std::vector<float> summed_logits(const float* d_plane_logits, int64_t tokens, int64_t experts) {
  return testing::run_with_poisoned_tail(
      static_cast<size_t>(tokens * experts),
      [&](float* out) { moe_router_sum_planes(d_plane_logits, tokens, experts, out, nullptr); },
      "logits[" + std::to_string(tokens) + ", " + std::to_string(experts) + "]");
}

TEST(CudaMoeRouterPlanes, SumMatchesTheHostBitForBit) {
  FATHOM_REQUIRE_GPU();
  uint32_t seed = 1;
  // 256 (V3, float4 path), 7 (scalar path), 64; one token, a few, a prefill.
  for (int64_t experts : {256, 7, 64}) {
    for (int64_t tokens : {1, 5, 4096}) {
      SCOPED_TRACE(::testing::Message() << "experts " << experts << " tokens " << tokens);
      std::mt19937 rng(seed++);
      std::vector<float> planes = random_normal(rng, static_cast<size_t>(tokens * kBf16SplitPlanes * experts), 1.0f);
      for (size_t i = 0; i < planes.size(); ++i) planes[i] *= (i / experts) % 3 == 0 ? 1.0f : ((i / experts) % 3 == 1 ? 1e-3f : 1e-6f);
      std::vector<float> expected(static_cast<size_t>(tokens * experts));
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t e = 0; e < experts; ++e) {
          const float* p = &planes[static_cast<size_t>(t * kBf16SplitPlanes * experts + e)];
          expected[static_cast<size_t>(t * experts + e)] = (p[0] + p[experts]) + p[2 * experts];
        }
      }
      const DeviceBuffer<float> d_planes(planes);
      const std::vector<float> got = summed_logits(d_planes.data(), tokens, experts);
      EXPECT_EQ(bit_mismatches(got.data(), expected.data(), expected.size()), 0);
    }
  }
  EXPECT_THROW(moe_router_sum_planes(nullptr, 1, 8, nullptr, nullptr), Error);
  EXPECT_THROW(moe_router_sum_planes(nullptr, -1, 8, nullptr, nullptr), Error);
  EXPECT_THROW(moe_router_sum_planes(nullptr, 1, 0, nullptr, nullptr), Error);
  EXPECT_NO_THROW(moe_router_sum_planes(nullptr, 0, 8, nullptr, nullptr));
}

struct RouterShape {
  int64_t experts, hidden;
};

// Worst |logit - exact| / sum_k |x w| over all logits (the fp32 router kernel's test holds 1e-5).
double worst_relative_error(const std::vector<float>& logits, const std::vector<double>& expected,
                            const std::vector<double>& magnitude) {
  double worst = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isfinite(logits[i])) return INFINITY;
    worst = std::max(worst, std::fabs(double(logits[i]) - expected[i]) / std::max(magnitude[i], 1e-30));
  }
  return worst;
}

// The model's prefill form: planes [T, 3, H] -> [3T, E] through cuBLASLt -> summed. Products are exact (bf16 x bf16
// in fp32), so the error is the fp32 accumulation's, as for the fp32 kernel; the hi plane alone (the input rounded to
// bf16) is ~2^-9 per product and fails the same bound.
TEST(CudaMoeRouterPlanes, TensorCoreFormMatchesDoubleReference) {
  FATHOM_REQUIRE_GPU();
  uint32_t seed = 50;
  for (const RouterShape shape : {RouterShape{256, 7168}, RouterShape{64, 2048}, RouterShape{16, 512}}) {
    Bf16Gemm gemm(shape.experts, shape.hidden, Bf16GemmOutput::kFloat32);
    for (int64_t tokens : {1, 33, 150}) {
      SCOPED_TRACE(::testing::Message() << "experts " << shape.experts << " hidden " << shape.hidden << " tokens " << tokens);
      std::mt19937 rng(seed++);
      const std::vector<float> x = random_normal(rng, static_cast<size_t>(tokens * shape.hidden), 1.0f);
      const std::vector<float> weight = testing::round_to_bf16(random_normal(
          rng, static_cast<size_t>(shape.experts * shape.hidden), 1.0f / std::sqrt(static_cast<float>(shape.hidden))));
      std::vector<double> expected(static_cast<size_t>(tokens * shape.experts)), magnitude(expected.size());
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t e = 0; e < shape.experts; ++e) {
          double sum = 0, abs_sum = 0;
          for (int64_t k = 0; k < shape.hidden; ++k) {
            const double product = double(x[static_cast<size_t>(t * shape.hidden + k)]) * weight[static_cast<size_t>(e * shape.hidden + k)];
            sum += product;
            abs_sum += std::fabs(product);
          }
          expected[static_cast<size_t>(t * shape.experts + e)] = sum;
          magnitude[static_cast<size_t>(t * shape.experts + e)] = abs_sum;
        }
      }
      std::vector<__nv_bfloat16> planes(static_cast<size_t>(tokens * kBf16SplitPlanes * shape.hidden));
      std::vector<__nv_bfloat16> hi_only(planes.size(), __float2bfloat16_rn(0.0f));
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t k = 0; k < shape.hidden; ++k) {
          const Bf16x3 split = split_bf16x3(x[static_cast<size_t>(t * shape.hidden + k)]);
          const size_t row = static_cast<size_t>(t * kBf16SplitPlanes);
          planes[row * shape.hidden + k] = split.hi;
          planes[(row + 1) * shape.hidden + k] = split.mid;
          planes[(row + 2) * shape.hidden + k] = split.lo;
          hi_only[row * shape.hidden + k] = split.hi;
        }
      }
      const DeviceBuffer<__nv_bfloat16> d_weight(testing::float_to_bf16_vector(weight));
      DeviceBuffer<float> d_plane_logits(static_cast<size_t>(tokens * kBf16SplitPlanes * shape.experts));
      auto run_form = [&](const std::vector<__nv_bfloat16>& rows) {
        const DeviceBuffer<__nv_bfloat16> d_rows(rows);
        d_plane_logits.fill_bytes(0xff);
        gemm.run(d_rows.data(), kBf16SplitPlanes * tokens, d_weight.data(), d_plane_logits.data(), nullptr);
        return summed_logits(d_plane_logits.data(), tokens, shape.experts);
      };
      const std::vector<float> logits = run_form(planes);
      const double worst = worst_relative_error(logits, expected, magnitude);
      EXPECT_LE(worst, 1e-5) << "three planes";
      const double hi_worst = worst_relative_error(run_form(hi_only), expected, magnitude);
      EXPECT_GT(hi_worst, 1e-5) << "the hi plane alone should miss the bound";
      // Against the fp32 kernel (decode sizes) on the same values: both within rounding of the exact sums.
      if (tokens <= 64) {
        const DeviceBuffer<float> d_x(x);
        DeviceBuffer<float> d_kernel(static_cast<size_t>(tokens * shape.experts));
        moe_router_logits_fp32(d_x.data(), tokens, shape.hidden, d_weight.data(), shape.experts, d_kernel.data(), nullptr);
        FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_LE(worst_relative_error(d_kernel.download(), expected, magnitude), 1e-5) << "fp32 kernel";
      }
      std::printf("[router planes] E %lld H %lld T %lld: worst error / L1 %.2e (hi plane only %.2e)\n",
                  static_cast<long long>(shape.experts), static_cast<long long>(shape.hidden),
                  static_cast<long long>(tokens), worst, hi_worst);
    }
  }
}

}  // namespace
}  // namespace fathom::kernels::cuda
