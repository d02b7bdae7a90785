#include "tokenizer/post_processor.h"

#include <string>

#include "core/error.h"

namespace fathom::tokenizer {

void PostProcessor::wrap(const std::vector<int32_t>& prefix, const std::vector<int32_t>& suffix) {
  prefix_.insert(prefix_.begin(), prefix.begin(), prefix.end());
  suffix_.insert(suffix_.end(), suffix.begin(), suffix.end());
}

void PostProcessor::append(const nlohmann::json& config) {
  const std::string type = config.value("type", "");
  if (type == "Sequence") {
    for (const auto& child : config.at("processors")) append(child);
  } else if (type == "ByteLevel") {
    // Only adjusts offsets; ids are unchanged.
  } else if (type == "TemplateProcessing") {
    std::vector<int32_t> prefix, suffix;
    int sequence_count = 0;
    for (const auto& item : config.at("single")) {
      if (item.contains("Sequence")) {
        ++sequence_count;
        continue;
      }
      FATHOM_CHECK(item.contains("SpecialToken"), "TemplateProcessing item " << item.dump() << " is not understood");
      const std::string name = item.at("SpecialToken").at("id").get<std::string>();
      const auto& special_tokens = config.at("special_tokens");
      FATHOM_CHECK(special_tokens.contains(name), "TemplateProcessing special token '" << name << "' has no entry in special_tokens");
      std::vector<int32_t>& target = sequence_count == 0 ? prefix : suffix;
      for (const auto& id : special_tokens.at(name).at("ids")) target.push_back(id.get<int32_t>());
    }
    FATHOM_CHECK(sequence_count == 1, "TemplateProcessing single template must contain sequence A exactly once");
    wrap(prefix, suffix);
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    const auto& cls = config.at("cls");
    const auto& sep = config.at("sep");
    wrap({cls.at(1).get<int32_t>()}, {sep.at(1).get<int32_t>()});
  } else {
    FATHOM_FAIL("unsupported post_processor type '" << type
                                                   << "' (supported: TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence)");
  }
}

PostProcessor PostProcessor::from_json(const nlohmann::json& config) {
  PostProcessor processor;
  if (!config.is_null()) processor.append(config);
  return processor;
}

PostProcessor PostProcessor::from_bos_eos(std::optional<int32_t> bos_id, std::optional<int32_t> eos_id) {
  PostProcessor processor;
  if (bos_id) processor.prefix_.push_back(*bos_id);
  if (eos_id) processor.suffix_.push_back(*eos_id);
  return processor;
}

}  // namespace fathom::tokenizer
