#include "server/api_server.h"

#include <cctype>
#include <ctime>
#include <future>

#include "core/error.h"
#include "server/api_error.h"
#include "server/generation_job.h"
#include "server/http_exchange.h"
#include "server/json_fields.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/sse.h"

namespace fathom::server {

namespace {

using Json = nlohmann::ordered_json;

Json engine_stats_json(const scheduler::EngineStats& stats) {
  return Json{{"waiting_requests", stats.waiting_requests},
              {"running_requests", stats.running_requests},
              {"kv_total_tokens", stats.kv_total_tokens},
              {"kv_used_tokens", stats.kv_used_tokens},
              {"prompt_tokens_total", stats.prompt_tokens_total},
              {"cached_prompt_tokens_total", stats.cached_prompt_tokens_total},
              {"generated_tokens_total", stats.generated_tokens_total}};
}

bool constant_time_equals(std::string_view a, std::string_view b) {
  unsigned char difference = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) difference |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return difference == 0 && !b.empty();
}

ApiError shutting_down_error() { return ApiError(503, "The server is shutting down; retry on another instance.", "", "server_shutting_down"); }

// JSON bodies need a JSON media type when one is named (as FastAPI servers require): a browser page cannot send
// those cross-origin without a preflight, so a "simple" text/plain or form POST cannot start generations.
void check_json_content_type(HttpExchange& exchange) {
  const HttpRequest& request = exchange.request();
  if (const std::optional<std::string_view> encoding = request.header("content-encoding")) {
    if (!equals_ignore_case(*encoding, "identity")) {
      exchange.add_response_header("Accept-Encoding", "identity");  // the codings accepted (RFC 7694)
      throw ApiError(415, "Unsupported Content-Encoding '" + std::string(encoding->substr(0, 64)) +
                              "': send the JSON body uncompressed.",
                     "", "unsupported_media_type");
    }
  }
  const std::optional<std::string_view> header = request.header("content-type");
  if (!header) return;
  std::string_view type = header->substr(0, header->find(';'));
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.remove_suffix(1);
  while (!type.empty() && (type.front() == ' ' || type.front() == '\t')) type.remove_prefix(1);
  std::string lower(type);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "application/json" || (lower.starts_with("application/") && lower.ends_with("+json"))) return;
  throw ApiError(415, "Unsupported Content-Type '" + std::string(header->substr(0, 64)) +
                          "': send the JSON body with 'Content-Type: application/json'.",
                 "", "unsupported_media_type");
}

ApiError unauthorized_error() {
  return ApiError(401, "Incorrect API key provided. Pass it as 'Authorization: Bearer <key>'.", "", "invalid_api_key",
                  "invalid_request_error");
}

}  // namespace

ApiServer::ApiServer(ApiServerConfig config, scheduler::Engine& engine, std::shared_ptr<const PromptCodec> codec)
    : config_(std::move(config)),
      engine_(engine),
      codec_(std::move(codec)),
      loop_(config_.logger),
      poster_(std::make_shared<LoopPoster>(&loop_)),
      http_(loop_, config_.http, [this](std::shared_ptr<HttpExchange> exchange) { dispatch(exchange); },
            [this](int status, const std::string& message, const HttpRequest& partial) {
              metrics_.record_response_status(status);  // 400 / 408 / 413 / 431 / 505 from the HTTP layer
              return with_cors(error_response(protocol_error(status, message)), partial);
            }) {
  FATHOM_CHECK(codec_ != nullptr, "ApiServer needs a prompt codec");
  FATHOM_CHECK(config_.preparation_threads >= 1, "preparation_threads must be >= 1, got " << config_.preparation_threads);
  preparation_.codec = codec_;
  preparation_.served_model_name = config_.served_model_name;
  preparation_.limits = config_.request_limits;
  preparation_.max_context_tokens = engine_.max_context_tokens();
  preparation_.ids = &ids_;
  preparation_.parsers = config_.output_parsers;
  preparation_.special_token_texts = codec_->special_token_texts();
  created_unix_s_ = static_cast<int64_t>(std::time(nullptr));
  register_routes();
  // A client waiting for 100-continue without a valid key gets the 401 before it uploads the body.
  http_.set_refuse_before_body([this](const HttpRequest& request) -> std::optional<HttpResponse> {
    if (authorized(request)) return std::nullopt;
    metrics_.record_response_status(401);
    return with_cors(error_response(unauthorized_error()), request);
  });
  if (config_.logger && config_.logger->enabled(LogLevel::kInfo)) {
    http_.set_exchange_observer([logger = config_.logger](const ExchangeRecord& record) {
      logger->info(format_access_line(record));
    });
  }
}

ApiServer::~ApiServer() {
  if (started_ && !stopped_) {
    loop_.stop();
    if (io_thread_.joinable()) io_thread_.join();
    if (workers_) workers_->stop();
    stopped_ = true;
  }
  poster_->detach();
}

std::string ApiServer::url() const {
  const std::string& host = config_.http.host;
  const bool ipv6 = host.find(':') != std::string::npos;
  return "http://" + (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port());
}

void ApiServer::start() {
  FATHOM_CHECK(!started_, "ApiServer::start called twice");
  http_.listen();
  workers_ = std::make_unique<TaskPool>(config_.preparation_threads, config_.logger);
  started_ = true;
  io_thread_ = std::thread([this] { loop_.run(); });
}

void ApiServer::run_on_loop(const std::function<void()>& task) {
  std::promise<void> done;
  std::future<void> finished = done.get_future();
  loop_.post([&] {
    task();
    done.set_value();
  });
  finished.wait();
}

void ApiServer::shutdown() {
  std::lock_guard<std::mutex> lock(shutdown_mutex_);
  if (!started_ || stopped_) return;
  FATHOM_CHECK(!loop_.in_loop_thread(), "ApiServer::shutdown must not run on the event loop thread");
  run_on_loop([this] {
    draining_ = true;
    http_.begin_drain();
  });
  {
    std::unique_lock<std::mutex> preparing_lock(preparing_mutex_);
    preparing_done_.wait(preparing_lock, [this] { return preparing_ == 0; });
  }
  engine_.shutdown();  // finishes every admitted request; their events keep streaming through the loop
  const auto deadline = std::chrono::steady_clock::now() + config_.shutdown_flush_timeout;
  for (;;) {
    bool idle = false;
    run_on_loop([&] { idle = active_jobs_.empty() && http_.busy_connection_count() == 0; });
    if (idle || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  run_on_loop([this] { http_.close_all(); });
  loop_.stop();
  io_thread_.join();
  workers_->stop();
  poster_->detach();
  stopped_ = true;
}

void ApiServer::abort_all() {
  if (!started_ || stopped_) return;
  poster_->post([this] {
    for (auto& [raw, job] : active_jobs_) job->abort();
  });
}

void ApiServer::register_routes() {
  auto generation = [this](GenerationKind kind) {
    return [this, kind](const std::shared_ptr<HttpExchange>& exchange) { handle_generation(exchange, kind); };
  };
  router_.add("POST", "/v1/completions", generation(GenerationKind::kCompletion));
  router_.add("POST", "/v1/chat/completions", generation(GenerationKind::kChat));
  router_.add("POST", "/generate", generation(GenerationKind::kNative));
  router_.add("GET", "/v1/models", [this](const std::shared_ptr<HttpExchange>& exchange) { handle_models(exchange, ""); });
  router_.add("GET", "/v1/models/*", [this](const std::shared_ptr<HttpExchange>& exchange) {
    const std::string& path = exchange->request().path;
    handle_models(exchange, path.substr(std::string("/v1/models/").size()));
  });
  router_.add("GET", "/health", [this](const std::shared_ptr<HttpExchange>& exchange) {
    if (draining_) return reply_error(exchange, shutting_down_error());
    // An engine that refuses every request is down for load balancers too (SGLang answers 503 when unhealthy).
    const std::string internal_error = engine_.stats().internal_error;
    if (!internal_error.empty()) return reply_error(exchange, ApiError(503, internal_error, "", "engine_error"));
    reply(exchange, HttpResponse::text(200, ""));
  });
  router_.add("GET", "/health_generate", [this](const std::shared_ptr<HttpExchange>& exchange) { handle_health_generate(exchange); });
  router_.add("GET", "/get_model_info", [this](const std::shared_ptr<HttpExchange>& exchange) { handle_model_info(exchange); });
  router_.add("GET", "/get_server_info", [this](const std::shared_ptr<HttpExchange>& exchange) { handle_server_info(exchange); });
  router_.add("GET", "/flush_cache", [this](const std::shared_ptr<HttpExchange>& exchange) { handle_flush_cache(exchange); });
  router_.add("POST", "/flush_cache", [this](const std::shared_ptr<HttpExchange>& exchange) { handle_flush_cache(exchange); });
  router_.add("POST", "/abort_request", [this](const std::shared_ptr<HttpExchange>& exchange) { handle_abort_request(exchange); });
  router_.add("POST", "/tokenize", [this](const std::shared_ptr<HttpExchange>& exchange) {
    handle_prepared_json(exchange, &prepare_tokenize);
  });
  router_.add("POST", "/detokenize", [this](const std::shared_ptr<HttpExchange>& exchange) {
    handle_prepared_json(exchange, &prepare_detokenize);
  });
  if (config_.enable_metrics) {
    router_.add("GET", "/metrics", [this](const std::shared_ptr<HttpExchange>& exchange) { handle_metrics(exchange); });
  }
}

// The Access-Control-Allow-Origin value for this request: "*" when any origin is allowed, the request's Origin when
// it is listed, nothing otherwise (no Origin, or one not allowed).
std::optional<std::string> ApiServer::allowed_origin(const HttpRequest& request) const {
  const std::optional<std::string_view> origin = request.header("origin");
  if (!origin) return std::nullopt;
  for (const std::string& allowed : config_.allowed_origins) {
    if (allowed == "*") return allowed;
    if (allowed == *origin) return allowed;
  }
  return std::nullopt;
}

// The CORS headers of every answer to `request`, the exchanges' and the HTTP layer's own (empty: origin not allowed).
HttpHeaders ApiServer::cors_headers(const HttpRequest& request) const {
  HttpHeaders headers;
  if (const std::optional<std::string> allowed = allowed_origin(request)) {
    headers.emplace_back("Access-Control-Allow-Origin", *allowed);
    headers.emplace_back("Access-Control-Expose-Headers", "Retry-After");  // a 503's retry hint
    if (*allowed != "*") headers.emplace_back("Vary", "Origin");
  }
  return headers;
}

// The HTTP layer's own answers get the CORS headers too: a page would otherwise see a CORS failure, not e.g. a 413.
HttpResponse ApiServer::with_cors(HttpResponse response, const HttpRequest& request) const {
  for (auto& header : cors_headers(request)) response.headers.push_back(std::move(header));
  return response;
}

bool ApiServer::authorized(const HttpRequest& request) const {
  if (config_.api_key.empty()) return true;
  const std::string& path = request.path;
  if (path.rfind("/health", 0) == 0 || path == "/metrics") return true;  // probes and scrapers
  auto header = request.header("authorization");
  if (!header || header->size() < 7 || !equals_ignore_case(header->substr(0, 7), "bearer ")) return false;
  std::string_view token = header->substr(7);
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  return constant_time_equals(token, config_.api_key);
}

void ApiServer::dispatch(const std::shared_ptr<HttpExchange>& exchange) {
  const HttpRequest& request = exchange->request();
  Router::Match match = router_.find(request.method, request.path);
  metrics_.record_request(match.outcome == Router::Outcome::kFound ? match.route : "other");
  // CORS for the --allowed-origins only. A browser's preflight carries no credentials, so it is answered before the
  // API key check.
  HttpHeaders cors = cors_headers(request);
  if (!cors.empty()) {
    for (auto& [name, value] : cors) exchange->add_response_header(std::move(name), std::move(value));
    if (request.method == "OPTIONS" && request.header("access-control-request-method") &&
        match.outcome == Router::Outcome::kMethodNotAllowed) {
      HttpResponse preflight{200, {{"Access-Control-Allow-Methods", match.allowed_methods + ", OPTIONS"},
                                   {"Access-Control-Max-Age", "600"}}, ""};
      if (auto headers = request.header("access-control-request-headers")) {
        preflight.headers.emplace_back("Access-Control-Allow-Headers", std::string(*headers));
      }
      return reply(exchange, std::move(preflight));
    }
  }
  if (!authorized(request)) return reply_error(exchange, unauthorized_error());
  if (match.outcome == Router::Outcome::kNotFound) {
    reply_error(exchange, ApiError(404, "Unknown request URL: " + request.method + " " + request.path + ".", "", "unknown_url"));
    return;
  }
  if (match.outcome == Router::Outcome::kMethodNotAllowed) {
    HttpResponse response = error_response(ApiError(405, "Method " + request.method + " is not allowed for " + request.path +
                                                             " (allowed: " + match.allowed_methods + ").",
                                                     "", "method_not_allowed"));
    response.headers.emplace_back("Allow", match.allowed_methods);
    reply(exchange, std::move(response));
    return;
  }
  try {
    (*match.handler)(exchange);
  } catch (const ApiError& error) {
    reply_error(exchange, error);
  } catch (const std::exception& error) {
    reply_error(exchange, ApiError(500, std::string("internal error: ") + error.what()));
  }
}

void ApiServer::reply(const std::shared_ptr<HttpExchange>& exchange, HttpResponse response) {
  if (exchange->finished() || exchange->streaming()) return;
  metrics_.record_response_status(response.status);
  exchange->respond(std::move(response));
}

void ApiServer::reply_error(const std::shared_ptr<HttpExchange>& exchange, const ApiError& error) {
  reply(exchange, error_response(error));
}

void ApiServer::reply_json(const std::shared_ptr<HttpExchange>& exchange, int status, const Json& body) {
  reply(exchange, HttpResponse::json(status, dump_json(body)));
}

void ApiServer::finish_preparation() {
  std::lock_guard<std::mutex> lock(preparing_mutex_);
  if (--preparing_ == 0) preparing_done_.notify_all();
}

template <typename Result>
void ApiServer::prepare_on_worker(const std::shared_ptr<HttpExchange>& exchange, std::function<Result()> prepare,
                                  std::function<void(Result&&)> deliver) {
  if (draining_) return reply_error(exchange, shutting_down_error());
  check_json_content_type(*exchange);
  {
    std::lock_guard<std::mutex> lock(preparing_mutex_);
    ++preparing_;
  }
  workers_->submit([this, exchange, prepare = std::move(prepare), deliver = std::move(deliver)] {
    auto result = std::make_shared<Result>();
    std::shared_ptr<ApiError> error;
    try {
      *result = prepare();
    } catch (const ApiError& caught) {
      error = std::make_shared<ApiError>(caught);
    } catch (const std::exception& caught) {
      error = std::make_shared<ApiError>(500, std::string("internal error while preparing the request: ") + caught.what());
    }
    poster_->post([this, exchange, result, error, deliver] {
      // Thrown on the loop thread, an exception would end the server: the request fails alone.
      try {
        if (error) {
          reply_error(exchange, *error);
        } else if (!exchange->disconnected()) {
          deliver(std::move(*result));
        }
      } catch (const ApiError& caught) {
        reply_error(exchange, caught);
      } catch (const std::exception& caught) {
        reply_error(exchange, ApiError(500, std::string("internal error: ") + caught.what()));
      }
      finish_preparation();  // always: shutdown waits for every preparation to end
    });
  });
}

void ApiServer::handle_generation(const std::shared_ptr<HttpExchange>& exchange, GenerationKind kind) {
  prepare_on_worker<PreparedGeneration>(
      exchange,
      [this, exchange, kind] {
        const std::string& body = exchange->request().body;
        switch (kind) {
          case GenerationKind::kCompletion: return prepare_completion(body, preparation_);
          case GenerationKind::kChat: return prepare_chat(body, preparation_);
          case GenerationKind::kNative: break;
        }
        return prepare_native_generate(body, preparation_);
      },
      [this, exchange](PreparedGeneration&& prepared) { start_job(exchange, std::move(prepared)); });
}

void ApiServer::handle_prepared_json(const std::shared_ptr<HttpExchange>& exchange, JsonPreparation prepare) {
  prepare_on_worker<Json>(
      exchange, [this, exchange, prepare] { return prepare(exchange->request().body, preparation_); },
      [this, exchange](Json&& answer) { reply_json(exchange, 200, answer); });
}

void ApiServer::start_job(const std::shared_ptr<HttpExchange>& exchange, PreparedGeneration prepared) {
  GenerationJob::Context context;
  context.engine = &engine_;
  context.metrics = &metrics_;
  context.poster = poster_;
  if (config_.log_requests && config_.logger && config_.logger->enabled(LogLevel::kInfo)) {
    context.request_log = config_.logger.get();
  }
  for (const JobChoice& choice : prepared.choices) {
    if (!choice.client_rid.empty() && active_rids_.count(choice.client_rid)) {
      return reply_error(exchange, ApiError::invalid_value("rid", "Invalid 'rid': '" + choice.client_rid.substr(0, 64) +
                                                                      "' is in use by a running request."));
    }
  }
  context.on_done = [this](GenerationJob* job) {
    loop_.post([this, job] {
      for (const std::string& rid : job->client_rids()) active_rids_.erase(rid);
      active_jobs_.erase(job);
    });
  };
  auto job = std::make_shared<GenerationJob>(exchange, std::move(prepared.protocol), prepared.stream, std::move(context));
  active_jobs_[job.get()] = job;
  try {
    job->start(std::move(prepared.choices));
  } catch (...) {
    // Its own bookkeeping failed (a throwing submit does not escape start): drop the job; the caller answers.
    active_jobs_.erase(job.get());
    throw;
  }
  for (const std::string& rid : job->client_rids()) active_rids_.insert(rid);
}

// SGLang's health check: a one-token generation, but a busy engine is healthy as soon as it makes progress (tokens
// generated for any request since the probe arrived), so a probe queued behind a full batch does not report a loaded
// server as down. (Submissions alone are no progress: a wedged engine thread may still count them.)
struct ApiServer::HealthProbe {
  std::shared_ptr<HttpExchange> exchange;
  std::string request_id;
  int64_t progress_at_arrival = 0;
  EventLoop::TimerId deadline_timer = 0, poll_timer = 0;
  bool done = false;
};

namespace {
int64_t engine_progress(const scheduler::EngineStats& stats) { return stats.generated_tokens_total; }
}  // namespace

void ApiServer::handle_health_generate(const std::shared_ptr<HttpExchange>& exchange) {
  if (draining_) return reply_error(exchange, shutting_down_error());
  auto probe = std::make_shared<HealthProbe>();
  probe->exchange = exchange;
  probe->request_id = ids_.next("health");
  probe->progress_at_arrival = engine_progress(engine_.stats());
  probe->deadline_timer = loop_.run_after(config_.health_generate_timeout, [this, probe] {
    const ApiError error(503, "health generation made no progress within " +
                                  std::to_string(config_.health_generate_timeout.count()) + " ms");
    finish_health_probe(probe, &error);
  });
  probe->poll_timer = loop_.run_after(config_.health_progress_poll, [this, probe] { poll_health_probe(probe); });
  exchange->set_close_handler([this, probe] {
    probe->exchange.reset();
    finish_health_probe(probe, nullptr);
  });
  scheduler::GenerateRequest request;
  request.request_id = probe->request_id;
  request.input_ids = {0};
  request.sampling.temperature = 0.0f;
  request.sampling.max_new_tokens = 1;
  request.sampling.ignore_eos = true;
  std::shared_ptr<LoopPoster> poster = poster_;
  engine_.submit(std::move(request), [this, poster, probe](const scheduler::GenerationEvent& event) {
    if (!event.finished) return;
    poster->post([this, probe, event] {
      if (event.queue_full) return;  // queued out by load, not failing: the progress poll and the deadline decide
      if (event.finish_reason == scheduler::FinishReason::kError || event.finish_reason == scheduler::FinishReason::kAbort) {
        const ApiError error(503, "health generation failed: " +
                                      (event.error_message.empty() ? std::string("aborted") : event.error_message));
        finish_health_probe(probe, &error);
      } else {
        finish_health_probe(probe, nullptr);
      }
    });
  });
}

void ApiServer::poll_health_probe(const std::shared_ptr<HealthProbe>& probe) {
  if (probe->done) return;
  if (engine_progress(engine_.stats()) > probe->progress_at_arrival) return finish_health_probe(probe, nullptr);
  probe->poll_timer = loop_.run_after(config_.health_progress_poll, [this, probe] { poll_health_probe(probe); });
}

// Loop thread; once per probe: answers 200 (error null) or the error, stops its timers and drops its generation.
void ApiServer::finish_health_probe(const std::shared_ptr<HealthProbe>& probe, const ApiError* error) {
  if (probe->done) return;
  probe->done = true;
  loop_.cancel_timer(probe->deadline_timer);
  loop_.cancel_timer(probe->poll_timer);
  engine_.abort(probe->request_id);  // a no-op once it finished
  if (probe->exchange) {
    if (error != nullptr) {
      reply_error(probe->exchange, *error);
    } else {
      reply(probe->exchange, HttpResponse::text(200, ""));
    }
  }
  probe->exchange.reset();
}

void ApiServer::handle_models(const std::shared_ptr<HttpExchange>& exchange, const std::string& model_id) {
  const int64_t context = engine_.max_context_tokens();
  if (model_id.empty()) {
    reply_json(exchange, 200, Json{{"object", "list"}, {"data", Json::array({model_card_json(config_.served_model_name, created_unix_s_, context)})}});
    return;
  }
  if (model_id != config_.served_model_name) {
    reply_error(exchange, ApiError(404, "The model '" + model_id + "' does not exist.", "model", "model_not_found"));
    return;
  }
  reply_json(exchange, 200, model_card_json(config_.served_model_name, created_unix_s_, context));
}

void ApiServer::handle_model_info(const std::shared_ptr<HttpExchange>& exchange) {
  reply_json(exchange, 200,
             Json{{"model_path", config_.model_path},
                  {"tokenizer_path", config_.tokenizer_path},
                  {"is_generation", true},
                  {"served_model_name", config_.served_model_name},
                  {"max_context_length", engine_.max_context_tokens()},
                  {"vocab_size", codec_->vocab_size()}});
}

void ApiServer::handle_server_info(const std::shared_ptr<HttpExchange>& exchange) {
  Json info = config_.server_args;
  const scheduler::EngineStats stats = engine_.stats();
  if (info.contains("port")) info["port"] = port();  // the bound port when started with --port 0
  info["served_model_name"] = config_.served_model_name;
  info["max_context_length"] = engine_.max_context_tokens();
  info["engine"] = engine_stats_json(stats);
  info["internal_states"] = Json::array({engine_stats_json(stats)});
  info["http"] = Json{{"host", config_.http.host},
                      {"port", port()},
                      {"open_connections", static_cast<int64_t>(http_.connection_count())},
                      {"active_generations", static_cast<int64_t>(active_jobs_.size())},
                      {"draining", draining_}};
  info["version"] = "fathom 0.1";
  reply_json(exchange, 200, info);
}

void ApiServer::handle_flush_cache(const std::shared_ptr<HttpExchange>& exchange) {
  // flush_cache waits for the engine thread (possibly a whole step): keep it off the event loop.
  workers_->submit([this, exchange] {
    std::string problem;
    bool flushed = false;
    try {
      flushed = engine_.flush_cache();
    } catch (const std::exception& error) {
      problem = error.what();
    }
    poster_->post([this, exchange, flushed, problem] {
      if (!problem.empty()) {
        reply_error(exchange, ApiError(500, "flush_cache failed: " + problem));
      } else if (flushed) {
        reply(exchange, HttpResponse::text(200, "Cache flushed.\n"));
      } else {
        reply_error(exchange, ApiError(400, "Cache not flushed: requests are running; retry when the server is idle.", "", "cache_busy"));
      }
    });
  });
}

void ApiServer::handle_abort_request(const std::shared_ptr<HttpExchange>& exchange) {
  check_json_content_type(*exchange);
  // Parsed on the loop thread (it walks active_jobs_): a body of ids only, so a large one is refused unparsed.
  constexpr size_t kMaxAbortBodyBytes = 1 << 20;
  if (exchange->request().body.size() > kMaxAbortBodyBytes) {
    throw ApiError(413, "An /abort_request body is at most " + std::to_string(kMaxAbortBodyBytes) + " bytes.", "",
                   "request_too_large");
  }
  const Json body = parse_json_object(exchange->request().body);
  JsonFields fields(body);
  fields.reject_unknown({"rid", "abort_all"});
  const bool abort_all = fields.boolean("abort_all").value_or(false);
  const std::optional<std::vector<std::string>> rids = fields.string_or_strings("rid");
  if (!abort_all && !rids) throw ApiError(400, "Give 'rid' (a request id or a list of them) or 'abort_all': true.", "rid", "invalid_value");
  // Unfinished choices end with finish_reason "abort"; their responses complete as usual.
  size_t aborted = 0;
  for (auto& [raw, job] : active_jobs_) {
    if (abort_all) {
      aborted += job->abort();
      continue;
    }
    for (const std::string& rid : *rids) aborted += job->abort_matching(rid);
  }
  reply(exchange, HttpResponse::json(200, Json{{"aborted", aborted}}.dump()));
}

void ApiServer::handle_metrics(const std::shared_ptr<HttpExchange>& exchange) {
  ConnectionGauges gauges;
  gauges.open_connections = static_cast<int64_t>(http_.connection_count());
  gauges.active_http_generations = static_cast<int64_t>(active_jobs_.size());
  HttpResponse response;
  response.status = 200;
  response.headers.emplace_back("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
  response.body = metrics_.render(engine_.stats(), gauges, ServerMetrics::Clock::now());
  reply(exchange, std::move(response));
}

}  // namespace fathom::server
