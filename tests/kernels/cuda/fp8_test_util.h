#pragma once
// Shared by the FP8 GEMM tests: the device's SM count and a random FP8 weight held on both sides.
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cpu/linear.h"
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

}  // namespace fathom::kernels::cuda
