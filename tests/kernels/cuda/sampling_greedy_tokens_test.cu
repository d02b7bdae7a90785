// GPU greedy decoding (greedy_tokens): the argmax with the lowest index on ties and its log_softmax, against the CPU,
// and bit for bit what sample_tokens gives the same rows as greedy rows, alone, in batches of any size and beside
// sampled rows (a request's greedy result must not depend on its batch).
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/sampling/greedy_tokens.h"
#include "kernels/cuda/sampling/sampling.h"
#include "sampling_reference.h"

namespace fathom::kernels::cuda {
namespace {

struct Outputs {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

// Both outputs in 0xff-poisoned buffers with a guard entry past the batch that must stay poisoned.
Outputs run_greedy(const std::vector<float>& logits, int64_t rows, int64_t vocab, bool with_logprobs) {
  DeviceBuffer<float> d_logits(logits);
  DeviceBuffer<int32_t> d_tokens(static_cast<size_t>(rows + 1));
  DeviceBuffer<float> d_logprobs(static_cast<size_t>(rows + 1));
  d_tokens.fill_bytes(0xff);
  d_logprobs.fill_bytes(0xff);
  greedy_tokens(d_logits.data(), rows, vocab, d_tokens.data(), with_logprobs ? d_logprobs.data() : nullptr, nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  Outputs out{d_tokens.download(), d_logprobs.download()};
  EXPECT_EQ(out.tokens[rows], -1) << "token written past the batch";
  out.tokens.resize(static_cast<size_t>(rows));
  for (size_t r = 0; r <= static_cast<size_t>(rows); ++r) {
    uint32_t bits;
    std::memcpy(&bits, &out.logprobs[r], sizeof(bits));
    if (r == static_cast<size_t>(rows) || !with_logprobs) EXPECT_EQ(bits, 0xffffffffu) << "logprob " << r << " written";
  }
  out.logprobs.resize(static_cast<size_t>(rows));
  return out;
}

// sample_tokens with per-row temperatures (0: greedy; rows of top_k 1 are greedy too) and top_p 0.9.
Outputs run_sampler(const std::vector<float>& logits, int64_t rows, int64_t vocab,
                    const std::vector<float>& temperature, const std::vector<int32_t>& top_k = {}) {
  DeviceBuffer<float> d_logits(logits), d_temperature(temperature);
  DeviceBuffer<int32_t> d_top_k(top_k.empty() ? std::vector<int32_t>(static_cast<size_t>(rows), 0) : top_k);
  DeviceBuffer<float> d_top_p(std::vector<float>(static_cast<size_t>(rows), 0.9f));
  DeviceBuffer<uint64_t> d_seed(std::vector<uint64_t>(static_cast<size_t>(rows), 7));
  DeviceBuffer<int32_t> d_tokens(static_cast<size_t>(rows));
  DeviceBuffer<float> d_logprobs(static_cast<size_t>(rows));
  d_tokens.fill_bytes(0xff);
  d_logprobs.fill_bytes(0xff);
  SamplingParams params;
  params.temperature = d_temperature.data();
  params.top_p = d_top_p.data();
  params.top_k = d_top_k.data();
  params.seed = d_seed.data();
  sample_tokens(d_logits.data(), rows, vocab, params, d_tokens.data(), d_logprobs.data(), nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  return Outputs{d_tokens.download(), d_logprobs.download()};
}

uint32_t bits_of(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

// Row kinds: random, a tie at the maximum in different blocks, all equal, NaNs, a maximum at the last element, an
// element of -inf, a row of -inf but one, a row of -inf only (logprob NaN, token 0), +inf, FLT_MAX.
std::vector<float> make_row(std::mt19937& rng, int64_t vocab, int kind) {
  std::vector<float> row = testing::random_normal(rng, static_cast<size_t>(vocab), 3.0f);
  std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
  switch (kind % 10) {
    case 1:
      row[static_cast<size_t>(vocab - 1)] = 40.0f;
      row[static_cast<size_t>(vocab / 3)] = 40.0f;
      row[static_cast<size_t>(vocab / 2)] = 40.0f;
      break;
    case 2:
      std::fill(row.begin(), row.end(), 0.25f);
      break;
    case 3:
      for (int n = 0; n < 5; ++n) row[static_cast<size_t>(pick(rng))] = NAN;
      row[0] = NAN;
      break;
    case 4:
      row[static_cast<size_t>(vocab - 1)] = 30.0f;
      break;
    case 5:
      row[static_cast<size_t>(pick(rng))] = -INFINITY;
      break;
    case 6:
      std::fill(row.begin(), row.end(), -INFINITY);
      row[static_cast<size_t>(pick(rng))] = -3.0f;
      break;
    case 7:
      std::fill(row.begin(), row.end(), -INFINITY);
      break;
    case 8:
      row[static_cast<size_t>(pick(rng))] = INFINITY;
      break;
    case 9:
      row[static_cast<size_t>(pick(rng))] = 3.4e38f;
      break;
    default:
      break;
  }
  return row;
}

TEST(CudaGreedyTokens, ArgmaxAndLogprobMatchTheCpuAndTheSamplerBitForBit) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(11);
  // 1; below, at and past one block's slice; past a register batch (8 x 512 x 16); the V3 vocabulary; the largest.
  for (int64_t vocab : {1, 7, 511, 4096, 4097, 65537, 129280, 393216}) {
    SCOPED_TRACE(::testing::Message() << "vocab " << vocab);
    const int64_t rows = vocab >= 129280 ? 12 : 23;
    std::vector<float> logits;
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<float> row = make_row(rng, vocab, static_cast<int>(r));
      logits.insert(logits.end(), row.begin(), row.end());
    }
    const Outputs greedy = run_greedy(logits, rows, vocab, true);
    const Outputs sampler = run_sampler(logits, rows, vocab, std::vector<float>(static_cast<size_t>(rows), 0.0f));
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = logits.data() + r * vocab;
      const int64_t expected = cpu_argmax(row, vocab);
      EXPECT_EQ(greedy.tokens[r], expected) << "row " << r;
      EXPECT_EQ(greedy.tokens[r], sampler.tokens[r]) << "row " << r;
      EXPECT_EQ(bits_of(greedy.logprobs[r]), bits_of(sampler.logprobs[r]))
          << "row " << r << ": " << greedy.logprobs[r] << " vs the sampler's " << sampler.logprobs[r];
      const double reference = cpu_logprob(row, vocab, expected);
      if (std::isfinite(reference)) EXPECT_NEAR(greedy.logprobs[r], reference, 1e-4) << "row " << r;
    }
  }
}

TEST(CudaGreedyTokens, SameBitsAloneInAnyBatchAndBesideSampledRows) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(12);
  const int64_t vocab = 129280, rows = 37;
  std::vector<float> logits;
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> row = make_row(rng, vocab, static_cast<int>(r % 3 == 0 ? 0 : r));
    logits.insert(logits.end(), row.begin(), row.end());
  }
  const Outputs batch = run_greedy(logits, rows, vocab, true);
  std::vector<float> temperature(static_cast<size_t>(rows), 0.0f);
  std::vector<int32_t> top_k(static_cast<size_t>(rows), 0);
  for (size_t r = 1; r < temperature.size(); r += 2) temperature[r] = 0.8f;  // odd rows sampled
  for (size_t r = 0; r < temperature.size(); r += 4) {  // every other even row greedy by top_k 1 at a temperature
    temperature[r] = 0.8f;
    top_k[r] = 1;
  }
  const Outputs mixed = run_sampler(logits, rows, vocab, temperature, top_k);
  const Outputs without_logprobs = run_greedy(logits, rows, vocab, false);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> row(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
    const Outputs alone = run_greedy(row, 1, vocab, true);
    EXPECT_EQ(batch.tokens[r], alone.tokens[0]) << "row " << r;
    EXPECT_EQ(bits_of(batch.logprobs[r]), bits_of(alone.logprobs[0])) << "row " << r;
    EXPECT_EQ(without_logprobs.tokens[r], batch.tokens[r]) << "row " << r;
    if (r % 2 == 0) {
      EXPECT_EQ(batch.tokens[r], mixed.tokens[r]) << "row " << r;
      EXPECT_EQ(bits_of(batch.logprobs[r]), bits_of(mixed.logprobs[r])) << "row " << r;
    }
  }
}

TEST(CudaGreedyTokens, EmptyBatchWritesNothingAndBadShapesThrow) {
  FATHOM_REQUIRE_GPU();
  const Outputs none = run_greedy(std::vector<float>(4, 1.0f), 0, 4, true);
  EXPECT_TRUE(none.tokens.empty());
  DeviceBuffer<float> logits(std::vector<float>(4, 0.0f));
  DeviceBuffer<int32_t> tokens(1);
  EXPECT_THROW(greedy_tokens(logits.data(), 1, 0, tokens.data(), nullptr, nullptr), std::exception);
  EXPECT_THROW(greedy_tokens(logits.data(), 1, 393217, tokens.data(), nullptr, nullptr), std::exception);
  EXPECT_THROW(greedy_tokens(logits.data(), -1, 4, tokens.data(), nullptr, nullptr), std::exception);
}

}  // namespace
}  // namespace fathom::kernels::cuda
