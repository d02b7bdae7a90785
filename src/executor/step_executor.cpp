#include "executor/step_executor.h"

#include <iterator>

#include "core/error.h"
#include "sampling/sampler.h"

namespace fathom::executor {

StepExecutor::StepExecutor(LogitsSource& source, ThreadPool* sampling_pool) : source_(source), sampling_pool_(sampling_pool) {}

StepOutput StepExecutor::execute(StepBatch& batch) {
  std::vector<ForwardChunk> chunks;
  chunks.reserve(batch.sequences.size());
  const bool device_sampling = source_.samples_on_device();
  std::vector<size_t> host_sampled, device_sampled;  // sequences sampled on the host (= logits rows) / on the device
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
    ForwardChunk chunk{sequence.new_tokens, sequence.num_cached, sequence.kv_slots, sequence.sample,
                       sequence.extends_prompt, std::nullopt};
    if (!sequence.scored_targets.empty()) {
      const int64_t rows = static_cast<int64_t>(sequence.scored_targets.size());
      FATHOM_CHECK(sequence.scored_row_begin >= 0 &&
                       sequence.scored_row_begin + rows <= static_cast<int64_t>(sequence.new_tokens.size()),
                   "step executor: sequence " << sequence.sequence_id << " scores rows [" << sequence.scored_row_begin
                                              << ", " << sequence.scored_row_begin + rows << ") of "
                                              << sequence.new_tokens.size() << " new tokens");
      chunk.scored_row_begin = sequence.scored_row_begin;
      chunk.scored_targets = sequence.scored_targets;
      chunk.scored_top_n = sequence.scored_top_n;
    }
    if (sequence.sample) {
      if (device_sampling && sampling::device_can_sample(sequence.sampling, *sequence.sampling_state)) {
        const std::string problem = sampling::validate(sequence.sampling);
        FATHOM_CHECK(problem.empty(), "sampling: " << problem);
        chunk.device_sampling = sampling::device_sampling_row(sequence.sampling, *sequence.sampling_state);
        device_sampled.push_back(i);
      } else {
        host_sampled.push_back(i);
      }
    }
    chunks.push_back(std::move(chunk));
  }
  ForwardOutput forward = source_.forward_sampled(chunks);  // logits [host_sampled, V], samples [device_sampled]
  std::vector<float>& logits = forward.logits;
  const int64_t vocab = source_.vocab_size();
  int64_t num_scored = 0;
  for (const ForwardChunk& chunk : chunks) num_scored += chunk.num_scored_rows();
  FATHOM_CHECK(static_cast<int64_t>(forward.scored.size()) == num_scored,
               "step executor: the model returned " << forward.scored.size() << " scored rows for " << num_scored);
  FATHOM_CHECK(static_cast<int64_t>(logits.size()) == static_cast<int64_t>(host_sampled.size()) * vocab &&
                   forward.samples.size() == device_sampled.size(),
               "step executor: the model returned " << logits.size() << " logits for " << host_sampled.size() << " rows of "
                                                    << vocab << " and " << forward.samples.size() << " samples for "
                                                    << device_sampled.size());
  StepOutput output;
  output.tokens.resize(batch.sequences.size());
  for (size_t d = 0; d < device_sampled.size(); ++d) {
    SequenceStep& sequence = batch.sequences[device_sampled[d]];
    sampling::SampledToken token = forward.samples[d];
    if (!sequence.sampling.logprobs) token.logprob = 0.0f;
    sequence.sampling_state->record(token.token_id);
    output.tokens[device_sampled[d]] = std::move(token);
  }
  auto sample_rows = [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      SequenceStep& sequence = batch.sequences[host_sampled[static_cast<size_t>(row)]];
      output.tokens[host_sampled[static_cast<size_t>(row)]] =
          sampling::sample_token(logits.data() + row * vocab, vocab, sequence.sampling,
                                 *sequence.sampling_state);
    }
  };
  if (sampling_pool_ && host_sampled.size() > 1) sampling_pool_->parallel_for(static_cast<int64_t>(host_sampled.size()), sample_rows);
  else sample_rows(0, static_cast<int64_t>(host_sampled.size()));
  output.scored.resize(batch.sequences.size());
  auto scored = forward.scored.begin();
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const auto rows = static_cast<std::ptrdiff_t>(batch.sequences[i].scored_targets.size());
    output.scored[i].assign(std::make_move_iterator(scored), std::make_move_iterator(scored + rows));
    scored += rows;
  }
  previous_tokens_.clear();
  for (const std::vector<size_t>* sampled : {&host_sampled, &device_sampled}) {
    for (size_t index : *sampled) previous_tokens_[batch.sequences[index].sequence_id] = output.tokens[index]->token_id;
  }
  return output;
}

}  // namespace fathom::executor
