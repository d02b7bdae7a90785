#pragma once
// Owns the loaded DeepSeek-V3 model, its latent KV cache (whose slots a KvSlotPool hands out), a thread pool and
// the numeric mode, and runs batches of sequence chunks through it.
#include <memory>

#include "core/thread_pool.h"
#include "executor/logits_source.h"
#include "kernels/weight_matrix.h"
#include "kv_cache/latent_kv_cache.h"
#include "model/deepseek_v3_model.h"
#include "model/weight_loader.h"

namespace fathom::executor {

struct ModelRunnerConfig {
  model::LoadOptions load;
  kernels::NumericMode mode = kernels::NumericMode::kExact;
  int num_threads = 0;        // 0 = all cores
  int64_t num_kv_slots = 0;   // KV cache capacity in tokens (rows per layer)
};

class ModelRunner : public LogitsSource {
 public:
  // Loads the model (throws fathom::Error naming the checkpoint problem) and allocates the KV cache.
  explicit ModelRunner(const ModelRunnerConfig& config);

  const model::ModelConfig& model_config() const { return loaded_.config; }
  int64_t vocab_size() const override { return loaded_.config.vocab_size; }
  int64_t num_kv_slots() const { return cache_->num_slots(); }
  ThreadPool& thread_pool() { return *pool_; }
  model::DeepseekV3Model& model() { return *model_; }
  const model::ExecutionContext& context() const { return context_; }

  // Decode chunks (one new token) run as one forward with absorbed attention, longer chunks as one forward with
  // expanded attention, so a sequence's numerics do not depend on what it is batched with.
  std::vector<float> forward(const std::vector<ForwardChunk>& chunks) override;

 private:
  model::LoadedModel loaded_;
  std::unique_ptr<model::DeepseekV3Model> model_;
  std::unique_ptr<kv_cache::LatentKvCache> cache_;
  std::unique_ptr<ThreadPool> pool_;
  model::ExecutionContext context_;
};

}  // namespace fathom::executor
