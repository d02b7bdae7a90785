#pragma once
// Flags shared by every subcommand that loads a model (--model, --load-format, --override-config, --mode, --threads,
// --device, --mem-fraction-static).
#include <set>
#include <string>

#include "core/cli_args.h"
#include "executor/model_backend.h"
#include "kernels/weight_matrix.h"
#include "model/weight_loader.h"

namespace fathom::app {

inline constexpr const char* kDefaultModelName = "fathom-nano";

// The default model's directory: models/fathom-nano in a parent folder of the running binary, else the source
// tree's (compiled in). Throws fathom::Error naming the places searched when neither exists.
std::string default_model_dir();

const std::set<std::string>& model_value_flags();

// Tokenizer folder of the commands that need only the tokenizer (tokenize, detokenize, chat-template): --tokenizer,
// else --model, else the default model's (said on stderr, as for the model commands).
std::string tokenizer_dir_option(const CliArgs& args);

// --threads above this is refused: each thread is an OS thread, and 100000 of them never finish starting.
inline constexpr int kMaxThreads = 1024;

struct ModelCliOptions {
  model::LoadOptions load;
  kernels::NumericMode mode = kernels::NumericMode::kExact;
  int num_threads = 0;  // 0 = all cores; at most kMaxThreads
  executor::Device device = executor::Device::kCpu;  // --device cpu|cuda
  double mem_fraction_static = 0.88;                 // --mem-fraction-static (CUDA)
};

ModelCliOptions parse_model_options(const CliArgs& args);

// Throws "[where: ]context length exceeded" unless 0 <= max_new_tokens <= max_position_embeddings - prompt_tokens.
void check_context_length(int64_t prompt_tokens, int64_t max_new_tokens, int64_t max_position_embeddings,
                          const std::string& where = "");

// KV page size (tokens) when --page-size is not given: 64 on the GPU for models with more than 32 query heads
// (64-head groups: the decode attention's seesaw kernel reads whole 64-token pages by TMA, 4-14% faster at long
// contexts; vLLM's FlashMLA backend also allocates 64-token blocks), else 1 (the prefix cache shares single tokens).
int64_t default_kv_page_size(executor::Device device, int64_t num_attention_heads);

}  // namespace fathom::app
