#pragma once
// Command-line flags of the local engine (SGLang spellings), for the subcommands that start one.
#include <set>
#include <string>

#include "core/cli_args.h"
#include "scheduler/local_engine.h"

namespace fathom::scheduler {

// --max-total-tokens N --page-size N --chunked-prefill-size N --max-running-requests N --schedule-policy fcfs|lpm
// --random-seed N --tokenizer DIR
const std::set<std::string>& engine_value_flags();
// --disable-radix-cache --disable-overlap
const std::set<std::string>& engine_bool_flags();

// Overrides the fields of `config` named by the flags present; throws fathom::Error naming a bad value.
void apply_engine_flags(const CliArgs& args, EngineConfig& config);

}  // namespace fathom::scheduler
