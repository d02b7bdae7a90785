// The k-th largest z's key (threshold_select.cuh, as score_tokens' top lists use it) against a CPU sort, exactly.
// Rows: normal and language-model-shaped logits, tokens placed on coarse-bin edges (k set to one's rank), coarse
// grids of ties, NaN / -inf, vocabularies 1 to 393216, temperatures 0.6 to 1.3, k from 1 to vocab - 1.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/sampling/threshold_select.cuh"

namespace fathom::kernels::cuda {
namespace {

namespace cg = cooperative_groups;

// keys: [rows]: the top-k key; 0 when k is off (<= 0 or >= vocab). Rows must have a finite maximum.
__global__ void __cluster_dims__(kClusterBlocks, 1, 1) __launch_bounds__(kRowThreads, 2)  // as score_tokens
    threshold_keys_kernel(const float* __restrict__ logits,                               // [rows, vocab]
                          int64_t vocab, int per_thread,
                          const float* __restrict__ temperature,  // [rows]
                          const int32_t* __restrict__ top_k,      // [rows]
                          uint32_t* __restrict__ keys) {          // [rows]
  extern __shared__ float slice[];                                // [per_thread * kRowThreads]
  __shared__ ThresholdShared sh;
  __shared__ RowSoftmaxStats partials[32];
  __shared__ RowSoftmaxStats block_stats;
  cg::cluster_group cluster = cg::this_cluster();
  const int64_t b = blockIdx.x / kClusterBlocks;
  const RowSlice s =
      load_row_slice(logits + b * vocab, vocab, per_thread, static_cast<int>(cluster.block_rank()), slice);
  const RowSoftmaxStats stats = cluster_row_stats(s, partials, &block_stats, cluster);
  const float inv_temperature = __fdiv_rn(1.0f, temperature[b]);
  const Scaling scaling{inv_temperature, stats.max * inv_temperature};
  int radix_pass = 0;
  uint32_t key = 0;
  if (top_k[b] > 0 && top_k[b] < vocab) key = select_top_k_key(s, scaling, top_k[b], sh, cluster, radix_pass);
  if (cluster.block_rank() == 0 && threadIdx.x == 0) keys[b] = key;
  cluster.sync();  // the other blocks may still read this block's shared memory
}

struct RowFilter {
  float temperature = 1.0f;
  int32_t top_k = 0;
};

std::vector<uint32_t> device_keys(const std::vector<float>& logits, int64_t vocab, const std::vector<RowFilter>& rows) {
  std::vector<float> temperature;
  std::vector<int32_t> top_k;
  for (const RowFilter& r : rows) {
    temperature.push_back(r.temperature);
    top_k.push_back(r.top_k);
  }
  DeviceBuffer<float> d_logits(logits), d_temperature(temperature);
  DeviceBuffer<int32_t> d_top_k(top_k);
  DeviceBuffer<uint32_t> d_keys(rows.size());
  d_keys.fill_bytes(0xa5);
  const int per_thread = row_elements_per_thread(vocab);
  const size_t shared_bytes = row_slice_bytes(per_thread);
  FATHOM_CUDA_CHECK(cudaFuncSetAttribute(threshold_keys_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(shared_bytes)));
  threshold_keys_kernel<<<static_cast<unsigned>(rows.size() * kClusterBlocks), kRowThreads, shared_bytes>>>(
      d_logits.data(), vocab, per_thread, d_temperature.data(), d_top_k.data(), d_keys.data());
  FATHOM_CUDA_CHECK_LAUNCH();
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  return d_keys.download();
}

uint32_t host_order_key(float z) {
  if (z == 0.0f) z = 0.0f;
  uint32_t bits;
  std::memcpy(&bits, &z, sizeof(bits));
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

float clean(float x) { return std::isnan(x) ? -INFINITY : x; }

// The k-th largest key of the row's z = logit * (1 / temperature) in fp32; 0 when k is off.
uint32_t host_top_k_key(const float* row, int64_t vocab, const RowFilter& f) {
  if (f.top_k <= 0 || f.top_k >= vocab) return 0;
  const float inv_t = 1.0f / f.temperature;
  std::vector<uint32_t> keys;
  for (int64_t i = 0; i < vocab; ++i) keys.push_back(host_order_key(clean(row[i]) * inv_t));
  std::nth_element(keys.begin(), keys.begin() + (f.top_k - 1), keys.end(), std::greater<uint32_t>());
  return keys[f.top_k - 1];
}

void check_rows(const std::vector<float>& logits, int64_t vocab, const std::vector<RowFilter>& rows) {
  const std::vector<uint32_t> keys = device_keys(logits, vocab, rows);
  for (size_t r = 0; r < rows.size(); ++r) {
    EXPECT_EQ(keys[r], host_top_k_key(logits.data() + r * vocab, vocab, rows[r]))
        << "vocab " << vocab << " row " << r << " temperature " << rows[r].temperature << " top_k " << rows[r].top_k;
  }
}

// Logits whose scaled values fall on (or one ulp either side of) coarse-bin edges below the maximum (which is kept);
// returns the rank (1 = largest z) of one of them, for a top-k whose threshold falls among them.
int32_t place_on_bin_edges(std::vector<float>& row, float temperature, std::mt19937& rng, int count) {
  const int64_t vocab = static_cast<int64_t>(row.size());
  int64_t argmax = 0;
  for (int64_t i = 1; i < vocab; ++i) {
    if (clean(row[i]) > clean(row[argmax])) argmax = i;
  }
  const float inv_t = 1.0f / temperature, z_max = row[argmax] * inv_t;
  int64_t placed = -1;
  for (int i = 0; i < count; ++i) {
    const int bin = 1 + static_cast<int>(rng() % 60);
    float logit = (z_max - static_cast<float>(bin) / kCoarseBinsPerUnit) * temperature;
    for (int u = static_cast<int>(rng() % 3); u > 0; --u) {
      logit = std::nextafter(logit, (rng() & 1) ? INFINITY : -INFINITY);
    }
    const int64_t at = static_cast<int64_t>(rng() % vocab);
    if (at == argmax) continue;
    row[at] = std::min(logit, row[argmax]);
    placed = at;
  }
  if (placed < 0) return 1;
  const float z = row[placed] * inv_t;
  int32_t rank = 1;
  for (float v : row) rank += clean(v) * inv_t > z ? 1 : 0;
  return rank;
}

TEST(CudaThresholdSelect, KeysMatchTheCpuSort) {
  FATHOM_REQUIRE_GPU();
  std::mt19937 rng(5);
  const std::vector<float> temperatures = {0.6f, 0.7f, 1.0f, 1.3f};
  for (const int64_t vocab : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{5000}, int64_t{129280}, int64_t{393216}}) {
    std::vector<float> logits;
    std::vector<RowFilter> rows;
    for (int r = 0; r < 40; ++r) {
      std::vector<float> row = testing::random_normal(rng, static_cast<size_t>(vocab), r % 2 ? 1.0f : 3.0f);
      RowFilter f;
      f.temperature = temperatures[r % temperatures.size()];
      int32_t edge_rank = 0;
      switch (r % 5) {
        case 1:  // language-model-shaped: a few tokens far above the bulk
          for (int h = 0; h < 12 && vocab > 20; ++h) row[rng() % vocab] = 14.0f + static_cast<float>(rng() % 800) / 100;
          break;
        case 2:
          edge_rank = place_on_bin_edges(row, f.temperature, rng, static_cast<int>(std::min<int64_t>(vocab, 300)));
          break;
        case 3:  // ties on a coarse grid
          for (float& v : row) v = 0.125f * std::round(8.0f * v);
          break;
        case 4:  // NaN and -inf (the maximum stays finite)
          for (int64_t i = 1; i < vocab; i += 13) row[i] = (i % 2) ? NAN : -INFINITY;
          break;
        default:
          break;
      }
      const int32_t ks[] = {0, 1, 2, 20, 50, 1000, static_cast<int32_t>(vocab - 1)};
      f.top_k = edge_rank > 0 && edge_rank < vocab ? edge_rank : ks[(r / 2) % 7];
      logits.insert(logits.end(), row.begin(), row.end());
      rows.push_back(f);
    }
    check_rows(logits, vocab, rows);
  }
}

// The review's case: at temperature 0.7 the second token's z sits on a coarse-bin edge, where a pass that fused the
// scaling into the binning put it in another bin than the others did.
TEST(CudaThresholdSelect, BinEdgeTokenAtTemperature07) {
  FATHOM_REQUIRE_GPU();
  const std::vector<float> logits = {3.0f, 2.98085928f, 2.5f, 2.0f, 1.0f, 0.0f};
  std::vector<RowFilter> rows;
  for (int32_t k = 1; k <= 5; ++k) rows.push_back(RowFilter{0.7f, k});
  std::vector<float> batch;
  for (size_t r = 0; r < rows.size(); ++r) batch.insert(batch.end(), logits.begin(), logits.end());
  check_rows(batch, 6, rows);
}

}  // namespace
}  // namespace fathom::kernels::cuda
