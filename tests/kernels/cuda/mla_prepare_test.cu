// The fused MLA preparation (latent RMSNorm + RoPE of q_pe and k_pe + latent-cache write) vs the unfused
// rms_norm_bf16 + apply_rope_bf16 + mla_write_kv_cache sequence it replaces: bit for bit on q, kv_a and the whole
// cache pool (addressed rows written, every other row untouched).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/mla/mla_kv_cache_write.h"
#include "kernels/cuda/mla/mla_prepare.h"
#include "kernels/cuda/norm/rms_norm.h"
#include "kernels/cuda/rope/rope.h"
#include "mla_test_util.h"

namespace fathom::testing {
namespace {

using kernels::cuda::LatentCacheView;
using kernels::cuda::MlaKvCacheWriteArgs;
using kernels::cuda::MlaPrepareArgs;
using kernels::cuda::RopeParams;
using kernels::cuda::RopeTarget;

constexpr float kEps = 1e-6f;
constexpr float kAttentionFactor = 1.3f;  // != 1, so the cos/sin scaling is exercised
constexpr uint16_t kPoison = 0xffff;      // fill_bytes(0xff): NaN in bf16

struct PrepareCase {
  std::string name;
  int32_t heads, nope, rope, kv_lora;
  int32_t kv_a_pad;       // extra elements per kv_a row (strided, possibly unaligned rows)
  int32_t page_size;
  bool interleaved;
  int32_t table_positions;  // rows of the cos/sin table; 0: no table (cos/sin computed in the kernel)
  bool pad_before = false;  // the padding precedes each kv_a row (the model's last 576 of 2112), else follows it
};

bool same_bits(const std::vector<__nv_bfloat16>& a, const std::vector<__nv_bfloat16>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(__nv_bfloat16)) == 0;
}

uint16_t bits_of(__nv_bfloat16 value) {
  uint16_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// Positions: 0 twice (a repeat) first, then, shuffled among random ones on both sides of the table's end, its last
// row, the first row past it, one far past it and a negative one (the last three computed, never read from it).
std::vector<int32_t> make_positions(std::mt19937& rng, int32_t tokens, int32_t table_positions) {
  const int32_t edge = table_positions > 0 ? table_positions : 4096;
  std::vector<int32_t> positions = {0, 0, edge - 1, edge, 200000, -3};
  std::uniform_int_distribution<int32_t> pick(0, 2 * edge);
  while (static_cast<int32_t>(positions.size()) < tokens) positions.push_back(pick(rng));
  positions.resize(static_cast<size_t>(tokens));
  std::shuffle(positions.begin() + std::min<int32_t>(tokens, 2), positions.end(), rng);  // keep 0, 0 at the front
  return positions;
}

std::vector<float> make_inv_freq(int32_t rope) {
  std::vector<float> inv_freq(static_cast<size_t>(rope / 2));
  for (int32_t i = 0; i < rope / 2; ++i) inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / rope));
  return inv_freq;
}

void check_prepare(const PrepareCase& c, int32_t tokens) {
  SCOPED_TRACE(::testing::Message() << c.name << ", tokens " << tokens);
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>{}(c.name)) + static_cast<uint32_t>(tokens));
  const int64_t qk = c.nope + c.rope, row = c.kv_lora + c.rope, stride = row + c.kv_a_pad;
  const int64_t lead = c.pad_before ? c.kv_a_pad : 0;  // kv_a row t: elements [t * stride + lead, + row)
  const int32_t num_pages = (tokens + tokens / 2) / c.page_size + 2;
  const int64_t num_slots = static_cast<int64_t>(num_pages) * c.page_size;

  const std::vector<__nv_bfloat16> q_host =
      float_to_bf16_vector(random_normal(rng, static_cast<size_t>(tokens * c.heads * qk)));
  const std::vector<__nv_bfloat16> kv_a_host =
      float_to_bf16_vector(random_normal(rng, static_cast<size_t>(tokens * stride), 2.0f));
  std::vector<float> weight = random_normal(rng, static_cast<size_t>(c.kv_lora), 0.3f);
  for (float& w : weight) w += 1.0f;
  const std::vector<int32_t> positions = make_positions(rng, tokens, c.table_positions);
  std::vector<int32_t> all_slots(static_cast<size_t>(num_slots));
  std::iota(all_slots.begin(), all_slots.end(), 0);
  std::shuffle(all_slots.begin(), all_slots.end(), rng);
  std::vector<int32_t> slots(all_slots.begin(), all_slots.begin() + tokens);
  if (tokens > 2) slots[1] = -1;                                // a padding token: no cache write
  if (tokens > 6) slots[6] = static_cast<int32_t>(num_slots);  // past the pool: skipped as well

  DeviceBuffer<__nv_bfloat16> weight_device(float_to_bf16_vector(weight));
  DeviceBuffer<int32_t> positions_device(positions), slots_device(slots);
  DeviceBuffer<float> inv_freq_device(make_inv_freq(c.rope));
  const RopeParams computed{inv_freq_device.data(), c.rope, kAttentionFactor, c.interleaved};

  // Unfused reference.
  DeviceBuffer<__nv_bfloat16> q_ref(q_host), kv_a_ref(kv_a_host), pool_ref(static_cast<size_t>(num_slots * row));
  pool_ref.fill_bytes(0xff);
  __nv_bfloat16* const kv_a_ref_rows = kv_a_ref.data() + lead;
  kernels::cuda::rms_norm_bf16(kv_a_ref_rows, stride, tokens, c.kv_lora, weight_device.data(), kEps, kv_a_ref_rows,
                               stride, nullptr);
  const RopeTarget targets[2] = {{q_ref.data() + c.nope, c.heads, qk}, {kv_a_ref_rows + c.kv_lora, 1, stride}};
  kernels::cuda::apply_rope_bf16(targets, 2, tokens, positions_device.data(), computed, nullptr);
  const MlaKvCacheWriteArgs write{kv_a_ref_rows, stride, kv_a_ref_rows + c.kv_lora, stride, slots_device.data(),
                                  tokens};
  kernels::cuda::mla_write_kv_cache(write, {pool_ref.data(), num_pages, c.page_size, c.kv_lora, c.rope}, nullptr);

  // Fused, with the cos/sin table when the case has one (poisoned first: every entry must be written).
  DeviceBuffer<__nv_bfloat16> q(q_host), kv_a(kv_a_host), pool(static_cast<size_t>(num_slots * row));
  pool.fill_bytes(0xff);
  RopeParams params = computed;
  DeviceBuffer<float> table(static_cast<size_t>(c.table_positions) * c.rope);
  if (c.table_positions > 0) {
    table.fill_bytes(0xff);
    kernels::cuda::rope_build_cos_sin_table(computed, c.table_positions, table.data(), nullptr);
    params.cos_sin = table.data();
    params.max_positions = c.table_positions;
  }
  MlaPrepareArgs args;
  args.q_pe = RopeTarget{q.data() + c.nope, c.heads, qk};
  args.kv_a = kv_a.data() + lead;
  args.kv_a_token_stride = stride;
  args.latent_norm_weight = weight_device.data();
  args.eps = kEps;
  args.positions = positions_device.data();
  args.slots = slots_device.data();
  args.num_tokens = tokens;
  kernels::cuda::mla_prepare_qkv(args, params, {pool.data(), num_pages, c.page_size, c.kv_lora, c.rope}, nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());

  const std::vector<__nv_bfloat16> q_got = q.download(), kv_a_got = kv_a.download(), pool_got = pool.download();
  EXPECT_TRUE(same_bits(q_ref.download(), q_got)) << "q";
  EXPECT_TRUE(same_bits(kv_a_ref.download(), kv_a_got)) << "kv_a";
  EXPECT_TRUE(same_bits(pool_ref.download(), pool_got)) << "cache pool";
  if (c.table_positions > 0) EXPECT_TRUE(all_finite(table.download())) << "table entries left unwritten";

  // Independent of the reference: q's nope parts and kv_a's padding untouched, written cache rows finite and equal to
  // the token's kv_a row, every other row still poisoned.
  int64_t nope_changed = 0, pad_changed = 0;
  for (int64_t v = 0; v < static_cast<int64_t>(tokens) * c.heads; ++v)
    for (int64_t i = 0; i < c.nope; ++i) nope_changed += bits_of(q_got[v * qk + i]) != bits_of(q_host[v * qk + i]);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < stride; ++i)
      if (i < lead || i >= lead + row)
        pad_changed += bits_of(kv_a_got[t * stride + i]) != bits_of(kv_a_host[t * stride + i]);
  EXPECT_EQ(nope_changed, 0);
  EXPECT_EQ(pad_changed, 0);
  std::vector<int32_t> writer(static_cast<size_t>(num_slots), -1);
  for (int32_t t = 0; t < tokens; ++t)
    if (slots[t] >= 0 && slots[t] < num_slots) writer[slots[t]] = t;
  int64_t bad_rows = 0;
  for (int64_t s = 0; s < num_slots; ++s) {
    const __nv_bfloat16* cached = pool_got.data() + s * row;
    bool ok = true;
    for (int64_t i = 0; i < row; ++i) {
      if (writer[s] < 0) {
        ok = ok && bits_of(cached[i]) == kPoison;
      } else {
        const float value = __bfloat162float(cached[i]);
        ok = ok && std::isfinite(value) && bits_of(cached[i]) == bits_of(kv_a_got[writer[s] * stride + lead + i]);
      }
    }
    bad_rows += !ok;
  }
  EXPECT_EQ(bad_rows, 0);
}

class MlaPrepareSweep : public ::testing::TestWithParam<PrepareCase> {};

TEST_P(MlaPrepareSweep, MatchesUnfusedNormRopeCacheWriteBitForBit) {
  FATHOM_REQUIRE_GPU();
  for (int32_t tokens : {1, 2, 7, 64, 300}) check_prepare(GetParam(), tokens);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MlaPrepareSweep,
    ::testing::Values(
        // DeepSeek-V3 dims (128 heads, nope 128, rope 64, kv_lora 512), a table over the full 163840 positions.
        PrepareCase{"v3_interleaved_page64_table", 128, 128, 64, 512, 0, 64, true, 163840},
        // kv_a as the model reads it: the last 576 of each 2112-wide row of the fused q_a + kv_a output.
        PrepareCase{"v3_kv_a_rows_of_qkv_a_page64_table", 128, 128, 64, 512, 1536, 64, true, 163840, true},
        PrepareCase{"v3_tp8_16heads_split_page1_table", 16, 128, 64, 512, 0, 1, false, 4096},
        PrepareCase{"v3_tp8_16heads_page16_no_table", 16, 128, 64, 512, 0, 16, true, 0},
        PrepareCase{"small_h1_lora32_rope16_page16", 1, 16, 16, 32, 0, 16, true, 4096},
        PrepareCase{"small_h16_lora64_rope16_split_page5", 16, 16, 16, 64, 0, 5, false, 4096},
        PrepareCase{"rope256_nope0_split_page4", 2, 0, 256, 64, 0, 4, false, 1000},
        // Scalar paths: odd rope / lora, unaligned kv_a rows.
        PrepareCase{"odd_h3_nope5_lora99_rope6_page5", 3, 5, 6, 99, 3, 5, true, 4096},
        PrepareCase{"odd_h4_lora40_rope8_split_unaligned_stride", 4, 8, 8, 40, 1, 16, false, 4096},
        PrepareCase{"odd_h5_lora64_rope16_unaligned_q", 5, 37, 16, 64, 0, 7, true, 0},
        // Norms over several warps (blocks above 128 threads), a partial last vector, the widest kv_lora.
        PrepareCase{"wide_h2_lora4100_rope32_page3", 2, 32, 32, 4100, 4, 3, true, 4096},
        PrepareCase{"wide_h8_lora16384_rope64_page16", 8, 128, 64, 16384, 0, 16, true, 4096}),
    [](const ::testing::TestParamInfo<PrepareCase>& info) { return info.param.name; });

TEST(MlaPrepare, RejectsBadArguments) {
  FATHOM_REQUIRE_GPU();
  DeviceBuffer<__nv_bfloat16> q(64), kv_a(64), weight(32), pool(64);
  DeviceBuffer<int32_t> ints(std::vector<int32_t>(4, 0));  // positions and slots
  DeviceBuffer<float> inv_freq(8);
  // The accepted call reads real numbers.
  for (DeviceBuffer<__nv_bfloat16>* buffer : {&q, &kv_a, &weight, &pool}) buffer->fill_bytes(0);
  inv_freq.fill_bytes(0);
  MlaPrepareArgs args;
  args.q_pe = RopeTarget{q.data(), 1, 16};
  args.kv_a = kv_a.data();
  args.kv_a_token_stride = 48;
  args.latent_norm_weight = weight.data();
  args.positions = ints.data();
  args.slots = ints.data();
  args.num_tokens = 1;
  const RopeParams rope{inv_freq.data(), 16, 1.0f, true};
  const LatentCacheView cache{pool.data(), 1, 1, 32, 16};
  EXPECT_NO_THROW(kernels::cuda::mla_prepare_qkv(args, rope, cache, nullptr));
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_THROW(kernels::cuda::mla_prepare_qkv(args, rope, {pool.data(), 1, 1, 32, 8}, nullptr), Error);  // rope dims
  MlaPrepareArgs bad = args;
  bad.kv_a_token_stride = 16392 + 16;
  EXPECT_THROW(kernels::cuda::mla_prepare_qkv(bad, rope, {pool.data(), 1, 1, 16392, 16}, nullptr), Error);  // too wide
  RopeParams no_rows = rope;
  no_rows.cos_sin = inv_freq.data();
  EXPECT_THROW(kernels::cuda::mla_prepare_qkv(args, no_rows, cache, nullptr), Error);  // table without rows
  bad = args;
  bad.slots = nullptr;
  EXPECT_THROW(kernels::cuda::mla_prepare_qkv(bad, rope, cache, nullptr), Error);
  bad = args;
  bad.kv_a_token_stride = 47;
  EXPECT_THROW(kernels::cuda::mla_prepare_qkv(bad, rope, cache, nullptr), Error);
  bad = args;
  bad.q_pe.vector_stride = 15;
  EXPECT_THROW(kernels::cuda::mla_prepare_qkv(bad, rope, cache, nullptr), Error);
}

}  // namespace
}  // namespace fathom::testing
