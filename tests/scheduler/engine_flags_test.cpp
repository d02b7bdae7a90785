// Engine command-line flags map onto EngineConfig.
#include <gtest/gtest.h>

#include "core/error.h"
#include "scheduler/engine_flags.h"

namespace fathom::scheduler {
namespace {

CliArgs parse(const std::vector<std::string>& args) { return CliArgs(args, engine_value_flags(), engine_bool_flags()); }

TEST(EngineFlags, OverrideOnlyWhatIsGiven) {
  EngineConfig config;
  apply_engine_flags(parse({"--max-total-tokens", "1024", "--page-size=16", "--schedule-policy", "lpm",
                            "--disable-radix-cache", "--random-seed", "9", "--tokenizer", "/tok"}),
                     config);
  EXPECT_EQ(config.max_total_tokens, 1024);
  EXPECT_EQ(config.page_size, 16);
  EXPECT_EQ(config.schedule_policy, SchedulePolicy::kLpm);
  EXPECT_TRUE(config.disable_radix_cache);
  EXPECT_FALSE(config.disable_overlap);
  EXPECT_EQ(config.random_seed, 9u);
  EXPECT_EQ(config.tokenizer_dir, "/tok");
  EXPECT_EQ(config.chunked_prefill_size, EngineConfig{}.chunked_prefill_size);
  EXPECT_THROW(apply_engine_flags(parse({"--page-size", "0"}), config), Error);
  EXPECT_THROW(apply_engine_flags(parse({"--schedule-policy", "lifo"}), config), Error);
}

}  // namespace
}  // namespace fathom::scheduler
