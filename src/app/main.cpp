// fathom: one binary, subcommands over the library targets.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "app/commands.h"
#include "fathom_version.h"
#include "core/cli_args.h"
#include "core/error.h"

namespace {

struct Command {
  const char* name;
  int (*run)(const fathom::app::Args&);
  const char* summary;
};

constexpr Command kCommands[] = {
    {"logits", fathom::app::run_logits, "write float32 logits (and MTP logits) of a token sequence to safetensors"},
    {"generate", fathom::app::run_generate, "greedy generation from token ids"},
    {"bench-one-batch", fathom::app::run_bench_one_batch, "prefill + decode latency of one static batch (SGLang layout)"},
    {"eval", fathom::app::run_eval, "exact-match / log-likelihood accuracy on a JSON-lines prompts+answers file"},
    {"tokenize", fathom::app::run_tokenize, "JSON strings on stdin -> JSON arrays of token ids"},
    {"detokenize", fathom::app::run_detokenize, "JSON arrays of token ids on stdin -> JSON strings"},
    {"chat-template", fathom::app::run_chat_template, "render a chat template for OpenAI-style messages"},
    {"serve", fathom::app::run_serve, "OpenAI-compatible / SGLang-style HTTP server (--model DIR --port N)"},
    {"bench-serving", fathom::app::run_bench_serving, "online serving benchmark against a running server (SGLang bench_serving metrics)"},
};

void print_usage() {
  std::fprintf(stderr, "usage: fathom <command> [flags]   (fathom --version: the build's commit)\n\ncommands:\n");
  for (const Command& command : kCommands) std::fprintf(stderr, "  %-16s %s\n", command.name, command.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "version"))) {
#ifdef FATHOM_BUILT_WITH_CUDA
    const char* backends = "cpu, cuda (sm_90a)";
#else
    const char* backends = "cpu";
#endif
    std::printf("fathom %s (backends: %s)\n", FATHOM_GIT_DESCRIBE, backends);
    return 0;
  }
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      (!std::strcmp(argv[1], "help") && argc == 2)) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  // `fathom help CMD` is `fathom CMD --help`.
  const bool help_for_command = !std::strcmp(argv[1], "help");
  const char* command_name = help_for_command ? argv[2] : argv[1];
  fathom::app::Args args(argv + 2, argv + argc);
  if (help_for_command) args = {"--help"};
  for (const Command& command : kCommands) {
    if (std::strcmp(command_name, command.name) != 0) continue;
    try {
      return command.run(args);
    } catch (const fathom::HelpRequested& help) {
      std::printf("usage: fathom %s [flags]\n  %s\n%s\n(README.md describes the flags)\n", command.name, command.summary,
                  help.what());
      return 0;
    } catch (const fathom::Error& error) {
      std::fprintf(stderr, "fathom %s: error: %s\n", command.name, error.what());
      return 1;
    } catch (const std::exception& error) {
      std::fprintf(stderr, "fathom %s: unexpected error: %s\n", command.name, error.what());
      return 1;
    }
  }
  std::fprintf(stderr, "fathom: unknown command '%s'\n", command_name);
  print_usage();
  return 2;
}
