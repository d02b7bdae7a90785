#include "kernels/cuda/fp8_gemm/fp8_grouped_gemm.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8_gemm/fp8_types.h"
#include "kernels/cuda/fp8_gemm/sm90/fp8_gemm_grouped_wgmma.cuh"
#include "kernels/cuda/fp8_gemm/sm90/fp8_gemm_gemv.cuh"
#include "kernels/cuda/fp8_gemm/sm90/fp8_gemm_small_m.cuh"
#include "kernels/cuda/fp8_gemm/sm90/fp8_gemm_tiled.cuh"
#include "kernels/cuda/sm90/tma_tensor_map.h"
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda {

namespace {

// Grid: (weight row blocks, 128-row tiles of the largest expert, experts); max_rows_per_expert must bound every
// count (the kernel traps otherwise rather than leave rows unwritten).
void launch_tiled(const Fp8GroupedGemmArgs& args, int k_blocks, __nv_bfloat16* out, cudaStream_t stream) {
  FATHOM_CHECK(reinterpret_cast<uintptr_t>(args.x_values) % 16 == 0 && reinterpret_cast<uintptr_t>(args.w_values) % 16 == 0,
               "fp8_grouped_gemm: the tiled kernel needs 16-byte aligned activation and weight values");
  const int64_t row_blocks = ceil_div(args.rows, sm90::kTiledRows);
  const int64_t token_tiles = ceil_div(args.max_rows_per_expert, sm90::kTiledTokens);
  FATHOM_CHECK(row_blocks <= INT32_MAX && token_tiles <= 65535,
               "fp8_grouped_gemm: tiled grid of " << row_blocks << " row blocks x " << token_tiles
                                                  << " token tiles is too large (rows " << args.rows
                                                  << ", max_rows_per_expert " << args.max_rows_per_expert << ")");
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(token_tiles),
                  static_cast<unsigned>(args.num_experts));
  auto kernel = sm90::fp8_gemm_grouped_tiled_kernel<__nv_bfloat16>;
  // Above the 48 KB default; a per-function attribute (not a stream operation), so safe under graph capture.
  FATHOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, sm90::kTiledSmemBytes));
  kernel<<<grid, sm90::kTiledThreads, sm90::kTiledSmemBytes, stream>>>(
      args.x_values, args.x_scales, args.expert_offsets, args.expert_counts, args.w_values, args.w_scales, args.rows,
      args.cols, k_blocks, out);
  FATHOM_CUDA_CHECK_LAUNCH();
}

// A persistent grid of one CTA per SM walks every expert's (token tile, 128-row weight block) tiles; the tile
// count lives on the device, so CTAs without a tile exit at once.
// dense_rows: with null offsets and counts, the rows of the one expert (fp8_dense_wgmma_gemm).
template <int kTokens>
void launch_wgmma_tokens(const Fp8GroupedGemmArgs& args, int k_blocks, __nv_bfloat16* out, cudaStream_t stream,
                         int dense_rows) {
  using Layout = sm90::GroupedWgmmaLayout<kTokens>;
  const CUtensorMap w_map = make_tensor_map_2d_bytes_sw128(
      args.w_values, static_cast<uint64_t>(args.cols), static_cast<uint64_t>(args.num_experts) * args.rows,
      static_cast<uint64_t>(args.cols), sm90::kWgmmaTileRows);
  const CUtensorMap x_map = make_tensor_map_2d_bytes_sw128(args.x_values, static_cast<uint64_t>(args.cols),
                                                           static_cast<uint64_t>(args.x_rows),
                                                           static_cast<uint64_t>(args.cols), kTokens);
  int device = 0, num_sms = 0;
  FATHOM_CUDA_CHECK(cudaGetDevice(&device));
  FATHOM_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
  auto kernel = sm90::fp8_gemm_grouped_wgmma_kernel<kTokens>;
  // Above the 48 KB default; a per-function attribute (not a stream operation), so safe under graph capture.
  FATHOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Layout::kSmemBytes));
  kernel<<<num_sms, sm90::kWgmmaThreads, Layout::kSmemBytes, stream>>>(
      w_map, x_map, args.x_scales, args.w_scales, args.expert_offsets, args.expert_counts, args.num_experts,
      static_cast<int>(args.rows), k_blocks, out, dense_rows);
  FATHOM_CUDA_CHECK_LAUNCH();
}

void launch_wgmma(const Fp8GroupedGemmArgs& args, int k_blocks, __nv_bfloat16* out, cudaStream_t stream,
                  int dense_rows = 0) {
  FATHOM_CHECK(fp8_grouped_wgmma_supports(args.rows, args.num_experts) && args.x_rows >= 1 && args.x_rows <= INT32_MAX,
               "fp8_grouped_gemm: the wgmma kernel needs rows % 8 == 0 (got " << args.rows << "), at most "
                   << sm90::kWgmmaMaxExperts << " experts (got " << args.num_experts << ") and x_rows in [1, 2^31) (got "
                   << args.x_rows << ")");
  FATHOM_CHECK(reinterpret_cast<uintptr_t>(out) % 16 == 0, "fp8_grouped_gemm: the wgmma kernel needs a 16-byte aligned output");
  int tokens_per_tile = args.wgmma_tokens_per_tile;
  if (tokens_per_tile == 0) tokens_per_tile = wgmma_tokens_per_tile(args.x_rows, args.num_experts);
  FATHOM_CHECK(tokens_per_tile == 64 || tokens_per_tile == 128 || tokens_per_tile == 192,
               "fp8_grouped_gemm: wgmma_tokens_per_tile must be 0, 64, 128 or 192, got " << tokens_per_tile);
  if (tokens_per_tile == 64) launch_wgmma_tokens<64>(args, k_blocks, out, stream, dense_rows);
  else if (tokens_per_tile == 128) launch_wgmma_tokens<128>(args, k_blocks, out, stream, dense_rows);
  else launch_wgmma_tokens<192>(args, k_blocks, out, stream, dense_rows);
}

// Grid: (weight row blocks of 64, 1, max_active_experts); slot s runs expert active_experts[s].
void launch_gemv(const Fp8GroupedGemmArgs& args, int k_blocks, __nv_bfloat16* out, cudaStream_t stream) {
  constexpr int kWarps = 4, kDepth = 2;  // the decode GEMM's default variant (fp8_gemm_heuristics.h: w4d2)
  FATHOM_CHECK(args.max_active_experts <= args.num_experts && args.max_active_experts <= 65535,
               "fp8_grouped_gemm: max_active_experts " << args.max_active_experts << " of " << args.num_experts);
  FATHOM_CHECK(args.cols * 16 <= INT32_MAX, "fp8_grouped_gemm: gemv kernel takes cols <= 2^27, got " << args.cols);
  FATHOM_CHECK(reinterpret_cast<uintptr_t>(args.x_values) % 16 == 0 && reinterpret_cast<uintptr_t>(args.w_values) % 16 == 0,
               "fp8_grouped_gemm: the gemv kernel needs 16-byte aligned activation and weight values");
  const dim3 grid(static_cast<unsigned>(ceil_div(args.rows, kWarps * sm90::kSmallMRowsPerWarp)), 1,
                  static_cast<unsigned>(args.max_active_experts));
  auto launch = [&](auto kernel) {
    launch_programmatic(kernel, grid, dim3(kWarps * 32), 0, stream, args.x_values, args.x_scales, args.expert_offsets,
                        args.expert_counts, args.active_experts, args.x_row_source, args.x_row_divisor, args.w_values,
                        args.w_scales, args.rows, args.cols, k_blocks, args.gemv_prefetch_blocks,
                        args.experts_settled, out);
  };
  // One 8-token tile per pass when no expert can have more rows; else two (16 rows per pass over the weight).
  if (args.max_rows_per_expert <= 8) launch(sm90::fp8_gemm_grouped_gemv_kernel<1, kWarps, kDepth, __nv_bfloat16>);
  else launch(sm90::fp8_gemm_grouped_gemv_kernel<2, kWarps, kDepth, __nv_bfloat16>);
}

}  // namespace

bool fp8_grouped_wgmma_supports(int64_t rows, int32_t num_experts) {
  return rows > 0 && rows % 8 == 0 && num_experts >= 1 && num_experts <= sm90::kWgmmaMaxExperts &&
         num_experts * rows <= INT32_MAX;
}

void fp8_grouped_gemm(const Fp8GroupedGemmArgs& args, __nv_bfloat16* out, cudaStream_t stream) {
  FATHOM_CHECK(args.num_experts >= 1 && args.num_experts <= 65535, "fp8_grouped_gemm: " << args.num_experts << " experts");
  FATHOM_CHECK(args.rows > 0 && args.cols > 0 && args.cols % 16 == 0,
               "fp8_grouped_gemm: rows " << args.rows << ", cols " << args.cols << " (cols must be a multiple of 16)");
  FATHOM_CHECK(args.max_rows_per_expert >= 0, "fp8_grouped_gemm: max_rows_per_expert " << args.max_rows_per_expert);
  if (args.max_rows_per_expert == 0) return;
  FATHOM_CHECK(args.x_values && args.x_scales && args.expert_offsets && args.expert_counts && args.w_values &&
                   args.w_scales && out,
               "fp8_grouped_gemm: null pointer argument");
  FATHOM_CHECK(!args.x_row_source || (args.active_experts && args.kernel == Fp8GroupedKernel::kSmallM && args.x_row_divisor >= 1),
               "fp8_grouped_gemm: x_row_source needs the decode path (kSmallM with active_experts) and a divisor >= 1, got "
                   << args.x_row_divisor);
  FATHOM_CHECK(!args.x_row_source || (args.x_source_rows >= 1 && args.x_source_rows * args.cols <= INT32_MAX),
               "fp8_grouped_gemm: x_row_source over " << args.x_source_rows << " rows of " << args.cols
                                                      << " columns (int offsets: at most 2^31 bytes)");
  const int k_blocks = static_cast<int>(ceil_div(args.cols, kFp8ScaleBlock));
  if (args.kernel == Fp8GroupedKernel::kTiled) {
    launch_tiled(args, k_blocks, out, stream);
    return;
  }
  if (args.kernel == Fp8GroupedKernel::kWgmma) {
    launch_wgmma(args, k_blocks, out, stream);
    return;
  }
  if (args.active_experts) {
    if (args.max_active_experts > 0) launch_gemv(args, k_blocks, out, stream);
    return;
  }
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

void fp8_dense_wgmma_gemm(const DeviceFp8Activations& x, const DeviceFp8Weight& w, __nv_bfloat16* out,
                          cudaStream_t stream) {
  FATHOM_CHECK(x.values && x.scales && w.values && w.scales && out, "fp8_dense_wgmma_gemm: null pointer argument");
  FATHOM_CHECK(x.cols == w.cols && x.cols > 0 && x.cols % 16 == 0,
               "fp8_dense_wgmma_gemm: activation cols " << x.cols << ", weight cols " << w.cols << " (equal, a multiple of 16)");
  FATHOM_CHECK(x.tokens >= 0 && x.tokens <= INT32_MAX / 2, "fp8_dense_wgmma_gemm: " << x.tokens << " tokens");
  if (x.tokens == 0) return;
  Fp8GroupedGemmArgs args;  // one expert: every token row, offsets and counts implied
  args.x_values = x.values;
  args.x_scales = x.scales;
  args.w_values = w.values;
  args.w_scales = w.scales;
  args.num_experts = 1;
  args.rows = w.rows;
  args.cols = w.cols;
  args.max_rows_per_expert = static_cast<int32_t>(x.tokens);
  args.kernel = Fp8GroupedKernel::kWgmma;
  args.x_rows = x.tokens;
  launch_wgmma(args, static_cast<int>(ceil_div(w.cols, kFp8ScaleBlock)), out, stream, static_cast<int>(x.tokens));
}

}  // namespace fathom::kernels::cuda
