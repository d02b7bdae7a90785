#pragma once
// The backend seam: one loaded model with its KV cache on a device (CPU or CUDA), running ForwardBatches.
// The scheduler, executor and commands use only this interface, so the same code drives both devices.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "core/trace.h"
#include "kernels/weight_matrix.h"
#include "model/config.h"
#include "model/forward_batch.h"
#include "model/weight_loader.h"
#include "sampling/sampling_options.h"

namespace fathom::executor {

enum class Device { kCpu, kCuda };
Device parse_device(const std::string& name);  // "cpu" | "cuda" (throws naming the value otherwise)
std::string device_name(Device device);
bool cuda_backend_built();  // false when fathom was built without the CUDA toolkit

struct BackendConfig {
  model::LoadOptions load;
  Device device = Device::kCpu;
  kernels::NumericMode mode = kernels::NumericMode::kExact;  // CPU only (the CUDA backend is always w8a8)
  int num_threads = 0;                 // CPU: 0 = all cores
  int64_t num_kv_slots = 0;            // KV capacity in tokens; CUDA: 0 = sized from mem_fraction_static
  int64_t kv_page_size = 1;            // the scheduler's KV page (tokens): every page's slots hold one sequence's run
  double mem_fraction_static = 0.9;    // CUDA: share of GPU memory for weights + workspaces + KV cache
  int64_t max_batch_tokens = 8192;     // CUDA: most tokens of one forward
  int64_t max_prefill_keys = 0;        // CUDA: most keys one prefill forward attends to (the scheduler's key budget),
                                       // kept free beside the KV cache; 0 = only what max_batch_tokens implies
  int64_t max_decode_batch = 256;      // CUDA: most sequences of one decode forward
  int64_t max_context_tokens = 0;      // CUDA: longest sequence; 0 = max_position_embeddings
  // CUDA: padded decode batch sizes (captured as graphs when capture_cuda_graphs); empty = unpadded eager decode.
  std::vector<int32_t> cuda_graph_batch_sizes;
  bool capture_cuda_graphs = true;     // CUDA: false = the padded sizes run eagerly (same results as the graphs)
  bool deterministic = false;          // CUDA: batch-invariant kernels (--enable-deterministic-inference)
};

// A forward whose sampled rows were sampled on the device.
struct SampledForward {
  std::vector<float> logits;                    // [logit_rows, V] fp32, for the host sampler
  // [sample_rows]: token and log-softmax(raw logits)[token]; with DeviceSamplingRow::top_logprobs, its rank and
  // alternatives too.
  std::vector<sampling::SampledToken> samples;
  std::vector<sampling::SampledToken> scored;   // [scored_rows] as sampling::score_token
};

// SGLang-style default capture list: 1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, up to max_batch.
std::vector<int32_t> default_cuda_graph_batch_sizes(int64_t max_batch);

class ModelBackend {
 public:
  virtual ~ModelBackend() = default;
  virtual const model::ModelConfig& config() const = 0;
  virtual Device device() const = 0;
  virtual int64_t num_kv_slots() const = 0;
  // Runs the batch (writes its new tokens' KV at their slots) and returns fp32 logits [logit_rows.size(), V] of
  // the listed token rows (indices into batch.token_ids). Called from one thread at a time; blocks until done.
  virtual std::vector<float> forward(const model::ForwardBatch& batch, const std::vector<int64_t>& logit_rows) = 0;
  // Whether a multi-token-prediction (MTP / NextN) module is loaded: BackendConfig::load.load_mtp and a checkpoint
  // that has one (model.layers.{num_hidden_layers}.eh_proj).
  virtual bool has_mtp() const { return false; }
  // The MTP module over `batch` (SGLang's NextN semantics): the row at position p carries token p+1 as its token id
  // and reads the final hidden state of row hidden_rows[row] of this backend's previous forward, main model or MTP
  // (its output after shared_head.norm feeds a chained draft). Writes the MTP's own KV cache (same slots as the
  // main model's) and returns fp32 logits [logit_rows.size(), V] (they predict token p+2). Throws without a module.
  // A forward or MTP forward that throws leaves no hidden rows for the next MTP forward.
  virtual std::vector<float> forward_mtp(const model::ForwardBatch& batch, const std::vector<int64_t>& hidden_rows,
                                         const std::vector<int64_t>& logit_rows);
  // forward_mtp with forward_sampled's device sampling of `sample_rows` (draft tokens without their logits on the bus).
  virtual SampledForward forward_mtp_sampled(const model::ForwardBatch& batch, const std::vector<int64_t>& hidden_rows,
                                             const std::vector<int64_t>& logit_rows, const std::vector<int64_t>& sample_rows,
                                             const std::vector<sampling::DeviceSamplingRow>& sampling);
  // Whether forward_sampled can sample and score rows on the device (CUDA: only token ids and scores cross the bus,
  // not logits).
  virtual bool samples_on_device() const { return false; }
  // forward, and the token rows in `sample_rows` (disjoint from logit_rows) are sampled on the device with
  // `sampling` [sample_rows], and the rows of `scored_rows` scored there (prompt logprobs). A backend without device
  // sampling accepts only empty sample_rows and scored_rows.
  virtual SampledForward forward_sampled(const model::ForwardBatch& batch, const std::vector<int64_t>& logit_rows,
                                         const std::vector<int64_t>& sample_rows,
                                         const std::vector<sampling::DeviceSamplingRow>& sampling,
                                         const std::vector<sampling::DeviceScoredRow>& scored_rows);
  // One line for the startup log: device, memory, KV capacity.
  virtual std::string describe() const = 0;
  // The CPU backend's worker pool (also used for sampling); null for the CUDA backend.
  virtual ThreadPool* host_pool() { return nullptr; }
  // Records per-layer / per-op spans of later forwards into `trace` (null: off). Host times on the CPU; the CUDA
  // backend records GPU times from events.
  virtual void set_trace(TraceRecorder* trace) = 0;
};

// Loads the model onto the configured device. Throws fathom::Error naming the problem (checkpoint, memory,
// a CUDA request in a build without CUDA).
std::unique_ptr<ModelBackend> make_model_backend(const BackendConfig& config);

}  // namespace fathom::executor
