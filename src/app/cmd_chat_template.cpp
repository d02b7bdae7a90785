// `fathom chat-template`: renders a tokenizer's chat template for OpenAI-style messages read from stdin.
//   fathom chat-template [--tokenizer DIR | --model DIR] [--chat-template FILE] [--add-generation-prompt]
//                        [--tools FILE] [--join-text-parts] < messages.json
// Without --tokenizer or --model, the default model's tokenizer folder.
// stdin holds a messages array, or an object {"messages": [...], "tools": [...]}. The prompt is written to
// stdout as is, with no trailing newline added.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <fstream>
#include <sstream>

#include "app/commands.h"
#include "app/model_options.h"
#include "chat/chat_template.h"
#include "core/cli_args.h"
#include "core/error.h"

namespace fathom::app {

namespace {

nlohmann::ordered_json parse_json(const std::string& text, const std::string& what) {
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& error) {
    FATHOM_FAIL("cannot parse " << what << " as JSON: " << error.what());
  }
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  FATHOM_CHECK(in.good(), "cannot open " << path);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

}  // namespace

int run_chat_template(const Args& args) {
  CliArgs cli(args, {"--tokenizer", "--model", "--chat-template", "--tools"},
              {"--add-generation-prompt", "--join-text-parts"});
  FATHOM_CHECK(cli.positional().empty(), "chat-template takes no positional arguments, got '" << cli.positional()[0] << "'");
  const std::string tokenizer_dir = tokenizer_dir_option(cli);

  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  nlohmann::ordered_json request = parse_json(input, "stdin");
  chat::ChatTemplateInputs inputs;
  if (request.is_array()) {
    inputs.messages = request;
  } else {
    FATHOM_CHECK(request.is_object() && request.contains("messages") && request["messages"].is_array(),
                 "stdin must be a messages array or an object with a \"messages\" array");
    inputs.messages = request["messages"];
    if (request.contains("tools")) inputs.tools = request["tools"];
  }
  if (auto tools_file = cli.get("--tools")) {
    FATHOM_CHECK(inputs.tools.is_null(), "tools given both in stdin and with --tools");
    inputs.tools = parse_json(read_text_file(*tools_file), *tools_file);
  }
  FATHOM_CHECK(inputs.tools.is_null() || inputs.tools.is_array(), "tools must be a JSON array");
  if (cli.has("--join-text-parts")) inputs.messages = chat::join_text_content_parts(inputs.messages);
  inputs.add_generation_prompt = cli.has("--add-generation-prompt");

  // transformers passes the tokenizer's whole special_tokens_map to the template.
  chat::SpecialTokens special = chat::load_special_tokens(tokenizer_dir);
  inputs.bos_token = special.bos_token.value_or("");
  inputs.eos_token = special.eos_token.value_or("");
  if (special.pad_token) inputs.extra_context["pad_token"] = *special.pad_token;
  if (special.unk_token) inputs.extra_context["unk_token"] = *special.unk_token;

  chat::ChatTemplate chat_template = chat::load_chat_template(tokenizer_dir, cli.get("--chat-template"));
  std::string prompt = chat_template.render(inputs);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace fathom::app
