// Small-op kernels at DeepSeek-V3 dims: median time (CUDA events) vs the bytes-moved floor at the device-to-device
// copy bandwidth measured in the same run.
//
// Two timings per case:
//   cold: L2 flushed (memset of 2x L2) before each launch; events around the single launch; median of kRepeats.
//   warm: kGraphLaunches launches captured in one CUDA graph, replayed; median replay time / kGraphLaunches
//         (inputs L2-resident where they fit, launch gaps amortised) - the decode-loop situation.
// Floor = bytes that must move (inputs read once, outputs written once) / measured copy bandwidth.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/gpu_timer.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/embedding/embedding.h"
#include "kernels/cuda/fp8_gemm/act_quant.h"
#include "kernels/cuda/mla/mla_kv_cache_write.h"
#include "kernels/cuda/mla/mla_prepare.h"
#include "kernels/cuda/moe/moe_combine.h"
#include "kernels/cuda/moe/moe_gather.h"
#include "kernels/cuda/moe/moe_permutation.h"
#include "kernels/cuda/moe/moe_router_gemm.h"
#include "kernels/cuda/moe/moe_router_planes.h"
#include "kernels/cuda/norm/bf16x3_split.cuh"
#include "kernels/cuda/moe/moe_routing.h"
#include "kernels/cuda/moe/swiglu.h"
#include "kernels/cuda/norm/bf16_gemm.h"
#include "kernels/cuda/norm/rms_norm.h"
#include "kernels/cuda/rope/rope.h"
#include "kernels/cuda/sampling/greedy_tokens.h"
#include "kernels/cuda/sampling/sampling.h"
#include "kernels/cuda/sampling/score_tokens.h"

namespace fathom::kernels::cuda {
namespace {

constexpr int kRepeats = 50;
constexpr int kGraphLaunches = 20;
constexpr int kGraphReplays = 20;
constexpr int64_t kHidden = 7168, kExperts = 256, kTopK = 8, kMoeIntermediate = 2048, kVocab = 129280;
constexpr int32_t kRowAlignment = 1;  // the model permutes without padding (CudaModelImpl::moe)

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Timer {
  cudaStream_t stream;
  DeviceBuffer<uint8_t> flush;
  cudaEvent_t start, stop;
  bool profile_only = false;  // one launch per op, no timing (for ncu)
  explicit Timer(cudaStream_t s, size_t l2_bytes) : stream(s), flush(2 * l2_bytes) {
    FATHOM_CUDA_CHECK(cudaEventCreate(&start));
    FATHOM_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~Timer() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  float elapsed_us() {
    FATHOM_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    FATHOM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms * 1000.0f;
  }
  // Median microseconds of one launch with a cold L2.
  float cold(const std::function<void()>& op) {
    op();  // warm-up (module load)
    if (profile_only) return 0.0f;
    std::vector<float> times;
    for (int i = 0; i < kRepeats; ++i) {
      FATHOM_CUDA_CHECK(cudaMemsetAsync(flush.data(), i & 0xff, flush.bytes(), stream));
      FATHOM_CUDA_CHECK(cudaEventRecord(start, stream));
      op();
      FATHOM_CUDA_CHECK(cudaEventRecord(stop, stream));
      times.push_back(elapsed_us());
    }
    return median(times);
  }
  // Median microseconds per launch inside a graph of kGraphLaunches launches.
  float warm(const std::function<void()>& op) {
    if (profile_only) return 0.0f;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    FATHOM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kGraphLaunches; ++i) op();
    FATHOM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    FATHOM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    FATHOM_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    std::vector<float> times;
    for (int i = 0; i < kGraphReplays; ++i) {
      FATHOM_CUDA_CHECK(cudaEventRecord(start, stream));
      FATHOM_CUDA_CHECK(cudaGraphLaunch(exec, stream));
      FATHOM_CUDA_CHECK(cudaEventRecord(stop, stream));
      times.push_back(elapsed_us() / kGraphLaunches);
    }
    FATHOM_CUDA_CHECK(cudaGraphExecDestroy(exec));
    FATHOM_CUDA_CHECK(cudaGraphDestroy(graph));
    return median(times);
  }
};

// Pseudo-random values (64-bit LCG, uniform with the given standard deviation): fast enough for the
// 100M-element buffers of the 4096-token cases. Never zeros (they can run faster than real data).
std::vector<float> random_floats(size_t count, float stddev, uint32_t seed) {
  std::vector<float> v(count);
  uint64_t state = 0x9E3779B97F4A7C15ull * (seed + 1);
  const float scale = stddev * 1.7320508f / 8388608.0f;  // uniform [-sqrt(3), sqrt(3)) * stddev
  for (float& x : v) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x = (static_cast<float>(state >> 40) - 8388608.0f) * scale;
  }
  return v;
}

std::vector<__nv_bfloat16> random_bf16(size_t count, float stddev, uint32_t seed) {
  const std::vector<float> f = random_floats(count, stddev, seed);
  std::vector<__nv_bfloat16> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = __float2bfloat16(f[i]);
  return v;
}

struct Row {
  std::string op;
  int64_t tokens;
  float cold_us, warm_us;
  double bytes;
};

void print_row(const Row& r, double bandwidth) {
  const double floor_us = r.bytes / bandwidth;
  std::printf("%-22s %6lld %10.2f %10.2f %12.0f %9.2f %7.2f %7.2f\n", r.op.c_str(), static_cast<long long>(r.tokens),
              r.cold_us, r.warm_us, r.bytes, floor_us, r.cold_us / floor_us, r.warm_us / floor_us);
  std::fflush(stdout);
}

// Sampling (batch = tokens, capped at 256 rows): temperature + top-k + top-p + min-p, and greedy; then scoring.
void run_sampling(int64_t tokens, Timer& timer, double bandwidth, cudaStream_t stream) {
  const int64_t batch = std::min<int64_t>(tokens, 256);
  DeviceBuffer<float> vocab_logits(random_floats(static_cast<size_t>(batch * kVocab), 3.0f, 13));
  DeviceBuffer<float> temperature(std::vector<float>(static_cast<size_t>(batch), 0.7f));
  DeviceBuffer<float> greedy_temperature(std::vector<float>(static_cast<size_t>(batch), 0.0f));
  DeviceBuffer<int32_t> top_k(std::vector<int32_t>(static_cast<size_t>(batch), 50));
  DeviceBuffer<float> top_p(std::vector<float>(static_cast<size_t>(batch), 0.9f));
  DeviceBuffer<float> min_p(std::vector<float>(static_cast<size_t>(batch), 0.05f));
  DeviceBuffer<uint64_t> seeds(std::vector<uint64_t>(static_cast<size_t>(batch), 7));
  DeviceBuffer<int32_t> sampled(static_cast<size_t>(batch));
  DeviceBuffer<float> logprobs(static_cast<size_t>(batch));
  const SamplingParams full{temperature.data(), top_k.data(), top_p.data(), min_p.data(), seeds.data(), nullptr};
  const SamplingParams greedy{greedy_temperature.data(), nullptr, nullptr, nullptr, seeds.data(), nullptr};
  const SamplingParams top_p_only{temperature.data(), nullptr, top_p.data(), nullptr, seeds.data(), nullptr};
  auto sample_full = [&] { sample_tokens(vocab_logits.data(), batch, kVocab, full, sampled.data(), logprobs.data(), stream); };
  auto sample_top_p = [&] {
    sample_tokens(vocab_logits.data(), batch, kVocab, top_p_only, sampled.data(), logprobs.data(), stream);
  };
  auto sample_greedy = [&] {
    sample_tokens(vocab_logits.data(), batch, kVocab, greedy, sampled.data(), logprobs.data(), stream);
  };
  const double sample_bytes = double(batch * kVocab * 4);
  print_row({"sample_greedy(B)", batch, timer.cold(sample_greedy), timer.warm(sample_greedy), sample_bytes}, bandwidth);
  // What the engine runs when every row of a step is greedy (same results as sample_greedy, bit for bit).
  auto greedy_only = [&] { greedy_tokens(vocab_logits.data(), batch, kVocab, sampled.data(), logprobs.data(), stream); };
  print_row({"greedy_tokens(B)", batch, timer.cold(greedy_only), timer.warm(greedy_only), sample_bytes}, bandwidth);
  print_row({"sample_top_p(B)", batch, timer.cold(sample_top_p), timer.warm(sample_top_p), sample_bytes}, bandwidth);
  print_row({"sample_k_p_minp(B)", batch, timer.cold(sample_full), timer.warm(sample_full), sample_bytes}, bandwidth);
  // Logits shaped like a language model's (a normal bulk, a few tokens far above it) at DeepSeek-R1's recommended
  // temperature 0.6 and top_p 0.95, and with top_k 50: the uniform rows above spread the threshold's neighbourhood
  // over the whole row, these concentrate it.
  std::vector<float> llm_logits(static_cast<size_t>(batch * kVocab));
  {
    std::mt19937 rng(29);
    std::normal_distribution<float> bulk(0.0f, 2.5f);
    std::uniform_real_distribution<float> head(14.0f, 22.0f);
    for (float& v : llm_logits) v = bulk(rng);
    for (int64_t r = 0; r < batch; ++r) {
      for (int h = 0; h < 12; ++h) llm_logits[static_cast<size_t>(r * kVocab + rng() % kVocab)] = head(rng);
    }
  }
  DeviceBuffer<float> llm_rows(llm_logits);
  DeviceBuffer<float> r1_temperature(std::vector<float>(static_cast<size_t>(batch), 0.6f));
  DeviceBuffer<float> r1_top_p(std::vector<float>(static_cast<size_t>(batch), 0.95f));
  const SamplingParams r1{r1_temperature.data(), nullptr, r1_top_p.data(), nullptr, seeds.data(), nullptr};
  const SamplingParams r1_top_k{r1_temperature.data(), top_k.data(), r1_top_p.data(), nullptr, seeds.data(), nullptr};
  auto sample_llm = [&] { sample_tokens(llm_rows.data(), batch, kVocab, r1, sampled.data(), logprobs.data(), stream); };
  auto sample_llm_top_k = [&] {
    sample_tokens(llm_rows.data(), batch, kVocab, r1_top_k, sampled.data(), logprobs.data(), stream);
  };
  print_row({"sample_llm_p0.95(B)", batch, timer.cold(sample_llm), timer.warm(sample_llm), sample_bytes}, bandwidth);
  print_row({"sample_llm_k50_p(B)", batch, timer.cold(sample_llm_top_k), timer.warm(sample_llm_top_k), sample_bytes},
            bandwidth);

  // Scoring (prompt logprobs: every row scores a token, with 1 or 20 alternatives), against what it replaces: the
  // rows' logits copied to pinned host memory for the host's score_token.
  std::vector<ScoreRow> score_rows;
  for (int64_t r = 0; r < batch; ++r) score_rows.push_back({static_cast<int32_t>(r), static_cast<int32_t>(r * 97 % kVocab), 0});
  DeviceBuffer<ScoreRow> rows_top1, rows_top20;
  for (auto [top_n, buffer] : {std::pair{1, &rows_top1}, std::pair{20, &rows_top20}}) {
    for (ScoreRow& row : score_rows) row.top_n = top_n;
    *buffer = DeviceBuffer<ScoreRow>(score_rows);
  }
  DeviceBuffer<float> scored_logprob(static_cast<size_t>(batch)), top_logprobs(static_cast<size_t>(batch * 20));
  DeviceBuffer<int64_t> scored_rank(static_cast<size_t>(batch));
  DeviceBuffer<int32_t> top_ids(static_cast<size_t>(batch * 20));
  const ScoreOutputs score_out{scored_logprob.data(), scored_rank.data(), top_ids.data(), top_logprobs.data()};
  auto score_top1 = [&] { score_tokens(vocab_logits.data(), kVocab, rows_top1.data(), batch, nullptr, 20, score_out, stream); };
  auto score_top20 = [&] { score_tokens(vocab_logits.data(), kVocab, rows_top20.data(), batch, nullptr, 20, score_out, stream); };
  print_row({"score_top1(B)", batch, timer.cold(score_top1), timer.warm(score_top1), sample_bytes}, bandwidth);
  print_row({"score_top20(B)", batch, timer.cold(score_top20), timer.warm(score_top20), sample_bytes}, bandwidth);
  auto score_llm_top20 = [&] { score_tokens(llm_rows.data(), kVocab, rows_top20.data(), batch, nullptr, 20, score_out, stream); };
  print_row({"score_llm_top20(B)", batch, timer.cold(score_llm_top20), timer.warm(score_llm_top20), sample_bytes},
            bandwidth);
  float* pinned = nullptr;
  FATHOM_CUDA_CHECK(cudaMallocHost(&pinned, static_cast<size_t>(sample_bytes)));
  auto to_host = [&] {
    FATHOM_CUDA_CHECK(cudaMemcpyAsync(pinned, vocab_logits.data(), static_cast<size_t>(sample_bytes), cudaMemcpyDeviceToHost, stream));
  };
  const float d2h_warm = timer.warm(to_host);
  std::printf("%-22s %6lld %10s %10.2f   %.1f GB/s to pinned host memory (the host scoring path's copy alone)\n",
              "logits_to_host(B)", static_cast<long long>(batch), "-", d2h_warm, d2h_warm > 0 ? sample_bytes / d2h_warm / 1e3 : 0.0);
  FATHOM_CUDA_CHECK(cudaFreeHost(pinned));
}

// moe_only: stop after the MoE ops (route, permutation, gather, combine, swiglu_quant_fp8).
void run(int64_t tokens, const DeviceBuffer<__nv_bfloat16>& table, Timer& timer, double bandwidth, cudaStream_t stream,
         bool moe_only) {
  const int64_t entries = tokens * kTopK;
  // Routing.
  DeviceBuffer<float> logits(random_floats(static_cast<size_t>(tokens * kExperts), 2.0f, 1));
  DeviceBuffer<float> bias(random_floats(kExperts, 0.05f, 2));
  DeviceBuffer<int32_t> ids(static_cast<size_t>(entries));
  DeviceBuffer<float> weights(static_cast<size_t>(entries));
  const MoeRoutingConfig config{kExperts, 8, 4, kTopK, true, 2.5f};
  auto route = [&] { moe_route(logits.data(), tokens, bias.data(), config, ids.data(), weights.data(), stream); };
  print_row({"moe_route", tokens, timer.cold(route), timer.warm(route),
             double(tokens * kExperts * 4 + kExperts * 4 + entries * 8)}, bandwidth);

  // Permutation (align 128).
  const MoePermutationShape shape{tokens, static_cast<int32_t>(kTopK), static_cast<int32_t>(kExperts), kRowAlignment};
  const int64_t max_rows = moe_max_permuted_rows(shape);
  DeviceBuffer<int32_t> offsets(kExperts + 1), counts(kExperts), row_token_slot(max_rows), row_expert(max_rows),
      token_slot_row(entries);
  DeviceBuffer<uint8_t> workspace(moe_permutation_workspace_bytes(shape));
  const MoePermutation perm{offsets.data(), counts.data(), row_token_slot.data(), row_expert.data(), token_slot_row.data()};
  auto permute = [&] {
    moe_build_permutation(ids.data(), shape, workspace.data(), workspace.bytes(), perm, stream);
  };
  print_row({"moe_build_permutation", tokens, timer.cold(permute), timer.warm(permute),
             double(entries * 4 + (2 * kExperts + 1) * 4 + entries * 4 + 2 * max_rows * 4)}, bandwidth);

  // Gather of bf16 hidden rows.
  DeviceBuffer<__nv_bfloat16> hidden(random_bf16(static_cast<size_t>(tokens * kHidden), 1.0f, 3));
  DeviceBuffer<__nv_bfloat16> permuted(static_cast<size_t>(max_rows * kHidden));
  auto gather = [&] {
    moe_gather_rows(hidden.data(), tokens, kTopK, kHidden * 2, token_slot_row.data(), permuted.data(), stream);
  };
  print_row({"moe_gather_rows_bf16", tokens, timer.cold(gather), timer.warm(gather),
             double(entries * 4 + tokens * kHidden * 2 + entries * kHidden * 2)}, bandwidth);

  // Combine (with the shared expert's output).
  DeviceBuffer<__nv_bfloat16> expert_out(random_bf16(static_cast<size_t>(max_rows * kHidden), 1.0f, 4));
  DeviceBuffer<__nv_bfloat16> shared_out(random_bf16(static_cast<size_t>(tokens * kHidden), 1.0f, 5));
  DeviceBuffer<__nv_bfloat16> combined(static_cast<size_t>(tokens * kHidden));
  auto combine = [&] {
    moe_combine(expert_out.data(), weights.data(), token_slot_row.data(), shared_out.data(), tokens, kTopK, kHidden,
                combined.data(), stream);
  };
  print_row({"moe_combine", tokens, timer.cold(combine), timer.warm(combine),
             double(entries * 8 + entries * kHidden * 2 + 2 * tokens * kHidden * 2)}, bandwidth);

  // SwiGLU + e4m3 quantization of the experts' gate_up rows (routed rows only: padding rows skipped).
  DeviceBuffer<__nv_bfloat16> gate_up(random_bf16(static_cast<size_t>(max_rows * 2 * kMoeIntermediate), 2.0f, 6));
  DeviceBuffer<__nv_fp8_e4m3> act(static_cast<size_t>(max_rows * kMoeIntermediate));
  DeviceBuffer<float> act_scales(static_cast<size_t>(max_rows * kMoeIntermediate / 128));
  auto swiglu = [&] {
    swiglu_quant_fp8(gate_up.data(), max_rows, kMoeIntermediate, row_expert.data(), act.data(), act_scales.data(),
                     kMoeIntermediate / 128, 1, stream);
  };
  const double swiglu_bytes =
      double(max_rows * 4 + entries * (2 * kMoeIntermediate * 2 + kMoeIntermediate + kMoeIntermediate / 128 * 4));
  print_row({"swiglu_quant_fp8", tokens, timer.cold(swiglu), timer.warm(swiglu), swiglu_bytes}, bandwidth);
  if (moe_only && !timer.profile_only) {  // every walk length (swiglu_heuristics.h)
    for (int pairs : {1, 2, 4, 8}) {
      auto tuned = [&] {
        swiglu_quant_fp8(gate_up.data(), max_rows, kMoeIntermediate, row_expert.data(), act.data(), act_scales.data(),
                         kMoeIntermediate / 128, 1, stream, {}, SwigluQuantTuning{pairs});
      };
      print_row({"swiglu_walk_" + std::to_string(pairs), tokens, timer.cold(tuned), timer.warm(tuned), swiglu_bytes},
                bandwidth);
    }
  }
  if (moe_only) return;

  // RMSNorm and fused residual add + RMSNorm.
  DeviceBuffer<__nv_bfloat16> norm_weight(random_bf16(kHidden, 0.2f, 7));
  DeviceBuffer<__nv_bfloat16> residual(random_bf16(static_cast<size_t>(tokens * kHidden), 4.0f, 8));
  DeviceBuffer<__nv_bfloat16> normed(static_cast<size_t>(tokens * kHidden));
  auto norm = [&] {
    rms_norm_bf16(hidden.data(), kHidden, tokens, kHidden, norm_weight.data(), 1e-6f, normed.data(), kHidden, stream);
  };
  print_row({"rms_norm", tokens, timer.cold(norm), timer.warm(norm), double(2 * tokens * kHidden * 2 + kHidden * 2)},
            bandwidth);
  auto add_norm = [&] {
    add_rms_norm_bf16(hidden.data(), residual.data(), tokens, kHidden, norm_weight.data(), 1e-6f, normed.data(), stream);
  };
  print_row({"add_rms_norm", tokens, timer.cold(add_norm), timer.warm(add_norm),
             double(4 * tokens * kHidden * 2 + kHidden * 2)}, bandwidth);
  // The same norms with the next GEMM's e4m3 input fused in (replacing a quantize_activations_fp8 launch), and the
  // q_a norm (1536 columns, in place) with and without it.
  DeviceBuffer<uint8_t> normed_fp8(static_cast<size_t>(tokens * kHidden));
  DeviceBuffer<float> normed_scales(static_cast<size_t>(tokens * kHidden / 128));
  DeviceBuffer<float> normed_f32(static_cast<size_t>(tokens * kHidden));
  const Fp8RowsOut fp8{normed_fp8.data(), normed_scales.data()};
  const double fp8_bytes = double(tokens * kHidden + tokens * kHidden / 128 * 4);
  auto norm_fp8 = [&] {
    rms_norm_bf16(hidden.data(), kHidden, tokens, kHidden, norm_weight.data(), 1e-6f, normed.data(), kHidden, &fp8,
                  stream);
  };
  print_row({"rms_norm+fp8", tokens, timer.cold(norm_fp8), timer.warm(norm_fp8),
             double(2 * tokens * kHidden * 2 + kHidden * 2) + fp8_bytes}, bandwidth);
  auto add_norm_fp8 = [&] {
    add_rms_norm_bf16(hidden.data(), residual.data(), tokens, kHidden, norm_weight.data(), 1e-6f, normed.data(),
                      nullptr, &fp8, stream);
  };
  print_row({"add_rms_norm+fp8", tokens, timer.cold(add_norm_fp8), timer.warm(add_norm_fp8),
             double(4 * tokens * kHidden * 2 + kHidden * 2) + fp8_bytes}, bandwidth);
  auto add_norm_f32_fp8 = [&] {
    add_rms_norm_bf16(hidden.data(), residual.data(), tokens, kHidden, norm_weight.data(), 1e-6f, normed.data(),
                      normed_f32.data(), &fp8, stream);
  };
  print_row({"add_rms_norm+f32+fp8", tokens, timer.cold(add_norm_f32_fp8), timer.warm(add_norm_f32_fp8),
             double(4 * tokens * kHidden * 2 + kHidden * 2 + tokens * kHidden * 4) + fp8_bytes}, bandwidth);
  // The MoE layers' post-attention norm in the router's tensor-core form: three bf16 planes instead of the fp32 copy.
  DeviceBuffer<__nv_bfloat16> normed_planes(static_cast<size_t>(kBf16SplitPlanes * tokens * kHidden));
  auto add_norm_planes_fp8 = [&] {
    add_rms_norm_bf16(hidden.data(), SplitKPartials{}, residual.data(), tokens, kHidden, norm_weight.data(), 1e-6f,
                      normed.data(), UnroundedRowsOut{nullptr, normed_planes.data()}, &fp8, stream);
  };
  print_row({"add_rms_norm+planes+fp8", tokens, timer.cold(add_norm_planes_fp8), timer.warm(add_norm_planes_fp8),
             double(4 * tokens * kHidden * 2 + kHidden * 2 + tokens * kHidden * 6) + fp8_bytes}, bandwidth);
  // The q_a norm reads fixed rows: in place, the repeated runs shrink most values toward subnormals (weights ~0.2),
  // where the fp8 output's IEEE divisions take their slow path; likely why this row read 10.7-11.3 us warm in place.
  constexpr int64_t kQLora = 1536;
  DeviceBuffer<__nv_bfloat16> q_a_rows(random_bf16(static_cast<size_t>(tokens * kQLora), 1.0f, 11));
  auto q_norm = [&] {
    rms_norm_bf16(q_a_rows.data(), kQLora, tokens, kQLora, norm_weight.data(), 1e-6f, normed.data(), kQLora, stream);
  };
  print_row({"rms_norm_q_a", tokens, timer.cold(q_norm), timer.warm(q_norm),
             double(2 * tokens * kQLora * 2 + kQLora * 2)}, bandwidth);
  auto q_norm_fp8 = [&] {
    rms_norm_bf16(q_a_rows.data(), kQLora, tokens, kQLora, norm_weight.data(), 1e-6f, normed.data(), kQLora, &fp8,
                  stream);
  };
  print_row({"rms_norm_q_a+fp8", tokens, timer.cold(q_norm_fp8), timer.warm(q_norm_fp8),
             double(2 * tokens * kQLora * 2 + kQLora * 2 + tokens * kQLora + tokens * kQLora / 128 * 4)}, bandwidth);

  // RoPE on q (128 heads x 192, rope 64 at offset 128) and k_pe (rope 64 at offset 512 of 576).
  DeviceBuffer<__nv_bfloat16> q(random_bf16(static_cast<size_t>(tokens * 128 * 192), 1.0f, 9));
  DeviceBuffer<__nv_bfloat16> kv_a(random_bf16(static_cast<size_t>(tokens * 576), 1.0f, 10));
  std::vector<int32_t> position_values(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) position_values[t] = static_cast<int32_t>(1000 + t);
  DeviceBuffer<int32_t> positions(position_values);
  std::vector<float> inv_freq_values(32);
  for (int i = 0; i < 32; ++i) inv_freq_values[i] = std::pow(10000.0f, -2.0f * i / 64);
  DeviceBuffer<float> inv_freq(inv_freq_values);
  const RopeTarget targets[2] = {{q.data() + 128, 128, 192}, {kv_a.data() + 512, 1, 576}};
  const RopeParams rope_params{inv_freq.data(), 64, 1.3f, true};
  auto rope = [&] { apply_rope_bf16(targets, 2, tokens, positions.data(), rope_params, stream); };
  print_row({"rope_q_kpe", tokens, timer.cold(rope), timer.warm(rope), double(2 * tokens * (128 + 1) * 64 * 2)},
            bandwidth);

  // Embedding gather (V3 table).
  std::vector<int32_t> id_values(static_cast<size_t>(tokens));
  std::mt19937 rng(12);
  for (int32_t& id : id_values) id = static_cast<int32_t>(rng() % kVocab);
  DeviceBuffer<int32_t> token_ids(id_values);
  DeviceBuffer<int32_t> flag(std::vector<int32_t>{0});
  DeviceBuffer<__nv_bfloat16> embedded(static_cast<size_t>(tokens * kHidden));
  auto embed = [&] {
    embedding_gather_bf16(table.data(), kVocab, kHidden, token_ids.data(), tokens, embedded.data(), flag.data(), stream);
  };
  print_row({"embedding_gather", tokens, timer.cold(embed), timer.warm(embed), double(2 * tokens * kHidden * 2)},
            bandwidth);

  // Activation quantization (bf16 -> e4m3 + per-128 scales in both layouts) of a hidden row and of the attention
  // output (128 heads x 128): what every prefill linear reads.
  for (int64_t cols : {kHidden, int64_t{16384}}) {
    DeviceBuffer<__nv_bfloat16> act(random_bf16(static_cast<size_t>(tokens * cols), 2.0f, 14));
    DeviceBuffer<uint8_t> act_fp8(static_cast<size_t>(tokens * cols));
    DeviceBuffer<float> act_scales(static_cast<size_t>(tokens * cols / 128)), act_scales_bm(act_scales.size());
    auto quantize = [&] {
      quantize_activations_fp8(act.data(), tokens, cols, act_fp8.data(), act_scales.data(), act_scales_bm.data(), stream);
    };
    print_row({cols == kHidden ? "act_quant_fp8_7168" : "act_quant_fp8_16384", tokens, timer.cold(quantize),
               timer.warm(quantize), double(tokens * cols * 3 + 2 * (tokens * cols / 128) * 4)}, bandwidth);
  }

  run_sampling(tokens, timer, bandwidth, stream);
}

// MLA's per-token preparation at DeepSeek-V3 dims (128 heads x (128 nope + 64 rope), kv_lora 512, page 64): the
// unfused latent norm + rope (cos/sin computed) + cache write, rope alone with the cos/sin table, and the fused
// kernel with the table. Floor: q's rope parts read and written, kv_a rows read and written, cache rows written.
void run_mla_prepare(int64_t tokens, Timer& timer, double bandwidth, cudaStream_t stream) {
  constexpr int32_t kHeads = 128, kNope = 128, kRope = 64, kLora = 512, kPage = 64, kMaxPositions = 163840;
  constexpr int64_t kQk = kNope + kRope, kRow = kLora + kRope;
  DeviceBuffer<__nv_bfloat16> q(random_bf16(static_cast<size_t>(tokens * kHeads * kQk), 1.0f, 20));
  DeviceBuffer<__nv_bfloat16> kv_a(random_bf16(static_cast<size_t>(tokens * kRow), 1.0f, 21));
  DeviceBuffer<__nv_bfloat16> norm_weight(random_bf16(kLora, 0.2f, 22));
  std::vector<int32_t> position_values(static_cast<size_t>(tokens)), slot_values(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) {
    position_values[t] = static_cast<int32_t>(1000 + t);
    slot_values[t] = static_cast<int32_t>(t);
  }
  DeviceBuffer<int32_t> positions(position_values), slots(slot_values);
  const int32_t pages = static_cast<int32_t>((tokens + kPage - 1) / kPage);
  DeviceBuffer<__nv_bfloat16> pool(static_cast<size_t>(pages) * kPage * kRow);
  const LatentCacheView cache{pool.data(), pages, kPage, kLora, kRope};
  std::vector<float> inv_freq_values(kRope / 2);
  for (int i = 0; i < kRope / 2; ++i) inv_freq_values[i] = std::pow(10000.0f, -2.0f * i / kRope);
  DeviceBuffer<float> inv_freq(inv_freq_values);
  const RopeParams computed{inv_freq.data(), kRope, 1.0f, true};
  DeviceBuffer<float> cos_sin(static_cast<size_t>(kMaxPositions) * kRope);
  rope_build_cos_sin_table(computed, kMaxPositions, cos_sin.data(), stream);
  RopeParams tabled = computed;
  tabled.cos_sin = cos_sin.data();
  tabled.max_positions = kMaxPositions;

  const RopeTarget targets[2] = {{q.data() + kNope, kHeads, kQk}, {kv_a.data() + kLora, 1, kRow}};
  const MlaKvCacheWriteArgs write{kv_a.data(), kRow, kv_a.data() + kLora, kRow, slots.data(),
                                  static_cast<int32_t>(tokens)};
  auto unfused = [&] {
    rms_norm_bf16(kv_a.data(), kRow, tokens, kLora, norm_weight.data(), 1e-6f, kv_a.data(), kRow, stream);
    apply_rope_bf16(targets, 2, tokens, positions.data(), computed, stream);
    mla_write_kv_cache(write, cache, stream);
  };
  auto rope_table = [&] { apply_rope_bf16(targets, 2, tokens, positions.data(), tabled, stream); };
  MlaPrepareArgs args;
  args.q_pe = targets[0];
  args.kv_a = kv_a.data();
  args.kv_a_token_stride = kRow;
  args.latent_norm_weight = norm_weight.data();
  args.eps = 1e-6f;
  args.positions = positions.data();
  args.slots = slots.data();
  args.num_tokens = static_cast<int32_t>(tokens);
  auto fused = [&] { mla_prepare_qkv(args, tabled, cache, stream); };
  const double rope_bytes = double(2 * tokens * (kHeads + 1) * kRope * 2);
  const double bytes = double(2 * tokens * kHeads * kRope * 2 + 3 * tokens * kRow * 2 + kLora * 2 + tokens * 8);
  print_row({"mla_prep_unfused", tokens, timer.cold(unfused), timer.warm(unfused), bytes}, bandwidth);
  print_row({"rope_q_kpe_table", tokens, timer.cold(rope_table), timer.warm(rope_table), rope_bytes}, bandwidth);
  print_row({"mla_prepare_qkv", tokens, timer.cold(fused), timer.warm(fused), bytes}, bandwidth);
}

// The MoE router GEMM at DeepSeek-V3 dims (256 experts x 7168, fp32 rows and weight): moe_router_logits_fp32 vs
// cuBLASLt fp32 (Bf16Gemm as the model builds it). % of copy bandwidth = the fp32 weight's bytes (the floor: it is read
// once; rows and logits are small) at the measured copy bandwidth, over the time.
void run_moe_router_gemm(Timer& timer, double bandwidth, cudaStream_t stream) {
  constexpr int64_t kRouterTokens[] = {1, 2, 4, 8, 16, 32, 64};
  constexpr int64_t kMaxRouterTokens = 64;
  const DeviceBuffer<float> weight(random_floats(static_cast<size_t>(kExperts * kHidden), 0.02f, 40));  // [E, H]
  const DeviceBuffer<float> x(random_floats(static_cast<size_t>(kMaxRouterTokens * kHidden), 1.0f, 41));  // [T, H]
  DeviceBuffer<float> logits(static_cast<size_t>(kMaxRouterTokens * kExperts));                          // [T, E]
  const DeviceBuffer<__nv_bfloat16> weight_bf16(random_bf16(static_cast<size_t>(kExperts * kHidden), 0.02f, 40));
  const DeviceBuffer<__nv_bfloat16> planes(
      random_bf16(static_cast<size_t>(kBf16SplitPlanes * kMaxRouterTokens * kHidden), 1.0f, 43));  // [T, 3, H]
  DeviceBuffer<float> plane_logits(static_cast<size_t>(kBf16SplitPlanes * kMaxRouterTokens * kExperts));  // [T, 3, E]
  Bf16Gemm planes_gemm(kExperts, kHidden, Bf16GemmOutput::kFloat32);
  Bf16Gemm cublas(kExperts, kHidden, Bf16GemmOutput::kFloat32, size_t{32} << 20, Bf16GemmInput::kFloat32);
  const double floor_us = double(kExperts * kHidden * sizeof(float)) / bandwidth;
  auto percent = [&](float us) { return us > 0 ? 100.0 * floor_us / us : 0.0; };
  for (int64_t tokens : kRouterTokens) {
    cublas.prepare(tokens);
    auto ours = [&] {
      moe_router_logits_fp32(x.data(), tokens, kHidden, weight.data(), kExperts, logits.data(), stream);
    };
    auto theirs = [&] { cublas.run(x.data(), tokens, weight.data(), logits.data(), stream); };
    for (const auto& [name, op] : {std::pair<const char*, std::function<void()>>{"router_gemm_fp32", ours},
                                   std::pair<const char*, std::function<void()>>{"router_cublaslt_fp32", theirs}}) {
      const float cold = timer.cold(op), warm = timer.warm(op);
      std::printf("%-22s %6lld %10.2f %10.2f   floor %.2f us: %5.1f%% / %5.1f%% of copy bandwidth (cold / warm)\n",
                  name, static_cast<long long>(tokens), cold, warm, floor_us, percent(cold), percent(warm));
      std::fflush(stdout);
    }
    // The same kernel on the checkpoint's bf16 gate: half the bytes, the same bits.
    const double bf16_floor_us = floor_us / 2;
    auto ours_bf16 = [&] {
      moe_router_logits_fp32(x.data(), tokens, kHidden, weight_bf16.data(), kExperts, logits.data(), stream);
    };
    const float cold = timer.cold(ours_bf16), warm = timer.warm(ours_bf16);
    std::printf("%-22s %6lld %10.2f %10.2f   floor %.2f us: %5.1f%% / %5.1f%% of copy bandwidth (cold / warm)\n",
                "router_gemm_bf16w", static_cast<long long>(tokens), cold, warm, bf16_floor_us,
                cold > 0 ? 100.0 * bf16_floor_us / cold : 0.0, warm > 0 ? 100.0 * bf16_floor_us / warm : 0.0);
    std::fflush(stdout);
    // The tensor-core form at decode sizes (where it overtakes the kernel sets kRouterKernelMaxTokens).
    planes_gemm.prepare(kBf16SplitPlanes * tokens);
    auto planes_form = [&] {
      planes_gemm.run(planes.data(), kBf16SplitPlanes * tokens, weight_bf16.data(), plane_logits.data(), stream);
      moe_router_sum_planes(plane_logits.data(), tokens, kExperts, logits.data(), stream);
    };
    const float planes_cold = timer.cold(planes_form), planes_warm = timer.warm(planes_form);
    std::printf("%-22s %6lld %10.2f %10.2f   floor %.2f us: %5.1f%% / %5.1f%% of copy bandwidth (cold / warm)\n",
                "router_planes_bf16w", static_cast<long long>(tokens), planes_cold, planes_warm, bf16_floor_us,
                planes_cold > 0 ? 100.0 * bf16_floor_us / planes_cold : 0.0,
                planes_warm > 0 ? 100.0 * bf16_floor_us / planes_warm : 0.0);
    std::fflush(stdout);
  }
}

// The router's prefill forms at V3 dims: cuBLASLt's fp32 SGEMM (SIMT) on fp32 rows and weight, against the
// tensor-core form (the rows as three bf16 planes, one bf16 GEMM of 3T rows against the bf16 gate, the plane sum).
// Both form every product exactly in fp32; the FLOP count shown is the SGEMM's (2 T E H).
void run_moe_router_prefill(Timer& timer, cudaStream_t stream) {
  constexpr int64_t kPrefillTokens[] = {64, 256, 1024, 4096, 8192};
  constexpr int64_t kMaxTokens = 8192;
  const DeviceBuffer<float> weight(random_floats(static_cast<size_t>(kExperts * kHidden), 0.02f, 40));  // [E, H]
  const DeviceBuffer<__nv_bfloat16> weight_bf16(random_bf16(static_cast<size_t>(kExperts * kHidden), 0.02f, 40));
  const DeviceBuffer<float> x(random_floats(static_cast<size_t>(kMaxTokens * kHidden), 1.0f, 42));  // [T, H]
  const DeviceBuffer<__nv_bfloat16> planes(
      random_bf16(static_cast<size_t>(kBf16SplitPlanes * kMaxTokens * kHidden), 1.0f, 43));          // [T, 3, H]
  DeviceBuffer<float> plane_logits(static_cast<size_t>(kBf16SplitPlanes * kMaxTokens * kExperts));  // [T, 3, E]
  DeviceBuffer<float> logits(static_cast<size_t>(kMaxTokens * kExperts));                           // [T, E]
  Bf16Gemm sgemm(kExperts, kHidden, Bf16GemmOutput::kFloat32, size_t{32} << 20, Bf16GemmInput::kFloat32);
  Bf16Gemm planes_gemm(kExperts, kHidden, Bf16GemmOutput::kFloat32);
  for (int64_t tokens : kPrefillTokens) {
    sgemm.prepare(tokens);
    planes_gemm.prepare(kBf16SplitPlanes * tokens);
    auto fp32_form = [&] { sgemm.run(x.data(), tokens, weight.data(), logits.data(), stream); };
    auto planes_form = [&] {
      planes_gemm.run(planes.data(), kBf16SplitPlanes * tokens, weight_bf16.data(), plane_logits.data(), stream);
      moe_router_sum_planes(plane_logits.data(), tokens, kExperts, logits.data(), stream);
    };
    const double flop = 2.0 * double(tokens) * kExperts * kHidden;
    const float fp32_cold = timer.cold(fp32_form), fp32_warm = timer.warm(fp32_form);
    const float planes_cold = timer.cold(planes_form), planes_warm = timer.warm(planes_form);
    std::printf("%-22s %6lld %10.2f %10.2f   %.1f TFLOP/s (warm)\n", "router_prefill_sgemm", static_cast<long long>(tokens),
                fp32_cold, fp32_warm, fp32_warm > 0 ? flop / fp32_warm / 1e6 : 0.0);
    std::printf("%-22s %6lld %10.2f %10.2f   %.2fx faster (warm)\n", "router_prefill_planes",
                static_cast<long long>(tokens), planes_cold, planes_warm, planes_warm > 0 ? fp32_warm / planes_warm : 0.0);
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace fathom::kernels::cuda

// Usage: bench_small_ops              time every op at 1, 32, 256 and 4096 tokens
//        bench_small_ops moe          only the MoE ops (routing, permutation, gather, combine, SwiGLU + quantization)
//        bench_small_ops sampling     only sampling and scoring, at 1, 32 and 256 rows
//        bench_small_ops profile T    launch every op once at T tokens, untimed (run under ncu)
int main(int argc, char** argv) {
  using namespace fathom::kernels::cuda;
  try {
    const bool profile = argc >= 3 && std::string(argv[1]) == "profile";
    const bool moe_only = argc >= 2 && std::string(argv[1]) == "moe";
    const bool sampling_only = argc >= 2 && std::string(argv[1]) == "sampling";
    cudaDeviceProp prop{};
    FATHOM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    cudaStream_t stream;
    FATHOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    Timer timer(stream, static_cast<size_t>(prop.l2CacheSize));
    timer.profile_only = profile;
    const double bandwidth = profile ? 1.0 : fathom::bench::copy_bandwidth_gbps() * 1e3;  // bytes per microsecond
    std::printf("device: %s, %d SMs, L2 %d MB; d2d copy bandwidth %.0f GB/s (read + write)\n", prop.name,
                prop.multiProcessorCount, prop.l2CacheSize >> 20, bandwidth / 1e3);
    std::printf("%-22s %6s %10s %10s %12s %9s %7s %7s\n", "op", "tokens", "cold_us", "warm_us", "bytes", "floor_us",
                "cold/fl", "warm/fl");
    if (sampling_only) {
      for (int64_t rows : {1, 32, 256}) run_sampling(rows, timer, bandwidth, stream);
      FATHOM_CUDA_CHECK(cudaStreamSynchronize(stream));
      FATHOM_CUDA_CHECK(cudaStreamDestroy(stream));
      return 0;
    }
    const DeviceBuffer<__nv_bfloat16> table(moe_only ? std::vector<__nv_bfloat16>(1)
                                                     : random_bf16(static_cast<size_t>(kVocab * kHidden), 1.0f, 11));
    const std::vector<int64_t> sizes = profile ? std::vector<int64_t>{std::stoll(argv[2])}
                                           : moe_only ? std::vector<int64_t>{1, 32, 256, 1024, 4096, 8192}
                                                      : std::vector<int64_t>{1, 32, 256, 4096};
    for (int64_t tokens : sizes) {
      run(tokens, table, timer, bandwidth, stream, moe_only);
      if (!moe_only) run_mla_prepare(tokens, timer, bandwidth, stream);
    }
    if (!moe_only) run_moe_router_gemm(timer, bandwidth, stream);
    if (!profile && !moe_only) run_moe_router_prefill(timer, stream);
    FATHOM_CUDA_CHECK(cudaStreamSynchronize(stream));
    FATHOM_CUDA_CHECK(cudaStreamDestroy(stream));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
