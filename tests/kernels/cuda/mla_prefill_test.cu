// MLA prefill / extend (expanded form, causal, variable-length batch, k_pe from the paged cache) vs the CPU
// reference kernels::cpu::mla_attention_expanded.
//
// Tolerance: relative L2 <= 1e-2, as for decode: probabilities are rounded to bf16 for P·V and the output
// to bf16 (~3e-3 together on random data); scores, softmax and accumulation are fp32 like the reference.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/thread_pool.h"
#include "kernels/cpu/mla_attention.h"
#include "kernels/cuda/mla/mla_merge.h"
#include "kernels/cuda/mla/mla_prefill.h"
#include "kernels/cuda/mla/mla_prefill_windows.h"
#include "kernels/cuda/mla/mla_prefill_items.h"
#include "mla_test_util.h"

namespace fathom::testing {
namespace {

constexpr double kTolerance = 1e-2;

struct PrefillCase {
  std::string name;
  int32_t heads, nope, rope, v, kv_lora, page_size;
  std::vector<std::pair<int32_t, int32_t>> q_kv_lens;  // per sequence: (q_len, kv_len), kv_len >= q_len
};

// A prefill problem on random data: the batch's lengths, the paged cache, q / k_nope / v (bf16-rounded) and the CPU
// reference's output.
struct PrefillProblem {
  int32_t batch = 0, max_q_len = 0;
  std::vector<int32_t> kv_lens, cu_q{0}, cu_kv{0};
  int64_t total_q = 0, total_kv = 0, qk = 0;
  PagedLatentCache cache;
  std::vector<float> q, k_nope, v;  // [total_q, heads, qk], [total_kv, heads, nope], [total_kv, heads, v]
  float scale = 1.0f;
  std::vector<float> expected;      // [total_q, heads, v]
};

PrefillProblem make_prefill_problem(const PrefillCase& c) {
  PrefillProblem pr;
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>{}(c.name)));
  pr.batch = static_cast<int32_t>(c.q_kv_lens.size());
  for (auto [q_len, kv_len] : c.q_kv_lens) {
    pr.kv_lens.push_back(kv_len);
    pr.cu_q.push_back(pr.cu_q.back() + q_len);
    pr.cu_kv.push_back(pr.cu_kv.back() + kv_len);
    pr.max_q_len = std::max(pr.max_q_len, q_len);
  }
  pr.total_q = pr.cu_q.back();
  pr.total_kv = pr.cu_kv.back();
  pr.cache = make_paged_cache(rng, pr.kv_lens, c.kv_lora, c.rope, c.page_size);
  pr.qk = c.nope + c.rope;
  pr.q = round_to_bf16(random_normal(rng, static_cast<size_t>(pr.total_q * c.heads * pr.qk)));
  pr.k_nope = round_to_bf16(random_normal(rng, static_cast<size_t>(pr.total_kv * c.heads * c.nope)));
  pr.v = round_to_bf16(random_normal(rng, static_cast<size_t>(pr.total_kv * c.heads * c.v)));
  pr.scale = 1.0f / std::sqrt(static_cast<float>(pr.qk));

  // CPU reference, one sequence at a time (kv interleaves k_nope and v per head as the reference expects).
  ThreadPool pool;
  const kernels::cpu::MlaShape shape{c.heads, c.nope, c.rope, c.v, c.kv_lora, pr.scale};
  pr.expected.resize(static_cast<size_t>(pr.total_q * c.heads * c.v));
  for (int32_t b = 0; b < pr.batch; ++b) {
    const int32_t q_len = c.q_kv_lens[b].first, kv_len = c.q_kv_lens[b].second;
    std::vector<float> kv(static_cast<size_t>(kv_len) * c.heads * (c.nope + c.v));
    for (int64_t t = 0; t < kv_len; ++t)
      for (int64_t h = 0; h < c.heads; ++h) {
        float* dst = kv.data() + (t * c.heads + h) * (c.nope + c.v);
        const int64_t src = (pr.cu_kv[b] + t) * c.heads + h;
        std::copy_n(pr.k_nope.data() + src * c.nope, c.nope, dst);
        std::copy_n(pr.v.data() + src * c.v, c.v, dst + c.nope);
      }
    std::vector<int32_t> positions(static_cast<size_t>(q_len));
    for (int32_t j = 0; j < q_len; ++j) positions[j] = kv_len - q_len + j;
    const std::vector<const float*> rows = pr.cache.row_pointers(b);
    kernels::cpu::mla_attention_expanded(pr.q.data() + pr.cu_q[b] * c.heads * pr.qk, q_len, positions.data(),
                                         kv.data(), rows.data(), kv_len, shape,
                                         pr.expected.data() + pr.cu_q[b] * c.heads * c.v, pool);
  }
  return pr;
}

class MlaPrefillSweep : public ::testing::TestWithParam<PrefillCase> {};

TEST_P(MlaPrefillSweep, MatchesCpuReference) {
  FATHOM_REQUIRE_GPU();
  const PrefillCase& c = GetParam();
  const PrefillProblem pr = make_prefill_problem(c);
  const int32_t batch = pr.batch, max_q_len = pr.max_q_len;
  const int64_t total_kv = pr.total_kv, qk = pr.qk;
  const std::vector<float>&q = pr.q, &k_nope = pr.k_nope, &v = pr.v, &expected = pr.expected;
  const std::vector<int32_t>&cu_q = pr.cu_q, &cu_kv = pr.cu_kv;
  const PagedLatentCache& cache = pr.cache;
  const float scale = pr.scale;

  // The same keys and values interleaved per head as kv_b_proj writes them ([total_kv, heads, nope + v]), which the
  // model passes in place (head strides nope + v).
  std::vector<float> interleaved(static_cast<size_t>(total_kv * c.heads * (c.nope + c.v)));
  for (int64_t row = 0; row < total_kv * c.heads; ++row) {
    std::copy_n(k_nope.data() + row * c.nope, c.nope, interleaved.data() + row * (c.nope + c.v));
    std::copy_n(v.data() + row * c.v, c.v, interleaved.data() + row * (c.nope + c.v) + c.nope);
  }
  // And k_nope / v in separate buffers with different padded head strides (nope + 8, v + 24), so a kernel that
  // mixed up the two strides would read the wrong rows.
  const int64_t k_pad_stride = c.nope + 8, v_pad_stride = c.v + 24;
  std::vector<float> k_padded(static_cast<size_t>(total_kv * c.heads * k_pad_stride), 0.0f),
      v_padded(static_cast<size_t>(total_kv * c.heads * v_pad_stride), 0.0f);
  for (int64_t row = 0; row < total_kv * c.heads; ++row) {
    std::copy_n(k_nope.data() + row * c.nope, c.nope, k_padded.data() + row * k_pad_stride);
    std::copy_n(v.data() + row * c.v, c.v, v_padded.data() + row * v_pad_stride);
  }
  DeviceBuffer<__nv_bfloat16> q_device(float_to_bf16_vector(q)), k_nope_device(float_to_bf16_vector(k_nope)),
      v_device(float_to_bf16_vector(v)), interleaved_device(float_to_bf16_vector(interleaved)),
      k_padded_device(float_to_bf16_vector(k_padded)), v_padded_device(float_to_bf16_vector(v_padded)),
      out_device(expected.size()), strided_out_device(expected.size());
  DeviceBuffer<int32_t> cu_q_device(cu_q), cu_kv_device(cu_kv);
  kernels::cuda::MlaPrefillArgs args;
  args.q = q_device.data();
  args.q_head_stride = qk;
  args.k_nope = k_nope_device.data();
  args.v = v_device.data();
  args.cache = cache.view();
  args.page_table = cache.page_table_device.data();
  args.max_pages_per_seq = cache.max_pages_per_seq;
  args.cu_q_lens = cu_q_device.data();
  args.cu_kv_lens = cu_kv_device.data();
  args.total_kv_rows = total_kv;
  args.batch = batch;
  args.max_q_len = max_q_len;
  args.out = out_device.data();
  args.num_heads = c.heads;
  args.nope_dim = c.nope;
  args.v_dim = c.v;
  args.softmax_scale = scale;
  // Every kernel that takes the shape: the mma.sync kernel, and at V3's dims the wgmma and TMA kernels (kAuto).
  using kernels::cuda::MlaPrefillKernel;
  const bool v3_dims = c.nope == 128 && c.rope == 64 && c.v == 128;
  std::vector<float> mma_sync_out;
  for (MlaPrefillKernel kernel : {MlaPrefillKernel::kMmaSync, MlaPrefillKernel::kWgmma, MlaPrefillKernel::kAuto}) {
    if (kernel == MlaPrefillKernel::kWgmma && !v3_dims) continue;
    args.kernel = kernel;
    out_device.fill_bytes(0xff);
    kernels::cuda::mla_prefill(args, nullptr);
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> actual = bf16_to_float_vector(out_device.download());
    const char* kernel_name = kernel == MlaPrefillKernel::kMmaSync ? "mma.sync"
                              : kernel == MlaPrefillKernel::kWgmma ? "wgmma"
                                                                   : (v3_dims ? "tma" : "auto");
    ASSERT_TRUE(all_finite(actual)) << kernel_name << ": unwritten or non-finite output";
    const double error = relative_l2_error(actual, expected);
    EXPECT_LE(error, kTolerance) << kernel_name;
    std::printf("[ mla prefill ] %-34s %-8s rel_l2 %.2e\n", c.name.c_str(), kernel_name, error);
    if (kernel == MlaPrefillKernel::kMmaSync) {
      mma_sync_out = actual;
    } else if (v3_dims) {  // the kernels agree to bf16 rounding
      EXPECT_LE(relative_l2_error(actual, mma_sync_out), 5e-3) << kernel_name << " vs mma.sync";
    }
    // Strided heads (inside the interleaved rows; in padded rows of different strides): the same kernel, the
    // same bits.
    for (const bool interleaved_layout : {true, false}) {
      kernels::cuda::MlaPrefillArgs strided = args;
      strided.k_nope = interleaved_layout ? interleaved_device.data() : k_padded_device.data();
      strided.v = interleaved_layout ? interleaved_device.data() + c.nope : v_padded_device.data();
      strided.k_head_stride = interleaved_layout ? c.nope + c.v : k_pad_stride;
      strided.v_head_stride = interleaved_layout ? c.nope + c.v : v_pad_stride;
      strided.out = strided_out_device.data();
      strided_out_device.fill_bytes(0xff);
      kernels::cuda::mla_prefill(strided, nullptr);
      FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
      const std::string what =
          std::string(kernel_name) + (interleaved_layout ? " with interleaved heads" : " with padded heads");
      expect_same_device_bits(strided_out_device, out_device, what.c_str());
    }
  }
  if (v3_dims) {  // the persistent TMA kernel (out_device holds its output): the same bits with 1 to 7 CTAs, each
                 // working through many items, its rings' stages and parities running on across them
    for (const int max_ctas : {1, 3, 7}) {
      kernels::cuda::MlaPrefillArgs fewer = args;
      fewer.kernel = MlaPrefillKernel::kTma;
      fewer.max_ctas = max_ctas;
      fewer.out = strided_out_device.data();
      strided_out_device.fill_bytes(0xff);
      kernels::cuda::mla_prefill(fewer, nullptr);
      FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
      const std::string what = "tma with at most " + std::to_string(max_ctas) + " CTAs";
      expect_same_device_bits(strided_out_device, out_device, what.c_str());
    }
  }
  {
    kernels::cuda::MlaPrefillArgs negative = args;
    negative.max_ctas = -1;
    EXPECT_THROW(kernels::cuda::mla_prefill(negative, nullptr), Error);
  }
  for (const bool narrow_k : {true, false}) {  // a head stride below the head dim (or negative) is an error
    kernels::cuda::MlaPrefillArgs narrow = args;
    (narrow_k ? narrow.k_head_stride : narrow.v_head_stride) = (narrow_k ? c.nope : c.v) - 1;
    EXPECT_THROW(kernels::cuda::mla_prefill(narrow, nullptr), Error);
    (narrow_k ? narrow.k_head_stride : narrow.v_head_stride) = -1;
    EXPECT_THROW(kernels::cuda::mla_prefill(narrow, nullptr), Error);
  }
  if (v3_dims) {  // without the row count of k_nope / v the TMA kernel cannot be asked for
    args.kernel = MlaPrefillKernel::kTma;
    args.total_kv_rows = 0;
    EXPECT_THROW(kernels::cuda::mla_prefill(args, nullptr), Error);
  } else {  // asking for a V3-only kernel where it does not apply is an error, not a silent fallback
    for (MlaPrefillKernel kernel : {MlaPrefillKernel::kWgmma, MlaPrefillKernel::kTma}) {
      args.kernel = kernel;
      EXPECT_THROW(kernels::cuda::mla_prefill(args, nullptr), Error);
    }
  }
}

// Key windows: the prefix attended in passes over windows of `window` positions (plan_prefill_key_passes), each pass's
// keys in rows of their own, the passes merged by mla_merge_attention, as the model runs a prefix too long to expand
// at once. The merged rows match the CPU reference; rows whose position lies in the first window keep the unwindowed
// call's bits (the later windows weigh 0 for them); each pass's log-sum-exps match the CPU's (-inf: no key seen).
TEST(MlaPrefillKeyWindows, MergedWindowsEqualTheWholePrefix) {
  FATHOM_REQUIRE_GPU();
  using kernels::cuda::MlaPrefillKernel;
  struct WindowCase {
    PrefillCase problem;
    std::vector<int64_t> windows;
  };
  const std::vector<WindowCase> cases = {
      {{"win_v3_h4_page16", 4, 128, 64, 128, 512, 16, {{300, 1000}, {1, 513}, {77, 77}}}, {128, 200, 700, 1391}},
      {{"win_v3_h3_page1", 3, 128, 64, 128, 512, 1, {{1, 2000}, {129, 129}, {64, 640}}}, {100, 1000}},
      {{"win_odd_h5_page5", 5, 37, 11, 29, 50, 5, {{33, 400}, {70, 70}}}, {64, 150}},
      {{"win_v3_h128_page64", 128, 128, 64, 128, 512, 64, {{64, 700}, {1, 200}}}, {256, 500}},  // the model's heads
  };
  for (const WindowCase& wc : cases) {
    const PrefillCase& c = wc.problem;
    const PrefillProblem pr = make_prefill_problem(c);
    const bool v3_dims = c.nope == 128 && c.rope == 64 && c.v == 128;
    const int64_t out_elems = pr.total_q * c.heads * c.v, lse_elems = pr.total_q * c.heads;
    DeviceBuffer<__nv_bfloat16> q_device(float_to_bf16_vector(pr.q)), k_device(float_to_bf16_vector(pr.k_nope)),
        v_device(float_to_bf16_vector(pr.v)), whole_out(static_cast<size_t>(out_elems)),
        acc(static_cast<size_t>(out_elems)), part(static_cast<size_t>(out_elems));
    DeviceBuffer<int32_t> cu_q_device(pr.cu_q), cu_kv_device(pr.cu_kv);
    DeviceBuffer<float> lse(static_cast<size_t>(2 * lse_elems));
    lse.fill_bytes(0xff);  // the first pass's check downloads both halves before the second half is written
    DeviceBuffer<__nv_bfloat16> interleaved_out(static_cast<size_t>(out_elems));
    DeviceBuffer<float> interleaved_lse(static_cast<size_t>(lse_elems));
    std::vector<int32_t> query_positions;
    for (int32_t b = 0; b < pr.batch; ++b) query_positions.push_back(c.q_kv_lens[b].second - c.q_kv_lens[b].first);
    DeviceBuffer<int32_t> query_positions_device(query_positions);
    kernels::cuda::MlaPrefillArgs args;
    args.q = q_device.data();
    args.q_head_stride = pr.qk;
    args.cache = pr.cache.view();
    args.page_table = pr.cache.page_table_device.data();
    args.max_pages_per_seq = pr.cache.max_pages_per_seq;
    args.cu_q_lens = cu_q_device.data();
    args.batch = pr.batch;
    args.max_q_len = pr.max_q_len;
    args.num_heads = c.heads;
    args.nope_dim = c.nope;
    args.v_dim = c.v;
    args.softmax_scale = pr.scale;
    for (const int64_t window : wc.windows) {
      const kernels::cuda::PrefillKeyPlan plan = kernels::cuda::plan_prefill_key_passes(pr.kv_lens, window);
      // Per pass: its keys' k_nope / v rows, and the CPU's log-sum-exp of every (query row, head) over them.
      std::vector<DeviceBuffer<__nv_bfloat16>> pass_k, pass_v, pass_kv;  // pass_kv: kv_b's interleaved rows
      std::vector<DeviceBuffer<int32_t>> pass_cu_kv, pass_key_positions;
      std::vector<std::vector<double>> pass_lse;
      for (const kernels::cuda::PrefillKeyPass& pass : plan.passes) {
        std::vector<float> k_rows, v_rows;
        std::vector<double> reference(static_cast<size_t>(lse_elems), -INFINITY);
        for (int32_t b = 0; b < pr.batch; ++b) {
          const int32_t first = pass.key_positions[b], keys = pass.cu_kv_lens[b + 1] - pass.cu_kv_lens[b];
          const int64_t row0 = pr.cu_kv[b] + first;
          k_rows.insert(k_rows.end(), pr.k_nope.begin() + row0 * c.heads * c.nope,
                        pr.k_nope.begin() + (row0 + keys) * c.heads * c.nope);
          v_rows.insert(v_rows.end(), pr.v.begin() + row0 * c.heads * c.v, pr.v.begin() + (row0 + keys) * c.heads * c.v);
          for (int32_t j = 0; j < c.q_kv_lens[b].first; ++j) {
            const int32_t position = query_positions[b] + j;
            for (int32_t h = 0; h < c.heads; ++h) {
              const float* qrow = pr.q.data() + ((pr.cu_q[b] + j) * c.heads + h) * pr.qk;
              std::vector<double> scores;
              for (int32_t key = first; key < first + keys && key <= position; ++key) {
                const float* k = pr.k_nope.data() + ((pr.cu_kv[b] + key) * c.heads + h) * c.nope;
                const float* k_pe = pr.cache.rows[b].data() + key * pr.cache.row_elems() + c.kv_lora;
                double dot = 0.0;
                for (int32_t i = 0; i < c.nope; ++i) dot += static_cast<double>(qrow[i]) * k[i];
                for (int32_t i = 0; i < c.rope; ++i) dot += static_cast<double>(qrow[c.nope + i]) * k_pe[i];
                scores.push_back(dot * pr.scale * M_LOG2E);
              }
              if (scores.empty()) continue;
              const double top = *std::max_element(scores.begin(), scores.end());
              double sum = 0.0;
              for (double score : scores) sum += std::exp2(score - top);
              reference[static_cast<size_t>((pr.cu_q[b] + j) * c.heads + h)] = top + std::log2(sum);
            }
          }
        }
        pass_k.emplace_back(float_to_bf16_vector(k_rows));
        pass_v.emplace_back(float_to_bf16_vector(v_rows));
        std::vector<float> kv_rows;  // [keys, heads, nope + v]: each head's k_nope then its v, as kv_b_proj writes them
        for (size_t head_row = 0; head_row < k_rows.size() / c.nope; ++head_row) {
          kv_rows.insert(kv_rows.end(), k_rows.begin() + head_row * c.nope, k_rows.begin() + (head_row + 1) * c.nope);
          kv_rows.insert(kv_rows.end(), v_rows.begin() + head_row * c.v, v_rows.begin() + (head_row + 1) * c.v);
        }
        pass_kv.emplace_back(float_to_bf16_vector(kv_rows));
        pass_cu_kv.emplace_back(pass.cu_kv_lens);
        pass_key_positions.emplace_back(pass.key_positions);
        pass_lse.push_back(std::move(reference));
      }
      for (MlaPrefillKernel kernel : {MlaPrefillKernel::kMmaSync, MlaPrefillKernel::kWgmma, MlaPrefillKernel::kAuto}) {
        if (kernel == MlaPrefillKernel::kWgmma && !v3_dims) continue;
        const std::string what = c.name + ", window " + std::to_string(window) + ", " +
                                 (kernel == MlaPrefillKernel::kMmaSync ? "mma.sync"
                                  : kernel == MlaPrefillKernel::kWgmma ? "wgmma"
                                                                       : (v3_dims ? "tma" : "auto"));
        SCOPED_TRACE(what);
        kernels::cuda::MlaPrefillArgs whole = args;  // the unwindowed call
        whole.kernel = kernel;
        whole.k_nope = k_device.data();
        whole.v = v_device.data();
        whole.cu_kv_lens = cu_kv_device.data();
        whole.total_kv_rows = pr.total_kv;
        whole.out = whole_out.data();
        whole_out.fill_bytes(0xff);
        kernels::cuda::mla_prefill(whole, nullptr);
        acc.fill_bytes(0xff);
        for (size_t p = 0; p < plan.passes.size(); ++p) {
          kernels::cuda::MlaPrefillArgs pass = args;
          pass.kernel = kernel;
          pass.k_nope = pass_k[p].data();
          pass.v = pass_v[p].data();
          pass.cu_kv_lens = pass_cu_kv[p].data();
          pass.key_positions = pass_key_positions[p].data();
          pass.query_positions = query_positions_device.data();
          pass.total_kv_rows = plan.passes[p].num_keys;
          pass.out = p == 0 ? acc.data() : part.data();
          pass.lse_log2 = lse.data() + (p == 0 ? 0 : lse_elems);
          part.fill_bytes(0xff);
          FATHOM_CUDA_CHECK(cudaMemset(lse.data() + (p == 0 ? 0 : lse_elems), 0xff, lse_elems * sizeof(float)));
          kernels::cuda::mla_prefill(pass, nullptr);
          FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
          const std::vector<float> lse_host = lse.download();
          size_t lse_mismatches = 0;
          for (int64_t i = 0; i < lse_elems; ++i) {
            const float got = lse_host[static_cast<size_t>((p == 0 ? 0 : lse_elems) + i)];
            const double want = pass_lse[p][static_cast<size_t>(i)];
            lse_mismatches += std::isinf(want) ? !(std::isinf(got) && got < 0) : !(std::fabs(got - want) <= 5e-3);
          }
          EXPECT_EQ(lse_mismatches, 0u) << "pass " << p << " of " << plan.passes.size() << ": log-sum-exps";
          // The pass over kv_b's interleaved rows (the model's layout: heads nope + v apart): the same bits.
          kernels::cuda::MlaPrefillArgs interleaved = pass;
          interleaved.k_nope = pass_kv[p].data();
          interleaved.v = pass_kv[p].data() + c.nope;
          interleaved.k_head_stride = interleaved.v_head_stride = c.nope + c.v;
          interleaved.out = interleaved_out.data();
          interleaved.lse_log2 = interleaved_lse.data();
          interleaved_out.fill_bytes(0xff);
          interleaved_lse.fill_bytes(0xff);
          kernels::cuda::mla_prefill(interleaved, nullptr);
          FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
          expect_same_device_bits(interleaved_out, p == 0 ? acc : part, "pass over interleaved rows: output");
          const std::vector<float> interleaved_lse_host = interleaved_lse.download();
          EXPECT_EQ(std::memcmp(interleaved_lse_host.data(), lse_host.data() + (p == 0 ? 0 : lse_elems),
                                static_cast<size_t>(lse_elems) * sizeof(float)),
                    0)
              << "pass over interleaved rows: log-sum-exps";
          if (p > 0) {
            kernels::cuda::mla_merge_attention(acc.data(), lse.data(), part.data(), lse.data() + lse_elems,
                                               pr.total_q, c.heads, c.v, nullptr);
          }
        }
        FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> merged = bf16_to_float_vector(acc.download());
        ASSERT_TRUE(all_finite(merged)) << "unwritten or non-finite rows";
        EXPECT_LE(relative_l2_error(merged, pr.expected), kTolerance);
        const std::vector<__nv_bfloat16> whole_bits = whole_out.download(), merged_bits = acc.download();
        size_t first_window_rows = 0, differing = 0;
        for (int32_t b = 0; b < pr.batch; ++b) {
          for (int32_t j = 0; j < c.q_kv_lens[b].first; ++j) {
            if (query_positions[b] + j >= window) continue;
            const size_t at = static_cast<size_t>((pr.cu_q[b] + j) * c.heads * c.v);
            ++first_window_rows;
            differing += std::memcmp(whole_bits.data() + at, merged_bits.data() + at,
                                     static_cast<size_t>(c.heads * c.v) * sizeof(__nv_bfloat16)) != 0;
          }
        }
        EXPECT_GT(first_window_rows, 0u) << "no row in the first window: the bit check would be empty";
        EXPECT_EQ(differing, 0u) << "of " << first_window_rows << " rows in the first window";
        std::printf("[ mla prefill windows ] %-40s %zu passes, rel_l2 %.2e\n", what.c_str(), plan.passes.size(),
                    relative_l2_error(merged, pr.expected));
      }
    }
  }
}

// The persistent TMA kernel's item order (host arithmetic, no GPU): every CTA count visits every item once, the
// coordinates cover every (sequence, head, query tile), query tiles run from the last within a head block, and the
// snake keeps V3's CTAs within 10% of the mean work.
TEST(MlaPrefillItemOrder, EveryItemOnceWithHeaviestTilesFirst) {
  using kernels::cuda::mla_detail::PrefillItemCoords;
  using kernels::cuda::mla_detail::PrefillItemOrder;
  for (const int num_q_tiles : {1, 2, 3, 8, 33}) {
    for (const int batch : {1, 3}) {
      for (const int num_heads : {1, 3, 16, 128}) {
        for (const int head_block : {1, 2, 4, 8}) {
          const PrefillItemOrder order{num_q_tiles, batch, num_heads, head_block};
          const int num_items = order.num_items();
          std::vector<int> coords_seen(static_cast<size_t>(num_items), 0);
          for (int index = 0; index < num_items; ++index) {
            const PrefillItemCoords c = order.coords(index);
            ASSERT_TRUE(c.sequence >= 0 && c.sequence < batch && c.head >= 0 && c.head < num_heads && c.q_tile >= 0 &&
                        c.q_tile < num_q_tiles)
                << "item " << index << " of " << num_items;
            ++coords_seen[(static_cast<size_t>(c.sequence) * num_heads + c.head) * num_q_tiles + c.q_tile];
            if (index > 0) {
              const PrefillItemCoords previous = order.coords(index - 1);
              if (previous.sequence == c.sequence && previous.head / head_block == c.head / head_block) {
                EXPECT_GE(previous.q_tile, c.q_tile) << "item " << index << ": a later query tile after an earlier one";
              }
            }
          }
          for (int seen : coords_seen) ASSERT_EQ(seen, 1) << "coordinates not a bijection";
          for (const int ctas : {1, 2, 7, 132, num_items, num_items + 5}) {
            std::vector<int> visits(static_cast<size_t>(num_items), 0);
            for (int cta = 0; cta < ctas; ++cta) {
              for (int round = 0;; ++round) {
                const int index = order.index(round, ctas, cta);
                if (index < 0) break;
                ASSERT_LT(index, num_items);
                ++visits[static_cast<size_t>(index)];
              }
            }
            for (int index = 0; index < num_items; ++index) {
              ASSERT_EQ(visits[static_cast<size_t>(index)], 1)
                  << "item " << index << " of " << num_items << " with " << ctas << " CTAs, " << num_q_tiles
                  << " query tiles, " << batch << " sequences, " << num_heads << " heads, head block " << head_block;
            }
          }
        }
      }
    }
  }
  // Balance at V3's 128 heads on 132 CTAs: work = key tiles = query tile + 1 (sequences of equal length).
  for (const auto [num_q_tiles, batch] : {std::pair{64, 1}, {32, 1}, {8, 4}, {2, 16}}) {
    for (const int head_block : {1, 2}) {
      const PrefillItemOrder order{num_q_tiles, batch, 128, head_block};
      constexpr int kCtas = 132;
      std::vector<double> work(kCtas, 0.0);
      double total = 0.0;
      for (int cta = 0; cta < kCtas; ++cta) {
        for (int round = 0;; ++round) {
          const int index = order.index(round, kCtas, cta);
          if (index < 0) break;
          work[static_cast<size_t>(cta)] += order.coords(index).q_tile + 1;
        }
        total += work[static_cast<size_t>(cta)];
      }
      const double busiest = *std::max_element(work.begin(), work.end());
      EXPECT_LE(busiest, 1.10 * total / kCtas) << num_q_tiles << " query tiles x " << batch << ", head block "
                                                << head_block;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MlaPrefillSweep,
    ::testing::Values(
        // DeepSeek-V3 head dims (nope 128, rope 64, v 128, kv_lora 512)
        PrefillCase{"v3_h128_q1", 128, 128, 64, 128, 512, 16, {{1, 1}}},
        PrefillCase{"v3_h128_q300_page16", 128, 128, 64, 128, 512, 16, {{300, 300}}},
        PrefillCase{"v3_h128_varlen_chunked_page64", 128, 128, 64, 128, 512, 64, {{1, 1}, {77, 77}, {130, 200}}},
        PrefillCase{"v3_h16_chunked_page1", 16, 128, 64, 128, 512, 1, {{64, 64}, {200, 1000}, {1, 513}}},
        PrefillCase{"v3_h2_long4100_page64", 2, 128, 64, 128, 512, 64, {{4100, 4100}}},
        PrefillCase{"v3_h4_long_chunk_page16", 4, 128, 64, 128, 512, 16, {{1000, 3000}, {129, 129}}},
        // odd heads: the TMA kernel's last block of 2 heads (PrefillTmaItems) has one
        PrefillCase{"v3_h3_q520_page16", 3, 128, 64, 128, 512, 16, {{520, 520}, {100, 700}, {1, 1}}},
        // odd small dims (scalar load path, padded tiles)
        PrefillCase{"odd_h5_nope37_rope11_v29_page1", 5, 37, 11, 29, 50, 1, {{1, 1}, {70, 70}, {33, 100}}},
        PrefillCase{"odd_h3_nope64_rope16_v64_page5", 3, 64, 16, 64, 96, 5, {{128, 128}, {65, 300}}},
        PrefillCase{"odd_h7_nope100_rope40_v90_page16", 7, 100, 40, 90, 120, 16, {{200, 250}}}),
    [](const ::testing::TestParamInfo<PrefillCase>& info) { return info.param.name; });

}  // namespace
}  // namespace fathom::testing
