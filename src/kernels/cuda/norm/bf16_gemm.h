#pragma once
// bf16 GEMM through cuBLASLt for the lm_head (and any bf16 linear): out[M, N] = a[M, K] . w[N, K]^T,
// fp32 accumulation, fp32 or bf16 output. One object per weight shape; it owns its cuBLASLt handle and workspace.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>

#include "kernels/cuda/device_buffer.h"

namespace fathom::kernels::cuda {

enum class Bf16GemmOutput { kFloat32, kBfloat16 };
// Operand type: bf16 (lm_head), or fp32 with pure fp32 compute (no TF32; the MoE router, whose expert choice must
// not flip on rounding).
enum class Bf16GemmInput { kBfloat16, kFloat32 };

class Bf16Gemm {
 public:
  // n: output features (e.g. vocab 129280); k: input features (e.g. hidden 7168). Allocates the workspace (setup).
  Bf16Gemm(int64_t n, int64_t k, Bf16GemmOutput output, size_t workspace_bytes = size_t{32} << 20,
           Bf16GemmInput input = Bf16GemmInput::kBfloat16);
  ~Bf16Gemm();
  Bf16Gemm(const Bf16Gemm&) = delete;
  Bf16Gemm& operator=(const Bf16Gemm&) = delete;

  // Picks and caches the algorithm for m rows (host-only query). Call for each batch size before graph capture;
  // run() prepares on a miss, which is also capture-safe but costs host time.
  void prepare(int64_t m);

  // a:   [m, k] bf16 row-major (device), 16-byte aligned
  // w:   [n, k] bf16 row-major (device), the nn.Linear weight layout
  // out: [m, n] fp32 or bf16 row-major (device)
  void run(const __nv_bfloat16* a, int64_t m, const __nv_bfloat16* w, void* out, cudaStream_t stream);
  // fp32 operands (an object constructed with Bf16GemmInput::kFloat32).
  void run(const float* a, int64_t m, const float* w, void* out, cudaStream_t stream);

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t w_layout = nullptr, a_layout = nullptr, out_layout = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  const Plan& plan_for(int64_t m);
  void run_any(const void* a, int64_t m, const void* w, void* out, cudaStream_t stream);

  int64_t n_, k_;
  Bf16GemmOutput output_;
  Bf16GemmInput input_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer<uint8_t> workspace_;
  std::map<int64_t, Plan> plans_;  // by m
};

}  // namespace fathom::kernels::cuda
