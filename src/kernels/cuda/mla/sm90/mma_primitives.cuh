#pragma once
// Warp-level tensor-core and copy primitives used by the MLA kernels (mma.sync m16n8k16 bf16, ldmatrix,
// cp.async) plus the shared-memory swizzle they all use.
//
// Shared-memory tiles are row-major with rows of `row_chunks` 16-byte chunks (8 bf16). Chunk c of row r is
// stored at chunk (c ^ (r & 7)) of that row: the 8 rows an ldmatrix reads at one logical chunk land in 8
// different 16-byte bank groups (conflict-free). row_chunks must be a multiple of 8.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/sm90/wgmma.cuh"

namespace fathom::kernels::cuda::mla_detail {

__device__ __forceinline__ uint32_t smem_u32(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// Byte offset of (row, 16-byte chunk) in a swizzled tile whose rows are row_bytes long.
__device__ __forceinline__ uint32_t swizzled_chunk_offset(int row, int chunk, int row_bytes) {
  return static_cast<uint32_t>(row * row_bytes + ((chunk ^ (row & 7)) << 4));
}

// Byte offset of (row, 16-byte chunk) in a "k-block-major" tile of `tile_rows` rows: the row is cut into blocks of
// 64 bf16 (128 B); block kb of every row forms a region [tile_rows][128 B] at kb * tile_rows * 128, swizzled like
// above. With regions 1024-byte aligned this is exactly wgmma's K-major 128-byte-swizzle layout (8-row x 128 B
// atoms), and ldmatrix reads of 8 rows at one chunk stay conflict-free.
__device__ __forceinline__ uint32_t kblock_chunk_offset(int row, int chunk, int tile_rows) {
  return static_cast<uint32_t>((chunk >> 3) * tile_rows * 128 + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}
__device__ __forceinline__ uint32_t kblock_elem_offset(int row, int col, int tile_rows) {
  return kblock_chunk_offset(row, col >> 3, tile_rows) + ((col & 7) << 1);
}

// Byte offset of the bf16 element (row, col) in a swizzled tile.
__device__ __forceinline__ uint32_t swizzled_elem_offset(int row, int col, int row_bytes) {
  return swizzled_chunk_offset(row, col >> 3, row_bytes) + ((col & 7) << 1);
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(address)
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

// d[16x8] += a[16x16] · b[16x8], bf16 inputs, fp32 accumulate.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16-byte asynchronous global->shared copy; src_bytes = 0 writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async_16(uint32_t smem_address, const void* global_pointer, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address), "l"(global_pointer),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
// Waits until at most kPending of this thread's most recent cp.async groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait_pending() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ uint32_t pack_bf16x2(float low, float high) {
  __nv_bfloat162 packed = __floats2bfloat162_rn(low, high);
  return *reinterpret_cast<uint32_t*>(&packed);
}

// Two adjacent n8 tiles of an m16n8 accumulator row, rounded to bf16: this thread holds columns 2·tq, +1 of the first
// (first, packed) and of the second (second). Two shuffles within the quad return columns [4·tq, 4·tq + 4) of the 16
// (x: the first two, y: the next two), so a quad stores its row's 32 contiguous bytes as four 8-byte stores: whole L2
// sectors, where each tile's own 4-byte pair stores leave every sector half written by two instructions (which cost
// the MLA decode 4-7% at short contexts on an H100: bench/RESULTS.md thirty-seventh session). Every lane of the warp
// must call it (full-warp shuffles).
__device__ __forceinline__ uint2 quad_bf16x4_columns(uint32_t first, uint32_t second, int tq) {
  const int quad_lane = static_cast<int>(threadIdx.x & 31) & ~3;
  const int source = (tq >> 1) | ((tq & 1) << 1);  // lanes 0, 2, 1, 3 of the quad, then those ^ 1
  const bool even = (tq & 1) == 0;
  const uint32_t x = __shfl_sync(0xffffffffu, even ? first : second, quad_lane + source);
  const uint32_t y = __shfl_sync(0xffffffffu, even ? second : first, quad_lane + (source ^ 1));
  return tq < 2 ? make_uint2(x, y) : make_uint2(y, x);
}

// Stores the 4 bf16 of quad_bf16x4_columns at out[0..3], only those below count: one 8-byte store where out is
// 8-byte aligned and all 4 are stored, else one 2-byte store each.
__device__ __forceinline__ void store_bf16x4(__nv_bfloat16* out, uint2 columns, int count) {
  if (count >= 4 && (reinterpret_cast<uintptr_t>(out) & 7) == 0) {
    *reinterpret_cast<uint2*>(out) = columns;
    return;
  }
  const uint32_t words[2] = {columns.x, columns.y};
#pragma unroll
  for (int i = 0; i < 4; ++i)
    if (i < count) out[i] = __ushort_as_bfloat16(static_cast<unsigned short>(words[i / 2] >> (16 * (i % 2))));
}

// The two floats a packed bf16x2 holds (low half first).
__device__ __forceinline__ float2 unpack_bf16x2(uint32_t packed) {
  return make_float2(__uint_as_float(packed << 16), __uint_as_float(packed & 0xffff0000u));
}

__device__ __forceinline__ void store_shared_u32(uint32_t smem_address, uint32_t value) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(smem_address), "r"(value) : "memory");
}
__device__ __forceinline__ void store_shared_u16(uint32_t smem_address, uint16_t value) {
  asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(smem_address), "h"(value) : "memory");
}
__device__ __forceinline__ void store_shared_v2(uint32_t smem_address, uint2 value) {
  asm volatile("st.shared.v2.u32 [%0], {%1, %2};\n" ::"r"(smem_address), "r"(value.x), "r"(value.y) : "memory");
}
__device__ __forceinline__ void store_shared_v4(uint32_t smem_address, uint4 value) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_address), "r"(value.x), "r"(value.y),
               "r"(value.z), "r"(value.w)
               : "memory");
}

// ---- wgmma (sm_90a): warpgroup-wide asynchronous MMA reading operands from shared memory. The descriptor and
// the fence / commit / wait protocol are shared with the other Hopper kernels (kernels/cuda/sm90/wgmma.cuh).
using hopper::fence_proxy_async_shared;
using hopper::wgmma_commit;
using hopper::wgmma_desc_advance;
using hopper::wgmma_desc_kmajor_sw128;
using hopper::wgmma_desc_sw128;
using hopper::wgmma_fence;
using hopper::wgmma_fence_operands;
using hopper::wgmma_wait_all;
using hopper::wgmma_wait_pending;

// d[64 x 64] += A[64 x 16] · B[64 x 16]^T (d = A · Bᵀ with accumulate 0), A and B K-major bf16 in shared memory,
// fp32 accumulators. Per thread, d[4j + e] is the mma.sync m16n8 C element e of n-tile j for the warp's 16 rows.
__device__ __forceinline__ void wgmma_m64n64k16_bf16(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                     int accumulate = 1) {
  asm volatile(
      "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      FATHOM_WGMMA_ACC32_OPERANDS
      "}, %32, %33, accumulate, 1, 1, 0, 0;\n}\n"
      : FATHOM_WGMMA_ACC32_CONSTRAINTS(d)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate)
      : "memory");
}

// d[64 x 128] += A[64 x 16] · B[128 x 16]^T (d = A · Bᵀ with accumulate 0), A and B K-major bf16 in shared memory,
// fp32 accumulators; per thread d[4j + e] is the mma.sync m16n8 C element e of n-tile j (j < 16).
__device__ __forceinline__ void wgmma_m64n128k16_bf16(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                      int accumulate = 1) {
  asm volatile(
      "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      FATHOM_WGMMA_ACC64_OPERANDS
      "}, %64, %65, accumulate, 1, 1, 0, 0;\n}\n"
      : FATHOM_WGMMA_ACC64_CONSTRAINTS(d)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate)
      : "memory");
}

// d[64 x 128] += A[64 x 16] · B[16 x 128]: A from registers (per warp the mma.sync m16n8k16 A fragment of its 16
// rows: a0 (g, 2t), a1 (g + 8, 2t), a2 (g, 2t + 8), a3 (g + 8, 2t + 8)), B N-major (transposed) bf16 in shared
// memory, fp32 accumulators; per thread d[4j + e] is the mma.sync m16n8 C element e of n-tile j (j < 16).
__device__ __forceinline__ void wgmma_m64n128k16_bf16_rs_tn(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      FATHOM_WGMMA_ACC64_OPERANDS
      "}, {%64, %65, %66, %67}, %68, accumulate, 1, 1, 1;\n}\n"
      : FATHOM_WGMMA_ACC64_CONSTRAINTS(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1)
      : "memory");
}

// d[64 x 64] (+)= A[64 x 16] · B[64 x 16]^T: A from registers (per warp the mma.sync m16n8k16 A fragment of its 16
// rows, as for wgmma_m64n128k16_bf16_rs_tn), B K-major bf16 in shared memory, fp32 accumulators (accumulate 0
// overwrites d); per thread d[4j + e] is the mma.sync m16n8 C element e of n-tile j (j < 8).
__device__ __forceinline__ void wgmma_m64n64k16_bf16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b,
                                                        int accumulate) {
  asm volatile(
      "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      FATHOM_WGMMA_ACC32_OPERANDS
      "}, {%32, %33, %34, %35}, %36, accumulate, 1, 1, 0;\n}\n"
      : FATHOM_WGMMA_ACC32_CONSTRAINTS(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate)
      : "memory");
}

// d[64 x 256] += A[64 x 16] · B[16 x 256]: A from registers (the mma.sync A fragment of the warp's 16 rows), B N-major
// (transposed) bf16 in shared memory, fp32 accumulators; per thread d[4j + e] is the mma.sync m16n8 C element e of
// n-tile j (j < 32) of the warp's rows.
__device__ __forceinline__ void wgmma_m64n256k16_bf16_rs_tn(float (&d)[128], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      FATHOM_WGMMA_ACC128_OPERANDS
      "}, {%128, %129, %130, %131}, %132, accumulate, 1, 1, 1;\n}\n"
      : FATHOM_WGMMA_ACC128_CONSTRAINTS(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1)
      : "memory");
}

// d[64 x 32] += A[64 x 16] · B[16 x 32], A and B K-major bf16 in shared memory, fp32 accumulators. Per thread,
// d[4j + e] is the mma.sync m16n8 C element e of n-tile j for the warp's 16 rows (warp w of the group: rows 16w..).
__device__ __forceinline__ void wgmma_m64n32k16_bf16(float (&d)[16], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
      FATHOM_WGMMA_ACC16_OPERANDS
      "}, %16, %17, accumulate, 1, 1, 0, 0;\n}\n"
      : FATHOM_WGMMA_ACC16_CONSTRAINTS(d)
      : "l"(desc_a), "l"(desc_b), "r"(1)
      : "memory");
}

// d[64 x 256] += A[64 x 16] · B[16 x 256]: A K-major, B N-major (transposed) bf16 in shared memory, fp32
// accumulators; per thread d[4j + e] is the mma.sync m16n8 C element e of n-tile j (j < 32) of the warp's rows.
__device__ __forceinline__ void wgmma_m64n256k16_bf16_tn(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      FATHOM_WGMMA_ACC128_OPERANDS
      "}, "
      "%128, %129, accumulate, 1, 1, 0, 1;\n}\n"
      : FATHOM_WGMMA_ACC128_CONSTRAINTS(d)
      : "l"(desc_a), "l"(desc_b), "r"(1)
      : "memory");
}

// acc *= alpha per row for an accumulator in the mma m16n8 C layout (acc[4j + e] is row g + 8 (e >> 1) of n-tile j):
// the online softmax's rescale of O. Skipped when every alpha of the warp is exactly 1 (once the running maxima
// settle), which leaves the bits unchanged. The accumulator must not be in flight.
template <int kCount>
__device__ __forceinline__ void rescale_accumulator_rows(float (&acc)[kCount], const float (&alpha)[2]) {
  if (__all_sync(0xffffffffu, alpha[0] == 1.0f && alpha[1] == 1.0f)) return;
#pragma unroll
  for (int j = 0; j < kCount / 4; ++j) {
    acc[4 * j] *= alpha[0];
    acc[4 * j + 1] *= alpha[0];
    acc[4 * j + 2] *= alpha[1];
    acc[4 * j + 3] *= alpha[1];
  }
}

__host__ __device__ constexpr int ceil_div_int(int a, int b) { return (a + b - 1) / b; }

}  // namespace fathom::kernels::cuda::mla_detail
