#include "executor/model_backend.h"

#include "core/error.h"
#include "executor/cpu_model_backend.h"

namespace fathom::executor {

#ifdef FATHOM_HAVE_CUDA
std::unique_ptr<ModelBackend> make_cuda_model_backend(const BackendConfig& config);  // cuda_model_backend.cpp
bool cuda_backend_built() { return true; }
#else
bool cuda_backend_built() { return false; }
#endif

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::kCpu;
  FATHOM_CHECK(name == "cuda", "--device " << name << ": expected cpu or cuda");
  return Device::kCuda;
}

std::string device_name(Device device) { return device == Device::kCpu ? "cpu" : "cuda"; }

std::vector<int32_t> default_cuda_graph_batch_sizes(int64_t max_batch) {
  std::vector<int32_t> sizes;
  for (int32_t size : {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256}) {
    if (size <= max_batch) sizes.push_back(size);
  }
  return sizes;
}

SampledForward ModelBackend::forward_sampled(const model::ForwardBatch& batch, const std::vector<int64_t>& logit_rows,
                                            const std::vector<int64_t>& sample_rows,
                                            const std::vector<sampling::DeviceSamplingRow>& sampling,
                                            const std::vector<sampling::DeviceScoredRow>& scored_rows) {
  FATHOM_CHECK(sample_rows.empty() && sampling.empty() && scored_rows.empty(),
               "the " << device_name(device()) << " backend does not sample or score on the device");
  return SampledForward{forward(batch, logit_rows), {}, {}};
}

std::vector<float> ModelBackend::forward_mtp(const model::ForwardBatch&, const std::vector<int64_t>&,
                                             const std::vector<int64_t>&) {
  FATHOM_FAIL("the " << device_name(device()) << " backend has no MTP module loaded (load it with --mtp from a checkpoint "
                                                 "that has model.layers.{num_hidden_layers}.eh_proj)");
}

SampledForward ModelBackend::forward_mtp_sampled(const model::ForwardBatch& batch, const std::vector<int64_t>& hidden_rows,
                                                const std::vector<int64_t>& logit_rows, const std::vector<int64_t>& sample_rows,
                                                const std::vector<sampling::DeviceSamplingRow>& sampling) {
  FATHOM_CHECK(sample_rows.empty() && sampling.empty(), "the " << device_name(device()) << " backend does not sample on the device");
  return SampledForward{forward_mtp(batch, hidden_rows, logit_rows), {}, {}};
}

std::unique_ptr<ModelBackend> make_model_backend(const BackendConfig& config) {
#ifdef FATHOM_HAVE_CUDA
  if (config.device == Device::kCuda) return make_cuda_model_backend(config);
#else
  FATHOM_CHECK(config.device == Device::kCpu,
               "--device cuda: this fathom was built without the CUDA toolkit (rebuild with nvcc available)");
#endif
  return std::make_unique<CpuModelBackend>(config);
}

}  // namespace fathom::executor
