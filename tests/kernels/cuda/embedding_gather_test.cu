// GPU embedding gather: exact row copies, out-of-range ids clamped and flagged, never read out of bounds.
#include <cstring>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/embedding/embedding.h"

namespace fathom::kernels::cuda {
namespace {

// Table entries are a cheap hash of their position (the V3 table has 926M of them), as raw bf16 bits.
std::vector<uint16_t> hashed_table(int64_t vocab, int64_t hidden, uint32_t seed) {
  std::vector<uint16_t> table(static_cast<size_t>(vocab * hidden));
  uint64_t state = seed;
  for (uint16_t& v : table) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<uint16_t>(0x3c00 + ((state >> 48) & 0x7ff)) ^ static_cast<uint16_t>((state >> 40) & 0x8000);
  }
  return table;
}

void check_embedding(int64_t vocab, int64_t hidden, std::vector<int32_t> ids, bool expect_flag, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "vocab " << vocab << " hidden " << hidden << " tokens " << ids.size());
  const std::vector<uint16_t> table = hashed_table(vocab, hidden, seed);
  DeviceBuffer<uint16_t> d_table(table);
  DeviceBuffer<int32_t> d_ids(ids);
  DeviceBuffer<__nv_bfloat16> d_out(ids.size() * static_cast<size_t>(hidden));
  DeviceBuffer<int32_t> d_flag(std::vector<int32_t>{0});
  d_out.fill_bytes(0xff);
  embedding_gather_bf16(reinterpret_cast<const __nv_bfloat16*>(d_table.data()), vocab, hidden, d_ids.data(),
                        static_cast<int64_t>(ids.size()), d_out.data(), d_flag.data(), nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<__nv_bfloat16> out = d_out.download();
  int64_t bad_rows = 0;
  for (size_t t = 0; t < ids.size(); ++t) {
    const int64_t row = std::clamp<int64_t>(ids[t], 0, vocab - 1);
    bad_rows += std::memcmp(out.data() + t * hidden, table.data() + row * hidden, static_cast<size_t>(hidden) * 2) != 0;
  }
  EXPECT_EQ(bad_rows, 0);
  EXPECT_EQ(d_flag.download()[0], expect_flag ? 1 : 0);
}

std::vector<int32_t> random_ids(std::mt19937& rng, size_t count, int64_t vocab) {
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(count);
  for (int32_t& id : ids) id = pick(rng);
  return ids;
}

TEST(CudaEmbedding, DeepSeekV3Table) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(1);
  const int64_t vocab = 129280, hidden = 7168;
  std::vector<int32_t> ids = random_ids(rng, 300, vocab);
  ids[0] = 0;
  ids[1] = static_cast<int32_t>(vocab - 1);
  check_embedding(vocab, hidden, ids, false, 1);
  check_embedding(vocab, hidden, {12345}, false, 2);
}

TEST(CudaEmbedding, OutOfRangeIdsAreClampedAndFlagged) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(2);
  std::vector<int32_t> ids = random_ids(rng, 40, 1000);
  ids[3] = -1;
  ids[7] = 1000;
  ids[8] = 2147483647;
  ids[9] = -2147483647 - 1;
  check_embedding(1000, 256, ids, true, 3);
  check_embedding(1000, 256, {5000}, true, 4);
}

TEST(CudaEmbedding, OddHiddenSizes) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(3);
  for (int64_t hidden : {1, 7, 100, 1030}) check_embedding(77, hidden, random_ids(rng, 13, 77), false, 5);
}

TEST(CudaEmbedding, NullFlagIsAllowed) {
  FATHOM_REQUIRE_GPU();
  DeviceBuffer<uint16_t> table(std::vector<uint16_t>(16 * 8, 0x3f80));
  DeviceBuffer<int32_t> ids(std::vector<int32_t>{-3, 20});
  DeviceBuffer<__nv_bfloat16> out(16);
  out.fill_bytes(0xff);
  embedding_gather_bf16(reinterpret_cast<const __nv_bfloat16*>(table.data()), 16, 8, ids.data(), 2, out.data(), nullptr,
                        nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  for (float v : testing::bf16_to_float_vector(out.download())) EXPECT_EQ(v, 1.0f);
}

}  // namespace
}  // namespace fathom::kernels::cuda
