#include "kernels/cuda/norm/rms_norm.h"

#include <cuda_fp8.h>

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8_gemm/e4m3_quant.cuh"
#include "kernels/cuda/fp8_gemm/fp8_types.h"
#include "kernels/cuda/fp8_gemm/split_k_sum.cuh"
#include "kernels/cuda/norm/bf16x3_split.cuh"
#include "kernels/cuda/norm/bf16x8.cuh"
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda {
namespace {

// (vectors per thread, block size cap): dim <= 512*4*8 = 16384 with the first, <= 256*16*8 = 32768 with the second.
constexpr int kSmallVectors = 4, kSmallMaxThreads = 512;
constexpr int kLargeVectors = 16, kLargeMaxThreads = 256;

// A 128-column scale group is 16 consecutive 8-wide vectors; with thread t owning vectors t, t + blockDim, ... and
// blockDim a multiple of 32, those are 16 consecutive lanes of one warp, so a 16-lane xor shuffle gives its amax.
constexpr int kVectorsPerGroup = static_cast<int>(kFp8ScaleBlock) / kBf16PerVector;
constexpr int kQuantizeThreads = 256;

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

__device__ __forceinline__ void store_bf16x8_bits(__nv_bfloat16* dst, int count, bool aligned, const uint4& bits) {
  if (aligned && count == 8) {
    *reinterpret_cast<uint4*>(dst) = bits;
    return;
  }
  const uint32_t words[4] = {bits.x, bits.y, bits.z, bits.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (i < count) dst[i] = __ushort_as_bfloat16(static_cast<unsigned short>(words[i / 2] >> (16 * (i % 2))));
  }
}

// Up to 8 fp32 values; two 16-byte stores when `aligned` (16-byte aligned and count == 8).
__device__ __forceinline__ void store_f32x8_partial(float* dst, int count, bool aligned, const float (&in)[8]) {
  if (aligned && count == 8) {
    reinterpret_cast<float4*>(dst)[0] = make_float4(in[0], in[1], in[2], in[3]);
    reinterpret_cast<float4*>(dst)[1] = make_float4(in[4], in[5], in[6], in[7]);
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (i < count) dst[i] = in[i];
  }
}

// y split into its three exact bf16 planes (bf16x3_split.cuh), each plane's 8 values stored at plane_row[p * dim].
__device__ __forceinline__ void store_bf16x3_planes(__nv_bfloat16* plane_row, int64_t dim, int count, bool aligned,
                                                    const float (&y)[8]) {
  uint32_t words[kBf16SplitPlanes][4] = {};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const Bf16x3 split = split_bf16x3(y[i]);
    const unsigned short bits[kBf16SplitPlanes] = {__bfloat16_as_ushort(split.hi), __bfloat16_as_ushort(split.mid),
                                                   __bfloat16_as_ushort(split.lo)};
#pragma unroll
    for (int p = 0; p < kBf16SplitPlanes; ++p) words[p][i / 2] |= static_cast<uint32_t>(bits[p]) << (16 * (i % 2));
  }
#pragma unroll
  for (int p = 0; p < kBf16SplitPlanes; ++p) {
    store_bf16x8_bits(plane_row + p * dim, count, aligned, make_uint4(words[p][0], words[p][1], words[p][2], words[p][3]));
  }
}

// One block per row; thread t owns the 8-column vectors t, t + blockDim, ... (at most kVectors), kept in registers.
// kAddResidual: residual = bf16(residual + x) is stored, then normalised.
// kFp8: the bf16 output is also quantized per 128 columns (requires aligned and dim % 128 == 0).
// x_partials (kAddResidual only; non-empty): x is the split-K GEMM output still in fp32 partials [splits, rows, dim],
// summed here as the GEMM's reduce would (x itself is not read).
// Every global load (row, residual, weight) is issued before the first store and the barrier, so a row costs one
// memory round trip before the reduction and none after it.
template <int kVectors, int kMaxThreads, bool kAddResidual, bool kFp8>
__global__ void __launch_bounds__(kMaxThreads)
    rms_norm_kernel(const __nv_bfloat16* x, int64_t x_row_stride,              // [rows, dim]
                    __nv_bfloat16* __restrict__ residual,                       // [rows, dim] (kAddResidual)
                    int64_t dim, const __nv_bfloat16* __restrict__ weight,      // [dim]
                    float eps, bool aligned,
                    __nv_bfloat16* out, int64_t out_row_stride,                 // [rows, dim]
                    float* __restrict__ out_f32, bool f32_aligned,              // [rows, dim] or null
                    __nv_bfloat16* __restrict__ out_planes, bool planes_aligned,  // [rows, 3, dim] or null
                    uint8_t* __restrict__ fp8_values,                           // [rows, dim] e4m3 (kFp8)
                    float* __restrict__ fp8_scales,                             // [rows, dim / 128] (kFp8)
                    SplitKPartials x_partials, bool partials_aligned) {
  __shared__ float warp_partials[32];
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* x_row = x ? x + row * x_row_stride : nullptr;  // null when x_partials hold x
  __nv_bfloat16* residual_row = kAddResidual ? residual + row * dim : nullptr;

  // Columns fit in 32 bits (dim <= 32768); recomputing them per loop is cheaper than holding them in registers.
  const int columns = static_cast<int>(dim);
  const int thread = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  auto column_of = [&](int j) { return (thread + j * threads) * kBf16PerVector; };
  auto count_of = [&](int column) { return column < columns ? min(kBf16PerVector, columns - column) : 0; };

  uint4 row_bits[kVectors];     // bf16 input rows (the updated residual when kAddResidual)
  uint4 weight_bits[kVectors];  // bf16 weights of the same columns
  // Launched programmatically: the (read-only) weights are loaded before waiting for the kernel that wrote the rows.
#pragma unroll
  for (int j = 0; j < kVectors; ++j) {
    const int column = column_of(j), count = count_of(column);
    weight_bits[j] = count > 0 ? load_bf16x8_bits(weight + column, count, aligned) : make_uint4(0u, 0u, 0u, 0u);
  }
  begin_dependent_kernel();
#pragma unroll
  for (int j = 0; j < kVectors; ++j) {
    const int column = column_of(j), count = count_of(column);
    row_bits[j] = make_uint4(0u, 0u, 0u, 0u);
    if (count > 0) {
      if (kAddResidual && !x_partials.empty()) {
        row_bits[j] = split_k_sum_bf16x8_bits(x_partials, row * dim + column, count, partials_aligned);
      } else {
        row_bits[j] = load_bf16x8_bits(x_row + column, count, aligned);
      }
      if constexpr (kAddResidual) {
        float sum[8], res[8];
        unpack_bf16x8(row_bits[j], sum);
        unpack_bf16x8(load_bf16x8_bits(residual_row + column, count, aligned), res);
#pragma unroll
        for (int i = 0; i < 8; ++i) sum[i] += res[i];
        row_bits[j] = pack_bf16x8(sum);
      }
    }
  }

  float sum_squares = 0.0f;
#pragma unroll
  for (int j = 0; j < kVectors; ++j) {
    if constexpr (kAddResidual) {
      const int column = column_of(j), count = count_of(column);
      if (count > 0) store_bf16x8_bits(residual_row + column, count, aligned, row_bits[j]);
    }
    float values[8];
    unpack_bf16x8(row_bits[j], values);
#pragma unroll
    for (int i = 0; i < 8; ++i) sum_squares = fmaf(values[i], values[i], sum_squares);
  }
  const float total = block_sum(sum_squares, warp_partials);
  const float inv_rms = 1.0f / sqrtf(total / static_cast<float>(dim) + eps);

  __nv_bfloat16* out_row = out + row * out_row_stride;
  float* out_f32_row = out_f32 ? out_f32 + row * dim : nullptr;
  __nv_bfloat16* out_planes_row = out_planes ? out_planes + row * kBf16SplitPlanes * dim : nullptr;
  uint8_t* fp8_values_row = kFp8 ? fp8_values + row * dim : nullptr;
  float* fp8_scales_row = kFp8 ? fp8_scales + row * (dim / kFp8ScaleBlock) : nullptr;
#pragma unroll
  for (int j = 0; j < kVectors; ++j) {
    const int column = column_of(j), count = count_of(column);
    float values[8], g[8], y[8];
    unpack_bf16x8(row_bits[j], values);
    unpack_bf16x8(weight_bits[j], g);
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = g[i] * (values[i] * inv_rms);
    if (count > 0) {
      store_bf16x8_partial(out_row + column, count, aligned, y);
      if (out_f32) store_f32x8_partial(out_f32_row + column, count, f32_aligned, y);
      if (out_planes) store_bf16x3_planes(out_planes_row + column, dim, count, planes_aligned, y);
    }
    if constexpr (kFp8) {
      // The quantizer reads the bf16 tensor, so the group's amax and values come from the rounded y.
      float rounded[8];
      unpack_bf16x8(pack_bf16x8(y), rounded);
      float amax = 0.0f;
      if (count > 0) {
#pragma unroll
        for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(rounded[i]));
      }
      // Outside the count branch: every lane of the warp takes part in the shuffles.
#pragma unroll
      for (int offset = kVectorsPerGroup / 2; offset > 0; offset >>= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
      }
      if (count > 0) {
        const float scale = e4m3_group_scale(amax);
        uint32_t low = 0u, high = 0u;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          low |= e4m3_code(rounded[i], scale) << (8 * i);
          high |= e4m3_code(rounded[4 + i], scale) << (8 * i);
        }
        *reinterpret_cast<uint2*>(fp8_values_row + column) = make_uint2(low, high);
        if (column % kFp8ScaleBlock == 0) fp8_scales_row[column / kFp8ScaleBlock] = scale;
      }
    }
  }
}

// Quantization of bf16 rows already written by the norm, for the shapes the fused path does not take (dim not a
// multiple of 128, unaligned rows): one warp per (row, 128-column group), lane l reading columns l, l + 32, l + 64,
// l + 96 of the group (coalesced 2-byte loads with no alignment requirement); same arithmetic as the fused path.
__global__ void quantize_rows_kernel(const __nv_bfloat16* __restrict__ y, int64_t y_row_stride,  // [rows, dim]
                                     int64_t rows, int64_t dim,
                                     uint8_t* __restrict__ values,                                // [rows, dim]
                                     float* __restrict__ scales) {                                // [rows, groups]
  begin_dependent_kernel();  // launched programmatically (programmatic_launch.cuh)
  constexpr int kPerLane = static_cast<int>(kFp8ScaleBlock) / 32;
  const int64_t groups = (dim + kFp8ScaleBlock - 1) / kFp8ScaleBlock;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= rows * groups) return;  // whole warps: the block size is a multiple of 32
  const int64_t row = warp / groups, first_column = warp % groups * kFp8ScaleBlock + lane;
  float v[kPerLane];
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int64_t column = first_column + 32 * k;
    v[k] = column < dim ? __bfloat162float(y[row * y_row_stride + column]) : 0.0f;
    amax = fmaxf(amax, fabsf(v[k]));
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  const float scale = e4m3_group_scale(amax);
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int64_t column = first_column + 32 * k;
    if (column < dim) values[row * dim + column] = static_cast<uint8_t>(e4m3_code(v[k], scale));
  }
  if (lane == 0) scales[warp] = scale;  // warp == row * groups + group
}

// Host-side arguments of one norm launch (the kernel takes them as separate parameters for __restrict__).
struct NormLaunch {
  const __nv_bfloat16* x = nullptr;  // [rows, dim] at x_row_stride
  int64_t x_row_stride = 0;
  __nv_bfloat16* residual = nullptr;  // [rows, dim] or null
  int64_t rows = 0, dim = 0;
  const __nv_bfloat16* weight = nullptr;  // [dim]
  float eps = 0.0f;
  bool aligned = false;  // x, residual, out and weight rows in 16-byte vectors
  __nv_bfloat16* out = nullptr;  // [rows, dim] at out_row_stride
  int64_t out_row_stride = 0;
  float* out_f32 = nullptr;  // [rows, dim] or null
  bool f32_aligned = false;
  __nv_bfloat16* out_planes = nullptr;  // [rows, 3, dim] or null
  bool planes_aligned = false;
  uint8_t* fp8_values = nullptr;  // [rows, dim] (fused quantization only)
  float* fp8_scales = nullptr;    // [rows, dim / 128]
  SplitKPartials x_partials;      // non-empty: x is still in split-K partials [splits, rows, dim] (x unused)
};

template <int kVectors, int kMaxThreads, bool kAddResidual, bool kFp8>
void launch_norm_kernel(const NormLaunch& p, cudaStream_t stream) {
  const int64_t vectors = (p.dim + kBf16PerVector - 1) / kBf16PerVector;
  const int64_t threads = (vectors + kVectors - 1) / kVectors;
  const int block = static_cast<int>((threads + 31) / 32 * 32);  // a multiple of 32: the fp8 groups rely on it
  launch_programmatic(rms_norm_kernel<kVectors, kMaxThreads, kAddResidual, kFp8>, dim3(static_cast<unsigned>(p.rows)),
                      dim3(block), 0, stream, p.x, p.x_row_stride, p.residual, p.dim, p.weight, p.eps, p.aligned, p.out,
                      p.out_row_stride, p.out_f32, p.f32_aligned, p.out_planes, p.planes_aligned, p.fp8_values, p.fp8_scales, p.x_partials,
                      p.aligned && !p.x_partials.empty() && split_k_partials_aligned(p.x_partials));
}

template <bool kAddResidual, bool kFp8>
void launch_sized(const NormLaunch& p, cudaStream_t stream) {
  const int64_t vectors = (p.dim + kBf16PerVector - 1) / kBf16PerVector;
  if (vectors <= int64_t{kSmallMaxThreads} * kSmallVectors) {
    launch_norm_kernel<kSmallVectors, kSmallMaxThreads, kAddResidual, kFp8>(p, stream);
  } else {
    FATHOM_CHECK(vectors <= int64_t{kLargeMaxThreads} * kLargeVectors,
                 "rms_norm: dim " << p.dim << " above " << kLargeMaxThreads * kLargeVectors * kBf16PerVector);
    launch_norm_kernel<kLargeVectors, kLargeMaxThreads, kAddResidual, kFp8>(p, stream);
  }
}

void launch_quantize_rows(const __nv_bfloat16* y, int64_t y_row_stride, int64_t rows, int64_t dim,
                          const Fp8RowsOut& fp8, cudaStream_t stream) {
  const int64_t warps = rows * ((dim + kFp8ScaleBlock - 1) / kFp8ScaleBlock);
  const int64_t blocks = (warps * 32 + kQuantizeThreads - 1) / kQuantizeThreads;
  FATHOM_CHECK(blocks <= int64_t{0x7fffffff}, "rms_norm: fp8 quantization of " << rows << " x " << dim << " too large");
  launch_programmatic(quantize_rows_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kQuantizeThreads), 0, stream, y,
                      y_row_stride, rows, dim, fp8.values, fp8.scales);
}

inline bool is_aligned_8(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 7u) == 0; }

template <bool kAddResidual>
void launch_rms_norm(NormLaunch p, const Fp8RowsOut* fp8, cudaStream_t stream) {
  p.f32_aligned = p.aligned && p.out_f32 && is_aligned_16(p.out_f32);
  p.planes_aligned = p.aligned && p.out_planes && is_aligned_16(p.out_planes);
  if (!fp8) {
    launch_sized<kAddResidual, false>(p, stream);
    return;
  }
  FATHOM_CHECK(fp8->values && fp8->scales, "rms_norm: fp8 output without values or scales (rows " << p.rows
                                               << ", dim " << p.dim << ")");
  // uint2 stores of 8 e4m3 values; with dim % 128 == 0 every row starts 128-byte aligned relative to values.
  if (p.aligned && p.dim % kFp8ScaleBlock == 0 && is_aligned_8(fp8->values)) {
    p.fp8_values = fp8->values;
    p.fp8_scales = fp8->scales;
    launch_sized<kAddResidual, true>(p, stream);
  } else {
    launch_sized<kAddResidual, false>(p, stream);
    launch_quantize_rows(p.out, p.out_row_stride, p.rows, p.dim, *fp8, stream);
  }
}

void validate(int64_t rows, int64_t dim) {
  FATHOM_CHECK(rows >= 0 && rows < (int64_t{1} << 31), "rms_norm: rows " << rows);
  FATHOM_CHECK(dim > 0, "rms_norm: dim " << dim);
}

}  // namespace

void rms_norm_bf16(const __nv_bfloat16* x, int64_t x_row_stride, int64_t rows, int64_t dim,
                   const __nv_bfloat16* weight, float eps, __nv_bfloat16* out, int64_t out_row_stride,
                   cudaStream_t stream) {
  rms_norm_bf16(x, x_row_stride, rows, dim, weight, eps, out, out_row_stride, nullptr, stream);
}

void rms_norm_bf16(const __nv_bfloat16* x, int64_t x_row_stride, int64_t rows, int64_t dim,
                   const __nv_bfloat16* weight, float eps, __nv_bfloat16* out, int64_t out_row_stride,
                   const Fp8RowsOut* fp8, cudaStream_t stream) {
  validate(rows, dim);
  FATHOM_CHECK(x_row_stride >= dim && out_row_stride >= dim,
               "rms_norm: row strides " << x_row_stride << ", " << out_row_stride << " below dim " << dim);
  if (rows == 0) return;
  NormLaunch p;
  p.x = x;
  p.x_row_stride = x_row_stride;
  p.rows = rows;
  p.dim = dim;
  p.weight = weight;
  p.eps = eps;
  p.aligned = dim % kBf16PerVector == 0 && x_row_stride % kBf16PerVector == 0 &&
              out_row_stride % kBf16PerVector == 0 && is_aligned_16(x) && is_aligned_16(out) && is_aligned_16(weight);
  p.out = out;
  p.out_row_stride = out_row_stride;
  launch_rms_norm<false>(p, fp8, stream);
}

void add_rms_norm_bf16(const __nv_bfloat16* x, __nv_bfloat16* residual, int64_t rows, int64_t dim,
                       const __nv_bfloat16* weight, float eps, __nv_bfloat16* out, cudaStream_t stream) {
  add_rms_norm_bf16(x, residual, rows, dim, weight, eps, out, nullptr, nullptr, stream);
}

void add_rms_norm_bf16(const __nv_bfloat16* x, __nv_bfloat16* residual, int64_t rows, int64_t dim,
                       const __nv_bfloat16* weight, float eps, __nv_bfloat16* out, float* out_f32, cudaStream_t stream) {
  add_rms_norm_bf16(x, residual, rows, dim, weight, eps, out, out_f32, nullptr, stream);
}

void add_rms_norm_bf16(const __nv_bfloat16* x, __nv_bfloat16* residual, int64_t rows, int64_t dim,
                       const __nv_bfloat16* weight, float eps, __nv_bfloat16* out, float* out_f32,
                       const Fp8RowsOut* fp8, cudaStream_t stream) {
  add_rms_norm_bf16(x, SplitKPartials{}, residual, rows, dim, weight, eps, out, out_f32, fp8, stream);
}

void add_rms_norm_bf16(const __nv_bfloat16* x, const SplitKPartials& x_partials, __nv_bfloat16* residual, int64_t rows,
                       int64_t dim, const __nv_bfloat16* weight, float eps, __nv_bfloat16* out, float* out_f32,
                       const Fp8RowsOut* fp8, cudaStream_t stream) {
  add_rms_norm_bf16(x, x_partials, residual, rows, dim, weight, eps, out, UnroundedRowsOut{out_f32, nullptr}, fp8, stream);
}

void add_rms_norm_bf16(const __nv_bfloat16* x, const SplitKPartials& x_partials, __nv_bfloat16* residual, int64_t rows,
                       int64_t dim, const __nv_bfloat16* weight, float eps, __nv_bfloat16* out,
                       const UnroundedRowsOut& unrounded, const Fp8RowsOut* fp8, cudaStream_t stream) {
  validate(rows, dim);
  if (rows == 0) return;
  if (!x_partials.empty()) {
    FATHOM_CHECK(x_partials.splits >= 1 && x_partials.split_stride >= rows * dim,
                 "add_rms_norm: " << x_partials.splits << " split-K partials of stride " << x_partials.split_stride
                                  << " for " << rows << " x " << dim << " rows");
    x = nullptr;  // never read: the kernel sums the partials
  }
  NormLaunch p;
  p.x = x;
  p.x_row_stride = dim;
  p.residual = residual;
  p.rows = rows;
  p.dim = dim;
  p.weight = weight;
  p.eps = eps;
  p.aligned = dim % kBf16PerVector == 0 && (x == nullptr || is_aligned_16(x)) && is_aligned_16(residual) &&
              is_aligned_16(out) && is_aligned_16(weight);
  p.out = out;
  p.out_row_stride = dim;
  p.out_f32 = unrounded.f32;
  p.out_planes = unrounded.bf16_planes;
  p.x_partials = x_partials;
  launch_rms_norm<true>(p, fp8, stream);
}

}  // namespace fathom::kernels::cuda
