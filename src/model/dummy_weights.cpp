#include "model/dummy_weights.h"

#include <array>
#include <cmath>
#include <thread>

#include "core/thread_pool.h"
#include "model/weight_spec.h"

namespace fathom::model {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t hash_name(const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Uniform in [-1, 1) from the element's counter: each element is independent, so generation parallelizes.
float uniform_at(uint64_t stream, uint64_t index) {
  return static_cast<float>(splitmix64(stream ^ splitmix64(index)) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

template <typename Fill>
void fill_parallel(int64_t count, ThreadPool& pool, Fill fill) {
  pool.parallel_for(count, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) fill(i);
  }, /*min_chunk=*/1 << 16);
}

Tensor make_bf16(const std::vector<int64_t>& shape, uint64_t stream, float center, float spread, ThreadPool& pool) {
  Tensor tensor = Tensor::allocate(DType::BF16, shape);
  uint16_t* out = tensor.data<uint16_t>();
  fill_parallel(tensor.numel(), pool, [&](int64_t i) { out[i] = float_to_bf16(center + spread * uniform_at(stream, i)); });
  return tensor;
}

void add_fp8_linear(DummyTensors* tensors, const TensorSpec& spec, uint64_t stream, ThreadPool& pool) {
  // Codes for a uniform value in [-448, 448), indexed by 16 random bits.
  static const std::array<uint8_t, 65536> kCodes = [] {
    std::array<uint8_t, 65536> codes{};
    for (int i = 0; i < 65536; ++i) codes[i] = float_to_fp8_e4m3((static_cast<float>(i) / 32768.0f - 1.0f) * kFp8E4M3Max);
    return codes;
  }();
  Tensor weight = Tensor::allocate(DType::F8_E4M3, spec.shape);
  uint8_t* out = weight.data<uint8_t>();
  fill_parallel(weight.numel(), pool, [&](int64_t i) {
    out[i] = kCodes[(splitmix64(stream ^ splitmix64(static_cast<uint64_t>(i))) >> 48) & 0xffff];
  });
  // Uniform(-1,1) has std 1/sqrt(3): scale so the dequantized weight has std 1/sqrt(cols), varied per block.
  Tensor scale = Tensor::allocate(DType::F32, fp8_scale_shape(spec.shape));
  const float base = std::sqrt(3.0f / static_cast<float>(spec.shape[1])) / kFp8E4M3Max;
  for (int64_t i = 0; i < scale.numel(); ++i) scale.data<float>()[i] = base * (1.0f + 0.25f * uniform_at(stream + 1, i));
  tensors->add(spec.name, std::move(weight));
  tensors->add(spec.name + "_scale_inv", std::move(scale));
}

}  // namespace

std::optional<Tensor> DummyTensors::find(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return std::nullopt;
  return it->second;
}

DummyTensors make_dummy_tensors(const ModelConfig& config, uint64_t seed, bool with_mtp) {
  std::vector<TensorSpec> specs = main_model_tensor_specs(config);
  if (with_mtp && config.num_nextn_predict_layers > 0) {
    std::vector<TensorSpec> mtp = mtp_tensor_specs(config);
    specs.insert(specs.end(), mtp.begin(), mtp.end());
  }
  ThreadPool pool;
  DummyTensors tensors;
  for (const TensorSpec& spec : specs) {
    if (!spec.required) continue;  // MTP copies of embed/lm_head: the main ones are used
    const uint64_t stream = splitmix64(seed) ^ hash_name(spec.name);
    if (spec.kind == TensorKind::kLinear) {
      if (config.fp8 && !ends_with(spec.name, "eh_proj.weight")) {
        add_fp8_linear(&tensors, spec, stream, pool);
      } else {
        const float spread = std::sqrt(3.0f / static_cast<float>(spec.shape[1]));
        tensors.add(spec.name, make_bf16(spec.shape, stream, 0.0f, spread, pool));
      }
    } else if (ends_with(spec.name, "e_score_correction_bias")) {
      Tensor bias = Tensor::allocate(DType::F32, spec.shape);
      for (int64_t i = 0; i < bias.numel(); ++i) bias.data<float>()[i] = 0.05f * (1.0f + uniform_at(stream, i));
      tensors.add(spec.name, std::move(bias));
    } else if (ends_with(spec.name, "norm.weight")) {
      tensors.add(spec.name, make_bf16(spec.shape, stream, 1.0f, 0.1f, pool));
    } else if (ends_with(spec.name, "gate.weight")) {
      tensors.add(spec.name, make_bf16(spec.shape, stream, 0.0f, std::sqrt(3.0f / static_cast<float>(spec.shape[1])), pool));
    } else {
      tensors.add(spec.name, make_bf16(spec.shape, stream, 0.0f, 1.0f, pool));  // embeddings
    }
  }
  return tensors;
}

}  // namespace fathom::model
