#pragma once
// Validates a checkpoint against the config's tensor specs and assembles ModelWeights from it.
#include <functional>
#include <optional>
#include <string>

#include "model/config.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace fathom::model {

// Where tensors come from: a checkpoint, or generated dummy weights. Returns nullopt when absent.
using TensorLookup = std::function<std::optional<Tensor>(const std::string& name)>;

// Checks presence, shape and dtype of every expected tensor (and FP8 scales) and throws one fathom::Error
// listing every problem, each naming the tensor (and `source_description`, e.g. the checkpoint dir).
// The MTP module is included when `with_mtp`.
void validate_tensors(const ModelConfig& config, const TensorLookup& lookup, bool with_mtp,
                      const std::string& source_description);

// Builds the weight views (call validate_tensors first).
ModelWeights assemble_weights(const ModelConfig& config, const TensorLookup& lookup, bool with_mtp);

// True when the checkpoint holds an MTP module for this config (its eh_proj is present).
bool checkpoint_has_mtp(const ModelConfig& config, const TensorLookup& lookup);

struct LoadedModel {
  ModelConfig config;
  ModelWeights weights;
  std::shared_ptr<void> storage;  // keeps the mapped checkpoint or the dummy tensors alive
};

enum class LoadFormat { kSafetensors, kDummy };
LoadFormat parse_load_format(const std::string& name);  // "auto" | "safetensors" | "dummy"

struct LoadOptions {
  std::string model_dir;          // holds config.json (and the safetensors unless dummy)
  std::string override_config;    // JSON object merged over config.json
  LoadFormat format = LoadFormat::kSafetensors;
  uint64_t dummy_seed = 0;
  bool load_mtp = true;           // load the MTP module when the checkpoint has one (dummy: when the config has one)
};

LoadedModel load_model(const LoadOptions& options);

}  // namespace fathom::model
