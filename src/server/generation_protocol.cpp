#include "server/generation_protocol.h"

#include <set>

namespace fathom::server {

UsageCounts count_usage(const std::vector<ChoiceResult>& choices) {
  UsageCounts usage;
  std::set<int64_t> counted_prompts;
  for (const ChoiceResult& choice : choices) {
    usage.completion_tokens += choice.completion_tokens;
    if (counted_prompts.insert(choice.prompt_index).second) {
      usage.prompt_tokens += choice.prompt_length;
      usage.cached_tokens += choice.cached_prompt_tokens;
    }
  }
  return usage;
}

nlohmann::ordered_json usage_json(const UsageCounts& usage) {
  nlohmann::ordered_json json;
  json["prompt_tokens"] = usage.prompt_tokens;
  json["completion_tokens"] = usage.completion_tokens;
  json["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  json["prompt_tokens_details"] = {{"cached_tokens", usage.cached_tokens}};
  return json;
}

nlohmann::ordered_json finish_reason_json(scheduler::FinishReason reason) {
  switch (reason) {
    case scheduler::FinishReason::kStop: return "stop";
    case scheduler::FinishReason::kLength: return "length";
    case scheduler::FinishReason::kAbort: return "abort";
    case scheduler::FinishReason::kError: return "error";
    case scheduler::FinishReason::kNone: break;
  }
  return nullptr;
}

}  // namespace fathom::server
