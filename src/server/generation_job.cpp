#include "server/generation_job.h"

#include <algorithm>
#include <cstdio>

#include "server/api_error.h"
#include "server/event_loop.h"
#include "server/http_exchange.h"
#include "server/metrics.h"
#include "server/sse.h"

namespace fathom::server {

namespace {
double seconds_between(GenerationJob::Clock::time_point from, GenerationJob::Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}
const char* reason_label(scheduler::FinishReason reason) {
  switch (reason) {
    case scheduler::FinishReason::kStop: return "stop";
    case scheduler::FinishReason::kLength: return "length";
    case scheduler::FinishReason::kAbort: return "abort";
    case scheduler::FinishReason::kError: return "error";
    case scheduler::FinishReason::kNone: break;
  }
  return "none";
}
// --log-requests' line for a finished engine request; first_token_s < 0: none came.
std::string request_log_line(const ChoiceResult& choice, double first_token_s) {
  char line[256];
  std::snprintf(line, sizeof(line), ": %s, %lld prompt tokens (%lld cached), %lld generated, first token ",
                reason_label(choice.finish_reason), static_cast<long long>(choice.prompt_length),
                static_cast<long long>(choice.cached_prompt_tokens), static_cast<long long>(choice.completion_tokens));
  std::string text = "request " + choice.request_id + line;
  char timing[96];
  if (first_token_s >= 0.0) {
    std::snprintf(timing, sizeof(timing), "%.1f ms, total %.1f ms", first_token_s * 1e3, choice.latency_s * 1e3);
  } else {
    std::snprintf(timing, sizeof(timing), "-, total %.1f ms", choice.latency_s * 1e3);
  }
  text += timing;
  if (!choice.error_message.empty()) text += ", error: " + choice.error_message;
  return text;
}
}  // namespace

GenerationJob::GenerationJob(std::shared_ptr<HttpExchange> exchange, std::unique_ptr<GenerationProtocol> protocol, bool stream,
                             Context context)
    : exchange_(std::move(exchange)), protocol_(std::move(protocol)), stream_(stream), context_(std::move(context)) {
  started_at_ = exchange_->received_at();
}

void GenerationJob::start(std::vector<JobChoice> choices) {
  const size_t count = choices.size();
  choices_.resize(count);
  last_token_at_.assign(count, Clock::now());
  first_token_seen_.assign(count, false);
  first_token_s_.assign(count, -1.0);
  abort_sent_.assign(count, false);
  unfinished_ = count;
  for (size_t slot = 0; slot < count; ++slot) {
    response_ids_.push_back(choices[slot].response_id);
    client_rids_.push_back(choices[slot].client_rid);
    ChoiceResult& result = choices_[slot];
    result.index = choices[slot].index;
    result.prompt_index = choices[slot].prompt_index;
    result.request_id = choices[slot].request.request_id;
    result.prompt_length = static_cast<int64_t>(choices[slot].request.input_ids.size());
    const scheduler::GenerateRequest& request = choices[slot].request;
    prompt_only_.push_back(choices[slot].prompt_only);
    prompt_logprobs_asked_.push_back(request.sampling.prompt_logprob_start >= 0);
    first_prompt_tokens_.push_back(request.sampling.prompt_logprob_start == 0 && !request.input_ids.empty()
                                       ? std::optional<int32_t>(request.input_ids.front())
                                       : std::nullopt);
  }
  std::weak_ptr<GenerationJob> weak_self = weak_from_this();
  exchange_->set_close_handler([weak_self] {
    if (auto self = weak_self.lock()) self->abort();
  });
  std::shared_ptr<GenerationJob> self = shared_from_this();
  for (size_t slot = 0; slot < count; ++slot) {
    std::shared_ptr<LoopPoster> poster = context_.poster;
    try {
      context_.engine->submit(std::move(choices[slot].request),
                              [poster, self, slot](const scheduler::GenerationEvent& event) {
                                poster->post([self, slot, event] { self->on_event(slot, event); });
                              });
    } catch (const std::exception& error) {
      fail_unsubmitted(slot,
                       "request " + choices_[slot].request_id + ": the engine could not take it: " + error.what());
      return;
    }
  }
}

void GenerationJob::fail_unsubmitted(size_t first_unsubmitted, const std::string& message) {
  // No engine events will come for these choices: they end here.
  const Clock::time_point now = Clock::now();
  for (size_t slot = first_unsubmitted; slot < choices_.size(); ++slot) {
    scheduler::GenerationEvent failed;
    failed.request_id = choices_[slot].request_id;
    failed.finished = true;
    failed.finish_reason = scheduler::FinishReason::kError;
    failed.error_message = message;
    failed.prompt_tokens = choices_[slot].prompt_length;
    merge(choices_[slot], slot, failed, now);
  }
  // Nothing was streamed yet (events reach this job through the loop, after start): a server-side failure, 500.
  if (!answered_ && !exchange_->disconnected()) respond_error(500, message, "engine_error");
  abort();  // the choices submitted before it end with kAbort events, then the job is done
  notify_if_done();
}

size_t GenerationJob::abort() {
  size_t aborted = 0;
  for (size_t slot = 0; slot < choices_.size(); ++slot) {
    if (choices_[slot].finished || abort_sent_[slot]) continue;
    abort_sent_[slot] = true;
    context_.engine->abort(choices_[slot].request_id);
    ++aborted;
  }
  return aborted;
}

size_t GenerationJob::abort_matching(const std::string& id) {
  size_t aborted = 0;
  for (size_t slot = 0; slot < choices_.size(); ++slot) {
    if (choices_[slot].finished || abort_sent_[slot]) continue;
    if (client_rids_[slot] != id && response_ids_[slot] != id && choices_[slot].request_id != id) continue;
    abort_sent_[slot] = true;
    context_.engine->abort(choices_[slot].request_id);
    ++aborted;
  }
  return aborted;
}

std::vector<std::string> GenerationJob::client_rids() const {
  std::vector<std::string> rids;
  for (const std::string& rid : client_rids_) {
    if (!rid.empty() && std::find(rids.begin(), rids.end(), rid) == rids.end()) rids.push_back(rid);
  }
  return rids;
}

void GenerationJob::merge(ChoiceResult& choice, size_t slot, const scheduler::GenerationEvent& event, Clock::time_point now) {
  const uint64_t new_tokens = event.new_token_ids.size();
  if (new_tokens > 0) {
    if (!first_token_seen_[slot] && prompt_logprobs_asked_[slot]) {  // the first token's event brings them
      choice.prompt_logprobs_ready = true;
      choice.unscored_first_prompt_token = first_prompt_tokens_[slot];
      choice.prompt_logprobs = event.prompt_logprobs;
    }
    if (!first_token_seen_[slot]) {
      first_token_seen_[slot] = true;
      first_token_s_[slot] = seconds_between(started_at_, now);
      context_.metrics->record_first_token(first_token_s_[slot]);
      if (new_tokens > 1) context_.metrics->record_inter_token(0.0, new_tokens - 1);
    } else {
      context_.metrics->record_inter_token(seconds_between(last_token_at_[slot], now) / static_cast<double>(new_tokens), new_tokens);
    }
    last_token_at_[slot] = now;
    if (!prompt_only_[slot]) context_.metrics->record_generated_tokens(now, static_cast<int64_t>(new_tokens));
  }
  if (!prompt_only_[slot]) {
    choice.text += event.text_delta;
    choice.token_ids.insert(choice.token_ids.end(), event.new_token_ids.begin(), event.new_token_ids.end());
    choice.logprobs.insert(choice.logprobs.end(), event.logprobs.begin(), event.logprobs.end());
    choice.completion_tokens = std::max<int64_t>(event.completion_tokens, static_cast<int64_t>(choice.token_ids.size()));
  }
  if (event.cached_prompt_tokens > 0) choice.cached_prompt_tokens = event.cached_prompt_tokens;
  if (event.finished) {
    choice.finished = true;
    choice.finish_reason = event.finish_reason == scheduler::FinishReason::kNone ? scheduler::FinishReason::kStop : event.finish_reason;
    const bool generated = choice.finish_reason == scheduler::FinishReason::kStop ||
                           choice.finish_reason == scheduler::FinishReason::kLength;
    if (prompt_only_[slot] && generated) choice.finish_reason = scheduler::FinishReason::kLength;  // its 0-token limit
    choice.matched_stop = prompt_only_[slot] ? std::string() : event.matched_stop;
    choice.matched_stop_token = prompt_only_[slot] ? std::nullopt : event.matched_stop_token;
    choice.error_message = event.error_message;
    choice.latency_s = seconds_between(started_at_, now);
    --unfinished_;
    context_.metrics->record_finished(reason_label(choice.finish_reason), choice.prompt_length, choice.cached_prompt_tokens,
                                      choice.latency_s);
    if (context_.request_log) context_.request_log->info(request_log_line(choice, first_token_s_[slot]));
  }
}

void GenerationJob::on_event(size_t slot, const scheduler::GenerationEvent& event) {
  ChoiceResult& choice = choices_.at(slot);
  if (choice.finished) return;  // nothing may follow a final event
  merge(choice, slot, event, Clock::now());
  const bool failed = choice.finished && choice.finish_reason == scheduler::FinishReason::kError;

  if (!answered_ && !exchange_->disconnected()) {
    if (failed && !stream_open_) {
      // Nothing sent yet: a proper error response; the other choices are cancelled. A full queue is the server's
      // condition, not the request's: 503, to be retried.
      if (event.queue_full) exchange_->add_response_header("Retry-After", "1");
      respond_error(event.queue_full ? 503 : 400,
                    choice.error_message.empty() ? "the engine rejected the request" : choice.error_message,
                    event.queue_full ? "queue_full" : "engine_error");
      abort();
    } else if (stream_) {
      std::string out;
      if (!stream_open_) {
        stream_open_ = true;
        context_.metrics->record_response_status(200);
        exchange_->start_stream(200, sse_headers());
        protocol_->stream_opened(choices_, out);
      }
      if (failed) {
        append_sse_event(out, error_json(event.queue_full ? ApiError(503, choice.error_message, "", "queue_full")
                                                          : ApiError(400, choice.error_message, "", "engine_error")));
      } else if (prompt_only_[slot]) {  // the token it ran is not part of the output
        scheduler::GenerationEvent visible = event;
        visible.text_delta.clear();
        visible.new_token_ids.clear();
        visible.logprobs.clear();
        visible.completion_tokens = 0;
        protocol_->stream_delta(choice, visible, out);
      } else {
        protocol_->stream_delta(choice, event, out);
      }
      if (unfinished_ == 0) {
        protocol_->stream_closed(choices_, out);
        append_sse_done(out);
      }
      if (!out.empty()) exchange_->send(out);
      if (unfinished_ == 0) {
        exchange_->end_stream();
        answered_ = true;
      }
    } else if (unfinished_ == 0) {
      respond_final();
    }
  }
  notify_if_done();
}

void GenerationJob::notify_if_done() {
  if (unfinished_ == 0 && context_.on_done) {
    auto on_done = std::move(context_.on_done);
    context_.on_done = nullptr;
    on_done(this);
  }
}

void GenerationJob::respond_error(int status, const std::string& message, const std::string& code) {
  answered_ = true;
  context_.metrics->record_response_status(status);
  exchange_->respond(error_response(ApiError(status, message, "", code)));
}

void GenerationJob::respond_final() {
  answered_ = true;
  context_.metrics->record_response_status(200);
  exchange_->respond(HttpResponse::json(200, dump_json(protocol_->final_response(choices_))));
}

}  // namespace fathom::server
