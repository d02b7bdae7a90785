// `fathom logits` and `fathom generate`: the stable command-line contract for checking the model from outside.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>

#include "app/commands.h"
#include "app/model_options.h"
#include "app/text_prompt.h"
#include "core/error.h"
#include "executor/model_backend.h"
#include "executor/sequence_prefill.h"
#include "model/config.h"
#include "model/generation.h"
#include "model/safetensors.h"

namespace fathom::app {

namespace {

std::vector<int32_t> parse_ids(const CliArgs& args) {
  std::vector<int32_t> ids;
  for (int64_t id : parse_int_list(args.require("--ids"), "--ids")) {
    FATHOM_CHECK(id >= 0 && id <= INT32_MAX, "--ids: token id " << id << " out of range");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

// A backend on the requested device sized for one sequence of `max_tokens` (prefill chunks of `chunk_size`).
std::unique_ptr<executor::ModelBackend> single_sequence_backend(const ModelCliOptions& options, int64_t max_tokens) {
  executor::BackendConfig config;
  config.load = options.load;
  config.device = options.device;
  config.mode = options.mode;
  config.num_threads = options.num_threads;
  config.num_kv_slots = max_tokens;
  config.max_batch_tokens = max_tokens;
  config.max_decode_batch = 1;
  config.max_context_tokens = max_tokens;
  return executor::make_model_backend(config);
}

// Refuses a sequence longer than the model's context before any weights load or compute runs.
void check_model_context(const ModelCliOptions& options, int64_t prompt_tokens, int64_t max_new_tokens) {
  const model::ModelConfig config = model::load_model_config(options.load.model_dir, options.load.override_config);
  check_context_length(prompt_tokens, max_new_tokens, config.max_position_embeddings);
}

Tensor float_tensor(const std::vector<float>& values, int64_t rows, int64_t cols) {
  Tensor tensor = Tensor::allocate(DType::F32, {rows, cols});
  std::copy(values.begin(), values.end(), tensor.data<float>());
  return tensor;
}

}  // namespace

int run_logits(const Args& raw_args) {
  std::set<std::string> value_flags = model_value_flags();
  value_flags.insert({"--ids", "--out", "--chunked-prefill-size"});
  CliArgs args(raw_args, value_flags, {"--mtp"});
  ModelCliOptions options = parse_model_options(args);
  const bool with_mtp = args.has("--mtp");
  options.load.load_mtp = with_mtp;
  const std::vector<int32_t> ids = parse_ids(args);
  const std::string out_path = args.require("--out");
  check_model_context(options, static_cast<int64_t>(ids.size()), 0);
  // A bad path fails before the compute; appending leaves an existing file intact should the run fail later.
  open_output_file(out_path, "--out", /*append=*/true);

  if (options.device == executor::Device::kCuda) {
    std::unique_ptr<executor::ModelBackend> backend = single_sequence_backend(options, static_cast<int64_t>(ids.size()));
    std::vector<int32_t> slots(ids.size());
    std::iota(slots.begin(), slots.end(), 0);
    executor::SequencePrefillOptions prefill;
    prefill.chunk_size = args.get_int_or("--chunked-prefill-size", 0);
    prefill.with_mtp = with_mtp;
    const executor::SequencePrefillResult result = executor::prefill_sequence(*backend, ids, slots, prefill);
    const int64_t count = static_cast<int64_t>(ids.size()), vocab = backend->config().vocab_size;
    std::vector<std::pair<std::string, Tensor>> tensors;
    tensors.emplace_back("logits", float_tensor(result.logits, count, vocab));
    if (with_mtp) tensors.emplace_back("mtp_logits", float_tensor(result.mtp_logits, count - 1, vocab));
    model::write_safetensors(out_path, tensors, {{"mode", "w8a8"}, {"device", "cuda"}, {"num_tokens", std::to_string(count)}});
    return 0;
  }
  model::LoadedModel loaded = model::load_model(options.load);
  model::DeepseekV3Model deepseek(loaded.config, loaded.weights);
  ThreadPool pool(options.num_threads);
  model::ExecutionContext context{&pool, options.mode};
  model::PrefillOptions prefill;
  prefill.chunk_size = args.get_int_or("--chunked-prefill-size", 0);
  model::SequenceLogits result = model::compute_sequence_logits(deepseek, ids, with_mtp, context, prefill);

  const int64_t count = static_cast<int64_t>(ids.size()), vocab = loaded.config.vocab_size;
  std::vector<std::pair<std::string, Tensor>> tensors;
  tensors.emplace_back("logits", float_tensor(result.logits, count, vocab));
  if (with_mtp) tensors.emplace_back("mtp_logits", float_tensor(result.mtp_logits, count - 1, vocab));
  model::write_safetensors(out_path, tensors,
                           {{"mode", args.get_or("--mode", "exact")}, {"num_tokens", std::to_string(count)}});
  return 0;
}

int run_generate(const Args& raw_args) {
  std::set<std::string> value_flags = model_value_flags();
  value_flags.insert({"--ids", "--prompt", "--tokenizer", "--max-new-tokens", "--chunked-prefill-size"});
  CliArgs args(raw_args, value_flags, {"--ignore-eos"});
  ModelCliOptions options = parse_model_options(args);
  options.load.load_mtp = false;
  const std::optional<TextPrompt> text_prompt = read_text_prompt(args, options.load.model_dir);
  const std::vector<int32_t> ids = text_prompt ? text_prompt->ids : parse_ids(args);

  const int64_t max_new_tokens = args.get_int_or("--max-new-tokens", text_prompt ? 64 : 16);
  check_model_context(options, static_cast<int64_t>(ids.size()), max_new_tokens);
  std::vector<int32_t> generated;
  if (options.device == executor::Device::kCuda) {
    const int64_t capacity = static_cast<int64_t>(ids.size()) + max_new_tokens;
    std::unique_ptr<executor::ModelBackend> backend = single_sequence_backend(options, capacity);
    const model::ModelConfig& config = backend->config();
    std::vector<int32_t> slots(static_cast<size_t>(capacity));
    std::iota(slots.begin(), slots.end(), 0);
    executor::SequencePrefillOptions prefill;
    prefill.chunk_size = args.get_int_or("--chunked-prefill-size", 0);
    prefill.all_rows = false;
    std::vector<float> logits = executor::prefill_sequence(*backend, ids, slots, prefill).logits;
    for (int64_t step = 0; step < max_new_tokens; ++step) {
      const int32_t next = model::argmax(logits.data(), config.vocab_size);
      generated.push_back(next);
      const bool eos = std::find(config.eos_token_ids.begin(), config.eos_token_ids.end(), next) != config.eos_token_ids.end();
      if ((eos && !args.has("--ignore-eos")) || step + 1 == max_new_tokens) break;
      model::ForwardBatch decode;
      decode.add_sequence({next}, static_cast<int64_t>(ids.size()) + step, slots.data());
      logits = backend->forward(decode, {0});
    }
  } else {
    model::LoadedModel loaded = model::load_model(options.load);
    model::DeepseekV3Model deepseek(loaded.config, loaded.weights);
    ThreadPool pool(options.num_threads);
    model::ExecutionContext context{&pool, options.mode};
    model::GreedyOptions greedy;
    greedy.max_new_tokens = max_new_tokens;
    greedy.ignore_eos = args.has("--ignore-eos");
    greedy.prefill.chunk_size = args.get_int_or("--chunked-prefill-size", 0);
    generated = model::greedy_generate(deepseek, ids, greedy, context);
  }
  if (text_prompt) {  // --prompt: the prompt and its continuation as text
    std::printf("%s%s\n", text_prompt->text.c_str(), text_prompt->decode(generated).c_str());
    flush_stdout();
    return 0;
  }
  std::string line;
  for (size_t i = 0; i < generated.size(); ++i) line += (i ? "," : "") + std::to_string(generated[i]);
  std::printf("%s\n", line.c_str());
  flush_stdout();
  return 0;
}

}  // namespace fathom::app
