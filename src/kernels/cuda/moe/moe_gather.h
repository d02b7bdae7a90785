#pragma once
// Gather of per-token rows into the permuted (expert-grouped) order built by moe_build_permutation.
#include <cuda_runtime.h>

#include <cstdint>

namespace fathom::kernels::cuda {

// src:            [T, row_bytes] (device), e.g. bf16 hidden rows (row_bytes = 2H), e4m3 rows (H) or their scales (4 * H/128)
// token_slot_row: [T * k] int32 (device), from MoePermutation; entries < 0 are skipped
// dst:            [max_rows, row_bytes] (device); row token_slot_row[t*k+s] receives src row t.
//                 Padding rows are not written.
// Each source row is read once and written k times; 16-byte accesses when row_bytes and both pointers allow.
void moe_gather_rows(const void* src, int64_t num_tokens, int32_t top_k, int64_t row_bytes,
                     const int32_t* token_slot_row, void* dst, cudaStream_t stream);

}  // namespace fathom::kernels::cuda
