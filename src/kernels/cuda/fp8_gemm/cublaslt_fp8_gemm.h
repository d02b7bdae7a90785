#pragma once
// The cuBLASLt block-scaled FP8 path (Hopper: BLK128x128_32F weight scales, VEC128_32F activation scales).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "kernels/cuda/fp8_gemm/fp8_types.h"

namespace fathom::kernels::cuda {

class CublasLtFp8Gemm {
 public:
  CublasLtFp8Gemm();
  ~CublasLtFp8Gemm();
  CublasLtFp8Gemm(const CublasLtFp8Gemm&) = delete;
  CublasLtFp8Gemm& operator=(const CublasLtFp8Gemm&) = delete;

  // out [tokens, rows] (bf16 or fp32 by out_type) = x · wᵀ. Scale pointers in the layouts cuBLASLt reads:
  // x_scales [k_blocks, tokens] (block-major), w_scales [ceil(rows/128), k_blocks] (the checkpoint's layout).
  // Throws when cuBLASLt has no algorithm (e.g. a single token).
  void run(const uint8_t* x_values, const float* x_scales, int64_t tokens, const uint8_t* w_values,
           const float* w_scales, int64_t rows, int64_t cols, void* out, cudaDataType_t out_type, cudaStream_t stream);

  // True when cuBLASLt returns an algorithm for this shape (queried, not run).
  bool supports(int64_t tokens, int64_t rows, int64_t cols, cudaDataType_t out_type);

 private:
  struct Plan;
  Plan& plan_for(int64_t tokens, int64_t rows, int64_t cols, cudaDataType_t out_type);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  float* placeholder_scales_ = nullptr;  // [1], stands in for real scale pointers during the heuristic query
  size_t workspace_bytes_ = 32u << 20;
  std::mutex mutex_;  // guards plans_ (plans are built once per shape, before graph capture)
  std::map<std::tuple<int64_t, int64_t, int64_t, int>, std::unique_ptr<Plan>> plans_;
};

}  // namespace fathom::kernels::cuda
