#include "executor/cpu_model_backend.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace fathom::executor {

CpuModelBackend::CpuModelBackend(const BackendConfig& config) : loaded_(model::load_model(config.load)) {
  FATHOM_CHECK(config.num_kv_slots > 0, "CPU backend: the KV cache needs a positive number of slots, got " << config.num_kv_slots);
  model_ = std::make_unique<model::DeepseekV3Model>(loaded_.config, loaded_.weights);
  cache_ = std::make_unique<kv_cache::LatentKvCache>(model_->num_cache_layers(), config.num_kv_slots, model_->cache_row_dim());
  if (model_->mtp()) mtp_cache_ = std::make_unique<kv_cache::LatentKvCache>(1, config.num_kv_slots, model_->cache_row_dim());
  pool_ = std::make_unique<ThreadPool>(config.num_threads);
  context_ = model::ExecutionContext{pool_.get(), config.mode};
}

namespace {

// rows [rows.size(), H] of hidden [*, H]
std::vector<float> select_rows(const std::vector<float>& hidden, int64_t dim, const std::vector<int64_t>& rows) {
  std::vector<float> selected(rows.size() * static_cast<size_t>(dim));
  for (size_t i = 0; i < rows.size(); ++i) {
    std::copy_n(hidden.begin() + rows[i] * dim, dim, selected.begin() + static_cast<int64_t>(i) * dim);
  }
  return selected;
}

}  // namespace

std::vector<float> CpuModelBackend::forward(const model::ForwardBatch& batch, const std::vector<int64_t>& logit_rows) {
  const int64_t dim = loaded_.config.hidden_size;
  last_hidden_.clear();  // no MTP input survives a forward, failed or not, but this one's own rows
  for (int64_t row : logit_rows) {
    FATHOM_CHECK(row >= 0 && row < batch.num_tokens(), "CPU backend: logit row " << row << " of " << batch.num_tokens() << " tokens");
  }
  std::vector<float> hidden = model_->forward(batch, *cache_, context_);  // [tokens, H]
  std::vector<float> logits;
  if (!logit_rows.empty()) {
    const std::vector<float> selected = select_rows(hidden, dim, logit_rows);  // [rows, H]
    logits = model_->compute_logits(selected.data(), static_cast<int64_t>(logit_rows.size()), context_);
  }
  if (model_->mtp()) last_hidden_ = std::move(hidden);  // kept only where an MTP forward may read it
  return logits;
}

std::vector<float> CpuModelBackend::forward_mtp(const model::ForwardBatch& batch, const std::vector<int64_t>& hidden_rows,
                                                const std::vector<int64_t>& logit_rows) {
  if (!model_->mtp()) return ModelBackend::forward_mtp(batch, hidden_rows, logit_rows);  // throws
  const int64_t dim = loaded_.config.hidden_size, n = batch.num_tokens();
  const int64_t previous_rows = static_cast<int64_t>(last_hidden_.size()) / dim;
  FATHOM_CHECK(static_cast<int64_t>(hidden_rows.size()) == n,
               "CPU backend: MTP forward of " << n << " tokens with " << hidden_rows.size() << " hidden rows");
  for (int64_t row : hidden_rows) {
    FATHOM_CHECK(row >= 0 && row < previous_rows,
                 "CPU backend: MTP hidden row " << row << " of the previous forward's " << previous_rows);
  }
  const std::vector<float> main_hidden = select_rows(last_hidden_, dim, hidden_rows);  // [n, H]
  last_hidden_.clear();  // no input survives a forward, failed or not, but its own rows
  for (int64_t row : logit_rows) {
    FATHOM_CHECK(row >= 0 && row < n, "CPU backend: MTP logit row " << row << " of " << n << " tokens");
  }
  last_hidden_ = model_->mtp()->forward(batch, main_hidden.data(), *mtp_cache_, context_);  // [n, H]
  if (logit_rows.empty()) return {};
  const std::vector<float> selected = select_rows(last_hidden_, dim, logit_rows);
  return model_->compute_logits(selected.data(), static_cast<int64_t>(logit_rows.size()), context_);
}

std::string CpuModelBackend::describe() const {
  std::ostringstream out;
  out << "device cpu, " << pool_->num_threads() << " threads, mode "
      << (context_.mode == kernels::NumericMode::kW8A8 ? "w8a8" : "exact") << ", KV cache " << cache_->num_slots() << " tokens";
  return out.str();
}

}  // namespace fathom::executor
