#include "executor/step_executor.h"

#include "core/error.h"
#include "sampling/sampler.h"

namespace fathom::executor {

StepExecutor::StepExecutor(LogitsSource& source, ThreadPool* sampling_pool) : source_(source), sampling_pool_(sampling_pool) {}

StepOutput StepExecutor::execute(StepBatch& batch) {
  std::vector<ForwardChunk> chunks;
  chunks.reserve(batch.sequences.size());
  std::vector<size_t> sampled;  // sequences that sample, in order = logits rows
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    SequenceStep& sequence = batch.sequences[i];
    FATHOM_CHECK(!sequence.new_tokens.empty(), "step executor: sequence " << sequence.sequence_id << " has no new tokens");
    if (sequence.last_token_from_previous_step) {
      auto found = previous_tokens_.find(sequence.sequence_id);
      FATHOM_CHECK(found != previous_tokens_.end(), "step executor: sequence " << sequence.sequence_id
                                                    << " expects a token from the previous step, which sampled none for it");
      sequence.new_tokens.back() = found->second;
      sequence.last_token_from_previous_step = false;
    }
    FATHOM_CHECK(!sequence.sample || sequence.sampling_state != nullptr,
                 "step executor: sequence " << sequence.sequence_id << " samples without a sampling state");
    chunks.push_back(ForwardChunk{sequence.new_tokens, sequence.num_cached, sequence.kv_slots, sequence.sample});
    if (sequence.sample) sampled.push_back(i);
  }
  std::vector<float> logits = source_.forward(chunks);  // [sampled, V]
  const int64_t vocab = source_.vocab_size();
  FATHOM_CHECK(static_cast<int64_t>(logits.size()) == static_cast<int64_t>(sampled.size()) * vocab,
               "step executor: the model returned " << logits.size() << " logits for " << sampled.size() << " rows of " << vocab);
  StepOutput output;
  output.tokens.resize(batch.sequences.size());
  auto sample_rows = [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      SequenceStep& sequence = batch.sequences[sampled[static_cast<size_t>(row)]];
      output.tokens[sampled[static_cast<size_t>(row)]] =
          sampling::sample_token(logits.data() + row * vocab, vocab, sequence.sampling, *sequence.sampling_state);
    }
  };
  if (sampling_pool_ && sampled.size() > 1) sampling_pool_->parallel_for(static_cast<int64_t>(sampled.size()), sample_rows);
  else sample_rows(0, static_cast<int64_t>(sampled.size()));
  previous_tokens_.clear();
  for (size_t index : sampled) previous_tokens_[batch.sequences[index].sequence_id] = output.tokens[index]->token_id;
  return output;
}

}  // namespace fathom::executor
