// MLA absorption products (q_nope -> q_latent through W_UK, out_latent -> out through W_UV) vs the CPU
// reference kernels::cpu::mla_absorb_query / mla_project_values, with bf16 and fp8 (e4m3 + 128x128 block
// scales) weights.
//
// Tolerances: bf16 paths relative L2 <= 1e-2 (fp32 accumulation; the error is the bf16 output rounding,
// ~2e-3). fp8 path: vs the CPU on the dequantized weights <= 1e-2 (dequantized weights are rounded to bf16 in
// shared memory, 2^-9 relative); vs the bf16 path on the unquantized weights cosine similarity >= 0.99.
// MlaAbsorbDecodeBits: the decode kernel (fp8 weights, <= 32 tokens) against the tiled kernels (the *_reference
// entry points), bit for bit, for both products, and batch invariance of every token's result.
// MlaAbsorb.SettledQueryInProgrammaticChain: the W_UK product with q_nope_settled behind programmatic copies (q_nope
// two launches back, the previous launch writing its output buffer) gives the plain launch's bits.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/mla_attention.h"
#include "kernels/cuda/mla/mla_absorb.h"
#include "mla_test_util.h"
#include "programmatic_copy.cuh"

namespace fathom::testing {
namespace {

using kernels::cuda::MlaKvBWeights;

constexpr double kTolerance = 1e-2;

struct AbsorbCase {
  std::string name;
  int32_t heads, nope, rope, v, kv_lora, tokens;
};

// e4m3 quantization with one fp32 scale_inv per 128x128 block (the checkpoint's format).
struct Fp8Weights {
  std::vector<uint8_t> bits;        // [rows, cols]
  std::vector<float> scale_inv;     // [ceil(rows/128), ceil(cols/128)]
  std::vector<float> dequantized;   // [rows, cols]
};

Fp8Weights quantize_fp8(const std::vector<float>& w, int64_t rows, int64_t cols) {
  Fp8Weights q;
  const int64_t block_rows = (rows + 127) / 128, block_cols = (cols + 127) / 128;
  q.bits.resize(w.size());
  q.dequantized.resize(w.size());
  q.scale_inv.assign(static_cast<size_t>(block_rows * block_cols), 1.0f);
  for (int64_t br = 0; br < block_rows; ++br)
    for (int64_t bc = 0; bc < block_cols; ++bc) {
      float amax = 0;
      for (int64_t r = br * 128; r < std::min(rows, br * 128 + 128); ++r)
        for (int64_t c = bc * 128; c < std::min(cols, bc * 128 + 128); ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      const float scale = amax > 0 ? amax / 448.0f : 1.0f;
      q.scale_inv[br * block_cols + bc] = scale;
      for (int64_t r = br * 128; r < std::min(rows, br * 128 + 128); ++r)
        for (int64_t c = bc * 128; c < std::min(cols, bc * 128 + 128); ++c) {
          q.bits[r * cols + c] = float_to_fp8_e4m3(w[r * cols + c] / scale);
          q.dequantized[r * cols + c] = fp8_e4m3_to_float(q.bits[r * cols + c]) * scale;
        }
    }
  return q;
}

class MlaAbsorbSweep : public ::testing::TestWithParam<AbsorbCase> {};

TEST_P(MlaAbsorbSweep, Bf16AndFp8MatchCpuReference) {
  FATHOM_REQUIRE_GPU();
  const AbsorbCase& c = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>{}(c.name)));
  const int64_t rows = static_cast<int64_t>(c.heads) * (c.nope + c.v);
  const std::vector<float> kv_b = round_to_bf16(random_normal(rng, static_cast<size_t>(rows * c.kv_lora), 0.05f));
  const std::vector<float> q = round_to_bf16(random_normal(rng, static_cast<size_t>(c.tokens) * c.heads * (c.nope + c.rope)));
  const std::vector<float> latent = round_to_bf16(random_normal(rng, static_cast<size_t>(c.tokens) * c.heads * c.kv_lora));
  const Fp8Weights fp8 = quantize_fp8(kv_b, rows, c.kv_lora);

  ThreadPool pool;
  const kernels::cpu::MlaShape shape{c.heads, c.nope, c.rope, c.v, c.kv_lora, 1.0f};
  std::vector<float> ref_q_latent(static_cast<size_t>(c.tokens) * c.heads * c.kv_lora);
  std::vector<float> ref_out(static_cast<size_t>(c.tokens) * c.heads * c.v);
  std::vector<float> ref_q_latent_fp8(ref_q_latent.size()), ref_out_fp8(ref_out.size());
  kernels::cpu::mla_absorb_query(q.data(), c.tokens, kv_b.data(), shape, ref_q_latent.data(), pool);
  kernels::cpu::mla_project_values(latent.data(), c.tokens, kv_b.data(), shape, ref_out.data(), pool);
  kernels::cpu::mla_absorb_query(q.data(), c.tokens, fp8.dequantized.data(), shape, ref_q_latent_fp8.data(), pool);
  kernels::cpu::mla_project_values(latent.data(), c.tokens, fp8.dequantized.data(), shape, ref_out_fp8.data(), pool);

  DeviceBuffer<__nv_bfloat16> w_bf16(float_to_bf16_vector(kv_b));
  DeviceBuffer<uint8_t> w_fp8(fp8.bits);
  DeviceBuffer<float> w_scale(fp8.scale_inv);
  DeviceBuffer<__nv_bfloat16> q_device(float_to_bf16_vector(q)), latent_device(float_to_bf16_vector(latent));
  DeviceBuffer<__nv_bfloat16> q_latent_device(ref_q_latent.size()), out_device(ref_out.size());

  MlaKvBWeights weights;
  weights.num_heads = c.heads;
  weights.nope_dim = c.nope;
  weights.v_dim = c.v;
  weights.kv_lora_dim = c.kv_lora;
  std::vector<float> gpu_q_latent[2], gpu_out[2];  // [0] bf16 weights, [1] fp8 weights
  for (int use_fp8 = 0; use_fp8 < 2; ++use_fp8) {
    weights.is_fp8 = use_fp8 == 1;
    weights.weight = use_fp8 ? static_cast<const void*>(w_fp8.data()) : static_cast<const void*>(w_bf16.data());
    weights.scale_inv = use_fp8 ? w_scale.data() : nullptr;
    q_latent_device.fill_bytes(0xff);
    out_device.fill_bytes(0xff);
    kernels::cuda::mla_absorb_query(q_device.data(), c.nope + c.rope, c.tokens, weights, q_latent_device.data(), nullptr);
    kernels::cuda::mla_project_values(latent_device.data(), c.tokens, weights, out_device.data(), nullptr);
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
    gpu_q_latent[use_fp8] = bf16_to_float_vector(q_latent_device.download());
    gpu_out[use_fp8] = bf16_to_float_vector(out_device.download());
    ASSERT_TRUE(all_finite(gpu_q_latent[use_fp8]) && all_finite(gpu_out[use_fp8])) << "unwritten output, fp8 " << use_fp8;
  }
  const double errors[4] = {relative_l2_error(gpu_q_latent[0], ref_q_latent), relative_l2_error(gpu_out[0], ref_out),
                            relative_l2_error(gpu_q_latent[1], ref_q_latent_fp8), relative_l2_error(gpu_out[1], ref_out_fp8)};
  const double cosines[2] = {cosine_similarity(gpu_q_latent[1], gpu_q_latent[0]), cosine_similarity(gpu_out[1], gpu_out[0])};
  for (double e : errors) EXPECT_LE(e, kTolerance);
  for (double cs : cosines) EXPECT_GE(cs, 0.99);
  std::printf("[ mla absorb ] %-28s bf16 rel_l2 %.2e / %.2e, fp8 rel_l2 %.2e / %.2e, fp8-vs-bf16 cosine %.5f / %.5f\n",
              c.name.c_str(), errors[0], errors[1], errors[2], errors[3], cosines[0], cosines[1]);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MlaAbsorbSweep,
                         ::testing::Values(AbsorbCase{"v3_tokens1", 128, 128, 64, 128, 512, 1},
                                           AbsorbCase{"v3_tokens7", 128, 128, 64, 128, 512, 7},
                                           AbsorbCase{"v3_tokens64", 128, 128, 64, 128, 512, 64},
                                           AbsorbCase{"v3_tokens130", 128, 128, 64, 128, 512, 130},
                                           AbsorbCase{"v3_tp8_16heads_tokens33", 16, 128, 64, 128, 512, 33},
                                           AbsorbCase{"odd_h3_nope37_v29_lora99", 3, 37, 11, 29, 99, 5},
                                           AbsorbCase{"tails_h3_nope48_v80_lora208", 3, 48, 16, 80, 208, 70},
                                           AbsorbCase{"odd_h5_nope16_v24_lora200", 5, 16, 8, 24, 200, 70},
                                           AbsorbCase{"odd_h2_nope130_v70_lora257", 2, 130, 64, 70, 257, 3}),
                         [](const ::testing::TestParamInfo<AbsorbCase>& info) { return info.param.name; });

struct BitsCase {
  std::string name;
  int32_t heads, nope, rope, v, kv_lora;
  bool decode_path;  // the decode kernel applies (fp8, <= 32 tokens; else both calls run the tiled kernels)
};

std::vector<uint16_t> bf16_bits(const std::vector<__nv_bfloat16>& values, size_t count) {
  std::vector<uint16_t> bits(count);
  std::memcpy(bits.data(), values.data(), count * sizeof(uint16_t));
  return bits;
}

// Index of the first differing element of two equally long bit vectors, or -1.
int64_t first_mismatch(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  return -1;
}

// Checks one product's outputs: the first `written` elements of `decode` and `reference` are the same bits and hold
// no poison (0xffff, a NaN no product gives here), the rest of `decode` still holds poison; and the decode output
// equals `full_batch` (the same tokens computed in a batch of the maximum size) on its written prefix.
void expect_same_bits(const std::vector<__nv_bfloat16>& decode, const std::vector<__nv_bfloat16>& reference,
                      const std::vector<__nv_bfloat16>& full_batch, size_t written, const std::string& what) {
  const std::vector<uint16_t> all = bf16_bits(decode, decode.size());
  const std::vector<uint16_t> got(all.begin(), all.begin() + static_cast<int64_t>(written));
  const std::vector<uint16_t> want = bf16_bits(reference, written);
  ASSERT_EQ(std::count(got.begin(), got.end(), uint16_t{0xffff}), 0) << what << ": unwritten outputs";
  EXPECT_EQ(std::count(all.begin() + static_cast<int64_t>(written), all.end(), uint16_t{0xffff}),
            static_cast<int64_t>(all.size() - written))
      << what << ": wrote past the last token";
  const int64_t diff = first_mismatch(got, want);
  EXPECT_EQ(diff, -1) << what << ": decode vs tiled differ first at element " << diff << " (0x" << std::hex
                      << (diff >= 0 ? got[diff] : 0) << " vs 0x" << (diff >= 0 ? want[diff] : 0) << std::dec << ")";
  const int64_t batch_diff = first_mismatch(got, bf16_bits(full_batch, written));
  EXPECT_EQ(batch_diff, -1) << what << ": differs from the same tokens in the full batch at element " << batch_diff;
}

class MlaAbsorbDecodeBits : public ::testing::TestWithParam<BitsCase> {};

TEST_P(MlaAbsorbDecodeBits, DecodeKernelMatchesTiledKernelsBitForBit) {
  FATHOM_REQUIRE_GPU();
  const BitsCase& c = GetParam();
  constexpr int32_t kTokenCounts[] = {1, 2, 3, 8, 16, 17, 32, 33, 64, 200};
  constexpr int32_t kMaxTokens = 200;
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>{}(c.name + "/bits")));
  const int64_t rows = static_cast<int64_t>(c.heads) * (c.nope + c.v);
  const int64_t q_stride = c.nope + c.rope;
  const std::vector<float> kv_b = round_to_bf16(random_normal(rng, static_cast<size_t>(rows * c.kv_lora), 0.05f));
  const Fp8Weights fp8 = quantize_fp8(kv_b, rows, c.kv_lora);
  const size_t q_latent_per_token = static_cast<size_t>(c.heads) * c.kv_lora;
  const size_t out_per_token = static_cast<size_t>(c.heads) * c.v;
  DeviceBuffer<__nv_bfloat16> w_bf16(float_to_bf16_vector(kv_b));
  DeviceBuffer<uint8_t> w_fp8(fp8.bits);
  DeviceBuffer<float> w_scale(fp8.scale_inv);
  DeviceBuffer<__nv_bfloat16> q_device(float_to_bf16_vector(
      round_to_bf16(random_normal(rng, static_cast<size_t>(kMaxTokens) * c.heads * q_stride))));
  DeviceBuffer<__nv_bfloat16> latent_device(
      float_to_bf16_vector(round_to_bf16(random_normal(rng, kMaxTokens * q_latent_per_token))));
  // [0] decode entry point, [1] tiled reference, [2] reference over all kMaxTokens tokens.
  DeviceBuffer<__nv_bfloat16> q_latent[3] = {DeviceBuffer<__nv_bfloat16>(kMaxTokens * q_latent_per_token),
                                             DeviceBuffer<__nv_bfloat16>(kMaxTokens * q_latent_per_token),
                                             DeviceBuffer<__nv_bfloat16>(kMaxTokens * q_latent_per_token)};
  DeviceBuffer<__nv_bfloat16> out[3] = {DeviceBuffer<__nv_bfloat16>(kMaxTokens * out_per_token),
                                        DeviceBuffer<__nv_bfloat16>(kMaxTokens * out_per_token),
                                        DeviceBuffer<__nv_bfloat16>(kMaxTokens * out_per_token)};

  MlaKvBWeights weights;
  weights.num_heads = c.heads;
  weights.nope_dim = c.nope;
  weights.v_dim = c.v;
  weights.kv_lora_dim = c.kv_lora;
  for (int use_fp8 = 0; use_fp8 < 2; ++use_fp8) {
    weights.is_fp8 = use_fp8 == 1;
    weights.weight = use_fp8 ? static_cast<const void*>(w_fp8.data()) : static_cast<const void*>(w_bf16.data());
    weights.scale_inv = use_fp8 ? w_scale.data() : nullptr;
    q_latent[2].fill_bytes(0xff);
    out[2].fill_bytes(0xff);
    kernels::cuda::mla_absorb_query_reference(q_device.data(), q_stride, kMaxTokens, weights, q_latent[2].data(),
                                              nullptr);
    kernels::cuda::mla_project_values_reference(latent_device.data(), kMaxTokens, weights, out[2].data(), nullptr);
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<__nv_bfloat16> q_latent_full = q_latent[2].download(), out_full = out[2].download();
    for (int32_t tokens : kTokenCounts) {
      const std::string what =
          std::string(use_fp8 ? "fp8" : "bf16") + " weights, " + std::to_string(tokens) + " tokens";
      const bool expect_decode = c.decode_path && use_fp8 == 1 && tokens <= 32;  // mla_absorb.cu's policy
      EXPECT_EQ(kernels::cuda::mla_absorb_query_uses_decode_kernel(q_device.data(), q_stride, tokens, weights,
                                                                   q_latent[0].data()),
                expect_decode)
          << what;
      EXPECT_EQ(kernels::cuda::mla_project_values_uses_decode_kernel(latent_device.data(), tokens, weights,
                                                                     out[0].data()),
                expect_decode)
          << what;
      for (int i = 0; i < 2; ++i) {
        q_latent[i].fill_bytes(0xff);
        out[i].fill_bytes(0xff);
      }
      kernels::cuda::mla_absorb_query(q_device.data(), q_stride, tokens, weights, q_latent[0].data(), nullptr);
      kernels::cuda::mla_absorb_query_reference(q_device.data(), q_stride, tokens, weights, q_latent[1].data(),
                                                nullptr);
      kernels::cuda::mla_project_values(latent_device.data(), tokens, weights, out[0].data(), nullptr);
      kernels::cuda::mla_project_values_reference(latent_device.data(), tokens, weights, out[1].data(), nullptr);
      FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
      expect_same_bits(q_latent[0].download(), q_latent[1].download(), q_latent_full, tokens * q_latent_per_token,
                       "absorb_query, " + what);
      expect_same_bits(out[0].download(), out[1].download(), out_full, tokens * out_per_token,
                       "project_values, " + what);
    }
  }
}

// q_nope_settled lets the decode kernel read q_nope before its wait. Each run writes
// q_nope two launches back (alternating between two inputs, so a read before that copy finished would see the other
// input's values) and fills q_latent with poison in the launch just before (so a store before the wait could be
// overwritten); every run must give the plain launch's bits.
TEST(MlaAbsorb, SettledQueryInProgrammaticChain) {
  FATHOM_REQUIRE_GPU();
  for (const int32_t heads : {128, 16}) {
    constexpr int32_t kNope = 128, kRope = 64, kV = 128, kLora = 512, kMaxTokens = 32;
    std::mt19937 rng(static_cast<uint32_t>(heads));
    const int64_t rows = static_cast<int64_t>(heads) * (kNope + kV);
    const Fp8Weights fp8 =
        quantize_fp8(round_to_bf16(random_normal(rng, static_cast<size_t>(rows * kLora), 0.05f)), rows, kLora);
    DeviceBuffer<uint8_t> w_fp8(fp8.bits);
    DeviceBuffer<float> w_scale(fp8.scale_inv);
    const MlaKvBWeights weights = v3_fp8_kv_b(w_fp8.data(), w_scale.data(), heads);
    const size_t q_elems = static_cast<size_t>(kMaxTokens) * heads * (kNope + kRope);
    const size_t latent_elems = static_cast<size_t>(kMaxTokens) * heads * kLora;
    DeviceBuffer<__nv_bfloat16> sources[2] = {
        DeviceBuffer<__nv_bfloat16>(float_to_bf16_vector(round_to_bf16(random_normal(rng, q_elems)))),
        DeviceBuffer<__nv_bfloat16>(float_to_bf16_vector(round_to_bf16(random_normal(rng, q_elems))))};
    DeviceBuffer<__nv_bfloat16> q(q_elems), q_latent(latent_elems), poison(latent_elems);
    poison.fill_bytes(0xff);
    cudaStream_t stream;
    FATHOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (const int32_t tokens : {1, 5, 16, 32}) {
      SCOPED_TRACE(std::to_string(heads) + " heads, " + std::to_string(tokens) + " tokens");
      ASSERT_TRUE(kernels::cuda::mla_absorb_query_uses_decode_kernel(q.data(), kNope + kRope, tokens, weights,
                                                                     q_latent.data()));
      const size_t written = static_cast<size_t>(tokens) * heads * kLora;
      std::vector<uint16_t> expected[2];
      for (int i = 0; i < 2; ++i) {
        q_latent.fill_bytes(0xff);
        kernels::cuda::mla_absorb_query(sources[i].data(), kNope + kRope, tokens, weights, q_latent.data(), nullptr);
        FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
        expected[i] = bf16_bits(q_latent.download(), written);
        ASSERT_EQ(std::count(expected[i].begin(), expected[i].end(), uint16_t{0xffff}), 0);
      }
      ASSERT_NE(expected[0], expected[1]);
      for (int run = 0; run < 12; ++run) {
        programmatic_copy(sources[run % 2].data(), q.data(), q.bytes(), stream);          // two launches back
        programmatic_copy(poison.data(), q_latent.data(), q_latent.bytes(), stream);      // the previous launch
        kernels::cuda::mla_absorb_query(q.data(), kNope + kRope, tokens, weights, q_latent.data(), stream,
                                        /*q_nope_settled=*/true);
        FATHOM_CUDA_CHECK(cudaStreamSynchronize(stream));
        const std::vector<uint16_t> got = bf16_bits(q_latent.download(), written);
        const int64_t diff = first_mismatch(got, expected[run % 2]);
        ASSERT_EQ(diff, -1) << "run " << run << ": first difference at element " << diff;
      }
    }
    FATHOM_CUDA_CHECK(cudaStreamDestroy(stream));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MlaAbsorbDecodeBits,
    ::testing::Values(BitsCase{"v3", 128, 128, 64, 128, 512, true},
                      BitsCase{"v3_tp8_16heads", 16, 128, 64, 128, 512, true},
                      // k not a multiple of 64 (zero-padded steps), n % 32 == 16 (half-empty W_UK warps), a CTA
                      // with idle warps (v = 80)
                      BitsCase{"tails_h3_nope48_v80_lora208", 3, 48, 16, 80, 208, true},
                      BitsCase{"odd_h3_nope37_v29_lora99", 3, 37, 11, 29, 99, false},
                      BitsCase{"odd_h5_nope16_v24_lora200", 5, 16, 8, 24, 200, false},
                      BitsCase{"odd_h2_nope130_v70_lora257", 2, 130, 64, 70, 257, false}),
    [](const ::testing::TestParamInfo<BitsCase>& info) { return info.param.name; });

}  // namespace
}  // namespace fathom::testing
