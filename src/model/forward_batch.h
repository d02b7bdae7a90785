#pragma once
// What one forward pass computes: new tokens of several sequences, each extending its cached prefix.
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "core/trace.h"
#include "kernels/weight_matrix.h"

namespace fathom::model {

struct SequenceChunk {
  int64_t token_begin = 0;        // index of the chunk's first token in ForwardBatch::token_ids
  int64_t num_tokens = 0;         // new tokens, at positions [num_cached, num_cached + num_tokens)
  int64_t num_cached = 0;         // prefix already in the KV cache
  const int32_t* kv_slots = nullptr;  // [num_cached + num_tokens] cache slot of every position
};

// How attention is computed. Both are exact; kAuto picks absorbed for pure decode (one new token per sequence).
enum class AttentionForm { kAuto, kExpanded, kAbsorbed };

struct ForwardBatch {
  std::vector<int32_t> token_ids;   // [num_tokens]
  std::vector<int32_t> positions;   // [num_tokens]
  std::vector<SequenceChunk> sequences;
  AttentionForm attention_form = AttentionForm::kAuto;

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  // Appends a sequence chunk; positions are filled from num_cached.
  void add_sequence(const std::vector<int32_t>& new_tokens, int64_t num_cached, const int32_t* kv_slots);
  bool is_pure_decode() const;
};

// Per-call execution resources: the thread pool, the numeric mode of the linear layers, and an optional
// recorder of per-layer / per-op spans (--profile).
struct ExecutionContext {
  ThreadPool* pool = nullptr;
  kernels::NumericMode mode = kernels::NumericMode::kExact;
  TraceRecorder* trace = nullptr;
};

}  // namespace fathom::model
