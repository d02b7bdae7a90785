#include "scheduler/local_engine.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <variant>

#include "core/error.h"
#include "executor/model_runner.h"
#include "executor/step_executor.h"
#include "scheduler/overlap_step_loop.h"
#include "scheduler/scheduler.h"
#include "scheduler/step_loop.h"
#include "tokenizer/tokenizer.h"

namespace fathom::scheduler {

namespace {

struct SubmitCommand {
  GenerateRequest request;
  EventCallback on_event;
};
struct AbortCommand {
  std::string request_id;
};
struct FlushCommand {
  std::shared_ptr<std::promise<bool>> done;
};
using Command = std::variant<SubmitCommand, AbortCommand, FlushCommand>;

GenerationEvent error_event(const std::string& request_id, int64_t prompt_tokens, const std::string& message) {
  GenerationEvent event;
  event.request_id = request_id;
  event.finished = true;
  event.finish_reason = FinishReason::kError;
  event.error_message = message;
  event.prompt_tokens = prompt_tokens;
  return event;
}

GenerationEvent error_event(const GenerateRequest& request, const std::string& message) {
  return error_event(request.request_id, static_cast<int64_t>(request.input_ids.size()), message);
}

class LocalEngine final : public Engine {
 public:
  explicit LocalEngine(const EngineConfig& config);
  ~LocalEngine() override { shutdown(); }

  void submit(GenerateRequest request, EventCallback on_event) override;
  void abort(const std::string& request_id) override;
  bool flush_cache() override;
  EngineStats stats() const override;
  int64_t max_context_tokens() const override { return max_context_tokens_; }
  void shutdown() override;

 private:
  void run();
  // Applies one inbox command; one that throws fails alone (logged, its request or flush answered), the engine goes on.
  void apply(Command& command);
  void publish_stats();

  std::shared_ptr<const Logger> logger_;
  std::unique_ptr<executor::ModelRunner> runner_;
  std::optional<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<executor::StepExecutor> executor_;
  std::unique_ptr<StepLoop> loop_;
  int64_t max_context_tokens_ = 0;

  mutable std::mutex mutex_;        // guards everything below
  std::condition_variable wake_;
  std::deque<Command> inbox_;
  bool accepting_ = true;
  bool stop_requested_ = false;
  bool loop_running_ = true;
  std::thread::id engine_thread_id_;  // set by run() before anything runs on the engine thread
  std::string internal_error_;      // set when an idle invariant check failed; later requests are refused
  int64_t max_queued_requests_ = 0;  // EngineConfig::max_queued_requests
  // Submissions not yet in stats_.waiting_requests: in inbox_, or taken from it but not yet published. With it
  // submit() bounds the queue against the last published stats.
  int64_t submits_in_inbox_ = 0;
  int64_t submits_unpublished_ = 0;
  EngineStats stats_;
  std::thread thread_;
};

LocalEngine::LocalEngine(const EngineConfig& config)
    : logger_(config.logger ? config.logger : std::make_shared<const Logger>(LogLevel::kInfo)),
      max_queued_requests_(config.max_queued_requests) {
  FATHOM_CHECK(config.page_size >= 1, "engine: page_size must be >= 1, got " << config.page_size);
  FATHOM_CHECK(config.max_total_tokens >= config.page_size || (config.max_total_tokens == 0 && config.device == executor::Device::kCuda),
               "engine: max_total_tokens " << config.max_total_tokens << " is below one page of " << config.page_size);
  executor::ModelRunnerConfig runner_config;
  runner_config.load = config.load;
  runner_config.device = config.device;
  runner_config.mode = config.mode;
  runner_config.num_threads = config.num_threads;
  runner_config.num_kv_slots = config.max_total_tokens / config.page_size * config.page_size;
  runner_config.kv_page_size = config.page_size;
  runner_config.mem_fraction_static = config.mem_fraction_static;
  runner_config.max_decode_batch = config.max_running_requests;
  runner_config.cuda_graph_batch_sizes = config.cuda_graph_batch_sizes;
  runner_config.capture_cuda_graphs = config.capture_cuda_graphs;
  runner_config.deterministic = config.deterministic;
  runner_config.max_batch_tokens = runner_max_batch_tokens(config);
  // CUDA: the scheduler's key budget, kept free beside the KV cache; it follows the model's attention shape (its
  // config.json, read here before the runner loads the model).
  const int64_t max_prefill_keys =
      config.device == executor::Device::kCuda
          ? scheduler_max_prefill_keys(config,
                                       model::load_model_config(config.load.model_dir, config.load.override_config))
          : 0;
  runner_config.max_prefill_keys = max_prefill_keys;
  runner_ = std::make_unique<executor::ModelRunner>(runner_config);
  const int64_t num_kv_slots = runner_->num_kv_slots() / config.page_size * config.page_size;
  FATHOM_CHECK(num_kv_slots >= config.page_size, "engine: the KV cache holds " << runner_->num_kv_slots() << " tokens, less than a page");
  logger_->info("fathom: " + runner_->backend().describe());
  const model::ModelConfig& model_config = runner_->model_config();
  if (!config.tokenizer_dir.empty()) {
    tokenizer::Tokenizer loaded = tokenizer::Tokenizer::load(config.tokenizer_dir);
    if (model_config.vocab_size > loaded.model_vocab_size()) {
      loaded = loaded.with_model_vocab_size(static_cast<int32_t>(model_config.vocab_size));
    }
    tokenizer_ = std::move(loaded);
  }
  SchedulerConfig scheduler_config;
  scheduler_config.max_total_tokens = num_kv_slots;
  scheduler_config.page_size = config.page_size;
  scheduler_config.chunked_prefill_size = scheduler_chunked_prefill_size(config);
  if (scheduler_config.chunked_prefill_size != config.chunked_prefill_size) {
    logger_->warning("fathom: --chunked-prefill-size " + std::to_string(config.chunked_prefill_size) +
                     " (unlimited): prefill chunked to " + std::to_string(scheduler_config.chunked_prefill_size) +
                     " tokens per step, the most one CUDA forward carries");
  }
  scheduler_config.max_running_requests = config.max_running_requests;
  // The CUDA backend scores prompt rows on the device in passes of a bounded logits buffer: every row of a forward
  // may be scored. The CPU backend's rows come to the host whole: the default bounds them.
  if (config.device == executor::Device::kCuda) {
    scheduler_config.max_scored_rows_per_step = runner_max_batch_tokens(config);
  }
  scheduler_config.max_prefill_keys = max_prefill_keys;
  scheduler_config.schedule_policy = config.schedule_policy;
  scheduler_config.disable_radix_cache = config.disable_radix_cache;
  scheduler_config.deterministic = config.deterministic;
  FATHOM_CHECK(config.context_length >= 0 && (model_config.max_position_embeddings <= 0 ||
                                               config.context_length <= model_config.max_position_embeddings),
               "context length " << config.context_length << " is outside [0 (the model's), max_position_embeddings "
                                 << model_config.max_position_embeddings << "]");
  scheduler_config.max_position_embeddings =
      config.context_length > 0 ? config.context_length : model_config.max_position_embeddings;
  scheduler_config.vocab_size = model_config.vocab_size;
  for (int64_t id : model_config.eos_token_ids) scheduler_config.eos_token_ids.push_back(static_cast<int32_t>(id));
  scheduler_config.random_seed = config.random_seed;
  scheduler_config.check_invariants_every_step = config.check_invariants_every_step;
  scheduler_ = std::make_unique<Scheduler>(scheduler_config, tokenizer_ ? &*tokenizer_ : nullptr);
  max_context_tokens_ = scheduler_->max_context_tokens();
  executor_ = std::make_unique<executor::StepExecutor>(*runner_, &runner_->thread_pool());
  if (config.disable_overlap) loop_ = std::make_unique<SequentialStepLoop>(*scheduler_, *executor_);
  else loop_ = std::make_unique<OverlapStepLoop>(*scheduler_, *executor_);
  stats_ = scheduler_->stats();
  thread_ = std::thread([this] { run(); });
}

void LocalEngine::submit(GenerateRequest request, EventCallback on_event) {
  std::string refusal;
  bool queue_full = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!accepting_) {
      refusal = "request " + request.request_id + ": the engine is shut down";
    } else if (!internal_error_.empty()) {
      refusal = "request " + request.request_id + ": " + internal_error_;
    } else if (max_queued_requests_ > 0 &&
               stats_.waiting_requests + submits_in_inbox_ + submits_unpublished_ >= max_queued_requests_) {
      refusal = "request " + request.request_id + ": the request queue is full (" +
                std::to_string(max_queued_requests_) + " waiting, --max-queued-requests); retry later";
      queue_full = true;
    } else {
      inbox_.push_back(SubmitCommand{std::move(request), std::move(on_event)});
      ++submits_in_inbox_;
    }
  }
  if (!refusal.empty()) {
    GenerationEvent refused = error_event(request, refusal);
    refused.queue_full = queue_full;
    on_event(refused);  // refused on the caller's thread: the engine thread may be gone
    return;
  }
  wake_.notify_one();
}

void LocalEngine::abort(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!loop_running_) return;
    inbox_.push_back(AbortCommand{request_id});
  }
  wake_.notify_one();
}

bool LocalEngine::flush_cache() {
  auto done = std::make_shared<std::promise<bool>>();
  std::future<bool> result = done->get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (std::this_thread::get_id() == engine_thread_id_) return scheduler_->flush_cache();  // from a callback
    if (!loop_running_) return scheduler_->flush_cache();  // the engine thread is done with the scheduler
    inbox_.push_back(FlushCommand{done});
  }
  wake_.notify_one();
  return result.get();
}

EngineStats LocalEngine::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void LocalEngine::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    accepting_ = false;
    stop_requested_ = true;
  }
  wake_.notify_one();
  bool on_engine_thread = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    on_engine_thread = std::this_thread::get_id() == engine_thread_id_;
  }
  if (thread_.joinable() && !on_engine_thread) thread_.join();
}

void LocalEngine::apply(Command& command) {
  if (auto* submit = std::get_if<SubmitCommand>(&command)) {
    const std::string request_id = submit->request.request_id;
    const int64_t prompt_tokens = static_cast<int64_t>(submit->request.input_ids.size());
    try {
      scheduler_->submit(std::move(submit->request), submit->on_event);
    } catch (const std::exception& error) {
      // Scheduler::submit throws only before it queued or answered the request: its one event is still ours to send.
      const std::string message = "request " + request_id + ": the engine could not queue it: " + error.what();
      logger_->error("fathom: " + message);
      try {
        submit->on_event(error_event(request_id, prompt_tokens, message));
      } catch (...) {  // a throwing callback must not stop the engine
      }
    }
  } else if (auto* abort = std::get_if<AbortCommand>(&command)) {
    try {
      scheduler_->abort(abort->request_id);
    } catch (const std::exception& error) {
      // Should this leave the KV accounting broken, the idle invariant check finds it and refuses later requests.
      logger_->error("fathom: aborting request " + abort->request_id + " failed: " + error.what());
    }
  } else if (auto* flush = std::get_if<FlushCommand>(&command)) {
    bool flushed = false;
    try {
      flushed = scheduler_->flush_cache();
    } catch (const std::exception& error) {
      logger_->error(std::string("fathom: cache flush failed: ") + error.what());
      flush->done->set_exception(std::current_exception());  // flush_cache() rethrows it to its caller
      return;
    }
    flush->done->set_value(flushed);
  }
}

void LocalEngine::publish_stats() {
  EngineStats stats = scheduler_->stats();
  std::lock_guard<std::mutex> lock(mutex_);
  stats.internal_error = internal_error_;
  stats_ = stats;
  submits_unpublished_ = 0;  // applied before this step: stats.waiting_requests counts the ones still waiting
}

namespace {

// One --log-level debug line per scheduled step: what ran and where the engine stands after it.
std::string step_line(const std::vector<StepRecord>& records, const EngineStats& stats, int64_t retractions) {
  int64_t prefill_tokens = 0, prefill_sequences = 0, cached = 0, decodes = 0;
  for (const StepRecord& record : records) {
    if (record.num_new_tokens == 1 && record.samples) {
      ++decodes;
    } else {
      prefill_tokens += record.num_new_tokens;
      ++prefill_sequences;
      cached += record.num_cached;
    }
  }
  return "fathom: step: " + std::to_string(decodes) + " decodes, " + std::to_string(prefill_tokens) +
         " prefill tokens in " + std::to_string(prefill_sequences) + " sequences (after " + std::to_string(cached) +
         " cached positions); running " + std::to_string(stats.running_requests) + ", waiting " +
         std::to_string(stats.waiting_requests) + ", KV " + std::to_string(stats.kv_used_tokens) + "/" +
         std::to_string(stats.kv_total_tokens) + " tokens, retractions " + std::to_string(retractions);
}

}  // namespace

void LocalEngine::run() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    engine_thread_id_ = std::this_thread::get_id();
  }
  bool busy = false;
  while (true) {
    std::deque<Command> commands;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      auto has_input = [this] { return !inbox_.empty() || stop_requested_; };
      // With requests but nothing runnable (should not happen), poll instead of sleeping forever.
      if (!busy && scheduler_->has_requests()) wake_.wait_for(lock, std::chrono::milliseconds(5), has_input);
      else if (!busy) wake_.wait(lock, has_input);
      commands.swap(inbox_);
      submits_unpublished_ += submits_in_inbox_;  // in the scheduler's queue once applied; counted until published
      submits_in_inbox_ = 0;
      stopping = stop_requested_;
    }
    for (Command& command : commands) apply(command);
    try {
      busy = loop_->step();
      if (busy && logger_->enabled(LogLevel::kDebug) && !scheduler_->last_step().empty()) {
        logger_->debug(step_line(scheduler_->last_step(), scheduler_->stats(), scheduler_->num_retractions()));
      }
    } catch (const std::exception& error) {
      // Logged as well as sent to the clients: an operator sees a failing device in the server's log.
      logger_->error(std::string("fathom: engine step failed: ") + error.what() +
                     "; the requests in flight end with this error");
      loop_->abandon_in_flight();
      scheduler_->fail_all(std::string("engine step failed: ") + error.what());
      busy = false;
    }
    const bool idle = !busy && !scheduler_->has_requests() && !loop_->has_in_flight();
    if (idle) {
      try {
        scheduler_->check_invariants();
      } catch (const std::exception& error) {
        logger_->error(std::string("fathom: engine internal error: ") + error.what());
        std::lock_guard<std::mutex> lock(mutex_);
        internal_error_ = std::string("engine internal error: ") + error.what();
      }
    }
    publish_stats();
    if (stopping && idle) break;
  }
  std::deque<Command> leftovers;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    loop_running_ = false;
    leftovers.swap(inbox_);
  }
  for (Command& command : leftovers) {
    if (auto* flush = std::get_if<FlushCommand>(&command)) {
      // Under the lock: flush_cache() callers now flush directly (loop_running_ is false), also under it.
      bool flushed = false;
      try {
        std::lock_guard<std::mutex> lock(mutex_);
        flushed = scheduler_->flush_cache();
      } catch (const std::exception& error) {
        logger_->error(std::string("fathom: cache flush failed: ") + error.what());
        flush->done->set_exception(std::current_exception());
        continue;
      }
      flush->done->set_value(flushed);
    } else if (auto* submit = std::get_if<SubmitCommand>(&command)) {
      try {
        submit->on_event(error_event(submit->request, "request " + submit->request.request_id + ": the engine is shut down"));
      } catch (...) {
      }
    }
  }
}

}  // namespace

int64_t runner_max_batch_tokens(const EngineConfig& config) {
  constexpr int64_t kUnlimitedPrefillForwardTokens = 32768;
  // The runner forwards a step's decode tokens and its prefill chunks separately: the larger of the two bounds.
  return std::max<int64_t>(config.chunked_prefill_size > 0 ? config.chunked_prefill_size : kUnlimitedPrefillForwardTokens,
                           config.max_running_requests);
}

int64_t scheduler_chunked_prefill_size(const EngineConfig& config) {
  if (config.chunked_prefill_size > 0 || config.device != executor::Device::kCuda) return config.chunked_prefill_size;
  return runner_max_batch_tokens(config);
}

int64_t scheduler_max_prefill_keys(const EngineConfig& config, const model::ModelConfig& model_config) {
  if (config.device != executor::Device::kCuda) return 0;
  return expanded_key_budget(model_config, runner_max_batch_tokens(config));
}

int64_t expanded_key_budget(const model::ModelConfig& model_config, int64_t max_batch_tokens) {
  constexpr int64_t kExpandedKeyBytes = int64_t{2} << 30;
  const int64_t bytes_per_key = std::max<int64_t>(
      1, model_config.num_attention_heads * (model_config.qk_nope_head_dim + model_config.v_head_dim) * 2);
  return std::max(kExpandedKeyBytes / bytes_per_key, max_batch_tokens);
}

std::unique_ptr<Engine> make_local_engine(const EngineConfig& config) { return std::make_unique<LocalEngine>(config); }

}  // namespace fathom::scheduler
