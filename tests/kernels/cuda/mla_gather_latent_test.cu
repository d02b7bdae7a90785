// Gathering cached latent rows by slot on the GPU against a host gather (exact copies), incl. odd widths.
#include <cuda_bf16.h>

#include "cuda_test_util.h"
#include "kernels/cuda/mla/mla_gather_latent.h"

namespace fathom::kernels::cuda {
namespace {

TEST(MlaGatherLatent, CopiesTheLatentPartOfEachSlot) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(5);
  for (auto [kv_lora, rope, num_slots, num_rows] : std::vector<std::tuple<int, int, int, int>>{
           {512, 64, 1000, 1}, {512, 64, 300, 257}, {96, 16, 50, 33}, {20, 6, 9, 40}}) {
    const int row_elems = kv_lora + rope;
    std::vector<float> pool = fathom::testing::round_to_bf16(fathom::testing::random_normal(rng, static_cast<size_t>(num_slots) * row_elems));
    DeviceBuffer<__nv_bfloat16> pool_device(fathom::testing::float_to_bf16_vector(pool));
    std::vector<int32_t> slots(static_cast<size_t>(num_rows));
    std::uniform_int_distribution<int32_t> pick(0, num_slots - 1);
    for (int32_t& slot : slots) slot = pick(rng);
    slots.back() = num_slots - 1;  // last slot of the pool
    DeviceBuffer<int32_t> slots_device(slots);
    DeviceBuffer<__nv_bfloat16> out(static_cast<size_t>(num_rows) * kv_lora);
    out.fill_bytes(0xff);
    LatentCacheView cache{pool_device.data(), num_slots, 1, kv_lora, rope};
    mla_gather_latent(cache, slots_device.data(), num_rows, out.data(), nullptr);
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> gathered = fathom::testing::bf16_to_float_vector(out.download());
    for (int r = 0; r < num_rows; ++r)
      for (int i = 0; i < kv_lora; ++i)
        ASSERT_EQ(gathered[static_cast<size_t>(r) * kv_lora + i], pool[static_cast<size_t>(slots[r]) * row_elems + i])
            << "kv_lora " << kv_lora << " row " << r << " i " << i;
  }
}

}  // namespace
}  // namespace fathom::kernels::cuda
