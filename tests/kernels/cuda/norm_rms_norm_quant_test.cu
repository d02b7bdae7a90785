// RMSNorm with the fused e4m3 output: the fp8 values and scales bit-equal to the unfused sequence (the norm, then
// quantize_activations_fp8 on its bf16 output), and the norm's bf16 / fp32 / residual outputs bit-equal to a host
// emulation of the kernels' fp32 arithmetic (so the fused path and the latency changes move no output bit).
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/fp8_gemm/act_quant.h"
#include "kernels/cuda/norm/rms_norm.h"

namespace fathom::kernels::cuda {
namespace {

constexpr float kEps = 1e-6f;
constexpr int64_t kGroup = 128;  // columns per fp8 scale
constexpr uint16_t kPoisonBf16 = 0xffff;  // a NaN the kernels never write (their NaNs are the canonical 0x7fff)
constexpr uint8_t kPoisonFp8 = 0xff;      // likewise (satfinite e4m3 NaN is 0x7f)
constexpr uint32_t kPoisonF32 = 0xffffffffu;

int64_t groups_of(int64_t dim) { return (dim + kGroup - 1) / kGroup; }

uint16_t bf16_bits(float value) {
  const __nv_bfloat16 b = __float2bfloat16(value);
  uint16_t bits;
  std::memcpy(&bits, &b, sizeof(bits));
  return bits;
}

template <typename T, typename Bits>
std::vector<Bits> as_bits(const std::vector<T>& values) {
  static_assert(sizeof(T) == sizeof(Bits));
  std::vector<Bits> bits(values.size());
  if (!values.empty()) std::memcpy(bits.data(), values.data(), values.size() * sizeof(T));
  return bits;
}

// Counts differing elements; the first one goes into the failure message.
template <typename Bits>
void expect_same_bits(const std::vector<Bits>& got, const std::vector<Bits>& expected, const char* what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  int64_t mismatches = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != expected[i]) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++mismatches;
    }
  }
  EXPECT_EQ(mismatches, 0) << what << ": first at element " << first << " (got 0x" << std::hex
                           << (first >= 0 ? uint64_t{got[first]} : 0) << ", expected 0x"
                           << (first >= 0 ? uint64_t{expected[first]} : 0) << std::dec << ")";
}

template <typename Bits>
void expect_no_poison(const std::vector<Bits>& got, Bits poison, const char* what) {
  int64_t poisoned = 0;
  for (Bits b : got) poisoned += b == poison;
  EXPECT_EQ(poisoned, 0) << what << ": elements left unwritten";
}

// Rows cycle through magnitudes: ordinary; tiny (the outputs fall under the 1e-4 amax floor); large; huge (the sum of
// squares overflows to inf and the row normalises to zeros). Sparse 1000x outliers give some groups one dominant value.
std::vector<float> random_rows(std::mt19937& rng, int64_t rows, int64_t cols, float stddev) {
  constexpr float kRowScales[] = {1.0f, 1e-8f, 1e4f, 1e25f};
  std::vector<float> values = testing::random_normal(rng, static_cast<size_t>(rows * cols), stddev);
  std::uniform_int_distribution<int> outlier(0, 511);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float& v = values[r * cols + c];
      v *= kRowScales[r % 4] * (outlier(rng) == 0 ? 1000.0f : 1.0f);
    }
  }
  return testing::round_to_bf16(values);
}

// Around 1 with a few +-3e38 entries: their outputs overflow to inf (bf16 and fp32), so some groups have an infinite
// amax and scale (their values become 0 or NaN), exercising the quantizer's saturation and non-finite paths.
std::vector<float> random_weight(std::mt19937& rng, int64_t dim) {
  std::vector<float> w = testing::random_normal(rng, static_cast<size_t>(dim), 0.3f);
  std::uniform_int_distribution<int> huge(0, 999);
  for (float& v : w) v = huge(rng) == 0 ? (v < 0 ? -3e38f : 3e38f) : v + 1.0f;
  return testing::round_to_bf16(w);
}

// rms_norm.cu's launch shape, which fixes the summation order: 8-column vectors, 4 per thread up to 16384 columns and
// 16 above, the thread count rounded up to a warp multiple; thread t owns vectors t, t + threads, ...
void launch_shape(int64_t dim, int* threads, int* vectors_per_thread) {
  const int64_t vectors = (dim + 7) / 8;
  *vectors_per_thread = vectors <= 512 * 4 ? 4 : 16;
  *threads = static_cast<int>(((vectors + *vectors_per_thread - 1) / *vectors_per_thread + 31) / 32 * 32);
}

// 1 / rms of one row as the kernel computes it: each thread's fmaf chain over its vectors, the warp's xor butterfly,
// then the warp partials added in order.
float emulate_inv_rms(const float* row, int64_t dim) {
  int threads = 0, per_thread = 0;
  launch_shape(dim, &threads, &per_thread);
  float total = 0.0f;
  for (int warp = 0; warp < threads / 32; ++warp) {
    float lanes[32];
    for (int lane = 0; lane < 32; ++lane) {
      const int t = warp * 32 + lane;
      float sum = 0.0f;
      for (int j = 0; j < per_thread; ++j) {
        for (int i = 0; i < 8; ++i) {
          const int64_t column = (t + static_cast<int64_t>(j) * threads) * 8 + i;
          const float v = column < dim ? row[column] : 0.0f;
          sum = std::fma(v, v, sum);
        }
      }
      lanes[lane] = sum;
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
      float next[32];
      for (int lane = 0; lane < 32; ++lane) next[lane] = lanes[lane] + lanes[lane ^ offset];
      std::memcpy(lanes, next, sizeof(lanes));
    }
    total += lanes[0];
  }
  return 1.0f / std::sqrt(total / static_cast<float>(dim) + kEps);
}

struct Expected {
  std::vector<uint16_t> out;  // [rows, dim] bf16 bits
  std::vector<uint32_t> out_f32;  // [rows, dim] fp32 bits
};

// input: [rows, dim] at row stride `stride` (bf16-exact values).
Expected emulate_norm(const std::vector<float>& input, int64_t rows, int64_t dim, int64_t stride,
                      const std::vector<float>& weight) {
  Expected e;
  e.out.resize(static_cast<size_t>(rows * dim));
  e.out_f32.resize(static_cast<size_t>(rows * dim));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = input.data() + r * stride;
    const float inv_rms = emulate_inv_rms(row, dim);
    for (int64_t c = 0; c < dim; ++c) {
      const float y = weight[c] * (row[c] * inv_rms);
      e.out[r * dim + c] = bf16_bits(y);
      std::memcpy(&e.out_f32[r * dim + c], &y, sizeof(y));
    }
  }
  return e;
}

struct Fp8Buffers {
  DeviceBuffer<uint8_t> values;  // [rows, dim]
  DeviceBuffer<float> scales;    // [rows, groups]
  Fp8Buffers(int64_t rows, int64_t dim)
      : values(static_cast<size_t>(rows * dim)), scales(static_cast<size_t>(rows * groups_of(dim))) {
    values.fill_bytes(kPoisonFp8);
    scales.fill_bytes(0xff);
  }
  Fp8RowsOut out() { return {values.data(), scales.data()}; }
};

// The unfused second step: quantize_activations_fp8 on the norm's bf16 output, packed to [rows, dim] first.
void quantize_unfused(const __nv_bfloat16* out, int64_t rows, int64_t dim, int64_t stride, Fp8Buffers& fp8) {
  DeviceBuffer<__nv_bfloat16> packed(static_cast<size_t>(rows * dim));
  FATHOM_CUDA_CHECK(cudaMemcpy2D(packed.data(), dim * sizeof(__nv_bfloat16), out, stride * sizeof(__nv_bfloat16),
                                 dim * sizeof(__nv_bfloat16), rows, cudaMemcpyDeviceToDevice));
  quantize_activations_fp8(packed.data(), rows, dim, fp8.values.data(), fp8.scales.data(), nullptr, nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
}

void expect_same_fp8(Fp8Buffers& fused, Fp8Buffers& unfused) {
  const std::vector<uint8_t> fused_values = fused.values.download(), unfused_values = unfused.values.download();
  const std::vector<uint32_t> fused_scales = as_bits<float, uint32_t>(fused.scales.download());
  const std::vector<uint32_t> unfused_scales = as_bits<float, uint32_t>(unfused.scales.download());
  expect_no_poison(fused_values, kPoisonFp8, "fused fp8 values");
  expect_no_poison(fused_scales, kPoisonF32, "fused fp8 scales");
  expect_same_bits(fused_values, unfused_values, "fp8 values vs norm + quantize_activations_fp8");
  expect_same_bits(fused_scales, unfused_scales, "fp8 scales vs norm + quantize_activations_fp8");
}

// bf16 rows at a stride: columns [0, dim) must equal `expected`, the rest keep `tail` (the input when in place).
void expect_rows(const std::vector<__nv_bfloat16>& got_rows, const std::vector<uint16_t>& expected, int64_t rows,
                 int64_t dim, int64_t stride, const std::vector<uint16_t>& tail, const char* what) {
  const std::vector<uint16_t> got = as_bits<__nv_bfloat16, uint16_t>(got_rows);
  std::vector<uint16_t> head(static_cast<size_t>(rows * dim));
  int64_t tail_touched = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < stride; ++c) {
      if (c < dim) {
        head[r * dim + c] = got[r * stride + c];
      } else {
        tail_touched += got[r * stride + c] != tail[r * stride + c];
      }
    }
  }
  expect_same_bits(head, expected, what);
  EXPECT_EQ(tail_touched, 0) << what << ": columns past dim changed";
}

// rms_norm_bf16 over [rows, dim] at row stride x_stride into rows at out_stride, or in place (equal strides); the
// unfused run and the fused run start from identical inputs and poisoned outputs.
void check_rms_norm_fp8(int64_t rows, int64_t dim, int64_t x_stride, int64_t out_stride, bool in_place,
                        uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "rms_norm rows " << rows << " dim " << dim << " x stride " << x_stride
                                    << " out stride " << out_stride << " in place " << in_place);
  ASSERT_TRUE(!in_place || x_stride == out_stride);
  std::mt19937 rng(seed);
  const std::vector<float> x = random_rows(rng, rows, x_stride, 1.0f);  // [rows, x_stride]
  const std::vector<float> weight = random_weight(rng, dim);
  const Expected expected = emulate_norm(x, rows, dim, x_stride, weight);
  const std::vector<__nv_bfloat16> x_bf16 = testing::float_to_bf16_vector(x);
  const size_t out_elems = static_cast<size_t>(rows * out_stride);
  const std::vector<uint16_t> tail =
      in_place ? as_bits<__nv_bfloat16, uint16_t>(x_bf16) : std::vector<uint16_t>(out_elems, kPoisonBf16);
  DeviceBuffer<__nv_bfloat16> d_weight(testing::float_to_bf16_vector(weight));

  DeviceBuffer<__nv_bfloat16> x_unfused(x_bf16), x_fused(x_bf16);
  DeviceBuffer<__nv_bfloat16> out_unfused(out_elems), out_fused(out_elems);
  out_unfused.fill_bytes(0xff);
  out_fused.fill_bytes(0xff);
  __nv_bfloat16* y_unfused = in_place ? x_unfused.data() : out_unfused.data();
  __nv_bfloat16* y_fused = in_place ? x_fused.data() : out_fused.data();
  Fp8Buffers fp8_unfused(rows, dim), fp8_fused(rows, dim);

  rms_norm_bf16(x_unfused.data(), x_stride, rows, dim, d_weight.data(), kEps, y_unfused, out_stride, nullptr);
  quantize_unfused(y_unfused, rows, dim, out_stride, fp8_unfused);
  const Fp8RowsOut fp8 = fp8_fused.out();
  rms_norm_bf16(x_fused.data(), x_stride, rows, dim, d_weight.data(), kEps, y_fused, out_stride, &fp8, nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());

  expect_rows(in_place ? x_unfused.download() : out_unfused.download(), expected.out, rows, dim, out_stride, tail,
              "bf16 out (no fp8) vs emulation");
  expect_rows(in_place ? x_fused.download() : out_fused.download(), expected.out, rows, dim, out_stride, tail,
              "bf16 out (with fp8) vs emulation");
  expect_same_fp8(fp8_fused, fp8_unfused);
}

// add_rms_norm_bf16 (contiguous rows), with or without the fp32 copy.
void check_add_rms_norm_fp8(int64_t rows, int64_t dim, bool with_f32, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "add_rms_norm rows " << rows << " dim " << dim << " out_f32 " << with_f32);
  std::mt19937 rng(seed);
  const std::vector<float> x = random_rows(rng, rows, dim, 1.0f);
  const std::vector<float> residual = random_rows(rng, rows, dim, 4.0f);
  const std::vector<float> weight = random_weight(rng, dim);
  std::vector<float> sum(x.size());
  for (size_t i = 0; i < x.size(); ++i) sum[i] = x[i] + residual[i];
  sum = testing::round_to_bf16(sum);
  const Expected expected = emulate_norm(sum, rows, dim, dim, weight);
  const std::vector<uint16_t> expected_residual = as_bits<__nv_bfloat16, uint16_t>(testing::float_to_bf16_vector(sum));
  const std::vector<uint16_t> no_tail;  // contiguous rows: nothing past dim

  DeviceBuffer<__nv_bfloat16> d_x(testing::float_to_bf16_vector(x));
  DeviceBuffer<__nv_bfloat16> d_weight(testing::float_to_bf16_vector(weight));
  DeviceBuffer<__nv_bfloat16> residual_unfused(testing::float_to_bf16_vector(residual));
  DeviceBuffer<__nv_bfloat16> residual_fused(testing::float_to_bf16_vector(residual));
  DeviceBuffer<__nv_bfloat16> out_unfused(x.size()), out_fused(x.size());
  DeviceBuffer<float> f32_unfused(with_f32 ? x.size() : 0), f32_fused(with_f32 ? x.size() : 0);
  out_unfused.fill_bytes(0xff);
  out_fused.fill_bytes(0xff);
  f32_unfused.fill_bytes(0xff);
  f32_fused.fill_bytes(0xff);
  Fp8Buffers fp8_unfused(rows, dim), fp8_fused(rows, dim);

  if (with_f32) {
    add_rms_norm_bf16(d_x.data(), residual_unfused.data(), rows, dim, d_weight.data(), kEps, out_unfused.data(),
                      f32_unfused.data(), nullptr);
  } else {
    add_rms_norm_bf16(d_x.data(), residual_unfused.data(), rows, dim, d_weight.data(), kEps, out_unfused.data(),
                      nullptr);
  }
  quantize_unfused(out_unfused.data(), rows, dim, dim, fp8_unfused);
  const Fp8RowsOut fp8 = fp8_fused.out();
  add_rms_norm_bf16(d_x.data(), residual_fused.data(), rows, dim, d_weight.data(), kEps, out_fused.data(),
                    with_f32 ? f32_fused.data() : nullptr, &fp8, nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());

  expect_same_bits(as_bits<__nv_bfloat16, uint16_t>(residual_unfused.download()), expected_residual,
                   "residual (no fp8) vs emulation");
  expect_same_bits(as_bits<__nv_bfloat16, uint16_t>(residual_fused.download()), expected_residual,
                   "residual (with fp8) vs emulation");
  expect_rows(out_unfused.download(), expected.out, rows, dim, dim, no_tail, "bf16 out (no fp8) vs emulation");
  expect_rows(out_fused.download(), expected.out, rows, dim, dim, no_tail, "bf16 out (with fp8) vs emulation");
  if (with_f32) {
    expect_same_bits(as_bits<float, uint32_t>(f32_unfused.download()), expected.out_f32,
                     "out_f32 (no fp8) vs emulation");
    expect_same_bits(as_bits<float, uint32_t>(f32_fused.download()), expected.out_f32,
                     "out_f32 (with fp8) vs emulation");
  }
  expect_same_fp8(fp8_fused, fp8_unfused);
}

constexpr int64_t kRows[] = {1, 2, 7, 64, 300};

TEST(CudaRmsNormFp8, NormMatchesUnfusedQuantization) {
  FATHOM_REQUIRE_GPU();
  struct Shape {
    int64_t dim, x_stride, out_stride;
    bool in_place;
  };
  const Shape shapes[] = {
      {7168, 7168, 7168, false},     // V3 hidden (the first layer's input norm)
      {1536, 1536, 1536, true},      // q_a's output, normalised in place
      {1536, 2112, 1536, false},     // q_a's rows of the fused q_a + kv_a output into packed rows (the model's decode)
      {2048, 2048, 2048, false},
      {512, 576, 576, true},         // kv_a rows: the first 512 of 576, in place
      {512, 576, 576, false},
      {512, 576, 512, false},
      {200, 200, 200, false},        // not a multiple of 128: separate quantization kernel
      {1536, 1537, 1537, false},     // odd stride: scalar loads, separate quantization kernel
      {1536, 2112, 1537, false},     // odd output stride only
      {7168, 7168, 14336, false},    // into the MTP's [rows, 2 x 7168] concatenation
      {18432, 18432, 18432, false},  // the 16-vectors-per-thread kernel
  };
  uint32_t seed = 1;
  for (int64_t rows : kRows) {
    for (const Shape& s : shapes) check_rms_norm_fp8(rows, s.dim, s.x_stride, s.out_stride, s.in_place, seed++);
  }
}

TEST(CudaRmsNormFp8, AddNormMatchesUnfusedQuantization) {
  FATHOM_REQUIRE_GPU();
  uint32_t seed = 1000;
  for (int64_t rows : kRows) {
    for (int64_t dim : {7168, 1536, 2048, 512, 200, 18432}) {
      check_add_rms_norm_fp8(rows, dim, false, seed++);
      check_add_rms_norm_fp8(rows, dim, true, seed++);
    }
  }
}

// Widths quantize_activations_fp8 rejects (not a multiple of 4) still quantize, with the same per-group formula:
// checked on the host from the norm's own bf16 output.
TEST(CudaRmsNormFp8, SeparateQuantizationTakesAnyWidth) {
  FATHOM_REQUIRE_GPU();
  uint32_t seed = 2000;
  for (const auto [dim, stride] : {std::pair<int64_t, int64_t>{7, 7}, {100, 103}, {131, 131}}) {
    SCOPED_TRACE(::testing::Message() << "dim " << dim << " stride " << stride);
    constexpr int64_t rows = 5;
    std::mt19937 rng(seed++);
    const std::vector<float> x = random_rows(rng, rows, stride, 1.0f);
    DeviceBuffer<__nv_bfloat16> d_x(testing::float_to_bf16_vector(x));
    // Finite outputs only: the host conversion is compared on ordinary values, the non-finite ones are covered above.
    std::vector<float> weight = testing::random_normal(rng, static_cast<size_t>(dim), 0.3f);
    for (float& w : weight) w += 1.0f;
    DeviceBuffer<__nv_bfloat16> d_weight(testing::float_to_bf16_vector(weight));
    DeviceBuffer<__nv_bfloat16> d_out(x.size());
    d_out.fill_bytes(0xff);  // poisoned: the columns between dim and stride must stay so
    Fp8Buffers fp8_buffers(rows, dim);
    const Fp8RowsOut fp8 = fp8_buffers.out();
    rms_norm_bf16(d_x.data(), stride, rows, dim, d_weight.data(), kEps, d_out.data(), stride, &fp8, nullptr);
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<__nv_bfloat16> out_bits = d_out.download();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = dim; c < stride; ++c) {
        uint16_t bits;
        std::memcpy(&bits, &out_bits[static_cast<size_t>(r * stride + c)], sizeof(bits));
        ASSERT_EQ(bits, 0xffffu) << "row " << r << " column " << c << " past dim written";
      }
    const std::vector<float> y = testing::bf16_to_float_vector(out_bits);
    const int64_t groups = groups_of(dim);
    std::vector<uint8_t> values(static_cast<size_t>(rows * dim));
    std::vector<uint32_t> scales(static_cast<size_t>(rows * groups));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t begin = g * kGroup, end = std::min(dim, begin + kGroup);
        float amax = 0.0f;
        for (int64_t c = begin; c < end; ++c) amax = std::fmax(amax, std::fabs(y[r * stride + c]));
        const float scale = std::fmax(amax, 1e-4f) / 448.0f;
        std::memcpy(&scales[r * groups + g], &scale, sizeof(scale));
        for (int64_t c = begin; c < end; ++c) {
          values[r * dim + c] = __nv_cvt_float_to_fp8(y[r * stride + c] / scale, __NV_SATFINITE, __NV_E4M3);
        }
      }
    }
    expect_same_bits(fp8_buffers.values.download(), values, "fp8 values vs host quantization");
    expect_same_bits(as_bits<float, uint32_t>(fp8_buffers.scales.download()), scales, "fp8 scales vs host");
  }
}

TEST(CudaRmsNormFp8, RejectsMissingFp8Buffers) {
  FATHOM_REQUIRE_GPU();
  const Fp8RowsOut empty;
  EXPECT_THROW(rms_norm_bf16(nullptr, 512, 1, 512, nullptr, kEps, nullptr, 512, &empty, nullptr), Error);
  EXPECT_THROW(add_rms_norm_bf16(nullptr, nullptr, 1, 512, nullptr, kEps, nullptr, nullptr, &empty, nullptr), Error);
}

}  // namespace
}  // namespace fathom::kernels::cuda
