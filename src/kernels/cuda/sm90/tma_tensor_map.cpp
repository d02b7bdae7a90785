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

}  // namespace

CUtensorMap make_tensor_map_2d_bytes_sw128(const void* base, uint64_t inner_extent, uint64_t outer_extent,
                                           uint64_t row_stride_bytes, uint32_t box_outer) {
  constexpr uint32_t kBoxInnerBytes = 128;  // the 128-byte swizzle's row
  FATHOM_CHECK(reinterpret_cast<uintptr_t>(base) % 16 == 0 && row_stride_bytes % 16 == 0 && inner_extent > 0 &&
                   outer_extent > 0 && inner_extent <= row_stride_bytes && box_outer >= 1 && box_outer <= 256,
               "tensor map: base " << base << ", " << outer_extent << " x " << inner_extent << " bytes, row stride "
                                   << row_stride_bytes << ", box rows " << box_outer
                                   << " (base and stride must be 16-byte aligned, box rows 1..256)");
  CUtensorMap map{};
  const cuuint64_t extents[2] = {inner_extent, outer_extent};
  const cuuint64_t strides[1] = {row_stride_bytes};
  const cuuint32_t box[2] = {kBoxInnerBytes, box_outer};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult status = tensor_map_encoder()(
      &map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), extents, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FATHOM_CHECK(status == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed with CUresult " << static_cast<int>(status)
                                                                                     << " for " << outer_extent << " x "
                                                                                     << inner_extent << " bytes");
  return map;
}

CUtensorMap make_tensor_map_3d_bytes_sw128(const void* base, uint64_t inner_extent, uint64_t mid_extent,
                                           uint64_t outer_extent, uint64_t mid_stride_bytes,
                                           uint64_t outer_stride_bytes, uint32_t box_outer) {
  constexpr uint32_t kBoxInnerBytes = 128;
  FATHOM_CHECK(reinterpret_cast<uintptr_t>(base) % 16 == 0 && mid_stride_bytes % 16 == 0 &&
                   outer_stride_bytes % 16 == 0 && inner_extent > 0 && mid_extent > 0 && outer_extent > 0 &&
                   inner_extent <= mid_stride_bytes && box_outer >= 1 && box_outer <= 256,
               "tensor map: base " << base << ", " << outer_extent << " x " << mid_extent << " x " << inner_extent
                                   << " bytes, strides " << outer_stride_bytes << " / " << mid_stride_bytes
                                   << ", box rows " << box_outer
                                   << " (base and strides must be 16-byte aligned, box rows 1..256)");
  CUtensorMap map{};
  const cuuint64_t extents[3] = {inner_extent, mid_extent, outer_extent};
  const cuuint64_t strides[2] = {mid_stride_bytes, outer_stride_bytes};
  const cuuint32_t box[3] = {kBoxInnerBytes, 1, box_outer};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult status = tensor_map_encoder()(
      &map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<void*>(base), extents, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FATHOM_CHECK(status == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed with CUresult " << static_cast<int>(status)
                                                                                     << " for " << outer_extent << " x "
                                                                                     << mid_extent << " x "
                                                                                     << inner_extent << " bytes");
  return map;
}

}  // namespace fathom::kernels::cuda
