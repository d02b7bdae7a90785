#include "kernels/cuda/fp8_gemm/fp8_grouped_gemm.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8_gemm/fp8_types.h"
#include "kernels/cuda/fp8_gemm/sm90/fp8_gemm_small_m.cuh"

namespace fathom::kernels::cuda {

void fp8_grouped_gemm(const Fp8GroupedGemmArgs& args, __nv_bfloat16* out, cudaStream_t stream) {
  FATHOM_CHECK(args.num_experts >= 1 && args.num_experts <= 65535, "fp8_grouped_gemm: " << args.num_experts << " experts");
  FATHOM_CHECK(args.rows > 0 && args.cols > 0 && args.cols % 16 == 0,
               "fp8_grouped_gemm: rows " << args.rows << ", cols " << args.cols << " (cols must be a multiple of 16)");
  FATHOM_CHECK(args.max_rows_per_expert >= 0, "fp8_grouped_gemm: max_rows_per_expert " << args.max_rows_per_expert);
  if (args.max_rows_per_expert == 0) return;
  FATHOM_CHECK(args.x_values && args.x_scales && args.expert_offsets && args.expert_counts && args.w_values &&
                   args.w_scales && out,
               "fp8_grouped_gemm: null pointer argument");
  const int k_blocks = static_cast<int>(ceil_div(args.cols, kFp8ScaleBlock));
  const dim3 grid(static_cast<unsigned>(ceil_div(args.rows, sm90::kSmallMRowsPerWarp * sm90::kSmallMWarpsPerBlock)), 1,
                  static_cast<unsigned>(args.num_experts));
  const dim3 block(sm90::kSmallMWarpsPerBlock * 32);
  auto launch = [&](auto kernel) {
    kernel<<<grid, block, 0, stream>>>(args.x_values, args.x_scales, args.expert_offsets, args.expert_counts,
                                       args.w_values, args.w_scales, args.rows, args.cols, k_blocks, out);
  };
  const int m = args.max_rows_per_expert;
  if (m <= 8) launch(sm90::fp8_gemm_grouped_small_m_kernel<1, __nv_bfloat16>);
  else if (m <= 16) launch(sm90::fp8_gemm_grouped_small_m_kernel<2, __nv_bfloat16>);
  else if (m <= 32) launch(sm90::fp8_gemm_grouped_small_m_kernel<4, __nv_bfloat16>);
  else launch(sm90::fp8_gemm_grouped_small_m_kernel<8, __nv_bfloat16>);
  FATHOM_CUDA_CHECK_LAUNCH();
}

}  // namespace fathom::kernels::cuda
