// `fathom serve`: the OpenAI-compatible / SGLang-style HTTP server over the local engine.
//   fathom serve --model DIR [--tokenizer DIR] [--host 127.0.0.1] [--port 30000] [--api-key KEY]
//                [--tool-call-parser deepseekv3|deepseekv31] [--reasoning-parser deepseek-r1] ...
// SIGTERM / SIGINT: stop accepting, finish the requests in flight, exit 0 (a second signal aborts them).
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "app/commands.h"
#include "app/model_options.h"
#include "core/error.h"
#include "core/log.h"
#include "model/config.h"
#include "scheduler/local_engine.h"
#include "server/api_server.h"
#include "server/http_server.h"
#include "server/output_parsing.h"
#include "server/stats_log.h"
#include "server/tokenizer_codec.h"

namespace fathom::app {

namespace {

int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_bytes = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_bytes > 0 ? static_cast<int64_t>(pages) * page_bytes : 0;
}

int64_t checkpoint_bytes(const std::string& model_dir) {
  int64_t total = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(model_dir, error)) {
    if (entry.path().extension() == ".safetensors") total += static_cast<int64_t>(entry.file_size(error));
  }
  return total;
}

// SGLang's --mem-fraction-static: the fraction of memory for weights plus the KV pool; the pool gets what the
// weights leave. Our KV rows are float32 [kv_lora_rank + qk_rope_head_dim] per layer.
int64_t kv_tokens_for_memory_fraction(double fraction, const model::ModelConfig& config, const std::string& model_dir, bool dummy) {
  FATHOM_CHECK(fraction > 0.0 && fraction < 1.0, "--mem-fraction-static must be in (0, 1), got " << fraction);
  const int64_t bytes_per_token = config.num_hidden_layers * config.kv_latent_dim() * static_cast<int64_t>(sizeof(float));
  const int64_t budget = static_cast<int64_t>(fraction * static_cast<double>(physical_memory_bytes())) -
                         (dummy ? 0 : checkpoint_bytes(model_dir));
  FATHOM_CHECK(budget > bytes_per_token, "--mem-fraction-static " << fraction << " leaves no memory for the KV cache after the "
                                                                    << checkpoint_bytes(model_dir) << "-byte checkpoint");
  return budget / bytes_per_token;
}

void raise_open_file_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// serve --help, one line per flag (README.md has the details).
const FlagDescriptions& serve_flag_descriptions() {
  static const FlagDescriptions kDescriptions = {
      {"--model", "DIR: a Hugging Face DeepSeek-V3 checkpoint folder (default: the embedded fathom-nano)"},
      {"--load-format", "auto | safetensors | dummy (random weights at the config's dimensions) (auto)"},
      {"--override-config", "JSON merged into config.json, e.g. '{\"num_hidden_layers\": 4}'"},
      {"--mode", "exact | w8a8: the CPU path's numerics (exact)"},
      {"--threads", "N: CPU compute threads (0: all cores)"},
      {"--seed", "N: the seed of --load-format dummy weights (0)"},
      {"--device", "cpu | cuda (cpu)"},
      {"--mem-fraction-static", "F: memory share for weights + KV cache (0.88)"},
      {"--tokenizer", "DIR: tokenizer.json and its config (the model folder); alias --tokenizer-path"},
      {"--host", "ADDRESS to listen on (127.0.0.1)"},
      {"--port", "N to listen on (30000; 0: any free port)"},
      {"--api-key", "KEY: Bearer key for every route but /health* and /metrics"},
      {"--served-model-name", "NAME that requests and /v1/models use (the model path)"},
      {"--chat-template", "FILE: a Jinja chat template instead of the tokenizer's"},
      {"--context-length", "N: longest prompt + output accepted (the model's max_position_embeddings)"},
      {"--max-total-tokens", "N: KV cache size in tokens (CPU 8192; CUDA: from --mem-fraction-static)"},
      {"--page-size", "N: KV page size in tokens (64 on the GPU for models of more than 32 heads, else 1)"},
      {"--chunked-prefill-size", "N: prefill tokens per step (2048; <= 0: unlimited)"},
      {"--max-running-requests", "N: requests decoded together (64)"},
      {"--max-queued-requests", "N: waiting requests beyond which new ones get 503 (0: no limit) (0)"},
      {"--schedule-policy", "fcfs | lpm (longest cached prefix first) (fcfs)"},
      {"--random-seed", "N: seed of requests that name none (0)"},
      {"--max-request-body-bytes", "N: larger bodies get 413 (33554432)"},
      {"--keep-alive-timeout-s", "N: idle keep-alive connections close after this (30)"},
      {"--preparation-threads", "N: threads parsing requests, rendering templates, tokenizing (2)"},
      {"--tool-call-parser", "deepseekv3 | deepseekv31: tool calls into message.tool_calls"},
      {"--reasoning-parser", "deepseek-r1: <think> text into reasoning_content"},
      {"--cuda-graph-bs", "N,N,...: decode batch sizes captured as CUDA graphs"},
      {"--cuda-graph-max-bs", "N: largest captured decode batch (min(--max-running-requests, 256))"},
      {"--allowed-origins", "ORIGIN,ORIGIN | *: browser origins allowed by CORS (none)"},
      {"--disable-radix-cache", "no prefix cache"},
      {"--disable-overlap-schedule", "schedule each step after the previous one finished"},
      {"--skip-tokenizer-init", "token-id prompts only (no tokenizer)"},
      {"--enable-metrics", "serve GET /metrics (Prometheus text)"},
      {"--disable-cuda-graph", "run the padded decode batches eagerly (same results)"},
      {"--enable-cuda-graph", "accepted for older scripts (graphs are the default)"},
      {"--enable-deterministic-inference", "batch-invariant GPU kernels: greedy output independent of batching"},
      {"--log-level", "debug | info | warning | error: stderr lines shown; info adds the access log (info)"},
      {"--log-requests", "a line per finished request at --log-level info: tokens, finish reason, timings"},
      {"--stats-interval-s", "N: seconds between the engine's stats lines at --log-level info (10; 0: none)"},
  };
  return kDescriptions;
}

}  // namespace

int run_serve(const Args& raw_args) {
  std::set<std::string> value_flags = model_value_flags();
  value_flags.insert({"--tokenizer", "--host", "--port", "--api-key", "--served-model-name", "--chat-template",
                      "--max-total-tokens", "--mem-fraction-static", "--page-size", "--chunked-prefill-size",
                      "--max-running-requests", "--schedule-policy", "--random-seed", "--max-request-body-bytes",
                      "--keep-alive-timeout-s", "--preparation-threads", "--tool-call-parser", "--reasoning-parser",
                      "--cuda-graph-bs", "--cuda-graph-max-bs", "--context-length", "--allowed-origins",
                      "--log-level", "--stats-interval-s", "--max-queued-requests"});
  // SGLang's spellings of our flags.
  CliArgs args(rename_flags(raw_args, {{"--model-path", "--model"}, {"--tokenizer-path", "--tokenizer"}}), value_flags,
               {"--disable-radix-cache", "--disable-overlap-schedule", "--skip-tokenizer-init", "--enable-metrics",
                "--disable-cuda-graph", "--enable-cuda-graph", "--enable-deterministic-inference", "--log-requests"},
               serve_flag_descriptions());
  FATHOM_CHECK(args.positional().empty(), "serve takes no positional arguments, got '" << args.positional()[0] << "'");
  ModelCliOptions model_options = parse_model_options(args);
  const std::string model_dir = model_options.load.model_dir;
  const bool skip_tokenizer = args.has("--skip-tokenizer-init");
  const std::string tokenizer_dir = args.get_or("--tokenizer", model_dir);
  const model::ModelConfig model_config = model::load_model_config(model_dir, model_options.load.override_config);
  const bool dummy = model_options.load.format == model::LoadFormat::kDummy;

  scheduler::EngineConfig engine_config;
  engine_config.load = model_options.load;
  engine_config.load.load_mtp = false;
  engine_config.mode = model_options.mode;
  engine_config.num_threads = model_options.num_threads;
  engine_config.tokenizer_dir = skip_tokenizer ? "" : tokenizer_dir;
  engine_config.device = model_options.device;
  engine_config.mem_fraction_static = model_options.mem_fraction_static;
  if (args.has("--max-total-tokens")) {
    engine_config.max_total_tokens = args.get_int_or("--max-total-tokens", 0);
  } else if (model_options.device == executor::Device::kCuda) {
    engine_config.max_total_tokens = 0;  // the CUDA backend sizes the KV cache from --mem-fraction-static
  } else if (args.has("--mem-fraction-static")) {
    engine_config.max_total_tokens =
        kv_tokens_for_memory_fraction(args.get_double_or("--mem-fraction-static", 0.0), model_config, model_dir, dummy);
  }
  engine_config.page_size =
      args.get_int_or("--page-size", default_kv_page_size(model_options.device, model_config.num_attention_heads));
  engine_config.chunked_prefill_size = args.get_int_or("--chunked-prefill-size", engine_config.chunked_prefill_size);
  engine_config.max_running_requests = args.get_int_or("--max-running-requests", engine_config.max_running_requests);
  engine_config.schedule_policy = scheduler::parse_schedule_policy(args.get_or("--schedule-policy", "fcfs"));
  engine_config.disable_radix_cache = args.has("--disable-radix-cache");
  engine_config.disable_overlap = args.has("--disable-overlap-schedule");
  FATHOM_CHECK(engine_config.max_running_requests >= 1, "--max-running-requests must be >= 1");
  engine_config.max_queued_requests = args.get_int_or("--max-queued-requests", 0);  // SGLang's flag
  FATHOM_CHECK(engine_config.max_queued_requests >= 0,
               "--max-queued-requests must be >= 0 (0: no limit), got " << engine_config.max_queued_requests);
  // SGLang's --context-length: the longest prompt + output accepted, at most the model's max_position_embeddings.
  engine_config.context_length = args.get_int_or("--context-length", 0);
  const bool context_length_fits = model_config.max_position_embeddings <= 0 ||
                                   engine_config.context_length <= model_config.max_position_embeddings;
  // At least 2: a prompt token and one generated.
  FATHOM_CHECK(!args.has("--context-length") || (engine_config.context_length >= 2 && context_length_fits),
               "--context-length must be >= 2 and at most the model's max_position_embeddings ("
                   << model_config.max_position_embeddings << "), got " << engine_config.context_length);
  const int64_t keep_alive_s = args.get_int_or("--keep-alive-timeout-s", 30);
  FATHOM_CHECK(keep_alive_s >= 1 && keep_alive_s <= 86400,
               "--keep-alive-timeout-s must be in [1, 86400], got " << keep_alive_s);
  const int64_t max_body_bytes =
      args.get_int_or("--max-request-body-bytes", static_cast<int64_t>(server::HttpLimits{}.max_body_bytes));
  FATHOM_CHECK(max_body_bytes >= 1, "--max-request-body-bytes must be >= 1, got " << max_body_bytes);
  const int64_t random_seed = args.get_int_or("--random-seed", 0);
  FATHOM_CHECK(random_seed >= 0, "--random-seed must be >= 0, got " << random_seed);
  engine_config.random_seed = static_cast<uint64_t>(random_seed);
  const auto logger = std::make_shared<const Logger>(parse_log_level(args.get_or("--log-level", "info")));
  const int64_t stats_interval_s = args.get_int_or("--stats-interval-s", 10);
  FATHOM_CHECK(stats_interval_s >= 0 && stats_interval_s <= 86400,
               "--stats-interval-s must be in [0, 86400], got " << stats_interval_s);
  const int64_t preparation_threads = args.get_int_or("--preparation-threads", 2);
  FATHOM_CHECK(preparation_threads >= 1 && preparation_threads <= 256,
               "--preparation-threads must be in [1, 256], got " << preparation_threads);
  // Decode batches up to --cuda-graph-max-bs (default: --max-running-requests, at most 256) run padded to the next
  // listed size and replay CUDA graphs; --disable-cuda-graph runs the same padded shapes eagerly (same results).
  // --enable-cuda-graph is accepted for older scripts (graphs are the default).
  // Batch-invariant GPU kernels (the CPU backend is batch-invariant already); SGLang's flag name.
  engine_config.deterministic = args.has("--enable-deterministic-inference");
  if (model_options.device == executor::Device::kCuda) {
    engine_config.capture_cuda_graphs = !args.has("--disable-cuda-graph");
    if (auto sizes = args.get("--cuda-graph-bs")) {
      for (int64_t size : parse_int_list(*sizes, "--cuda-graph-bs")) {
        FATHOM_CHECK(size >= 1 && size <= engine_config.max_running_requests,
                     "--cuda-graph-bs: " << size << " is outside [1, --max-running-requests]");
        engine_config.cuda_graph_batch_sizes.push_back(static_cast<int32_t>(size));
      }
    } else {
      const int64_t max_bs = args.get_int_or("--cuda-graph-max-bs", std::min<int64_t>(engine_config.max_running_requests, 256));
      FATHOM_CHECK(max_bs >= 1, "--cuda-graph-max-bs must be >= 1");
      engine_config.cuda_graph_batch_sizes = executor::default_cuda_graph_batch_sizes(max_bs);
    }
  }

  server::ApiServerConfig server_config;
  server_config.http.host = args.get_or("--host", "127.0.0.1");
  server_config.http.port = static_cast<int>(args.get_int_or("--port", 30000));
  FATHOM_CHECK(server_config.http.port >= 0 && server_config.http.port <= 65535, "--port must be in [0, 65535]");
  // Before the tokenizer and model load (minutes for a real checkpoint): a taken port or unknown host fails now.
  server::check_listen_address_free(server_config.http.host, server_config.http.port);
  server_config.http.connection.limits.max_body_bytes = static_cast<size_t>(max_body_bytes);
  server_config.http.connection.keep_alive_timeout = std::chrono::seconds(keep_alive_s);
  server_config.preparation_threads = static_cast<int>(preparation_threads);
  if (engine_config.max_queued_requests > 0) {  // more choices than may wait would be refused (503) on every retry
    server_config.request_limits.max_choices =
        std::min(server_config.request_limits.max_choices, engine_config.max_queued_requests);
  }
  server_config.api_key = args.get_or("--api-key", "");
  server_config.enable_metrics = args.has("--enable-metrics");
  server_config.logger = logger;
  engine_config.logger = logger;
  server_config.log_requests = args.has("--log-requests");
  if (auto origins = args.get("--allowed-origins")) {  // vLLM's flag: comma-separated origins, or *
    std::stringstream list(*origins);
    for (std::string origin; std::getline(list, origin, ',');) {
      FATHOM_CHECK(!origin.empty(), "--allowed-origins: an empty origin in '" << *origins << "'");
      server_config.allowed_origins.push_back(origin);
    }
  }
  server_config.served_model_name = args.get_or("--served-model-name", model_dir);
  server_config.output_parsers = server::parse_output_parser_flags(args.get("--tool-call-parser"), args.get("--reasoning-parser"));
  server_config.model_path = model_dir;
  server_config.tokenizer_path = skip_tokenizer ? "" : tokenizer_dir;
  server_config.server_args = {{"model_path", model_dir},
                               {"tokenizer_path", server_config.tokenizer_path},
                               {"load_format", args.get_or("--load-format", "auto")},
                               {"device", executor::device_name(model_options.device)},
                               {"mem_fraction_static", model_options.mem_fraction_static},
                               {"cuda_graph_bs", engine_config.cuda_graph_batch_sizes},
                               {"disable_cuda_graph", !engine_config.capture_cuda_graphs},
                               {"enable_deterministic_inference", engine_config.deterministic},
                               {"host", server_config.http.host},
                               {"port", server_config.http.port},
                               {"served_model_name", server_config.served_model_name},
                               {"chat_template", args.get_or("--chat-template", "")},
                               {"max_total_tokens", engine_config.max_total_tokens},
                               {"page_size", engine_config.page_size},
                               {"chunked_prefill_size", engine_config.chunked_prefill_size},
                               {"prefill_chunk_tokens", scheduler::scheduler_chunked_prefill_size(engine_config)},
                               {"max_prefill_keys", scheduler::scheduler_max_prefill_keys(engine_config, model_config)},
                               {"max_running_requests", engine_config.max_running_requests},
                               {"max_queued_requests", engine_config.max_queued_requests},
                               {"context_length", engine_config.context_length > 0 ? engine_config.context_length
                                                                                   : model_config.max_position_embeddings},
                               {"schedule_policy", args.get_or("--schedule-policy", "fcfs")},
                               {"disable_radix_cache", engine_config.disable_radix_cache},
                               {"disable_overlap_schedule", engine_config.disable_overlap},
                               {"random_seed", engine_config.random_seed},
                               {"mode", args.get_or("--mode", "exact")},
                               {"api_key_set", !server_config.api_key.empty()},
                               {"enable_metrics", server_config.enable_metrics},
                               {"allowed_origins", server_config.allowed_origins},
                               {"tool_call_parser", args.get_or("--tool-call-parser", "")},
                               {"reasoning_parser", args.get_or("--reasoning-parser", "")},
                               {"log_level", log_level_name(logger->threshold())},
                               {"log_requests", server_config.log_requests},
                               {"stats_interval_s", stats_interval_s}};

  std::shared_ptr<const server::PromptCodec> codec;
  if (skip_tokenizer) {
    codec = std::make_shared<server::TokenIdsOnlyCodec>(model_config.vocab_size);
  } else {
    FATHOM_CHECK(std::filesystem::exists(std::filesystem::path(tokenizer_dir) / "tokenizer.json"),
                 "no tokenizer.json in " << tokenizer_dir << "; pass --tokenizer DIR (or --skip-tokenizer-init for token-id prompts)");
    auto tokenizer_codec = std::make_shared<server::TokenizerPromptCodec>(tokenizer_dir, args.get("--chat-template"), model_config.vocab_size);
    for (const std::string& warning : server::output_parser_warnings(server_config.output_parsers, *tokenizer_codec)) {
      logger->warning("fathom serve: " + warning);
    }
    codec = std::move(tokenizer_codec);
  }

  // Signals are taken synchronously by this thread: block them before any thread starts (threads inherit the mask).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  raise_open_file_limit();

  // Loading takes minutes for a real checkpoint (weights, CUDA graphs): a stop signal then ends the process at once,
  // as SGLang's does (nothing is in flight yet); from start() on, the signal drains the server below.
  std::atomic<bool> loading{true};
  std::thread load_watcher([&] {
    const timespec poll_interval{0, 100'000'000};
    while (loading) {
      const int signal_number = sigtimedwait(&stop_signals, nullptr, &poll_interval);
      if (signal_number > 0) {
        // Stamped like the log, whatever --log-level says (the process is about to end).
        const std::string name = signal_number == SIGTERM ? "SIGTERM" : "SIGINT";
        Logger(LogLevel::kDebug, stderr).info("fathom serve: " + name + " received while loading: exiting");
        std::fflush(stderr);
        // Die by the signal itself (its default action), so that systemd counts a clean stop and a calling shell
        // sees the interrupt; the exit status is only the fallback.
        signal(signal_number, SIG_DFL);
        sigset_t this_signal;
        sigemptyset(&this_signal);
        sigaddset(&this_signal, signal_number);
        pthread_sigmask(SIG_UNBLOCK, &this_signal, nullptr);
        raise(signal_number);
        std::_Exit(128 + signal_number);
      }
    }
  });
  std::unique_ptr<scheduler::Engine> engine;
  try {
    engine = scheduler::make_local_engine(engine_config);
  } catch (...) {
    loading = false;
    load_watcher.join();
    throw;
  }
  loading = false;
  load_watcher.join();
  server::ApiServer api_server(server_config, *engine, codec);
  api_server.start();
  // On stdout, stamped like the log and whatever --log-level says: scripts wait for this line.
  Logger(LogLevel::kDebug, stdout).info("fathom serve: listening on " + api_server.url() + " (model '" +
                                        server_config.served_model_name + "', context " +
                                        std::to_string(engine->max_context_tokens()) + " tokens, KV pool " +
                                        std::to_string(engine->stats().kv_total_tokens) + " tokens)");
  std::fflush(stdout);
  std::optional<server::EngineStatsLog> stats_log;
  if (stats_interval_s > 0 && logger->enabled(LogLevel::kInfo)) {
    stats_log.emplace(*engine, *logger, std::chrono::seconds(stats_interval_s));
  }

  int received = 0;
  while (sigwait(&stop_signals, &received) != 0) {
  }
  logger->info(std::string("fathom serve: ") + (received == SIGTERM ? "SIGTERM" : "SIGINT") +
                  " received: no new connections; finishing the requests in flight");
  // A second signal while draining aborts what is still running (the responses still complete, as "abort").
  std::atomic<bool> drained{false};
  std::thread second_signal([&] {
    const timespec poll_interval{0, 200'000'000};
    while (!drained) {
      if (sigtimedwait(&stop_signals, nullptr, &poll_interval) > 0) {
        logger->warning("fathom serve: second signal: aborting the requests in flight");
        api_server.abort_all();
      }
    }
  });
  api_server.shutdown();
  drained = true;
  second_signal.join();
  stats_log.reset();
  engine->shutdown();
  logger->info("fathom serve: drained, exiting");
  return 0;
}

}  // namespace fathom::app
