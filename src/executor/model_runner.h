#pragma once
// Runs batches of sequence chunks through a ModelBackend (CPU or CUDA) and owns the host pool used for sampling.
#include <memory>

#include "core/thread_pool.h"
#include "executor/logits_source.h"
#include "executor/model_backend.h"

namespace fathom::executor {

using ModelRunnerConfig = BackendConfig;

class ModelRunner : public LogitsSource {
 public:
  // Loads the model onto the configured device (throws fathom::Error naming the problem).
  explicit ModelRunner(const ModelRunnerConfig& config);
  // deterministic: the backend runs batch-invariant (BackendConfig::deterministic).
  explicit ModelRunner(std::unique_ptr<ModelBackend> backend, bool deterministic = false);

  const model::ModelConfig& model_config() const { return backend_->config(); }
  int64_t vocab_size() const override { return backend_->config().vocab_size; }
  int64_t num_kv_slots() const { return backend_->num_kv_slots(); }
  ModelBackend& backend() { return *backend_; }
  ThreadPool& thread_pool() { return *host_pool_; }

  // Decode chunks (one new token) run as one forward with absorbed attention, longer chunks (and, deterministic, a
  // prompt's last token) as one forward with expanded attention, so a sequence's numerics do not depend on what it is
  // batched with.
  std::vector<float> forward(const std::vector<ForwardChunk>& chunks) override;
  bool samples_on_device() const override { return backend_->samples_on_device(); }
  ForwardOutput forward_sampled(const std::vector<ForwardChunk>& chunks) override;

 private:
  std::unique_ptr<ModelBackend> backend_;
  bool backend_deterministic_ = false;
  std::unique_ptr<ThreadPool> own_pool_;  // when the backend has no host pool (CUDA)
  ThreadPool* host_pool_ = nullptr;
};

}  // namespace fathom::executor
