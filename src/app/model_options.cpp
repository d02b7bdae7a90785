#include "app/model_options.h"

#include <cstdio>
#include <filesystem>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace fathom::app {

namespace {

namespace fs = std::filesystem;

// The embedded default model: models/fathom-nano of the repository the binary was built from. Looked up next
// to the binary first (build/fathom, build-x/fathom, ...: a parent folder holding models/fathom-nano), then at
// the source tree path compiled in by CMake.
std::vector<fs::path> default_model_candidates() {
  std::vector<fs::path> candidates;
  std::error_code error;
  const fs::path executable = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    fs::path dir = executable.parent_path();
    for (int depth = 0; depth < 4 && !dir.empty(); ++depth) {
      candidates.push_back(dir / "models" / kDefaultModelName);
      if (dir == dir.root_path()) break;
      dir = dir.parent_path();
    }
  }
#ifdef FATHOM_DEFAULT_MODEL_DIR
  candidates.emplace_back(FATHOM_DEFAULT_MODEL_DIR);
#endif
  return candidates;
}

}  // namespace

std::string default_model_dir() {
  const std::vector<fs::path> candidates = default_model_candidates();
  for (const fs::path& candidate : candidates) {
    std::error_code error;
    if (fs::is_regular_file(candidate / "config.json", error)) return fs::weakly_canonical(candidate, error).string();
  }
  std::ostringstream searched;
  for (size_t i = 0; i < candidates.size(); ++i) searched << (i ? ", " : "") << candidates[i].string();
  FATHOM_FAIL("no --model given and the default model models/" << kDefaultModelName << " was not found (looked in "
                                                                 << searched.str() << "); pass --model DIR");
}

const std::set<std::string>& model_value_flags() {
  static const std::set<std::string> kFlags = {"--model", "--load-format", "--override-config", "--mode", "--threads",
                                               "--seed", "--device", "--mem-fraction-static"};
  return kFlags;
}

std::string tokenizer_dir_option(const CliArgs& args) {
  if (auto tokenizer = args.get("--tokenizer")) return *tokenizer;
  if (auto model = args.get("--model")) return *model;
  std::string dir = default_model_dir();
  std::fprintf(stderr, "fathom: no --tokenizer or --model given; using the default model's tokenizer %s\n",
               dir.c_str());
  return dir;
}

ModelCliOptions parse_model_options(const CliArgs& args) {
  ModelCliOptions options;
  if (auto model = args.get("--model")) {
    options.load.model_dir = *model;
  } else {
    options.load.model_dir = default_model_dir();
    std::fprintf(stderr, "fathom: no --model given; using the default model %s\n", options.load.model_dir.c_str());
  }
  options.load.format = model::parse_load_format(args.get_or("--load-format", "auto"));
  options.load.override_config = args.get_or("--override-config", "");
  options.load.dummy_seed = static_cast<uint64_t>(args.get_int_or("--seed", 0));
  options.mode = kernels::parse_numeric_mode(args.get_or("--mode", "exact"));
  const int64_t threads = args.get_int_or("--threads", 0);
  FATHOM_CHECK(threads >= 0 && threads <= kMaxThreads,
               "--threads must be in [0, " << kMaxThreads << "] (0 = all cores), got " << threads);
  options.num_threads = static_cast<int>(threads);
  options.device = executor::parse_device(args.get_or("--device", "cpu"));
  options.mem_fraction_static = args.get_double_or("--mem-fraction-static", options.mem_fraction_static);
  FATHOM_CHECK(options.mem_fraction_static > 0 && options.mem_fraction_static < 1,
               "--mem-fraction-static must be in (0, 1), got " << options.mem_fraction_static);
  return options;
}

void check_context_length(int64_t prompt_tokens, int64_t max_new_tokens, int64_t max_position_embeddings,
                          const std::string& where) {
  const std::string prefix = where.empty() ? "" : where + ": ";
  FATHOM_CHECK(max_new_tokens >= 0, prefix << "the number of new tokens must be >= 0, got " << max_new_tokens);
  // Compared by subtraction: prompt_tokens + max_new_tokens can overflow int64.
  FATHOM_CHECK(prompt_tokens <= max_position_embeddings && max_new_tokens <= max_position_embeddings - prompt_tokens,
               prefix << "context length exceeded: " << prompt_tokens << " prompt tokens + " << max_new_tokens
                      << " requested new tokens > the model's max_position_embeddings " << max_position_embeddings);
}

int64_t default_kv_page_size(executor::Device device, int64_t num_attention_heads) {
  return device == executor::Device::kCuda && num_attention_heads > 32 ? 64 : 1;
}

}  // namespace fathom::app
