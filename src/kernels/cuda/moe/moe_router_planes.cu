#include "kernels/cuda/moe/moe_router_planes.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/norm/bf16x3_split.cuh"
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per kVector consecutive logits of one token (experts % kVector == 0 for kVector 4).
template <int kVector>
__global__ void __launch_bounds__(kThreads)
    sum_planes_kernel(const float* __restrict__ plane_logits,  // [tokens, 3, experts]
                      int64_t tokens, int64_t experts,
                      float* __restrict__ logits) {           // [tokens, experts]
  begin_dependent_kernel();
  const int64_t vectors_per_token = experts / kVector;
  const int64_t index = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (index >= tokens * vectors_per_token) return;
  const int64_t token = index / vectors_per_token, column = index % vectors_per_token * kVector;
  const float* planes = plane_logits + token * kBf16SplitPlanes * experts + column;
  float* out = logits + token * experts + column;
  if constexpr (kVector == 4) {
    const float4 hi = *reinterpret_cast<const float4*>(planes);
    const float4 mid = *reinterpret_cast<const float4*>(planes + experts);
    const float4 lo = *reinterpret_cast<const float4*>(planes + 2 * experts);
    *reinterpret_cast<float4*>(out) =
        make_float4(__fadd_rn(__fadd_rn(hi.x, mid.x), lo.x), __fadd_rn(__fadd_rn(hi.y, mid.y), lo.y),
                    __fadd_rn(__fadd_rn(hi.z, mid.z), lo.z), __fadd_rn(__fadd_rn(hi.w, mid.w), lo.w));
  } else {
    *out = __fadd_rn(__fadd_rn(planes[0], planes[experts]), planes[2 * experts]);
  }
}

}  // namespace

void moe_router_sum_planes(const float* plane_logits, int64_t tokens, int64_t experts, float* logits,
                           cudaStream_t stream) {
  FATHOM_CHECK(tokens >= 0 && experts >= 1,
               "moe_router_sum_planes: tokens " << tokens << ", experts " << experts);
  FATHOM_CHECK(tokens == 0 || (plane_logits != nullptr && logits != nullptr),
               "moe_router_sum_planes: null pointer (plane_logits " << plane_logits << ", logits " << logits
                                                                    << ", tokens " << tokens << ")");
  if (tokens == 0) return;
  const bool vector4 = experts % 4 == 0 && reinterpret_cast<uintptr_t>(plane_logits) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(logits) % 16 == 0;
  const int64_t threads = tokens * (vector4 ? experts / 4 : experts);
  const int64_t blocks = (threads + kThreads - 1) / kThreads;
  FATHOM_CHECK(blocks <= int64_t{0x7fffffff},
               "moe_router_sum_planes: " << tokens << " x " << experts << " logits exceed one launch");
  const dim3 grid(static_cast<unsigned>(blocks));
  if (vector4) {
    launch_programmatic(sum_planes_kernel<4>, grid, dim3(kThreads), 0, stream, plane_logits, tokens, experts, logits);
  } else {
    launch_programmatic(sum_planes_kernel<1>, grid, dim3(kThreads), 0, stream, plane_logits, tokens, experts, logits);
  }
}

}  // namespace fathom::kernels::cuda
