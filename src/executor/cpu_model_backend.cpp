#include "executor/cpu_model_backend.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace fathom::executor {

CpuModelBackend::CpuModelBackend(const BackendConfig& config) : loaded_(model::load_model(config.load)) {
  FATHOM_CHECK(config.num_kv_slots > 0, "CPU backend: the KV cache needs a positive number of slots, got " << config.num_kv_slots);
  model_ = std::make_unique<model::DeepseekV3Model>(loaded_.config, loaded_.weights);
  cache_ = std::make_unique<kv_cache::LatentKvCache>(model_->num_cache_layers(), config.num_kv_slots, model_->cache_row_dim());
  pool_ = std::make_unique<ThreadPool>(config.num_threads);
  context_ = model::ExecutionContext{pool_.get(), config.mode};
}

std::vector<float> CpuModelBackend::forward(const model::ForwardBatch& batch, const std::vector<int64_t>& logit_rows) {
  const int64_t dim = loaded_.config.hidden_size;
  for (int64_t row : logit_rows) {
    FATHOM_CHECK(row >= 0 && row < batch.num_tokens(), "CPU backend: logit row " << row << " of " << batch.num_tokens() << " tokens");
  }
  std::vector<float> hidden = model_->forward(batch, *cache_, context_);  // [tokens, H]
  if (logit_rows.empty()) return {};
  std::vector<float> selected(logit_rows.size() * static_cast<size_t>(dim));  // [rows, H]
  for (size_t i = 0; i < logit_rows.size(); ++i) {
    std::copy_n(hidden.begin() + logit_rows[i] * dim, dim, selected.begin() + static_cast<int64_t>(i) * dim);
  }
  return model_->compute_logits(selected.data(), static_cast<int64_t>(logit_rows.size()), context_);
}

std::string CpuModelBackend::describe() const {
  std::ostringstream out;
  out << "device cpu, " << pool_->num_threads() << " threads, mode "
      << (context_.mode == kernels::NumericMode::kW8A8 ? "w8a8" : "exact") << ", KV cache " << cache_->num_slots() << " tokens";
  return out.str();
}

}  // namespace fathom::executor
