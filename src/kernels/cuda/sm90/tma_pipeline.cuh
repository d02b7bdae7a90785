#pragma once
// Hopper (sm_90a) producer/consumer pipeline primitives: shared-memory mbarriers, TMA tile loads that complete
// on an mbarrier, warpgroup register reallocation and named barriers. A pipeline stage is guarded by two
// barriers: `full` (the producer's TMA bytes and stores have landed) and `empty` (every consumer is done with it);
// waits name the phase parity they expect, starting at 0 for `full` and 1 for `empty` (a fresh barrier counts as
// having completed the phase before phase 0, so the producer's first pass does not wait).
#include <cuda.h>

#include <cstdint>

namespace fathom::kernels::cuda::hopper {

__device__ __forceinline__ uint32_t shared_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

__device__ __forceinline__ void mbarrier_init(uint64_t* barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(barrier)), "r"(arrivals) : "memory");
}

// Makes barrier initialisation visible to the async proxy (TMA) before any copy names the barrier.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(barrier)) : "memory");
}

// One arrival that also announces `bytes` of TMA transactions the phase must wait for.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(barrier)), "r"(bytes)
               : "memory");
}

// Spins until the phase with parity `parity` has completed (acquire: its writes are visible afterwards).
__device__ __forceinline__ void mbarrier_wait(uint64_t* barrier, uint32_t parity) {
  const uint32_t address = shared_address(barrier);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(address), "r"(parity)
        : "memory");
  } while (!done);
}

// TMA: the box at (inner, outer) of a 2-D tensor map into shared memory; its bytes complete on `barrier`.
// Elements of the box outside the tensor are written as zeros (and still count as transaction bytes). The inner
// coordinate times the element size must be a multiple of 16 bytes: any other start faults with an illegal
// instruction (H100 probe, bench/RESULTS.md twenty-first session; tma_load_3d not probed, its callers start at 0 or
// 128 bytes).
__device__ __forceinline__ void tma_load_2d(void* smem_destination, const CUtensorMap* map, int32_t inner,
                                            int32_t outer, uint64_t* barrier) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          shared_address(smem_destination)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(inner), "r"(outer), "r"(shared_address(barrier))
      : "memory");
}

// TMA: the box at (inner, mid, outer) of a 3-D tensor map into shared memory; its bytes complete on `barrier`.
__device__ __forceinline__ void tma_load_3d(void* smem_destination, const CUtensorMap* map, int32_t inner,
                                            int32_t mid, int32_t outer, uint64_t* barrier) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::
          "r"(shared_address(smem_destination)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(inner), "r"(mid), "r"(outer), "r"(shared_address(barrier))
      : "memory");
}

// One arrival on `barrier` once every cp.async this thread issued before has landed (not counted in advance:
// the barrier's arrival count includes it).
__device__ __forceinline__ void cp_async_arrive_on(uint64_t* barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(shared_address(barrier)) : "memory");
}

// TMA: asks L2 for the box at (inner, outer) of a 2-D tensor map (no shared memory, no completion to wait for).
__device__ __forceinline__ void tma_prefetch_2d_l2(const CUtensorMap* map, int32_t inner, int32_t outer) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];\n" ::"l"(reinterpret_cast<uint64_t>(map)),
               "r"(inner), "r"(outer)
               : "memory");
}

// Bulk copy of `bytes` (a multiple of 16; both addresses 16-byte aligned) from shared to global memory by one thread,
// in the thread's bulk group; the source is read asynchronously (the generic writes to it fenced first:
// fence_proxy_async_shared), so it must stay unchanged until bulk_store_wait_read.
__device__ __forceinline__ void bulk_store_shared_to_global(void* global_destination, const void* smem_source, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(global_destination),
               "r"(shared_address(smem_source)), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// Waits until this thread's bulk stores have read their shared-memory sources (before the CTA may exit or reuse them).
__device__ __forceinline__ void bulk_store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }

__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Warpgroup register reallocation: producers give registers back, consumers take them (all 128 threads execute).
template <int kRegisters>
__device__ __forceinline__ void warpgroup_release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void warpgroup_claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// Barrier over `threads` threads (a multiple of 32) on hardware barrier `id` (1..15; 0 is __syncthreads).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Arrival without waiting on barrier `id`: the producer side of a barrier whose consumers bar.sync (the two sides'
// thread counts sum to `threads`).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace fathom::kernels::cuda::hopper
