#include "app/text_prompt.h"

#include "core/error.h"

namespace fathom::app {

std::optional<TextPrompt> read_text_prompt(const CliArgs& args, const std::string& model_dir) {
  std::optional<std::string> text = args.get("--prompt");
  if (!text) return std::nullopt;
  FATHOM_CHECK(!args.has("--ids"), "give either --ids or --prompt, not both");
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(args.get_or("--tokenizer", model_dir));
  std::vector<int32_t> ids = tok.encode(*text, /*add_special_tokens=*/true);
  FATHOM_CHECK(!ids.empty(), "--prompt is empty");
  return TextPrompt{std::move(tok), *text, std::move(ids)};
}

}  // namespace fathom::app
