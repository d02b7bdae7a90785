#pragma once
// The CPU backend: DeepseekV3Model over a host latent KV cache, parallel over a thread pool.
#include "executor/model_backend.h"
#include "kv_cache/latent_kv_cache.h"
#include "model/deepseek_v3_model.h"

namespace fathom::executor {

class CpuModelBackend final : public ModelBackend {
 public:
  explicit CpuModelBackend(const BackendConfig& config);

  const model::ModelConfig& config() const override { return loaded_.config; }
  Device device() const override { return Device::kCpu; }
  int64_t num_kv_slots() const override { return cache_->num_slots(); }
  std::vector<float> forward(const model::ForwardBatch& batch, const std::vector<int64_t>& logit_rows) override;
  bool has_mtp() const override { return model_->mtp() != nullptr; }
  std::vector<float> forward_mtp(const model::ForwardBatch& batch, const std::vector<int64_t>& hidden_rows,
                                 const std::vector<int64_t>& logit_rows) override;
  std::string describe() const override;
  ThreadPool* host_pool() override { return pool_.get(); }
  void set_trace(TraceRecorder* trace) override { context_.trace = trace; }

  model::DeepseekV3Model& model() { return *model_; }
  const model::ExecutionContext& context() const { return context_; }

 private:
  model::LoadedModel loaded_;
  std::unique_ptr<model::DeepseekV3Model> model_;
  std::unique_ptr<kv_cache::LatentKvCache> cache_;
  std::unique_ptr<kv_cache::LatentKvCache> mtp_cache_;  // one layer, the main cache's slots; null without MTP
  std::vector<float> last_hidden_;  // [rows of the previous forward, H] final hidden states (MTP input; empty without MTP)
  std::unique_ptr<ThreadPool> pool_;
  model::ExecutionContext context_;
};

}  // namespace fathom::executor
