// moe_router_logits_fp32 vs a double-precision CPU reference; bitwise batch invariance (each token's logits do not
// depend on the batch size or on the other rows); every logit written and nothing past the end; the bf16-weight
// overload's bits equal the fp32 one's on the same (bf16-exact) values; argument checks.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/moe/moe_router_gemm.h"

namespace fathom::kernels::cuda {
namespace {

using testing::random_normal;

constexpr int64_t kMaxTokens = 64;

struct RouterShape {
  int64_t experts, hidden;
};

// DeepSeek-V3's gate, smaller and odd shapes: a partial last column block (hidden 100 = 25 float4, fewer than the 128
// slices) and expert counts that are not multiples of a CTA's 16 experts (7, 160 with 2 experts per lane).
const RouterShape kShapes[] = {{256, 7168}, {64, 2048}, {16, 512}, {7, 100}, {160, 5120}};
const int64_t kTokenCounts[] = {1, 2, 7, 8, 9, 33, 64};

struct RouterData {
  std::vector<float> x;       // [kMaxTokens, hidden]
  std::vector<float> weight;  // [experts, hidden]
  DeviceBuffer<float> d_x, d_weight;
};

RouterData make_data(const RouterShape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  RouterData data;
  data.x = random_normal(rng, static_cast<size_t>(kMaxTokens * shape.hidden), 1.0f);
  data.weight = random_normal(rng, static_cast<size_t>(shape.experts * shape.hidden),
                              1.0f / std::sqrt(static_cast<float>(shape.hidden)));
  data.d_x = DeviceBuffer<float>(data.x);
  data.d_weight = DeviceBuffer<float>(data.weight);
  return data;
}

// Runs the kernel into a 0xff-poisoned buffer with a poisoned tail; checks the tail and returns [tokens, experts].
template <typename Weight>
std::vector<float> router_logits(const float* d_x, int64_t tokens, const RouterShape& shape, const Weight* d_weight) {
  return testing::run_with_poisoned_tail(
      static_cast<size_t>(tokens * shape.experts),
      [&](float* out) { moe_router_logits_fp32(d_x, tokens, shape.hidden, d_weight, shape.experts, out, nullptr); },
      "logits[" + std::to_string(tokens) + ", " + std::to_string(shape.experts) + "]");
}

// Counts elements whose bits differ.
int64_t bit_mismatches(const float* a, const float* b, size_t count) {
  int64_t mismatches = 0;
  for (size_t i = 0; i < count; ++i) mismatches += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return mismatches;
}

std::string shape_name(const RouterShape& shape) {
  return "experts " + std::to_string(shape.experts) + " hidden " + std::to_string(shape.hidden);
}

TEST(CudaMoeRouterGemm, MatchesDoubleReference) {
  FATHOM_REQUIRE_GPU();
  uint32_t seed = 1;
  for (const RouterShape& shape : kShapes) {
    SCOPED_TRACE(shape_name(shape));
    const RouterData data = make_data(shape, seed++);
    // Reference logits and L1 magnitudes sum_k |x w| for all kMaxTokens rows; each run uses a prefix of the rows.
    std::vector<double> expected(static_cast<size_t>(kMaxTokens * shape.experts));
    std::vector<double> magnitude(expected.size());
    for (int64_t t = 0; t < kMaxTokens; ++t) {
      const float* x_row = &data.x[static_cast<size_t>(t * shape.hidden)];
      for (int64_t e = 0; e < shape.experts; ++e) {
        const float* w_row = &data.weight[static_cast<size_t>(e * shape.hidden)];
        double sum = 0, abs_sum = 0;
        for (int64_t k = 0; k < shape.hidden; ++k) {
          const double product = double(x_row[k]) * w_row[k];
          sum += product;
          abs_sum += std::fabs(product);
        }
        expected[static_cast<size_t>(t * shape.experts + e)] = sum;
        magnitude[static_cast<size_t>(t * shape.experts + e)] = abs_sum;
      }
    }
    for (int64_t tokens : kTokenCounts) {
      SCOPED_TRACE(::testing::Message() << "tokens " << tokens);
      const std::vector<float> logits = router_logits(data.d_x.data(), tokens, shape, data.d_weight.data());
      int64_t unwritten = 0, too_far = 0;
      double worst = 0;  // max |error| / L1 magnitude
      for (size_t i = 0; i < logits.size(); ++i) {
        if (!std::isfinite(logits[i])) {
          ++unwritten;
          continue;
        }
        const double relative = std::fabs(double(logits[i]) - expected[i]) / std::max(magnitude[i], 1e-30);
        worst = std::max(worst, relative);
        if (relative > 1e-5) {
          if (too_far < 5) {
            ADD_FAILURE() << "logit [" << i / shape.experts << ", " << i % shape.experts << "] = " << logits[i]
                          << ", expected " << expected[i] << " (L1 magnitude " << magnitude[i] << ")";
          }
          ++too_far;
        }
      }
      EXPECT_EQ(unwritten, 0) << "logits left poisoned (NaN)";
      EXPECT_EQ(too_far, 0) << "worst error / L1 magnitude " << worst;
    }
  }
}

// Every batch size (all kernel variants) and every row order give each token the bits it gets alone.
TEST(CudaMoeRouterGemm, BatchInvariantBitForBit) {
  FATHOM_REQUIRE_GPU();
  uint32_t seed = 100;
  for (const RouterShape& shape : kShapes) {
    SCOPED_TRACE(shape_name(shape));
    const RouterData data = make_data(shape, seed++);
    const size_t row = static_cast<size_t>(shape.experts);
    const std::vector<float> full = router_logits(data.d_x.data(), kMaxTokens, shape, data.d_weight.data());

    for (int64_t t = 0; t < kMaxTokens; ++t) {
      const std::vector<float> alone =
          router_logits(data.d_x.data() + t * shape.hidden, 1, shape, data.d_weight.data());
      EXPECT_EQ(bit_mismatches(alone.data(), &full[t * row], row), 0) << "token " << t << " alone vs in 64";
    }
    for (int64_t tokens = 2; tokens < kMaxTokens; ++tokens) {
      const std::vector<float> prefix = router_logits(data.d_x.data(), tokens, shape, data.d_weight.data());
      EXPECT_EQ(bit_mismatches(prefix.data(), full.data(), prefix.size()), 0) << "first " << tokens << " of 64";
    }

    std::vector<int64_t> order(kMaxTokens);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(seed++));
    std::vector<float> permuted_x(data.x.size());
    for (int64_t t = 0; t < kMaxTokens; ++t) {
      std::copy_n(&data.x[static_cast<size_t>(order[t] * shape.hidden)], shape.hidden,
                  &permuted_x[static_cast<size_t>(t * shape.hidden)]);
    }
    const DeviceBuffer<float> d_permuted_x(permuted_x);
    for (int64_t tokens : {int64_t{9}, kMaxTokens}) {
      const std::vector<float> permuted = router_logits(d_permuted_x.data(), tokens, shape, data.d_weight.data());
      for (int64_t t = 0; t < tokens; ++t) {
        EXPECT_EQ(bit_mismatches(&permuted[t * row], &full[order[t] * row], row), 0)
            << "row " << order[t] << " at position " << t << " of " << tokens << " permuted rows";
      }
    }
  }
}

// A bf16 weight gives every logit the bits of the fp32 weight holding the same values (same products, same order),
// for every kernel variant (token count) and shape.
TEST(CudaMoeRouterGemm, Bf16WeightGivesTheFp32WeightsBits) {
  FATHOM_REQUIRE_GPU();
  uint32_t seed = 300;
  for (const RouterShape& shape : kShapes) {
    SCOPED_TRACE(shape_name(shape));
    RouterData data = make_data(shape, seed++);
    data.weight = testing::round_to_bf16(data.weight);
    data.d_weight.upload(data.weight);
    const DeviceBuffer<__nv_bfloat16> d_weight_bf16(testing::float_to_bf16_vector(data.weight));
    for (int64_t tokens : kTokenCounts) {
      const std::vector<float> fp32_weight = router_logits(data.d_x.data(), tokens, shape, data.d_weight.data());
      const std::vector<float> bf16_weight = router_logits(data.d_x.data(), tokens, shape, d_weight_bf16.data());
      int64_t unwritten = 0;
      for (float logit : bf16_weight) unwritten += !std::isfinite(logit);
      EXPECT_EQ(unwritten, 0) << tokens << " tokens: logits left poisoned";
      EXPECT_EQ(bit_mismatches(bf16_weight.data(), fp32_weight.data(), fp32_weight.size()), 0) << tokens << " tokens";
    }
  }
}

TEST(CudaMoeRouterGemm, CapturesIntoGraph) {
  FATHOM_REQUIRE_GPU();
  const RouterShape shape{256, 7168};
  const RouterData data = make_data(shape, 7);
  const int64_t tokens = 8;
  const std::vector<float> direct = router_logits(data.d_x.data(), tokens, shape, data.d_weight.data());

  cudaStream_t stream;
  FATHOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceBuffer<float> out(direct.size());
  out.fill_bytes(0xff);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  FATHOM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  moe_router_logits_fp32(data.d_x.data(), tokens, shape.hidden, data.d_weight.data(), shape.experts, out.data(),
                         stream);
  FATHOM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  FATHOM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  FATHOM_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  FATHOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<float> replayed = out.download();
  FATHOM_CUDA_CHECK(cudaGraphExecDestroy(exec));
  FATHOM_CUDA_CHECK(cudaGraphDestroy(graph));
  FATHOM_CUDA_CHECK(cudaStreamDestroy(stream));
  EXPECT_EQ(bit_mismatches(replayed.data(), direct.data(), direct.size()), 0);
}

TEST(CudaMoeRouterGemm, RejectsBadArguments) {
  FATHOM_REQUIRE_GPU();
  constexpr int64_t kHidden = 8, kExperts = 16;
  // One spare float4 each, so the misaligned views below stay inside their buffers.
  DeviceBuffer<float> x(static_cast<size_t>(kMaxTokens * kHidden + 4));             // [64, 8] + 4
  DeviceBuffer<float> weight(static_cast<size_t>(kExperts * kHidden + 4));          // [16, 8] + 4
  DeviceBuffer<float> out(static_cast<size_t>((kMaxTokens + 1) * kExperts));        // [65, 16]
  x.fill_bytes(0);  // the accepted calls read real numbers
  weight.fill_bytes(0);
  EXPECT_NO_THROW(moe_router_logits_fp32(x.data(), 1, kHidden, weight.data(), kExperts, out.data(), nullptr));
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());

  EXPECT_THROW(moe_router_logits_fp32(x.data(), 0, kHidden, weight.data(), kExperts, out.data(), nullptr), Error);
  EXPECT_THROW(moe_router_logits_fp32(x.data(), 65, kHidden, weight.data(), kExperts, out.data(), nullptr), Error);
  EXPECT_THROW(moe_router_logits_fp32(x.data(), 1, 6, weight.data(), kExperts, out.data(), nullptr), Error);
  EXPECT_THROW(moe_router_logits_fp32(x.data(), 1, 0, weight.data(), kExperts, out.data(), nullptr), Error);
  EXPECT_THROW(moe_router_logits_fp32(x.data(), 1, kHidden, weight.data(), 0, out.data(), nullptr), Error);
  EXPECT_THROW(moe_router_logits_fp32(nullptr, 1, kHidden, weight.data(), kExperts, out.data(), nullptr), Error);
  EXPECT_THROW(moe_router_logits_fp32(x.data(), 1, kHidden, static_cast<const float*>(nullptr), kExperts, out.data(), nullptr),
               Error);
  // The bf16 weight: 8-byte columns (4 bf16), so a 2-element offset is misaligned and a 4-element one is not.
  DeviceBuffer<__nv_bfloat16> weight_bf16(static_cast<size_t>(kExperts * kHidden + 8));
  weight_bf16.fill_bytes(0);
  EXPECT_NO_THROW(moe_router_logits_fp32(x.data(), 1, kHidden, weight_bf16.data() + 4, kExperts, out.data(), nullptr));
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_THROW(moe_router_logits_fp32(x.data(), 1, kHidden, weight_bf16.data() + 2, kExperts, out.data(), nullptr), Error);
  EXPECT_THROW(moe_router_logits_fp32(x.data(), 1, kHidden, static_cast<const __nv_bfloat16*>(nullptr), kExperts,
                                      out.data(), nullptr),
               Error);
  EXPECT_THROW(moe_router_logits_fp32(x.data(), 1, kHidden, weight.data(), kExperts, nullptr, nullptr), Error);
  EXPECT_THROW(moe_router_logits_fp32(x.data() + 1, 1, kHidden, weight.data(), kExperts, out.data(), nullptr), Error);
  EXPECT_THROW(moe_router_logits_fp32(x.data(), 1, kHidden, weight.data() + 2, kExperts, out.data(), nullptr), Error);
  try {
    moe_router_logits_fp32(x.data(), 65, kHidden, weight.data(), kExperts, out.data(), nullptr);
    ADD_FAILURE() << "65 tokens accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokens 65"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fathom::kernels::cuda
