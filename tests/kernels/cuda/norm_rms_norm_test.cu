// GPU RMSNorm (plain, strided, in place, fused residual add, the router's unrounded outputs) vs kernels::cpu::rms_norm;
// the exact three-plane bf16 split (host, no GPU needed).
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "cuda_test_util.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/cuda/norm/bf16x3_split.cuh"
#include "kernels/cuda/norm/rms_norm.h"

namespace fathom::kernels::cuda {
namespace {

constexpr float kEps = 1e-6f;

std::vector<float> cpu_rms_norm(const std::vector<float>& x, int64_t rows, int64_t dim,
                                std::vector<__nv_bfloat16>& weight_bits) {
  Tensor weight(DType::BF16, {dim}, weight_bits.data(), nullptr);
  std::vector<float> out(x.size());
  cpu::rms_norm(x.data(), rows, dim, weight, kEps, out.data());
  return out;
}

std::vector<__nv_bfloat16> random_weight(std::mt19937& rng, int64_t dim) {
  std::vector<float> w = testing::random_normal(rng, static_cast<size_t>(dim), 0.3f);
  for (float& v : w) v += 1.0f;
  return testing::float_to_bf16_vector(w);
}

// Rows at a stride (columns [0, dim) of [rows, x_stride]) into rows at out_stride (in place: the same rows); the
// output columns past dim must stay untouched.
void check_rms_norm(int64_t rows, int64_t dim, int64_t x_stride, int64_t out_stride, bool in_place, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "rows " << rows << " dim " << dim << " x stride " << x_stride
                                    << " out stride " << out_stride << " in place " << in_place);
  ASSERT_TRUE(!in_place || x_stride == out_stride);
  std::mt19937 rng(seed);
  const std::vector<float> x_full = testing::round_to_bf16(testing::random_normal(rng, rows * x_stride, 3.0f));
  std::vector<__nv_bfloat16> weight = random_weight(rng, dim);
  std::vector<float> x_rows(static_cast<size_t>(rows * dim));
  for (int64_t r = 0; r < rows; ++r) std::copy_n(x_full.data() + r * x_stride, dim, x_rows.data() + r * dim);
  const std::vector<float> expected = cpu_rms_norm(x_rows, rows, dim, weight);

  DeviceBuffer<__nv_bfloat16> d_x(testing::float_to_bf16_vector(x_full));
  DeviceBuffer<__nv_bfloat16> d_weight(weight);
  DeviceBuffer<__nv_bfloat16> d_out(static_cast<size_t>(rows * out_stride));
  d_out.fill_bytes(0xff);
  __nv_bfloat16* out = in_place ? d_x.data() : d_out.data();
  rms_norm_bf16(d_x.data(), x_stride, rows, dim, d_weight.data(), kEps, out, out_stride, nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<__nv_bfloat16> got_bits = in_place ? d_x.download() : d_out.download();
  std::vector<float> got(static_cast<size_t>(rows * dim));
  int64_t tail_touched = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < out_stride; ++c) {
      const __nv_bfloat16 v = got_bits[r * out_stride + c];
      if (c < dim) {
        got[r * dim + c] = __bfloat162float(v);
      } else {
        uint16_t bits, original = 0xffff;  // in place the tail keeps x's bits (out_stride == x_stride), else the poison
        std::memcpy(&bits, &v, 2);
        if (in_place) {
          const __nv_bfloat16 x_bf16 = __float2bfloat16(x_full[r * x_stride + c]);
          std::memcpy(&original, &x_bf16, 2);
        }
        tail_touched += bits != original;
      }
    }
  }
  EXPECT_EQ(tail_touched, 0);
  EXPECT_LT(testing::relative_l2_error(got, expected), 3e-3);  // bf16 output rounding
}

void check_rms_norm(int64_t rows, int64_t dim, int64_t stride, bool in_place, uint32_t seed) {
  check_rms_norm(rows, dim, stride, stride, in_place, seed);
}

TEST(CudaRmsNorm, MatchesCpuOverShapes) {
  FATHOM_REQUIRE_GPU();
  uint32_t seed = 1;
  for (int64_t rows : {1, 3, 64, 257}) {
    check_rms_norm(rows, 7168, 7168, false, seed++);  // V3 hidden
    check_rms_norm(rows, 1536, 1536, false, seed++);  // q_lora_rank
  }
  check_rms_norm(33, 512, 576, false, seed++);   // kv_a rows: normalise the first 512 of 576
  check_rms_norm(33, 512, 576, true, seed++);
  check_rms_norm(5, 7168, 7168, true, seed++);
  for (int64_t dim : {1, 7, 100, 129, 4100, 20000, 32768}) check_rms_norm(3, dim, dim, false, seed++);
  check_rms_norm(4, 100, 103, false, seed++);  // odd stride: scalar path
  // Input and output strides apart, as the model runs them: q_a's rows of the fused q_a + kv_a output (2112) into
  // packed rows, and a norm written into the MTP's [rows, 2 x 7168] concatenation; the reverse, and odd strides.
  for (int64_t rows : {1, 64}) {
    check_rms_norm(rows, 1536, 2112, 1536, false, seed++);
    check_rms_norm(rows, 7168, 7168, 14336, false, seed++);
  }
  check_rms_norm(5, 512, 512, 576, false, seed++);
  check_rms_norm(5, 100, 103, 101, false, seed++);
}

void check_add_rms_norm(int64_t rows, int64_t dim, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "rows " << rows << " dim " << dim);
  std::mt19937 rng(seed);
  const std::vector<float> x = testing::round_to_bf16(testing::random_normal(rng, rows * dim, 1.0f));
  const std::vector<float> residual = testing::round_to_bf16(testing::random_normal(rng, rows * dim, 4.0f));
  std::vector<__nv_bfloat16> weight = random_weight(rng, dim);
  std::vector<float> sum(x.size());
  for (size_t i = 0; i < x.size(); ++i) sum[i] = x[i] + residual[i];
  const std::vector<float> sum_bf16 = testing::round_to_bf16(sum);
  const std::vector<float> expected = cpu_rms_norm(sum_bf16, rows, dim, weight);

  DeviceBuffer<__nv_bfloat16> d_x(testing::float_to_bf16_vector(x));
  DeviceBuffer<__nv_bfloat16> d_residual(testing::float_to_bf16_vector(residual));
  DeviceBuffer<__nv_bfloat16> d_weight(weight);
  DeviceBuffer<__nv_bfloat16> d_out(static_cast<size_t>(rows * dim));
  d_out.fill_bytes(0xff);
  add_rms_norm_bf16(d_x.data(), d_residual.data(), rows, dim, d_weight.data(), kEps, d_out.data(), nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(testing::bf16_to_float_vector(d_residual.download()), sum_bf16);  // exact: one fp32 add, one rounding
  EXPECT_LT(testing::relative_l2_error(testing::bf16_to_float_vector(d_out.download()), expected), 3e-3);

  // With the unrounded fp32 copy (the MoE router's input): same bf16 output, fp32 output close to the fp32 reference.
  d_residual.upload(testing::float_to_bf16_vector(residual));
  DeviceBuffer<float> d_out_f32(static_cast<size_t>(rows * dim));
  d_out_f32.fill_bytes(0xff);
  const std::vector<__nv_bfloat16> bf16_before = d_out.download();
  d_out.fill_bytes(0xff);  // the second call must write every element again
  add_rms_norm_bf16(d_x.data(), d_residual.data(), rows, dim, d_weight.data(), kEps, d_out.data(), d_out_f32.data(), nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(testing::bf16_to_float_vector(d_out.download()), testing::bf16_to_float_vector(bf16_before));
  EXPECT_LT(testing::relative_l2_error(d_out_f32.download(), expected), 1e-5);

  // With the bf16 planes (the router's tensor-core form), alone and beside the fp32 copy: the same bf16 output and
  // fp32 bits, and each value's planes are split_bf16x3 of its fp32 value, summing to it exactly.
  const std::vector<float> f32 = d_out_f32.download();
  for (bool with_f32 : {false, true}) {
    SCOPED_TRACE(with_f32 ? "planes and fp32" : "planes only");
    d_residual.upload(testing::float_to_bf16_vector(residual));
    d_out.fill_bytes(0xff);
    d_out_f32.fill_bytes(0xff);
    DeviceBuffer<__nv_bfloat16> d_planes(static_cast<size_t>(kBf16SplitPlanes * rows * dim));
    d_planes.fill_bytes(0xff);
    const UnroundedRowsOut unrounded{with_f32 ? d_out_f32.data() : nullptr, d_planes.data()};
    add_rms_norm_bf16(d_x.data(), SplitKPartials{}, d_residual.data(), rows, dim, d_weight.data(), kEps, d_out.data(),
                      unrounded, nullptr, nullptr);
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(testing::bf16_to_float_vector(d_out.download()), testing::bf16_to_float_vector(bf16_before));
    if (with_f32) EXPECT_EQ(std::memcmp(d_out_f32.download().data(), f32.data(), f32.size() * sizeof(float)), 0);
    const std::vector<__nv_bfloat16> planes = d_planes.download();
    int64_t split_mismatches = 0, inexact = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < dim; ++c) {
        const float value = f32[static_cast<size_t>(r * dim + c)];
        const Bf16x3 expected_split = split_bf16x3(value);
        const __nv_bfloat16 want[kBf16SplitPlanes] = {expected_split.hi, expected_split.mid, expected_split.lo};
        double total = 0;
        for (int p = 0; p < kBf16SplitPlanes; ++p) {
          const __nv_bfloat16 got = planes[static_cast<size_t>((r * kBf16SplitPlanes + p) * dim + c)];
          split_mismatches += std::memcmp(&got, &want[p], sizeof(got)) != 0;
          total += static_cast<double>(__bfloat162float(got));
        }
        inexact += total != static_cast<double>(value);
      }
    }
    EXPECT_EQ(split_mismatches, 0);
    EXPECT_EQ(inexact, 0);
  }
}

TEST(CudaRmsNorm, FusedResidualAddMatchesCpu) {
  FATHOM_REQUIRE_GPU();
  uint32_t seed = 100;
  for (int64_t rows : {1, 32, 256}) check_add_rms_norm(rows, 7168, seed++);
  for (int64_t dim : {1, 100, 1536, 20000}) check_add_rms_norm(9, dim, seed++);
}

// split_bf16x3 sums exactly to x over the range its header promises (|x| >= 2^-100, every mantissa pattern class),
// hi is bf16(x), and non-finite values keep hi with zero remainders. Host only.
TEST(Bf16x3Split, SumsExactlyToTheFp32Value) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> mantissa(0, (1u << 23) - 1);
  std::vector<float> values = {0.0f, -0.0f, 1.0f, -1.0f, std::numeric_limits<float>::max() / 2, 0x1p-100f,
                               -0x1p-100f, 1.00390625f, 1.99999988f, -1.99609375f, 3.0000002f};
  for (int exponent = -100; exponent <= 126; ++exponent) {
    for (int i = 0; i < 200; ++i) {
      uint32_t m = mantissa(rng);
      if (i < 8) m = (1u << 23) - 1 - static_cast<uint32_t>(i);  // rounds hi up into the next binade
      if (i >= 8 && i < 16) m = (0x80u << 8) | static_cast<uint32_t>(i);  // ties and near-ties of the first rounding
      const uint32_t bits = (static_cast<uint32_t>(i % 2) << 31) | (static_cast<uint32_t>(exponent + 127) << 23) | m;
      float value;
      std::memcpy(&value, &bits, sizeof(value));
      values.push_back(value);
    }
  }
  int64_t inexact = 0, bad_hi = 0;
  for (float value : values) {
    const Bf16x3 split = split_bf16x3(value);
    const double total = static_cast<double>(__bfloat162float(split.hi)) + __bfloat162float(split.mid) +
                         __bfloat162float(split.lo);
    if (total != static_cast<double>(value) && inexact++ < 5) ADD_FAILURE() << "split of " << value << " sums to " << total;
    const __nv_bfloat16 rounded = __float2bfloat16_rn(value);
    bad_hi += std::memcmp(&rounded, &split.hi, sizeof(rounded)) != 0;
  }
  EXPECT_EQ(inexact, 0);
  EXPECT_EQ(bad_hi, 0);
  for (float special : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max()}) {
    const Bf16x3 split = split_bf16x3(special);
    EXPECT_FALSE(std::isfinite(__bfloat162float(split.hi))) << special;  // float max rounds to bf16 infinity
    EXPECT_EQ(__bfloat162float(split.mid), 0.0f) << special;
    EXPECT_EQ(__bfloat162float(split.lo), 0.0f) << special;
  }
}

TEST(CudaRmsNorm, RejectsBadShapes) {
  FATHOM_REQUIRE_GPU();
  EXPECT_THROW(rms_norm_bf16(nullptr, 10, 1, 20, nullptr, kEps, nullptr, 20, nullptr), Error);  // stride < dim
  EXPECT_THROW(rms_norm_bf16(nullptr, 40000, 1, 40000, nullptr, kEps, nullptr, 40000, nullptr), Error);  // too wide
}

}  // namespace
}  // namespace fathom::kernels::cuda
