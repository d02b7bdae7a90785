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

}  // namespace fathom::kernels::cuda
