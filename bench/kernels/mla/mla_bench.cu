// MLA kernel benchmark at DeepSeek-V3 dims (128 heads, kv_lora 512, rope 64, nope 128, v 128):
//   copy   : device-to-device copy bandwidth (bytes read + written), the memory ceiling of this run
//   decode : batch {1,16,64,128} x context {1k,2k,4k,8k,16k}, bandwidth on KV + q + out bytes vs the copy
//   absorb : W_UK / W_UV products (bf16 and fp8 weights), bandwidth on weight + activation bytes; then the
//            decode kernel (the default <= 64 tokens) vs the tiled reference kernels at tokens {1,8,32,64,128}
//   absorb_chain: the same products as a decode step runs them (graph us per launch in captured chains of 20,
//            weights rotated through copies so every launch misses L2) against size-matched read floors
//   attention_chain: W_UK product -> decode -> W_UV product as a decode step chains them (graph us per layer, cold
//            KV and weights), batch {1,2,16,64,128} x context {1k,4k,16k}, against the bytes floor; --with-prepare
//            puts the model's mla_prepare (latent norm, RoPE, cache write) in front of each layer's W_UK product
//   prefill: causal sequences of 256-8192 tokens, with and without a cached prefix, TFLOP/s
// Every timed run is preceded by an L2 flush (a 256 MiB memset, or with --flush read a read of it that leaves no dirty
// lines to write back); times are medians of CUDA-event timings.
//   decode_long: batch {1,2,4,8} x context {16k,32k,64k,128k,160k}, as decode (pages up to V3's 163840 tokens)
// Usage: mla_bench [--reps N] [--only copy|decode|decode_long|plans|absorb|absorb_chain|attention_chain|prefill]
//                  [--batch B] [--context C]
//                  [--same-pages] [--contiguous] [--heads H] [--page-size P] [--decode-kernel plan|seesaw|warpspec]
//                  [--flush write|read] [--with-prepare] [--plan heuristic|invariant|invariant-plain|invariant-tiles]
//                  [--split-divisor D] [--min-tiles T]
//   --batch / --context: one row (any batch 1-128, context 1-16384; decode_long 1-8, 1-163840); --contiguous: each sequence's pages in order,
//   one after another, as a fresh server allocates them (default: scattered); --heads: query heads per GPU (1-128,
//   16 = V3 under TP8); --page-size: tokens per cache page (default 64, a divisor of the longest context); --decode-kernel: the
//   kernel of the time_us column, default the plan's, for A/B runs that alternate which kernel is timed first;
//   --plan (attention_chain): mla_decode_plan, the batch-invariant plan of deterministic inference (V3's 163840-token
//   context), that plan without its bit-neutral launch choices (deep / late combine, KV before the wait, fusion), or
//   that plan with fixed 40-tile splits at any head count (the rule of every head count before the forty-first
//   session); --split-divisor D / --min-tiles T: the batch-invariant plans with own-length splits instead (each
//   sequence's tiles divided by D, at least T per split); --decode-kernel also forces attention_chain's kernel.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/graph_chain.h"
#include "kernels/common/read_floor.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/mla/mla_absorb.h"
#include "kernels/cuda/mla/mla_decode.h"
#include "kernels/cuda/mla/mla_prefill.h"
#include "kernels/cuda/mla/mla_prepare.h"
#include "kernels/cuda/programmatic_launch.cuh"

namespace {

using fathom::kernels::cuda::DeviceBuffer;
namespace kc = fathom::kernels::cuda;

constexpr int kHeads = 128, kLora = 512, kRope = 64, kNope = 128, kV = 128, kRow = kLora + kRope;
constexpr int kLongContextTokens = 163840;  // DeepSeek-V3's max_position_embeddings

__global__ void fill_random_kernel(__nv_bfloat16* data, size_t count, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    const float u = static_cast<float>(x >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    data[i] = __float2bfloat16((2.0f * u - 1.0f) * scale);
  }
}

__global__ void fill_random_bytes_kernel(uint8_t* data, size_t count, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint64_t x = (i + 7) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 29;
    const uint8_t byte = static_cast<uint8_t>(x >> 24);
    data[i] = (byte & 0x7f) == 0x7f ? static_cast<uint8_t>(byte & 0xf0) : byte;  // no NaN encodings
  }
}

void fill_random(__nv_bfloat16* data, size_t count, uint64_t seed, float scale = 1.0f) {
  fill_random_kernel<<<1024, 256>>>(data, count, seed, scale);
  FATHOM_CUDA_CHECK_LAUNCH();
}

// Evicts L2 by reading `buffer` (clean lines), unlike a memset, whose dirty lines are written back to DRAM while the
// timed kernel runs (up to the L2's size: ~17 us of an H100's DRAM time).
__global__ void read_flush_kernel(const uint4* buffer, size_t count, uint4* sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = buffer[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) *sink = make_uint4(acc, 0, 0, 0);  // keeps the loads; never true between memsets of one byte
}

__global__ void empty_kernel() {}

struct Timer {
  DeviceBuffer<uint8_t> flush_buffer{256ull << 20};
  DeviceBuffer<uint4> flush_sink{1};
  bool read_flush = false;  // --flush read: evict L2 with clean lines (see read_flush_kernel)
  cudaEvent_t start{}, stop{};
  Timer() {
    FATHOM_CUDA_CHECK(cudaMemset(flush_buffer.data(), 0, flush_buffer.bytes()));  // read_flush_kernel's xor stays 0
    FATHOM_CUDA_CHECK(cudaEventCreate(&start));
    FATHOM_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~Timer() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  // Median milliseconds of `reps` runs of fn, each after an L2 flush; two untimed warm-up runs first.
  double median_ms(int reps, const std::function<void()>& fn, bool flush = true) {
    fn();
    fn();
    std::vector<double> times;
    for (int r = 0; r < reps; ++r) {
      if (flush && read_flush) {
        read_flush_kernel<<<1024, 256>>>(reinterpret_cast<const uint4*>(flush_buffer.data()),
                                         flush_buffer.bytes() / sizeof(uint4), flush_sink.data());
        FATHOM_CUDA_CHECK_LAUNCH();
      } else if (flush) {
        FATHOM_CUDA_CHECK(cudaMemsetAsync(flush_buffer.data(), r & 0xff, flush_buffer.bytes()));
      }
      FATHOM_CUDA_CHECK(cudaEventRecord(start));
      fn();
      FATHOM_CUDA_CHECK(cudaEventRecord(stop));
      FATHOM_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      FATHOM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  }
};

double bench_copy(Timer& timer, int reps) {
  const size_t bytes = 1ull << 30;
  DeviceBuffer<uint8_t> a(bytes), b(bytes);
  FATHOM_CUDA_CHECK(cudaMemset(a.data(), 1, bytes));
  const double ms = timer.median_ms(reps, [&] { FATHOM_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice)); }, false);
  const double gbps = 2.0 * bytes / (ms * 1e-3) / 1e9;
  std::printf("copy: %zu MiB D2D, median %.3f ms, %.1f GB/s (read + write)\n", bytes >> 20, ms, gbps);
  return gbps;
}

// Decode arguments over `pool` (page_size tokens per page), batch sequences whose page tables are rows of
// pages_per_seq entries of page_table.
kc::MlaDecodeArgs decode_args(const DeviceBuffer<__nv_bfloat16>& q_latent, const DeviceBuffer<__nv_bfloat16>& q_pe,
                              const DeviceBuffer<__nv_bfloat16>& pool, int32_t num_pages, int32_t page_size,
                              const DeviceBuffer<int32_t>& page_table, const DeviceBuffer<int32_t>& seq_lens,
                              int32_t batch, int32_t pages_per_seq, DeviceBuffer<__nv_bfloat16>& out,
                              int32_t num_heads = kHeads) {
  kc::MlaDecodeArgs args;
  args.q_latent = q_latent.data();
  args.q_pe = q_pe.data();
  args.q_pe_head_stride = kRope;
  args.cache = {pool.data(), num_pages, page_size, kLora, kRope};
  args.batch = {page_table.data(), seq_lens.data(), batch, pages_per_seq};
  args.out_latent = out.data();
  args.num_heads = num_heads;
  args.softmax_scale = 0.1352f;
  return args;
}

// same_pages: every sequence reads the same pages (the KV working set of one sequence stays in L2), which separates
// the kernel's compute and synchronization time from its memory traffic.
// heads: query heads per GPU (128 for V3 without tensor parallelism, 16 under TP8).
// long_context: batch {1, 2, 4, 8} x context {16k, 32k, 64k, 128k, 160k} (V3's longest) instead of the default table.
void bench_decode(Timer& timer, int reps, double copy_gbps, int num_sms, int only_batch, int only_ctx,
                  bool same_pages, bool contiguous, int heads, int page_size, const std::string& decode_kernel,
                  bool long_context) {
  const int max_batch = long_context ? 8 : 128, max_ctx = long_context ? kLongContextTokens : 16384;
  const int pages_per_seq = max_ctx / page_size;
  const int64_t num_pages = static_cast<int64_t>(max_batch) * pages_per_seq;
  DeviceBuffer<__nv_bfloat16> pool(static_cast<size_t>(num_pages) * page_size * kRow);
  fill_random(pool.data(), pool.size(), 11);
  DeviceBuffer<__nv_bfloat16> q_latent(static_cast<size_t>(max_batch) * kHeads * kLora),
      q_pe(static_cast<size_t>(max_batch) * kHeads * kRope), out(static_cast<size_t>(max_batch) * kHeads * kLora);
  fill_random(q_latent.data(), q_latent.size(), 12);
  fill_random(q_pe.data(), q_pe.size(), 13);
  std::vector<int32_t> page_order(static_cast<size_t>(num_pages));
  std::iota(page_order.begin(), page_order.end(), 0);
  if (!contiguous) std::shuffle(page_order.begin(), page_order.end(), std::mt19937(5));  // scattered, as after churn
  if (same_pages)
    for (size_t i = static_cast<size_t>(pages_per_seq); i < page_order.size(); ++i)
      page_order[i] = page_order[i % pages_per_seq];
  DeviceBuffer<int32_t> page_table(page_order);                       // [max_batch, pages_per_seq]
  DeviceBuffer<int32_t> seq_lens(static_cast<size_t>(max_batch));
  const size_t workspace_bytes = kc::mla_decode_max_workspace_bytes(num_sms, max_batch, heads, kLora, max_ctx);
  DeviceBuffer<uint8_t> workspace(std::max<size_t>(workspace_bytes, 16));
  std::printf("\ndecode (absorbed, bf16, page %d, %d heads, kv_lora %d, rope %d)%s; floor = bytes / copy bandwidth\n",
              page_size, heads, kLora, kRope, same_pages   ? ", every sequence on the same pages (L2-resident KV)"
              : contiguous ? ", each sequence's pages contiguous"
                           : "");
  // What the harness itself adds to a call: an empty kernel timed the same way (flush, events).
  const double empty_ms = timer.median_ms(reps, [] {
    empty_kernel<<<1, 32>>>();
    FATHOM_CUDA_CHECK_LAUNCH();
  });
  std::printf("an empty kernel timed the same way: %.1f us\n", empty_ms * 1e3);
  std::printf("%6s %7s %6s %6s %10s %10s %9s %8s %9s %10s %11s %11s %11s\n", "batch", "context", "group", "splits",
              "time_us", "floor_us", "GB/s", "%copy", "TFLOP/s", "seesaw_us", "warpspec_us", "shared_us", "mmasync_us");
  const std::vector<int> batches = only_batch           ? std::vector<int>{only_batch}
                                   : long_context ? std::vector<int>{1, 2, 4, 8}
                                                  : std::vector<int>{1, 16, 64, 128};
  const std::vector<int> contexts = only_ctx         ? std::vector<int>{only_ctx}
                                    : long_context ? std::vector<int>{16384, 32768, 65536, 131072, kLongContextTokens}
                                                   : std::vector<int>{1024, 2048, 4096, 8192, 16384};
  for (int batch : batches)
    for (int ctx : contexts) {
      std::vector<int32_t> lens(static_cast<size_t>(max_batch), ctx);
      seq_lens.upload(lens);
      kc::MlaDecodePlan plan = kc::mla_decode_plan(num_sms, batch, heads, ctx);
      if (decode_kernel == "seesaw") plan.seesaw = plan.warp_specialized = true;
      if (decode_kernel == "warpspec") plan.seesaw = false, plan.warp_specialized = true;
      const kc::MlaDecodeArgs args = decode_args(q_latent, q_pe, pool, static_cast<int32_t>(num_pages), page_size,
                                                 page_table, seq_lens, batch, pages_per_seq, out, heads);
      const double ms = timer.median_ms(reps, [&] { kc::mla_decode(args, plan, workspace.data(), workspace.bytes(), nullptr); });
      kc::MlaDecodePlan seesaw = plan, warp_specialized = plan, shared = plan, mma_only = plan;  // the other paths
      seesaw.seesaw = seesaw.warp_specialized = true;  // the seesaw kernel on pages of a multiple of 64 tokens
      warp_specialized.seesaw = false;
      shared.warp_specialized = false;  // both warpgroups in every phase (64-head groups)
      mma_only.score_wgmma = mma_only.value_wgmma = false;
      const double ms_seesaw =
          timer.median_ms(reps, [&] { kc::mla_decode(args, seesaw, workspace.data(), workspace.bytes(), nullptr); });
      const double ms_warp_specialized = timer.median_ms(
          reps, [&] { kc::mla_decode(args, warp_specialized, workspace.data(), workspace.bytes(), nullptr); });
      const double ms_shared = timer.median_ms(reps, [&] { kc::mla_decode(args, shared, workspace.data(), workspace.bytes(), nullptr); });
      const double ms_mma = timer.median_ms(reps, [&] { kc::mla_decode(args, mma_only, workspace.data(), workspace.bytes(), nullptr); });
      const double bytes = static_cast<double>(batch) * ctx * kRow * 2 + static_cast<double>(batch) * heads * (kRow + kLora) * 2;
      const double flops = 2.0 * batch * heads * static_cast<double>(ctx) * (kRow + kLora);
      const double gbps = bytes / (ms * 1e-3) / 1e9;
      std::printf("%6d %7d %6d %6d %10.1f %10.1f %9.1f %7.1f%% %9.1f %10.1f %11.1f %11.1f %11.1f\n", batch, ctx,
                  plan.head_group, plan.num_splits, ms * 1e3, bytes / (copy_gbps * 1e9) * 1e6, gbps,
                  100.0 * gbps / copy_gbps, flops / (ms * 1e-3) / 1e12, ms_seesaw * 1e3, ms_warp_specialized * 1e3,
                  ms_shared * 1e3, ms_mma * 1e3);
    }
}

// Latency regime (small batch, short context, page size 1 as the model's cache): every head group x split count
// against the plan mla_decode_plan picks, to tune the heuristic.
void bench_decode_plans(Timer& timer, int reps, int num_sms) {
  const int max_batch = 16, max_ctx = 4096;
  const int64_t num_slots = static_cast<int64_t>(max_batch) * max_ctx;
  DeviceBuffer<__nv_bfloat16> pool(static_cast<size_t>(num_slots) * kRow);
  fill_random(pool.data(), pool.size(), 31);
  DeviceBuffer<__nv_bfloat16> q_latent(static_cast<size_t>(max_batch) * kHeads * kLora),
      q_pe(static_cast<size_t>(max_batch) * kHeads * kRope), out(static_cast<size_t>(max_batch) * kHeads * kLora);
  fill_random(q_latent.data(), q_latent.size(), 32);
  fill_random(q_pe.data(), q_pe.size(), 33);
  std::vector<int32_t> slot_order(static_cast<size_t>(num_slots));
  std::iota(slot_order.begin(), slot_order.end(), 0);
  std::shuffle(slot_order.begin(), slot_order.end(), std::mt19937(6));
  DeviceBuffer<int32_t> page_table(slot_order);  // [max_batch, max_ctx], page size 1
  DeviceBuffer<int32_t> seq_lens(static_cast<size_t>(max_batch));
  const size_t workspace_bytes = static_cast<size_t>(max_batch) * kc::kMlaDecodeMaxSplits * kHeads * (kLora + 1) * sizeof(float);
  DeviceBuffer<uint8_t> workspace(workspace_bytes);
  std::printf("\ndecode plans (page size 1): us per call for head group x splits; 'plan' = mla_decode_plan's choice\n");
  std::printf("%6s %7s %14s %9s %14s %9s\n", "batch", "context", "plan(g,s)", "plan_us", "best(g,s)", "best_us");
  for (int batch : {1, 2, 3, 4, 8, 16})
    for (int ctx : {256, 1024, 2048, 3072, 4096}) {
      seq_lens.upload(std::vector<int32_t>(static_cast<size_t>(max_batch), ctx));
      const kc::MlaDecodeArgs args = decode_args(q_latent, q_pe, pool, static_cast<int32_t>(num_slots), 1, page_table,
                                                 seq_lens, batch, max_ctx, out);
      auto time_plan = [&](const kc::MlaDecodePlan& plan) {
        return timer.median_ms(reps, [&] { kc::mla_decode(args, plan, workspace.data(), workspace.bytes(), nullptr); });
      };
      const kc::MlaDecodePlan chosen = kc::mla_decode_plan(num_sms, batch, kHeads, ctx);
      const double chosen_ms = time_plan(chosen);
      double best_ms = chosen_ms;
      kc::MlaDecodePlan best = chosen;
      for (int group : {16, 32, 64})
        for (int splits : {1, 2, 3, 4, 6, 8, 11, 12, 16, 22, 24, 32, 64}) {
          if (splits > (ctx + kc::kMlaDecodeTileTokens - 1) / kc::kMlaDecodeTileTokens) continue;
          kc::MlaDecodePlan plan;
          plan.head_group = group;
          plan.num_splits = splits;
          const double ms = time_plan(plan);
          if (ms < best_ms) {
            best_ms = ms;
            best = plan;
          }
        }
      std::printf("%6d %7d %8d,%-5d %9.1f %8d,%-5d %9.1f\n", batch, ctx, chosen.head_group, chosen.num_splits,
                  chosen_ms * 1e3, best.head_group, best.num_splits, best_ms * 1e3);
    }
}

// Random kv_b weights (bf16 and e4m3 with constant block scales) and activation buffers for up to 128 tokens,
// shared by the absorption benchmarks.
struct AbsorbOperands {
  static constexpr int kMaxTokens = 128;
  static constexpr size_t kWeightElems = static_cast<size_t>(kHeads) * (kNope + kV) * kLora;
  DeviceBuffer<__nv_bfloat16> w_bf16{kWeightElems};
  DeviceBuffer<uint8_t> w_fp8{kWeightElems};
  DeviceBuffer<float> scales{std::vector<float>(static_cast<size_t>(kHeads) * (kNope + kV) / 128 * (kLora / 128), 1e-3f)};
  DeviceBuffer<__nv_bfloat16> q{static_cast<size_t>(kMaxTokens) * kHeads * (kNope + kRope)};  // [tokens, heads, nope + rope]
  DeviceBuffer<__nv_bfloat16> latent{static_cast<size_t>(kMaxTokens) * kHeads * kLora};        // [tokens, heads, lora]
  DeviceBuffer<__nv_bfloat16> q_latent{static_cast<size_t>(kMaxTokens) * kHeads * kLora};      // [tokens, heads, lora]
  DeviceBuffer<__nv_bfloat16> out{static_cast<size_t>(kMaxTokens) * kHeads * kV};              // [tokens, heads, v]

  explicit AbsorbOperands(uint32_t seed) {
    fill_random(w_bf16.data(), kWeightElems, seed, 0.05f);
    fill_random_bytes_kernel<<<1024, 256>>>(w_fp8.data(), kWeightElems, seed + 1);
    FATHOM_CUDA_CHECK_LAUNCH();
    fill_random(q.data(), q.size(), seed + 2);
    fill_random(latent.data(), latent.size(), seed + 3);
    fill_random(q_latent.data(), q_latent.size(), seed + 4);
  }

  kc::MlaKvBWeights weights(bool fp8) const {
    kc::MlaKvBWeights w;
    w.weight = fp8 ? static_cast<const void*>(w_fp8.data()) : static_cast<const void*>(w_bf16.data());
    w.scale_inv = fp8 ? scales.data() : nullptr;
    w.is_fp8 = fp8;
    w.num_heads = kHeads;
    w.nope_dim = kNope;
    w.v_dim = kV;
    w.kv_lora_dim = kLora;
    return w;
  }
};

void bench_absorb(Timer& timer, int reps, double copy_gbps) {
  AbsorbOperands operands(21);
  DeviceBuffer<__nv_bfloat16>& q = operands.q;
  DeviceBuffer<__nv_bfloat16>& q_latent = operands.q_latent;
  DeviceBuffer<__nv_bfloat16>& out = operands.out;
  std::printf("\nabsorption bmm (%d heads): bytes = weight slice + activations in/out; floor = bytes / copy bandwidth\n", kHeads);
  std::printf("%-8s %-14s %6s %10s %10s %9s %8s\n", "weights", "op", "tokens", "time_us", "floor_us", "GB/s", "%copy");
  for (int fp8 = 0; fp8 < 2; ++fp8)
    for (int tokens : {1, 16, 64, 128}) {
      const kc::MlaKvBWeights w = operands.weights(fp8 == 1);
      const double w_bytes = static_cast<double>(kHeads) * kNope * kLora * (fp8 ? 1 : 2);  // one half of kv_b
      const double ms_q = timer.median_ms(reps, [&] { kc::mla_absorb_query(q.data(), kNope + kRope, tokens, w, q_latent.data(), nullptr); });
      const double ms_v = timer.median_ms(reps, [&] { kc::mla_project_values(q_latent.data(), tokens, w, out.data(), nullptr); });
      const double bytes_q = w_bytes + tokens * kHeads * (kNope + kLora) * 2.0;
      const double bytes_v = w_bytes + tokens * kHeads * (kLora + kV) * 2.0;
      for (int op = 0; op < 2; ++op) {
        const double ms = op == 0 ? ms_q : ms_v, bytes = op == 0 ? bytes_q : bytes_v;
        const double gbps = bytes / (ms * 1e-3) / 1e9;
        std::printf("%-8s %-14s %6d %10.1f %10.1f %9.1f %7.1f%%\n", fp8 ? "fp8" : "bf16", op == 0 ? "absorb_query" : "project_values",
                    tokens, ms * 1e3, bytes / (copy_gbps * 1e9) * 1e6, gbps, 100.0 * gbps / copy_gbps);
      }
    }
}

// The entry points (decode kernel up to 64 tokens) against the *_reference tiled kernels; floor = the weight slice
// alone / copy bandwidth, %floor = floor / time.
void bench_absorb_decode(Timer& timer, int reps, double copy_gbps) {
  AbsorbOperands operands(41);
  DeviceBuffer<__nv_bfloat16>& q = operands.q;
  DeviceBuffer<__nv_bfloat16>& latent = operands.latent;
  DeviceBuffer<__nv_bfloat16>& q_latent = operands.q_latent;
  DeviceBuffer<__nv_bfloat16>& out = operands.out;
  std::printf("\nabsorption bmm, decode kernel vs tiled reference (%d heads); floor = weight slice / copy bandwidth\n",
              kHeads);
  std::printf("%-8s %-14s %6s %7s %10s %10s %10s %8s %8s %8s\n", "weights", "op", "tokens", "path", "new_us", "ref_us",
              "floor_us", "%floor", "%ref_fl", "speedup");
  for (int fp8 = 1; fp8 >= 0; --fp8)
    for (int op = 0; op < 2; ++op)
      for (int tokens : {1, 8, 32, 64, 128}) {
        const kc::MlaKvBWeights w = operands.weights(fp8 == 1);
        std::function<void()> run_new, run_ref;
        bool decode = false;
        if (op == 0) {
          run_new = [&] { kc::mla_absorb_query(q.data(), kNope + kRope, tokens, w, q_latent.data(), nullptr); };
          run_ref = [&] {
            kc::mla_absorb_query_reference(q.data(), kNope + kRope, tokens, w, q_latent.data(), nullptr);
          };
          decode = kc::mla_absorb_query_uses_decode_kernel(q.data(), kNope + kRope, tokens, w, q_latent.data());
        } else {
          run_new = [&] { kc::mla_project_values(latent.data(), tokens, w, out.data(), nullptr); };
          run_ref = [&] { kc::mla_project_values_reference(latent.data(), tokens, w, out.data(), nullptr); };
          decode = kc::mla_project_values_uses_decode_kernel(latent.data(), tokens, w, out.data());
        }
        const double ms_new = timer.median_ms(reps, run_new);
        const double ms_ref = timer.median_ms(reps, run_ref);
        const double w_bytes = static_cast<double>(kHeads) * (op == 0 ? kNope : kV) * kLora * (fp8 ? 1 : 2);
        const double floor_ms = w_bytes / (copy_gbps * 1e9) * 1e3;
        std::printf("%-8s %-14s %6d %7s %10.2f %10.2f %10.2f %7.1f%% %7.1f%% %7.2fx\n", fp8 ? "fp8" : "bf16",
                    op == 0 ? "absorb_query" : "project_values", tokens, decode ? "decode" : "tiled", ms_new * 1e3,
                    ms_ref * 1e3, floor_ms * 1e3, 100.0 * floor_ms / ms_new, 100.0 * floor_ms / ms_ref,
                    ms_ref / ms_new);
      }
}

// The absorption products as the decode step runs them: graph us per launch inside captured chains of 20, each
// launch on the next of `copies` fp8 kv_b copies (together past L2, so every launch streams its slice from HBM), against
// the size-matched read floors of the slice (one half of kv_b, 8.4 MB for V3) launched in the same kind of chain.
// % of copy = slice bytes / time / copy bandwidth.
void bench_absorb_chain(double copy_gbps, int num_sms) {
  constexpr int kCopies = 8;  // 8 x 16.8 MB, well past the 50-60 MB L2
  AbsorbOperands operands(61);
  const size_t weight_bytes = AbsorbOperands::kWeightElems;
  DeviceBuffer<uint8_t> copies(weight_bytes * kCopies);
  fill_random_bytes_kernel<<<1024, 256>>>(copies.data(), copies.size(), 62);
  FATHOM_CUDA_CHECK_LAUNCH();
  DeviceBuffer<uint32_t> sink(1);
  auto weights = [&](int run) {
    kc::MlaKvBWeights w = operands.weights(true);
    w.weight = copies.data() + static_cast<size_t>(run % kCopies) * weight_bytes;
    return w;
  };
  const size_t slice_bytes = weight_bytes / 2;
  auto percent = [&](double ms) { return 100.0 * static_cast<double>(slice_bytes) / (ms * 1e-3) / 1e9 / copy_gbps; };
  const double ldg_ms = fathom::bench::graph_ms_per_launch([&](int run, cudaStream_t stream) {
    kc::launch_programmatic(fathom::bench::read_floor_ldg_kernel<8>, dim3(num_sms * 4), dim3(256), 0, stream,
                            reinterpret_cast<const uint4*>(copies.data() + static_cast<size_t>(run % kCopies) * weight_bytes),
                            slice_bytes / 16, sink.data());
  });
  auto bulk = fathom::bench::read_floor_bulk_kernel<4>;
  FATHOM_CUDA_CHECK(cudaFuncSetAttribute(bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, 4 * 16384));
  const double bulk_ms = fathom::bench::graph_ms_per_launch([&](int run, cudaStream_t stream) {
    kc::launch_programmatic(bulk, dim3(num_sms * 2), dim3(32), 4 * 16384, stream,
                            copies.data() + static_cast<size_t>(run % kCopies) * weight_bytes, slice_bytes, 16384,
                            sink.data());
  });
  std::printf("\nabsorption bmm in graph chains of 20 (fp8 kv_b, %d heads, cold L2); us per launch, %% of copy on "
              "the %.1f MB weight slice\n", kHeads, slice_bytes / 1e6);
  std::printf("read floors of %.1f MB: ldg_x8 %.2f us (%.1f%%), bulk_4x16KB %.2f us (%.1f%%)\n", slice_bytes / 1e6,
              ldg_ms * 1e3, percent(ldg_ms), bulk_ms * 1e3, percent(bulk_ms));
  std::printf("%-14s %6s %16s %16s\n", "op", "tokens", "default", "tiled_ref");
  for (int op = 0; op < 2; ++op)
    for (int tokens : {1, 8, 16, 32}) {
      double ms[2];
      for (int reference = 0; reference < 2; ++reference) {
        ms[reference] = fathom::bench::graph_ms_per_launch([&](int run, cudaStream_t stream) {
          const kc::MlaKvBWeights w = weights(run);
          if (op == 0) {
            if (reference) kc::mla_absorb_query_reference(operands.q.data(), kNope + kRope, tokens, w, operands.q_latent.data(), stream);
            else kc::mla_absorb_query(operands.q.data(), kNope + kRope, tokens, w, operands.q_latent.data(), stream);
          } else {
            if (reference) kc::mla_project_values_reference(operands.latent.data(), tokens, w, operands.out.data(), stream);
            else kc::mla_project_values(operands.latent.data(), tokens, w, operands.out.data(), stream);
          }
        });
      }
      std::printf("%-14s %6d %9.2fus %5.1f%% %9.2fus %5.1f%%\n", op == 0 ? "absorb_query" : "project_values", tokens,
                  ms[0] * 1e3, percent(ms[0]), ms[1] * 1e3, percent(ms[1]));
    }
}

// The decode attention as a decode step runs it: absorb_query (W_UK) -> mla_decode (+ the combine) -> project_values
// (W_UV), every launch programmatic, in captured chains of 20 layers. Each layer reads its own fp8 kv_b copy and its
// own KV pages (copies rotated past L2), so every layer streams both from HBM as the model's layers do. us per layer;
// decode_us: the decode alone in the same kind of chain; floor = (KV + kv_b + activation bytes) / copy bandwidth;
// +uk_us / +uv_us: what adding only the W_UK (with the prepare) / only the W_UV product to the decode chain costs.
// heads: query heads per GPU (16: V3 under TP8, each layer's kv_b slice then 1/8 of the whole).
// with_prepare: each layer starts with mla_prepare (the W_UK product's predecessor in the model), writing this step's
// cache row of every sequence; its bytes are not in the floor.
// attention_chain's plan: mla_decode_plan, mla_decode_plan_batch_invariant (its tuned split rule or choice.rule), or
// the latter without its launch choices.
enum class PlanKind { kHeuristic, kInvariant, kInvariantPlain };
struct ChainPlanChoice {
  PlanKind kind = PlanKind::kHeuristic;
  kc::MlaInvariantSplitRule rule;  // batch-invariant kinds; all 0: the tuned rule
  std::string decode_kernel = "plan";  // plan, seesaw or warpspec
};

kc::MlaDecodePlan chain_plan(const ChainPlanChoice& choice, int num_sms, int batch, int heads, int context) {
  kc::MlaDecodePlan plan =
      choice.kind == PlanKind::kHeuristic
          ? kc::mla_decode_plan(num_sms, batch, heads, context)
          : kc::mla_decode_plan_batch_invariant(num_sms, batch, heads, context, kLongContextTokens, choice.rule);
  if (choice.kind == PlanKind::kInvariantPlain) {
    plan.deep_combine = plan.late_combine_launch = plan.kv_loads_before_wait = plan.fused_value_projection = false;
  }
  if (choice.decode_kernel == "seesaw") plan.seesaw = plan.warp_specialized = true;
  if (choice.decode_kernel == "warpspec") plan.seesaw = false, plan.warp_specialized = true;
  return plan;
}

void bench_attention_chain(double copy_gbps, int num_sms, int only_batch, int only_ctx, int heads, bool with_prepare,
                           const ChainPlanChoice& plan_choice) {
  constexpr int kWeightCopies = 8, kPageSize = 64;
  constexpr double kL2BustBytes = 160e6;  // layers between two reads of the same KV: at least this many bytes apart
  AbsorbOperands operands(71);
  const size_t weight_bytes = AbsorbOperands::kWeightElems / kHeads * heads;  // kv_b of `heads` heads, fp8
  DeviceBuffer<uint8_t> weight_copies(AbsorbOperands::kWeightElems * kWeightCopies);
  const int weight_slices = static_cast<int>(weight_copies.size() / weight_bytes);  // distinct layers' kv_b
  fill_random_bytes_kernel<<<1024, 256>>>(weight_copies.data(), weight_copies.size(), 72);
  FATHOM_CUDA_CHECK_LAUNCH();
  const std::vector<int> batches = only_batch ? std::vector<int>{only_batch} : std::vector<int>{1, 2, 16, 64, 128};
  const std::vector<int> contexts = only_ctx ? std::vector<int>{only_ctx} : std::vector<int>{1024, 4096, 16384};
  std::printf("\nattention chain (%sabsorb_query -> decode -> project_values, fp8 kv_b, page %d, %d heads), graph us "
              "per layer in chains of 20, cold KV and weights\n", with_prepare ? "mla_prepare -> " : "", kPageSize,
              heads);
  // mla_prepare's operands: kv_a rows [batch, lora + rope], the latent norm weight, RoPE (V3: theta 10000, YaRN
  // factor 1 here) through a cos/sin table as the model has it.
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  const int max_ctx = *std::max_element(contexts.begin(), contexts.end());
  DeviceBuffer<__nv_bfloat16> kv_a(static_cast<size_t>(max_batch) * kRow);  // [batch, lora + rope]
  fill_random(kv_a.data(), kv_a.size(), 75);
  DeviceBuffer<__nv_bfloat16> latent_norm_weight(kLora);  // [lora]
  fill_random(latent_norm_weight.data(), latent_norm_weight.size(), 76);
  std::vector<float> inv_freq_host(kRope / 2);
  for (int i = 0; i < kRope / 2; ++i) inv_freq_host[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / kRope));
  DeviceBuffer<float> inv_freq(inv_freq_host);
  DeviceBuffer<float> cos_sin(static_cast<size_t>(max_ctx) * kRope);  // [max_ctx, rope]
  kc::RopeParams rope{inv_freq.data(), kRope, 1.0f, true};
  kc::rope_build_cos_sin_table(rope, max_ctx, cos_sin.data(), nullptr);
  rope.cos_sin = cos_sin.data();
  rope.max_positions = max_ctx;
  std::printf("%6s %7s %6s %13s %10s %10s %8s %10s %10s %6s\n", "batch", "context", "splits", "attention_us",
              "decode_us", "floor_us", "%copy", "+uk_us", "+uv_us", "fused");
  for (int batch : batches)
    for (int ctx : contexts) {
      const int pages_per_seq = (ctx + kPageSize - 1) / kPageSize;
      const double kv_bytes = static_cast<double>(batch) * ctx * kRow * 2;
      const int kv_copies = static_cast<int>(std::clamp(std::ceil(kL2BustBytes / kv_bytes), 2.0, 20.0));
      const int64_t num_pages = static_cast<int64_t>(kv_copies) * batch * pages_per_seq;
      DeviceBuffer<__nv_bfloat16> pool(static_cast<size_t>(num_pages) * kPageSize * kRow);  // [pages, 64, 576]
      fill_random(pool.data(), pool.size(), 73);
      std::vector<int32_t> page_order(static_cast<size_t>(num_pages));
      std::iota(page_order.begin(), page_order.end(), 0);
      std::shuffle(page_order.begin(), page_order.end(), std::mt19937(74));
      DeviceBuffer<int32_t> page_tables(page_order);  // [kv_copies, batch, pages_per_seq]
      DeviceBuffer<int32_t> seq_lens(std::vector<int32_t>(static_cast<size_t>(batch), ctx));
      // This step's token of every sequence: position ctx - 1, its cache slot in each KV copy's pages.
      DeviceBuffer<int32_t> positions(std::vector<int32_t>(static_cast<size_t>(batch), ctx - 1));
      std::vector<int32_t> slots_host(static_cast<size_t>(kv_copies) * batch);  // [kv_copies, batch]
      for (size_t s = 0; s < slots_host.size(); ++s)
        slots_host[s] = page_order[s * pages_per_seq + (ctx - 1) / kPageSize] * kPageSize + (ctx - 1) % kPageSize;
      DeviceBuffer<int32_t> slots(slots_host);
      const kc::MlaDecodePlan plan = chain_plan(plan_choice, num_sms, batch, heads, ctx);
      const size_t workspace_bytes = kc::mla_decode_workspace_bytes(plan, batch, heads, kLora);
      DeviceBuffer<uint8_t> workspace(std::max<size_t>(workspace_bytes, 16));
      kc::MlaDecodeArgs args;
      args.q_latent = operands.q_latent.data();
      args.q_pe = operands.q.data() + kNope;  // the rope part of q [tokens, heads, nope + rope], as the model has it
      args.q_pe_head_stride = kNope + kRope;
      args.cache = {pool.data(), static_cast<int32_t>(num_pages), kPageSize, kLora, kRope};
      args.batch = {page_tables.data(), seq_lens.data(), batch, pages_per_seq};
      args.out_latent = operands.latent.data();
      args.num_heads = heads;
      args.softmax_scale = 0.1352f;
      auto layer = [&](int i, cudaStream_t stream, bool with_absorb, bool with_project) {
        kc::MlaKvBWeights w = operands.weights(true);
        w.num_heads = heads;
        w.weight = weight_copies.data() + static_cast<size_t>(i % weight_slices) * weight_bytes;
        kc::MlaDecodeArgs layer_args = args;
        layer_args.batch.page_table = page_tables.data() + static_cast<int64_t>(i % kv_copies) * batch * pages_per_seq;
        if (with_absorb && with_prepare) {
          kc::MlaPrepareArgs prepare;
          prepare.q_pe = {operands.q.data() + kNope, heads, kNope + kRope};
          prepare.kv_a = kv_a.data();
          prepare.kv_a_token_stride = kRow;
          prepare.latent_norm_weight = latent_norm_weight.data();
          prepare.positions = positions.data();
          prepare.slots = slots.data() + static_cast<int64_t>(i % kv_copies) * batch;
          prepare.num_tokens = batch;
          kc::mla_prepare_qkv(prepare, rope, args.cache, stream);
        }
        if (with_absorb)  // q_nope settled as in the model: no kernel of the chain writes it
          kc::mla_absorb_query(operands.q.data(), kNope + kRope, batch, w, operands.q_latent.data(), stream, true);
        if (with_project) {  // the model's call: W_UV fused with the split combine where the plan says so
          layer_args.value_weights = &w;
          layer_args.values_out = operands.out.data();
        }
        kc::mla_decode(layer_args, plan, workspace.data(), workspace.bytes(), stream);
      };
      auto chain_ms = [&](bool with_absorb, bool with_project) {
        return fathom::bench::graph_ms_per_launch(
            [&](int i, cudaStream_t stream) { layer(i, stream, with_absorb, with_project); });
      };
      const double attention_ms = chain_ms(true, true), decode_ms = chain_ms(false, false);
      const double absorb_ms = chain_ms(true, false), project_ms = chain_ms(false, true);
      const double bytes = kv_bytes + static_cast<double>(weight_bytes) +
                           static_cast<double>(batch) * heads * (kNope + kRope + 2 * kLora + kV) * 2;
      const double floor_ms = bytes / (copy_gbps * 1e9) * 1e3;
      kc::MlaKvBWeights value_weights = operands.weights(true);  // fused: whether the W_UV product rode the combine
      value_weights.num_heads = heads;
      kc::MlaDecodeArgs fused_args = args;
      fused_args.value_weights = &value_weights;
      fused_args.values_out = operands.out.data();
      const bool fused = kc::mla_decode_fuses_value_projection(fused_args, plan, workspace.data());
      std::printf("%6d %7d %6d %13.2f %10.2f %10.2f %7.1f%% %10.2f %10.2f %6s\n", batch, ctx, plan.num_splits,
                  attention_ms * 1e3, decode_ms * 1e3, floor_ms * 1e3, 100.0 * floor_ms / attention_ms,
                  (absorb_ms - decode_ms) * 1e3, (project_ms - decode_ms) * 1e3, fused ? "yes" : "no");
    }
}

void bench_prefill(Timer& timer, int reps) {
  std::printf("\nprefill (expanded, causal, %d heads, qk %d, v %d); FLOPs = 2 * heads * visible pairs * (qk + v); the "
              "wgmma and mma.sync kernels on the first two rows only\n",
              kHeads, kNope + kRope, kV);
  std::printf("%-20s %8s %9s %10s %9s %10s %9s %10s %9s\n", "sequences", "tokens", "kernel", "tma_ms", "TFLOP/s",
              "wgmma_ms", "TFLOP/s", "mma_ms", "TFLOP/s");
  struct PrefillShape {
    int num_seqs, q_len, kv_len;  // kv_len > q_len: a cached prefix (chunked prefill)
  };
  const PrefillShape shapes[] = {{1, 4096, 4096}, {4, 1024, 1024}, {2, 2048, 2048}, {8, 512, 512},
                                 {16, 256, 256},  {1, 8192, 8192}, {1, 1024, 4096}, {4, 1024, 4096}};
  for (const PrefillShape& shape : shapes) {
    const int num_seqs = shape.num_seqs, q_len = shape.q_len, kv_len = shape.kv_len, page_size = 64;
    const int total_q = num_seqs * q_len, total_kv = num_seqs * kv_len;
    const int pages_per_seq = (kv_len + page_size - 1) / page_size;
    DeviceBuffer<__nv_bfloat16> q(static_cast<size_t>(total_q) * kHeads * (kNope + kRope)),
        k_nope(static_cast<size_t>(total_kv) * kHeads * kNope), v(static_cast<size_t>(total_kv) * kHeads * kV),
        out(static_cast<size_t>(total_q) * kHeads * kV),
        pool(static_cast<size_t>(num_seqs) * pages_per_seq * page_size * kRow);
    fill_random(q.data(), q.size(), 31);
    fill_random(k_nope.data(), k_nope.size(), 32);
    fill_random(v.data(), v.size(), 33);
    fill_random(pool.data(), pool.size(), 34);
    std::vector<int32_t> table(static_cast<size_t>(num_seqs) * pages_per_seq);
    std::vector<int32_t> cu_q(static_cast<size_t>(num_seqs) + 1), cu_kv(static_cast<size_t>(num_seqs) + 1);
    std::iota(table.begin(), table.end(), 0);
    for (int s = 0; s <= num_seqs; ++s) {
      cu_q[s] = s * q_len;
      cu_kv[s] = s * kv_len;
    }
    DeviceBuffer<int32_t> table_device(table), cu_q_device(cu_q), cu_kv_device(cu_kv);
    kc::MlaPrefillArgs args;
    args.q = q.data();
    args.q_head_stride = kNope + kRope;
    args.k_nope = k_nope.data();
    args.v = v.data();
    args.cache = {pool.data(), num_seqs * pages_per_seq, page_size, kLora, kRope};
    args.page_table = table_device.data();
    args.max_pages_per_seq = pages_per_seq;
    args.cu_q_lens = cu_q_device.data();
    args.cu_kv_lens = cu_kv_device.data();
    args.total_kv_rows = total_kv;
    args.batch = num_seqs;
    args.max_q_len = q_len;
    args.out = out.data();
    args.num_heads = kHeads;
    args.nope_dim = kNope;
    args.v_dim = kV;
    args.softmax_scale = 0.0722f;
    const double ms = timer.median_ms(reps, [&] { kc::mla_prefill(args, nullptr); });  // kAuto: TMA at V3 dims
    const bool all_kernels = &shape - shapes < 2;
    double wgmma_ms = 0.0, mma_ms = 0.0;
    if (all_kernels) {
      args.kernel = kc::MlaPrefillKernel::kWgmma;
      wgmma_ms = timer.median_ms(reps, [&] { kc::mla_prefill(args, nullptr); });
      args.kernel = kc::MlaPrefillKernel::kMmaSync;
      mma_ms = timer.median_ms(reps, [&] { kc::mla_prefill(args, nullptr); });
    }
    // query j (0-based) of a sequence sees kv_len - q_len + j + 1 keys
    const double pairs = static_cast<double>(num_seqs) * q_len * ((kv_len - q_len) + (q_len + 1) / 2.0);
    const double flops = 2.0 * kHeads * pairs * (kNope + kRope + kV);
    auto tflops = [&](double time_ms) { return time_ms > 0.0 ? flops / (time_ms * 1e-3) / 1e12 : 0.0; };
    const std::string name = std::to_string(num_seqs) + " x " + std::to_string(q_len) +
                             (kv_len > q_len ? " of " + std::to_string(kv_len) : "");
    std::printf("%-20s %8d %9s %10.3f %9.1f %10.3f %9.1f %10.3f %9.1f\n", name.c_str(), total_q, "auto", ms,
                tflops(ms), wgmma_ms, tflops(wgmma_ms), mma_ms, tflops(mma_ms));
  }
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 30, only_batch = 0, only_ctx = 0, heads = kHeads, page_size = 64;
  bool same_pages = false, contiguous = false, with_prepare = false;
  std::string only, decode_kernel = "plan", flush = "write", plan_arg = "heuristic";
  ChainPlanChoice plan_choice;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!std::strcmp(argv[i], "--batch") && i + 1 < argc) only_batch = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--context") && i + 1 < argc) only_ctx = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--same-pages")) same_pages = true;
    else if (!std::strcmp(argv[i], "--contiguous")) contiguous = true;
    else if (!std::strcmp(argv[i], "--with-prepare")) with_prepare = true;
    else if (!std::strcmp(argv[i], "--heads") && i + 1 < argc) heads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--page-size") && i + 1 < argc) page_size = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--decode-kernel") && i + 1 < argc) decode_kernel = argv[++i];
    else if (!std::strcmp(argv[i], "--flush") && i + 1 < argc) flush = argv[++i];
    else if (!std::strcmp(argv[i], "--plan") && i + 1 < argc) plan_arg = argv[++i];
    else if (!std::strcmp(argv[i], "--split-divisor") && i + 1 < argc) plan_choice.rule.divisor = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--min-tiles") && i + 1 < argc) plan_choice.rule.min_tiles = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "mla_bench: unknown or incomplete argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (heads < 1 || heads > kHeads) {
    std::fprintf(stderr, "mla_bench: --heads %d (1-%d)\n", heads, kHeads);
    return 2;
  }
  if (decode_kernel != "plan" && decode_kernel != "seesaw" && decode_kernel != "warpspec") {
    std::fprintf(stderr, "mla_bench: --decode-kernel %s (plan, seesaw or warpspec)\n", decode_kernel.c_str());
    return 2;
  }
  if (flush != "write" && flush != "read") {
    std::fprintf(stderr, "mla_bench: --flush %s (write or read)\n", flush.c_str());
    return 2;
  }
  if (plan_arg == "invariant") {
    plan_choice.kind = PlanKind::kInvariant;
  } else if (plan_arg == "invariant-plain") {
    plan_choice.kind = PlanKind::kInvariantPlain;
  } else if (plan_arg == "invariant-tiles") {  // V3's 2560 tiles in at most 64 splits
    plan_choice.kind = PlanKind::kInvariant;
    plan_choice.rule.tiles_per_split = kLongContextTokens / kc::kMlaDecodeTileTokens / kc::kMlaDecodeMaxSplits;
  } else if (plan_arg != "heuristic") {
    std::fprintf(stderr, "mla_bench: --plan %s (heuristic, invariant, invariant-plain or invariant-tiles)\n",
                 plan_arg.c_str());
    return 2;
  }
  if (plan_choice.rule.divisor < 0 || plan_choice.rule.divisor > kc::kMlaDecodeMaxSplits ||
      plan_choice.rule.min_tiles < 0 || (plan_choice.rule.min_tiles > 0 && plan_choice.rule.divisor == 0) ||
      (plan_choice.rule.divisor > 0 && plan_choice.rule.tiles_per_split > 0)) {
    std::fprintf(stderr, "mla_bench: --split-divisor %d (1-%d; not with --plan invariant-tiles), --min-tiles %d (with "
                 "--split-divisor)\n", plan_choice.rule.divisor, kc::kMlaDecodeMaxSplits, plan_choice.rule.min_tiles);
    return 2;
  }
  plan_choice.decode_kernel = decode_kernel;
  const bool long_context = only == "decode_long";
  const int max_batch = long_context ? 8 : 128, max_ctx = long_context ? kLongContextTokens : 16384;
  if (only_batch < 0 || only_batch > max_batch || only_ctx < 0 || only_ctx > max_ctx) {
    std::fprintf(stderr, "mla_bench: --batch %d (1-%d), --context %d (1-%d)\n", only_batch, max_batch, only_ctx, max_ctx);
    return 2;
  }
  if (page_size < 1 || max_ctx % page_size != 0) {
    std::fprintf(stderr, "mla_bench: --page-size %d (a divisor of %d)\n", page_size, max_ctx);
    return 2;
  }
  try {
    int device = 0, num_sms = 0;
    cudaDeviceProp prop{};
    FATHOM_CUDA_CHECK(cudaGetDevice(&device));
    FATHOM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    FATHOM_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
    std::printf("device: %s, %d SMs, L2 %d MiB, reps %d (median, L2 flushed before each run by a %s)\n", prop.name,
                num_sms, prop.l2CacheSize >> 20, reps, flush == "read" ? "read" : "memset");
    Timer timer;
    timer.read_flush = flush == "read";
    const double copy_gbps = bench_copy(timer, reps);
    if (only.empty() || only == "decode" || only == "decode_long")
      bench_decode(timer, reps, copy_gbps, num_sms, only_batch, only_ctx, same_pages, contiguous, heads, page_size,
                   decode_kernel, long_context);
    if (only.empty() || only == "plans") bench_decode_plans(timer, reps, num_sms);
    if (only.empty() || only == "absorb") {
      bench_absorb(timer, reps, copy_gbps);
      bench_absorb_decode(timer, reps, copy_gbps);
    }
    if (only.empty() || only == "absorb_chain") bench_absorb_chain(copy_gbps, num_sms);
    if (only.empty() || only == "attention_chain")
      bench_attention_chain(copy_gbps, num_sms, only_batch, only_ctx, heads, with_prepare, plan_choice);
    if (only.empty() || only == "prefill") bench_prefill(timer, std::max(5, reps / 3));
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "mla_bench: %s\n", error.what());
    return 1;
  }
  return 0;
}
