#pragma once
// Programmatic dependent launch (Hopper): a kernel launched by launch_programmatic() may be scheduled while the
// kernel before it in the stream (or the CUDA graph captured from it) is still running, which hides the launch gap
// of the ~100 short kernels of a decode step. Contract of every kernel launched this way: every thread calls
// wait_for_predecessor() before it reads or writes memory that another kernel writes (read-only weights may be
// read before), so the results are those of an ordinary launch. The wait returns once the predecessor grid has
// completed and its writes are visible; as the predecessor itself waited for its own predecessor before
// completing, everything earlier in the stream has completed too.
#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda/cuda_check.h"

namespace fathom::kernels::cuda {

// Blocks until the preceding grid has completed and its memory is visible (returns at once without a PDL launch).
__device__ __forceinline__ void wait_for_predecessor() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Lets the next kernel in the stream be scheduled once every CTA of this grid has called it (or exited). Call it
// only after wait_for_predecessor(): kernels that read inputs written two launches back before their own wait
// (Fp8GroupedGemmArgs::experts_settled) rely on every kernel before them having waited before letting them start.
__device__ __forceinline__ void allow_successor_launch() { asm volatile("griddepcontrol.launch_dependents;" :::); }

// The usual prologue of a kernel launched programmatically: wait, then let the successor be scheduled (one
// kernel ahead: the successor's CTAs fill the SMs this grid leaves free and run their own prologue).
__device__ __forceinline__ void begin_dependent_kernel() {
  wait_for_predecessor();
  allow_successor_launch();
}

// kernel<<<grid, block, shared_bytes, stream>>>(args...) with programmatic stream serialization allowed; the kernel
// must keep the contract above. Launch errors throw with the call site's expression and file:line.
template <typename... Params, typename... Args>
void launch_programmatic(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                         Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  FATHOM_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(std::forward<Args>(args))...));
}

}  // namespace fathom::kernels::cuda
