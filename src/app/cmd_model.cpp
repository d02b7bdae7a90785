// `fathom logits` and `fathom generate`: the stable command-line contract for checking the model from outside.
#include <cstdio>
#include <string>

#include "app/commands.h"
#include "app/model_options.h"
#include "core/error.h"
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
  value_flags.insert({"--ids", "--max-new-tokens", "--chunked-prefill-size"});
  CliArgs args(raw_args, value_flags, {"--ignore-eos"});
  ModelCliOptions options = parse_model_options(args);
  options.load.load_mtp = false;
  const std::vector<int32_t> ids = parse_ids(args);

  model::LoadedModel loaded = model::load_model(options.load);
  model::DeepseekV3Model deepseek(loaded.config, loaded.weights);
  ThreadPool pool(options.num_threads);
  model::ExecutionContext context{&pool, options.mode};
  model::GreedyOptions greedy;
  greedy.max_new_tokens = args.get_int_or("--max-new-tokens", 16);
  greedy.ignore_eos = args.has("--ignore-eos");
  greedy.prefill.chunk_size = args.get_int_or("--chunked-prefill-size", 0);
  std::vector<int32_t> generated = model::greedy_generate(deepseek, ids, greedy, context);
  std::string line;
  for (size_t i = 0; i < generated.size(); ++i) line += (i ? "," : "") + std::to_string(generated[i]);
  std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace fathom::app
