#pragma once
// `--prompt TEXT` for the model commands: the text is tokenized with the model directory's tokenizer (or
// --tokenizer DIR), with BOS as the tokenizer config says (what /v1/completions does), and generated ids are
// decoded back to text.
#include <optional>
#include <string>
#include <vector>

#include "core/cli_args.h"
#include "tokenizer/tokenizer.h"

namespace fathom::app {

struct TextPrompt {
  tokenizer::Tokenizer tokenizer;
  std::string text;
  std::vector<int32_t> ids;

  std::string decode(const std::vector<int32_t>& generated) const { return tokenizer.decode(generated, true); }
};

// The flags this reads: --prompt, --tokenizer (add them to the command's value flags).
// nullopt without --prompt; throws when both --prompt and --ids are given.
std::optional<TextPrompt> read_text_prompt(const CliArgs& args, const std::string& model_dir);

}  // namespace fathom::app
