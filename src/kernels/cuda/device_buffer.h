#pragma once
// Owning device allocation (cudaMalloc) with typed access; allocation happens at setup, never in the forward.
#include <cstddef>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace fathom::kernels::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    if (count_ > 0) FATHOM_CUDA_CHECK(cudaMalloc(&data_, count_ * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() {
    if (data_) cudaFree(data_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept : data_(other.data_), count_(other.count_) {
    other.data_ = nullptr;
    other.count_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      if (data_) cudaFree(data_);
      data_ = other.data_;
      count_ = other.count_;
      other.data_ = nullptr;
      other.count_ = 0;
    }
    return *this;
  }

  T* data() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

  void upload(const std::vector<T>& host) {
    FATHOM_CHECK(host.size() == count_, "DeviceBuffer::upload: " << host.size() << " values into " << count_);
    if (count_) FATHOM_CUDA_CHECK(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  void upload_bytes(const void* host, size_t bytes_count) {
    FATHOM_CHECK(bytes_count <= bytes(), "DeviceBuffer::upload_bytes: " << bytes_count << " bytes into " << bytes());
    if (bytes_count) FATHOM_CUDA_CHECK(cudaMemcpy(data_, host, bytes_count, cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    if (count_) FATHOM_CUDA_CHECK(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }
  // Fills every byte with `byte_value` (tests poison outputs with 0xff: NaN in fp32/bf16/e4m3).
  void fill_bytes(int byte_value) {
    if (count_) FATHOM_CUDA_CHECK(cudaMemset(data_, byte_value, bytes()));
  }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

}  // namespace fathom::kernels::cuda
