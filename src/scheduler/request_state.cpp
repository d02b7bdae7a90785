#include "scheduler/request_state.h"

#include <algorithm>

#include "core/error.h"

namespace fathom::scheduler {

sampling::SamplingOptions to_sampling_options(const SamplingParams& params) {
  sampling::SamplingOptions options;
  options.temperature = params.temperature;
  options.top_k = params.top_k;
  options.top_p = params.top_p;
  options.min_p = params.min_p;
  options.presence_penalty = params.presence_penalty;
  options.frequency_penalty = params.frequency_penalty;
  options.repetition_penalty = params.repetition_penalty;
  options.logit_bias = params.logit_bias;
  options.min_new_tokens = params.min_new_tokens;
  options.logprobs = params.logprobs;
  options.top_logprobs = params.logprobs ? params.top_logprobs : 0;
  return options;
}

RequestState::RequestState(uint64_t id, GenerateRequest request_in, EventCallback on_event,
                           const tokenizer::Tokenizer* tokenizer, uint64_t seed,
                           const std::vector<int32_t>& eos_token_ids)
    : id(id),
      request(std::move(request_in)),
      prompt_len(static_cast<int64_t>(request.input_ids.size())),
      tokens(request.input_ids),
      sampling_options(to_sampling_options(request.sampling)),
      sampling_state(std::make_shared<sampling::SamplingState>()),
      on_event_(std::move(on_event)),
      text_(tokenizer, request.sampling.skip_special_tokens, request.sampling.stop) {
  sampling_state->seed = seed;
  const SamplingParams& params = request.sampling;
  if (params.min_new_tokens > 0) {  // the ids accept_token would end the request on
    if (!params.ignore_eos) sampling_options.ending_token_ids = eos_token_ids;
    for (int32_t token : params.stop_token_ids) sampling_options.ending_token_ids.push_back(token);
  }
  prompt_scores.resize(static_cast<size_t>(scored_rows_end() - first_scored_row()));
  if (params.repetition_penalty != 1.0f) {
    std::vector<int32_t>& ids = sampling_state->prompt_token_ids;
    ids = request.input_ids;
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  }
}

void RequestState::store_scores(int64_t first_row, const std::vector<sampling::SampledToken>& scores) {
  const int64_t first = first_scored_row(), count = static_cast<int64_t>(scores.size());
  FATHOM_CHECK(first_row >= first && first_row + count <= scored_rows_end(),
               "request " << request_id() << ": scored rows [" << first_row << ", " << first_row + count
                          << ") outside the prompt rows [" << first << ", " << scored_rows_end() << ")");
  std::copy(scores.begin(), scores.end(), prompt_scores.begin() + (first_row - first));
  if (first_row <= first + scored_rows_done) scored_rows_done = std::max(scored_rows_done, first_row + count - first);
}

int32_t RequestState::prompt_top_n() const {
  const int32_t prompt_top = request.sampling.prompt_top_logprobs;
  return prompt_top >= 0 ? prompt_top : sampling_options.top_logprobs;
}

void RequestState::take_cached_scores(const std::vector<kv_cache::TokenScore>& cached) {
  const int64_t first_row = first_unscored_row(), count = static_cast<int64_t>(cached.size());
  const int32_t top_n = prompt_top_n();
  std::vector<sampling::SampledToken> scores(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const kv_cache::TokenScore& score = cached[static_cast<size_t>(i)];
    sampling::SampledToken& token = scores[static_cast<size_t>(i)];
    token.token_id = tokens[static_cast<size_t>(first_row + i + 1)];
    token.logprob = score.logprob;
    token.rank = score.rank;
    token.top.assign(score.top.begin(), score.top.begin() + std::min<std::ptrdiff_t>(score.top.size(), top_n));
  }
  store_scores(first_row, scores);
}

std::vector<std::optional<kv_cache::TokenScore>> RequestState::known_scores(int64_t length, int64_t from) const {
  const int64_t first = std::max(first_scored_row(), from - 1);
  // Rows [first, end) score positions [first + 1, end + 1), within [from, length).
  const int64_t end = std::min(first_scored_row() + scored_rows_done, length - 1);
  if (end <= first) return {};
  std::vector<std::optional<kv_cache::TokenScore>> known(static_cast<size_t>(length));
  const int32_t top_n = prompt_top_n();
  for (int64_t row = first; row < end; ++row) {
    const sampling::SampledToken& score = prompt_scores[static_cast<size_t>(row - first_scored_row())];
    known[static_cast<size_t>(row + 1)] = kv_cache::TokenScore{score.logprob, score.rank, top_n, score.top};
  }
  return known;
}

GenerationEvent RequestState::make_event() const {
  GenerationEvent event;
  event.request_id = request.request_id;
  event.prompt_tokens = prompt_len;
  event.completion_tokens = num_generated();
  event.cached_prompt_tokens = cached_prompt_tokens;
  return event;
}

bool RequestState::accept_token(const sampling::SampledToken& sampled, const std::vector<int32_t>& eos_token_ids) {
  FATHOM_CHECK(num_pending > 0, "request " << request_id() << ": received a token it was not waiting for");
  FATHOM_CHECK(phase != RequestPhase::kFinished, "request " << request_id() << ": received a token after finishing");
  --num_pending;
  const int32_t token = sampled.token_id;
  tokens.push_back(token);
  GenerationEvent event = make_event();
  event.new_token_ids.push_back(token);
  if (request.sampling.logprobs) event.logprobs.push_back(TokenLogprob{token, sampled.logprob, sampled.top});
  if (num_generated() == 1 && request.sampling.prompt_logprob_start >= 0) {
    if (first_unscored_row() != scored_rows_end()) {  // a scheduling bug: fail this request, not the engine
      finish(FinishReason::kError, "request " + request_id() + ": internal error: " + std::to_string(scored_rows_done) +
                                       " of " + std::to_string(scored_rows_end() - first_scored_row()) +
                                       " prompt rows scored at its first token");
      return true;
    }
    for (const sampling::SampledToken& score : prompt_scores) {
      event.prompt_logprobs.push_back(TokenLogprob{score.token_id, score.logprob, score.top, score.rank});
    }
  }

  const SamplingParams& params = request.sampling;
  const bool is_eos = !params.ignore_eos && std::find(eos_token_ids.begin(), eos_token_ids.end(), token) != eos_token_ids.end();
  const bool is_stop_token = std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), token) != params.stop_token_ids.end();
  if (is_eos || is_stop_token) {
    event.text_delta = text_.finish();
    event.finish_reason = FinishReason::kStop;
    event.matched_stop_token = token;
  } else {
    // Only a stop string ending at or after the min_new_tokens-th token matches (as SGLang and vLLM check them).
    TextStream::Piece piece = text_.push(token, /*match_stop_strings=*/num_generated() >= params.min_new_tokens);
    event.text_delta = std::move(piece.text);
    if (piece.match) {
      event.finish_reason = FinishReason::kStop;
      event.matched_stop = *piece.match;
    } else if (num_generated() >= params.max_new_tokens) {
      event.text_delta += text_.finish();
      event.finish_reason = FinishReason::kLength;
    }
  }
  event.finished = event.finish_reason != FinishReason::kNone;
  if (event.finished) phase = RequestPhase::kFinished;
  deliver(event);
  return event.finished;
}

void RequestState::finish(FinishReason reason, const std::string& error_message) {
  GenerationEvent event = make_event();
  event.finished = true;
  event.finish_reason = reason;
  event.error_message = error_message;
  phase = RequestPhase::kFinished;
  deliver(event);
}

void RequestState::deliver(const GenerationEvent& event) {
  // A throwing callback must not leave the scheduler's bookkeeping half-updated; its exception is dropped.
  try {
    on_event_(event);
  } catch (...) {
  }
}

}  // namespace fathom::scheduler
