#pragma once
// Hopper (sm_90a) warpgroup MMA primitives shared by the kernels: shared-memory operand descriptors, the
// fence / commit / wait protocol, and the e4m3 (FP8) MMA shapes the grouped GEMM uses. The bf16 shapes the MLA
// kernels use stay beside them (mla/sm90/mma_primitives.cuh).
//
// Operand layout (128-byte swizzle, K-major): a tile is rows of 128 bytes; 8-row x 128-byte atoms of 1024 bytes;
// 16-byte chunk c of row r sits at chunk (c ^ (r & 7)). TMA's CU_TENSOR_MAP_SWIZZLE_128B writes exactly this for
// a box whose inner extent is 128 bytes, and tiles must start 1024-byte aligned.
#include <cstdint>

// Accumulator operand lists shared by the wgmma wrappers (here and in mla/sm90/mma_primitives.cuh): the asm
// text "%0, ..., %N-1" and the matching read-write constraints "+f"(d[0]) ... "+f"(d[N-1]), in chunks of 16.
#define FATHOM_WGMMA_OPERANDS_0_15 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define FATHOM_WGMMA_OPERANDS_16_31 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FATHOM_WGMMA_OPERANDS_32_47 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define FATHOM_WGMMA_OPERANDS_48_63 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define FATHOM_WGMMA_OPERANDS_64_79 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define FATHOM_WGMMA_OPERANDS_80_95 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define FATHOM_WGMMA_OPERANDS_96_111 \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
#define FATHOM_WGMMA_OPERANDS_112_127 \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define FATHOM_WGMMA_CONSTRAINTS_0_15(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define FATHOM_WGMMA_CONSTRAINTS_16_31(d) \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define FATHOM_WGMMA_CONSTRAINTS_32_47(d) \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
#define FATHOM_WGMMA_CONSTRAINTS_48_63(d) \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define FATHOM_WGMMA_CONSTRAINTS_64_79(d) \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
#define FATHOM_WGMMA_CONSTRAINTS_80_95(d) \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define FATHOM_WGMMA_CONSTRAINTS_96_111(d) \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111])
#define FATHOM_WGMMA_CONSTRAINTS_112_127(d) \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define FATHOM_WGMMA_ACC16_OPERANDS FATHOM_WGMMA_OPERANDS_0_15
#define FATHOM_WGMMA_ACC32_OPERANDS FATHOM_WGMMA_ACC16_OPERANDS ", " FATHOM_WGMMA_OPERANDS_16_31
#define FATHOM_WGMMA_ACC48_OPERANDS FATHOM_WGMMA_ACC32_OPERANDS ", " FATHOM_WGMMA_OPERANDS_32_47
#define FATHOM_WGMMA_ACC64_OPERANDS \
  FATHOM_WGMMA_ACC32_OPERANDS ", " FATHOM_WGMMA_OPERANDS_32_47 ", " FATHOM_WGMMA_OPERANDS_48_63
#define FATHOM_WGMMA_ACC80_OPERANDS FATHOM_WGMMA_ACC64_OPERANDS ", " FATHOM_WGMMA_OPERANDS_64_79
#define FATHOM_WGMMA_ACC96_OPERANDS FATHOM_WGMMA_ACC80_OPERANDS ", " FATHOM_WGMMA_OPERANDS_80_95
#define FATHOM_WGMMA_ACC128_OPERANDS                                                                  \
  FATHOM_WGMMA_ACC64_OPERANDS ", " FATHOM_WGMMA_OPERANDS_64_79 ", " FATHOM_WGMMA_OPERANDS_80_95 ", " \
      FATHOM_WGMMA_OPERANDS_96_111 ", " FATHOM_WGMMA_OPERANDS_112_127
#define FATHOM_WGMMA_ACC16_CONSTRAINTS(d) FATHOM_WGMMA_CONSTRAINTS_0_15(d)
#define FATHOM_WGMMA_ACC32_CONSTRAINTS(d) FATHOM_WGMMA_ACC16_CONSTRAINTS(d), FATHOM_WGMMA_CONSTRAINTS_16_31(d)
#define FATHOM_WGMMA_ACC48_CONSTRAINTS(d) FATHOM_WGMMA_ACC32_CONSTRAINTS(d), FATHOM_WGMMA_CONSTRAINTS_32_47(d)
#define FATHOM_WGMMA_ACC64_CONSTRAINTS(d) \
  FATHOM_WGMMA_ACC32_CONSTRAINTS(d), FATHOM_WGMMA_CONSTRAINTS_32_47(d), FATHOM_WGMMA_CONSTRAINTS_48_63(d)
#define FATHOM_WGMMA_ACC80_CONSTRAINTS(d) FATHOM_WGMMA_ACC64_CONSTRAINTS(d), FATHOM_WGMMA_CONSTRAINTS_64_79(d)
#define FATHOM_WGMMA_ACC96_CONSTRAINTS(d) FATHOM_WGMMA_ACC80_CONSTRAINTS(d), FATHOM_WGMMA_CONSTRAINTS_80_95(d)
#define FATHOM_WGMMA_ACC128_CONSTRAINTS(d)                                                             \
  FATHOM_WGMMA_ACC64_CONSTRAINTS(d), FATHOM_WGMMA_CONSTRAINTS_64_79(d), FATHOM_WGMMA_CONSTRAINTS_80_95(d), \
      FATHOM_WGMMA_CONSTRAINTS_96_111(d), FATHOM_WGMMA_CONSTRAINTS_112_127(d)

namespace fathom::kernels::cuda::hopper {

// Descriptor of an operand in the 128-byte-swizzle layout (1024-aligned regions).
// K-major (no transpose): SBO = 1024 B between 8-row groups, LBO unused (a k-slice of 32 bytes never leaves its
// 128-byte atom); a step of 32 bytes along K inside the atom advances the start address by 32 B.
// MN-major (transposed B, 16-bit types only): LBO = bytes between 64-element blocks along N, SBO = bytes between
// 8-row groups along K.
__device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t smem_address, uint32_t leading_bytes,
                                                     uint32_t stride_bytes) {
  uint64_t desc = static_cast<uint64_t>((smem_address & 0x3FFFFu) >> 4);
  desc |= static_cast<uint64_t>((leading_bytes >> 4) & 0x3FFFu) << 16;
  desc |= static_cast<uint64_t>((stride_bytes >> 4) & 0x3FFFu) << 32;
  desc |= static_cast<uint64_t>(1) << 62;  // 128-byte swizzle
  return desc;
}
__device__ __forceinline__ uint64_t wgmma_desc_kmajor_sw128(uint32_t smem_address) {
  return wgmma_desc_sw128(smem_address, 16, 1024);
}

// The descriptor of the same operand layout `offset_bytes` (a multiple of 16) further on: one 32-bit add instead of
// re-encoding. Exact while the address stays inside the 14-bit field (shared memory is < 256 KB).
__device__ __forceinline__ uint64_t wgmma_desc_advance(uint64_t desc, uint32_t offset_bytes) {
  const uint32_t low = static_cast<uint32_t>(desc) + (offset_bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | low;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Waits until at most kPending of this warpgroup's committed groups are still running (the oldest complete first).
template <int kPending>
__device__ __forceinline__ void wgmma_wait_pending() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Pins accumulator registers in program order around the asynchronous MMAs: the compiler may not move their reads
// above a wait (or their writes below a fence) across this point. Emits no instruction.
template <int kCount>
__device__ __forceinline__ void wgmma_fence_operands(float (&registers)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(registers[i])::"memory");
}
// Orders this thread's generic-proxy shared-memory writes (st.shared, cp.async) before async-proxy reads (wgmma).
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// d[64 x 32] (+)= A[64 x 32] · B[32 x 32]^T, e4m3 operands K-major in shared memory, fp32 accumulators;
// accumulate = false overwrites d. Per thread, d[4j + e] is the mma.sync m16n8 C element e of n-tile j.
__device__ __forceinline__ void wgmma_m64n32k32_e4m3(float (&d)[16], uint64_t desc_a, uint64_t desc_b,
                                                    bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {"
      FATHOM_WGMMA_ACC16_OPERANDS
      "}, %16, %17, p, 1, 1;\n}\n"
      : FATHOM_WGMMA_ACC16_CONSTRAINTS(d)
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate))
      : "memory");
}

// d[64 x 64] (+)= A[64 x 32] · B[64 x 32]^T, e4m3 operands K-major in shared memory, fp32 accumulators;
// accumulate = false overwrites d. Per thread, d[4j + e] is the mma.sync m16n8 C element e of n-tile j.
__device__ __forceinline__ void wgmma_m64n64k32_e4m3(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                    bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
      FATHOM_WGMMA_ACC32_OPERANDS
      "}, %32, %33, p, 1, 1;\n}\n"
      : FATHOM_WGMMA_ACC32_CONSTRAINTS(d)
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate))
      : "memory");
}

// d[64 x 96] (+)= A[64 x 32] · B[96 x 32]^T, e4m3 operands K-major in shared memory, fp32 accumulators;
// accumulate = false overwrites d. Per thread, d[4j + e] is the mma.sync m16n8 C element e of n-tile j.
__device__ __forceinline__ void wgmma_m64n96k32_e4m3(float (&d)[48], uint64_t desc_a, uint64_t desc_b,
                                                    bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n96k32.f32.e4m3.e4m3 {"
      FATHOM_WGMMA_ACC48_OPERANDS
      "}, %48, %49, p, 1, 1;\n}\n"
      : FATHOM_WGMMA_ACC48_CONSTRAINTS(d)
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate))
      : "memory");
}

// d[64 x 128] (+)= A[64 x 32] · B[128 x 32]^T, e4m3 operands K-major in shared memory, fp32 accumulators;
// accumulate = false overwrites d. Per thread, d[4j + e] is the mma.sync m16n8 C element e of n-tile j.
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                    bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
      FATHOM_WGMMA_ACC64_OPERANDS
      "}, %64, %65, p, 1, 1;\n}\n"
      : FATHOM_WGMMA_ACC64_CONSTRAINTS(d)
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate))
      : "memory");
}

// d[64 x 160] (+)= A[64 x 32] · B[160 x 32]^T, e4m3 operands K-major in shared memory, fp32 accumulators;
// accumulate = false overwrites d. Per thread, d[4j + e] is the mma.sync m16n8 C element e of n-tile j.
__device__ __forceinline__ void wgmma_m64n160k32_e4m3(float (&d)[80], uint64_t desc_a, uint64_t desc_b,
                                                     bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %82, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n160k32.f32.e4m3.e4m3 {"
      FATHOM_WGMMA_ACC80_OPERANDS
      "}, %80, %81, p, 1, 1;\n}\n"
      : FATHOM_WGMMA_ACC80_CONSTRAINTS(d)
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate))
      : "memory");
}

// d[64 x 192] (+)= A[64 x 32] · B[192 x 32]^T, e4m3 operands K-major in shared memory, fp32 accumulators;
// accumulate = false overwrites d. Per thread, d[4j + e] is the mma.sync m16n8 C element e of n-tile j.
__device__ __forceinline__ void wgmma_m64n192k32_e4m3(float (&d)[96], uint64_t desc_a, uint64_t desc_b,
                                                     bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 {"
      FATHOM_WGMMA_ACC96_OPERANDS
      "}, %96, %97, p, 1, 1;\n}\n"
      : FATHOM_WGMMA_ACC96_CONSTRAINTS(d)
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate))
      : "memory");
}

// The shape for a compile-time token count (the N of the grouped GEMM's tile).
template <int kN>
__device__ __forceinline__ void wgmma_m64k32_e4m3(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b,
                                                  bool accumulate) {
  static_assert(kN % 32 == 0 && kN >= 32 && kN <= 192, "e4m3 wgmma shapes provided: n32 to n192 in steps of 32");
  if constexpr (kN == 32) {
    wgmma_m64n32k32_e4m3(d, desc_a, desc_b, accumulate);
  } else if constexpr (kN == 64) {
    wgmma_m64n64k32_e4m3(d, desc_a, desc_b, accumulate);
  } else if constexpr (kN == 96) {
    wgmma_m64n96k32_e4m3(d, desc_a, desc_b, accumulate);
  } else if constexpr (kN == 128) {
    wgmma_m64n128k32_e4m3(d, desc_a, desc_b, accumulate);
  } else if constexpr (kN == 160) {
    wgmma_m64n160k32_e4m3(d, desc_a, desc_b, accumulate);
  } else {
    wgmma_m64n192k32_e4m3(d, desc_a, desc_b, accumulate);
  }
}

}  // namespace fathom::kernels::cuda::hopper
