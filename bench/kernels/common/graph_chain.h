#pragma once
// Per-launch time of a kernel inside a captured CUDA graph chain, as a decode step runs it (launch gaps amortized,
// programmatic launches overlapping their predecessor's tail).
#include <cuda_runtime.h>

#include "kernels/common/gpu_timer.h"
#include "kernels/cuda/cuda_check.h"

namespace fathom::bench {

// Milliseconds per launch inside a captured CUDA graph of kChain launches (median of 20 graph replays / kChain).
// one_launch(i, stream) must pick operand copy i so consecutive launches miss L2 where a cold L2 is wanted.
template <typename OneLaunch>
double graph_ms_per_launch(const OneLaunch& one_launch) {
  constexpr int kChain = 20;
  cudaStream_t stream;
  FATHOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t graph_exec;
  FATHOM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kChain; ++i) one_launch(i, stream);
  FATHOM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  FATHOM_CUDA_CHECK(cudaGraphInstantiate(&graph_exec, graph, 0));
  const double ms = median_ms([&](int) { FATHOM_CUDA_CHECK(cudaGraphLaunch(graph_exec, stream)); }, 3, 20, stream) /
                    kChain;
  FATHOM_CUDA_CHECK(cudaGraphExecDestroy(graph_exec));
  FATHOM_CUDA_CHECK(cudaGraphDestroy(graph));
  FATHOM_CUDA_CHECK(cudaStreamDestroy(stream));
  return ms;
}

}  // namespace fathom::bench
