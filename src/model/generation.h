#pragma once
// Single-sequence drivers over DeepseekV3Model: full-sequence logits (with MTP) and greedy generation.
#include <vector>

#include "model/deepseek_v3_model.h"

namespace fathom::model {

struct SequenceLogits {
  std::vector<float> logits;      // [T, V]
  std::vector<float> mtp_logits;  // [T-1, V] when requested (MTP logits at position i predict token i+2)
};

struct PrefillOptions {
  int64_t chunk_size = 0;                      // 0 = the whole prompt in one forward; else chunked prefill
  AttentionForm attention_form = AttentionForm::kAuto;
};

// Runs `token_ids` through the model (and the MTP module when with_mtp) with fresh caches.
SequenceLogits compute_sequence_logits(DeepseekV3Model& model, const std::vector<int32_t>& token_ids, bool with_mtp,
                                       const ExecutionContext& context, const PrefillOptions& prefill = {});

struct GreedyOptions {
  int64_t max_new_tokens = 16;
  bool ignore_eos = false;     // otherwise stop after emitting one of the config's eos ids
  PrefillOptions prefill;
};

// Prefill then one-token decode steps (absorbed attention); returns the new tokens only.
std::vector<int32_t> greedy_generate(DeepseekV3Model& model, const std::vector<int32_t>& prompt,
                                     const GreedyOptions& options, const ExecutionContext& context);

// Index of the largest value (the lowest index on ties).
int32_t argmax(const float* values, int64_t count);

}  // namespace fathom::model
