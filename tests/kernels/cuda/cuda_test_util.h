#pragma once
// Shared helpers for the CUDA kernel tests: skip without a GPU, random data, errors vs the CPU reference.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/device_buffer.h"

namespace fathom::testing {

inline bool has_cuda_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// CI has no GPU: the CUDA tests compile there and skip at run time.
#define FATHOM_REQUIRE_GPU() \
  if (!::fathom::testing::has_cuda_device()) GTEST_SKIP() << "no CUDA device"

inline double relative_l2_error(const std::vector<float>& actual, const std::vector<float>& expected) {
  double num = 0, den = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (!std::isfinite(actual[i])) return INFINITY;  // poisoned (unwritten) or NaN output
    num += (double(actual[i]) - expected[i]) * (double(actual[i]) - expected[i]);
    den += double(expected[i]) * expected[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

inline std::vector<float> bf16_to_float_vector(const std::vector<__nv_bfloat16>& values) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = __bfloat162float(values[i]);
  return out;
}

inline std::vector<__nv_bfloat16> float_to_bf16_vector(const std::vector<float>& values) {
  std::vector<__nv_bfloat16> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = __float2bfloat16(values[i]);
  return out;
}

// Values rounded to bf16 and back, so CPU references see exactly the GPU's inputs.
inline std::vector<float> round_to_bf16(std::vector<float> values) {
  for (float& v : values) v = __bfloat162float(__float2bfloat16(v));
  return values;
}

inline std::vector<float> random_normal(std::mt19937& rng, size_t count, float stddev = 1.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> values(count);
  for (float& v : values) v = dist(rng);
  return values;
}

// Runs launch(out) into `count` floats of a 0xff-poisoned device buffer followed by a poisoned guard tail, expects
// the tail untouched (`what` names the output) and returns the first `count` floats. Synchronizes the device.
template <class Launch>
std::vector<float> run_with_poisoned_tail(size_t count, Launch launch, const std::string& what) {
  constexpr size_t kGuardFloats = 64;
  kernels::cuda::DeviceBuffer<float> out(count + kGuardFloats);
  out.fill_bytes(0xff);
  launch(out.data());
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> values = out.download();
  size_t tail_written = 0;
  for (size_t i = count; i < values.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &values[i], sizeof(bits));
    tail_written += bits != 0xffffffffu;
  }
  EXPECT_EQ(tail_written, 0u) << "floats written past " << what;
  values.resize(count);
  return values;
}

// Two device buffers hold the same bytes (bit-identity checks between two paths).
template <typename T>
void expect_same_device_bits(const kernels::cuda::DeviceBuffer<T>& got, const kernels::cuda::DeviceBuffer<T>& expected,
                             const char* what) {
  const std::vector<T> a = got.download(), b = expected.download();
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(T)), 0) << what << " differs";
}

}  // namespace fathom::testing
