#include "scheduler/engine_flags.h"

#include "core/error.h"

namespace fathom::scheduler {

const std::set<std::string>& engine_value_flags() {
  static const std::set<std::string> flags = {"--max-total-tokens", "--page-size", "--chunked-prefill-size",
                                              "--max-running-requests", "--schedule-policy", "--random-seed", "--tokenizer"};
  return flags;
}

const std::set<std::string>& engine_bool_flags() {
  static const std::set<std::string> flags = {"--disable-radix-cache", "--disable-overlap"};
  return flags;
}

void apply_engine_flags(const CliArgs& args, EngineConfig& config) {
  auto positive = [&](const std::string& flag, int64_t current) {
    const int64_t value = args.get_int_or(flag, current);
    FATHOM_CHECK(value >= 1, flag << " must be >= 1, got " << value);
    return value;
  };
  config.max_total_tokens = positive("--max-total-tokens", config.max_total_tokens);
  config.page_size = positive("--page-size", config.page_size);
  config.chunked_prefill_size = args.get_int_or("--chunked-prefill-size", config.chunked_prefill_size);
  config.max_running_requests = positive("--max-running-requests", config.max_running_requests);
  if (auto policy = args.get("--schedule-policy")) config.schedule_policy = parse_schedule_policy(*policy);
  if (args.has("--random-seed")) config.random_seed = static_cast<uint64_t>(args.get_int_or("--random-seed", 0));
  if (auto tokenizer = args.get("--tokenizer")) config.tokenizer_dir = *tokenizer;
  if (args.has("--disable-radix-cache")) config.disable_radix_cache = true;
  if (args.has("--disable-overlap")) config.disable_overlap = true;
}

}  // namespace fathom::scheduler
