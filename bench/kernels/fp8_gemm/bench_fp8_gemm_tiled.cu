// The tiled (batch-invariant) FP8 GEMM against cuBLASLt block-scaled FP8 at DeepSeek-V3 prefill shapes, the
// grouped prefill kernels (tiled, warpgroup MMA) against their floors on routed MoE batches, and the decode grouped GEMMs
// (grid over all experts vs over the active ones) against the bytes of the touched experts. Same inputs, same run.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/gpu_timer.h"
#include "kernels/common/graph_chain.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/fp8_gemm/cublaslt_fp8_gemm.h"
#include "kernels/cuda/fp8_gemm/fp8_gemm.h"
#include "kernels/cuda/fp8_gemm/fp8_grouped_gemm.h"

using namespace fathom::kernels::cuda;

namespace {

struct WeightShape { const char* name; int64_t rows, cols; };

// V3 linear layers (rows = out features, cols = in features).
const WeightShape kShapes[] = {
    {"q_a_proj", 1536, 7168},  {"q_b_proj", 24576, 1536}, {"kv_a_proj", 576, 7168}, {"kv_b_proj", 32768, 512},
    {"o_proj", 7168, 16384},   {"expert_gate_up", 4096, 7168}, {"expert_down", 7168, 2048},
};

// Finite e4m3 codes from a hash (no NaN: 0x7f / 0xff never produced).
__global__ void fill_random_fp8(uint8_t* values, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    values[i] = static_cast<uint8_t>((h & 0x7f) == 0x7f ? 0x3f : (h & 0xff) & 0xf7);
  }
}

__global__ void fill_value(float* values, size_t count, float value) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < count) values[i] = value;
}

void fill_scales(DeviceBuffer<float>& buffer, float value) {
  fill_value<<<static_cast<unsigned>(ceil_div(static_cast<int64_t>(buffer.size()), 256)), 256>>>(buffer.data(),
                                                                                                buffer.size(), value);
  FATHOM_CUDA_CHECK_LAUNCH();
}

constexpr int kWarmup = 3, kRuns = 20;

// A dense weight of `shape`: random e4m3 values, constant block scales.
struct RandomDenseWeight {
  WeightShape shape;
  DeviceBuffer<uint8_t> values;
  DeviceBuffer<float> scales;
  explicit RandomDenseWeight(const WeightShape& weight_shape)
      : shape(weight_shape),
        values(static_cast<size_t>(weight_shape.rows * weight_shape.cols)),
        scales(static_cast<size_t>(ceil_div(weight_shape.rows, 128) * ceil_div(weight_shape.cols, 128))) {
    fill_random_fp8<<<1024, 256>>>(values.data(), values.size(), 9);
    fill_scales(scales, 1e-3f);
  }
  DeviceFp8Weight view() const { return {values.data(), scales.data(), shape.rows, shape.cols}; }
};

void dense_tiled_vs_cublaslt(Fp8Gemm& gemm) {
  std::printf("\n## dense: tiled (kTiled) vs cuBLASLt block-scaled FP8, bf16 out; median of %d runs\n", kRuns);
  std::printf("%-16s %6s %6s %6s %10s %9s %10s %9s %8s\n", "weight", "rows", "cols", "tokens", "tiled_us", "TFLOP/s",
              "cublas_us", "TFLOP/s", "ratio");
  for (const WeightShape& shape : kShapes) {
    const int64_t k_blocks = ceil_div(shape.cols, 128);
    const RandomDenseWeight weight(shape);
    const DeviceFp8Weight w = weight.view();
    for (int64_t tokens : {128, 512, 1024, 4096, 8192}) {
      DeviceBuffer<uint8_t> x(static_cast<size_t>(tokens * shape.cols));
      fill_random_fp8<<<1024, 256>>>(x.data(), x.size(), 5);
      // Constant scales: token-major and block-major layouts hold the same values.
      DeviceBuffer<float> x_scales(static_cast<size_t>(tokens * k_blocks));
      fill_scales(x_scales, 1e-2f);
      DeviceBuffer<__nv_bfloat16> out(static_cast<size_t>(tokens * shape.rows));
      FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
      const DeviceFp8Activations xa{x.data(), x_scales.data(), tokens, shape.cols};
      const double flop = 2.0 * tokens * shape.rows * shape.cols;
      const double tiled_ms = fathom::bench::median_ms(
          [&](int) { gemm.run(xa, nullptr, w, out.data(), Fp8GemmWorkspace{}, nullptr, Fp8GemmPath::kTiled); },
          kWarmup, kRuns);
      std::printf("%-16s %6lld %6lld %6lld %10.1f %9.1f", shape.name, (long long)shape.rows, (long long)shape.cols,
                  (long long)tokens, tiled_ms * 1e3, flop / (tiled_ms * 1e-3) / 1e12);
      if (!gemm.cublaslt().supports(tokens, shape.rows, shape.cols, CUDA_R_16BF)) {
        std::printf("   cuBLASLt: no algorithm\n");
        continue;
      }
      const double cublas_ms = fathom::bench::median_ms(
          [&](int) { gemm.run(xa, x_scales.data(), w, out.data(), Fp8GemmWorkspace{}, nullptr, Fp8GemmPath::kCublasLt); },
          kWarmup, kRuns);
      std::printf(" %10.1f %9.1f %7.2fx\n", cublas_ms * 1e3, flop / (cublas_ms * 1e-3) / 1e12, tiled_ms / cublas_ms);
    }
  }
  std::printf("(ratio = tiled time / cuBLASLt time; > 1 means the tiled kernel is slower)\n");
}

// Dense prefill GEMMs as the default model runs them (cuBLASLt on the largest multiple of 128 rows past 64, the
// small-M path on the rest in 64-row launches, each reading the whole weight) against fp8_dense_wgmma_gemm (one
// launch over every row, the batch-invariant prefill's kernel), at V3's dense weights whose rows are a multiple of 128.
void dense_prefill_paths(Fp8Gemm& gemm) {
  const WeightShape shapes[] = {{"q_b_proj", 24576, 1536},      {"kv_b_proj", 32768, 512},
                                {"o_proj", 7168, 16384},        {"mlp_gate_up", 36864, 7168},
                                {"mlp_down", 7168, 18432},      {"shared_gate_up", 4096, 7168},
                                {"shared_down", 7168, 2048}};
  std::printf("\n## dense prefill: default path (cuBLASLt + small-M rest) vs fp8_dense_wgmma_gemm, bf16 out; median of %d runs\n",
              kRuns);
  std::printf("%-16s %6s %6s %6s %12s %9s %10s %9s %8s\n", "weight", "rows", "cols", "tokens", "default_us", "TFLOP/s",
              "wgmma_us", "TFLOP/s", "ratio");
  for (const WeightShape& shape : shapes) {
    const int64_t k_blocks = ceil_div(shape.cols, 128);
    const RandomDenseWeight weight(shape);
    const DeviceFp8Weight w = weight.view();
    DeviceBuffer<float> partials(gemm.small_m_workspace_bytes(shape.rows, shape.cols) / sizeof(float) + 1);
    Fp8GemmWorkspace workspace;
    workspace.split_partials = partials.data();
    workspace.split_partials_bytes = partials.size() * sizeof(float);
    for (int64_t tokens : {65, 100, 128, 160, 200, 256, 300, 384, 512, 768, 1000, 1024, 2048, 4096}) {
      DeviceBuffer<uint8_t> x(static_cast<size_t>(tokens * shape.cols));
      fill_random_fp8<<<1024, 256>>>(x.data(), x.size(), 5);
      DeviceBuffer<float> x_scales(static_cast<size_t>(tokens * k_blocks));  // constant: both layouts alike
      fill_scales(x_scales, 1e-2f);
      DeviceBuffer<__nv_bfloat16> out(static_cast<size_t>(tokens * shape.rows));
      FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
      const int64_t head = tokens / 128 * 128;
      auto default_path = [&](int) {
        if (head > 0) {
          gemm.run(DeviceFp8Activations{x.data(), x_scales.data(), head, shape.cols}, x_scales.data(), w, out.data(),
                   Fp8GemmWorkspace{}, nullptr, Fp8GemmPath::kCublasLt);
        }
        for (int64_t begin = head; begin < tokens; begin += Fp8Gemm::kSmallMMaxTokens) {
          const int64_t count = std::min(Fp8Gemm::kSmallMMaxTokens, tokens - begin);
          gemm.run(DeviceFp8Activations{x.data() + begin * shape.cols, x_scales.data() + begin * k_blocks, count,
                                        shape.cols},
                   nullptr, w, out.data() + begin * shape.rows, workspace, nullptr, Fp8GemmPath::kSmallM);
        }
      };
      const double flop = 2.0 * tokens * shape.rows * shape.cols;
      const double default_ms = fathom::bench::median_ms(default_path, kWarmup, kRuns);
      const double wgmma_ms = fathom::bench::median_ms(
          [&](int) {
            fp8_dense_wgmma_gemm(DeviceFp8Activations{x.data(), x_scales.data(), tokens, shape.cols}, w, out.data(),
                                 nullptr);
          },
          kWarmup, kRuns);
      std::printf("%-16s %6lld %6lld %6lld %12.1f %9.1f %10.1f %9.1f %7.2fx\n", shape.name, (long long)shape.rows,
                  (long long)shape.cols, (long long)tokens, default_ms * 1e3, flop / (default_ms * 1e-3) / 1e12,
                  wgmma_ms * 1e3, flop / (wgmma_ms * 1e-3) / 1e12, wgmma_ms / default_ms);
    }
  }
  std::printf("(ratio = wgmma time / default time; < 1 means the one wgmma launch is faster)\n");
}

// 256 experts, top-8 routing of `tokens` tokens (random, each token's 8 experts distinct).
std::vector<int32_t> routed_counts(int64_t tokens, int experts, int top_k, std::mt19937& rng) {
  std::vector<int32_t> counts(static_cast<size_t>(experts), 0), ids(static_cast<size_t>(experts));
  std::iota(ids.begin(), ids.end(), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int k = 0; k < top_k; ++k) {
      std::uniform_int_distribution<int> pick(k, experts - 1);
      std::swap(ids[k], ids[pick(rng)]);
      ++counts[ids[k]];
    }
  }
  return counts;
}

// Random stacked expert weights [experts, rows, cols] and their block scales (constant), for the grouped sections.
struct ExpertWeights {
  DeviceBuffer<uint8_t> values;
  DeviceBuffer<float> scales;
  ExpertWeights(int experts, const WeightShape& shape)
      : values(static_cast<size_t>(experts * shape.rows * shape.cols)),
        scales(static_cast<size_t>(experts * ceil_div(shape.rows, 128) * ceil_div(shape.cols, 128))) {
    fill_random_fp8<<<4096, 256>>>(values.data(), values.size(), 11);
    fill_scales(scales, 1e-3f);
  }
};

// `rows` permuted activation rows [rows, cols] (random e4m3, constant scales), the bf16 output [rows, out_rows], and
// the grouped GEMM arguments over them (max_rows_per_expert left to the caller).
struct GroupedProblem {
  DeviceBuffer<uint8_t> x;
  DeviceBuffer<float> x_scales;
  DeviceBuffer<__nv_bfloat16> out;
  Fp8GroupedGemmArgs args;
  GroupedProblem(int64_t rows, const WeightShape& shape, const ExpertWeights& weights, int experts,
                 const DeviceBuffer<int32_t>& offsets, const DeviceBuffer<int32_t>& counts)
      : x(static_cast<size_t>(rows * shape.cols)), x_scales(static_cast<size_t>(rows * ceil_div(shape.cols, 128))),
        out(static_cast<size_t>(rows * shape.rows)) {
    fill_random_fp8<<<1024, 256>>>(x.data(), x.size(), 13);
    fill_scales(x_scales, 1e-2f);
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
    args.x_values = x.data();
    args.x_scales = x_scales.data();
    args.expert_offsets = offsets.data();
    args.expert_counts = counts.data();
    args.w_values = weights.values.data();
    args.w_scales = weights.scales.data();
    args.num_experts = experts;
    args.rows = shape.rows;
    args.cols = shape.cols;
  }
};

// Prefill-sized MoE batches (top-8 of 256 experts): the tiled mma.sync kernel (batch-invariant mode) against the
// warpgroup-MMA kernel with 64-, 128- and 192-token tiles, each against its floor: max(bytes of the touched experts'
// weights + activations + output / copy bandwidth, FLOPs / the dense cuBLASLt block-scaled FP8 rate measured on
// the same rows and weight shape in this run).
// The grouped prefill section's expert weights and token counts (top-8 of 256 experts).
const WeightShape kExpertShapes[] = {{"expert_gate_up", 4096, 7168}, {"expert_down", 7168, 2048}};
constexpr int64_t kGroupedPrefillTokens[] = {128, 256, 512, 1024, 2048, 4096, 8192};

// Options: only_tokens > 0 keeps that token count; only_shape non-empty keeps that weight; auto_only skips the
// fixed-tile and tiled kernels (for profilers: one kernel per size); auto_tile > 0 runs that token tile in the auto
// column instead of the heuristic's (alternating invocations compare tiles without the run order's drift).
struct GroupedPrefillOptions {
  int64_t only_tokens = 0;
  std::string only_shape;
  bool auto_only = false;
  int32_t auto_tile = 0;
};

void grouped_prefill(Fp8Gemm& gemm, double copy_gbps, const GroupedPrefillOptions& options) {
  constexpr int kExperts = 256, kTopK = 8;
  std::printf("\n## grouped prefill (MoE): %d experts, top-%d; median of %d runs; bf16 out; floor = max(bytes / %.0f GB/s, "
              "FLOP / dense cuBLASLt rate)\n", kExperts, kTopK, kRuns, copy_gbps);
  std::printf("%-16s %6s %6s %7s %10s %10s %10s %10s %10s %5s %9s %9s %9s %8s\n", "weight", "tokens", "rows",
              "experts", "tiled_us", "wgmma64_us", "wgmma128_us", "wgmma192_us", "auto_us", "tile", "TFLOP/s",
              "cublas_TF", "floor_us", "auto/floor");
  for (const WeightShape& shape : kExpertShapes) {
    if (!options.only_shape.empty() && options.only_shape != shape.name) continue;
    const int64_t k_blocks = ceil_div(shape.cols, 128);
    const ExpertWeights weights(kExperts, shape);
    for (const int64_t tokens : kGroupedPrefillTokens) {
      if (options.only_tokens > 0 && tokens != options.only_tokens) continue;
      std::mt19937 rng(static_cast<uint32_t>(tokens) * 3 + 1);
      const std::vector<int32_t> counts = routed_counts(tokens, kExperts, kTopK, rng);
      std::vector<int32_t> offsets(kExperts + 1, 0);
      int32_t touched = 0;
      for (int e = 0; e < kExperts; ++e) {
        offsets[e + 1] = offsets[e] + counts[e];
        touched += counts[e] > 0;
      }
      const int32_t total = offsets.back();
      DeviceBuffer<int32_t> offsets_device(offsets), counts_device(counts);
      GroupedProblem problem(total, shape, weights, kExperts, offsets_device, counts_device);
      Fp8GroupedGemmArgs& args = problem.args;
      __nv_bfloat16* out = problem.out.data();
      args.max_rows_per_expert = *std::max_element(counts.begin(), counts.end());
      args.x_rows = total;
      auto time_kernel = [&](Fp8GroupedKernel kernel, int32_t tokens_per_tile) {
        args.kernel = kernel;
        args.wgmma_tokens_per_tile = tokens_per_tile;
        return fathom::bench::median_ms([&](int) { fp8_grouped_gemm(args, out, nullptr); }, kWarmup, kRuns);
      };
      const double tiled_ms = options.auto_only ? 0.0 : time_kernel(Fp8GroupedKernel::kTiled, 0);
      const double w64_ms = options.auto_only ? 0.0 : time_kernel(Fp8GroupedKernel::kWgmma, 64);
      const double w128_ms = options.auto_only ? 0.0 : time_kernel(Fp8GroupedKernel::kWgmma, 128);
      const double w192_ms = options.auto_only ? 0.0 : time_kernel(Fp8GroupedKernel::kWgmma, 192);
      const double auto_ms = time_kernel(Fp8GroupedKernel::kWgmma, options.auto_tile);
      const double flop = 2.0 * total * shape.rows * shape.cols;
      const double bytes = static_cast<double>(touched) * (shape.rows * shape.cols + 4.0 * ceil_div(shape.rows, 128) * k_blocks) +
                           static_cast<double>(total) * (shape.cols + 4.0 * k_blocks + 2.0 * shape.rows);
      // The compute ceiling: cuBLASLt on the same rows as one dense GEMM against one expert's weight.
      const int64_t dense_rows = static_cast<int64_t>(total) / 128 * 128;
      double cublas_tflops = 0;
      const DeviceFp8Weight w{weights.values.data(), weights.scales.data(), shape.rows, shape.cols};
      if (dense_rows >= 128 && gemm.cublaslt().supports(dense_rows, shape.rows, shape.cols, CUDA_R_16BF)) {
        const DeviceFp8Activations xa{problem.x.data(), problem.x_scales.data(), dense_rows, shape.cols};
        const double ms = fathom::bench::median_ms(
            [&](int) { gemm.run(xa, problem.x_scales.data(), w, out, Fp8GemmWorkspace{}, nullptr, Fp8GemmPath::kCublasLt); },
            kWarmup, kRuns);
        cublas_tflops = 2.0 * dense_rows * shape.rows * shape.cols / (ms * 1e-3) / 1e12;
      }
      const double memory_floor_ms = bytes / (copy_gbps * 1e9) * 1e3;
      const double compute_floor_ms = cublas_tflops > 0 ? flop / (cublas_tflops * 1e12) * 1e3 : 0.0;
      const double floor_ms = std::max(memory_floor_ms, compute_floor_ms);
      std::printf("%-16s %6lld %6d %7d %10.1f %10.1f %11.1f %11.1f %10.1f %5d %9.1f %9.1f %9.1f %7.2fx\n",
                  shape.name, (long long)tokens, total, touched, tiled_ms * 1e3, w64_ms * 1e3, w128_ms * 1e3,
                  w192_ms * 1e3, auto_ms * 1e3,
                  options.auto_tile > 0 ? options.auto_tile : wgmma_tokens_per_tile(total, kExperts),
                  flop / (auto_ms * 1e-3) / 1e12,
                  cublas_tflops, floor_ms * 1e3, auto_ms / floor_ms);
    }
  }
  std::printf("(auto = the wgmma kernel with the tile the model's heuristic picks or --auto-tile, `tile`; TFLOP/s of "
              "auto%s)\n",
              options.auto_only ? "; --auto-only: the other kernels' columns are not run and read 0" : "");
}

// Decode-sized MoE batches (1..64 tokens, top-8 of 256): the grouped small-M kernel (grid over all 256 experts)
// against the grouped gemv kernel (grid over the active experts), as a fraction of the copy bandwidth on the bytes
// that must move: every touched expert's weight and scales once, the permuted activations, the bf16 output.
void grouped_decode(double copy_gbps) {
  constexpr int kExperts = 256, kTopK = 8;
  std::printf("\n## grouped decode (MoE): %d experts, top-%d; median of %d runs; of_copy = bytes / time / %.0f GB/s\n",
              kExperts, kTopK, kRuns, copy_gbps);
  std::printf("(gemv: default L2 prefetch distance %d K blocks; pN = the gemv with distance N, us and of_copy)\n",
              kGroupedGemvPrefetchBlocks);
  std::printf("(chain = the gemv per launch in a captured graph of 20 programmatic launches, as decode runs it; settled =\n"
              " the expert list read before the wait for the previous kernel, as the model's down GEMM does)\n");
  std::printf("%-16s %6s %7s %9s %11s %8s %9s %8s %8s %16s %16s %s\n", "weight", "tokens", "experts", "MB", "small_m_us",
              "of_copy", "gemv_us", "of_copy", "speedup", "chain_us", "settled_us", "prefetch sweep");
  for (const WeightShape& shape : kExpertShapes) {
    const int64_t k_blocks = ceil_div(shape.cols, 128);
    const ExpertWeights weights(kExperts, shape);
    for (int64_t tokens : {1, 2, 4, 8, 16, 32, 64}) {
      std::mt19937 rng(static_cast<uint32_t>(tokens));
      const std::vector<int32_t> counts = routed_counts(tokens, kExperts, kTopK, rng);
      std::vector<int32_t> offsets(kExperts + 1, 0), active;
      for (int e = 0; e < kExperts; ++e) {
        offsets[e + 1] = offsets[e] + counts[e];
        if (counts[e] > 0) active.push_back(e);
      }
      const int32_t total = offsets.back(), touched = static_cast<int32_t>(active.size());
      active.resize(kExperts, -1);
      DeviceBuffer<int32_t> offsets_device(offsets), counts_device(counts), active_device(active);
      GroupedProblem problem(total, shape, weights, kExperts, offsets_device, counts_device);
      Fp8GroupedGemmArgs& args = problem.args;
      __nv_bfloat16* out = problem.out.data();
      args.max_rows_per_expert = static_cast<int32_t>(tokens);  // the model's bound: a token picks an expert once
      const double small_ms = fathom::bench::median_ms([&](int) { fp8_grouped_gemm(args, out, nullptr); },
                                                       kWarmup, kRuns);
      args.active_experts = active_device.data();
      args.max_active_experts = static_cast<int32_t>(std::min<int64_t>(kExperts, tokens * kTopK));
      const double gemv_ms = fathom::bench::median_ms([&](int) { fp8_grouped_gemm(args, out, nullptr); },
                                                      kWarmup, kRuns);
      std::string sweep;
      const double bytes = static_cast<double>(touched) * (shape.rows * shape.cols + 4.0 * ceil_div(shape.rows, 128) * k_blocks) +
                           static_cast<double>(total) * (shape.cols + 4.0 * k_blocks + 2.0 * shape.rows);
      auto of_copy = [&](double ms) { return 100.0 * bytes / (ms * 1e-3) / 1e9 / copy_gbps; };
      for (int32_t prefetch : {0, 2, 4, 8}) {
        args.gemv_prefetch_blocks = prefetch;
        const double ms = fathom::bench::median_ms([&](int) { fp8_grouped_gemm(args, out, nullptr); }, kWarmup, kRuns);
        char item[64];
        std::snprintf(item, sizeof(item), " p%d %.1f (%.1f%%)", prefetch, ms * 1e3, of_copy(ms));
        sweep += item;
      }
      args.gemv_prefetch_blocks = kGroupedGemvPrefetchBlocks;
      auto chain_ms = [&](bool settled) {
        args.experts_settled = settled;
        const double ms = fathom::bench::graph_ms_per_launch([&](int, cudaStream_t stream) { fp8_grouped_gemm(args, out, stream); });
        args.experts_settled = false;
        return ms;
      };
      const double unsettled_ms = chain_ms(false), settled_ms = chain_ms(true);
      std::printf("%-16s %6lld %7d %9.1f %11.1f %7.1f%% %9.1f %7.1f%% %7.2fx %8.1f %5.1f%% %8.1f %5.1f%%%s\n", shape.name,
                  (long long)tokens, touched, bytes / 1e6, small_ms * 1e3, of_copy(small_ms), gemv_ms * 1e3,
                  of_copy(gemv_ms), small_ms / gemv_ms, unsettled_ms * 1e3, of_copy(unsettled_ms), settled_ms * 1e3,
                  of_copy(settled_ms), sweep.c_str());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // --only decode: just the decode-sized grouped section; --only grouped: the grouped sections (the dense one takes
  // minutes); --only prefill: the grouped prefill section; --only dense: the dense prefill paths. --tokens N / --shape NAME / --auto-only narrow the
  // grouped prefill section, --auto-tile 64|128|192 sets its auto column's tile (see GroupedPrefillOptions).
  std::string only;
  GroupedPrefillOptions options;
  auto usage = [&](const std::string& why) {
    std::fprintf(stderr, "%s\nusage: %s [--only decode|grouped|prefill|dense] [--tokens 128|256|...|8192] "
                 "[--shape expert_gate_up|expert_down] [--auto-only] [--auto-tile 64|128|192]\n", why.c_str(), argv[0]);
    return 2;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--only" && has_value) {
      only = argv[++i];
      if (only != "decode" && only != "grouped" && only != "prefill" && only != "dense") {
        return usage("unknown section " + only);
      }
    } else if (arg == "--tokens" && has_value) {
      const std::string value = argv[++i];
      for (const int64_t tokens : kGroupedPrefillTokens)
        if (value == std::to_string(tokens)) options.only_tokens = tokens;
      if (options.only_tokens == 0) return usage("no grouped prefill run with " + value + " tokens");
    } else if (arg == "--shape" && has_value) {
      options.only_shape = argv[++i];
      bool known = false;
      for (const WeightShape& shape : kExpertShapes) known = known || options.only_shape == shape.name;
      if (!known) return usage("unknown expert weight " + options.only_shape);
    } else if (arg == "--auto-only") {
      options.auto_only = true;
    } else if (arg == "--auto-tile" && has_value) {
      const std::string value = argv[++i];
      if (value != "64" && value != "128" && value != "192") {
        return usage("--auto-tile takes 64, 128 or 192, not " + value);
      }
      options.auto_tile = std::stoi(value);
    } else {
      return usage("unknown or incomplete argument " + arg);
    }
  }
  const bool decode_only = only == "decode";
  cudaDeviceProp prop{};
  FATHOM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  Fp8Gemm gemm(prop.multiProcessorCount);
  if (only.empty()) dense_tiled_vs_cublaslt(gemm);
  if (only.empty() || only == "dense") dense_prefill_paths(gemm);
  if (only == "dense") return 0;
  const double copy_gbps = fathom::bench::copy_bandwidth_gbps();
  if (!decode_only) grouped_prefill(gemm, copy_gbps, options);
  if (only != "prefill") grouped_decode(copy_gbps);
  return 0;
}
