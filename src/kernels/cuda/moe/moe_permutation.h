#pragma once
// Token permutation for grouped expert GEMMs: rows routed to each expert are laid out contiguously,
// expert by expert, each expert's segment padded to a multiple of `row_alignment` rows.
// Within a segment rows are in (token, slot) order, so the layout is a pure function of expert_ids.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace fathom::kernels::cuda {

struct MoePermutationShape {
  int64_t num_tokens = 0;      // T
  int32_t top_k = 1;           // k, slots per token
  int32_t num_experts = 0;     // E, at most 512
  int32_t row_alignment = 1;   // M_ALIGN: each expert's segment length is rounded up to a multiple of this (>= 1)
};

// Rows the permuted buffers must have for any routing of this shape:
// T*k + min(E, T*k) * (M_ALIGN - 1). Buffers are sized with this once (static shapes for graph capture).
int64_t moe_max_permuted_rows(const MoePermutationShape& shape);

// Scratch the build needs (device memory, any contents); 0 when T*k fits one block.
size_t moe_permutation_workspace_bytes(const MoePermutationShape& shape);

// Outputs of moe_build_permutation (device pointers, every element written on each call).
struct MoePermutation {
  int32_t* expert_offsets = nullptr;     // [E + 1] first row of expert e's padded segment; [E] = padded row total
  int32_t* expert_counts = nullptr;      // [E] rows routed to expert e (before padding)
  int32_t* row_token_slot = nullptr;     // [max_rows] token * k + slot of each permuted row; -1 for padding rows
  int32_t* row_expert = nullptr;         // [max_rows] expert of each routed row; -1 for padding rows and rows past the total
  int32_t* token_slot_row = nullptr;     // [T * k] permuted row of each (token, slot); -1 if its expert id is invalid
  int32_t* active_experts = nullptr;     // [E] optional: the experts with rows, ascending, then -1 (decode GEMM grids)
};

// expert_ids: [T, k] int32 (device), values in [0, E) (others are dropped: token_slot_row = -1).
// workspace: moe_permutation_workspace_bytes(shape) bytes (device).
// Deterministic (integer arithmetic only), no host sync, no allocation: one launch when T*k <= 4096, else three.
void moe_build_permutation(const int32_t* expert_ids, const MoePermutationShape& shape, void* workspace,
                           size_t workspace_bytes, const MoePermutation& out, cudaStream_t stream);

}  // namespace fathom::kernels::cuda
