#pragma once
// DeepSeek-V3 forward pass on the CPU: embedding, decoder layers over a latent KV cache, final norm, lm_head,
// and the optional MTP module.
#include <memory>
#include <vector>

#include "model/decoder_layer.h"

namespace fathom::model {

// [num_tokens, H] embedding rows of token_ids; throws naming the id when it is outside [0, vocab_size).
std::vector<float> embed_tokens(const Tensor& embedding, const std::vector<int32_t>& token_ids);

// SGLang's DeepSeek NextN semantics: the module at position i reads the embedding of token i+1 and the main model's
// final-normed hidden state at i: u = eh_proj([enorm(emb) ; hnorm(h)]), one decoder layer (own KV cache, RoPE
// position i), then shared_head.norm; its logits (main lm_head) predict token i+2.
class MtpModule {
 public:
  MtpModule(const ModelConfig& config, const MtpWeights& weights, const Tensor& embedding,
            const kernels::cpu::RopeFrequencies& rope);

  // batch.token_ids are the *next* tokens (i+1) at batch.positions i; main_hidden: [num_tokens, H].
  // Returns [num_tokens, H] after shared_head.norm. `cache` has one layer.
  std::vector<float> forward(const ForwardBatch& batch, const float* main_hidden, kv_cache::LatentKvCache& cache,
                             const ExecutionContext& context);

 private:
  const ModelConfig& config_;
  const MtpWeights& weights_;
  const Tensor& embedding_;
  DecoderLayer layer_;
};

class DeepseekV3Model {
 public:
  DeepseekV3Model(const ModelConfig& config, const ModelWeights& weights);

  const ModelConfig& config() const { return config_; }
  int64_t num_cache_layers() const { return config_.num_hidden_layers; }
  int64_t cache_row_dim() const { return config_.kv_latent_dim(); }

  // Final-normed hidden states [num_tokens, H]; writes the new tokens' KV rows into `cache`.
  std::vector<float> forward(const ForwardBatch& batch, kv_cache::LatentKvCache& cache, const ExecutionContext& context);

  // hidden: [num_rows, H] -> logits [num_rows, V] (fp32; the lm_head is a float weight).
  std::vector<float> compute_logits(const float* hidden, int64_t num_rows, const ExecutionContext& context) const;

  MtpModule* mtp() { return mtp_.get(); }

 private:
  const ModelConfig& config_;
  const ModelWeights& weights_;
  kernels::cpu::RopeFrequencies rope_;
  std::vector<std::unique_ptr<DecoderLayer>> layers_;
  std::unique_ptr<MtpModule> mtp_;
};

}  // namespace fathom::model
