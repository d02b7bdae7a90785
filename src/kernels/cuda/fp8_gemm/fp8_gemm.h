#pragma once
// FP8 block-scaled GEMM: out[tokens, rows] = (x_values * x_scales) · (w_values * w_scales)ᵀ, fp32 accumulation
// promoted per 128-wide K block. Decode-sized batches use our tensor-core kernel; large batches use cuBLASLt.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "kernels/cuda/fp8_gemm/fp8_gemm_heuristics.h"
#include "kernels/cuda/fp8_gemm/fp8_types.h"
#include "kernels/cuda/fp8_gemm/split_k_partials.h"

namespace fathom::kernels::cuda {

class CublasLtFp8Gemm;  // cublaslt_fp8_gemm.h

// kTiled: our tiled tensor-core kernel for any number of tokens, with per-element arithmetic bitwise identical to
// the small-M path's mma.sync kernels, K splits included (deterministic / batch-invariant prefill; never picked by
// kAuto).
enum class Fp8GemmPath { kAuto, kSmallM, kCublasLt, kTiled };

// Kernel family of the small-M path (Fp8GemmPath::kSmallM and kAuto up to kSmallMMaxTokens tokens):
//   kAuto: the wgmma decode kernel from kWgmmaDecodeMinTokens tokens where it applies (bf16 output, rows % 8 == 0,
//     16-byte aligned operands), the mma.sync kernels below that.
//   kMmaSync: always the mma.sync kernels, whose bits do not depend on the token count (batch-invariant inference).
//   kWgmma: the wgmma decode kernel at any token count where it applies (benchmarks and tests).
enum class DecodeKernel { kAuto, kMmaSync, kWgmma };

struct Fp8GemmWorkspace {
  float* split_partials = nullptr;   // [max_splits, max_tokens_small_m, max_rows] fp32 for the small-M split-K path
  size_t split_partials_bytes = 0;
  // [ceil(rows/16)] arrival counters of the fused split-K reduction (small_m_counter_bytes). Zero at rest: zero them
  // once when allocated; every GEMM leaves them zero. Optional: without them the partials are summed by a second
  // kernel (same bits). One GEMM at a time may use them (one stream).
  uint32_t* split_counters = nullptr;
  size_t split_counters_bytes = 0;
};

class Fp8Gemm {
 public:
  // num_sms: the device's multiprocessor count (sizes the split-K heuristic).
  explicit Fp8Gemm(int num_sms);
  ~Fp8Gemm();

  // Tokens at or below this use the small-M kernel under kAuto.
  static constexpr int64_t kSmallMMaxTokens = 64;

  // Split-K factor of the small-M kernel for a weight; depends only on the weight's shape, never on the batch,
  // so a token's result is the same whatever batch it is in.
  int small_m_splits(int64_t rows, int64_t cols) const;
  // Split-K factor of the wgmma decode kernel (the override if set, else fp8_gemm_heuristics.h), also shape-only.
  int wgmma_decode_splits(int64_t rows, int64_t cols) const;
  // Workspace bytes the small-M path needs for this weight at kSmallMMaxTokens (either kernel family).
  size_t small_m_workspace_bytes(int64_t rows, int64_t cols) const;
  // Counter bytes (Fp8GemmWorkspace::split_counters) the fused split-K reduction needs for this weight; 0 if none.
  size_t small_m_counter_bytes(int64_t rows, int64_t cols) const;

  // Gemv kernel variant for the mma.sync family's 1..16 tokens (1..8 under DecodeKernel::kAuto; benchmarks and
  // tests compare them; all give the same bits). Under the default, run_small_m_deferred takes
  // small_m_deferred_variant; any other variant set here is what both calls run.
  void set_small_m_variant(SmallMVariant variant) { small_m_variant_ = variant; }
  SmallMVariant small_m_variant() const { return small_m_variant_; }
  void set_decode_kernel(DecodeKernel kernel) { decode_kernel_ = kernel; }
  DecodeKernel decode_kernel() const { return decode_kernel_; }
  // Benchmarks: the wgmma decode kernel's split count for every weight (0: the heuristic; clamped to the K blocks).
  void set_wgmma_decode_splits_override(int splits) { wgmma_decode_splits_override_ = splits; }

  // x.scales must be token-major [tokens, k_blocks]; the cuBLASLt path also needs x_scales_block_major
  // ([k_blocks, tokens], written by quantize_activations_fp8) and reads w.scales in checkpoint layout.
  void run(const DeviceFp8Activations& x, const float* x_scales_block_major, const DeviceFp8Weight& w,
           __nv_bfloat16* out, const Fp8GemmWorkspace& workspace, cudaStream_t stream,
           Fp8GemmPath path = Fp8GemmPath::kAuto);
  // The small-M path (x.tokens <= kSmallMMaxTokens) without its split-K reduce launch: when the weight is split,
  // returns the fp32 partials (in workspace.split_partials, valid until the next GEMM using that workspace) for the
  // consumer to sum (split_k_sum.cuh) and leaves out unwritten; empty when the kernel wrote out itself (one split,
  // or a variant that sums its splits in the CTA).
  SplitKPartials run_small_m_deferred(const DeviceFp8Activations& x, const DeviceFp8Weight& w, __nv_bfloat16* out,
                                      const Fp8GemmWorkspace& workspace, cudaStream_t stream);
  void run(const DeviceFp8Activations& x, const float* x_scales_block_major, const DeviceFp8Weight& w, float* out,
           const Fp8GemmWorkspace& workspace, cudaStream_t stream, Fp8GemmPath path = Fp8GemmPath::kAuto);

  CublasLtFp8Gemm& cublaslt() { return *cublaslt_; }

 private:
  template <typename Output>
  void run_impl(const DeviceFp8Activations& x, const float* x_scales_block_major, const DeviceFp8Weight& w, Output* out,
                const Fp8GemmWorkspace& workspace, cudaStream_t stream, Fp8GemmPath path);
  template <typename Output>
  void run_small_m(const DeviceFp8Activations& x, const DeviceFp8Weight& w, Output* out,
                   const Fp8GemmWorkspace& workspace, cudaStream_t stream, SplitKPartials* deferred);
  // SmallMVariant::kCta for 1..16 tokens: launches fp8_gemm_gemv_cta_kernel (writes out, no split-K workspace) and
  // returns true, or returns false without launching where its limits are not met.
  template <typename Output>
  bool run_gemv_cta(const DeviceFp8Activations& x, const DeviceFp8Weight& w, Output* out, int splits,
                    cudaStream_t stream);
  // Whether the wgmma decode kernel takes this call (DecodeKernel, shape and alignment).
  bool wgmma_decode_applies(const DeviceFp8Activations& x, const DeviceFp8Weight& w, const void* out) const;
  // The wgmma decode kernel (bf16 output); split partials handled as in run_small_m.
  void run_wgmma_decode(const DeviceFp8Activations& x, const DeviceFp8Weight& w, __nv_bfloat16* out,
                        const Fp8GemmWorkspace& workspace, cudaStream_t stream, SplitKPartials* deferred);
  template <typename Output>
  void run_tiled(const DeviceFp8Activations& x, const DeviceFp8Weight& w, Output* out, cudaStream_t stream);

  int num_sms_;
  SmallMVariant small_m_variant_ = kSmallMDefaultVariant;
  DecodeKernel decode_kernel_ = DecodeKernel::kAuto;
  int wgmma_decode_splits_override_ = 0;
  std::unique_ptr<CublasLtFp8Gemm> cublaslt_;
};


}  // namespace fathom::kernels::cuda
