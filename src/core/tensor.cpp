#include "core/tensor.h"

#include <cstring>
#include <sstream>

namespace fathom {

Tensor::Tensor(DType dtype, std::vector<int64_t> shape, void* data, std::shared_ptr<void> owner)
    : dtype_(dtype), shape_(std::move(shape)), data_(data), owner_(std::move(owner)) {}

Tensor Tensor::allocate(DType dtype, std::vector<int64_t> shape) {
  int64_t count = 1;
  for (int64_t extent : shape) count *= extent;
  size_t bytes = static_cast<size_t>(count) * dtype_size_bytes(dtype);
  // 64-byte aligned so vector loads of rows never straddle a cache line at the start.
  std::shared_ptr<void> buffer(::operator new[](bytes == 0 ? 1 : bytes, std::align_val_t(64)),
                               [](void* p) { ::operator delete[](p, std::align_val_t(64)); });
  std::memset(buffer.get(), 0, bytes);
  void* raw = buffer.get();
  return Tensor(dtype, std::move(shape), raw, std::move(buffer));
}

int64_t Tensor::numel() const {
  int64_t count = 1;
  for (int64_t extent : shape_) count *= extent;
  return count;
}

std::string Tensor::shape_string() const { return shape_to_string(shape_); }

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

}  // namespace fathom
