#pragma once
// A typed, shaped view of host memory: either owned (allocate) or borrowed from a mapping kept alive by `owner`.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace fathom {

class Tensor {
 public:
  Tensor() = default;
  // Borrowed view; `owner` keeps the backing memory (e.g. an mmap) alive.
  Tensor(DType dtype, std::vector<int64_t> shape, void* data, std::shared_ptr<void> owner);
  // Zero-filled owned tensor.
  static Tensor allocate(DType dtype, std::vector<int64_t> shape);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int axis) const { return shape_.at(static_cast<size_t>(axis < 0 ? axis + rank() : axis)); }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size_bytes(dtype_); }
  bool empty() const { return data_ == nullptr; }

  void* raw() const { return data_; }
  template <typename T>
  T* data() const { return static_cast<T*>(data_); }

  // "[576, 7168]"
  std::string shape_string() const;

 private:
  DType dtype_ = DType::F32;
  std::vector<int64_t> shape_;
  void* data_ = nullptr;
  std::shared_ptr<void> owner_;
};

std::string shape_to_string(const std::vector<int64_t>& shape);

}  // namespace fathom
