// `fathom tokenize` / `fathom detokenize`: line-oriented JSON filters over stdin/stdout.
//   tokenize:   each input line is a JSON string   -> a JSON array of ids (BOS/EOS only with --add-special-tokens)
//   detokenize: each input line is a JSON id array -> a JSON string
// The tokenizer: --tokenizer DIR, else --model DIR, else the default model's. Each result is flushed at once so
// callers can talk to the process line by line. A bad line stops the command with "line N: ..." on stderr and exit
// code 1.
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/model_options.h"
#include "core/cli_args.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace fathom::app {

namespace {

tokenizer::Tokenizer load_tokenizer(const CliArgs& cli) {
  tokenizer::Tokenizer loaded = tokenizer::Tokenizer::load(tokenizer_dir_option(cli));
  if (cli.get("--model-vocab-size")) {
    loaded = loaded.with_model_vocab_size(static_cast<int32_t>(cli.get_int_or("--model-vocab-size", 0)));
  }
  if (cli.get("--max-input-bytes")) {
    const int64_t limit = cli.get_int_or("--max-input-bytes", 0);
    FATHOM_CHECK(limit > 0, "--max-input-bytes must be positive, got " << limit);
    loaded = loaded.with_max_input_bytes(static_cast<size_t>(limit));
  }
  return loaded;
}

nlohmann::json parse_line(const std::string& line, int64_t line_number) {
  try {
    return nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& error) {
    FATHOM_FAIL("line " << line_number << ": not valid JSON: " << error.what());
  }
}

void write_line(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  flush_stdout();
}

}  // namespace

int run_tokenize(const Args& args) {
  CliArgs cli(args, {"--tokenizer", "--model", "--model-vocab-size", "--max-input-bytes"}, {"--add-special-tokens"});
  const tokenizer::Tokenizer tokenizer = load_tokenizer(cli);
  const bool add_special_tokens = cli.has("--add-special-tokens");
  std::string line;
  for (int64_t line_number = 1; std::getline(std::cin, line); ++line_number) {
    const nlohmann::json input = parse_line(line, line_number);
    FATHOM_CHECK(input.is_string(), "line " << line_number << ": expected a JSON string, got " << input.type_name());
    std::vector<int32_t> ids;
    try {
      ids = tokenizer.encode(input.get_ref<const std::string&>(), add_special_tokens);
    } catch (const Error& error) {
      FATHOM_FAIL("line " << line_number << ": " << error.what());
    }
    write_line(nlohmann::json(ids).dump());
  }
  return 0;
}

int run_detokenize(const Args& args) {
  CliArgs cli(args, {"--tokenizer", "--model", "--model-vocab-size"}, {"--skip-special-tokens"});
  const tokenizer::Tokenizer tokenizer = load_tokenizer(cli);
  const bool skip_special_tokens = cli.has("--skip-special-tokens");
  std::string line;
  for (int64_t line_number = 1; std::getline(std::cin, line); ++line_number) {
    const nlohmann::json input = parse_line(line, line_number);
    FATHOM_CHECK(input.is_array(), "line " << line_number << ": expected a JSON array of token ids, got " << input.type_name());
    std::vector<int32_t> ids;
    ids.reserve(input.size());
    for (const auto& item : input) {
      FATHOM_CHECK(item.is_number_integer() && item.get<int64_t>() >= INT32_MIN && item.get<int64_t>() <= INT32_MAX,
                   "line " << line_number << ": token id " << item.dump() << " is not a 32-bit integer");
      ids.push_back(item.get<int32_t>());
    }
    std::string text;
    try {
      text = tokenizer.decode(ids, skip_special_tokens);
    } catch (const Error& error) {
      FATHOM_FAIL("line " << line_number << ": " << error.what());
    }
    write_line(nlohmann::json(text).dump());
  }
  return 0;
}

}  // namespace fathom::app
