#include "app/model_options.h"

#include "core/error.h"

namespace fathom::app {

const std::set<std::string>& model_value_flags() {
  static const std::set<std::string> kFlags = {"--model", "--load-format", "--override-config", "--mode", "--threads",
                                               "--seed", "--device", "--mem-fraction-static"};
  return kFlags;
}

ModelCliOptions parse_model_options(const CliArgs& args) {
  ModelCliOptions options;
  options.load.model_dir = args.require("--model");
  options.load.format = model::parse_load_format(args.get_or("--load-format", "auto"));
  options.load.override_config = args.get_or("--override-config", "");
  options.load.dummy_seed = static_cast<uint64_t>(args.get_int_or("--seed", 0));
  options.mode = kernels::parse_numeric_mode(args.get_or("--mode", "exact"));
  options.num_threads = static_cast<int>(args.get_int_or("--threads", 0));
  FATHOM_CHECK(options.num_threads >= 0, "--threads must be >= 0");
  options.device = executor::parse_device(args.get_or("--device", "cpu"));
  options.mem_fraction_static = args.get_double_or("--mem-fraction-static", options.mem_fraction_static);
  return options;
}

}  // namespace fathom::app
