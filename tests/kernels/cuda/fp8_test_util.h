#pragma once
// Shared by the FP8 GEMM tests: the device's SM count, random FP8 weights and quantized activations held on both
// sides, and the CPU w8a8 reference.
#include <cuda_bf16.h>

#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/fp8_gemm/act_quant.h"
#include "kernels/cuda/fp8_gemm/fp8_gemm.h"
#include "test_util.h"

namespace fathom::kernels::cuda {

inline int device_sm_count() {
  cudaDeviceProp prop{};
  FATHOM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  return prop.multiProcessorCount;
}

// A random weight on both sides: CPU WeightMatrix and device copies (checkpoint layout).
struct TestWeight {
  WeightMatrix cpu;
  DeviceBuffer<uint8_t> values;  // [rows, cols] e4m3
  DeviceBuffer<float> scales;    // [ceil(rows/128), ceil(cols/128)]
  DeviceFp8Weight view() const { return {values.data(), scales.data(), cpu.rows, cpu.cols}; }
};

inline TestWeight make_weight(std::mt19937& rng, int64_t rows, int64_t cols) {
  TestWeight w;
  w.cpu = fathom::testing::random_fp8_weight(rng, rows, cols);
  const uint8_t* codes = w.cpu.weight.data<uint8_t>();
  const float* scales = w.cpu.scale_inv.data<float>();
  w.values = DeviceBuffer<uint8_t>(std::vector<uint8_t>(codes, codes + rows * cols));
  w.scales = DeviceBuffer<float>(std::vector<float>(scales, scales + w.cpu.scale_inv.numel()));
  return w;
}

// num_experts random FP8 weights [rows, cols] on the CPU and stacked on the device as grouped GEMMs read them:
// values [E, rows, cols], scales [E, ceil(rows/128), ceil(cols/128)].
struct StackedExperts {
  std::vector<WeightMatrix> cpu;
  DeviceBuffer<uint8_t> values;
  DeviceBuffer<float> scales;
};

inline StackedExperts make_stacked_experts(std::mt19937& rng, int32_t num_experts, int64_t rows, int64_t cols) {
  StackedExperts experts;
  std::vector<uint8_t> values;
  std::vector<float> scales;
  for (int32_t e = 0; e < num_experts; ++e) {
    experts.cpu.push_back(fathom::testing::random_fp8_weight(rng, rows, cols));
    const WeightMatrix& w = experts.cpu.back();
    values.insert(values.end(), w.weight.data<uint8_t>(), w.weight.data<uint8_t>() + rows * cols);
    scales.insert(scales.end(), w.scale_inv.data<float>(), w.scale_inv.data<float>() + w.scale_inv.numel());
  }
  experts.values = DeviceBuffer<uint8_t>(values);
  experts.scales = DeviceBuffer<float>(scales);
  return experts;
}

// Activations: bf16 on the device, quantized there; the CPU sees the same (bf16-rounded) values.
struct TestActivations {
  std::vector<float> host;  // [tokens, cols], bf16-representable
  DeviceBuffer<uint8_t> values;
  DeviceBuffer<float> scales, scales_block_major;
  int64_t tokens, cols;
  DeviceFp8Activations view() const { return {values.data(), scales.data(), tokens, cols}; }
};

inline TestActivations make_activations(std::mt19937& rng, int64_t tokens, int64_t cols) {
  TestActivations a;
  a.tokens = tokens;
  a.cols = cols;
  a.host = fathom::testing::round_to_bf16(fathom::testing::random_normal(rng, static_cast<size_t>(tokens * cols), 2.0f));
  // Uneven magnitudes across 128-blocks exercise the per-block scales.
  for (int64_t i = 0; i < tokens * cols; ++i) a.host[i] *= ((i % cols) / 128) % 3 == 0 ? 10.0f : 0.1f;
  a.host = fathom::testing::round_to_bf16(a.host);
  DeviceBuffer<__nv_bfloat16> x(fathom::testing::float_to_bf16_vector(a.host));
  const int64_t groups = ceil_div(cols, 128);
  a.values = DeviceBuffer<uint8_t>(static_cast<size_t>(tokens * cols));
  a.scales = DeviceBuffer<float>(static_cast<size_t>(tokens * groups));
  a.scales_block_major = DeviceBuffer<float>(static_cast<size_t>(tokens * groups));
  a.values.fill_bytes(0xff);
  a.scales.fill_bytes(0xff);
  a.scales_block_major.fill_bytes(0xff);
  quantize_activations_fp8(x.data(), tokens, cols, a.values.data(), a.scales.data(), a.scales_block_major.data(), nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  return a;
}

// out[tokens, rows] fp32: the CPU's w8a8 linear on the same values.
inline std::vector<float> cpu_w8a8(const TestActivations& a, const TestWeight& w) {
  std::vector<float> out(static_cast<size_t>(a.tokens * w.cpu.rows));
  ThreadPool pool;
  cpu::linear(a.host.data(), a.tokens, w.cpu, NumericMode::kW8A8, out.data(), pool);
  return out;
}

}  // namespace fathom::kernels::cuda
