// Final norm + lm_head on the GPU (rms_norm_bf16, then the cuBLASLt bf16 GEMM) vs a float64 CPU reference.
#include <random>
#include <tuple>
#include <vector>

#include "core/thread_pool.h"
#include "cuda_test_util.h"
#include "kernels/cuda/norm/bf16_gemm.h"
#include "kernels/cuda/norm/rms_norm.h"

namespace fathom::kernels::cuda {
namespace {

// out[m, n] = a[m, k] . w[n, k]^T in float64 over the bf16 values.
std::vector<float> reference_gemm(const std::vector<float>& a, const std::vector<float>& w, int64_t m, int64_t n,
                                  int64_t k) {
  std::vector<float> out(static_cast<size_t>(m * n));
  ThreadPool pool;
  pool.parallel_for(n, [&](int64_t first, int64_t last) {  // output columns split over the pool
    for (int64_t i = 0; i < m; ++i) {
      const float* a_row = a.data() + i * k;
      for (int64_t j = first; j < last; ++j) {
        const float* w_row = w.data() + j * k;
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += double(a_row[p]) * w_row[p];
        out[i * n + j] = static_cast<float>(acc);
      }
    }
  });
  return out;
}

// Cheap uniform values in [-scale, scale) (the V3 lm_head has 926M of them; a normal generator would dominate).
std::vector<float> fast_uniform(size_t count, uint64_t seed, float scale) {
  std::vector<float> values(count);
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& v : values) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    v = (static_cast<float>(state >> 40) / 16777216.0f * 2.0f - 1.0f) * scale;
  }
  return values;
}

void check_lm_head(int64_t m, int64_t n, int64_t k, Bf16GemmOutput output, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "m " << m << " n " << n << " k " << k << " fp32 out "
                                    << (output == Bf16GemmOutput::kFloat32));
  std::mt19937 rng(seed);
  const std::vector<float> hidden = testing::round_to_bf16(testing::random_normal(rng, m * k, 2.0f));
  std::vector<float> norm_weight = testing::random_normal(rng, k, 0.2f);
  for (float& v : norm_weight) v += 1.0f;
  norm_weight = testing::round_to_bf16(norm_weight);
  const std::vector<float> lm_head = testing::round_to_bf16(fast_uniform(static_cast<size_t>(n * k), seed, 0.03f));

  DeviceBuffer<__nv_bfloat16> d_hidden(testing::float_to_bf16_vector(hidden));
  DeviceBuffer<__nv_bfloat16> d_norm_weight(testing::float_to_bf16_vector(norm_weight));
  DeviceBuffer<__nv_bfloat16> d_normed(static_cast<size_t>(m * k));
  DeviceBuffer<__nv_bfloat16> d_lm_head(testing::float_to_bf16_vector(lm_head));
  const size_t out_elements = static_cast<size_t>(m * n);
  DeviceBuffer<float> d_out_f32(output == Bf16GemmOutput::kFloat32 ? out_elements : 0);
  DeviceBuffer<__nv_bfloat16> d_out_bf16(output == Bf16GemmOutput::kBfloat16 ? out_elements : 0);
  d_out_f32.fill_bytes(0xff);
  d_out_bf16.fill_bytes(0xff);

  Bf16Gemm gemm(n, k, output);
  gemm.prepare(m);
  rms_norm_bf16(d_hidden.data(), k, m, k, d_norm_weight.data(), 1e-6f, d_normed.data(), k, nullptr);
  void* out = output == Bf16GemmOutput::kFloat32 ? static_cast<void*>(d_out_f32.data()) : d_out_bf16.data();
  gemm.run(d_normed.data(), m, d_lm_head.data(), out, nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());

  // The GEMM is checked on the GPU's own normalised rows (the norm has its own test).
  const std::vector<float> normed = testing::bf16_to_float_vector(d_normed.download());
  const std::vector<float> expected = reference_gemm(normed, lm_head, m, n, k);
  const std::vector<float> got = output == Bf16GemmOutput::kFloat32 ? d_out_f32.download()
                                                                     : testing::bf16_to_float_vector(d_out_bf16.download());
  EXPECT_LT(testing::relative_l2_error(got, expected), output == Bf16GemmOutput::kFloat32 ? 1e-4 : 4e-3);
}

TEST(CudaLmHead, DeepSeekV3Shape) {
  FATHOM_REQUIRE_GPU();
  check_lm_head(1, 129280, 7168, Bf16GemmOutput::kFloat32, 1);
  check_lm_head(3, 129280, 7168, Bf16GemmOutput::kFloat32, 2);
  check_lm_head(64, 129280, 7168, Bf16GemmOutput::kFloat32, 7);  // the deterministic lm_head's fixed 64 rows
}

// The MTP module's eh_proj: [rows, 2 x 7168] -> 7168, bf16 out.
TEST(CudaLmHead, MtpEhProjShape) {
  FATHOM_REQUIRE_GPU();
  check_lm_head(1, 7168, 14336, Bf16GemmOutput::kBfloat16, 8);
  check_lm_head(40, 7168, 14336, Bf16GemmOutput::kBfloat16, 9);
}

TEST(CudaLmHead, SmallAndOddShapes) {
  FATHOM_REQUIRE_GPU();
  check_lm_head(5, 1000, 72, Bf16GemmOutput::kFloat32, 3);
  check_lm_head(17, 1001, 136, Bf16GemmOutput::kFloat32, 4);
  check_lm_head(64, 512, 256, Bf16GemmOutput::kBfloat16, 5);
  check_lm_head(1, 8, 8, Bf16GemmOutput::kFloat32, 6);
}

// fp32 operands with pure fp32 compute (the MoE router): close to the float64 product far beyond bf16 precision.
TEST(CudaRouterGemm, Fp32OperandsKeepFp32Precision) {
  FATHOM_REQUIRE_GPU();
  uint32_t seed = 40;
  for (auto [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 256, 7168}, {37, 256, 7168}, {300, 8, 160}}) {
    SCOPED_TRACE(::testing::Message() << "m " << m << " n " << n << " k " << k);
    std::mt19937 rng(seed++);
    const std::vector<float> a = testing::random_normal(rng, static_cast<size_t>(m * k), 1.0f);
    const std::vector<float> w = testing::random_normal(rng, static_cast<size_t>(n * k), 0.02f);
    DeviceBuffer<float> d_a(a), d_w(w), d_out(static_cast<size_t>(m * n));
    d_out.fill_bytes(0xff);
    Bf16Gemm gemm(n, k, Bf16GemmOutput::kFloat32, size_t{32} << 20, Bf16GemmInput::kFloat32);
    gemm.run(d_a.data(), m, d_w.data(), d_out.data(), nullptr);
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_LT(testing::relative_l2_error(d_out.download(), reference_gemm(a, w, m, n, k)), 1e-5);
  }
}

}  // namespace
}  // namespace fathom::kernels::cuda
