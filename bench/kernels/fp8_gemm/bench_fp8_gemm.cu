// FP8 block-scaled GEMM at DeepSeek-V3 shapes: decode sizes against the copy-bandwidth floor, prefill sizes
// against cuBLASLt in the same run. Prints one table row per case.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/gpu_timer.h"
#include "kernels/common/graph_chain.h"
#include "kernels/common/read_floor.cuh"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/fp8_gemm/act_quant.h"
#include "kernels/cuda/fp8_gemm/cublaslt_fp8_gemm.h"
#include "kernels/cuda/fp8_gemm/fp8_gemm.h"
#include "kernels/cuda/programmatic_launch.cuh"

using namespace fathom::kernels::cuda;

namespace {

struct WeightShape { const char* name; int64_t rows, cols; };

// V3 linear layers (rows = out features, cols = in features).
const WeightShape kShapes[] = {
    {"q_a_proj", 1536, 7168},   {"q_b_proj", 24576, 1536},     {"kv_a_proj", 576, 7168},
    {"qkv_a_fused", 2112, 7168},
    {"kv_b_proj", 32768, 512},  {"o_proj", 7168, 16384},       {"dense_gate_up", 36864, 7168},
    {"dense_down", 7168, 18432}, {"expert_gate_up", 4096, 7168}, {"expert_down", 7168, 2048},
};

// FATHOM_BENCH_SHAPES=name,name... limits every section to those weights (all when unset).
bool shape_wanted(const WeightShape& shape) {
  const char* list = std::getenv("FATHOM_BENCH_SHAPES");
  if (list == nullptr || *list == '\0') return true;
  const std::string names = std::string(",") + list + ",";
  return names.find(std::string(",") + shape.name + ",") != std::string::npos;
}

__global__ void fill_random_fp8(uint8_t* values, size_t count, uint32_t seed) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  for (; i < count; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    values[i] = static_cast<uint8_t>((h & 0x7f) == 0x7f ? 0x3f : (h & 0xff) & 0xf7);  // finite, |v| < ~256
  }
}

__global__ void fill_value(float* values, size_t count, float value) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < count) values[i] = value;
}

// Bytes a decode GEMM must move: weight + weight scales + activations + bf16 output.
double decode_bytes(const WeightShape& shape, int64_t tokens) {
  const double scale_count = static_cast<double>(ceil_div(shape.rows, 128) * ceil_div(shape.cols, 128));
  return static_cast<double>(shape.rows * shape.cols) + scale_count * 4.0 + tokens * shape.cols * 1.0 +
         tokens * shape.rows * 2.0;
}

// A decode weight in enough random copies that cycling them keeps every run out of L2, its scales, and the
// small-M workspace (split-K partials, zeroed fused-reduction counters).
struct RotatingWeight {
  WeightShape shape;
  size_t weight_bytes = 0;
  int copies = 0;
  DeviceBuffer<uint8_t> values;   // [copies, rows, cols] e4m3
  DeviceBuffer<float> scales;     // [ceil(rows/128), ceil(cols/128)]
  DeviceBuffer<float> partials;
  DeviceBuffer<uint32_t> counters;
  RotatingWeight(Fp8Gemm& gemm, const WeightShape& weight_shape, size_t rotate_bytes) : shape(weight_shape) {
    weight_bytes = static_cast<size_t>(shape.rows * shape.cols);
    copies = static_cast<int>(std::max<size_t>(2, rotate_bytes / weight_bytes + 1));
    values = DeviceBuffer<uint8_t>(weight_bytes * copies);
    fill_random_fp8<<<1024, 256>>>(values.data(), values.size(), 7);
    const int64_t scale_count = ceil_div(shape.rows, 128) * ceil_div(shape.cols, 128);
    scales = DeviceBuffer<float>(static_cast<size_t>(scale_count));
    fill_value<<<static_cast<unsigned>(ceil_div(scale_count, 256)), 256>>>(scales.data(), scales.size(), 1e-3f);
    partials = DeviceBuffer<float>(gemm.small_m_workspace_bytes(shape.rows, shape.cols) / sizeof(float) + 1);
    counters = DeviceBuffer<uint32_t>(gemm.small_m_counter_bytes(shape.rows, shape.cols) / sizeof(uint32_t) + 1);
    counters.fill_bytes(0);  // zero at rest; every GEMM leaves them zero
  }
  DeviceFp8Weight copy(int run) const {
    return {values.data() + (run % copies) * weight_bytes, scales.data(), shape.rows, shape.cols};
  }
  Fp8GemmWorkspace workspace() { return {partials.data(), partials.bytes(), counters.data(), counters.bytes()}; }
};

// Random e4m3 activations [tokens, cols] with token-major scales.
struct RandomActivations {
  DeviceBuffer<uint8_t> values;
  DeviceBuffer<float> scales;
  DeviceFp8Activations view;
  RandomActivations(int64_t tokens, int64_t cols, unsigned seed)
      : values(static_cast<size_t>(tokens * cols)), scales(static_cast<size_t>(tokens * ceil_div(cols, 128))) {
    fill_random_fp8<<<256, 256>>>(values.data(), values.size(), seed);
    fill_value<<<static_cast<unsigned>(ceil_div(scales.size(), 256)), 256>>>(scales.data(), scales.size(), 1e-2f);
    view = {values.data(), scales.data(), tokens, cols};
  }
};

// Every small-M kernel variant (fp8_gemm_heuristics.h: all bit-identical) at 1..16 tokens: one row per
// (shape, tokens, variant), then per shape the variant with the least total time over the token counts.
void bench_small_m_variants(Fp8Gemm& gemm, double copy_gbps, size_t rotate_bytes) {
  constexpr int kVariants = static_cast<int>(SmallMVariant::kCount);
  gemm.set_decode_kernel(DecodeKernel::kMmaSync);  // else 9..16 tokens would run the wgmma kernel for every variant
  std::printf("\n## decode variants (tokens <= 16; graph us per GEMM, cold L2; default = %s)\n",
              small_m_variant_info(kSmallMDefaultVariant).name);
  std::printf("%-16s %6s %-10s %9s %8s %8s\n", "weight", "tokens", "variant", "graph_us", "of_copy", "vs_ref");
  std::vector<std::string> best_lines;
  for (const WeightShape& shape : kShapes) {
    if (!shape_wanted(shape)) continue;
    RotatingWeight weight(gemm, shape, rotate_bytes);
    const Fp8GemmWorkspace ws = weight.workspace();
    double total_ms[kVariants] = {};
    std::string per_tokens;
    for (int64_t tokens : {1, 2, 4, 8, 16}) {
      RandomActivations input(tokens, shape.cols, 3);
      DeviceBuffer<__nv_bfloat16> out(static_cast<size_t>(tokens * shape.rows));
      FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
      double reference_ms = 0, best_ms = 0;
      int best = 0;
      for (int v = 0; v < kVariants; ++v) {
        gemm.set_small_m_variant(static_cast<SmallMVariant>(v));
        const double ms = fathom::bench::graph_ms_per_launch([&](int run, cudaStream_t stream) {
          const DeviceFp8Weight w = weight.copy(run);
          gemm.run(input.view, nullptr, w, out.data(), ws, stream,
                   Fp8GemmPath::kSmallM);
        });
        if (v == 0) reference_ms = ms;
        if (v == 0 || ms < best_ms) best_ms = ms, best = v;
        total_ms[v] += ms;
        const double gbps = decode_bytes(shape, tokens) / (ms * 1e-3) / 1e9;
        std::printf("%-16s %6lld %-10s %9.2f %7.1f%% %7.2fx\n", shape.name, (long long)tokens,
                    kSmallMVariants[v].name, ms * 1e3, 100.0 * gbps / copy_gbps, reference_ms / ms);
      }
      const double best_gbps = decode_bytes(shape, tokens) / (best_ms * 1e-3) / 1e9;
      char item[64];
      std::snprintf(item, sizeof(item), " M=%lld:%s(%.0f%%)", (long long)tokens, kSmallMVariants[best].name,
                    100.0 * best_gbps / copy_gbps);
      per_tokens += item;
    }
    int best = 0;
    for (int v = 1; v < kVariants; ++v) {
      if (total_ms[v] < total_ms[best]) best = v;
    }
    char line[512];
    std::snprintf(line, sizeof(line), "best %-16s %-10s (sum over M=1,2,4,8,16: %.1f us, reference %.1f us);%s",
                  shape.name, kSmallMVariants[best].name, total_ms[best] * 1e3, total_ms[0] * 1e3, per_tokens.c_str());
    best_lines.push_back(line);
  }
  gemm.set_small_m_variant(kSmallMDefaultVariant);
  gemm.set_decode_kernel(DecodeKernel::kAuto);
  std::printf("\n");
  for (const std::string& line : best_lines) std::printf("%s\n", line.c_str());
}

// 8..64 tokens: the mma.sync small-M kernels against the wgmma decode kernel at its heuristic split count and at
// fixed ones (the calibration of wgmma_decode_split_count); graph us per GEMM, cold L2, % of copy bandwidth.
void bench_wgmma_decode(Fp8Gemm& gemm, double copy_gbps, size_t rotate_bytes) {
  std::printf("\n## decode 8..64 tokens: mma.sync small-M vs wgmma (graph us per GEMM, cold L2; %% of copy)\n");
  std::printf("%-16s %6s %14s %16s %s\n", "weight", "tokens", "mma.sync", "wgmma(heur:s)", "wgmma at splits 1 2 3 4 6 8");
  constexpr int kFixedSplits[] = {1, 2, 3, 4, 6, 8};
  for (const WeightShape& shape : kShapes) {
    if (!shape_wanted(shape)) continue;
    RotatingWeight weight(gemm, shape, rotate_bytes);
    gemm.set_wgmma_decode_splits_override(8);  // the largest split count below: a workspace for all of them
    DeviceBuffer<float> partials(gemm.small_m_workspace_bytes(shape.rows, shape.cols) / sizeof(float) + 1);
    gemm.set_wgmma_decode_splits_override(0);
    const Fp8GemmWorkspace ws{partials.data(), partials.bytes()};
    for (int64_t tokens : {8, 9, 16, 32, 64}) {
      RandomActivations input(tokens, shape.cols, 3);
      DeviceBuffer<__nv_bfloat16> out(static_cast<size_t>(tokens * shape.rows));
      FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
      auto time_with = [&](DecodeKernel kernel, int splits) {
        gemm.set_decode_kernel(kernel);
        gemm.set_wgmma_decode_splits_override(splits);
        if (std::getenv("FATHOM_BENCH_TRACE")) {
          std::fprintf(stderr, "trace: %s tokens %lld %s splits %d\n", shape.name, (long long)tokens,
                       kernel == DecodeKernel::kMmaSync ? "mma.sync" : "wgmma", gemm.wgmma_decode_splits(shape.rows, shape.cols));
        }
        const double ms = fathom::bench::graph_ms_per_launch([&](int run, cudaStream_t stream) {
          gemm.run(input.view, nullptr, weight.copy(run), out.data(), ws, stream, Fp8GemmPath::kSmallM);
        });
        return 100.0 * decode_bytes(shape, tokens) / (ms * 1e-3) / 1e9 / copy_gbps;
      };
      auto us_of = [&](double percent) { return decode_bytes(shape, tokens) / (percent / 100.0 * copy_gbps * 1e9) * 1e6; };
      const double mma_sync = time_with(DecodeKernel::kMmaSync, 0);
      const double heuristic = time_with(DecodeKernel::kWgmma, 0);
      std::printf("%-16s %6lld %7.1fus %4.0f%% %8.1fus %4.0f%%:%-2d", shape.name, (long long)tokens, us_of(mma_sync),
                  mma_sync, us_of(heuristic), heuristic, gemm.wgmma_decode_splits(shape.rows, shape.cols));
      for (int splits : kFixedSplits) std::printf(" %4.0f%%", time_with(DecodeKernel::kWgmma, splits));
      std::printf("\n");
    }
  }
  gemm.set_decode_kernel(DecodeKernel::kAuto);
  gemm.set_wgmma_decode_splits_override(0);
}

// Per decode weight at 1, 8 and 16 tokens: the read floors above, the default GEMM, the GEMM without its split-K
// reduce launch (partials left for the consumer, as the model runs o_proj, dense down and the shared expert), the
// gemv variants w4d2p2 (split-K reduce launch) and cta (split-K summed in the CTA), and each gemv variant with its
// partials left to the consumer (labelled name:us:% of copy).
// Graph us per kernel in chains of 20, cold L2; % of copy counts the GEMM's bytes (decode_bytes) or the weight's.
void bench_read_floor(Fp8Gemm& gemm, double copy_gbps, size_t rotate_bytes, int num_sms) {
  std::printf("\n## decode read floors (graph us per kernel, cold L2; %% of copy bandwidth)\n");
  std::printf("%-16s %6s %16s %16s %16s %16s %16s %16s %16s\n", "weight", "tokens", "ldg_x8", "bulk_4x16KB",
              "bulk_8x8KB", "gemm", "gemm_deferred", "w4d2p2", "cta");
  DeviceBuffer<uint32_t> sink(1);
  for (const WeightShape& shape : kShapes) {
    if (!shape_wanted(shape)) continue;
    RotatingWeight weight(gemm, shape, rotate_bytes);
    const Fp8GemmWorkspace ws = weight.workspace();
    const double weight_bytes = static_cast<double>(weight.weight_bytes);
    auto percent = [&](double bytes, double ms) { return 100.0 * bytes / (ms * 1e-3) / 1e9 / copy_gbps; };
    const double ldg_ms = fathom::bench::graph_ms_per_launch([&](int run, cudaStream_t stream) {
      fathom::kernels::cuda::launch_programmatic(fathom::bench::read_floor_ldg_kernel<8>, dim3(num_sms * 4), dim3(256),
                                                 0, stream, reinterpret_cast<const uint4*>(weight.copy(run).values),
                                                 weight.weight_bytes / 16, sink.data());
    });
    auto bulk_ms = [&](auto kernel, int stages, int chunk_bytes, int ctas_per_sm) {
      FATHOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, stages * chunk_bytes));
      return fathom::bench::graph_ms_per_launch([&](int run, cudaStream_t stream) {
        fathom::kernels::cuda::launch_programmatic(kernel, dim3(num_sms * ctas_per_sm), dim3(32),
                                                   static_cast<size_t>(stages) * chunk_bytes, stream,
                                                   weight.copy(run).values, weight.weight_bytes, chunk_bytes, sink.data());
      });
    };
    const double bulk4_ms = bulk_ms(fathom::bench::read_floor_bulk_kernel<4>, 4, 16384, 2);
    const double bulk8_ms = bulk_ms(fathom::bench::read_floor_bulk_kernel<8>, 8, 8192, 2);
    for (int64_t tokens : {1, 8, 16}) {
      RandomActivations input(tokens, shape.cols, 3);
      DeviceBuffer<__nv_bfloat16> out(static_cast<size_t>(tokens * shape.rows));
      FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
      const double gemm_ms = fathom::bench::graph_ms_per_launch([&](int run, cudaStream_t stream) {
        gemm.run(input.view, nullptr, weight.copy(run), out.data(), ws, stream, Fp8GemmPath::kSmallM);
      });
      const double deferred_ms = fathom::bench::graph_ms_per_launch([&](int run, cudaStream_t stream) {
        gemm.run_small_m_deferred(input.view, weight.copy(run), out.data(), ws, stream);
      });
      // The gemv variants with the mma.sync family at every token count (16 tokens would otherwise run wgmma).
      const SmallMVariant runs[] = {SmallMVariant::kW4D2P2, SmallMVariant::kCta};
      gemm.set_decode_kernel(DecodeKernel::kMmaSync);
      const double bytes = decode_bytes(shape, tokens);
      std::printf("%-16s %6lld %7.2fus %5.1f%% %7.2fus %5.1f%% %7.2fus %5.1f%% %7.2fus %5.1f%% %7.2fus %5.1f%%",
                  shape.name, (long long)tokens, ldg_ms * 1e3, percent(weight_bytes, ldg_ms), bulk4_ms * 1e3,
                  percent(weight_bytes, bulk4_ms), bulk8_ms * 1e3, percent(weight_bytes, bulk8_ms), gemm_ms * 1e3,
                  percent(bytes, gemm_ms), deferred_ms * 1e3, percent(bytes, deferred_ms));
      for (SmallMVariant variant : runs) {
        gemm.set_small_m_variant(variant);
        const double ms = fathom::bench::graph_ms_per_launch([&](int run, cudaStream_t stream) {
          gemm.run(input.view, nullptr, weight.copy(run), out.data(), ws, stream, Fp8GemmPath::kSmallM);
        });
        std::printf(" %7.2fus %5.1f%%", ms * 1e3, percent(bytes, ms));
      }
      // The gemv variants with their partials left to the consumer (no reduce launch), as the model could run them.
      for (SmallMVariant variant : {SmallMVariant::kW4D2, SmallMVariant::kW4D4, SmallMVariant::kW8D2,
                                    SmallMVariant::kW8D4, SmallMVariant::kW4D2P2, SmallMVariant::kW4D2P4}) {
        gemm.set_small_m_variant(variant);
        const double ms = fathom::bench::graph_ms_per_launch([&](int run, cudaStream_t stream) {
          gemm.run_small_m_deferred(input.view, weight.copy(run), out.data(), ws, stream);
        });
        std::printf(" %s:%.2fus:%.1f%%", small_m_variant_info(variant).name, ms * 1e3, percent(bytes, ms));
      }
      std::printf("\n");
      gemm.set_small_m_variant(kSmallMDefaultVariant);
      gemm.set_decode_kernel(DecodeKernel::kAuto);
    }
  }
}

// The decode gemv's access pattern without its arithmetic (read_floor_gemv_pattern_kernel): the checkpoint's
// row-major layout against a tile-major one where each warp's K range is contiguous, at the split count the GEMM
// uses and kDepth 2 / 4 K blocks in flight; beside the contiguous ldg_x8 floor and the default GEMM at 1 token.
void bench_read_pattern(Fp8Gemm& gemm, double copy_gbps, size_t rotate_bytes, int num_sms) {
  using fathom::bench::WeightLayout;
  std::printf("\n## decode read patterns (graph us per kernel, cold L2; %% of copy bandwidth on the weight bytes)\n");
  std::printf("%-16s %6s %14s %14s %14s %14s %14s %14s\n", "weight", "splits", "ldg_x8", "rowmajor_d2",
              "rowmajor_d4", "tilemajor_d2", "tilemajor_d4", "gemm_1tok");
  DeviceBuffer<uint32_t> sink(1);
  for (const WeightShape& shape : kShapes) {
    if (!shape_wanted(shape)) continue;
    RotatingWeight weight(gemm, shape, rotate_bytes);
    const Fp8GemmWorkspace ws = weight.workspace();
    const double weight_bytes = static_cast<double>(weight.weight_bytes);
    const int k_blocks = static_cast<int>(ceil_div(shape.cols, 128));
    const int splits = gemm.small_m_splits(shape.rows, shape.cols);
    const int per_split = static_cast<int>(ceil_div(k_blocks, splits));
    const int used_splits = static_cast<int>(ceil_div(k_blocks, per_split));
    const int warps = std::min(used_splits, 16);
    auto percent = [&](double ms) { return 100.0 * weight_bytes / (ms * 1e-3) / 1e9 / copy_gbps; };
    auto pattern_ms = [&](auto kernel) {
      return fathom::bench::graph_ms_per_launch([&](int run, cudaStream_t stream) {
        fathom::kernels::cuda::launch_programmatic(kernel, dim3(static_cast<unsigned>(shape.rows / 16)),
                                                   dim3(warps * 32), 0, stream, weight.copy(run).values, shape.cols,
                                                   k_blocks, per_split, used_splits, sink.data());
      });
    };
    const double ldg_ms = fathom::bench::graph_ms_per_launch([&](int run, cudaStream_t stream) {
      fathom::kernels::cuda::launch_programmatic(fathom::bench::read_floor_ldg_kernel<8>, dim3(num_sms * 4), dim3(256),
                                                 0, stream, reinterpret_cast<const uint4*>(weight.copy(run).values),
                                                 weight.weight_bytes / 16, sink.data());
    });
    const double row2 = pattern_ms(fathom::bench::read_floor_gemv_pattern_kernel<WeightLayout::kRowMajor, 2>);
    const double row4 = pattern_ms(fathom::bench::read_floor_gemv_pattern_kernel<WeightLayout::kRowMajor, 4>);
    const double tile2 = pattern_ms(fathom::bench::read_floor_gemv_pattern_kernel<WeightLayout::kTileMajor, 2>);
    const double tile4 = pattern_ms(fathom::bench::read_floor_gemv_pattern_kernel<WeightLayout::kTileMajor, 4>);
    RandomActivations input(1, shape.cols, 3);
    DeviceBuffer<__nv_bfloat16> out(static_cast<size_t>(shape.rows));
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
    const double gemm_ms = fathom::bench::graph_ms_per_launch([&](int run, cudaStream_t stream) {
      gemm.run(input.view, nullptr, weight.copy(run), out.data(), ws, stream, Fp8GemmPath::kSmallM);
    });
    std::printf("%-16s %6d", shape.name, used_splits);
    for (double ms : {ldg_ms, row2, row4, tile2, tile4, gemm_ms}) std::printf(" %6.2fus %5.1f%%", ms * 1e3, percent(ms));
    std::printf("\n");
  }
}

// Every shape at 1..64 tokens through the default small-M dispatch, timed alone and inside a graph.
void bench_decode(Fp8Gemm& gemm, double copy_gbps, size_t rotate_bytes) {
  std::printf("\n## decode (small-M path, default kernels: gemv up to 8 tokens, wgmma above): bytes moved / time vs copy bandwidth\n");
  std::printf("(single = one launch timed alone; graph = per GEMM inside a captured chain of 20, as decode runs)\n");
  std::printf("%-16s %6s %6s %6s %7s %10s %10s %10s %8s\n", "weight", "rows", "cols", "tokens", "splits", "single_us",
              "graph_us", "GB/s", "of_copy");
  for (const WeightShape& shape : kShapes) {
    if (!shape_wanted(shape)) continue;
    RotatingWeight weight(gemm, shape, rotate_bytes);
    const Fp8GemmWorkspace ws = weight.workspace();
    for (int64_t tokens : {1, 2, 4, 8, 9, 16, 32, 64}) {
      RandomActivations input(tokens, shape.cols, 3);
      DeviceBuffer<__nv_bfloat16> out(static_cast<size_t>(tokens * shape.rows));
      FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
      auto one_gemm = [&](int run, cudaStream_t stream) {
        const DeviceFp8Weight w = weight.copy(run);
        gemm.run(input.view, nullptr, w, out.data(), ws, stream,
                 Fp8GemmPath::kSmallM);
      };
      const double ms_single = fathom::bench::median_ms([&](int run) { one_gemm(run, nullptr); });
      const double ms = fathom::bench::graph_ms_per_launch(one_gemm);
      const double gbps = decode_bytes(shape, tokens) / (ms * 1e-3) / 1e9;
      std::printf("%-16s %6lld %6lld %6lld %7d %10.2f %10.2f %10.0f %7.1f%%\n", shape.name, (long long)shape.rows,
                  (long long)shape.cols, (long long)tokens,
                  tokens >= kWgmmaDecodeMinTokens ? gemm.wgmma_decode_splits(shape.rows, shape.cols)
                                                  : gemm.small_m_splits(shape.rows, shape.cols),
                  ms_single * 1e3,
                  ms * 1e3, gbps, 100.0 * gbps / copy_gbps);
    }
  }

}

// cuBLASLt's block-scaled FP8 at prefill sizes, and where it declines small batches.
void bench_prefill(Fp8Gemm& gemm) {
  std::printf("\n## prefill (cuBLASLt block-scaled FP8): TFLOP/s\n");
  std::printf("%-16s %6s %6s %6s %10s %9s\n", "weight", "rows", "cols", "tokens", "time_us", "TFLOP/s");
  for (const WeightShape& shape : kShapes) {
    if (!shape_wanted(shape)) continue;
    const size_t weight_bytes = static_cast<size_t>(shape.rows * shape.cols);
    DeviceBuffer<uint8_t> weights(weight_bytes);
    fill_random_fp8<<<1024, 256>>>(weights.data(), weights.size(), 9);
    DeviceBuffer<float> w_scales(static_cast<size_t>(ceil_div(shape.rows, 128) * ceil_div(shape.cols, 128)));
    fill_value<<<static_cast<unsigned>(ceil_div(w_scales.size(), 256)), 256>>>(w_scales.data(), w_scales.size(), 1e-3f);
    for (int64_t tokens : {1024, 4096}) {
      DeviceBuffer<uint8_t> x(static_cast<size_t>(tokens * shape.cols));
      fill_random_fp8<<<1024, 256>>>(x.data(), x.size(), 5);
      DeviceBuffer<float> x_scales(static_cast<size_t>(tokens * ceil_div(shape.cols, 128)));
      fill_value<<<static_cast<unsigned>(ceil_div(x_scales.size(), 256)), 256>>>(x_scales.data(), x_scales.size(), 1e-2f);
      DeviceBuffer<__nv_bfloat16> out(static_cast<size_t>(tokens * shape.rows));
      FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
      if (!gemm.cublaslt().supports(tokens, shape.rows, shape.cols, CUDA_R_16BF)) {
        std::printf("%-16s %6lld %6lld %6lld   cuBLASLt: no algorithm\n", shape.name, (long long)shape.rows,
                    (long long)shape.cols, (long long)tokens);
        continue;
      }
      const double ms = fathom::bench::median_ms([&](int) {
        gemm.cublaslt().run(x.data(), x_scales.data(), tokens, weights.data(), w_scales.data(), shape.rows, shape.cols,
                            out.data(), CUDA_R_16BF, nullptr);
      }, 3, 20);
      const double tflops = 2.0 * tokens * shape.rows * shape.cols / (ms * 1e-3) / 1e12;
      std::printf("%-16s %6lld %6lld %6lld %10.1f %9.1f\n", shape.name, (long long)shape.rows, (long long)shape.cols,
                  (long long)tokens, ms * 1e3, tflops);
    }
  }
  std::printf("\ncuBLASLt support for small batches (the reason decode needs its own kernel):\n");
  for (int64_t tokens : {1, 8, 16, 64, 128}) {
    std::printf("  tokens %3lld, 576x7168: %s\n", (long long)tokens,
                gemm.cublaslt().supports(tokens, 576, 7168, CUDA_R_16BF) ? "supported" : "NOT supported");
  }
}

}  // namespace

// Usage: bench_fp8_gemm [section ...] with sections variants, wgmma, floor, pattern, decode, prefill (default: all).
int main(int argc, char** argv) {
  auto wanted = [&](const char* section) {
    if (argc < 2) return true;
    for (int i = 1; i < argc; ++i) {
      if (std::string(argv[i]) == section) return true;
    }
    return false;
  };
  cudaDeviceProp prop{};
  FATHOM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double copy_gbps = fathom::bench::copy_bandwidth_gbps();
  std::printf("device %s, %d SMs, L2 %d MB; device-to-device copy %.0f GB/s (read+write)\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, copy_gbps);
  Fp8Gemm gemm(prop.multiProcessorCount);
  constexpr size_t kRotateBytes = size_t{512} << 20;  // weight copies cycled so no run hits L2
  if (wanted("variants")) bench_small_m_variants(gemm, copy_gbps, kRotateBytes);
  if (wanted("wgmma")) bench_wgmma_decode(gemm, copy_gbps, kRotateBytes);
  if (wanted("floor")) bench_read_floor(gemm, copy_gbps, kRotateBytes, prop.multiProcessorCount);
  if (wanted("pattern")) bench_read_pattern(gemm, copy_gbps, kRotateBytes, prop.multiProcessorCount);
  if (wanted("decode")) bench_decode(gemm, copy_gbps, kRotateBytes);
  if (wanted("prefill")) bench_prefill(gemm);
  return 0;
}
