#pragma once
// Turns an API request body into engine requests plus the protocol that formats their output: parses and
// validates it, checks the model name, renders the chat template, tokenizes, checks token ids, and applies
// defaults (max tokens, per-choice seeds). Runs on a worker thread; throws ApiError for bad input.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/generation_job.h"
#include "server/openai_request.h"
#include "server/output_parsing.h"
#include "server/prompt_codec.h"

namespace fathom::server {

// Unique ids "<kind>-<random hex><counter hex>" for responses; engine requests append "-<choice index>".
class RequestIdGenerator {
 public:
  RequestIdGenerator();
  std::string next(std::string_view kind);

 private:
  std::string instance_prefix_;
  std::atomic<uint64_t> counter_{0};
};

struct PreparationContext {
  std::shared_ptr<const PromptCodec> codec;
  std::string served_model_name;
  RequestLimits limits;
  int64_t max_context_tokens = 0;
  RequestIdGenerator* ids = nullptr;
  OutputParsers parsers;                         // --tool-call-parser / --reasoning-parser
  std::vector<std::string> special_token_texts;  // codec->special_token_texts(), computed once
};

struct PreparedGeneration {
  std::string response_id;
  std::vector<JobChoice> choices;
  std::unique_ptr<GenerationProtocol> protocol;
  bool stream = false;
};

PreparedGeneration prepare_completion(std::string_view body, const PreparationContext& context);
PreparedGeneration prepare_chat(std::string_view body, const PreparationContext& context);
PreparedGeneration prepare_native_generate(std::string_view body, const PreparationContext& context);

// vLLM's /tokenize: {"prompt": text, "add_special_tokens": true} or a chat's {"messages": [...], ...} (rendered and
// tokenized as /v1/chat/completions would run it) -> {"count", "max_model_len", "tokens"[, "token_strs"]}.
nlohmann::ordered_json prepare_tokenize(std::string_view body, const PreparationContext& context);
// vLLM's /detokenize: {"tokens": [ids]} -> {"prompt": text}.
nlohmann::ordered_json prepare_detokenize(std::string_view body, const PreparationContext& context);

// 404 model_not_found unless `model` is empty or the served name.
void check_model_name(const std::string& model, const std::string& served_model_name);

}  // namespace fathom::server
