#pragma once
// One HTTP generation request on the event loop's thread: submits its choices (n, or a batch of prompts) to
// the engine, merges their event streams, and answers through its GenerationProtocol: a JSON response when
// all are done, or SSE chunks as tokens arrive, ending with "data: [DONE]". Engine callbacks (engine thread)
// are handed to the loop through a LoopPoster. A client that goes away aborts the unfinished engine requests;
// an engine error before anything was streamed becomes an error response (400).
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/log.h"
#include "scheduler/engine.h"
#include "server/generation_protocol.h"

namespace fathom::server {

class EventLoop;
class HttpExchange;
class LoopPoster;
class ServerMetrics;

struct JobChoice {
  int64_t index = 0;
  int64_t prompt_index = 0;
  scheduler::GenerateRequest request;
  std::string response_id;  // the response's id ("chatcmpl-...", "gen-..."): /abort_request by it aborts every choice
  std::string client_rid;   // SGLang's "rid" of this choice's prompt, when the client named one (else empty)
  // A limit of 0 tokens (echo or prompt logprobs only): the request runs one token, which the output leaves out.
  bool prompt_only = false;
};

class GenerationJob : public std::enable_shared_from_this<GenerationJob> {
 public:
  using Clock = std::chrono::steady_clock;
  struct Context {
    scheduler::Engine* engine = nullptr;
    ServerMetrics* metrics = nullptr;
    std::shared_ptr<LoopPoster> poster;
    std::function<void(GenerationJob*)> on_done;  // every engine request has finished (called on the loop thread)
    const Logger* request_log = nullptr;  // --log-requests: a line per finished engine request at info (null: none)
  };

  GenerationJob(std::shared_ptr<HttpExchange> exchange, std::unique_ptr<GenerationProtocol> protocol, bool stream, Context context);

  // Loop thread: registers the disconnect handler and submits every choice. A submit that throws ends the job instead
  // of escaping: its choice and the later ones fail, the client gets a 500, the ones submitted before are aborted, and
  // on_done follows once they ended.
  void start(std::vector<JobChoice> choices);
  // Loop thread: aborts every unfinished engine request (their final events still arrive); returns how many.
  size_t abort();
  // Loop thread: aborts the unfinished choices whose client rid, response id or engine request id is `id`;
  // returns how many were aborted.
  size_t abort_matching(const std::string& id);
  // The client rids of this job's choices (each once).
  std::vector<std::string> client_rids() const;
  bool done() const { return unfinished_ == 0; }
  const std::vector<ChoiceResult>& choices() const { return choices_; }

 private:
  void on_event(size_t slot, const scheduler::GenerationEvent& event);
  // Ends choices [first_unsubmitted, end) with `message` after their submit threw; answers the client, aborts the rest.
  void fail_unsubmitted(size_t first_unsubmitted, const std::string& message);
  // Calls on_done once every choice has finished.
  void notify_if_done();
  void merge(ChoiceResult& choice, size_t slot, const scheduler::GenerationEvent& event, Clock::time_point now);
  void respond_error(int status, const std::string& message, const std::string& code);
  void respond_final();

  std::shared_ptr<HttpExchange> exchange_;
  std::unique_ptr<GenerationProtocol> protocol_;
  bool stream_;
  Context context_;
  std::vector<ChoiceResult> choices_;
  std::vector<Clock::time_point> last_token_at_;
  std::vector<bool> first_token_seen_;
  std::vector<double> first_token_s_;      // [slots]: submit to first token, for --log-requests
  std::vector<bool> abort_sent_;
  std::vector<bool> prompt_only_;                           // [slots]: JobChoice::prompt_only
  std::vector<bool> prompt_logprobs_asked_;                 // [slots]: prompt_logprob_start >= 0
  std::vector<std::optional<int32_t>> first_prompt_tokens_;  // [slots]: the prompt's first token when that start is 0
  std::vector<std::string> response_ids_;  // [slots]: JobChoice::response_id
  std::vector<std::string> client_rids_;   // [slots]: JobChoice::client_rid
  size_t unfinished_ = 0;
  bool stream_open_ = false;
  bool answered_ = false;  // a complete response (or error) went out, or the stream ended
  Clock::time_point started_at_;
};

}  // namespace fathom::server
