#include "kernels/cuda/norm/bf16_gemm.h"

namespace fathom::kernels::cuda {

// Row-major out[m, n] = a[m, k] . w[n, k]^T is column-major out^T[n, m] = op_T(w^T[k, n]) . a^T[k, m]:
// cuBLASLt "A" = w viewed as a k x n column-major matrix (ld k, transposed), "B" = a as k x m (ld k), D = n x m (ld n).
Bf16Gemm::Bf16Gemm(int64_t n, int64_t k, Bf16GemmOutput output, size_t workspace_bytes, Bf16GemmInput input)
    : n_(n), k_(k), output_(output), input_(input), workspace_(workspace_bytes) {
  FATHOM_CHECK(n > 0 && k > 0, "bf16 gemm: n " << n << ", k " << k);
  FATHOM_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

Bf16Gemm::~Bf16Gemm() {
  for (auto& [m, plan] : plans_) {
    cublasLtMatrixLayoutDestroy(plan.out_layout);
    cublasLtMatrixLayoutDestroy(plan.a_layout);
    cublasLtMatrixLayoutDestroy(plan.w_layout);
    cublasLtMatmulDescDestroy(plan.desc);
  }
  if (handle_) cublasLtDestroy(handle_);
}

void Bf16Gemm::prepare(int64_t m) { plan_for(m); }

const Bf16Gemm::Plan& Bf16Gemm::plan_for(int64_t m) {
  FATHOM_CHECK(m > 0, "bf16 gemm: m " << m);
  auto found = plans_.find(m);
  if (found != plans_.end()) return found->second;
  Plan plan;
  const cudaDataType_t out_type = output_ == Bf16GemmOutput::kFloat32 ? CUDA_R_32F : CUDA_R_16BF;
  FATHOM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  FATHOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
  FATHOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)));
  const cudaDataType_t in_type = input_ == Bf16GemmInput::kFloat32 ? CUDA_R_32F : CUDA_R_16BF;
  FATHOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.w_layout, in_type, k_, n_, k_));
  FATHOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a_layout, in_type, k_, m, k_));
  FATHOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.out_layout, out_type, n_, m, n_));

  cublasLtMatmulPreference_t preference = nullptr;
  FATHOM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const size_t workspace_bytes = workspace_.bytes();
  FATHOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &workspace_bytes, sizeof(workspace_bytes)));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.w_layout, plan.a_layout,
                                                               plan.out_layout, plan.out_layout, preference, 1, &result,
                                                               &returned);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status != CUBLAS_STATUS_SUCCESS || returned == 0) {
    cublasLtMatrixLayoutDestroy(plan.out_layout);
    cublasLtMatrixLayoutDestroy(plan.a_layout);
    cublasLtMatrixLayoutDestroy(plan.w_layout);
    cublasLtMatmulDescDestroy(plan.desc);
    FATHOM_FAIL("bf16 gemm: cuBLASLt has no algorithm for m " << m << ", n " << n_ << ", k " << k_ << " (status "
                                                             << static_cast<int>(status) << ")");
  }
  plan.algo = result.algo;
  return plans_.emplace(m, plan).first->second;
}

void Bf16Gemm::run(const __nv_bfloat16* a, int64_t m, const __nv_bfloat16* w, void* out, cudaStream_t stream) {
  FATHOM_CHECK(input_ == Bf16GemmInput::kBfloat16, "bf16 gemm: bf16 operands passed to an fp32-input GEMM");
  run_any(a, m, w, out, stream);
}

void Bf16Gemm::run(const float* a, int64_t m, const float* w, void* out, cudaStream_t stream) {
  FATHOM_CHECK(input_ == Bf16GemmInput::kFloat32, "bf16 gemm: fp32 operands passed to a bf16-input GEMM");
  run_any(a, m, w, out, stream);
}

void Bf16Gemm::run_any(const void* a, int64_t m, const void* w, void* out, cudaStream_t stream) {
  const Plan& plan = plan_for(m);
  const float alpha = 1.0f, beta = 0.0f;
  FATHOM_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc, &alpha, w, plan.w_layout, a, plan.a_layout, &beta, out,
                                     plan.out_layout, out, plan.out_layout, &plan.algo, workspace_.data(),
                                     workspace_.bytes(), stream));
}

}  // namespace fathom::kernels::cuda
