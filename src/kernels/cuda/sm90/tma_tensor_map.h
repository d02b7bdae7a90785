#pragma once
// TMA tensor maps (CUtensorMap) for row-major byte matrices, encoded through the driver entry point the CUDA
// runtime exposes (no link against libcuda). Host only; a map is a 128-byte value passed to kernels by value.
#include <cuda.h>

#include <cstdint>

namespace fathom::kernels::cuda {

// A [outer_extent][inner_extent] matrix of bytes at `base` (rows row_stride_bytes apart) read in boxes of
// [box_outer][128 bytes] with the 128-byte swizzle (kernels/cuda/sm90/wgmma.cuh's operand layout); box elements
// past the matrix read as zeros. Throws with the reason when the driver rejects the layout (alignment: base and
// row stride multiples of 16 bytes).
CUtensorMap make_tensor_map_2d_bytes_sw128(const void* base, uint64_t inner_extent, uint64_t outer_extent,
                                           uint64_t row_stride_bytes, uint32_t box_outer);

// A [outer_extent][mid_extent][inner_extent] tensor of bytes at `base` (mid rows mid_stride_bytes apart, outer rows
// outer_stride_bytes apart) read in boxes of [box_outer][1][128 bytes] with the 128-byte swizzle: box_outer rows of
// one mid index, e.g. 64 keys of one head of a [keys][heads][dim] tensor. Elements past the tensor read as zeros.
CUtensorMap make_tensor_map_3d_bytes_sw128(const void* base, uint64_t inner_extent, uint64_t mid_extent,
                                           uint64_t outer_extent, uint64_t mid_stride_bytes,
                                           uint64_t outer_stride_bytes, uint32_t box_outer);

}  // namespace fathom::kernels::cuda
