#include "kernels/cuda/norm/rms_norm.h"

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/norm/bf16x8.cuh"

namespace fathom::kernels::cuda {
namespace {

// (vectors per thread, block size cap): dim <= 512*4*8 = 16384 with the first, <= 256*16*8 = 32768 with the second.
constexpr int kSmallVectors = 4, kSmallMaxThreads = 512;
constexpr int kLargeVectors = 16, kLargeMaxThreads = 256;

// Deterministic block sum (fixed shuffle tree, then warp partials in order).
__device__ __forceinline__ float block_sum(float value, float* warp_partials /* shared [32] */) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_partials[warp] = value;
  __syncthreads();
  float total = 0.0f;
  const int warps = (blockDim.x + 31) / 32;
  for (int w = 0; w < warps; ++w) total += warp_partials[w];
  return total;
}

// One block per row; thread t owns the 8-column vectors t, t + blockDim, ... (at most kVectors), kept in registers.
// kAddResidual: residual = bf16(residual + x) is stored, then normalised.
template <int kVectors, int kMaxThreads, bool kAddResidual>
__global__ void __launch_bounds__(kMaxThreads)
    rms_norm_kernel(const __nv_bfloat16* x, int64_t x_row_stride,  // [rows, dim]
                    __nv_bfloat16* __restrict__ residual,                       // [rows, dim] (kAddResidual)
                    int64_t dim, const __nv_bfloat16* __restrict__ weight,      // [dim]
                    float eps, bool aligned,
                    __nv_bfloat16* out, int64_t out_row_stride,                 // [rows, dim]
                    float* __restrict__ out_f32) {                              // [rows, dim] or null

  __shared__ float warp_partials[32];
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* x_row = x + row * x_row_stride;
  const int64_t vectors = (dim + kBf16PerVector - 1) / kBf16PerVector;
  float values[kVectors][8];
  float sum_squares = 0.0f;
#pragma unroll
  for (int j = 0; j < kVectors; ++j) {
    const int64_t v = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    const int64_t column = v * kBf16PerVector;
    const int count = v < vectors ? static_cast<int>(min(int64_t{kBf16PerVector}, dim - column)) : 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) values[j][i] = 0.0f;
    if (count > 0) {
      load_bf16x8_partial(x_row + column, count, aligned, values[j]);
      if constexpr (kAddResidual) {
        float res[8];
        __nv_bfloat16* residual_row = residual + row * dim;
        load_bf16x8_partial(residual_row + column, count, aligned, res);
#pragma unroll
        for (int i = 0; i < 8; ++i) values[j][i] = round_to_bf16(values[j][i] + res[i]);
        store_bf16x8_partial(residual_row + column, count, aligned, values[j]);
      }
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) sum_squares = fmaf(values[j][i], values[j][i], sum_squares);
  }
  const float total = block_sum(sum_squares, warp_partials);
  const float inv_rms = 1.0f / sqrtf(total / static_cast<float>(dim) + eps);
  __nv_bfloat16* out_row = out + row * out_row_stride;
#pragma unroll
  for (int j = 0; j < kVectors; ++j) {
    const int64_t v = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    const int64_t column = v * kBf16PerVector;
    const int count = v < vectors ? static_cast<int>(min(int64_t{kBf16PerVector}, dim - column)) : 0;
    if (count > 0) {
      float g[8], y[8];
      load_bf16x8_partial(weight + column, count, aligned, g);
#pragma unroll
      for (int i = 0; i < 8; ++i) y[i] = g[i] * (values[j][i] * inv_rms);
      store_bf16x8_partial(out_row + column, count, aligned, y);
      if (out_f32) {
        for (int i = 0; i < count; ++i) out_f32[row * dim + column + i] = y[i];
      }
    }
  }
}

template <bool kAddResidual>
void launch_rms_norm(const __nv_bfloat16* x, int64_t x_row_stride, __nv_bfloat16* residual, int64_t rows, int64_t dim,
                     const __nv_bfloat16* weight, float eps, bool aligned, __nv_bfloat16* out, int64_t out_row_stride,
                     float* out_f32, cudaStream_t stream) {
  const int64_t vectors = (dim + kBf16PerVector - 1) / kBf16PerVector;
  auto threads_for = [&](int per_thread) {
    const int64_t threads = (vectors + per_thread - 1) / per_thread;
    return static_cast<int>((threads + 31) / 32 * 32);
  };
  if (vectors <= int64_t{kSmallMaxThreads} * kSmallVectors) {
    rms_norm_kernel<kSmallVectors, kSmallMaxThreads, kAddResidual>
        <<<static_cast<unsigned>(rows), threads_for(kSmallVectors), 0, stream>>>(
            x, x_row_stride, residual, dim, weight, eps, aligned, out, out_row_stride, out_f32);
  } else {
    FATHOM_CHECK(vectors <= int64_t{kLargeMaxThreads} * kLargeVectors,
                 "rms_norm: dim " << dim << " above " << kLargeMaxThreads * kLargeVectors * kBf16PerVector);
    rms_norm_kernel<kLargeVectors, kLargeMaxThreads, kAddResidual>
        <<<static_cast<unsigned>(rows), threads_for(kLargeVectors), 0, stream>>>(
            x, x_row_stride, residual, dim, weight, eps, aligned, out, out_row_stride, out_f32);
  }
  FATHOM_CUDA_CHECK_LAUNCH();
}

void validate(int64_t rows, int64_t dim) {
  FATHOM_CHECK(rows >= 0 && rows < (int64_t{1} << 31), "rms_norm: rows " << rows);
  FATHOM_CHECK(dim > 0, "rms_norm: dim " << dim);
}

}  // namespace

void rms_norm_bf16(const __nv_bfloat16* x, int64_t x_row_stride, int64_t rows, int64_t dim,
                   const __nv_bfloat16* weight, float eps, __nv_bfloat16* out, int64_t out_row_stride,
                   cudaStream_t stream) {
  validate(rows, dim);
  FATHOM_CHECK(x_row_stride >= dim && out_row_stride >= dim,
               "rms_norm: row strides " << x_row_stride << ", " << out_row_stride << " below dim " << dim);
  if (rows == 0) return;
  const bool aligned = dim % kBf16PerVector == 0 && x_row_stride % kBf16PerVector == 0 &&
                       out_row_stride % kBf16PerVector == 0 && is_aligned_16(x) && is_aligned_16(out) &&
                       is_aligned_16(weight);
  launch_rms_norm<false>(x, x_row_stride, nullptr, rows, dim, weight, eps, aligned, out, out_row_stride, nullptr, stream);
}

void add_rms_norm_bf16(const __nv_bfloat16* x, __nv_bfloat16* residual, int64_t rows, int64_t dim,
                       const __nv_bfloat16* weight, float eps, __nv_bfloat16* out, cudaStream_t stream) {
  add_rms_norm_bf16(x, residual, rows, dim, weight, eps, out, nullptr, stream);
}

void add_rms_norm_bf16(const __nv_bfloat16* x, __nv_bfloat16* residual, int64_t rows, int64_t dim,
                       const __nv_bfloat16* weight, float eps, __nv_bfloat16* out, float* out_f32, cudaStream_t stream) {
  validate(rows, dim);
  if (rows == 0) return;
  const bool aligned = dim % kBf16PerVector == 0 && is_aligned_16(x) && is_aligned_16(residual) &&
                       is_aligned_16(out) && is_aligned_16(weight);
  launch_rms_norm<true>(x, dim, residual, rows, dim, weight, eps, aligned, out, dim, out_f32, stream);
}

}  // namespace fathom::kernels::cuda
