#include "scheduler/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "sampling/philox.h"
#include "sampling/sampler.h"

namespace fathom::scheduler {

SchedulePolicy parse_schedule_policy(const std::string& name) {
  if (name == "fcfs") return SchedulePolicy::kFcfs;
  if (name == "lpm") return SchedulePolicy::kLpm;
  FATHOM_FAIL("unknown schedule policy '" << name << "' (expected fcfs or lpm)");
}

Scheduler::Scheduler(const SchedulerConfig& config, const tokenizer::Tokenizer* tokenizer)
    : config_(config),
      tokenizer_(tokenizer),
      eos_token_ids_(config.eos_token_ids),
      kv_(kv_cache::KvManagerConfig{config.max_total_tokens, config.page_size, config.disable_radix_cache}),
      sharing_(config.deterministic ? KvSharingPolicy::Shared::kPromptPositions : KvSharingPolicy::Shared::kAllPositions),
      new_token_ratio_(config.init_new_token_ratio) {
  FATHOM_CHECK(config.max_running_requests >= 1, "scheduler: max_running_requests must be >= 1, got " << config.max_running_requests);
  FATHOM_CHECK(config.vocab_size > 0, "scheduler: vocab_size must be positive, got " << config.vocab_size);
  FATHOM_CHECK(config.max_scored_rows_per_step >= 1,
               "scheduler: max_scored_rows_per_step must be >= 1, got " << config.max_scored_rows_per_step);
  if (tokenizer_ && tokenizer_->eos_token_id() &&
      std::find(eos_token_ids_.begin(), eos_token_ids_.end(), *tokenizer_->eos_token_id()) == eos_token_ids_.end()) {
    eos_token_ids_.push_back(*tokenizer_->eos_token_id());
  }
}

int64_t Scheduler::max_context_tokens() const {
  const int64_t capacity = kv_.total_slots();
  return config_.max_position_embeddings > 0 ? std::min(config_.max_position_embeddings, capacity) : capacity;
}

std::string Scheduler::validate(const GenerateRequest& request) const {
  std::ostringstream problem;
  const SamplingParams& params = request.sampling;
  const int64_t prompt_len = static_cast<int64_t>(request.input_ids.size());
  if (request.request_id.empty()) {
    problem << "request has an empty request_id";
  } else if (by_request_id_.count(request.request_id)) {
    problem << "request " << request.request_id << ": a request with this id is already in progress";
  } else if (prompt_len == 0) {
    problem << "request " << request.request_id << ": the prompt has no tokens";
  } else if (params.prompt_logprob_start < -1 || params.prompt_logprob_start > prompt_len) {
    problem << "request " << request.request_id << ": prompt_logprob_start must be in [-1, " << prompt_len
            << "] (the prompt's length), got " << params.prompt_logprob_start;
  } else if (params.prompt_top_logprobs < -1 || params.prompt_top_logprobs > 20) {
    problem << "request " << request.request_id << ": prompt_top_logprobs must be in [-1, 20], got "
            << params.prompt_top_logprobs;
  } else if (params.max_new_tokens < 0) {
    problem << "request " << request.request_id << ": max_new_tokens must be >= 0, got " << params.max_new_tokens;
  } else if (std::string sampling_problem = sampling::validate(to_sampling_options(params)); !sampling_problem.empty()) {
    problem << "request " << request.request_id << ": " << sampling_problem;
  } else if (params.max_new_tokens > max_context_tokens() ||
             prompt_len + params.max_new_tokens > max_context_tokens() ||
             kv_.pool().round_up_to_pages(prompt_len + params.max_new_tokens) > kv_.total_slots()) {
    problem << "request " << request.request_id << ": prompt of " << prompt_len << " tokens + max_new_tokens "
            << params.max_new_tokens << " = " << prompt_len + params.max_new_tokens << " tokens exceeds the context of "
            << max_context_tokens() << " tokens (max_position_embeddings " << config_.max_position_embeddings
            << ", KV capacity " << kv_.total_slots() << ")";
  } else {
    for (size_t i = 0; i < request.input_ids.size(); ++i) {
      const int32_t id = request.input_ids[i];
      if (id < 0 || id >= config_.vocab_size) {
        problem << "request " << request.request_id << ": token id " << id << " at index " << i
                << " is outside the vocabulary [0, " << config_.vocab_size << ")";
        break;
      }
    }
    for (const std::string& stop : params.stop) {
      if (problem.tellp() == 0 && stop.empty()) problem << "request " << request.request_id << ": empty stop string";
    }
    for (const auto& [id, bias] : params.logit_bias) {
      if (problem.tellp() == 0 && id >= config_.vocab_size) {
        problem << "request " << request.request_id << ": logit_bias names token id " << id
                << ", outside the vocabulary [0, " << config_.vocab_size << ")";
      }
    }
    if (problem.tellp() == 0 && params.min_new_tokens > params.max_new_tokens) {
      problem << "request " << request.request_id << ": min_new_tokens " << params.min_new_tokens
              << " exceeds max_new_tokens " << params.max_new_tokens;
    }
  }
  return problem.str();
}

void Scheduler::submit(GenerateRequest request, const EventCallback& on_event) {
  const std::string request_id = request.request_id;
  const int64_t prompt_len = static_cast<int64_t>(request.input_ids.size());
  auto reject = [&](const std::string& message, FinishReason reason) {
    GenerationEvent event;
    event.request_id = request_id;
    event.finished = true;
    event.finish_reason = reason;
    event.error_message = message;
    event.prompt_tokens = prompt_len;
    try {
      on_event(event);
    } catch (...) {  // a throwing callback must not break the caller's loop
    }
  };
  const std::string problem = validate(request);
  if (!problem.empty()) return reject(problem, FinishReason::kError);
  if (request.sampling.max_new_tokens == 0) return reject("", FinishReason::kLength);
  const uint64_t id = next_request_id_++;
  const uint64_t seed = request.sampling.seed ? *request.sampling.seed
                                              : sampling::splitmix64(config_.random_seed ^ sampling::splitmix64(id));
  RequestPtr state;
  try {
    state = std::make_shared<RequestState>(id, std::move(request), on_event, tokenizer_, seed, eos_token_ids_);
  } catch (const Error& error) {
    return reject("request " + request_id + ": " + error.what(), FinishReason::kError);
  }
  // Listed in both maps or in neither: an id left in by_request_id_ alone would never run and block its reuse.
  const auto listed = by_request_id_.emplace(state->request_id(), state).first;
  try {
    waiting_.emplace(id, state);
  } catch (...) {
    by_request_id_.erase(listed);
    throw;
  }
  prompt_tokens_total_ += state->prompt_len;
}

bool Scheduler::abort(const std::string& request_id) {
  auto found = by_request_id_.find(request_id);
  if (found == by_request_id_.end()) return false;
  RequestPtr request = found->second;
  if (request->phase == RequestPhase::kRunning) {
    kv_.release({}, request->kv, /*cache_tokens=*/false);
    remove_running(request);
  } else {
    waiting_.erase(request->id);
  }
  by_request_id_.erase(found);
  request->finish(FinishReason::kAbort);
  return true;
}

void Scheduler::fail_all(const std::string& message) {
  std::vector<RequestPtr> all = running_;
  for (auto& [id, request] : waiting_) all.push_back(request);
  for (const RequestPtr& request : running_) kv_.release({}, request->kv, false);
  running_.clear();
  waiting_.clear();
  by_request_id_.clear();
  for (const RequestPtr& request : all) request->finish(FinishReason::kError, "request " + request->request_id() + ": " + message);
}

bool Scheduler::flush_cache() {
  if (!running_.empty()) return false;
  return kv_.flush();
}

void Scheduler::remove_running(const RequestPtr& request) {
  running_.erase(std::find(running_.begin(), running_.end(), request));
}

void Scheduler::retract(const RequestPtr& request) {
  const int64_t publishable = sharing_.publishable_len(*request);
  kv_.release(std::span<const int32_t>(request->tokens.data(), static_cast<size_t>(publishable)), request->kv, true,
              request->known_scores(publishable, request->kv.cached_len));
  request->kv_len = 0;
  request->phase = RequestPhase::kWaiting;
  remove_running(request);
  waiting_[request->id] = request;
  new_token_ratio_ = config_.init_new_token_ratio;
  ++num_retractions_;
}

// Reserves KV for positions [0, num_positions) of `request`, retracting the newest running requests while it does
// not fit. False when `request` itself had to be retracted.
bool Scheduler::ensure_kv(const RequestPtr& request, int64_t num_positions, bool* retracted) {
  while (!kv_.reserve(request->kv, num_positions)) {
    const RequestPtr victim = running_.back();
    retract(victim);
    *retracted = true;
    if (victim == request) return false;
  }
  return true;
}

void Scheduler::add_to_step(ScheduledStep& step, const RequestPtr& request, int64_t num_new_tokens, bool samples) {
  executor::SequenceStep sequence;
  sequence.sequence_id = request->id;
  const int64_t begin = request->kv_len;
  const int64_t known = static_cast<int64_t>(request->tokens.size());
  if (begin >= known) {  // decode of the token the step in flight is sampling
    FATHOM_CHECK(num_new_tokens == 1 && request->num_pending == 1,
                 "scheduler: request " << request->request_id() << " has no known token at position " << begin);
    sequence.new_tokens = {0};
    sequence.last_token_from_previous_step = true;
  } else {
    sequence.new_tokens.assign(request->tokens.begin() + begin, request->tokens.begin() + begin + num_new_tokens);
  }
  sequence.num_cached = begin;
  sequence.kv_slots.assign(request->kv.slots.begin(), request->kv.slots.begin() + begin + num_new_tokens);
  sequence.sample = samples;
  sequence.extends_prompt = begin + num_new_tokens <= request->prompt_len;
  sequence.sampling = request->sampling_options;
  sequence.sampling_state = request->sampling_state;
  // Prompt rows of this chunk that score their next prompt token (prompt logprobs), unless already scored.
  const int64_t first_scored = std::max(begin, request->first_unscored_row());
  const int64_t scored_end = std::min(begin + num_new_tokens, request->scored_rows_end());
  for (int64_t row = first_scored; row < scored_end; ++row) {
    sequence.scored_targets.push_back(request->tokens[static_cast<size_t>(row + 1)]);
  }
  if (!sequence.scored_targets.empty()) sequence.scored_row_begin = first_scored - begin;
  sequence.scored_top_n = request->prompt_top_n();
  step.batch.sequences.push_back(std::move(sequence));
  request->kv_len += num_new_tokens;
  if (samples) ++request->num_pending;
  step.entries.push_back(ScheduledEntry{request, request->admissions, request->kv_len, samples, first_scored});
  last_step_.push_back(StepRecord{request->request_id(), num_new_tokens, begin, samples});
}

int64_t Scheduler::reserved_decode_slots(const RequestState& request) const {
  const int64_t remaining = std::min(request.request.sampling.max_new_tokens - request.num_generated_with_pending(),
                                     config_.reserve_max_new_tokens);
  return static_cast<int64_t>(std::ceil(static_cast<double>(std::max<int64_t>(remaining, 0)) * new_token_ratio_));
}

std::span<const int32_t> Scheduler::prompt_of(const RequestState& request) {
  return std::span<const int32_t>(request.tokens.data(), static_cast<size_t>(request.prompt_len));
}

int64_t Scheduler::cached_score_rows_of(const RequestState& request) const {
  const int64_t first_unscored = request.first_unscored_row();
  if (first_unscored >= request.scored_rows_end()) return 0;
  return static_cast<int64_t>(
      kv_.cached_score_run(prompt_of(request), static_cast<size_t>(first_unscored + 1), request.prompt_top_n()));
}

std::vector<Scheduler::RequestPtr> Scheduler::admission_order() const {
  std::vector<RequestPtr> order;
  for (const auto& [id, request] : waiting_) {
    if (request->num_pending == 0) order.push_back(request);  // a retracted request waits for its last token
  }
  if (config_.schedule_policy == SchedulePolicy::kLpm && kv_.radix_enabled()) {
    std::vector<std::pair<int64_t, RequestPtr>> keyed;
    for (const RequestPtr& request : order) {
      const auto matchable = static_cast<size_t>(sharing_.matchable_len(*request, cached_score_rows_of(*request)));
      keyed.emplace_back(kv_.peek_prefix_length(std::span<const int32_t>(request->tokens.data(), matchable)), request);
    }
    std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (size_t i = 0; i < keyed.size(); ++i) order[i] = keyed[i].second;
  }
  return order;
}

int64_t Scheduler::PrefillBudget::key_limited_chunk(int64_t prefix, int64_t wanted, bool expanded) const {
  return expanded && has_expanded ? std::max<int64_t>(0, std::min(wanted, keys - prefix)) : wanted;
}

int64_t Scheduler::PrefillBudget::scoring_limited_chunk(const RequestState& request, int64_t prefix, int64_t wanted) const {
  const int64_t first = std::max(prefix, request.first_unscored_row()), end = request.scored_rows_end();
  if (first >= std::min(prefix + wanted, end)) return wanted;  // no row to score
  return std::min(wanted, first + std::max<int64_t>(scored_rows, 0) - prefix);  // rows before `first` are free
}

void Scheduler::PrefillBudget::take(const RequestState& request, int64_t prefix, int64_t chunk, bool expanded) {
  tokens -= chunk;
  const int64_t first = std::max(prefix, request.first_unscored_row());
  scored_rows -= std::max<int64_t>(0, std::min(prefix + chunk, request.scored_rows_end()) - first);
  if (!expanded) return;
  keys -= prefix + chunk;
  has_expanded = true;
}

bool Scheduler::runs_expanded(const RequestState& request, int64_t prefix, int64_t chunk) const {
  // extends_prompt as add_to_step sets it for these positions
  return executor::runs_in_prefill_form(chunk, prefix + chunk <= request.prompt_len, config_.deterministic);
}

void Scheduler::admit_waiting(ScheduledStep& step, PrefillBudget* budget) {
  int64_t reserved = 0;
  for (const RequestPtr& request : running_) reserved += reserved_decode_slots(*request);
  for (const RequestPtr& request : admission_order()) {
    if (static_cast<int64_t>(running_.size()) >= config_.max_running_requests || budget->tokens <= 0) break;
    const int64_t total = static_cast<int64_t>(request->tokens.size());
    // Prompt rows still to score whose scores the prefix cache holds (positions first + 1, ...) need not run.
    const int64_t first_unscored = request->first_unscored_row();
    const int64_t cached_score_rows = cached_score_rows_of(*request);
    // Match at most total - 1 tokens (the last one must run to produce logits), within what the policy shares.
    const int64_t matchable = sharing_.matchable_len(*request, cached_score_rows);
    const int64_t cached =
        kv_.acquire_prefix(std::span<const int32_t>(request->tokens.data(), static_cast<size_t>(matchable)), request->kv);
    const int64_t wanted = budget->scoring_limited_chunk(
        *request, cached, std::min({total - cached, budget->tokens, sharing_.max_chunk(*request, cached)}));
    const int64_t chunk = budget->key_limited_chunk(cached, wanted, runs_expanded(*request, cached, wanted));
    // Reservations protect running requests; with none running the first admission only needs its own KV (so a
    // request that fits the pool is always admitted eventually).
    const int64_t own_reserve = running_.empty() ? 0 : reserved_decode_slots(*request);
    if (chunk <= 0 || kv_.slots_needed(request->kv, cached + chunk) + reserved + own_reserve > kv_.available_slots() ||
        !kv_.reserve(request->kv, cached + chunk)) {
      kv_.release({}, request->kv, false);
      break;
    }
    reserved += own_reserve;
    waiting_.erase(request->id);
    running_.push_back(request);
    request->phase = RequestPhase::kRunning;
    request->kv_len = cached;
    if (request->admissions++ == 0) {
      request->cached_prompt_tokens = std::min(cached, request->prompt_len);
      cached_prompt_tokens_total_ += request->cached_prompt_tokens;
    }
    // The matched rows still to score are served from the cached scores (the match stopped within them).
    if (cached > first_unscored && first_unscored < request->scored_rows_end()) {
      const int64_t count = cached - first_unscored;
      FATHOM_CHECK(count <= cached_score_rows, "scheduler: request " << request->request_id() << " matched " << count
                                                                      << " rows to score, " << cached_score_rows << " cached");
      request->take_cached_scores(kv_.cached_scores(prompt_of(*request), static_cast<size_t>(first_unscored + 1),
                                                    request->prompt_top_n(), static_cast<size_t>(count)));
    }
    budget->take(*request, cached, chunk, runs_expanded(*request, cached, chunk));
    add_to_step(step, request, chunk, /*samples=*/chunk == total - cached);
  }
}

std::optional<ScheduledStep> Scheduler::prepare_step() {
  last_step_.clear();
  if (!has_requests()) return std::nullopt;
  ScheduledStep step;
  constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max();
  PrefillBudget budget{config_.chunked_prefill_size > 0 ? config_.chunked_prefill_size : kUnlimited,
                       config_.max_prefill_keys > 0 ? config_.max_prefill_keys : kUnlimited,
                       config_.max_scored_rows_per_step};
  bool retracted = false;
  // Running requests first, oldest first: a decode token each, or the next chunk of their prefill.
  for (size_t index = 0; index < running_.size(); ++index) {
    const RequestPtr request = running_[index];
    if (request->in_decode()) {
      if (!request->may_generate_more()) continue;  // its last token is still in flight
      // A prompt's last token under deterministic inference runs in the prefill form: it takes the prefill budgets.
      const bool expanded = runs_expanded(*request, request->kv_len, 1);
      if (expanded && (budget.tokens <= 0 || budget.key_limited_chunk(request->kv_len, 1, true) <= 0)) continue;
      if (!ensure_kv(request, request->kv_len + 1, &retracted)) break;  // it was the newest: nothing after it
      if (expanded) budget.take(*request, request->kv_len, 1, true);
      add_to_step(step, request, 1, /*samples=*/true);
    } else {
      if (budget.tokens <= 0) continue;
      // Shrink the chunk to the KV at hand rather than retract others for it; retract only to move at all.
      const int64_t coverable = request->kv.reserved_positions() + kv_.available_slots() / kv_.page_size() * kv_.page_size();
      const int64_t wanted = budget.scoring_limited_chunk(
          *request, request->kv_len,
          std::max<int64_t>(1, std::min({request->uncomputed(), budget.tokens, coverable - request->kv_len,
                                         sharing_.max_chunk(*request, request->kv_len)})));
      const int64_t chunk =
          budget.key_limited_chunk(request->kv_len, wanted, runs_expanded(*request, request->kv_len, wanted));
      if (chunk <= 0) continue;  // its keys or scored rows wait for a step with room
      if (!ensure_kv(request, request->kv_len + chunk, &retracted)) break;
      budget.take(*request, request->kv_len, chunk, runs_expanded(*request, request->kv_len, chunk));
      add_to_step(step, request, chunk, /*samples=*/chunk == request->uncomputed());
    }
  }
  // New admissions, unless memory just ran short.
  if (!retracted) admit_waiting(step, &budget);
  if (step.entries.empty()) return std::nullopt;
  step.index = next_step_index_++;
  new_token_ratio_ = std::max(config_.min_new_token_ratio, new_token_ratio_ - config_.new_token_ratio_decay);
  return step;
}

void Scheduler::finalize(const RequestPtr& request, bool was_running) {
  if (!was_running) {
    waiting_.erase(request->id);  // retracted while its last token was in flight
  } else {
    const int64_t publishable = sharing_.publishable_len(*request);
    kv_.release(std::span<const int32_t>(request->tokens.data(), static_cast<size_t>(publishable)), request->kv, true,
                request->known_scores(publishable, request->kv.cached_len));
    remove_running(request);
  }
  by_request_id_.erase(request->request_id());
}

void Scheduler::complete_step(ScheduledStep& step, const executor::StepOutput& output) {
  FATHOM_CHECK(output.tokens.size() == step.entries.size(), "scheduler: step " << step.index << " has "
                                                            << step.entries.size() << " sequences but " << output.tokens.size() << " results");
  for (size_t i = 0; i < step.entries.size(); ++i) {
    const ScheduledEntry& entry = step.entries[i];
    const RequestPtr& request = entry.request;
    if (request->phase == RequestPhase::kFinished) continue;  // aborted, or finished while this step was in flight
    // Scored prompt rows first: the first token's event carries them. Kept from a stale entry too (retracted while
    // in flight): they were computed from the request's own tokens, and its sampled token is accepted below.
    if (i < output.scored.size() && !output.scored[i].empty()) request->store_scores(entry.first_scored_row, output.scored[i]);
    if (entry.samples) {
      FATHOM_CHECK(output.tokens[i].has_value(), "scheduler: step " << step.index << " sampled no token for request "
                                                                    << request->request_id());
      ++generated_tokens_total_;
      const bool was_running = request->phase == RequestPhase::kRunning;
      if (request->accept_token(*output.tokens[i], eos_token_ids_)) finalize(request, was_running);
    } else if (request->phase == RequestPhase::kRunning && request->admissions == entry.admission) {
      // A prefill chunk is in the cache now: share it with later requests (what the policy publishes of it).
      const int64_t length = std::min({entry.kv_end, static_cast<int64_t>(request->tokens.size()),
                                       sharing_.position_limit(*request)});
      const std::vector<std::optional<kv_cache::TokenScore>> scores = request->known_scores(length, request->kv.cached_len);
      kv_.commit(std::span<const int32_t>(request->tokens.data(), static_cast<size_t>(length)), request->kv, scores);
    }
  }
  if (config_.check_invariants_every_step) check_invariants();
}

EngineStats Scheduler::stats() const {
  EngineStats stats;
  stats.waiting_requests = static_cast<int64_t>(waiting_.size());
  stats.running_requests = static_cast<int64_t>(running_.size());
  stats.kv_total_tokens = kv_.total_slots();
  stats.kv_used_tokens = kv_.used_slots();
  stats.prompt_tokens_total = prompt_tokens_total_;
  stats.cached_prompt_tokens_total = cached_prompt_tokens_total_;
  stats.generated_tokens_total = generated_tokens_total_;
  return stats;
}

SchedulerSnapshot Scheduler::snapshot() const {
  SchedulerSnapshot snapshot;
  for (const auto& [id, request] : waiting_) snapshot.waiting.push_back(request->request_id());
  for (const RequestPtr& request : running_) snapshot.running.push_back(request->request_id());
  snapshot.last_step = last_step_;
  snapshot.kv_total = kv_.total_slots();
  snapshot.kv_free = kv_.free_slots();
  snapshot.kv_evictable = kv_.evictable_slots();
  snapshot.kv_used = kv_.used_slots();
  snapshot.num_retractions = num_retractions_;
  return snapshot;
}

void Scheduler::check_invariants() const {
  kv_.check_invariant();
  int64_t owned = 0;
  for (const RequestPtr& request : running_) {
    FATHOM_CHECK(request->kv.reserved_positions() >= request->kv_len,
                 "request " << request->request_id() << ": KV length " << request->kv_len << " exceeds its "
                            << request->kv.reserved_positions() << " reserved slots");
    owned += request->kv.owned_slots();
  }
  for (const auto& [id, request] : waiting_) {
    FATHOM_CHECK(request->kv.empty(), "request " << request->request_id() << " waits while holding KV");
  }
  FATHOM_CHECK(owned == kv_.sequence_owned_slots(), "KV accounting broken: running requests own " << owned
                                                    << " slots, the manager counts " << kv_.sequence_owned_slots());
  if (running_.empty()) {
    FATHOM_CHECK(kv_.locked_slots() == 0 && kv_.sequence_owned_slots() == 0,
                 "KV accounting broken: idle with " << kv_.locked_slots() << " locked and " << kv_.sequence_owned_slots() << " owned slots");
    FATHOM_CHECK(kv_.free_slots() + kv_.evictable_slots() == kv_.total_slots(),
                 "KV accounting broken: idle with free " << kv_.free_slots() << " + evictable " << kv_.evictable_slots()
                                                         << " != total " << kv_.total_slots());
  }
}

}  // namespace fathom::scheduler
