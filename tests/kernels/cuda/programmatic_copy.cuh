#pragma once
// A byte copy launched programmatically: it waits for the previous kernel, then copies. Tests chain it before a
// kernel that reads some of its inputs before its own wait (a stand-in for the kernels that write them in the model).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::testing {

static __global__ void programmatic_copy_kernel(const uint8_t* __restrict__ from, uint8_t* __restrict__ to,
                                                size_t bytes) {
  kernels::cuda::begin_dependent_kernel();
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < bytes;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    to[i] = from[i];
  }
}

inline void programmatic_copy(const void* from, void* to, size_t bytes, cudaStream_t stream) {
  kernels::cuda::launch_programmatic(programmatic_copy_kernel, dim3(64), dim3(256), 0, stream,
                                     static_cast<const uint8_t*>(from), static_cast<uint8_t*>(to), bytes);
}

}  // namespace fathom::testing
