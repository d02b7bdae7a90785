// Writing new tokens' rows into the paged latent cache: exactly the addressed rows change, bit-exact.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/mla/mla_kv_cache_write.h"
#include "mla_test_util.h"

namespace fathom::testing {
namespace {

struct WriteCase {
  std::string name;
  int32_t kv_lora, rope, page_size, num_pages, num_tokens;
  int32_t input_pad;  // extra elements per input token row (strided inputs)
};

class MlaKvCacheWriteSweep : public ::testing::TestWithParam<WriteCase> {};

TEST_P(MlaKvCacheWriteSweep, WritesAddressedRowsOnly) {
  FATHOM_REQUIRE_GPU();
  const WriteCase& c = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>{}(c.name)));
  const int64_t row = c.kv_lora + c.rope, num_slots = static_cast<int64_t>(c.num_pages) * c.page_size;
  // Inputs as one fused buffer [tokens, kv_lora + rope + pad]: latent at 0, k_pe at kv_lora (strided views).
  const int64_t stride = row + c.input_pad;
  const std::vector<__nv_bfloat16> input = float_to_bf16_vector(random_normal(rng, static_cast<size_t>(c.num_tokens * stride)));
  std::vector<int32_t> all_slots(static_cast<size_t>(num_slots));
  std::iota(all_slots.begin(), all_slots.end(), 0);
  std::shuffle(all_slots.begin(), all_slots.end(), rng);
  std::vector<int32_t> slots(all_slots.begin(), all_slots.begin() + c.num_tokens);
  if (c.num_tokens > 2) slots[1] = -1;  // a padding token: skipped

  std::vector<__nv_bfloat16> pool_before(static_cast<size_t>(num_slots * row));
  for (size_t i = 0; i < pool_before.size(); ++i) pool_before[i] = __ushort_as_bfloat16(static_cast<uint16_t>(i * 2654435761u >> 7));
  DeviceBuffer<__nv_bfloat16> pool(pool_before), input_device(input);
  DeviceBuffer<int32_t> slots_device(slots);
  kernels::cuda::MlaKvCacheWriteArgs args;
  args.latent = input_device.data();
  args.latent_token_stride = stride;
  args.k_pe = input_device.data() + c.kv_lora;
  args.k_pe_token_stride = stride;
  args.slots = slots_device.data();
  args.num_tokens = c.num_tokens;
  kernels::cuda::mla_write_kv_cache(args, {pool.data(), c.num_pages, c.page_size, c.kv_lora, c.rope}, nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<__nv_bfloat16> pool_after = pool.download();

  std::vector<__nv_bfloat16> expected = pool_before;
  for (int32_t t = 0; t < c.num_tokens; ++t)
    if (slots[t] >= 0) std::copy_n(input.data() + t * stride, row, expected.data() + slots[t] * row);
  ASSERT_EQ(0, std::memcmp(expected.data(), pool_after.data(), expected.size() * sizeof(__nv_bfloat16)));
}

INSTANTIATE_TEST_SUITE_P(Shapes, MlaKvCacheWriteSweep,
                         ::testing::Values(WriteCase{"v3_page64_packed", 512, 64, 64, 9, 300, 0},
                                           WriteCase{"v3_page1_strided", 512, 64, 1, 700, 513, 8},
                                           WriteCase{"v3_page16_one_token", 512, 64, 16, 4, 1, 0},
                                           WriteCase{"odd_lora99_rope13_page5", 99, 13, 5, 31, 77, 3},
                                           WriteCase{"odd_lora40_rope8_page16_unaligned_stride", 40, 8, 16, 6, 50, 1}),
                         [](const ::testing::TestParamInfo<WriteCase>& info) { return info.param.name; });

}  // namespace
}  // namespace fathom::testing
