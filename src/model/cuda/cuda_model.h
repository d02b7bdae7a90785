#pragma once
// DeepSeek-V3 forward pass on one Hopper GPU: weights uploaded once (device_weights.h), a bf16 latent KV cache of
// token-granular slots (page size 1, the slots the scheduler's KvSlotPool hands out), bf16 activations, FP8 w8a8
// linears (FP32 accumulation promoted per 128-block), absorbed MLA decode and expanded MLA prefill / extend.
#include <memory>
#include <utility>
#include <vector>

#include "core/trace.h"
#include "model/config.h"
#include "model/forward_batch.h"
#include "model/weights.h"
#include "sampling/sampling_options.h"

namespace fathom::model::cuda {

struct CudaModelOptions {
  int device = 0;
  int64_t num_kv_slots = 0;           // KV capacity in tokens; 0 = from mem_fraction_static
  // KV page size of the caller's slot allocation (tokens): page p holds slots [p * size, (p + 1) * size) of one
  // sequence's consecutive positions. A multiple of 64 lets the decode attention read whole 64-token tiles by TMA
  // (the seesaw MLA kernel) through a page-granular table; forwards whose slots break that are rejected.
  int64_t kv_page_size = 1;
  double mem_fraction_static = 0.9;   // of total GPU memory for weights + workspaces + KV cache (when num_kv_slots = 0)
  int64_t max_batch_tokens = 8192;    // most new tokens in one forward (prefill chunks + decode tokens)
  // Most keys (cached prefix + new, over its sequences) one prefill forward attends to: their kv_b-expanded rows are
  // kept free beside the KV cache (the scheduler's key budget); 0 = only the 2 x max_batch_tokens keys always kept.
  // A forward with more keys is attended in passes over windows of max(max_prefill_keys, 2 x max_batch_tokens)
  // positions (kernels/cuda/mla/mla_prefill_windows.h), each expanding at most that many keys.
  int64_t max_prefill_keys = 0;
  int64_t max_decode_batch = 256;     // most sequences of a pure-decode forward
  int64_t max_context_tokens = 0;     // longest sequence (cached + new); 0 = the config's max_position_embeddings
  // Padded decode batch sizes (--cuda-graph-bs): a decode batch of at most the largest runs as the smallest size >= its
  // own, padded, with the MLA split plan of its context bucket, whether or not graphs are captured, so greedy output
  // is the same with CUDA graphs on and off. Empty = decode batches run unpadded and eagerly.
  std::vector<int32_t> cuda_graph_batch_sizes;
  bool capture_cuda_graphs = true;    // replay the padded sizes from captured CUDA graphs (--disable-cuda-graph: false)
  // --enable-deterministic-inference: a token's results do not depend on the other rows of the forward (batch
  // composition, chunking, prefix-cache hits). FP8 GEMMs use only our kernels (one arithmetic for every row count:
  // the mma.sync family for dense weights in decode form and for rows not a multiple of 8, the warpgroup-MMA
  // kernels for the other dense weights in prefill form and for routed experts of V3's shapes),
  // the cuBLASLt bf16/fp32 GEMMs always see 64 rows (decode-form routers run our fp32 kernel, row-invariant by
  // construction), and MLA decode splits every sequence into fixed-size pieces.
  // Costs prefill speed (no cuBLASLt FP8) and long-context decode parallelism.
  bool deterministic = false;
};

// A forward's results: logits of the host rows, the tokens sampled on the device and the rows scored there.
struct ForwardResult {
  std::vector<float> logits;        // [logit_rows, V] fp32
  std::vector<int32_t> tokens;      // [sample_rows]
  std::vector<float> logprobs;      // [sample_rows] log_softmax(raw logits)[token]
  // The sampled rows with DeviceSamplingRow::top_logprobs: (index into sample_rows, the drawn token scored: rank and
  // alternatives).
  std::vector<std::pair<size_t, sampling::SampledToken>> sample_scores;
  std::vector<sampling::SampledToken> scored;  // [scored_rows] as sampling::score_token
};

// What a constructed model reports at startup.
struct CudaModelStats {
  size_t weight_bytes = 0;
  size_t workspace_bytes = 0;
  size_t kv_cache_bytes = 0;
  int64_t num_kv_slots = 0;
  double upload_seconds = 0;
  int64_t num_cuda_graphs = 0;
  double graph_capture_seconds = 0;
  size_t graph_memory_bytes = 0;      // device memory the graphs and their static buffers took
  int64_t graph_forwards = 0;         // decode forwards that replayed a graph (counters for tests / logs)
  int64_t eager_forwards = 0;
};

class CudaModelImpl;

class CudaDeepseekV3Model {
 public:
  // Uploads the weights (throws fathom::Error naming the tensor for unsupported ones, or when memory runs out).
  CudaDeepseekV3Model(const ModelConfig& config, const ModelWeights& weights, const CudaModelOptions& options);
  ~CudaDeepseekV3Model();

  const ModelConfig& config() const;
  const CudaModelStats& stats() const;
  int64_t num_kv_slots() const;

  // Runs the batch on the GPU (KV rows of its new tokens written at their slots; slots in [0, num_kv_slots())),
  // and returns fp32 logits [logit_rows.size(), V] of the listed token rows (indices into batch.token_ids).
  // Pure-decode batches use absorbed attention, others expanded attention per chunk. Blocks until done.
  std::vector<float> forward(const ForwardBatch& batch, const std::vector<int64_t>& logit_rows);
  // The same forward; the rows in `sample_rows` (token rows, as logit_rows; disjoint from them) are sampled on the
  // device with `sampling` [sample_rows] and only their tokens and log-probabilities (and top_logprobs alternatives)
  // come back to the host; the token rows of `scored_rows` are scored on the device (kernels/cuda/sampling/
  // score_tokens.h), only their scores coming back.
  ForwardResult forward(const ForwardBatch& batch, const std::vector<int64_t>& logit_rows,
                        const std::vector<int64_t>& sample_rows, const std::vector<sampling::DeviceSamplingRow>& sampling,
                        const std::vector<sampling::DeviceScoredRow>& scored_rows = {});

  // Whether the MTP (NextN) module was uploaded (the loaded weights had it; its KV cache is one more layer).
  bool has_mtp() const;
  // The MTP module over `batch`: the row at position p carries token p+1 and reads the final hidden state of row
  // hidden_rows[row] of the previous forward on this model (main forward after its norm, or MTP forward after
  // shared_head.norm for a chained draft); writes the MTP's KV rows at the batch's slots; returns fp32 logits of
  // `logit_rows` (they predict token p+2). Runs eagerly (no CUDA graph). Blocks until done.
  std::vector<float> forward_mtp(const ForwardBatch& batch, const std::vector<int64_t>& hidden_rows,
                                 const std::vector<int64_t>& logit_rows);
  // Same, with forward's device sampling of `sample_rows`.
  ForwardResult forward_mtp(const ForwardBatch& batch, const std::vector<int64_t>& hidden_rows,
                            const std::vector<int64_t>& logit_rows, const std::vector<int64_t>& sample_rows,
                            const std::vector<sampling::DeviceSamplingRow>& sampling);

  // Later forwards record per-layer / per-op GPU times (CUDA events) into `trace`; null turns it off.
  void set_trace(TraceRecorder* trace);

 private:
  std::unique_ptr<CudaModelImpl> impl_;
};

}  // namespace fathom::model::cuda
