#pragma once
// Token embedding lookup: bf16 table rows gathered by token id, never reading out of bounds.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace fathom::kernels::cuda {

// table:      [vocab, hidden] bf16 (device)
// token_ids:  [num_tokens] int32 (device)
// out:        [num_tokens, hidden] bf16 (device)
// error_flag: int32 (device) or nullptr. An id outside [0, vocab) is clamped into range (its row is still written)
//             and sets *error_flag = 1; the kernel never clears the flag: the host zeroes it at setup and reads it
//             when convenient (e.g. after the step's graph), so no sync happens here.
void embedding_gather_bf16(const __nv_bfloat16* table, int64_t vocab, int64_t hidden, const int32_t* token_ids,
                           int64_t num_tokens, __nv_bfloat16* out, int32_t* error_flag, cudaStream_t stream);

}  // namespace fathom::kernels::cuda
