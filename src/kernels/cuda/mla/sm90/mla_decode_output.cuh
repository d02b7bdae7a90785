#pragma once
// The epilogue of the 64-head wgmma decode kernels (seesaw, warp-specialized): a warpgroup's normalized O
// [64 heads][256 latent columns] leaves through shared memory as one bulk copy per head, 512 contiguous bytes of bf16
// (the output, or a split's partial). Its fragments' own 4- and 8-byte stores, 16 bytes per row per warp
// instruction, held the CTA 5-6 us longer at the end of every launch (H100, bench/RESULTS.md twenty-eighth session).
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/mla/sm90/mla_decode_kernel.cuh"
#include "kernels/cuda/sm90/tma_pipeline.cuh"
#include "kernels/cuda/sm90/wgmma.cuh"

namespace fathom::kernels::cuda::mla_detail {

// Staged rows are 264 elements apart: a warp's fragment writes hit every bank once.
inline constexpr int kOutputStageRow = 264;
// Shared memory one warpgroup stages its rows in: [64 heads][kOutputStageRow] bf16.
inline constexpr int kOutputStageBytes = 64 * kOutputStageRow * 2;  // 33,792

// out_rows: [num_heads, 512] bf16 rows of one sequence (and split).
__device__ __forceinline__ void store_output_rows(const float (&o)[128], const float (&inv_l)[2],
                                                  __nv_bfloat16* out_rows, __nv_bfloat16* stage, int barrier_id,
                                                  int head_base, int num_heads, int warpgroup, int wg_tid, int r0,
                                                  int r1, int tq) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    __nv_bfloat16* row = stage + (half == 0 ? r0 : r1) * kOutputStageRow;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const float v0 = o[4 * j + 2 * half] * inv_l[half], v1 = o[4 * j + 2 * half + 1] * inv_l[half];
      *reinterpret_cast<__nv_bfloat162*>(row + 8 * j + 2 * tq) = __floats2bfloat162_rn(v0, v1);
    }
  }
  hopper::fence_proxy_async_shared();  // the staged rows (generic proxy) before the bulk copies read them (async proxy)
  hopper::named_barrier_sync(barrier_id, 128);
  if (wg_tid < 64 && head_base + wg_tid < num_heads) {
    hopper::bulk_store_shared_to_global(out_rows + static_cast<int64_t>(head_base + wg_tid) * 512 + 256 * warpgroup,
                                        stage + wg_tid * kOutputStageRow, 256 * sizeof(__nv_bfloat16));
    hopper::bulk_store_wait_read();
  }
}

// This warpgroup's O columns [256·warpgroup, +256) of heads [head_base, +64) times inv_l (this thread's rows r0, r1),
// to out_latent (one split) or the split's partial_out rows (kv_lora 512: the only width of the two kernels). stage: kOutputStageBytes of shared memory
// (16-byte aligned) that nothing reads or writes until the CTA ends; barrier_id: a named barrier of this warpgroup
// alone. Requires 16-byte-aligned out_latent / partial_out.
__device__ __forceinline__ void store_decode_output_bulk(const DecodeKernelParams& p, int b, int split,
                                                         const float (&o)[128], const float (&inv_l)[2], uint8_t* stage,
                                                         int barrier_id, int head_base, int warpgroup, int wg_tid,
                                                         int r0, int r1, int tq) {
  __nv_bfloat16* out_rows = p.num_splits == 1
                               ? p.out_latent + static_cast<int64_t>(b) * p.num_heads * 512
                               : p.partial_out + (static_cast<int64_t>(b) * p.num_splits + split) * p.num_heads * 512;
  store_output_rows(o, inv_l, out_rows, reinterpret_cast<__nv_bfloat16*>(stage), barrier_id, head_base, p.num_heads,
                    warpgroup, wg_tid, r0, r1, tq);
}

}  // namespace fathom::kernels::cuda::mla_detail
