// Host side of the MLA prefill: argument checks, kernel instantiation choice and launch.
#include "kernels/cuda/mla/mla_prefill.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mla/sm90/mla_prefill_kernel.cuh"
#include "kernels/cuda/mla/sm90/mla_prefill_tma_kernel.cuh"
#include "kernels/cuda/mla/sm90/mla_prefill_wgmma_kernel.cuh"
#include "kernels/cuda/sm90/tma_tensor_map.h"

namespace fathom::kernels::cuda {

namespace {

using mla_detail::PrefillKernelParams;

bool aligned16(const void* pointer) { return (reinterpret_cast<uintptr_t>(pointer) & 15u) == 0; }

template <int kNopePad, int kRopePad, int kVPad>
void launch_prefill(PrefillKernelParams params, const MlaPrefillArgs& args, cudaStream_t stream) {
  using L = mla_detail::PrefillLayout<kNopePad, kRopePad, kVPad>;
  params.vector_loads = params.vector_loads && args.nope_dim == kNopePad && args.cache.rope_dim == kRopePad &&
                        args.v_dim == kVPad;
  auto kernel = mla_detail::mla_prefill_kernel<kNopePad, kRopePad, kVPad>;
  FATHOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmemBytes));
  const dim3 grid(static_cast<unsigned>((args.max_q_len + mla_detail::kPrefillTileQ - 1) / mla_detail::kPrefillTileQ),
                  static_cast<unsigned>(args.num_heads), static_cast<unsigned>(args.batch));
  kernel<<<grid, mla_detail::kPrefillThreads, L::kSmemBytes, stream>>>(params);
  FATHOM_CUDA_CHECK_LAUNCH();
}

void launch_prefill_wgmma(const PrefillKernelParams& params, const MlaPrefillArgs& args, cudaStream_t stream) {
  using L = mla_detail::PrefillWgmmaLayout;
  auto kernel = mla_detail::mla_prefill_wgmma_kernel;
  FATHOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmemBytes));
  const dim3 grid(static_cast<unsigned>((args.max_q_len + mla_detail::kPrefillTileQ - 1) / mla_detail::kPrefillTileQ),
                  static_cast<unsigned>(args.num_heads), static_cast<unsigned>(args.batch));
  kernel<<<grid, mla_detail::kPrefillThreads, L::kSmemBytes, stream>>>(params);
  FATHOM_CUDA_CHECK_LAUNCH();
}

// Heads per block of the persistent TMA kernel's item order (PrefillItemOrder): one for sequences of more than 2048
// queries (H200: 2 heads were 8% slower at 8192, 1% at 4096), two below (2-6% faster than one at 256-1024 tokens,
// the same at 2048).
int prefill_tma_head_block(int max_q_len) { return max_q_len > 2048 ? 1 : 2; }

// k_nope and v ([total_kv_rows][heads][head stride] bf16, the first 128 of each head) as 3-D byte tensor maps, boxes
// of 128 keys x 128 bytes of one head.
void launch_prefill_tma(const PrefillKernelParams& params, const MlaPrefillArgs& args, cudaStream_t stream) {
  using L = mla_detail::PrefillTmaLayout;
  const uint64_t k_row_bytes = L::kNope * sizeof(__nv_bfloat16), v_row_bytes = L::kV * sizeof(__nv_bfloat16);
  const uint64_t k_head_bytes = static_cast<uint64_t>(params.k_head_stride) * sizeof(__nv_bfloat16);
  const uint64_t v_head_bytes = static_cast<uint64_t>(params.v_head_stride) * sizeof(__nv_bfloat16);
  const uint64_t rows = static_cast<uint64_t>(args.total_kv_rows), heads = static_cast<uint64_t>(args.num_heads);
  const CUtensorMap k_map = make_tensor_map_3d_bytes_sw128(args.k_nope, k_row_bytes, heads, rows, k_head_bytes,
                                                           heads * k_head_bytes, L::kTileKeys);
  const CUtensorMap v_map = make_tensor_map_3d_bytes_sw128(args.v, v_row_bytes, heads, rows, v_head_bytes,
                                                           heads * v_head_bytes, L::kTileKeys);
  auto kernel = mla_detail::mla_prefill_tma_kernel;
  FATHOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmemBytes));
  // Persistent: one CTA per SM (one fits: 208 KB of shared memory), fewer when there are fewer items.
  const int num_q_tiles = (args.max_q_len + L::kTileQ - 1) / L::kTileQ;
  const int64_t num_items = static_cast<int64_t>(num_q_tiles) * args.num_heads * args.batch;
  FATHOM_CHECK(num_items <= INT32_MAX, "mla_prefill: " << num_items << " work items (query tiles x heads x batch)");
  int device = 0, num_sms = 0;
  FATHOM_CUDA_CHECK(cudaGetDevice(&device));
  FATHOM_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t ctas = std::min<int64_t>({num_items, num_sms, args.max_ctas > 0 ? args.max_ctas : num_sms});
  const int head_block = std::min(prefill_tma_head_block(args.max_q_len), args.num_heads);
  kernel<<<static_cast<unsigned>(ctas), L::kThreads, L::kSmemBytes, stream>>>(params, k_map, v_map, num_q_tiles,
                                                                                args.batch, head_block);
  FATHOM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void mla_prefill(const MlaPrefillArgs& args, cudaStream_t stream) {
  const LatentCacheView& cache = args.cache;
  FATHOM_CHECK(args.batch >= 0 && args.max_q_len >= 0 && args.num_heads > 0 && args.max_ctas >= 0,
               "mla_prefill: batch " << args.batch << ", max_q_len " << args.max_q_len << ", heads " << args.num_heads
                                     << ", max_ctas " << args.max_ctas);
  if (args.batch == 0 || args.max_q_len == 0) return;
  FATHOM_CHECK(args.q && args.k_nope && args.v && args.out && cache.pool && args.page_table && args.cu_q_lens &&
                   args.cu_kv_lens,
               "mla_prefill: null tensor pointer");
  FATHOM_CHECK(args.nope_dim > 0 && args.nope_dim <= 128 && args.v_dim > 0 && args.v_dim <= 128 &&
                   cache.rope_dim >= 0 && cache.rope_dim <= 64,
               "mla_prefill: nope " << args.nope_dim << ", rope " << cache.rope_dim << ", v " << args.v_dim
                                    << " (max 128, 64, 128)");
  FATHOM_CHECK(args.q_head_stride >= args.nope_dim + cache.rope_dim && cache.page_size_tokens >= 1 &&
                   args.max_pages_per_seq >= 1,
               "mla_prefill: q_head_stride " << args.q_head_stride << ", page_size " << cache.page_size_tokens);
  FATHOM_CHECK(args.key_positions == nullptr || args.query_positions != nullptr,
               "mla_prefill: key windows (key_positions) need the queries' positions (query_positions)");
  const int64_t k_head_stride = args.k_head_stride == 0 ? args.nope_dim : args.k_head_stride;
  const int64_t v_head_stride = args.v_head_stride == 0 ? args.v_dim : args.v_head_stride;
  FATHOM_CHECK(k_head_stride >= args.nope_dim && v_head_stride >= args.v_dim,
               "mla_prefill: head strides (k " << args.k_head_stride << ", v " << args.v_head_stride
                                              << ") below the head dims (nope " << args.nope_dim << ", v "
                                              << args.v_dim << ")");
  PrefillKernelParams params{};
  params.q = args.q;
  params.q_head_stride = args.q_head_stride;
  params.k_nope = args.k_nope;
  params.v = args.v;
  params.k_head_stride = k_head_stride;
  params.v_head_stride = v_head_stride;
  params.cache = cache.pool;
  params.page_table = args.page_table;
  params.cu_q_lens = args.cu_q_lens;
  params.cu_kv_lens = args.cu_kv_lens;
  params.out = args.out;
  params.key_positions = args.key_positions;
  params.query_positions = args.query_positions;
  params.lse_log2 = args.lse_log2;
  params.max_pages_per_seq = args.max_pages_per_seq;
  params.num_heads = args.num_heads;
  params.nope = args.nope_dim;
  params.rope = cache.rope_dim;
  params.v_dim = args.v_dim;
  params.kv_lora = cache.kv_lora_dim;
  params.page_size = cache.page_size_tokens;
  params.scale_log2 = args.softmax_scale * static_cast<float>(M_LOG2E);
  params.vector_loads = aligned16(args.q) && aligned16(args.k_nope) && aligned16(args.v) && aligned16(cache.pool) &&
                        args.q_head_stride % 8 == 0 && k_head_stride % 8 == 0 && v_head_stride % 8 == 0 &&
                        cache.kv_lora_dim % 8 == 0;
  using L = mla_detail::PrefillWgmmaLayout;
  const bool wgmma_applies = params.vector_loads && args.nope_dim == L::kNope && cache.rope_dim == L::kRope &&
                             args.v_dim == L::kV;
  FATHOM_CHECK((args.kernel != MlaPrefillKernel::kWgmma && args.kernel != MlaPrefillKernel::kTma) || wgmma_applies,
               "mla_prefill: the wgmma and TMA kernels take nope 128, rope 64, v 128 with 16-byte aligned rows; got "
               "nope " << args.nope_dim << ", rope " << cache.rope_dim << ", v " << args.v_dim << ", head strides q "
                       << args.q_head_stride << " k " << k_head_stride << " v " << v_head_stride << ", kv_lora "
                       << cache.kv_lora_dim << ", 16-byte aligned q/k/v/cache " << aligned16(args.q)
                       << aligned16(args.k_nope) << aligned16(args.v) << aligned16(cache.pool));
  FATHOM_CHECK(args.kernel != MlaPrefillKernel::kTma || args.total_kv_rows > 0,
               "mla_prefill: the TMA kernel needs total_kv_rows (the row count of k_nope and v)");
  const bool tma_applies = wgmma_applies && args.total_kv_rows > 0;
  if (tma_applies && (args.kernel == MlaPrefillKernel::kAuto || args.kernel == MlaPrefillKernel::kTma)) {
    launch_prefill_tma(params, args, stream);
  } else if (wgmma_applies && args.kernel != MlaPrefillKernel::kMmaSync) {
    launch_prefill_wgmma(params, args, stream);
  } else if (args.nope_dim <= 64 && args.v_dim <= 64) {
    launch_prefill<64, 64, 64>(params, args, stream);
  } else {
    launch_prefill<128, 64, 128>(params, args, stream);
  }
}

}  // namespace fathom::kernels::cuda
