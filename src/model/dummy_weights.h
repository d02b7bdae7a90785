#pragma once
// `--load-format dummy`: deterministic random weights with the checkpoint's names, shapes and dtypes (FP8 + scales).
#include <map>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "model/config.h"

namespace fathom::model {

class DummyTensors {
 public:
  std::optional<Tensor> find(const std::string& name) const;
  void add(const std::string& name, Tensor tensor) { tensors_[name] = std::move(tensor); }
  size_t size() const { return tensors_.size(); }
  const std::map<std::string, Tensor>& all() const { return tensors_; }

 private:
  std::map<std::string, Tensor> tensors_;
};

// Same seed and config -> bit-identical tensors. Linear weights are FP8 with 128×128 scales when the config has
// quantization_config (eh_proj stays BF16, as in DeepSeek's checkpoints); values are scaled so activations stay O(1).
DummyTensors make_dummy_tensors(const ModelConfig& config, uint64_t seed, bool with_mtp);

}  // namespace fathom::model
