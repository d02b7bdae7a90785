#pragma once
// One sequence prefilled through a ModelBackend in chunks, with the MTP module run behind each chunk: the prefill of
// `fathom logits` / `fathom generate --device cuda` (model::compute_sequence_logits, on the CPU model, is its reference).
#include <cstdint>
#include <vector>

#include "executor/model_backend.h"

namespace fathom::executor {

struct SequencePrefillOptions {
  int64_t chunk_size = 0;  // tokens per forward; 0 = the whole sequence in one
  bool all_rows = true;    // logits of every position, or of the last one only
  bool with_mtp = false;   // also the MTP module's logits (the backend must have one)
};

struct SequencePrefillResult {
  std::vector<float> logits;      // [T or 1, V]
  std::vector<float> mtp_logits;  // [T-1, V] with_mtp: row p (reading token p+1 and the main hidden state at p)
                                  // predicts token p+2
};

// Prefills `ids` at KV slots `slots` [ids.size()] (positions from 0). With MTP, each main chunk [begin, end) is
// followed by an MTP forward over positions [begin, min(end, T-1)) carrying tokens begin+1 .., reading that chunk's
// hidden rows, so the MTP's KV cache covers what its later chunks attend to.
SequencePrefillResult prefill_sequence(ModelBackend& backend, const std::vector<int32_t>& ids,
                                       const std::vector<int32_t>& slots, const SequencePrefillOptions& options);

}  // namespace fathom::executor
