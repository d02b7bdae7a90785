#include "kernels/cuda/fp8_gemm/cublaslt_fp8_gemm.h"

#include <memory>

#include "kernels/cuda/cuda_check.h"

namespace fathom::kernels::cuda {

struct CublasLtFp8Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool has_algo = false;
  ~Plan() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
  }
};

CublasLtFp8Gemm::CublasLtFp8Gemm() {
  FATHOM_CUBLAS_CHECK(cublasLtCreate(&handle_));
  FATHOM_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
  FATHOM_CUDA_CHECK(cudaMalloc(&placeholder_scales_, sizeof(float)));
}

CublasLtFp8Gemm::~CublasLtFp8Gemm() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (placeholder_scales_) cudaFree(placeholder_scales_);
  if (handle_) cublasLtDestroy(handle_);
}

CublasLtFp8Gemm::Plan& CublasLtFp8Gemm::plan_for(int64_t tokens, int64_t rows, int64_t cols, cudaDataType_t out_type) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto key = std::make_tuple(tokens, rows, cols, static_cast<int>(out_type));
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  auto plan = std::make_unique<Plan>();
  // Column-major view: D[rows, tokens] = op(A)[rows, cols] · B[cols, tokens], with A = the row-major weight
  // ([cols, rows] column-major, transposed) and B = the row-major activations ([cols, tokens] column-major).
  FATHOM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t transpose = CUBLAS_OP_T, no_transpose = CUBLAS_OP_N;
  FATHOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
  FATHOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &no_transpose, sizeof(no_transpose)));
  int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  FATHOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)));
  FATHOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)));
  // The heuristic only offers block-scaled kernels when scale pointers are set; real ones are set per call.
  FATHOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &placeholder_scales_,
                                                     sizeof(placeholder_scales_)));
  FATHOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &placeholder_scales_,
                                                     sizeof(placeholder_scales_)));
  const int8_t fast_accumulation = 0;  // keep fp32 promotion of partial sums
  FATHOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accumulation,
                                                     sizeof(fast_accumulation)));
  FATHOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_8F_E4M3, static_cast<uint64_t>(cols), static_cast<uint64_t>(rows), cols));
  FATHOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_8F_E4M3, static_cast<uint64_t>(cols), static_cast<uint64_t>(tokens), cols));
  FATHOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->d, out_type, static_cast<uint64_t>(rows), static_cast<uint64_t>(tokens), rows));
  cublasLtMatmulPreference_t preference = nullptr;
  FATHOM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  FATHOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &workspace_bytes_, sizeof(workspace_bytes_)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->d, plan->d,
                                                         preference, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  plan->has_algo = status == CUBLAS_STATUS_SUCCESS && found > 0;
  if (plan->has_algo) plan->algo = result.algo;
  auto& stored = plans_[key];
  stored = std::move(plan);
  return *stored;
}

bool CublasLtFp8Gemm::supports(int64_t tokens, int64_t rows, int64_t cols, cudaDataType_t out_type) {
  return plan_for(tokens, rows, cols, out_type).has_algo;
}

void CublasLtFp8Gemm::run(const uint8_t* x_values, const float* x_scales, int64_t tokens, const uint8_t* w_values,
                          const float* w_scales, int64_t rows, int64_t cols, void* out, cudaDataType_t out_type,
                          cudaStream_t stream) {
  Plan& plan = plan_for(tokens, rows, cols, out_type);
  FATHOM_CHECK(plan.has_algo, "cuBLASLt has no block-scaled FP8 algorithm for tokens=" << tokens << " rows=" << rows
                                                                                       << " cols=" << cols);
  FATHOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales, sizeof(w_scales)));
  FATHOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales, sizeof(x_scales)));
  const float alpha = 1.0f, beta = 0.0f;
  FATHOM_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc, &alpha, w_values, plan.a, x_values, plan.b, &beta, out, plan.d,
                                     out, plan.d, &plan.algo, workspace_, workspace_bytes_, stream));
}

}  // namespace fathom::kernels::cuda
