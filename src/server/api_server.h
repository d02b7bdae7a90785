#pragma once
// The serving front end: an HTTP server on its own event-loop thread with the OpenAI-compatible and
// SGLang-style endpoints over a scheduler::Engine, request preparation on a small worker pool, API-key
// auth, metrics, and graceful shutdown (stop accepting, drain the engine, flush responses).
//
// Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models[/ID], POST /generate,
// GET /health, GET /health_generate, GET /get_model_info, GET /get_server_info, GET|POST /flush_cache,
// GET /metrics.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "scheduler/engine.h"
#include "server/event_loop.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/output_parsing.h"
#include "server/prompt_codec.h"
#include "server/request_preparation.h"
#include "server/router.h"
#include "server/task_pool.h"

namespace fathom::server {

class GenerationJob;
class HttpExchange;

struct ApiServerConfig {
  HttpServerConfig http;
  std::string served_model_name = "default";
  std::string model_path;
  std::string tokenizer_path;
  std::string api_key;                 // empty: no authentication
  RequestLimits request_limits;
  int preparation_threads = 2;         // JSON parsing, chat templates, tokenization
  // /health_generate answers 503 only when the engine made no progress at all (its probe included) in this long.
  std::chrono::milliseconds health_generate_timeout{20'000};
  std::chrono::milliseconds health_progress_poll{200};  // how often a waiting probe looks at the engine's counters
  std::chrono::milliseconds shutdown_flush_timeout{30'000};  // after the engine drained, for slow clients
  nlohmann::ordered_json server_args = nlohmann::ordered_json::object();  // shown by /get_server_info
  OutputParsers output_parsers;        // --tool-call-parser / --reasoning-parser for chat completions
  bool enable_metrics = false;         // --enable-metrics: serve GET /metrics (Prometheus text), as SGLang does
  // --allowed-origins: browser origins allowed by CORS ("*": any). Empty: no CORS, so a web page the operator visits
  // cannot drive a server that has no API key (SGLang and vLLM allow any origin by default).
  std::vector<std::string> allowed_origins;
  // Where the access log goes (one line per exchange at LogLevel::kInfo, server/access_log.h); null: no access log.
  std::shared_ptr<const Logger> logger;
  bool log_requests = false;  // --log-requests: also a line per finished engine request (tokens, timings) at info
};

class ApiServer {
 public:
  ApiServer(ApiServerConfig config, scheduler::Engine& engine, std::shared_ptr<const PromptCodec> codec);
  ~ApiServer();  // stops the threads if shutdown() was not called (without draining)
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Binds (throws fathom::Error naming host:port) and starts the I/O and worker threads.
  void start();
  int port() const { return http_.port(); }
  std::string url() const;

  // Graceful stop from any thread but the loop's: stop accepting, let admitted requests finish
  // (engine.shutdown()), flush their responses, then stop the threads. Idempotent.
  void shutdown();
  // Aborts every generation in flight; they end with finish_reason "abort". Any thread.
  void abort_all();

 private:
  enum class GenerationKind { kCompletion, kChat, kNative };

  void register_routes();
  void dispatch(const std::shared_ptr<HttpExchange>& exchange);
  bool authorized(const HttpRequest& request) const;
  std::optional<std::string> allowed_origin(const HttpRequest& request) const;
  HttpHeaders cors_headers(const HttpRequest& request) const;
  HttpResponse with_cors(HttpResponse response, const HttpRequest& request) const;
  void reply(const std::shared_ptr<HttpExchange>& exchange, HttpResponse response);
  void reply_error(const std::shared_ptr<HttpExchange>& exchange, const class ApiError& error);
  void reply_json(const std::shared_ptr<HttpExchange>& exchange, int status, const nlohmann::ordered_json& body);

  // Runs `prepare` on a worker thread (JSON parsing, templates, tokenization), then on the loop thread `deliver`
  // with its result, or answers its ApiError; counted in preparing_ until then (shutdown waits for it).
  template <typename Result>
  void prepare_on_worker(const std::shared_ptr<HttpExchange>& exchange, std::function<Result()> prepare,
                         std::function<void(Result&&)> deliver);
  void handle_generation(const std::shared_ptr<HttpExchange>& exchange, GenerationKind kind);
  // /tokenize, /detokenize: `prepare` runs on a worker (it may tokenize a long prompt), its JSON is the answer.
  using JsonPreparation = nlohmann::ordered_json (*)(std::string_view body, const PreparationContext& context);
  void handle_prepared_json(const std::shared_ptr<HttpExchange>& exchange, JsonPreparation prepare);
  void start_job(const std::shared_ptr<HttpExchange>& exchange, PreparedGeneration prepared);
  struct HealthProbe;
  void handle_health_generate(const std::shared_ptr<HttpExchange>& exchange);
  void poll_health_probe(const std::shared_ptr<HealthProbe>& probe);
  void finish_health_probe(const std::shared_ptr<HealthProbe>& probe, const ApiError* error);
  void handle_models(const std::shared_ptr<HttpExchange>& exchange, const std::string& model_id);
  void handle_model_info(const std::shared_ptr<HttpExchange>& exchange);
  void handle_server_info(const std::shared_ptr<HttpExchange>& exchange);
  void handle_flush_cache(const std::shared_ptr<HttpExchange>& exchange);
  void handle_abort_request(const std::shared_ptr<HttpExchange>& exchange);
  void handle_metrics(const std::shared_ptr<HttpExchange>& exchange);

  // Runs `task` on the loop thread and waits for it.
  void run_on_loop(const std::function<void()>& task);
  void finish_preparation();

  ApiServerConfig config_;
  scheduler::Engine& engine_;
  std::shared_ptr<const PromptCodec> codec_;
  EventLoop loop_;
  std::shared_ptr<LoopPoster> poster_;
  HttpServer http_;
  Router router_;
  ServerMetrics metrics_;
  RequestIdGenerator ids_;
  PreparationContext preparation_;
  std::unique_ptr<TaskPool> workers_;
  std::thread io_thread_;
  int64_t created_unix_s_ = 0;

  // Loop thread only.
  std::unordered_map<GenerationJob*, std::shared_ptr<GenerationJob>> active_jobs_;
  std::unordered_set<std::string> active_rids_;  // client rids of active_jobs_ (SGLang rejects a rid in use)
  bool draining_ = false;

  // Requests between arrival and engine submission (shutdown waits for them before draining the engine).
  std::mutex preparing_mutex_;
  std::condition_variable preparing_done_;
  int64_t preparing_ = 0;

  std::atomic<bool> started_{false};
  std::atomic<bool> stopped_{false};
  std::mutex shutdown_mutex_;
};

}  // namespace fathom::server
