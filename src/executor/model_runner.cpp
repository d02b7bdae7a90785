#include "executor/model_runner.h"

#include <algorithm>

#include "core/error.h"
#include "executor/step_batch.h"
#include "sampling/sampler.h"

namespace fathom::executor {

ModelRunner::ModelRunner(const ModelRunnerConfig& config) : ModelRunner(make_model_backend(config), config.deterministic) {}

ModelRunner::ModelRunner(std::unique_ptr<ModelBackend> backend, bool deterministic)
    : backend_(std::move(backend)), backend_deterministic_(deterministic) {
  host_pool_ = backend_->host_pool();
  if (!host_pool_) {
    own_pool_ = std::make_unique<ThreadPool>(0);
    host_pool_ = own_pool_.get();
  }
}

std::vector<float> ModelRunner::forward(const std::vector<ForwardChunk>& chunks) {
  for (const ForwardChunk& chunk : chunks) FATHOM_CHECK(!chunk.device_sampling, "model runner: forward() takes no device sampling");
  return forward_sampled(chunks).logits;
}

ForwardOutput ModelRunner::forward_sampled(const std::vector<ForwardChunk>& chunks) {
  const int64_t vocab = vocab_size();
  const bool on_device = backend_->samples_on_device();
  // Output slots in chunk order: host logits rows, and device samples.
  std::vector<int64_t> row_of_chunk(chunks.size(), -1), sample_of_chunk(chunks.size(), -1);
  int64_t num_rows = 0, num_samples = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (!chunks[i].needs_logits) continue;
    if (chunks[i].device_sampling) sample_of_chunk[i] = num_samples++;
    else row_of_chunk[i] = num_rows++;
  }
  FATHOM_CHECK(num_samples == 0 || on_device, "model runner: the backend does not sample on the device");
  // Scored rows (prompt logprobs) of chunk i start at entry scored_offset[i] of output.scored.
  std::vector<int64_t> scored_offset(chunks.size(), 0);
  int64_t num_scored = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ForwardChunk& chunk = chunks[i];
    FATHOM_CHECK(chunk.scored_row_begin >= 0 &&
                     chunk.scored_row_begin + chunk.num_scored_rows() <= static_cast<int64_t>(chunk.new_tokens.size()),
                 "model runner: chunk " << i << " scores rows [" << chunk.scored_row_begin << ", "
                                        << chunk.scored_row_begin + chunk.num_scored_rows() << ") of "
                                        << chunk.new_tokens.size() << " new tokens");
    for (int32_t target : chunk.scored_targets) {
      FATHOM_CHECK(target >= 0 && target < vocab,
                   "model runner: chunk " << i << " scores token " << target << " outside the vocabulary [0, " << vocab << ")");
    }
    scored_offset[i] = num_scored;
    num_scored += chunk.num_scored_rows();
  }
  ForwardOutput output;
  output.logits.resize(static_cast<size_t>(num_rows * vocab));
  output.samples.resize(static_cast<size_t>(num_samples));
  output.scored.resize(static_cast<size_t>(num_scored));
  // Without device scoring, the scored rows' logits come to the host: [host-scored rows, V], and each row's
  // (chunk, row in chunk).
  std::vector<float> host_scored_logits;
  std::vector<std::pair<size_t, int64_t>> host_scored;
  for (const bool decode_group : {true, false}) {
    model::ForwardBatch batch;
    batch.attention_form = decode_group ? model::AttentionForm::kAbsorbed : model::AttentionForm::kExpanded;
    std::vector<size_t> members;
    for (size_t i = 0; i < chunks.size(); ++i) {
      const ForwardChunk& chunk = chunks[i];
      const bool decode = !runs_in_prefill_form(static_cast<int64_t>(chunk.new_tokens.size()), chunk.extends_prompt,
                                                backend_deterministic_);
      if (decode != decode_group) continue;
      FATHOM_CHECK(static_cast<int64_t>(chunk.kv_slots.size()) >= chunk.num_cached + static_cast<int64_t>(chunk.new_tokens.size()),
                   "model runner: chunk " << i << " has " << chunk.kv_slots.size() << " KV slots for "
                                          << chunk.num_cached + static_cast<int64_t>(chunk.new_tokens.size()) << " positions");
      batch.add_sequence(std::vector<int32_t>(chunk.new_tokens.begin(), chunk.new_tokens.end()), chunk.num_cached,
                         chunk.kv_slots.data());
      members.push_back(i);
    }
    if (members.empty()) continue;
    std::vector<int64_t> logit_rows, sample_rows;  // token rows of this forward: host logits / device samples
    // Row of each host logits row in output.logits, or (host-scored rows) -1 - its entry in host_scored.
    std::vector<int64_t> logit_destination, sample_destination, scored_destination;
    std::vector<sampling::DeviceSamplingRow> sampling;
    std::vector<sampling::DeviceScoredRow> scored_rows;
    for (size_t m = 0; m < members.size(); ++m) {
      const model::SequenceChunk& sequence = batch.sequences[m];
      const int64_t last_row = sequence.token_begin + sequence.num_tokens - 1;
      if (row_of_chunk[members[m]] >= 0) {
        logit_rows.push_back(last_row);
        logit_destination.push_back(row_of_chunk[members[m]]);
      } else if (sample_of_chunk[members[m]] >= 0) {
        sample_rows.push_back(last_row);
        sample_destination.push_back(sample_of_chunk[members[m]]);
        sampling.push_back(*chunks[members[m]].device_sampling);
      }
      const ForwardChunk& chunk = chunks[members[m]];
      for (int64_t r = 0; r < chunk.num_scored_rows(); ++r) {
        const int64_t row = sequence.token_begin + chunk.scored_row_begin + r;
        if (on_device) {
          scored_rows.push_back({row, chunk.scored_targets[static_cast<size_t>(r)], chunk.scored_top_n});
          scored_destination.push_back(scored_offset[members[m]] + r);
        } else {
          logit_rows.push_back(row);
          logit_destination.push_back(-1 - static_cast<int64_t>(host_scored.size()));
          host_scored.emplace_back(members[m], r);
        }
      }
    }
    SampledForward group = on_device ? backend_->forward_sampled(batch, logit_rows, sample_rows, sampling, scored_rows)
                                     : SampledForward{backend_->forward(batch, logit_rows), {}, {}};
    FATHOM_CHECK(group.logits.size() == logit_rows.size() * static_cast<size_t>(vocab) &&
                     group.samples.size() == sample_rows.size() && group.scored.size() == scored_rows.size(),
                 "model runner: the backend returned " << group.logits.size() << " logits, " << group.samples.size()
                                                       << " samples and " << group.scored.size() << " scores for "
                                                       << logit_rows.size() << " rows of " << vocab << ", "
                                                       << sample_rows.size() << " and " << scored_rows.size());
    host_scored_logits.resize(host_scored.size() * static_cast<size_t>(vocab));
    for (size_t r = 0; r < logit_destination.size(); ++r) {
      const int64_t destination = logit_destination[r];
      std::vector<float>& into = destination >= 0 ? output.logits : host_scored_logits;
      std::copy_n(group.logits.begin() + static_cast<int64_t>(r) * vocab, vocab,
                  into.begin() + (destination >= 0 ? destination : -1 - destination) * vocab);
    }
    for (size_t r = 0; r < sample_destination.size(); ++r) {
      output.samples[static_cast<size_t>(sample_destination[r])] = std::move(group.samples[r]);
    }
    for (size_t r = 0; r < scored_destination.size(); ++r) {
      output.scored[static_cast<size_t>(scored_destination[r])] = std::move(group.scored[r]);
    }
  }
  auto score_on_host = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const auto [chunk_index, row] = host_scored[static_cast<size_t>(r)];
      const ForwardChunk& chunk = chunks[chunk_index];
      output.scored[static_cast<size_t>(scored_offset[chunk_index] + row)] =
          sampling::score_token(host_scored_logits.data() + r * vocab, vocab,
                                chunk.scored_targets[static_cast<size_t>(row)], chunk.scored_top_n);
    }
  };
  const int64_t num_host_scored = static_cast<int64_t>(host_scored.size());
  if (num_host_scored > 1) host_pool_->parallel_for(num_host_scored, score_on_host);
  else score_on_host(0, num_host_scored);
  return output;
}

}  // namespace fathom::executor
