#include "chat/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "chat/jinja_ast.h"
#include "chat/jinja_evaluator.h"
#include "chat/jinja_json.h"
#include "chat/jinja_parser.h"
#include "core/error.h"

namespace fathom::chat {

namespace {

std::string read_file(const std::filesystem::path& path) {
  // A directory opens as an empty stream on Linux: without this check it would read as an empty file.
  FATHOM_CHECK(!std::filesystem::is_directory(path), path.string() << " is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  FATHOM_CHECK(in.good(), "cannot open " << path.string());
  std::ostringstream contents;
  contents << in.rdbuf();
  FATHOM_CHECK(!in.bad(), "cannot read " << path.string());
  return contents.str();
}

nlohmann::ordered_json read_tokenizer_config(const std::string& tokenizer_dir) {
  std::filesystem::path path = std::filesystem::path(tokenizer_dir) / "tokenizer_config.json";
  try {
    return nlohmann::ordered_json::parse(read_file(path));
  } catch (const nlohmann::json::exception& error) {
    FATHOM_FAIL("cannot parse " << path.string() << ": " << error.what());
  }
}

std::optional<std::string> token_content(const nlohmann::ordered_json& config, const char* key) {
  auto found = config.find(key);
  if (found == config.end() || found->is_null()) return std::nullopt;
  if (found->is_string()) return found->get<std::string>();
  if (found->is_object() && found->contains("content") && (*found)["content"].is_string())
    return (*found)["content"].get<std::string>();
  FATHOM_FAIL("tokenizer_config.json field " << key << " is neither a string nor an AddedToken with content");
}

}  // namespace

ChatTemplate::ChatTemplate(std::string template_source) : source_(std::move(template_source)) {
  auto ast = std::make_shared<jinja::TemplateAst>(jinja::parse_template(source_));
  jinja::check_filter_and_test_names(*ast);
  ast_ = std::move(ast);
}

std::string ChatTemplate::render(const ChatTemplateInputs& inputs) const {
  FATHOM_CHECK(inputs.extra_context.is_object(), "chat template extra_context must be a JSON object");
  for (const auto& [key, value] : inputs.extra_context.items())
    FATHOM_CHECK(key != "messages" && key != "tools" && key != "add_generation_prompt",
                 "chat template extra_context may not set '" << key << "'; use the dedicated field");
  try {
    // transformers: {**special_tokens_map, **kwargs}, then messages/tools/documents/add_generation_prompt.
    jinja::DictData context;
    context.set(jinja::Value::string("bos_token"), jinja::Value::string(inputs.bos_token));
    context.set(jinja::Value::string("eos_token"), jinja::Value::string(inputs.eos_token));
    context.set(jinja::Value::string("documents"), jinja::Value::none());
    for (const auto& [key, value] : inputs.extra_context.items())
      context.set(jinja::Value::string(key), jinja::value_from_json(value));
    context.set(jinja::Value::string("messages"), jinja::value_from_json(inputs.messages));
    context.set(jinja::Value::string("tools"), jinja::value_from_json(inputs.tools));
    context.set(jinja::Value::string("add_generation_prompt"), jinja::Value::boolean(inputs.add_generation_prompt));
    return jinja::render_template(*ast_, context);
  } catch (const jinja::RenderError& error) {
    FATHOM_FAIL("chat template error: " << error.what());
  }
}

ChatTemplate load_chat_template(const std::string& tokenizer_dir, const std::optional<std::string>& override_file) {
  if (override_file) {
    std::string source = read_file(*override_file);
    // An empty template renders every conversation as an empty prompt: refuse it when the server starts.
    FATHOM_CHECK(source.find_first_not_of(" \t\r\n") != std::string::npos,
                 "chat template " << *override_file << " is empty");
    return ChatTemplate(std::move(source));
  }
  nlohmann::ordered_json config = read_tokenizer_config(tokenizer_dir);
  auto found = config.find("chat_template");
  if (found != config.end() && found->is_string()) return ChatTemplate(found->get<std::string>());
  if (found != config.end() && found->is_array()) {
    for (const auto& entry : *found) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") && entry["template"].is_string())
        return ChatTemplate(entry["template"].get<std::string>());
    }
    FATHOM_FAIL("tokenizer_config.json in " << tokenizer_dir << " has several chat templates but none named 'default'");
  }
  FATHOM_CHECK(found == config.end() || found->is_null(),
               "tokenizer_config.json chat_template in " << tokenizer_dir << " is neither a string nor a list");
  std::filesystem::path jinja_file = std::filesystem::path(tokenizer_dir) / "chat_template.jinja";
  FATHOM_CHECK(std::filesystem::exists(jinja_file),
               "no chat template in " << tokenizer_dir << " (tokenizer_config.json has no chat_template and there is no chat_template.jinja); pass --chat-template FILE");
  return ChatTemplate(read_file(jinja_file));
}

SpecialTokens load_special_tokens(const std::string& tokenizer_dir) {
  nlohmann::ordered_json config = read_tokenizer_config(tokenizer_dir);
  SpecialTokens tokens;
  tokens.bos_token = token_content(config, "bos_token");
  tokens.eos_token = token_content(config, "eos_token");
  tokens.pad_token = token_content(config, "pad_token");
  tokens.unk_token = token_content(config, "unk_token");
  return tokens;
}

nlohmann::ordered_json join_text_content_parts(const nlohmann::ordered_json& messages) {
  FATHOM_CHECK(messages.is_array(), "messages must be a JSON array");
  nlohmann::ordered_json result = messages;
  for (size_t i = 0; i < result.size(); ++i) {
    auto& message = result[i];
    if (!message.is_object() || !message.contains("content") || !message["content"].is_array()) continue;
    std::string joined;
    bool first = true;
    // OpenAI's assistant history may hold refusal parts: the refusal text is what the assistant said.
    const bool assistant = message.value("role", "") == "assistant";
    for (const auto& part : message["content"]) {
      const std::string type = part.is_object() ? part.value("type", "") : "";
      const char* text_field = type == "text" ? "text" : (type == "refusal" && assistant ? "refusal" : nullptr);
      FATHOM_CHECK(text_field && part.contains(text_field) && part[text_field].is_string(),
                   "message " << i << ": only text content parts (and refusal parts of assistant messages) are supported, got "
                              << part.dump());
      if (!first) joined += "\n";
      joined += part[text_field].get<std::string>();
      first = false;
    }
    message["content"] = joined;
  }
  return result;
}

}  // namespace fathom::chat
