#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>

#include "core/error.h"
#include "sampling/philox.h"

namespace fathom::sampling {

std::string validate(const SamplingOptions& options) {
  std::ostringstream problem;
  if (!(options.temperature >= 0.0f) || !std::isfinite(options.temperature)) problem << "temperature must be >= 0, got " << options.temperature;
  else if (options.top_k == 0 || options.top_k < -1) problem << "top_k must be -1 (off) or >= 1, got " << options.top_k;
  else if (!(options.top_p > 0.0f && options.top_p <= 1.0f)) problem << "top_p must be in (0, 1], got " << options.top_p;
  else if (!(options.min_p >= 0.0f && options.min_p <= 1.0f)) problem << "min_p must be in [0, 1], got " << options.min_p;
  else if (!(options.presence_penalty >= -2.0f && options.presence_penalty <= 2.0f)) problem << "presence_penalty must be in [-2, 2], got " << options.presence_penalty;
  else if (!(options.frequency_penalty >= -2.0f && options.frequency_penalty <= 2.0f)) problem << "frequency_penalty must be in [-2, 2], got " << options.frequency_penalty;
  else if (options.top_logprobs < 0 || options.top_logprobs > 20) problem << "top_logprobs must be in [0, 20], got " << options.top_logprobs;
  else if (!(options.repetition_penalty > 0.0f && options.repetition_penalty <= 2.0f)) problem << "repetition_penalty must be in (0, 2], got " << options.repetition_penalty;
  else if (options.min_new_tokens < 0) problem << "min_new_tokens must be >= 0, got " << options.min_new_tokens;
  else {
    for (size_t i = 0; i < options.logit_bias.size() && problem.tellp() == 0; ++i) {
      const auto& [id, bias] = options.logit_bias[i];
      if (!(bias >= -100.0f && bias <= 100.0f)) problem << "logit_bias of token " << id << " must be in [-100, 100], got " << bias;
      else if (id < 0) problem << "logit_bias names token id " << id << ", which is negative";
      else if (i > 0 && options.logit_bias[i - 1].first >= id) problem << "logit_bias token ids must be ascending and unique";
    }
  }
  return problem.str();
}

void log_softmax(const float* logits, int64_t vocab, float* out) {
  const float max_logit = *std::max_element(logits, logits + vocab);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max_logit);
  const double log_sum = std::log(sum) + max_logit;
  for (int64_t i = 0; i < vocab; ++i) out[i] = static_cast<float>(static_cast<double>(logits[i]) - log_sum);
}

void apply_logit_modifiers(float* logits, int64_t vocab, const SamplingState& state, const SamplingOptions& options) {
  auto in_vocab = [vocab](int32_t token) { return token >= 0 && token < vocab; };
  if (options.repetition_penalty != 1.0f) {
    const float penalty = options.repetition_penalty;
    auto penalize = [&](int32_t token) {
      if (in_vocab(token)) logits[token] = logits[token] > 0.0f ? logits[token] / penalty : logits[token] * penalty;
    };
    for (int32_t token : state.prompt_token_ids) penalize(token);
    for (const auto& [token, count] : state.output_counts) {
      const bool in_prompt = std::binary_search(state.prompt_token_ids.begin(), state.prompt_token_ids.end(), token);
      if (count > 0 && !in_prompt) penalize(token);
    }
  }
  if (options.has_penalties()) {
    for (const auto& [token, count] : state.output_counts) {
      if (!in_vocab(token) || count <= 0) continue;
      logits[token] -= options.presence_penalty + options.frequency_penalty * static_cast<float>(count);
    }
  }
  for (const auto& [token, bias] : options.logit_bias) {
    if (in_vocab(token)) logits[token] += bias;
  }
  if (state.num_sampled < options.min_new_tokens) {
    for (int32_t token : options.ending_token_ids) {
      if (in_vocab(token)) logits[token] = -std::numeric_limits<float>::infinity();
    }
  }
}

std::vector<int32_t> top_indices(const float* values, int64_t vocab, int64_t count) {
  count = std::clamp<int64_t>(count, 0, vocab);
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  auto better = [values](int32_t a, int32_t b) { return values[a] > values[b] || (values[a] == values[b] && a < b); };
  std::partial_sort(ids.begin(), ids.begin() + count, ids.end(), better);
  ids.resize(static_cast<size_t>(count));
  return ids;
}

SampledToken score_token(const float* logits, int64_t vocab, int32_t token, int32_t top_n) {
  FATHOM_CHECK(token >= 0 && token < vocab, "sampling: scored token " << token << " is outside the vocabulary [0, " << vocab << ")");
  // log_softmax's arithmetic for the needed entries only (the same bits), without a row-sized buffer.
  const float max_logit = *std::max_element(logits, logits + vocab);
  double sum = 0.0;
  int64_t larger = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    sum += std::exp(static_cast<double>(logits[i]) - max_logit);
    larger += logits[i] > logits[token] ? 1 : 0;
  }
  const double log_sum = std::log(sum) + max_logit;
  auto logprob = [&](int32_t id) { return static_cast<float>(static_cast<double>(logits[id]) - log_sum); };
  SampledToken result;
  result.token_id = token;
  result.logprob = logprob(token);
  result.rank = larger + 1;
  // The top_n largest logits, largest first, lowest id on ties: a sorted run of at most top_n candidates.
  const size_t keep = static_cast<size_t>(std::clamp<int64_t>(top_n, 0, vocab));
  std::vector<int32_t> best;
  best.reserve(keep + 1);
  auto better = [logits](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  for (int32_t id = 0; keep > 0 && id < vocab; ++id) {
    if (best.size() == keep && !better(id, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), id, better), id);
    if (best.size() > keep) best.pop_back();
  }
  for (int32_t id : best) result.top.emplace_back(id, logprob(id));
  return result;
}

namespace {

int32_t greedy_argmax(const float* logits, int64_t vocab) {
  int32_t best = 0;
  for (int64_t i = 1; i < vocab; ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

}  // namespace

std::vector<std::pair<int32_t, double>> filtered_distribution(const float* logits, int64_t vocab,
                                                              const SamplingOptions& options) {
  const bool use_top_k = options.top_k > 0 && options.top_k < vocab;
  const bool sorted = use_top_k || options.top_p < 1.0f || options.min_p > 0.0f;
  std::vector<int32_t> candidates;
  if (use_top_k) candidates = top_indices(logits, vocab, options.top_k);
  else if (sorted) candidates = top_indices(logits, vocab, vocab);
  else {
    candidates.resize(static_cast<size_t>(vocab));
    std::iota(candidates.begin(), candidates.end(), 0);
  }
  float max_logit = -std::numeric_limits<float>::infinity();
  for (int32_t id : candidates) max_logit = std::max(max_logit, logits[id]);
  const double inverse_temperature = 1.0 / static_cast<double>(options.temperature);
  std::vector<std::pair<int32_t, double>> kept;
  kept.reserve(candidates.size());
  double total = 0.0, max_prob = 0.0;
  for (int32_t id : candidates) {
    const double weight = std::exp((static_cast<double>(logits[id]) - max_logit) * inverse_temperature);
    kept.emplace_back(id, weight);
    total += weight;
    max_prob = std::max(max_prob, weight);
  }
  FATHOM_CHECK(total > 0.0 && std::isfinite(total), "sampling: logits give no finite probability mass");
  if (options.top_p < 1.0f) {
    const double threshold = static_cast<double>(options.top_p) * total;
    double before = 0.0;
    size_t keep = 0;
    while (keep < kept.size() && (keep == 0 || before < threshold)) before += kept[keep++].second;
    kept.resize(keep);
  }
  if (options.min_p > 0.0f) {
    const double threshold = static_cast<double>(options.min_p) * max_prob;
    std::erase_if(kept, [threshold](const auto& entry) { return entry.second < threshold; });
  }
  double kept_total = 0.0;
  for (const auto& entry : kept) kept_total += entry.second;
  for (auto& entry : kept) entry.second /= kept_total;
  return kept;
}

SampledToken sample_token(float* logits, int64_t vocab, const SamplingOptions& options, SamplingState& state) {
  const std::string problem = validate(options);
  FATHOM_CHECK(problem.empty(), "sampling: " << problem);
  FATHOM_CHECK(vocab > 0, "sampling: empty logits row");
  SampledToken result;
  std::vector<float> logprobs;
  if (options.logprobs) {
    logprobs.resize(static_cast<size_t>(vocab));
    log_softmax(logits, vocab, logprobs.data());
    // Ordered by the raw logits (as score_token and the device scorer): logits that round to one logprob keep their order.
    for (int32_t id : top_indices(logits, vocab, options.top_logprobs)) result.top.emplace_back(id, logprobs[id]);
  }
  apply_logit_modifiers(logits, vocab, state, options);
  if (options.is_greedy()) {
    result.token_id = greedy_argmax(logits, vocab);
  } else {
    const std::vector<std::pair<int32_t, double>> distribution = filtered_distribution(logits, vocab, options);
    const double u = philox_uniform(state.seed, static_cast<uint64_t>(state.num_sampled));
    double cumulative = 0.0;
    result.token_id = distribution.back().first;
    for (const auto& [id, probability] : distribution) {
      cumulative += probability;
      if (u < cumulative) {
        result.token_id = id;
        break;
      }
    }
  }
  if (options.logprobs) result.logprob = logprobs[static_cast<size_t>(result.token_id)];
  state.record(result.token_id);
  return result;
}

}  // namespace fathom::sampling
