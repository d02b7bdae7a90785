#include "executor/model_runner.h"

#include <algorithm>

#include "core/error.h"

namespace fathom::executor {

ModelRunner::ModelRunner(const ModelRunnerConfig& config) : ModelRunner(make_model_backend(config)) {}

ModelRunner::ModelRunner(std::unique_ptr<ModelBackend> backend) : backend_(std::move(backend)) {
  host_pool_ = backend_->host_pool();
  if (!host_pool_) {
    own_pool_ = std::make_unique<ThreadPool>(0);
    host_pool_ = own_pool_.get();
  }
}

std::vector<float> ModelRunner::forward(const std::vector<ForwardChunk>& chunks) {
  const int64_t vocab = vocab_size();
  // Logit rows of the chunks that need them, in chunk order: [num_rows, V].
  std::vector<int64_t> row_of_chunk(chunks.size(), -1);
  int64_t num_rows = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (chunks[i].needs_logits) row_of_chunk[i] = num_rows++;
  }
  std::vector<float> logits(static_cast<size_t>(num_rows * vocab));
  for (const bool decode_group : {true, false}) {
    model::ForwardBatch batch;
    batch.attention_form = decode_group ? model::AttentionForm::kAbsorbed : model::AttentionForm::kExpanded;
    std::vector<size_t> members;
    for (size_t i = 0; i < chunks.size(); ++i) {
      const ForwardChunk& chunk = chunks[i];
      if ((chunk.new_tokens.size() == 1) != decode_group) continue;
      FATHOM_CHECK(static_cast<int64_t>(chunk.kv_slots.size()) >= chunk.num_cached + static_cast<int64_t>(chunk.new_tokens.size()),
                   "model runner: chunk " << i << " has " << chunk.kv_slots.size() << " KV slots for "
                                          << chunk.num_cached + static_cast<int64_t>(chunk.new_tokens.size()) << " positions");
      batch.add_sequence(std::vector<int32_t>(chunk.new_tokens.begin(), chunk.new_tokens.end()), chunk.num_cached,
                         chunk.kv_slots.data());
      members.push_back(i);
    }
    if (members.empty()) continue;
    std::vector<int64_t> logit_rows;  // token rows of this forward whose logits are returned
    std::vector<int64_t> destination;
    for (size_t m = 0; m < members.size(); ++m) {
      if (row_of_chunk[members[m]] < 0) continue;
      const model::SequenceChunk& sequence = batch.sequences[m];
      logit_rows.push_back(sequence.token_begin + sequence.num_tokens - 1);
      destination.push_back(row_of_chunk[members[m]]);
    }
    std::vector<float> group_logits = backend_->forward(batch, logit_rows);  // [logit_rows, V]
    for (size_t r = 0; r < destination.size(); ++r) {
      std::copy_n(group_logits.begin() + static_cast<int64_t>(r) * vocab, vocab, logits.begin() + destination[r] * vocab);
    }
  }
  return logits;
}

}  // namespace fathom::executor
