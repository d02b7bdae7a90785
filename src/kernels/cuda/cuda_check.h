#pragma once
// Every CUDA / cuBLAS call is checked; failures throw fathom::Error naming the call and its file:line.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "core/error.h"

#define FATHOM_CUDA_CHECK(call)                                                                       \
  do {                                                                                                \
    cudaError_t fathom_cuda_status_ = (call);                                                         \
    FATHOM_CHECK(fathom_cuda_status_ == cudaSuccess,                                                  \
                 #call << " failed: " << cudaGetErrorName(fathom_cuda_status_) << " ("              \
                       << cudaGetErrorString(fathom_cuda_status_) << ")");                            \
  } while (0)

// After a kernel launch: catches launch-configuration errors without synchronizing (graph-capture safe).
#define FATHOM_CUDA_CHECK_LAUNCH() FATHOM_CUDA_CHECK(cudaGetLastError())

#define FATHOM_CUBLAS_CHECK(call)                                                                     \
  do {                                                                                                \
    cublasStatus_t fathom_cublas_status_ = (call);                                                    \
    FATHOM_CHECK(fathom_cublas_status_ == CUBLAS_STATUS_SUCCESS,                                      \
                 #call << " failed: cublas status " << static_cast<int>(fathom_cublas_status_));      \
  } while (0)
