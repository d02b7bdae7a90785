#pragma once
// Internals of CudaDeepseekV3Model: device weights, KV cache, activation buffers, kernel helper objects, and the
// per-layer pieces of the forward (cuda_model.cpp: batch metadata and the layer loop; cuda_attention.cpp: MLA;
// cuda_feed_forward.cpp: dense MLP and MoE; cuda_decode_graphs.cpp: CUDA graphs). Everything runs on one stream but
// the shared expert, which overlaps the routed experts on a side stream.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/rope.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/fp8_gemm/fp8_gemm.h"
#include "kernels/cuda/mla/mla_decode_heuristics.h"
#include "kernels/cuda/mla/mla_types.h"
#include "kernels/cuda/moe/moe_permutation.h"
#include "kernels/cuda/moe/moe_routing.h"
#include "kernels/cuda/norm/bf16_gemm.h"
#include "kernels/cuda/norm/rms_norm.h"
#include "kernels/cuda/rope/rope.h"
#include "model/cuda/cuda_model.h"
#include "model/cuda/device_weights.h"
#include "model/cuda/growable_buffers.h"
#include "model/cuda/result_transfer.h"

namespace fathom::model::cuda {

using bf16 = __nv_bfloat16;

// e4m3 activations of one linear input with their per-token-per-128 scales (both layouts cuBLASLt / ours read).
struct QuantizedActivations {
  GrowableBuffer<uint8_t> values;        // [tokens, cols]
  GrowableBuffer<float> scales;          // [tokens, ceil(cols/128)]
  GrowableBuffer<float> scales_block_major;  // [ceil(cols/128), tokens]
};

// One prefill pass over windows of keys: rows [first_row, + num_keys) of the forward's kv_slots_flat.
struct PrefillPassView {
  int64_t first_row = 0, num_keys = 0;
  const int32_t* cu_kv_lens = nullptr;     // [num_sequences + 1] each sequence's keys in the pass, prefix sums
  const int32_t* key_positions = nullptr;  // [num_sequences] position of each sequence's first key; null: one pass
};

// What one forward's kernels need to know about the batch (host copies of the sizes; arrays on the device).
struct BatchLayout {
  const int32_t* token_ids = nullptr;      // [num_tokens]
  const int32_t* positions = nullptr;      // [num_tokens]
  const int32_t* slots = nullptr;          // [num_tokens] KV slot of each new token
  // [num_sequences, max_pages] KV slot of every position: prefill, and decode on pages of one token (else null)
  const int32_t* page_table = nullptr;
  const int32_t* seq_lens = nullptr;       // [num_sequences] kv length
  const int32_t* cu_q_lens = nullptr;      // [num_sequences + 1] (prefill)
  // Prefill: the passes over windows of keys (kc::plan_prefill_key_passes), one when every key fits one expansion.
  std::vector<PrefillPassView> prefill_passes;
  const int32_t* kv_slots_flat = nullptr;    // [total_kv] the keys' cache slots, in pass order (prefill)
  const int32_t* query_positions = nullptr;  // [num_sequences] position of each first query (prefill, several passes)
  // Decode: [num_sequences, decode_max_pages] cache page of every decode_page_size_ positions (the page table itself
  // when that is 1), the table mla_decode reads with decode_cache_view().
  const int32_t* decode_pages = nullptr;
  int64_t num_tokens = 0;
  bool decode = false;            // every sequence has exactly one new token: absorbed attention
  int32_t num_sequences = 0;
  int32_t max_pages = 0;          // page-table width = longest kv length of the batch (page size 1)
  int32_t decode_max_pages = 0;   // decode_pages width
  int32_t max_q_len = 0;
  int64_t total_kv = 0;           // prefill: keys of all sequences (cached prefix + new)
  kc::MlaDecodePlan decode_plan;  // decode only
  void* mla_workspace = nullptr;  // decode only
  size_t mla_workspace_bytes = 0;
};

class CudaModelImpl {
 public:
  CudaModelImpl(const ModelConfig& config, const ModelWeights& weights, const CudaModelOptions& options);
  ~CudaModelImpl();

  ForwardResult forward(const ForwardBatch& batch, const std::vector<int64_t>& logit_rows,
                        const std::vector<int64_t>& sample_rows, const std::vector<sampling::DeviceSamplingRow>& sampling,
                        const std::vector<sampling::DeviceScoredRow>& scored_rows);

  // The MTP module (cuda_mtp.cpp), as CudaDeepseekV3Model::forward_mtp, with forward's device sampling.
  ForwardResult forward_mtp(const ForwardBatch& batch, const std::vector<int64_t>& hidden_rows,
                            const std::vector<int64_t>& logit_rows, const std::vector<int64_t>& sample_rows,
                            const std::vector<sampling::DeviceSamplingRow>& sampling);
  bool has_mtp() const { return weights_.mtp.has_value(); }

  const ModelConfig& config() const { return config_; }
  const CudaModelStats& stats() const { return stats_; }
  void set_trace(TraceRecorder* trace) { trace_ = trace; }

 private:
  // Checks ids, slots and sizes on the host (clear errors instead of kernels reading out of range).
  void validate_batch(const ForwardBatch& batch, bool decode) const;
  BatchLayout upload_batch(const ForwardBatch& batch);
  // Copies host ints into a grown device buffer on the stream; returns the device pointer.
  const int32_t* upload_ints(GrowableBuffer<int32_t>& device, const std::vector<int32_t>& host);
  // Eager decode: the MLA split plan for the batch's longest context and its workspace (mla_workspace_).
  void plan_decode(BatchLayout& layout, int32_t max_context);
  // Bytes of MLA decode workspace every plan needs at most (max_decode_batch sequences, contexts up to
  // max_context_tokens_; the deterministic plans' fixed-size splits need the most): mla_workspace_'s size.
  size_t decode_workspace_bound() const;
  // Rows of logits_ a forward fills at most: its sampled and host rows (one per sequence, at most max_decode_batch
  // budgeted), or a scoring pass (cuda_results.cpp); logits_bytes() is their device memory with the gathered rows.
  int64_t max_logits_rows() const;
  size_t logits_bytes() const;
  // The layers of one forward over `layout` (token_ids -> final-normed rows in normed_): kernels only, no host
  // synchronization or allocation once the buffers have grown to the forward's size (graph-capturable).
  void run_layers(const BatchLayout& layout);
  // Decoder layer `layer` (a cache layer: layer_weights) over normed_, which holds its input norm (and the fp8 copy in
  // input_q_ when fused_input_fp8): residual_ gains the attention and feed-forward outputs; leaves
  // next_norm(residual_) in normed_, with an fp8 copy unless `last` (the lm_head reads bf16).
  void run_decoder_layer(int64_t layer, const BatchLayout& layout, const bf16* next_norm, bool last,
                         const std::string& span_name);
  // Cache layers: the main model's 0 .. L-1, then the MTP module's L (when loaded).
  int64_t num_cache_layers() const { return static_cast<int64_t>(weights_.layers.size()) + (weights_.mtp ? 1 : 0); }
  const DeviceLayer& layer_weights(int64_t layer) const {
    return layer < static_cast<int64_t>(weights_.layers.size()) ? weights_.layers[static_cast<size_t>(layer)] : weights_.mtp->layer;
  }
  // Logits of the listed rows of normed_ [n, H] (the sampled rows, the host ones, then the scored ones in passes of
  // kScoredRowsPerPass, which bound logits_) and their results (cuda_results.cpp).
  ForwardResult results_for_rows(int64_t n, const std::vector<int64_t>& logit_rows, const std::vector<int64_t>& sample_rows,
                                 const std::vector<sampling::DeviceSamplingRow>& sampling,
                                 const std::vector<sampling::DeviceScoredRow>& scored_rows);
  // Padded pure-decode forwards (cuda_decode_graphs.cpp): one shape per (padded batch size, context bucket), replayed
  // from a CUDA graph when captured, else run eagerly over the same static buffers (same kernels, same bits).
  struct DecodeShape {
    int32_t batch = 0;
    int32_t max_context = 0;
    cudaGraphExec_t exec = nullptr;  // null: graphs off (or --profile): run_layers on the static layout
    cudaGraphExec_t mtp_exec = nullptr;  // the MTP module's decode step over the same shape (when it is loaded)
  };
  void prepare_decode_shapes();
  // Runs `body` (kernels on stream_) once eagerly, then captures it into an instantiated graph (null when graphs
  // are off).
  template <typename Body>
  cudaGraphExec_t capture_graph(const Body& body);
  // Every FP8 linear outside the routed experts (sizes the small-M split-K workspace and counters).
  std::vector<const DeviceLinear*> dense_linears() const;
  void warm_up_buffers();
  void freeze_graph_buffers();
  const DecodeShape* find_decode_shape(int32_t batch, int32_t max_context) const;
  BatchLayout static_decode_layout(const DecodeShape& shape) const;
  ForwardResult forward_padded_decode(const ForwardBatch& batch, const std::vector<int64_t>& logit_rows,
                                      const std::vector<int64_t>& sample_rows, const std::vector<sampling::DeviceSamplingRow>& sampling,
                                      const std::vector<sampling::DeviceScoredRow>& scored_rows, const DecodeShape& shape);
  // A pure-decode batch into the static decode inputs (graph_*), padded to shape.batch; checks its rows. With
  // hidden_rows (an MTP step: [batch.num_tokens()] rows of normed_ per token) their padded rows go up too. Returns the
  // number of real sequences.
  int32_t upload_padded_decode(const ForwardBatch& batch, const std::vector<int64_t>& logit_rows,
                               const std::vector<int64_t>& sample_rows, const DecodeShape& shape,
                               const std::vector<int32_t>* hidden_rows = nullptr);
  // The MTP module's kernels over `layout` (cuda_mtp.cpp): hidden_rows [layout.num_tokens] index the rows of normed_
  // (the previous forward's final hidden states); leaves shared_head.norm's rows in normed_. Graph-capturable.
  struct MtpInputs {
    bf16* previous = nullptr;      // [n, H] the gathered hidden rows
    bf16* embedded = nullptr;      // [n, H] embeddings of tokens p+1
    bf16* concatenated = nullptr;  // [n, 2H] [enorm(embedded) ; hnorm(previous)]
  };
  void run_mtp_layers(const BatchLayout& layout, const int32_t* hidden_rows, const MtpInputs& inputs);
  MtpInputs graph_mtp_inputs() const;  // slices of graph_mtp_inputs_ (padded decode)
  // The padded MTP decode step (cuda_mtp.cpp): replayed from shape.mtp_exec, or eagerly over the same buffers.
  ForwardResult forward_padded_mtp_decode(const ForwardBatch& batch, const std::vector<int32_t>& hidden_rows,
                                          const std::vector<int64_t>& logit_rows, const std::vector<int64_t>& sample_rows,
                                          const std::vector<sampling::DeviceSamplingRow>& sampling, const DecodeShape& shape);
  // The rest of a padded decode step once its inputs are uploaded: replays `exec`, or runs `layers` (the same kernels)
  // eagerly when graphs are off or spans are traced, then the lm_head of the padded rows into graph_logits_; returns
  // the `actual` rows' results.
  ForwardResult finish_padded_decode(const DecodeShape& shape, cudaGraphExec_t exec, const std::function<void()>& layers,
                                     int32_t actual, const std::vector<int64_t>& logit_rows,
                                     const std::vector<int64_t>& sample_rows,
                                     const std::vector<sampling::DeviceSamplingRow>& sampling,
                                     const std::vector<sampling::DeviceScoredRow>& scored_rows);
  // A pure-decode batch's padded shape when decode shapes exist (null: run it unpadded).
  const DecodeShape* padded_decode_shape(const ForwardBatch& batch) const;
  // Throws (before any work is queued) on a sampled or scored row outside [0, num_rows), a scored token outside the
  // vocabulary, or more alternatives than the scoring kernel returns.
  void check_row_requests(int64_t num_rows, const std::vector<int64_t>& sample_rows,
                          const std::vector<sampling::DeviceSamplingRow>& sampling,
                          const std::vector<sampling::DeviceScoredRow>& scored_rows) const;
  static constexpr size_t kScoredRowsPerPass = 512;  // rows of logits_ a scoring pass fills (budgeted at startup)
  // Device logits [num_rows, V] -> host logits of `host_rows`, device-sampled tokens of `sample_rows` and scores of
  // `scored_rows` (all indices into the rows; `sampling` [sample_rows]). Synchronizes the stream.
  ForwardResult collect_results(const float* logits, int64_t num_rows, const std::vector<int64_t>& host_rows,
                                const std::vector<int64_t>& sample_rows, const std::vector<sampling::DeviceSamplingRow>& sampling,
                                const std::vector<sampling::DeviceScoredRow>& scored_rows);
  // GPU spans for --profile: events recorded on the stream, converted to trace events after the forward's sync.
  size_t begin_span(std::string name, int depth);
  void end_span(size_t span);
  void flush_spans(int64_t forward_start_us);
  // With --profile: records the forward's start event; returns its host time (0 without a trace).
  int64_t begin_forward_trace();
  // The layer's cache rows with page size 1 (slots index rows: the cache write, the prefill's gathers).
  kc::LatentCacheView cache_view(int64_t layer) const;
  // The same rows in pages of decode_page_size_ tokens (the decode attention's view).
  kc::LatentCacheView decode_cache_view(int64_t layer) const;
  // Decode: layout.decode_pages from per-sequence slot runs (the page table itself with pages of one token).
  void set_decode_pages(BatchLayout& layout, const std::vector<const int32_t*>& sequence_slots,
                        const std::vector<int32_t>& kv_lens, GrowableBuffer<int32_t>& device);
  // Prefill: cu_q_lens, the passes over windows of at most prefill_window_keys_ keys (their slots in pass order, cut
  // from sequence_slots: kv_lens positions each) and, with several passes, every sequence's first query position.
  void set_prefill_passes(BatchLayout& layout, const std::vector<const int32_t*>& sequence_slots,
                          const std::vector<int32_t>& q_lens, const std::vector<int32_t>& kv_lens);
  // [rows, width] decode table of sequence_slots (kv_lens positions each): every decode_page_size_ positions' cache
  // page (its first slot / page; with pages of one token every position's slot), padding_slot_'s page elsewhere.
  std::vector<int32_t> decode_table_rows(const std::vector<const int32_t*>& sequence_slots,
                                         const std::vector<int32_t>& kv_lens, size_t rows, int32_t width) const;
  // RoPE parameters with the cos/sin table of positions [0, max_context_tokens_) (built once at load).
  kc::RopeParams rope_params() const;

  // normed_ -> delta_ for layer `layer` (cuda_attention.cpp / cuda_feed_forward.cpp). A non-empty result: delta_ is
  // still in its last GEMM's split-K partials, which the next add+RMSNorm sums (no reduce launch).
  kc::SplitKPartials attention(int64_t layer, const BatchLayout& layout);
  kc::SplitKPartials feed_forward(int64_t layer, const BatchLayout& layout);
  // The router's two arithmetic forms, both with exact fp32 products: our fp32 kernel on fp32 rows (decode sizes,
  // moe_router_gemm.h), or one bf16 tensor-core GEMM over the rows split into three bf16 planes (moe_router_planes.h;
  // needs the bf16 gate). Deterministic inference: one form per layer form (the kernel in decode-form layers, in calls
  // of at most 64 rows; the other in prefill-form layers, in cuBLASLt calls of kFixedGemmRows plane rows).
  static constexpr int64_t kRouterKernelMaxTokens = 32, kRouterKernelCallTokens = 64;
  bool router_on_kernel(int64_t tokens) const {
    return options_.deterministic ? !layer_prefill_form_ : tokens <= kRouterKernelMaxTokens;
  }
  // Whether the post-attention norm of this MoE layer writes the router's input as bf16 planes (else fp32 rows).
  bool router_reads_planes(const DeviceMoe& moe, int64_t tokens) const {
    return moe.router_bf16.size() > 0 && !router_on_kernel(tokens);
  }
  // router_logits [tokens, E] fp32 of an MoE layer whose post-attention norm has run.
  void compute_router_logits(const DeviceMoe& moe, int64_t tokens, float* logits);
  // x [tokens, cols] bf16 -> e4m3 + scales in `into` (token-major always; block-major too when cuBLASLt will run).
  struct Quantized {
    kc::DeviceFp8Activations activations;
    const float* scales_block_major = nullptr;  // null when the small-M path runs
    int64_t cublas_tokens = 0;                  // rows [0, cublas_tokens) run through cuBLASLt, the rest small-M
  };
  // cuBLASLt's block-scaled FP8 rejects some row counts (e.g. 8191; measured) and its tiles are 128 rows: it gets the
  // largest multiple of 128, the small-M kernel the rest (64 rows per launch).
  // Deterministic inference: none (every row through our kernels, whose arithmetic does not depend on the row count).
  int64_t cublas_rows(int64_t tokens) const {
    return options_.deterministic || tokens <= kc::Fp8Gemm::kSmallMMaxTokens ? 0 : tokens / 128 * 128;
  }
  // MLA decode plan for `batch` sequences of at most `max_context` tokens (batch-invariant when deterministic).
  kc::MlaDecodePlan decode_plan(int32_t batch, int32_t max_context) const;
  // out[rows, gemm.n()] fp32 = a[rows, k] . w[n, k]^T through cuBLASLt; deterministic inference runs it in calls of
  // exactly kFixedGemmRows rows (a partial chunk padded through fixed_rows_in_/out_), so cuBLASLt's algorithm choice
  // never depends on the batch.
  template <typename T, typename Out>
  void cublas_rows_gemm(kc::Bf16Gemm& gemm, const T* a, int64_t rows, const T* w, Out* out);
  static constexpr int64_t kFixedGemmRows = 64;
  Quantized quantize(const bf16* x, int64_t tokens, int64_t cols, QuantizedActivations& into);
  // The norms that write normed_ also write its e4m3 copy into input_q_ (one launch instead of two) when no row of
  // the next GEMMs goes to cuBLASLt (which needs block-major scales too): fused_input_fp8 returns the norm's fp8
  // output (null when not fused) and quantized_input the layer input normed_ as the projections read it.
  const kc::Fp8RowsOut* fused_input_fp8(int64_t tokens, int64_t cols, kc::Fp8RowsOut& storage);
  Quantized quantized_input(int64_t tokens, int64_t cols);
  // out[tokens, w.rows] = x · wᵀ with FP8 block scales (small-M kernel or cuBLASLt by token count; under
  // deterministic inference the kernels dense_gemm_on_wgmma and cublas_rows say).
  void gemm(const Quantized& x, const kc::DeviceFp8Weight& w, bf16* out);
  // Deterministic inference in a prefill-form layer: weights whose rows are a multiple of 8 run
  // fp8_dense_wgmma_gemm at every token count (prefill chunks, prefix-cache hits); decode-form layers and other shapes
  // keep the mma.sync family (small-M / tiled). Either way a row's bits do not depend on the batch within its form
  // (the two forms already differ in their attention arithmetic).
  bool dense_gemm_on_wgmma(const kc::DeviceFp8Weight& w) const;
  // Same, except that a decode-sized batch on a split-K weight leaves its fp32 partials for the consumer (returned,
  // out unwritten; valid until the next GEMM of this stream): empty when out was written.
  kc::SplitKPartials gemm_deferred(const Quantized& x, const kc::DeviceFp8Weight& w, bf16* out);
  // The small-M path's split-K scratch for weight w (grown on the model stream), with the fused reduction's
  // arrival counters or without them (deferred partials).
  kc::Fp8GemmWorkspace small_m_workspace(const kc::DeviceFp8Weight& w, bool with_counters);
  // quantize + gemm, with `scratch` holding the quantized x.
  void linear(const bf16* x, int64_t tokens, const DeviceLinear& w, bf16* out, QuantizedActivations& scratch);
  // A SwiGLU MLP (dense layer or shared expert) over already-quantized input rows; the result as gemm_deferred's.
  kc::SplitKPartials mlp(const DeviceMlp& mlp, const Quantized& x, bf16* out);
  void moe(const DeviceMoe& moe, const Quantized& x, bf16* out);

  struct GpuSpan {
    std::string name;
    int depth = 0;
    cudaEvent_t begin = nullptr, end = nullptr;
  };

  // Enqueues the model's kernels on `stream` instead of stream_ while in scope (the helpers all launch on stream_).
  class OnStream {
   public:
    OnStream(CudaModelImpl& model, cudaStream_t stream) : model_(model), saved_(model.stream_) { model.stream_ = stream; }
    ~OnStream() { model_.stream_ = saved_; }
    OnStream(const OnStream&) = delete;
    OnStream& operator=(const OnStream&) = delete;

   private:
    CudaModelImpl& model_;
    cudaStream_t saved_;
  };

  const ModelConfig& config_;
  CudaModelOptions options_;
  TraceRecorder* trace_ = nullptr;
  std::vector<GpuSpan> spans_;
  cudaEvent_t forward_begin_ = nullptr;
  CudaModelStats stats_;
  int num_sms_ = 0;
  kernels::cpu::RopeFrequencies rope_;
  int64_t max_context_tokens_ = 0;
  cudaStream_t stream_ = nullptr;
  // Work that overlaps the main stream inside one forward (the shared expert), forked and joined by events, so a
  // captured graph holds it as a parallel branch. Its kernels must not share scratch buffers with the main stream's.
  cudaStream_t side_stream_ = nullptr;
  cudaEvent_t shared_fork_ = nullptr, shared_join_ = nullptr;
  DeviceModelWeights weights_;
  kc::DeviceBuffer<float> rope_cos_sin_;  // [max_context_tokens_, rope_dim]: cos then sin of each position
  std::unique_ptr<kc::Fp8Gemm> fp8_gemm_;
  std::unique_ptr<kc::Bf16Gemm> lm_head_gemm_;   // [V, H] -> fp32 logits
  std::unique_ptr<kc::Bf16Gemm> router_gemm_;    // [E, H] fp32 -> fp32 router logits (MoE layers with an fp32 gate)
  std::unique_ptr<kc::Bf16Gemm> router_planes_gemm_;  // [E, H] bf16 -> fp32 plane logits (MoE layers with a bf16 gate)
  kc::MoeRoutingConfig routing_;
  std::unique_ptr<kc::Bf16Gemm> eh_proj_gemm_;   // [H, 2H] -> bf16 (the MTP module's input projection)

  // KV cache: [layers, cache_rows_, kv_lora + rope] bf16 (the caller's num_kv_slots_ slots, then the padding page).
  kc::DeviceBuffer<bf16> kv_cache_;
  int64_t num_kv_slots_ = 0;
  // Tokens per page of the decode attention's table: options_.kv_page_size when a multiple of 64, else 1.
  int32_t decode_page_size_ = 1;
  int64_t cache_rows_ = 0;  // rows per layer of kv_cache_: num_kv_slots_ + one padding page

  // Batch metadata on the device.
  GrowableBuffer<int32_t> token_ids_, positions_, slots_, page_table_, seq_lens_, cu_q_lens_, cu_kv_lens_,
      kv_slots_flat_, logit_rows_, decode_pages_, key_positions_, query_positions_;
  // Keys one prefill pass expands through kv_b_proj (and the windows' size): max(max_prefill_keys, 2 x
  // max_batch_tokens), what the memory plan keeps free. Fixed for the model's life: a query's bits depend on it.
  int64_t prefill_window_keys_ = 0;
  kc::DeviceBuffer<int32_t> embedding_error_;  // [1] set when a token id is out of range

  // Activations, [num_tokens, ...] bf16.
  GrowableBuffer<bf16> residual_, normed_, delta_, q_a_, q_, qkv_a_, attn_, q_latent_, out_latent_, gate_up_,
      mlp_out_, latent_rows_, kv_expanded_, selected_hidden_;
  GrowableBuffer<bf16> attn_window_;    // [n, heads, v] a later key window's attention, merged into attn_
  GrowableBuffer<float> attn_lse_;      // [2, n, heads] log-sum-exps of attn_'s rows and of attn_window_'s
  GrowableBuffer<float> logits_;
  // Rows of normed_ that hold the previous forward's final hidden states (the MTP's input); 0 until one succeeded.
  int64_t last_forward_rows_ = 0;
  bool layer_prefill_form_ = false;  // the decoder layer running now has expanded attention (run_decoder_layer)
  GrowableBuffer<bf16> mtp_previous_hidden_, mtp_embedded_, mtp_concat_;  // eager MtpInputs: [n, H], [n, H], [n, 2H]
  GrowableBuffer<int32_t> mtp_hidden_rows_;
  kc::DeviceBuffer<uint8_t> fixed_rows_in_;  // [kFixedGemmRows, max k] operand rows of a padded chunk
  kc::DeviceBuffer<float> fixed_rows_out_;   // [kFixedGemmRows, max n]
  ResultTransfer results_;  // host logits, device samples and scores of the forward's rows
  GrowableBuffer<float> normed_f32_;  // [n, H] unrounded post-attention norm of MoE layers (router input)
  GrowableBuffer<bf16> normed_planes_;  // [n, 3, H] the same as bf16 planes (the router's tensor-core form)
  GrowableBuffer<float> router_plane_logits_;  // [n, 3, E] the planes' partial logits
  QuantizedActivations input_q_;   // the normed layer input, shared by the projections that read it
  QuantizedActivations scratch_q_;  // any other linear input of at most max_batch_tokens rows
  QuantizedActivations expand_q_;   // the kv_b expansion's input (rows = keys of a prefill, unbounded)

  // Padded decode shapes and their static inputs / outputs (allocated once; never reallocated while graphs exist).
  std::vector<DecodeShape> decode_shapes_;
  int32_t graph_max_batch_ = 0;
  int32_t graph_page_stride_ = 0;  // page-table width of graph replays = the largest context bucket
  int32_t padding_slot_ = 0;       // KV slot written by padded batch entries (the padding page past num_kv_slots_)
  // The per-entry inputs of a replay, one array of graph_max_batch_ per GraphInput, uploaded in one copy per step.
  enum GraphInput { kGraphTokenIds, kGraphPositions, kGraphSlots, kGraphSeqLens, kGraphHiddenRows, kGraphInputCount };
  kc::DeviceBuffer<int32_t> graph_inputs_;  // [kGraphInputCount, graph_max_batch]
  int32_t* graph_input(GraphInput input) const { return graph_inputs_.data() + static_cast<size_t>(input) * graph_max_batch_; }
  kc::DeviceBuffer<int32_t> graph_page_table_;  // [graph_max_batch, graph_page_stride_] (pages of one token only)
  int32_t graph_decode_page_stride_ = 0;   // graph_decode_pages_ width (pages of decode_page_size_ > 1 only)
  kc::DeviceBuffer<int32_t> graph_decode_pages_;  // [graph_max_batch, graph_decode_page_stride_]
  PinnedHostBuffer<int32_t> graph_table_host_;   // staging of the replay's decode table (graph_page_table_ or _pages_)
  PinnedHostBuffer<int32_t> graph_inputs_host_;  // staging of graph_inputs_
  cudaEvent_t graph_inputs_copied_ = nullptr;    // recorded after both stagings' copies: the host refills them after it
  kc::DeviceBuffer<bf16> graph_mtp_inputs_;      // [graph_max_batch, 4H] MtpInputs of padded MTP decode steps
  kc::DeviceBuffer<float> graph_logits_;     // [graph_max_batch, V]
  GrowableBuffer<float> split_partials_;
  kc::DeviceBuffer<uint32_t> split_counters_;  // fused split-K arrival counters, zero at rest (every GEMM leaves them so)
  // The MLA decode's split partials of every plan, captured or eager (one stream: never two at once), allocated once
  // at decode_workspace_bound() and counted in the memory plan (V3 at batch 256 x 163840 tokens: 0.42 GB;
  // deterministic, 2.2 GB; deterministic under TP8, 0.27 GB).
  kc::DeviceBuffer<uint8_t> mla_workspace_;

  // MoE scratch.
  GrowableBuffer<float> router_logits_, expert_weights_;
  GrowableBuffer<int32_t> expert_ids_, expert_offsets_, expert_counts_, row_token_slot_, row_expert_, token_slot_row_,
      active_experts_;
  GrowableBuffer<uint8_t> permutation_workspace_, permuted_values_, expert_act_values_;
  GrowableBuffer<float> permuted_scales_, expert_act_scales_;
  GrowableBuffer<bf16> expert_gate_up_, expert_out_, shared_out_;
};

}  // namespace fathom::model::cuda
