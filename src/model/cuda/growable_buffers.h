#pragma once
// Buffers that grow to what a forward needs: device activations (GrowableBuffer) and page-locked host memory for the
// results (PinnedHostBuffer). Used by CudaModelImpl and its ResultTransfer.
#include <cuda_runtime.h>

#include <cstddef>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "model/cuda/device_weights.h"

namespace fathom::model::cuda {

// A device buffer that grows (never shrinks) to what a forward needs; growth synchronizes the stream first and
// drops the contents. Once CUDA graphs hold its address it is frozen: growing it then is a bug (the graphs would keep
// the freed pointer), reported as an error instead of a corrupted replay.
template <typename T>
struct GrowableBuffer {
  kc::DeviceBuffer<T> buffer;
  bool frozen = false;
  T* ensure(size_t count, cudaStream_t stream) {
    if (buffer.size() < count) {
      FATHOM_CHECK(!frozen, "CUDA backend: a buffer captured by CUDA graphs needs " << count << " elements, has "
                                                                                    << buffer.size()
                                                                                    << " (warm-up sizing missed it)");
      FATHOM_CUDA_CHECK(cudaStreamSynchronize(stream));
      const size_t grown = count + count / 4;
      buffer = kc::DeviceBuffer<T>();  // the old allocation goes first: the peak is the new size, not both
      try {
        buffer = kc::DeviceBuffer<T>(grown);
      } catch (const Error& e) {
        FATHOM_FAIL("CUDA backend: growing an activation buffer to " << grown * sizeof(T) / (1 << 20)
                                                                      << " MiB for this forward failed (fewer tokens "
                                                                         "per forward need less): "
                                                                      << e.what());
      }
    }
    return buffer.data();
  }
};

// Page-locked host memory that grows (never shrinks): results come back through it (faster than pageable copies).
template <typename T>
class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  ~PinnedHostBuffer() { if (data_) cudaFreeHost(data_); }
  T* ensure(size_t count) {
    if (count > count_) {
      if (data_) FATHOM_CUDA_CHECK(cudaFreeHost(data_));
      data_ = nullptr;
      count_ = 0;  // a failed allocation below leaves an empty buffer, never a stale size over a null pointer
      FATHOM_CUDA_CHECK(cudaMallocHost(&data_, count * sizeof(T)));
      count_ = count;
    }
    return data_;
  }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

}  // namespace fathom::model::cuda
