#pragma once
// The scheduler's record of one request: its tokens (prompt + generated), how much of it has KV, its KV slots,
// its sampling state and its output stream (events, text, stop conditions).
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kv_cache/kv_manager.h"
#include "sampling/sampling_options.h"
#include "scheduler/engine.h"
#include "scheduler/generation_request.h"
#include "scheduler/text_stream.h"

namespace fathom::scheduler {

enum class RequestPhase { kWaiting, kRunning, kFinished };

// Converts the API's sampling parameters to the sampler's options.
sampling::SamplingOptions to_sampling_options(const SamplingParams& params);

struct RequestState {
  // Throws fathom::Error when the tokenizer cannot stream text (caller turns it into a kError event).
  // eos_token_ids: the engine's, which end the request unless ignore_eos (banned before min_new_tokens).
  RequestState(uint64_t id, GenerateRequest request, EventCallback on_event, const tokenizer::Tokenizer* tokenizer,
               uint64_t seed, const std::vector<int32_t>& eos_token_ids);

  const uint64_t id;                 // engine-wide, in arrival order
  const GenerateRequest request;
  const int64_t prompt_len;
  std::vector<int32_t> tokens;       // [prompt_len + generated] prompt then the resolved generated tokens
  int64_t num_pending = 0;           // sampled by a step in flight, not resolved yet (overlap scheduling)
  int64_t kv_len = 0;                // positions whose KV is written or scheduled to be written
  kv_cache::SequenceKv kv;           // slots of the positions; empty while waiting
  RequestPhase phase = RequestPhase::kWaiting;
  uint64_t admissions = 0;           // times admitted; a step remembers which admission it was built for
  int64_t cached_prompt_tokens = 0;  // prompt tokens served from the prefix cache at the first admission
  sampling::SamplingOptions sampling_options;
  std::shared_ptr<sampling::SamplingState> sampling_state;  // mutated by the executor only
  // Prompt logprobs: prompt row r in [first_scored_row(), scored_rows_end()) scores prompt token r + 1.
  std::vector<sampling::SampledToken> prompt_scores;  // [scored_rows_end() - first_scored_row()]
  int64_t scored_rows_done = 0;                       // rows [first_scored_row(), + done) are scored

  const std::string& request_id() const { return request.request_id; }
  int64_t num_generated() const { return static_cast<int64_t>(tokens.size()) - prompt_len; }
  int64_t num_generated_with_pending() const { return num_generated() + num_pending; }
  int64_t total_len() const { return static_cast<int64_t>(tokens.size()) + num_pending; }
  int64_t uncomputed() const { return total_len() - kv_len; }  // tokens still to run through the model
  bool may_generate_more() const { return num_generated_with_pending() < request.sampling.max_new_tokens; }
  // One token to run (the last, possibly pending): a decode step.
  bool in_decode() const { return uncomputed() == 1; }
  // Tokens whose KV is in the cache and whose ids are known: what may be published in the prefix cache.
  int64_t cacheable_len() const { return std::min<int64_t>(kv_len, static_cast<int64_t>(tokens.size())); }
  int64_t scored_rows_end() const { return prompt_len - 1; }
  // The first prompt row to score; scored_rows_end() when no prompt logprobs are asked for.
  int64_t first_scored_row() const {
    const int64_t start = request.sampling.prompt_logprob_start;
    return start < 0 ? scored_rows_end() : std::min(std::max<int64_t>(start, 1) - 1, scored_rows_end());
  }
  // The first prompt row not scored yet (scored_rows_end() once all are).
  int64_t first_unscored_row() const { return first_scored_row() + scored_rows_done; }
  // Positions a prefix-cache match may cover: the rows still to score must run, but for the next `cached_rows` of
  // them, whose scores the cache holds (no limit once all are scored or cached).
  int64_t scoring_match_limit(int64_t cached_rows = 0) const {
    const int64_t first = first_unscored_row() + cached_rows;
    return first >= scored_rows_end() ? std::numeric_limits<int64_t>::max() : first;
  }
  // Alternatives each scored prompt row returns.
  int32_t prompt_top_n() const;
  // Stores the scores of rows [first_row, first_row + scores.size()) (a step's results for this request).
  void store_scores(int64_t first_row, const std::vector<sampling::SampledToken>& scores);
  // Stores `cached` (the prefix cache's scores of positions first_unscored_row() + 1, ...) as the scores of rows
  // [first_unscored_row(), + cached.size()), their alternatives cut to prompt_top_n().
  void take_cached_scores(const std::vector<kv_cache::TokenScore>& cached);
  // The scores this request knows of positions [from, length) (row r scores position r + 1) in a [length] vector, for
  // the prefix cache (positions before `from` are cached already); empty when it knows none of them.
  std::vector<std::optional<kv_cache::TokenScore>> known_scores(int64_t length, int64_t from = 0) const;

  // Appends a resolved sampled token (num_pending must be > 0), applies stop conditions and delivers one event.
  // Returns true when the request finished (phase is then kFinished; the caller releases its KV).
  bool accept_token(const sampling::SampledToken& sampled, const std::vector<int32_t>& eos_token_ids);
  // Ends the request with a final event (kAbort, kError or kLength); phase becomes kFinished.
  void finish(FinishReason reason, const std::string& error_message = {});

 private:
  GenerationEvent make_event() const;
  void deliver(const GenerationEvent& event);

  EventCallback on_event_;
  TextStream text_;
};

}  // namespace fathom::scheduler
