#pragma once
// The model's weights uploaded once to the GPU in the layouts the CUDA kernels read: FP8 linears with their
// 128x128 scales, gate/up fused (intermediate padded to a multiple of 128 with zero rows, so the fused weight keeps
// the checkpoint's scale blocks and numerics), routed experts stacked per layer, bf16 norms/embedding/lm_head.
#include <cuda_bf16.h>

#include <optional>
#include <string>
#include <vector>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/fp8_gemm/fp8_types.h"
#include "kernels/cuda/mla/mla_absorb.h"
#include "model/config.h"
#include "model/weights.h"

namespace fathom::model::cuda {

namespace kc = kernels::cuda;

// One FP8 linear layer (or a stack of `count` same-shaped ones, e.g. routed experts).
struct DeviceLinear {
  std::string name;
  int64_t rows = 0;   // output features (per stacked matrix)
  int64_t cols = 0;   // input features
  int64_t count = 1;  // stacked matrices
  kc::DeviceBuffer<uint8_t> values;  // [count, rows, cols] e4m3
  kc::DeviceBuffer<float> scales;    // [count, ceil(rows/128), ceil(cols/128)]

  int64_t scale_blocks() const { return kc::ceil_div(rows, 128) * kc::ceil_div(cols, 128); }
  kc::DeviceFp8Weight view(int64_t index = 0) const {
    return {values.data() + index * rows * cols, scales.data() + index * scale_blocks(), rows, cols};
  }
};

// SwiGLU MLP: gate_up [2 * Ip, H] (gate rows [0, I), up rows [Ip, Ip + I), zero rows elsewhere), down [H, Ip].
struct DeviceMlp {
  int64_t intermediate = 0;         // I of the checkpoint
  int64_t padded_intermediate = 0;  // Ip = I rounded up to 128
  DeviceLinear gate_up;
  DeviceLinear down;
};

struct DeviceMoe {
  int64_t num_experts = 0;
  // The router runs on fp32 normed rows with exact fp32 products. Its [E, H] weight is held in bf16 when every value
  // is bf16-exact (checkpoints store the gate in bf16; the prefill form then runs on tensor cores, moe_router_planes.h),
  // else in fp32: exactly one of the two is non-empty.
  kc::DeviceBuffer<__nv_bfloat16> router_bf16;
  kc::DeviceBuffer<float> router;
  kc::DeviceBuffer<float> correction_bias;   // [E], empty when the checkpoint has none
  DeviceMlp experts;                         // gate_up / down stacked over E
  std::optional<DeviceMlp> shared;
};

struct DeviceAttention {
  // q_a_proj and kv_a_proj_with_mqa read the same normed input, so they are one GEMM: rows [0, q_lora) are q_a_proj
  // (with q_lora), rows [kv_a_row, kv_a_row + kv_lora + rope) are kv_a_proj_with_mqa; kv_a_row is q_lora rounded up
  // to 128 (zero rows between keep every scale block whole), 0 without q_lora.
  DeviceLinear qkv_a;                      // [kv_a_row + kv_lora + rope, H]
  int64_t q_lora = 0;
  int64_t kv_a_row = 0;
  kc::DeviceBuffer<__nv_bfloat16> q_a_layernorm;
  std::optional<DeviceLinear> q_b_proj;    // [heads * qk_head_dim, q_lora]
  std::optional<DeviceLinear> q_proj;      // [heads * qk_head_dim, H] without q_lora
  kc::DeviceBuffer<__nv_bfloat16> kv_a_layernorm;  // [kv_lora]
  DeviceLinear kv_b_proj;                  // [heads * (nope + v), kv_lora]
  DeviceLinear o_proj;                     // [H, heads * v]
};

struct DeviceLayer {
  kc::DeviceBuffer<__nv_bfloat16> input_layernorm;           // [H]
  kc::DeviceBuffer<__nv_bfloat16> post_attention_layernorm;  // [H]
  DeviceAttention attention;
  std::optional<DeviceMlp> dense_mlp;
  std::optional<DeviceMoe> moe;
};

// The MTP (NextN) module: its decoder layer plus the input projection; it shares the main embedding and lm_head.
struct DeviceMtp {
  kc::DeviceBuffer<__nv_bfloat16> enorm;             // [H] on the next token's embedding
  kc::DeviceBuffer<__nv_bfloat16> hnorm;             // [H] on the previous forward's final hidden state
  kc::DeviceBuffer<__nv_bfloat16> eh_proj;           // [H, 2H] bf16 (unquantized in DeepSeek's checkpoints)
  kc::DeviceBuffer<__nv_bfloat16> shared_head_norm;  // [H]
  DeviceLayer layer;
};

struct DeviceModelWeights {
  kc::DeviceBuffer<__nv_bfloat16> embed_tokens;  // [V, H]
  std::vector<DeviceLayer> layers;
  kc::DeviceBuffer<__nv_bfloat16> norm;          // [H]
  kc::DeviceBuffer<__nv_bfloat16> lm_head;       // [V, H]
  kc::DeviceBuffer<float> rope_inv_freq;         // [rope_dim / 2]
  std::optional<DeviceMtp> mtp;                  // when the loaded weights have the MTP module
  size_t total_bytes = 0;                        // device bytes of all of the above
};

// Uploads every weight the main model uses, and the MTP module when `weights` has it. Throws fathom::Error naming the tensor when a
// linear weight is not FP8 (the CUDA backend runs block-quantized checkpoints, as DeepSeek ships them).
DeviceModelWeights upload_model_weights(const ModelConfig& config, const ModelWeights& weights);

// The absorbed-attention view of a layer's kv_b_proj (the fp8 weight itself, W_UK / W_UV slices by head).
kc::MlaKvBWeights kv_b_absorb_view(const ModelConfig& config, const DeviceAttention& attention);

}  // namespace fathom::model::cuda
