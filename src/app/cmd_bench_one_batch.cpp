// `fathom bench-one-batch`: one static batch through prefill and decode, reported in the layout of SGLang's
// bench_one_batch (a warmup pass, then the measured pass), optionally with a Chrome trace of the forward.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <numeric>
#include <optional>
#include <random>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/model_options.h"
#include "core/error.h"
#include "executor/model_backend.h"
#include "model/generation.h"
#include "scheduler/local_engine.h"

namespace fathom::app {

namespace {

// Largest --batch-size (16x serve's default CUDA-graph cap of 256): a typo like 99999999 fails clearly, not in malloc.
constexpr int64_t kMaxBatchSize = 4096;

struct RunResult {
  double prefill_s = 0;
  std::vector<double> decode_s;
  double mtp_prefill_s = 0;        // --mtp: the MTP module over the prompts (tokens shifted by one)
  std::vector<double> mtp_step_s;  // --mtp: the MTP module behind each decode step (logits to the host)
  double total_s = 0;
  // FNV-1a over every sequence's greedy tokens (the prefill's pick, then each decode step's), sequence by sequence:
  // equal across runs that pick the same tokens (e.g. with and without --chunked-prefill-size).
  uint64_t output_hash = 0;
};

uint64_t fnv1a(const std::vector<std::vector<int32_t>>& sequences) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const std::vector<int32_t>& tokens : sequences)
    for (int32_t token : tokens)
      for (int byte = 0; byte < 4; ++byte) {
        hash ^= (static_cast<uint32_t>(token) >> (8 * byte)) & 0xffu;
        hash *= 0x100000001b3ull;
      }
  return hash;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The MTP module's greedy drafts of `rows` (hidden row i of the previous forward feeds batch row i), sampled where
// forward_greedy samples.
std::vector<int32_t> mtp_greedy(executor::ModelBackend& backend, const model::ForwardBatch& batch,
                                const std::vector<int64_t>& hidden_rows, const std::vector<int64_t>& rows,
                                bool device_sampling) {
  std::vector<int32_t> tokens(rows.size());
  if (device_sampling) {
    const std::vector<sampling::DeviceSamplingRow> greedy(rows.size());  // temperature 0
    const executor::SampledForward out = backend.forward_mtp_sampled(batch, hidden_rows, {}, rows, greedy);
    for (size_t i = 0; i < rows.size(); ++i) tokens[i] = out.samples.at(i).token_id;
    return tokens;
  }
  const int64_t vocab = backend.config().vocab_size;
  const std::vector<float> logits = backend.forward_mtp(batch, hidden_rows, rows);  // [rows, V]
  for (size_t i = 0; i < rows.size(); ++i) tokens[i] = model::argmax(logits.data() + i * vocab, vocab);
  return tokens;
}

// The greedy next token of each of `rows`: argmax on the device when `device_sampling` (only token ids cross the
// bus, as in the server's decode steps), else fp32 logits [rows, V] to the host and argmax there.
std::vector<int32_t> forward_greedy(executor::ModelBackend& backend, const model::ForwardBatch& batch,
                                    const std::vector<int64_t>& rows, bool device_sampling) {
  std::vector<int32_t> tokens(rows.size());
  if (device_sampling) {
    const std::vector<sampling::DeviceSamplingRow> greedy(rows.size());  // temperature 0
    const executor::SampledForward out = backend.forward_sampled(batch, {}, rows, greedy, {});
    FATHOM_CHECK(out.samples.size() == rows.size(), "bench-one-batch: " << out.samples.size() << " samples for "
                                                                         << rows.size() << " rows");
    for (size_t i = 0; i < rows.size(); ++i) tokens[i] = out.samples[i].token_id;
    return tokens;
  }
  const int64_t vocab = backend.config().vocab_size;
  const std::vector<float> logits = backend.forward(batch, rows);  // [rows, V]
  for (size_t i = 0; i < rows.size(); ++i) tokens[i] = model::argmax(logits.data() + i * vocab, vocab);
  return tokens;
}

// Prefills `prompts` (sequence b into slots[b]) in forwards of at most chunk_tokens tokens, all in one when
// chunk_tokens <= 0; a prompt cut between forwards continues from its cached prefix, as the server's chunked prefill
// runs it. With MTP, the module follows each forward over the same positions, each carrying the next token (the
// prompt's, or the main model's pick at a prompt's end), as a draft model's extend step would; its greedy drafts are
// taken and not used. Returns the main model's greedy pick after each prompt and the seconds of both parts.
std::vector<int32_t> prefill_prompts(executor::ModelBackend& backend, const std::vector<std::vector<int32_t>>& prompts,
                                     const std::vector<std::vector<int32_t>>& slots, int64_t chunk_tokens,
                                     bool device_sampling, bool with_mtp, RunResult& result) {
  std::vector<int32_t> next(prompts.size());
  size_t sequence = 0;
  int64_t done = 0;  // tokens of prompts[sequence] prefilled by earlier forwards
  while (sequence < prompts.size()) {
    model::ForwardBatch chunk;
    chunk.attention_form = model::AttentionForm::kExpanded;
    std::vector<int64_t> rows;            // the last row of every prompt this forward completes
    std::vector<size_t> ended;            // those prompts
    std::vector<std::pair<size_t, int64_t>> parts;  // (sequence, first position) of each part of this forward
    for (int64_t budget = chunk_tokens > 0 ? chunk_tokens : std::numeric_limits<int64_t>::max();
         budget > 0 && sequence < prompts.size();) {
      const std::vector<int32_t>& prompt = prompts[sequence];
      const int64_t take = std::min<int64_t>(budget, static_cast<int64_t>(prompt.size()) - done);
      chunk.add_sequence(std::vector<int32_t>(prompt.begin() + done, prompt.begin() + done + take), done,
                         slots[sequence].data());
      parts.emplace_back(sequence, done);
      budget -= take;
      done += take;
      if (done == static_cast<int64_t>(prompt.size())) {
        rows.push_back(chunk.num_tokens() - 1);
        ended.push_back(sequence);
        ++sequence;
        done = 0;
      }
    }
    // A forward that completes no prompt still samples its last row (as the measured step would), discarded.
    const std::vector<int64_t> sampled_rows = rows.empty() ? std::vector<int64_t>{chunk.num_tokens() - 1} : rows;
    auto start = std::chrono::steady_clock::now();
    const std::vector<int32_t> picks = forward_greedy(backend, chunk, sampled_rows, device_sampling);
    result.prefill_s += seconds_since(start);
    for (size_t i = 0; i < ended.size(); ++i) next[ended[i]] = picks[i];
    if (!with_mtp) continue;
    model::ForwardBatch mtp_chunk;  // the same positions, each carrying the token after it
    mtp_chunk.attention_form = model::AttentionForm::kExpanded;
    for (size_t p = 0; p < parts.size(); ++p) {
      const auto [b, first] = parts[p];
      const std::vector<int32_t>& prompt = prompts[b];
      const int64_t count = chunk.sequences[p].num_tokens;
      std::vector<int32_t> shifted(prompt.begin() + first + 1,
                                   prompt.begin() + std::min<int64_t>(first + count + 1, prompt.size()));
      if (first + count == static_cast<int64_t>(prompt.size())) shifted.push_back(next[b]);
      mtp_chunk.add_sequence(shifted, first, slots[b].data());
    }
    std::vector<int64_t> hidden_rows(static_cast<size_t>(chunk.num_tokens()));
    std::iota(hidden_rows.begin(), hidden_rows.end(), 0);
    start = std::chrono::steady_clock::now();
    mtp_greedy(backend, mtp_chunk, hidden_rows, sampled_rows, device_sampling);
    result.mtp_prefill_s += seconds_since(start);
  }
  return next;
}

// Prefills `batch_size` random prompts (in forwards of at most chunk_tokens tokens; all in one when <= 0), then
// decodes greedily one token per sequence per step. Sequence b owns KV slots [b * slot_stride, b * slot_stride +
// input_len + output_len) (slot_stride: input_len + output_len rounded up to whole KV pages).
// With MTP, the module follows the prefill (prefill_prompts) and every decode step (one row per sequence reading that
// step's hidden rows), as a draft step of speculative decoding would; its greedy drafts are taken like the main
// tokens (device_sampling) and not used. Sequence b's KV rows serve both the main model and the MTP cache.
RunResult run_once(executor::ModelBackend& backend, int64_t batch_size, int64_t input_len, int64_t output_len,
                   int64_t slot_stride, int64_t chunk_tokens, uint64_t seed, bool device_sampling, bool with_mtp,
                   bool print_steps) {
  const model::ModelConfig& config = backend.config();
  const int64_t per_sequence = input_len + output_len;
  std::vector<std::vector<int32_t>> slots(static_cast<size_t>(batch_size));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(config.vocab_size - 1));
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t b = 0; b < batch_size; ++b) {
    slots[b].resize(static_cast<size_t>(per_sequence));
    std::iota(slots[b].begin(), slots[b].end(), static_cast<int32_t>(b * slot_stride));
    std::vector<int32_t> prompt(static_cast<size_t>(input_len));
    for (int32_t& id : prompt) id = token(rng);
    prompts.push_back(std::move(prompt));
  }
  RunResult result;
  const auto total_start = std::chrono::steady_clock::now();
  std::vector<int32_t> next =
      prefill_prompts(backend, prompts, slots, chunk_tokens, device_sampling, with_mtp, result);  // [batch]
  if (print_steps) {
    std::printf("Prefill. latency: %.5f s, throughput: %10.2f token/s\n", result.prefill_s,
                static_cast<double>(batch_size * input_len) / result.prefill_s);
  }
  std::vector<std::vector<int32_t>> outputs(static_cast<size_t>(batch_size));
  for (int64_t b = 0; b < batch_size; ++b) outputs[b].push_back(next[b]);
  std::vector<int64_t> decode_rows(static_cast<size_t>(batch_size));
  std::iota(decode_rows.begin(), decode_rows.end(), 0);
  for (int64_t step = 0; step + 1 < output_len; ++step) {
    auto start = std::chrono::steady_clock::now();
    model::ForwardBatch decode;
    for (int64_t b = 0; b < batch_size; ++b) decode.add_sequence({next[b]}, input_len + step, slots[b].data());
    next = forward_greedy(backend, decode, decode_rows, device_sampling);
    const double latency = seconds_since(start);
    for (int64_t b = 0; b < batch_size; ++b) outputs[b].push_back(next[b]);
    result.decode_s.push_back(latency);
    if (print_steps && step < 5) {
      std::printf("Decode %lld. Batch size: %lld, latency: %.5f s, throughput: %10.2f token/s\n",
                  static_cast<long long>(step), static_cast<long long>(batch_size), latency,
                  static_cast<double>(batch_size) / latency);
    }
    if (!with_mtp) continue;
    model::ForwardBatch draft;  // position input_len + step carrying the token just picked
    for (int64_t b = 0; b < batch_size; ++b) draft.add_sequence({next[b]}, input_len + step, slots[b].data());
    start = std::chrono::steady_clock::now();
    mtp_greedy(backend, draft, decode_rows, decode_rows, device_sampling);
    result.mtp_step_s.push_back(seconds_since(start));
  }
  result.total_s = seconds_since(total_start);
  result.output_hash = fnv1a(outputs);
  return result;
}

std::string hex_hash(uint64_t hash) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

std::string profile_trace_path(const std::string& prefix, int64_t batch_size) {
  return prefix + "-bs" + std::to_string(batch_size) + ".trace.json";
}

}  // namespace

int run_bench_one_batch(const Args& raw_args) {
  std::set<std::string> value_flags = model_value_flags();
  value_flags.insert({"--batch-size", "--input-len", "--output-len", "--device", "--profile", "--result-filename", "--run-name",
                      "--page-size", "--chunked-prefill-size"});
  CliArgs args(raw_args, value_flags, {"--disable-cuda-graph", "--host-sampling", "--mtp", "--enable-deterministic-inference"});
  ModelCliOptions options = parse_model_options(args);
  const bool with_mtp = args.has("--mtp");
  options.load.load_mtp = with_mtp;
  const std::string device = executor::device_name(options.device);
  const std::vector<int64_t> batch_sizes = parse_int_list(args.get_or("--batch-size", "1"), "--batch-size");
  const int64_t input_len = args.get_int_or("--input-len", 1024);
  const int64_t output_len = args.get_int_or("--output-len", 16);
  FATHOM_CHECK(input_len > 0 && output_len > 0, "--input-len and --output-len must be positive");
  // Prefill tokens per forward (as serve's --chunked-prefill-size); <= 0, the default: every prompt in one forward,
  // as SGLang's bench_one_batch runs it. Long contexts at large batches need it: one forward's activations scale
  // with its tokens.
  const int64_t chunk_tokens = args.get_int_or("--chunked-prefill-size", 0);
  for (int64_t batch_size : batch_sizes) {
    FATHOM_CHECK(batch_size > 0 && batch_size <= kMaxBatchSize,
                 "--batch-size values must be in [1, " << kMaxBatchSize << "], got " << batch_size);
  }

  const model::ModelConfig config = model::load_model_config(options.load.model_dir, options.load.override_config);
  // KV pages as the server allocates them (the same default as serve's --page-size).
  const int64_t page_size =
      args.get_int_or("--page-size", default_kv_page_size(options.device, config.num_attention_heads));
  FATHOM_CHECK(page_size >= 1, "--page-size must be positive, got " << page_size);
  check_context_length(input_len, output_len, config.max_position_embeddings, "--input-len + --output-len");
  // Rounded up to whole pages without forming input_len + output_len + page_size - 1 (overflows for a huge page).
  const int64_t slot_stride = ((input_len + output_len - 1) / page_size + 1) * page_size;
  const int64_t max_batch = *std::max_element(batch_sizes.begin(), batch_sizes.end());
  FATHOM_CHECK(slot_stride <= std::numeric_limits<int32_t>::max() / max_batch,
               "--batch-size " << max_batch << " x " << slot_stride << " KV slots per sequence (--input-len + "
                               << "--output-len in pages of " << page_size << ") exceeds the 32-bit KV slot ids");
  std::optional<std::ofstream> result_file;  // opened now so a bad path fails before the benchmark
  if (auto path = args.get("--result-filename")) result_file = open_output_file(*path, "--result-filename", true);
  if (auto profile = args.get("--profile")) {
    // Append mode: a bad path fails now, and an existing trace stays as it was until this run writes its own.
    for (int64_t batch_size : batch_sizes) open_output_file(profile_trace_path(*profile, batch_size), "--profile", true);
  }
  executor::BackendConfig backend_config;
  backend_config.load = options.load;
  backend_config.device = options.device;
  backend_config.mode = options.mode;
  backend_config.num_threads = options.num_threads;
  backend_config.num_kv_slots = max_batch * slot_stride;
  backend_config.kv_page_size = page_size;
  // A forward's token limit: the prefill's chunks, and never below a decode step's batch (as serve sizes it).
  backend_config.max_batch_tokens =
      chunk_tokens > 0 ? std::max(std::min(chunk_tokens, max_batch * input_len), max_batch) : max_batch * input_len;
  // CUDA: the key budget serve gives its runner (expanded kv_b rows kept free; a longer prefix runs in key windows).
  if (options.device == executor::Device::kCuda) {
    backend_config.max_prefill_keys = scheduler::expanded_key_budget(config, backend_config.max_batch_tokens);
  }
  backend_config.max_decode_batch = max_batch;
  backend_config.max_context_tokens = input_len + output_len;
  // Decode runs at exactly the benchmarked batch sizes: replayed from CUDA graphs, or eagerly (--disable-cuda-graph).
  backend_config.capture_cuda_graphs = !args.has("--disable-cuda-graph");
  backend_config.deterministic = args.has("--enable-deterministic-inference");  // CUDA: batch-invariant kernels
  FATHOM_CHECK(!backend_config.deterministic || options.device == executor::Device::kCuda,
               "--enable-deterministic-inference: the CUDA backend's batch-invariant kernels (use --device cuda)");
  for (int64_t batch_size : batch_sizes) backend_config.cuda_graph_batch_sizes.push_back(static_cast<int32_t>(batch_size));
  std::unique_ptr<executor::ModelBackend> backend = executor::make_model_backend(backend_config);
  std::printf("%s\n", backend->describe().c_str());
  FATHOM_CHECK(!with_mtp || backend->has_mtp(),
               "--mtp: the model has no MTP module (model.layers." << config.num_hidden_layers << ".eh_proj.weight)");
  const uint64_t seed = static_cast<uint64_t>(args.get_int_or("--seed", 0));
  // A step's greedy pick as the server makes it: on the device where the backend samples there (CUDA), so a step
  // is the forward plus the sampling kernels and the token ids' copy. --host-sampling copies the fp32 logits of
  // every row and takes the argmax on the host instead (how this command measured before: +1 row of V floats).
  const bool device_sampling = backend->samples_on_device() && !args.has("--host-sampling");
  std::printf("Sampling: greedy %s\n", device_sampling ? "on the device (token ids to the host)"
                                                        : "on the host (fp32 logits to the host)");

  for (int64_t batch_size : batch_sizes) {
    std::printf("Warmup ...\n");
    run_once(*backend, batch_size, input_len, std::min<int64_t>(output_len, 4), slot_stride, chunk_tokens, seed,
             device_sampling, with_mtp, false);
    std::printf("Benchmark ...\n");
    TraceRecorder trace;
    if (args.get("--profile")) backend->set_trace(&trace);
    RunResult result =
        run_once(*backend, batch_size, input_len, output_len, slot_stride, chunk_tokens, seed, device_sampling,
                 with_mtp, true);
    backend->set_trace(nullptr);
    const double median_decode = median(result.decode_s);
    if (!result.decode_s.empty()) {
      std::printf("Decode.  median latency: %.5f s, median throughput: %10.2f token/s\n", median_decode,
                  static_cast<double>(batch_size) / median_decode);
    }
    const double median_mtp_step = median(result.mtp_step_s);
    if (with_mtp) {
      std::printf("MTP.  prefill latency: %.5f s, median step latency: %.5f s (greedy drafts)\n", result.mtp_prefill_s,
                  median_mtp_step);
    }
    const double total_tokens = static_cast<double>(batch_size * (input_len + output_len));
    std::printf("Total. latency: %7.3f s, throughput: %10.2f token/s\n", result.total_s, total_tokens / result.total_s);
    std::printf("Output. greedy token hash: %016llx\n", static_cast<unsigned long long>(result.output_hash));
    if (auto profile = args.get("--profile")) {
      const std::string path = profile_trace_path(*profile, batch_size);
      trace.write_chrome_json(path);
      std::printf("Profile written to %s (%zu spans)\n", path.c_str(), trace.events().size());
    }
    if (result_file) {
      nlohmann::json line = {{"run_name", args.get_or("--run-name", "default")}, {"batch_size", batch_size},
                             {"deterministic", backend_config.deterministic},
                             {"sampling", device_sampling ? "device" : "host"},
                             {"input_len", input_len}, {"output_len", output_len}, {"device", device},
                             {"chunked_prefill_size", chunk_tokens}, {"page_size", page_size},
                             {"prefill_latency", result.prefill_s},
                             {"prefill_throughput", static_cast<double>(batch_size * input_len) / result.prefill_s},
                             {"median_decode_latency", median_decode},
                             {"median_decode_throughput", median_decode > 0 ? batch_size / median_decode : 0.0},
                             {"overall_latency", result.total_s}, {"overall_throughput", total_tokens / result.total_s},
                             {"greedy_output_hash", hex_hash(result.output_hash)}};
      if (with_mtp) {
        line["mtp_prefill_latency"] = result.mtp_prefill_s;
        line["median_mtp_step_latency"] = median_mtp_step;
      }
      *result_file << line.dump() << "\n";
      finish_output_file(*result_file, *args.get("--result-filename"), "--result-filename");
    }
  }
  flush_stdout();
  return 0;
}

}  // namespace fathom::app
