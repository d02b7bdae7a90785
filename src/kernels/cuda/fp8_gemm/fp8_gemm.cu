#include "kernels/cuda/fp8_gemm/fp8_gemm.h"

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8_gemm/cublaslt_fp8_gemm.h"
#include "kernels/cuda/fp8_gemm/fp8_gemm_heuristics.h"
#include "kernels/cuda/fp8_gemm/sm90/fp8_gemm_decode_wgmma.cuh"
#include "kernels/cuda/fp8_gemm/sm90/fp8_gemm_gemv.cuh"
#include "kernels/cuda/fp8_gemm/sm90/fp8_gemm_gemv_cta.cuh"
#include "kernels/cuda/fp8_gemm/sm90/fp8_gemm_small_m.cuh"
#include "kernels/cuda/fp8_gemm/sm90/fp8_gemm_tiled.cuh"
#include "kernels/cuda/sm90/tma_tensor_map.h"
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda {

namespace {

// out[t, r] = Σ_s partial[s, t, r], summed in split order (deterministic).
template <typename Output>
__global__ void reduce_splits_kernel(const float* __restrict__ partial,  // [splits, tokens, rows]
                                     int splits, int64_t count,           // count = tokens * rows
                                     Output* __restrict__ out) {          // [tokens, rows]
  begin_dependent_kernel();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  float sum = 0.0f;
  for (int s = 0; s < splits; ++s) sum += partial[s * count + i];
  out[i] = static_cast<Output>(sum);
}

// The split-K partials of a small-M GEMM: handed to the consumer (deferred) or summed into out by a reduce launch.
template <typename Output>
void reduce_or_defer_splits(float* partial, int splits, int64_t count, Output* out, cudaStream_t stream,
                            SplitKPartials* deferred) {
  if (deferred) {
    *deferred = SplitKPartials{partial, splits, count};
    return;
  }
  launch_programmatic(reduce_splits_kernel<Output>, dim3(static_cast<unsigned>(ceil_div(count, 256))), dim3(256), 0,
                      stream, partial, splits, count, out);
}

bool aligned_16(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer) % 16 == 0; }

// fp8_gemm_gemv_kernel instantiations of one output type share this signature (token tiles, warps, depth and
// fusion are template arguments).
template <typename Output>
using GemvKernel = void (*)(const uint8_t*, const float*, const uint8_t*, const float*, int, int64_t, int64_t, int, int,
                            int, int, Output*, float*, uint32_t*);

template <int kWarps, int kDepth, typename Output>
GemvKernel<Output> gemv_instance(int token_tiles, bool fused) {
  if (token_tiles == 1) {
    return fused ? sm90::fp8_gemm_gemv_kernel<1, kWarps, kDepth, true, Output>
                 : sm90::fp8_gemm_gemv_kernel<1, kWarps, kDepth, false, Output>;
  }
  return fused ? sm90::fp8_gemm_gemv_kernel<2, kWarps, kDepth, true, Output>
               : sm90::fp8_gemm_gemv_kernel<2, kWarps, kDepth, false, Output>;
}

// The gemv kernel for a variant's (warps, depth); token_tiles is 1 (<= 8 tokens) or 2 (<= 16).
template <typename Output>
GemvKernel<Output> gemv_kernel_for(const SmallMVariantInfo& info, int token_tiles, bool fused) {
  if (info.warps == 4 && info.depth == 2) return gemv_instance<4, 2, Output>(token_tiles, fused);
  if (info.warps == 4 && info.depth == 3) return gemv_instance<4, 3, Output>(token_tiles, fused);
  if (info.warps == 4 && info.depth == 4) return gemv_instance<4, 4, Output>(token_tiles, fused);
  if (info.warps == 8 && info.depth == 2) return gemv_instance<8, 2, Output>(token_tiles, fused);
  if (info.warps == 8 && info.depth == 3) return gemv_instance<8, 3, Output>(token_tiles, fused);
  if (info.warps == 8 && info.depth == 4) return gemv_instance<8, 4, Output>(token_tiles, fused);
  FATHOM_CHECK(false, "fp8_gemm: no gemv kernel for variant " << info.name);
  return nullptr;
}

template <typename Output>
cudaDataType_t cuda_type();
template <>
cudaDataType_t cuda_type<float>() { return CUDA_R_32F; }
template <>
cudaDataType_t cuda_type<__nv_bfloat16>() { return CUDA_R_16BF; }

}  // namespace

Fp8Gemm::Fp8Gemm(int num_sms) : num_sms_(num_sms), cublaslt_(std::make_unique<CublasLtFp8Gemm>()) {}
Fp8Gemm::~Fp8Gemm() = default;

int Fp8Gemm::small_m_splits(int64_t rows, int64_t cols) const { return small_m_split_count(rows, cols, num_sms_); }

int Fp8Gemm::wgmma_decode_splits(int64_t rows, int64_t cols) const {
  const int64_t k_blocks = ceil_div(cols, kFp8ScaleBlock);
  const int wanted = wgmma_decode_splits_override_ > 0 ? wgmma_decode_splits_override_
                                                       : wgmma_decode_split_count(rows, cols, num_sms_);
  const int64_t per_split = ceil_div(k_blocks, std::clamp<int64_t>(wanted, 1, std::max<int64_t>(k_blocks, 1)));
  return static_cast<int>(ceil_div(k_blocks, per_split));  // no empty split
}

size_t Fp8Gemm::small_m_workspace_bytes(int64_t rows, int64_t cols) const {
  const int splits = std::max(small_m_splits(rows, cols), wgmma_decode_splits(rows, cols));
  return splits > 1 ? static_cast<size_t>(splits) * kSmallMMaxTokens * rows * sizeof(float) : 0;
}

size_t Fp8Gemm::small_m_counter_bytes(int64_t rows, int64_t cols) const {
  // One counter per 16-row warp tile: covers every variant's row block (a multiple of 16 rows).
  return small_m_splits(rows, cols) > 1 ? static_cast<size_t>(ceil_div(rows, sm90::kSmallMRowsPerWarp)) * sizeof(uint32_t)
                                        : 0;
}

bool Fp8Gemm::wgmma_decode_applies(const DeviceFp8Activations& x, const DeviceFp8Weight& w, const void* out) const {
  if (decode_kernel_ == DecodeKernel::kMmaSync) return false;
  if (decode_kernel_ == DecodeKernel::kAuto && x.tokens < kWgmmaDecodeMinTokens) return false;
  return x.tokens >= 1 && x.tokens <= kSmallMMaxTokens && w.rows % 8 == 0 && w.rows <= INT32_MAX &&
         aligned_16(x.values) && aligned_16(w.values) && aligned_16(out);
}

// A persistent grid of at most one CTA per SM walks the (token tile, 128-row block, K split) tiles.
void Fp8Gemm::run_wgmma_decode(const DeviceFp8Activations& x, const DeviceFp8Weight& w, __nv_bfloat16* out,
                               const Fp8GemmWorkspace& workspace, cudaStream_t stream, SplitKPartials* deferred) {
  const int tokens = static_cast<int>(x.tokens);
  const int k_blocks = static_cast<int>(ceil_div(w.cols, kFp8ScaleBlock));
  const int splits = wgmma_decode_splits(w.rows, w.cols);
  const int k_blocks_per_split = static_cast<int>(ceil_div(k_blocks, splits));
  float* partial = nullptr;
  if (splits > 1) {
    const size_t needed = static_cast<size_t>(splits) * tokens * w.rows * sizeof(float);
    FATHOM_CHECK(workspace.split_partials && workspace.split_partials_bytes >= needed,
                 "fp8_gemm: split-K workspace of " << workspace.split_partials_bytes << " bytes, need " << needed
                                                   << " (wgmma decode kernel, " << splits << " splits)");
    partial = workspace.split_partials;
  }
  const CUtensorMap w_map = make_tensor_map_2d_bytes_sw128(w.values, static_cast<uint64_t>(w.cols),
                                                           static_cast<uint64_t>(w.rows), static_cast<uint64_t>(w.cols),
                                                           sm90::kWgmmaTileRows);
  auto launch = [&](auto kernel, int token_tile, int shared_bytes) {
    const CUtensorMap x_map = make_tensor_map_2d_bytes_sw128(x.values, static_cast<uint64_t>(x.cols),
                                                             static_cast<uint64_t>(tokens),
                                                             static_cast<uint64_t>(x.cols), token_tile);
    const int64_t tiles = ceil_div(tokens, token_tile) * ceil_div(w.rows, sm90::kWgmmaTileRows) * splits;
    // Above the 48 KB default; a per-function attribute (not a stream operation), so safe under graph capture.
    FATHOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes));
    launch_programmatic(kernel, dim3(static_cast<unsigned>(std::min<int64_t>(tiles, num_sms_))),
                        dim3(sm90::kWgmmaThreads), static_cast<size_t>(shared_bytes), stream, w_map, x_map, x.scales,
                        w.scales, tokens, static_cast<int>(w.rows), k_blocks, k_blocks_per_split, splits, out, partial);
  };
  if (tokens <= 32) launch(sm90::fp8_gemm_decode_wgmma_kernel<32>, 32, sm90::DecodeWgmmaLayout<32>::kSmemBytes);
  else launch(sm90::fp8_gemm_decode_wgmma_kernel<64>, 64, sm90::DecodeWgmmaLayout<64>::kSmemBytes);
  if (partial) reduce_or_defer_splits(partial, splits, static_cast<int64_t>(tokens) * w.rows, out, stream, deferred);
}

template <typename Output>
bool Fp8Gemm::run_gemv_cta(const DeviceFp8Activations& x, const DeviceFp8Weight& w, Output* out, int splits,
                           cudaStream_t stream) {
  constexpr SmallMVariantInfo info = small_m_variant_info(SmallMVariant::kCta);
  constexpr int kDepth = info.depth;  // gemv_accumulate's register ring
  if (x.tokens > 16 || w.cols * 16 > INT32_MAX || !gemv_cta_applies(w.rows, w.cols, splits, num_sms_)) return false;
  const int tokens = static_cast<int>(x.tokens);
  const int k_blocks = static_cast<int>(ceil_div(w.cols, kFp8ScaleBlock));
  const int k_blocks_per_split = static_cast<int>(ceil_div(k_blocks, splits));
  const int used_splits = static_cast<int>(used_split_count(k_blocks, splits));
  const int token_tiles = tokens <= 8 ? 1 : 2;
  // [splits][token_tiles][4][32] fp32 partials: 1 KB per split at 16 tokens, within the 48 KB default up to 48 splits.
  const size_t shared_bytes = used_splits > 1 ? static_cast<size_t>(used_splits) * token_tiles * 4 * 32 * sizeof(float) : 0;
  if (shared_bytes > 48 * 1024) return false;
  auto kernel = token_tiles == 1 ? sm90::fp8_gemm_gemv_cta_kernel<1, kDepth, Output>
                                 : sm90::fp8_gemm_gemv_cta_kernel<2, kDepth, Output>;
  launch_programmatic(kernel, dim3(static_cast<unsigned>(ceil_div(w.rows, sm90::kSmallMRowsPerWarp))),
                      dim3(sm90::gemv_cta_warps(used_splits, token_tiles) * 32), shared_bytes, stream, x.values,
                      x.scales, w.values, w.scales, tokens, w.rows, w.cols, k_blocks, k_blocks_per_split, used_splits,
                      info.prefetch_blocks, out);
  return true;
}

template <typename Output>
void Fp8Gemm::run_small_m(const DeviceFp8Activations& x, const DeviceFp8Weight& w, Output* out,
                          const Fp8GemmWorkspace& workspace, cudaStream_t stream, SplitKPartials* deferred) {
  if constexpr (std::is_same_v<Output, __nv_bfloat16>) {
    if (wgmma_decode_applies(x, w, out)) {
      run_wgmma_decode(x, w, out, workspace, stream, deferred);
      return;
    }
  }
  const int tokens = static_cast<int>(x.tokens);
  const int k_blocks = static_cast<int>(ceil_div(w.cols, kFp8ScaleBlock));
  const int splits = small_m_splits(w.rows, w.cols);
  // Every variant computes the same bits; a deferred call may take another one than the plain call would.
  const SmallMVariant variant = deferred && small_m_variant_ == kSmallMDefaultVariant
                                    ? small_m_deferred_variant(w.rows, w.cols, tokens, num_sms_)
                                    : small_m_variant_;
  if (tokens <= 16 && small_m_variant_info(variant).cta && run_gemv_cta(x, w, out, splits, stream)) return;
  const int k_blocks_per_split = static_cast<int>(ceil_div(k_blocks, splits));
  const int used_splits = static_cast<int>(used_split_count(k_blocks, splits));
  float* partial = nullptr;
  if (used_splits > 1) {
    const size_t needed = static_cast<size_t>(used_splits) * tokens * w.rows * sizeof(float);
    FATHOM_CHECK(workspace.split_partials && workspace.split_partials_bytes >= needed,
                 "fp8_gemm: split-K workspace of " << workspace.split_partials_bytes << " bytes, need " << needed);
    partial = workspace.split_partials;
  }
  bool fused = false;  // the GEMM kernel itself sums the split partials (no reduce launch)
  if (tokens <= 16 && variant != SmallMVariant::kReference) {
    // 1..16 tokens: the gemv kernel (bit-identical to the reference kernel below, faster data movement); kCta
    // where it does not apply falls back to kW4D2P2.
    const SmallMVariantInfo& info =
        small_m_variant_info(small_m_variant_info(variant).cta ? SmallMVariant::kW4D2P2 : variant);
    FATHOM_CHECK(w.cols * 16 <= INT32_MAX, "fp8_gemm: gemv kernel takes K <= 2^27, got " << w.cols);  // int offsets
    const int64_t row_block = static_cast<int64_t>(info.warps) * sm90::kSmallMRowsPerWarp;
    const int64_t row_blocks = ceil_div(w.rows, row_block);
    uint32_t* counters = nullptr;
    if (partial && info.fused && workspace.split_counters && used_splits <= sm90::kGemvReduceCapacity) {
      const size_t needed = static_cast<size_t>(row_blocks) * sizeof(uint32_t);
      FATHOM_CHECK(workspace.split_counters_bytes >= needed,
                   "fp8_gemm: split-K counters of " << workspace.split_counters_bytes << " bytes, need " << needed);
      counters = workspace.split_counters;
      fused = true;
    }
    GemvKernel<Output> kernel = gemv_kernel_for<Output>(info, tokens <= 8 ? 1 : 2, fused);
    launch_programmatic(kernel, dim3(static_cast<unsigned>(row_blocks), static_cast<unsigned>(used_splits)),
                        dim3(info.warps * 32), 0, stream, x.values, x.scales, w.values, w.scales, tokens, w.rows, w.cols,
                        k_blocks, k_blocks_per_split, used_splits, info.prefetch_blocks, out, partial, counters);
  } else {
    const dim3 grid(static_cast<unsigned>(ceil_div(w.rows, sm90::kSmallMRowsPerWarp * sm90::kSmallMWarpsPerBlock)),
                    static_cast<unsigned>(used_splits));
    const dim3 block(sm90::kSmallMWarpsPerBlock * 32);
    auto launch = [&](auto kernel) {
      kernel<<<grid, block, 0, stream>>>(x.values, x.scales, w.values, w.scales, tokens, w.rows, w.cols, k_blocks,
                                         k_blocks_per_split, out, partial);
    };
    // One K block per step: measured faster than two (fewer registers, more resident warps, more loads in flight).
    if (tokens <= 8) launch(sm90::fp8_gemm_small_m_kernel<1, 1, Output>);
    else if (tokens <= 16) launch(sm90::fp8_gemm_small_m_kernel<2, 1, Output>);
    else if (tokens <= 32) launch(sm90::fp8_gemm_small_m_kernel<4, 1, Output>);
    else launch(sm90::fp8_gemm_small_m_kernel<8, 1, Output>);
    FATHOM_CUDA_CHECK_LAUNCH();
  }
  if (partial && !fused) {
    reduce_or_defer_splits(partial, used_splits, static_cast<int64_t>(tokens) * w.rows, out, stream, deferred);
  }
}

// The tiled kernel: the whole K range per CTA, in the small-M path's K splits (small_m_splits) summed in the CTA
// as its reduction sums them, so no workspace and no reduction pass, and the small-M path's bits.
template <typename Output>
void Fp8Gemm::run_tiled(const DeviceFp8Activations& x, const DeviceFp8Weight& w, Output* out, cudaStream_t stream) {
  FATHOM_CHECK(x.tokens <= INT32_MAX, "fp8_gemm: tiled path takes at most " << INT32_MAX << " tokens, got " << x.tokens);
  FATHOM_CHECK(w.rows > 0, "fp8_gemm: tiled path needs a weight with rows, got " << w.rows);
  FATHOM_CHECK(x.values && x.scales && w.values && w.scales && out, "fp8_gemm: tiled path got a null pointer");
  // cp.async copies 16-byte chunks; cols % 16 == 0 keeps every row start aligned given an aligned base.
  FATHOM_CHECK(reinterpret_cast<uintptr_t>(x.values) % 16 == 0 && reinterpret_cast<uintptr_t>(w.values) % 16 == 0,
               "fp8_gemm: tiled path needs 16-byte aligned activation and weight values");
  const int k_blocks = static_cast<int>(ceil_div(w.cols, kFp8ScaleBlock));
  const int64_t row_blocks = ceil_div(w.rows, sm90::kTiledRows);
  const int64_t token_tiles = ceil_div(x.tokens, sm90::kTiledTokens);
  const int64_t ctas = row_blocks * token_tiles;
  FATHOM_CHECK(ctas <= INT32_MAX, "fp8_gemm: tiled grid of " << ctas << " CTAs is too large");
  const int k_blocks_per_split = static_cast<int>(ceil_div(k_blocks, small_m_splits(w.rows, w.cols)));
  const int smem_bytes = k_blocks_per_split < k_blocks ? sm90::kTiledSplitSmemBytes : sm90::kTiledSmemBytes;
  auto kernel = sm90::fp8_gemm_tiled_kernel<Output>;
  // Above the 48 KB default; a per-function attribute (not a stream operation), so safe under graph capture.
  FATHOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, sm90::kTiledSplitSmemBytes));
  kernel<<<static_cast<unsigned>(ctas), sm90::kTiledThreads, smem_bytes, stream>>>(
      x.values, x.scales, w.values, w.scales, static_cast<int>(x.tokens), w.rows, w.cols, k_blocks, k_blocks_per_split,
      row_blocks, token_tiles, out);
  FATHOM_CUDA_CHECK_LAUNCH();
}

template <typename Output>
void Fp8Gemm::run_impl(const DeviceFp8Activations& x, const float* x_scales_block_major, const DeviceFp8Weight& w,
                       Output* out, const Fp8GemmWorkspace& workspace, cudaStream_t stream, Fp8GemmPath path) {
  FATHOM_CHECK(x.cols == w.cols, "fp8_gemm: activations have " << x.cols << " columns, weight has " << w.cols);
  FATHOM_CHECK(w.cols % 16 == 0, "fp8_gemm: K = " << w.cols << " must be a multiple of 16");
  if (x.tokens == 0) return;
  if (path == Fp8GemmPath::kAuto) path = x.tokens <= kSmallMMaxTokens ? Fp8GemmPath::kSmallM : Fp8GemmPath::kCublasLt;
  if (path == Fp8GemmPath::kTiled) {
    run_tiled(x, w, out, stream);
    return;
  }
  if (path == Fp8GemmPath::kSmallM) {
    FATHOM_CHECK(x.tokens <= kSmallMMaxTokens, "fp8_gemm: small-M path takes at most " << kSmallMMaxTokens << " tokens");
    run_small_m(x, w, out, workspace, stream, nullptr);
    return;
  }
  FATHOM_CHECK(x_scales_block_major, "fp8_gemm: the cuBLASLt path needs block-major activation scales");
  cublaslt_->run(x.values, x_scales_block_major, x.tokens, w.values, w.scales, w.rows, w.cols, out, cuda_type<Output>(),
                 stream);
}

void Fp8Gemm::run(const DeviceFp8Activations& x, const float* x_scales_block_major, const DeviceFp8Weight& w,
                  __nv_bfloat16* out, const Fp8GemmWorkspace& workspace, cudaStream_t stream, Fp8GemmPath path) {
  run_impl(x, x_scales_block_major, w, out, workspace, stream, path);
}

SplitKPartials Fp8Gemm::run_small_m_deferred(const DeviceFp8Activations& x, const DeviceFp8Weight& w,
                                             __nv_bfloat16* out, const Fp8GemmWorkspace& workspace,
                                             cudaStream_t stream) {
  FATHOM_CHECK(x.cols == w.cols, "fp8_gemm: activations have " << x.cols << " columns, weight has " << w.cols);
  FATHOM_CHECK(w.cols % 16 == 0, "fp8_gemm: K = " << w.cols << " must be a multiple of 16");
  FATHOM_CHECK(x.tokens <= kSmallMMaxTokens, "fp8_gemm: small-M path takes at most " << kSmallMMaxTokens << " tokens");
  SplitKPartials deferred;
  if (x.tokens > 0) run_small_m(x, w, out, workspace, stream, &deferred);
  return deferred;
}

void Fp8Gemm::run(const DeviceFp8Activations& x, const float* x_scales_block_major, const DeviceFp8Weight& w,
                  float* out, const Fp8GemmWorkspace& workspace, cudaStream_t stream, Fp8GemmPath path) {
  run_impl(x, x_scales_block_major, w, out, workspace, stream, path);
}

}  // namespace fathom::kernels::cuda
