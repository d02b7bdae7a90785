#include "model/cuda/device_weights.h"

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/rms_norm.h"
#include "model/rotary_embedding.h"

namespace fathom::model::cuda {

namespace {

int64_t round_up_128(int64_t value) { return (value + 127) / 128 * 128; }

// Any float tensor -> bf16 on the device (bf16 tensors are copied bit for bit).
kc::DeviceBuffer<__nv_bfloat16> upload_bf16(const Tensor& tensor, size_t& total_bytes) {
  kc::DeviceBuffer<__nv_bfloat16> device(static_cast<size_t>(tensor.numel()));
  if (tensor.dtype() == DType::BF16) {
    device.upload_bytes(tensor.raw(), tensor.nbytes());
  } else {
    std::vector<float> values(static_cast<size_t>(tensor.numel()));
    kernels::cpu::to_float(tensor, values.data());
    std::vector<uint16_t> bits(values.size());
    for (size_t i = 0; i < values.size(); ++i) bits[i] = float_to_bf16(values[i]);
    device.upload_bytes(bits.data(), bits.size() * sizeof(uint16_t));
  }
  total_bytes += device.bytes();
  return device;
}

kc::DeviceBuffer<float> upload_f32(const Tensor& tensor, size_t& total_bytes) {
  std::vector<float> values(static_cast<size_t>(tensor.numel()));
  kernels::cpu::to_float(tensor, values.data());
  kc::DeviceBuffer<float> device(values);
  total_bytes += device.bytes();
  return device;
}

// Whether every value of a float tensor survives a round trip through bf16 (bf16 tensors trivially do).
bool bf16_exact(const Tensor& tensor) {
  if (tensor.dtype() == DType::BF16) return true;
  std::vector<float> values(static_cast<size_t>(tensor.numel()));
  kernels::cpu::to_float(tensor, values.data());
  for (float value : values) {
    if (bf16_to_float(float_to_bf16(value)) != value) return false;
  }
  return true;
}

void require_fp8(const WeightMatrix& weight) {
  FATHOM_CHECK(weight.is_fp8(), "CUDA backend: " << weight.name << ".weight is " << dtype_name(weight.weight.dtype())
                                                 << "; the CUDA backend runs FP8 block-quantized linear weights "
                                                    "(quantization_config fp8, 128x128 weight_scale_inv)");
}

void copy_to_device(void* device, const void* host, size_t bytes) {
  if (bytes) FATHOM_CUDA_CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
}

DeviceLinear allocate_linear(const std::string& name, int64_t rows, int64_t cols, int64_t count) {
  DeviceLinear linear;
  linear.name = name;
  linear.rows = rows;
  linear.cols = cols;
  linear.count = count;
  linear.values = kc::DeviceBuffer<uint8_t>(static_cast<size_t>(count * rows * cols));
  linear.scales = kc::DeviceBuffer<float>(static_cast<size_t>(count * linear.scale_blocks()));
  linear.values.fill_bytes(0);
  linear.scales.fill_bytes(0);
  return linear;
}

// Copies `weight` (rows x cols, fp8) into stacked matrix `index` of `linear`, at row `row_offset` (a multiple of 128)
// and with the destination's column count >= the weight's (extra columns stay zero).
void place_weight(DeviceLinear& linear, int64_t index, int64_t row_offset, const WeightMatrix& weight) {
  require_fp8(weight);
  FATHOM_CHECK(row_offset % 128 == 0 && row_offset + weight.rows <= linear.rows && weight.cols <= linear.cols,
               "CUDA backend: cannot place " << weight.name << " [" << weight.rows << ", " << weight.cols << "] at row "
                                             << row_offset << " of " << linear.name);
  uint8_t* values = linear.values.data() + index * linear.rows * linear.cols + row_offset * linear.cols;
  if (weight.cols == linear.cols) {
    copy_to_device(values, weight.weight.raw(), static_cast<size_t>(weight.rows * weight.cols));
  } else {
    FATHOM_CUDA_CHECK(cudaMemcpy2D(values, static_cast<size_t>(linear.cols), weight.weight.raw(),
                                   static_cast<size_t>(weight.cols), static_cast<size_t>(weight.cols),
                                   static_cast<size_t>(weight.rows), cudaMemcpyHostToDevice));
  }
  const int64_t src_col_blocks = kc::ceil_div(weight.cols, 128), dst_col_blocks = kc::ceil_div(linear.cols, 128);
  FATHOM_CHECK(src_col_blocks == dst_col_blocks, "CUDA backend: " << weight.name << " column padding crosses a scale block");
  float* scales = linear.scales.data() + index * linear.scale_blocks() + (row_offset / 128) * dst_col_blocks;
  copy_to_device(scales, weight.scale_inv.raw(), weight.scale_inv.nbytes());
}

DeviceLinear upload_linear(const WeightMatrix& weight, size_t& total_bytes) {
  require_fp8(weight);
  DeviceLinear linear = allocate_linear(weight.name, weight.rows, weight.cols, 1);
  place_weight(linear, 0, 0, weight);
  total_bytes += linear.values.bytes() + linear.scales.bytes();
  return linear;
}

// Stacks the MLPs (all of one shape) into fused gate_up and padded down weights.
DeviceMlp upload_mlps(const std::string& name, const std::vector<const MlpWeights*>& mlps, size_t& total_bytes) {
  const MlpWeights& first = *mlps.front();
  DeviceMlp mlp;
  mlp.intermediate = first.gate_proj.rows;
  mlp.padded_intermediate = round_up_128(mlp.intermediate);
  const int64_t hidden = first.gate_proj.cols, count = static_cast<int64_t>(mlps.size());
  mlp.gate_up = allocate_linear(name + ".gate_up_proj", 2 * mlp.padded_intermediate, hidden, count);
  mlp.down = allocate_linear(name + ".down_proj", hidden, mlp.padded_intermediate, count);
  for (int64_t i = 0; i < count; ++i) {
    const MlpWeights& source = *mlps[static_cast<size_t>(i)];
    FATHOM_CHECK(source.gate_proj.rows == mlp.intermediate && source.up_proj.rows == mlp.intermediate &&
                     source.down_proj.cols == mlp.intermediate,
                 "CUDA backend: " << source.gate_proj.name << " does not match the shape of its group");
    place_weight(mlp.gate_up, i, 0, source.gate_proj);
    place_weight(mlp.gate_up, i, mlp.padded_intermediate, source.up_proj);
    place_weight(mlp.down, i, 0, source.down_proj);
  }
  total_bytes += mlp.gate_up.values.bytes() + mlp.gate_up.scales.bytes() + mlp.down.values.bytes() + mlp.down.scales.bytes();
  return mlp;
}

DeviceAttention upload_attention(const AttentionWeights& weights, size_t& total_bytes) {
  DeviceAttention attention;
  const WeightMatrix& kv_a = weights.kv_a_proj_with_mqa;
  if (weights.q_a_proj) {
    const WeightMatrix& q_a = *weights.q_a_proj;
    require_fp8(q_a);
    require_fp8(kv_a);
    FATHOM_CHECK(q_a.cols == kv_a.cols, "CUDA backend: " << q_a.name << " and " << kv_a.name << " read inputs of "
                                                         << q_a.cols << " and " << kv_a.cols << " features");
    attention.q_lora = q_a.rows;
    attention.kv_a_row = round_up_128(q_a.rows);
    attention.qkv_a = allocate_linear(q_a.name + "+kv_a_proj_with_mqa", attention.kv_a_row + kv_a.rows, q_a.cols, 1);
    place_weight(attention.qkv_a, 0, 0, q_a);
    place_weight(attention.qkv_a, 0, attention.kv_a_row, kv_a);
    total_bytes += attention.qkv_a.values.bytes() + attention.qkv_a.scales.bytes();
    attention.q_a_layernorm = upload_bf16(weights.q_a_layernorm, total_bytes);
    attention.q_b_proj = upload_linear(*weights.q_b_proj, total_bytes);
  } else {
    attention.q_proj = upload_linear(*weights.q_proj, total_bytes);
    attention.qkv_a = upload_linear(kv_a, total_bytes);
  }
  attention.kv_a_layernorm = upload_bf16(weights.kv_a_layernorm, total_bytes);
  attention.kv_b_proj = upload_linear(weights.kv_b_proj, total_bytes);
  attention.o_proj = upload_linear(weights.o_proj, total_bytes);
  return attention;
}

// A bf16 copy of a dense weight (fp8 ones dequantized with their block scales).
kc::DeviceBuffer<__nv_bfloat16> upload_dense_bf16(const WeightMatrix& weight, size_t& total_bytes) {
  if (!weight.is_fp8()) return upload_bf16(weight.weight, total_bytes);
  std::vector<float> dequantized = kernels::cpu::dequantize(weight);
  Tensor as_float(DType::F32, {weight.rows, weight.cols}, dequantized.data(), nullptr);
  return upload_bf16(as_float, total_bytes);
}

DeviceLayer upload_layer(const DecoderLayerWeights& layer, const std::string& prefix, size_t& total) {
  DeviceLayer uploaded;
  uploaded.input_layernorm = upload_bf16(layer.input_layernorm, total);
  uploaded.post_attention_layernorm = upload_bf16(layer.post_attention_layernorm, total);
  uploaded.attention = upload_attention(layer.attention, total);
  if (layer.dense_mlp) uploaded.dense_mlp = upload_mlps(prefix + ".mlp", {&*layer.dense_mlp}, total);
  if (layer.moe) {
    DeviceMoe moe;
    moe.num_experts = static_cast<int64_t>(layer.moe->experts.size());
    if (bf16_exact(layer.moe->gate)) {
      moe.router_bf16 = upload_bf16(layer.moe->gate, total);
    } else {
      moe.router = upload_f32(layer.moe->gate, total);
    }
    if (!layer.moe->e_score_correction_bias.empty()) moe.correction_bias = upload_f32(layer.moe->e_score_correction_bias, total);
    std::vector<const MlpWeights*> experts;
    for (const MlpWeights& expert : layer.moe->experts) experts.push_back(&expert);
    moe.experts = upload_mlps(prefix + ".mlp.experts", experts, total);
    if (layer.moe->shared) moe.shared = upload_mlps(prefix + ".mlp.shared_experts", {&*layer.moe->shared}, total);
    uploaded.moe = std::move(moe);
  }
  return uploaded;
}

}  // namespace

DeviceModelWeights upload_model_weights(const ModelConfig& config, const ModelWeights& weights) {
  DeviceModelWeights device;
  size_t& total = device.total_bytes;
  device.embed_tokens = upload_bf16(weights.embed_tokens, total);
  for (size_t index = 0; index < weights.layers.size(); ++index) {
    device.layers.push_back(upload_layer(weights.layers[index], "model.layers." + std::to_string(index), total));
  }
  device.norm = upload_bf16(weights.norm, total);
  device.lm_head = upload_dense_bf16(weights.lm_head, total);
  device.rope_inv_freq = kc::DeviceBuffer<float>(make_rope_frequencies(config).inv_freq);
  total += device.rope_inv_freq.bytes();
  if (weights.mtp) {
    const MtpWeights& source = *weights.mtp;
    FATHOM_CHECK(source.eh_proj.rows == config.hidden_size && source.eh_proj.cols == 2 * config.hidden_size,
                 "CUDA backend: " << source.eh_proj.name << " is [" << source.eh_proj.rows << ", " << source.eh_proj.cols
                                  << "], expected [" << config.hidden_size << ", " << 2 * config.hidden_size << "]");
    DeviceMtp mtp;
    mtp.enorm = upload_bf16(source.enorm, total);
    mtp.hnorm = upload_bf16(source.hnorm, total);
    mtp.eh_proj = upload_dense_bf16(source.eh_proj, total);
    mtp.shared_head_norm = upload_bf16(source.shared_head_norm, total);
    mtp.layer = upload_layer(source.layer, "model.layers." + std::to_string(config.num_hidden_layers), total);
    device.mtp = std::move(mtp);
  }
  return device;
}

kc::MlaKvBWeights kv_b_absorb_view(const ModelConfig& config, const DeviceAttention& attention) {
  kc::MlaKvBWeights view;
  view.weight = attention.kv_b_proj.values.data();
  view.scale_inv = attention.kv_b_proj.scales.data();
  view.is_fp8 = true;
  view.num_heads = static_cast<int32_t>(config.num_attention_heads);
  view.nope_dim = static_cast<int32_t>(config.qk_nope_head_dim);
  view.v_dim = static_cast<int32_t>(config.v_head_dim);
  view.kv_lora_dim = static_cast<int32_t>(config.kv_lora_rank);
  return view;
}

}  // namespace fathom::model::cuda
