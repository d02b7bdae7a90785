// GPU sampling: greedy == argmax, logprobs, seeded determinism across batch compositions, filters never select
// excluded tokens (and keep exactly the right ones where their boundary falls among nearly equal logits), and a
// chi-square check of the sampled distribution.
#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/sampling/log_softmax.h"
#include "kernels/cuda/sampling/philox.cuh"
#include "kernels/cuda/sampling/sampling.h"
#include "sampling_reference.h"

namespace fathom::kernels::cuda {
namespace {

struct RowParams {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  uint64_t step = 0;
};

struct Batch {
  int64_t vocab = 0;
  std::vector<float> logits;  // [rows, vocab]
  std::vector<RowParams> params;
  int64_t rows() const { return static_cast<int64_t>(params.size()); }
  void add(const float* row_logits, const RowParams& p) {
    logits.insert(logits.end(), row_logits, row_logits + vocab);
    params.push_back(p);
  }
};

struct Result {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

Result run_sampling(const Batch& batch) {
  const int64_t rows = batch.rows();
  std::vector<float> temperature, top_p, min_p;
  std::vector<int32_t> top_k;
  std::vector<uint64_t> seed, step;
  for (const RowParams& p : batch.params) {
    temperature.push_back(p.temperature);
    top_k.push_back(p.top_k);
    top_p.push_back(p.top_p);
    min_p.push_back(p.min_p);
    seed.push_back(p.seed);
    step.push_back(p.step);
  }
  DeviceBuffer<float> d_logits(batch.logits), d_temperature(temperature), d_top_p(top_p), d_min_p(min_p);
  DeviceBuffer<int32_t> d_top_k(top_k);
  DeviceBuffer<uint64_t> d_seed(seed), d_step(step);
  DeviceBuffer<int32_t> d_tokens(static_cast<size_t>(rows));
  DeviceBuffer<float> d_logprobs(static_cast<size_t>(rows));
  d_tokens.fill_bytes(0xff);
  d_logprobs.fill_bytes(0xff);
  SamplingParams params{d_temperature.data(), d_top_k.data(), d_top_p.data(), d_min_p.data(), d_seed.data(),
                        d_step.data()};
  sample_tokens(d_logits.data(), rows, batch.vocab, params, d_tokens.data(), d_logprobs.data(), nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  return Result{d_tokens.download(), d_logprobs.download()};
}

std::vector<double> cpu_log_softmax(const float* row, int64_t vocab) {
  double max = -INFINITY, sum = 0;
  for (int64_t i = 0; i < vocab; ++i) max = std::max(max, double(clean(row[i])));
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(clean(row[i])) - max);
  std::vector<double> out(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) out[i] = double(clean(row[i])) - max - std::log(sum);
  return out;
}

// The filters as sampling.h defines them, in fp32 like the kernel; returns the kept tokens' relative masses.
std::map<int64_t, double> cpu_kept(const float* row, int64_t vocab, const RowParams& p) {
  const float inv_t = 1.0f / p.temperature;
  std::vector<float> z(static_cast<size_t>(vocab));
  float l_max = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) l_max = std::max(l_max, clean(row[i]));
  for (int64_t i = 0; i < vocab; ++i) z[i] = clean(row[i]) * inv_t;
  const float z_max = l_max * inv_t;
  float threshold = -INFINITY;
  if (p.top_k > 0 && p.top_k < vocab) {
    std::vector<float> sorted = z;
    std::nth_element(sorted.begin(), sorted.begin() + (p.top_k - 1), sorted.end(), std::greater<float>());
    threshold = sorted[p.top_k - 1];
  }
  auto mass = [&](int64_t i) { return static_cast<uint64_t>(std::exp(z[i] - z_max) * 1099511627776.0f); };
  if (p.top_p < 1.0f) {
    std::vector<int64_t> order;
    uint64_t total = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      if (z[i] >= threshold && mass(i) > 0) {
        order.push_back(i);
        total += mass(i);
      }
    }
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return z[a] > z[b]; });
    const double wanted = double(p.top_p) * double(total);
    const uint64_t target = wanted < 1.0 ? 1 : static_cast<uint64_t>(wanted);
    uint64_t above = 0;  // mass of strictly larger z
    size_t i = 0;
    float top_p_threshold = z[order[0]];
    while (i < order.size()) {
      size_t j = i;
      uint64_t tie_mass = 0;
      while (j < order.size() && z[order[j]] == z[order[i]]) tie_mass += mass(order[j++]);
      if (above >= target) break;
      top_p_threshold = z[order[i]];
      above += tie_mass;
      i = j;
    }
    threshold = std::max(threshold, top_p_threshold);
  }
  std::map<int64_t, double> kept;
  for (int64_t i = 0; i < vocab; ++i) {
    const float relative = std::exp(z[i] - z_max);
    if (z[i] >= threshold && relative >= std::min(p.min_p, 1.0f) && mass(i) > 0) kept[i] = double(mass(i));
  }
  return kept;
}

std::vector<float> random_logits(std::mt19937& rng, int64_t vocab, float stddev) {
  return testing::random_normal(rng, static_cast<size_t>(vocab), stddev);
}

TEST(CudaSampling, PhiloxKnownAnswers) {
  FATHOM_REQUIRE_GPU();
  // Known-answer vectors of Philox4x32-10 (Random123's kat_vectors).
  Philox4x32 out = philox4x32_10(Philox4x32{{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(out.v[0], 0x6627e8d5u);
  EXPECT_EQ(out.v[1], 0xe169c58du);
  EXPECT_EQ(out.v[2], 0xbc57ac4cu);
  EXPECT_EQ(out.v[3], 0x9b00dbd8u);
  out = philox4x32_10(Philox4x32{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(out.v[0], 0x408f276du);
  EXPECT_EQ(out.v[1], 0x41c83b0eu);
  EXPECT_EQ(out.v[2], 0xa20bc7c6u);
  EXPECT_EQ(out.v[3], 0x6d5451fdu);
  out = philox4x32_10(Philox4x32{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(out.v[0], 0xd16cfe09u);
  EXPECT_EQ(out.v[1], 0x94fdccebu);
  EXPECT_EQ(out.v[2], 0x5001e420u);
  EXPECT_EQ(out.v[3], 0x24126ea1u);
}

TEST(CudaSampling, GreedyIsArgmaxWithLowestIndexOnTies) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(1);
  for (int64_t vocab : {1, 7, 1025, 129280}) {
    SCOPED_TRACE(::testing::Message() << "vocab " << vocab);
    Batch batch;
    batch.vocab = vocab;
    for (int r = 0; r < 12; ++r) {
      std::vector<float> row = random_logits(rng, vocab, 3.0f);
      if (r % 3 == 1 && vocab > 10) {  // tie at the maximum: two (or all) positions
        row[vocab - 2] = 50.0f;
        row[vocab / 3] = 50.0f;
      }
      if (r % 4 == 2) std::fill(row.begin(), row.end(), 0.25f);  // all tied -> index 0
      if (r == 5 && vocab > 3) row[1] = NAN;
      RowParams p;
      p.temperature = (r % 2) ? 0.0f : 1.0f;
      p.top_k = (r % 2) ? 0 : 1;  // temperature 0, or top_k 1
      p.seed = r;
      batch.add(row.data(), p);
    }
    const Result result = run_sampling(batch);
    for (int64_t r = 0; r < batch.rows(); ++r) {
      const float* row = batch.logits.data() + r * vocab;
      const int64_t expected = cpu_argmax(row, vocab);
      EXPECT_EQ(result.tokens[r], expected) << "row " << r;
      EXPECT_NEAR(result.logprobs[r], cpu_log_softmax(row, vocab)[expected], 1e-4) << "row " << r;
    }
  }
}

// Scaling by 1 / temperature that overflows (a tiny temperature, a maximum near FLT_MAX, an infinite logit) falls
// back to the argmax, whatever the filters ask for; top-k, top-p and min-p rows included.
TEST(CudaSampling, OverflowingScaleFallsBackToGreedy) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(3);
  for (int64_t vocab : {7, 129280}) {
    SCOPED_TRACE(::testing::Message() << "vocab " << vocab);
    Batch batch;
    batch.vocab = vocab;
    for (int r = 0; r < 9; ++r) {
      std::vector<float> row = random_logits(rng, vocab, 3.0f);
      RowParams p;
      p.seed = r;
      p.top_k = r % 3 == 1 ? 5 : 0;
      p.top_p = r % 3 == 2 ? 0.9f : 1.0f;
      p.min_p = r == 4 ? 0.1f : 0.0f;
      if (r < 3) {
        p.temperature = 2e-38f;  // normal (not flushed); 1 / temperature = 5e37: the scaled maximum 8 x that overflows
        row[static_cast<size_t>(vocab / 2)] = 8.0f;
      } else if (r < 6) {
        p.temperature = 0.5f;
        row[static_cast<size_t>(vocab - 1)] = 3.0e38f;  // doubled past FLT_MAX
      } else {
        p.temperature = 1.0f;
        row[static_cast<size_t>(r % vocab)] = INFINITY;
      }
      batch.add(row.data(), p);
    }
    const Result result = run_sampling(batch);
    for (int64_t r = 0; r < batch.rows(); ++r) {
      const float* row = batch.logits.data() + r * vocab;
      EXPECT_EQ(result.tokens[r], cpu_argmax(row, vocab)) << "row " << r;
      if (r < 3) EXPECT_NEAR(result.logprobs[r], cpu_log_softmax(row, vocab)[cpu_argmax(row, vocab)], 1e-4) << r;
    }
  }
}

TEST(CudaSampling, LogSoftmaxMatchesCpu) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(2);
  for (const auto& [rows, vocab] : std::vector<std::pair<int64_t, int64_t>>{{4, 129280}, {3, 1001}, {2, 1}}) {
    std::vector<float> logits = testing::random_normal(rng, static_cast<size_t>(rows * vocab), 4.0f);
    logits[0] = NAN;  // counts as -inf
    DeviceBuffer<float> d_logits(logits), d_out(logits.size());
    d_out.fill_bytes(0xff);
    log_softmax(d_logits.data(), rows, vocab, d_out.data(), nullptr);
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> out = d_out.download();
    double max_error = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<double> expected = cpu_log_softmax(logits.data() + r * vocab, vocab);
      for (int64_t i = 0; i < vocab; ++i) {
        const double got = out[r * vocab + i], want = expected[i];
        if (std::isinf(want)) {
          EXPECT_TRUE(std::isinf(got) && got < 0) << "row " << r << " index " << i;
        } else {
          max_error = std::max(max_error, std::fabs(got - want));
        }
      }
    }
    EXPECT_LT(max_error, 1e-4) << "rows " << rows << " vocab " << vocab;
  }
}

// A mixed set of requests: the same (logits, params) must give the same token in any batch.
std::vector<RowParams> varied_params(std::mt19937& rng, int count) {
  std::vector<RowParams> params;
  for (int i = 0; i < count; ++i) {
    RowParams p;
    p.temperature = 0.5f + 0.1f * (i % 9);
    p.top_k = (i % 3 == 0) ? 0 : 1 + static_cast<int32_t>(rng() % 200);
    p.top_p = (i % 4 == 0) ? 1.0f : 0.5f + 0.05f * (i % 10);
    p.min_p = (i % 5 == 0) ? 0.02f * (i % 3) : 0.0f;
    p.seed = rng();
    p.step = rng() % 1000;
    params.push_back(p);
  }
  return params;
}

TEST(CudaSampling, SeededDeterminismAcrossBatchCompositions) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(3);
  const int64_t vocab = 129280;
  const int count = 10;
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < count; ++i) rows.push_back(random_logits(rng, vocab, 2.0f + 0.3f * i));
  const std::vector<RowParams> params = varied_params(rng, count);

  Batch in_order;
  in_order.vocab = vocab;
  for (int i = 0; i < count; ++i) in_order.add(rows[i].data(), params[i]);
  const Result reference = run_sampling(in_order);

  // Reversed, with unrelated requests interleaved.
  Batch mixed;
  mixed.vocab = vocab;
  std::vector<int> where(count);
  for (int i = count - 1; i >= 0; --i) {
    const std::vector<float> other = random_logits(rng, vocab, 1.0f);
    mixed.add(other.data(), varied_params(rng, 1)[0]);
    where[i] = static_cast<int>(mixed.rows());
    mixed.add(rows[i].data(), params[i]);
  }
  const Result mixed_result = run_sampling(mixed);
  for (int i = 0; i < count; ++i) {
    EXPECT_EQ(mixed_result.tokens[where[i]], reference.tokens[i]) << "request " << i;
    EXPECT_EQ(mixed_result.logprobs[where[i]], reference.logprobs[i]) << "request " << i;
    Batch alone;
    alone.vocab = vocab;
    alone.add(rows[i].data(), params[i]);
    EXPECT_EQ(run_sampling(alone).tokens[0], reference.tokens[i]) << "request " << i << " alone";
  }
  // Same call twice: same tokens.
  EXPECT_EQ(run_sampling(in_order).tokens, reference.tokens);
}

TEST(CudaSampling, StepsAndSeedsChangeTheDraw) {
  FATHOM_REQUIRE_GPU();
  const int64_t vocab = 1000;
  std::vector<float> flat(static_cast<size_t>(vocab), 0.0f);
  Batch batch;
  batch.vocab = vocab;
  for (int i = 0; i < 64; ++i) {
    RowParams p;
    p.seed = 42 + (i % 2);
    p.step = static_cast<uint64_t>(i / 2);
    batch.add(flat.data(), p);
  }
  const Result result = run_sampling(batch);
  const std::set<int32_t> distinct(result.tokens.begin(), result.tokens.end());
  EXPECT_GT(distinct.size(), 50u);  // 64 draws from a uniform over 1000
}

// sampling.h: a null top_k / top_p / min_p / step array means that filter off / step 0, and null logprobs are skipped.
TEST(CudaSampling, NullOptionalArraysMeanOff) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(12);
  const int64_t vocab = 3001;
  Batch batch;
  batch.vocab = vocab;
  for (int i = 0; i < 24; ++i) {
    RowParams p;
    p.temperature = i % 4 == 0 ? 0.0f : 0.7f + 0.1f * static_cast<float>(i % 5);
    p.seed = 1000 + static_cast<uint64_t>(i);
    batch.add(random_logits(rng, vocab, 2.0f).data(), p);
  }
  const Result with_arrays = run_sampling(batch);  // arrays holding the "off" values
  const int64_t rows = batch.rows();
  std::vector<float> temperature;
  std::vector<uint64_t> seed;
  for (const RowParams& p : batch.params) {
    temperature.push_back(p.temperature);
    seed.push_back(p.seed);
  }
  DeviceBuffer<float> d_logits(batch.logits), d_temperature(temperature);
  DeviceBuffer<uint64_t> d_seed(seed);
  DeviceBuffer<int32_t> d_tokens(static_cast<size_t>(rows));
  d_tokens.fill_bytes(0xff);
  SamplingParams params;
  params.temperature = d_temperature.data();
  params.seed = d_seed.data();
  sample_tokens(d_logits.data(), rows, vocab, params, d_tokens.data(), nullptr, nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(d_tokens.download(), with_arrays.tokens);
  // batch 0 launches nothing and touches nothing
  sample_tokens(d_logits.data(), 0, vocab, params, nullptr, nullptr, nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
}

TEST(CudaSampling, FiltersNeverSelectExcludedTokens) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(4);
  for (int64_t vocab : {5, 1000, 32000, 129280}) {
    SCOPED_TRACE(::testing::Message() << "vocab " << vocab);
    Batch batch;
    batch.vocab = vocab;
    std::vector<std::map<int64_t, double>> kept;
    for (int r = 0; r < 300; ++r) {
      std::vector<float> row = random_logits(rng, vocab, 1.0f + (r % 7));
      if (r % 10 == 3) {
        for (float& v : row) v = std::round(v);  // ties at the thresholds
      }
      RowParams p;
      p.temperature = 0.3f + 0.2f * (r % 8);
      p.top_k = (r % 3 == 0) ? 0 : 1 + static_cast<int32_t>(rng() % std::min<int64_t>(vocab, 50));
      p.top_p = (r % 4 == 1) ? 1.0f : 0.05f + 0.1f * (r % 10);
      p.min_p = (r % 5 == 2) ? 0.01f * (r % 13) : 0.0f;
      p.seed = rng();
      p.step = r;
      batch.add(row.data(), p);
      kept.push_back(cpu_kept(row.data(), vocab, p));
    }
    const Result result = run_sampling(batch);
    int64_t excluded = 0;
    for (int64_t r = 0; r < batch.rows(); ++r) {
      if (!kept[r].count(result.tokens[r])) {
        if (excluded < 5) ADD_FAILURE() << "row " << r << " sampled excluded token " << result.tokens[r];
        ++excluded;
      }
      const float* row = batch.logits.data() + r * vocab;
      ASSERT_GE(result.tokens[r], 0);
      EXPECT_NEAR(result.logprobs[r], cpu_log_softmax(row, vocab)[result.tokens[r]], 1e-4);
    }
    EXPECT_EQ(excluded, 0);
  }
}

// Heads: 8 tokens of large, nearly equal mass spread over the blocks of the row's cluster, over a bulk of distinct
// logits of zero mass (or, `dense`, 3000 more tokens within 0.02 of the top). The top-k / top-p boundaries fall
// between heads whose scaled logits differ by a few ulps (one coarse bin: the range and radix steps), by ~2^11
// ulps (two radix digits) or by 0.01 (neighbouring bins). Over 160 seeds no token outside the CPU's kept set may
// be drawn, and (without the dense tokens) every kept head must be (each has about 1/8 of the kept mass or more).
TEST(CudaSampling, ThresholdsAmongNearlyEqualLogits) {
  FATHOM_REQUIRE_GPU();
  constexpr int kHeads = 8, kDraws = 160;
  struct Case {
    const char* name;
    float temperature;
    int32_t top_k;
    float top_p;
    bool tie;    // head 3 equal to head 2
    bool dense;  // 3000 tokens just below the top
  };
  const std::vector<Case> cases = {
      {"top_p 0.55", 1.0f, 0, 0.55f, false, false},   {"top_k 3", 1.0f, 3, 1.0f, false, false},
      {"top_k 3 tied", 1.0f, 3, 1.0f, true, false},   {"top_k 6 + top_p 0.3", 1.0f, 6, 0.3f, false, false},
      {"top_p 0.3 tied", 1.0f, 0, 0.3f, true, false}, {"top_k 20: k-th in the bulk", 1.0f, 20, 1.0f, false, false},
      {"t 0.7 top_p 0.8", 0.7f, 0, 0.8f, false, false}, {"dense top_p 0.5", 1.0f, 0, 0.5f, false, true},
      {"dense top_k 1000", 1.3f, 1000, 1.0f, false, true},
  };
  std::mt19937 rng(11);
  for (int64_t vocab : {5000, 129280}) {
    for (int gap_ulps : {1, 37, 2000, 0}) {  // 0: heads 0.01 apart
      for (const Case& c : cases) {
        SCOPED_TRACE(::testing::Message() << "vocab " << vocab << ", gap " << gap_ulps << " ulps, " << c.name);
        std::uniform_real_distribution<float> bulk(-60.0f, -40.0f), near_top(4.95f, 4.97f);
        std::vector<float> row(static_cast<size_t>(vocab));
        for (float& v : row) v = bulk(rng);
        if (c.dense) {
          for (int i = 0; i < 3000; ++i) row[rng() % vocab] = near_top(rng);
        }
        // Block r of the cluster holds [r * slice, (r + 1) * slice): heads go round the blocks that hold tokens.
        const int64_t slice = (((vocab + 7) / 8 + 511) / 512) * 512, blocks_used = (vocab + slice - 1) / slice;
        std::vector<int64_t> heads;
        float value = 5.0f;
        for (int h = 0; h < kHeads; ++h) {
          heads.push_back(std::min(vocab - 1, (h % blocks_used) * slice + 37 * (h / blocks_used) + 5 + h));
          row[heads.back()] = value;
          if (gap_ulps == 0) {
            value -= 0.01f;
          } else {
            for (int u = 0; u < gap_ulps; ++u) value = std::nextafter(value, -INFINITY);
          }
        }
        if (c.tie) row[heads[3]] = row[heads[2]];
        RowParams p;
        p.temperature = c.temperature;
        p.top_k = c.top_k;
        p.top_p = c.top_p;
        const std::map<int64_t, double> kept = cpu_kept(row.data(), vocab, p);
        ASSERT_FALSE(kept.empty());
        Batch batch;
        batch.vocab = vocab;
        for (int d = 0; d < kDraws; ++d) {
          p.seed = 7919ull * d + 3;
          batch.add(row.data(), p);
        }
        const Result result = run_sampling(batch);
        std::set<int32_t> drawn(result.tokens.begin(), result.tokens.end());
        for (int32_t t : drawn) EXPECT_TRUE(kept.count(t)) << "drew excluded token " << t;
        if (!c.dense) {
          for (const auto& [token, mass] : kept) {
            EXPECT_TRUE(drawn.count(static_cast<int32_t>(token))) << "kept token " << token << " never drawn";
          }
          EXPECT_LE(kept.size(), static_cast<size_t>(kHeads));
        }
      }
    }
  }
}

// Many independent draws (distinct seeds) from one row; Pearson chi-square against the filtered distribution.
void check_distribution(const std::vector<float>& logits, const RowParams& base, int draws) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  const std::map<int64_t, double> kept = cpu_kept(logits.data(), vocab, base);
  double kept_total = 0;
  for (const auto& [i, m] : kept) kept_total += m;
  Batch batch;
  batch.vocab = vocab;
  for (int d = 0; d < draws; ++d) {
    RowParams p = base;
    p.seed = 1000003ull * d + 17;
    batch.add(logits.data(), p);
  }
  const Result result = run_sampling(batch);
  std::vector<int64_t> counts(static_cast<size_t>(vocab), 0);
  for (int32_t t : result.tokens) {
    ASSERT_TRUE(t >= 0 && t < vocab);
    ++counts[t];
  }
  double chi_square = 0;
  int bins = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (!kept.count(i)) {
      EXPECT_EQ(counts[i], 0) << "excluded token " << i;
      continue;
    }
    const double expected = draws * kept.at(i) / kept_total;
    chi_square += (counts[i] - expected) * (counts[i] - expected) / expected;
    ++bins;
  }
  // Degrees of freedom bins - 1 <= 11: P(chi2 > 40) < 1e-4.
  EXPECT_LT(chi_square, 40.0) << "bins " << bins;
  EXPECT_GT(bins, 2);
}

TEST(CudaSampling, SampledDistributionPassesChiSquare) {
  FATHOM_REQUIRE_GPU();
  const std::vector<float> logits = {1.0f, 0.5f, -0.3f, 2.0f, 1.7f, -1.0f, 0.0f, 0.9f, 1.2f, -2.0f, 0.1f, 1.9f};
  RowParams plain;
  plain.temperature = 0.8f;
  check_distribution(logits, plain, 60000);
  RowParams filtered;
  filtered.temperature = 1.1f;
  filtered.top_k = 8;
  filtered.top_p = 0.8f;
  filtered.min_p = 0.1f;
  check_distribution(logits, filtered, 60000);
}

}  // namespace
}  // namespace fathom::kernels::cuda
