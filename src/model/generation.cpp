#include "model/generation.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace fathom::model {

namespace {

// Feeds tokens [begin, end) of `ids` as chunks into the model; returns the hidden states of all of them.
std::vector<float> prefill(DeepseekV3Model& model, const std::vector<int32_t>& ids, const std::vector<int32_t>& slots,
                           kv_cache::LatentKvCache& cache, const ExecutionContext& context, const PrefillOptions& options) {
  const int64_t total = static_cast<int64_t>(ids.size());
  const int64_t chunk = options.chunk_size > 0 ? options.chunk_size : total;
  const int64_t dim = model.config().hidden_size;
  std::vector<float> hidden;
  hidden.reserve(static_cast<size_t>(total * dim));
  for (int64_t begin = 0; begin < total; begin += chunk) {
    const int64_t end = std::min(total, begin + chunk);
    ForwardBatch batch;
    batch.attention_form = options.attention_form;
    batch.add_sequence(std::vector<int32_t>(ids.begin() + begin, ids.begin() + end), begin, slots.data());
    std::vector<float> part = model.forward(batch, cache, context);
    hidden.insert(hidden.end(), part.begin(), part.end());
  }
  return hidden;
}

std::vector<int32_t> identity_slots(int64_t count) {
  std::vector<int32_t> slots(static_cast<size_t>(count));
  std::iota(slots.begin(), slots.end(), 0);
  return slots;
}

}  // namespace

int32_t argmax(const float* values, int64_t count) {
  return static_cast<int32_t>(std::max_element(values, values + count) - values);
}

SequenceLogits compute_sequence_logits(DeepseekV3Model& model, const std::vector<int32_t>& token_ids, bool with_mtp,
                                       const ExecutionContext& context, const PrefillOptions& prefill_options) {
  FATHOM_CHECK(!token_ids.empty(), "logits: need at least one token id");
  const int64_t count = static_cast<int64_t>(token_ids.size());
  kv_cache::LatentKvCache cache(model.num_cache_layers(), count, model.cache_row_dim());
  std::vector<int32_t> slots = identity_slots(count);
  std::vector<float> hidden = prefill(model, token_ids, slots, cache, context, prefill_options);
  SequenceLogits result;
  result.logits = model.compute_logits(hidden.data(), count, context);
  if (!with_mtp || count < 2) return result;
  MtpModule* mtp = model.mtp();
  FATHOM_CHECK(mtp != nullptr, "logits --mtp: the checkpoint has no MTP module (model.layers."
                                   << model.config().num_hidden_layers << ".eh_proj.weight)");
  kv_cache::LatentKvCache mtp_cache(1, count, model.cache_row_dim());
  ForwardBatch batch;
  batch.attention_form = prefill_options.attention_form;
  batch.add_sequence(std::vector<int32_t>(token_ids.begin() + 1, token_ids.end()), 0, slots.data());
  std::vector<float> mtp_hidden = mtp->forward(batch, hidden.data(), mtp_cache, context);
  result.mtp_logits = model.compute_logits(mtp_hidden.data(), count - 1, context);
  return result;
}

std::vector<int32_t> greedy_generate(DeepseekV3Model& model, const std::vector<int32_t>& prompt,
                                     const GreedyOptions& options, const ExecutionContext& context) {
  FATHOM_CHECK(!prompt.empty(), "generate: need at least one prompt token");
  FATHOM_CHECK(options.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0");
  const int64_t capacity = static_cast<int64_t>(prompt.size()) + options.max_new_tokens;
  const int64_t dim = model.config().hidden_size, vocab = model.config().vocab_size;
  kv_cache::LatentKvCache cache(model.num_cache_layers(), capacity, model.cache_row_dim());
  std::vector<int32_t> slots = identity_slots(capacity);
  std::vector<int32_t> generated;
  if (options.max_new_tokens == 0) return generated;
  std::vector<float> hidden = prefill(model, prompt, slots, cache, context, options.prefill);
  std::vector<float> logits = model.compute_logits(hidden.data() + (prompt.size() - 1) * dim, 1, context);
  const auto& eos = model.config().eos_token_ids;
  while (true) {
    const int32_t next = argmax(logits.data(), vocab);
    generated.push_back(next);
    if (static_cast<int64_t>(generated.size()) >= options.max_new_tokens) break;
    if (!options.ignore_eos && std::find(eos.begin(), eos.end(), next) != eos.end()) break;
    ForwardBatch batch;
    batch.add_sequence({next}, static_cast<int64_t>(prompt.size() + generated.size()) - 1, slots.data());
    hidden = model.forward(batch, cache, context);
    logits = model.compute_logits(hidden.data(), 1, context);
  }
  return generated;
}

}  // namespace fathom::model
