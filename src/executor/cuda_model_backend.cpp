// The CUDA backend (built only with the CUDA toolkit): the host keeps the checkpoint mapping for the load, the
// forward runs on the GPU (model/cuda).
#include <sstream>

#include "core/error.h"
#include "executor/model_backend.h"
#include "model/cuda/cuda_model.h"

namespace fathom::executor {

namespace {

SampledForward to_sampled(model::cuda::ForwardResult result) {
  SampledForward out;
  out.logits = std::move(result.logits);
  out.samples.resize(result.tokens.size());
  for (size_t i = 0; i < result.tokens.size(); ++i) {
    out.samples[i].token_id = result.tokens[i];
    out.samples[i].logprob = result.logprobs[i];
  }
  for (auto& [sample, scores] : result.sample_scores) {
    out.samples[sample].rank = scores.rank;
    out.samples[sample].top = std::move(scores.top);
  }
  out.scored = std::move(result.scored);
  return out;
}

class CudaModelBackend final : public ModelBackend {
 public:
  explicit CudaModelBackend(const BackendConfig& config) : loaded_(model::load_model(config.load)) {
    model::cuda::CudaModelOptions options;
    options.num_kv_slots = config.num_kv_slots;
    options.kv_page_size = config.kv_page_size;
    options.mem_fraction_static = config.mem_fraction_static;
    options.max_batch_tokens = config.max_batch_tokens;
    options.max_prefill_keys = config.max_prefill_keys;
    options.max_decode_batch = config.max_decode_batch;
    options.max_context_tokens = config.max_context_tokens;
    options.cuda_graph_batch_sizes = config.cuda_graph_batch_sizes;
    options.capture_cuda_graphs = config.capture_cuda_graphs;
    options.deterministic = config.deterministic;
    model_ = std::make_unique<model::cuda::CudaDeepseekV3Model>(loaded_.config, loaded_.weights, options);
  }

  const model::ModelConfig& config() const override { return loaded_.config; }
  Device device() const override { return Device::kCuda; }
  int64_t num_kv_slots() const override { return model_->num_kv_slots(); }
  std::vector<float> forward(const model::ForwardBatch& batch, const std::vector<int64_t>& logit_rows) override {
    return model_->forward(batch, logit_rows);
  }
  bool has_mtp() const override { return model_->has_mtp(); }
  std::vector<float> forward_mtp(const model::ForwardBatch& batch, const std::vector<int64_t>& hidden_rows,
                                 const std::vector<int64_t>& logit_rows) override {
    return model_->forward_mtp(batch, hidden_rows, logit_rows);
  }
  SampledForward forward_mtp_sampled(const model::ForwardBatch& batch, const std::vector<int64_t>& hidden_rows,
                                     const std::vector<int64_t>& logit_rows, const std::vector<int64_t>& sample_rows,
                                     const std::vector<sampling::DeviceSamplingRow>& sampling) override {
    return to_sampled(model_->forward_mtp(batch, hidden_rows, logit_rows, sample_rows, sampling));
  }
  bool samples_on_device() const override { return true; }
  SampledForward forward_sampled(const model::ForwardBatch& batch, const std::vector<int64_t>& logit_rows,
                                 const std::vector<int64_t>& sample_rows,
                                 const std::vector<sampling::DeviceSamplingRow>& sampling,
                                 const std::vector<sampling::DeviceScoredRow>& scored_rows) override {
    return to_sampled(model_->forward(batch, logit_rows, sample_rows, sampling, scored_rows));
  }
  void set_trace(TraceRecorder* trace) override { model_->set_trace(trace); }
  std::string describe() const override {
    const model::cuda::CudaModelStats& stats = model_->stats();
    std::ostringstream out;
    out << "device cuda, weights " << stats.weight_bytes / (1 << 20) << " MiB (uploaded in " << stats.upload_seconds
        << " s), KV cache " << stats.num_kv_slots << " tokens (" << stats.kv_cache_bytes / (1 << 20) << " MiB), "
        << stats.num_cuda_graphs << " CUDA graphs captured in " << stats.graph_capture_seconds << " s ("
        << stats.graph_memory_bytes / (1 << 20) << " MiB incl. warm-up buffers)";
    return out.str();
  }

 private:
  model::LoadedModel loaded_;
  std::unique_ptr<model::cuda::CudaDeepseekV3Model> model_;
};

}  // namespace

std::unique_ptr<ModelBackend> make_cuda_model_backend(const BackendConfig& config) {
  return std::make_unique<CudaModelBackend>(config);
}

}  // namespace fathom::executor
