#pragma once
// Hopper (sm_90a) warpgroup MMA primitives shared by the kernels: shared-memory operand descriptors, the
// fence / commit / wait protocol, and the e4m3 (FP8) MMA shapes the grouped GEMM uses. The bf16 shapes the MLA
// kernels use stay beside them (mla/sm90/mma_primitives.cuh).
//
// Operand layout (128-byte swizzle, K-major): a tile is rows of 128 bytes; 8-row x 128-byte atoms of 1024 bytes;
// 16-byte chunk c of row r sits at chunk (c ^ (r & 7)). TMA's CU_TENSOR_MAP_SWIZZLE_128B writes exactly this for
// a box whose inner extent is 128 bytes, and tiles must start 1024-byte aligned.
#include <cstdint>

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

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
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

// d[64 x 64] (+)= A[64 x 32] · B[64 x 32]^T, e4m3 operands K-major in shared memory, fp32 accumulators;
// accumulate = false overwrites d. Per thread, d[4j + e] is the mma.sync m16n8 C element e of n-tile j.
__device__ __forceinline__ void wgmma_m64n64k32_e4m3(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                    bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
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
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate))
      : "memory");
}

// The shape for a compile-time token count (the N of the grouped GEMM's tile).
template <int kN>
__device__ __forceinline__ void wgmma_m64k32_e4m3(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b,
                                                  bool accumulate) {
  static_assert(kN == 64 || kN == 128, "e4m3 wgmma shapes provided: n64, n128");
  if constexpr (kN == 64) {
    wgmma_m64n64k32_e4m3(d, desc_a, desc_b, accumulate);
  } else {
    wgmma_m64n128k32_e4m3(d, desc_a, desc_b, accumulate);
  }
}

}  // namespace fathom::kernels::cuda::hopper
