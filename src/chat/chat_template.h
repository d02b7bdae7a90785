#pragma once
// Chat templates: renders a Hugging Face tokenizer's `chat_template` (Jinja) for OpenAI-style messages exactly
// as transformers' apply_chat_template(..., tokenize=False) does, using our own Jinja-subset engine.
//
// What the template sees (mirrors transformers): `messages` and `tools` unchanged (content given as a list of
// parts stays a list; see join_text_content_parts), `documents` (none unless extra_context sets it),
// `add_generation_prompt`, `bos_token`, `eos_token`, plus every extra_context entry (which override the
// special tokens). JSON object key order is preserved, so `tools | tojson` matches Python byte for byte.
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/template_error.h"

namespace fathom::chat {

namespace jinja {
struct TemplateAst;
}

struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null when absent (the template sees none)
  bool add_generation_prompt = false;
  std::string bos_token, eos_token;
  nlohmann::ordered_json extra_context = nlohmann::ordered_json::object();
};

class ChatTemplate {
 public:
  // Parses once; throws fathom::Error naming line and column for syntax errors or unknown filters/tests.
  explicit ChatTemplate(std::string template_source);

  // Thread-safe: rendering keeps all state on the stack. Template errors throw fathom::Error naming the
  // template line/column; raise_exception(msg) throws TemplateRaisedError whose what() is msg.
  std::string render(const ChatTemplateInputs& inputs) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::shared_ptr<const jinja::TemplateAst> ast_;
};

// The template from `override_file` (raw Jinja text) when given; otherwise tokenizer_config.json's
// `chat_template` (a string, or a list of {name, template} where "default" is used), falling back to a
// `chat_template.jinja` file in the directory. Throws when none is found.
ChatTemplate load_chat_template(const std::string& tokenizer_dir, const std::optional<std::string>& override_file);

// Special-token strings from tokenizer_config.json (plain strings or AddedToken dicts with "content").
struct SpecialTokens {
  std::optional<std::string> bos_token, eos_token, pad_token, unk_token;
};
SpecialTokens load_special_tokens(const std::string& tokenizer_dir);

// Opt-in normalisation for servers: message contents given as lists of {"type":"text","text":...} parts are
// joined with "\n" into one string (as vLLM does); other part types throw. transformers does not do this.
nlohmann::ordered_json join_text_content_parts(const nlohmann::ordered_json& messages);

}  // namespace fathom::chat
