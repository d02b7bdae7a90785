#include "kernels/cuda/sm90/tma_tensor_map.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include "kernels/cuda/cuda_check.h"

namespace fathom::kernels::cuda {

namespace {

// The driver's encoder, looked up once (immutable afterwards).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult query = cudaDriverEntryPointSymbolNotFound;
    FATHOM_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000, cudaEnableDefault,
                                                       &query));
    FATHOM_CHECK(query == cudaDriverEntryPointSuccess && function != nullptr,
                 "cuTensorMapEncodeTiled is not available from the driver (query result " << static_cast<int>(query)
                                                                                         << ")");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function);
  }();
  return encoder;
}

// A byte tensor of `rank` dimensions (extents innermost first, strides of the outer rank - 1 dimensions) read in
// boxes whose inner extent is one 128-byte swizzle row; elements past the tensor read as zeros.
CUtensorMap encode_bytes_sw128(const void* base, cuuint32_t rank, const cuuint64_t* extents, const cuuint64_t* strides,
                               const cuuint32_t* box) {
  const cuuint32_t element_strides[3] = {1, 1, 1};
  CUtensorMap map{};
  const CUresult status = tensor_map_encoder()(
      &map, CU_TENSOR_MAP_DATA_TYPE_UINT8, rank, const_cast<void*>(base), extents, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FATHOM_CHECK(status == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed with CUresult " << static_cast<int>(status)
                                                                                     << " for a rank-" << rank
                                                                                     << " tensor of " << extents[0]
                                                                                     << "-byte rows at " << base);
  return map;
}

constexpr cuuint32_t kBoxInnerBytes = 128;  // the 128-byte swizzle's row

}  // namespace

CUtensorMap make_tensor_map_2d_bytes_sw128(const void* base, uint64_t inner_extent, uint64_t outer_extent,
                                           uint64_t row_stride_bytes, uint32_t box_outer) {
  FATHOM_CHECK(reinterpret_cast<uintptr_t>(base) % 16 == 0 && row_stride_bytes % 16 == 0 && inner_extent > 0 &&
                   outer_extent > 0 && inner_extent <= row_stride_bytes && box_outer >= 1 && box_outer <= 256,
               "tensor map: base " << base << ", " << outer_extent << " x " << inner_extent << " bytes, row stride "
                                   << row_stride_bytes << ", box rows " << box_outer
                                   << " (base and stride must be 16-byte aligned, box rows 1..256)");
  const cuuint64_t extents[2] = {inner_extent, outer_extent};
  const cuuint64_t strides[1] = {row_stride_bytes};
  const cuuint32_t box[2] = {kBoxInnerBytes, box_outer};
  return encode_bytes_sw128(base, 2, extents, strides, box);
}

CUtensorMap make_tensor_map_3d_bytes_sw128(const void* base, uint64_t inner_extent, uint64_t mid_extent,
                                           uint64_t outer_extent, uint64_t mid_stride_bytes,
                                           uint64_t outer_stride_bytes, uint32_t box_outer) {
  FATHOM_CHECK(reinterpret_cast<uintptr_t>(base) % 16 == 0 && mid_stride_bytes % 16 == 0 &&
                   outer_stride_bytes % 16 == 0 && inner_extent > 0 && mid_extent > 0 && outer_extent > 0 &&
                   inner_extent <= mid_stride_bytes && box_outer >= 1 && box_outer <= 256,
               "tensor map: base " << base << ", " << outer_extent << " x " << mid_extent << " x " << inner_extent
                                   << " bytes, strides " << outer_stride_bytes << " / " << mid_stride_bytes
                                   << ", box rows " << box_outer
                                   << " (base and strides must be 16-byte aligned, box rows 1..256)");
  const cuuint64_t extents[3] = {inner_extent, mid_extent, outer_extent};
  const cuuint64_t strides[2] = {mid_stride_bytes, outer_stride_bytes};
  const cuuint32_t box[3] = {kBoxInnerBytes, 1, box_outer};
  return encode_bytes_sw128(base, 3, extents, strides, box);
}

}  // namespace fathom::kernels::cuda
