#include "executor/model_runner.h"

#include <algorithm>

#include "core/error.h"

namespace fathom::executor {

ModelRunner::ModelRunner(const ModelRunnerConfig& config) : loaded_(model::load_model(config.load)) {
  FATHOM_CHECK(config.num_kv_slots > 0, "model runner: the KV cache needs a positive number of slots, got " << config.num_kv_slots);
  model_ = std::make_unique<model::DeepseekV3Model>(loaded_.config, loaded_.weights);
  cache_ = std::make_unique<kv_cache::LatentKvCache>(model_->num_cache_layers(), config.num_kv_slots, model_->cache_row_dim());
  pool_ = std::make_unique<ThreadPool>(config.num_threads);
  context_ = model::ExecutionContext{pool_.get(), config.mode};
}

std::vector<float> ModelRunner::forward(const std::vector<ForwardChunk>& chunks) {
  const int64_t dim = loaded_.config.hidden_size;
  // Last-token hidden rows of the chunks that need logits, in chunk order: [num_rows, H].
  std::vector<int64_t> row_of_chunk(chunks.size(), -1);
  int64_t num_rows = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (chunks[i].needs_logits) row_of_chunk[i] = num_rows++;
  }
  std::vector<float> last_hidden(static_cast<size_t>(num_rows * dim));
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
    std::vector<float> hidden = model_->forward(batch, *cache_, context_);  // [batch tokens, H]
    for (size_t m = 0; m < members.size(); ++m) {
      const int64_t row = row_of_chunk[members[m]];
      if (row < 0) continue;
      const model::SequenceChunk& sequence = batch.sequences[m];
      const float* source = hidden.data() + (sequence.token_begin + sequence.num_tokens - 1) * dim;
      std::copy(source, source + dim, last_hidden.data() + row * dim);
    }
  }
  if (num_rows == 0) return {};
  return model_->compute_logits(last_hidden.data(), num_rows, context_);  // [num_rows, V]
}

}  // namespace fathom::executor
