#pragma once
// Special tokens added around one encoded sequence when add_special_tokens is set: tokenizer.json
// "post_processor" (TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence), or
// the tokenizer_config add_bos_token/add_eos_token flags that transformers applies instead.
#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

namespace fathom::tokenizer {

class PostProcessor {
 public:
  PostProcessor() = default;
  // `config` is the tokenizer.json "post_processor" value (null means none).
  static PostProcessor from_json(const nlohmann::json& config);
  static PostProcessor from_bos_eos(std::optional<int32_t> bos_id, std::optional<int32_t> eos_id);

  const std::vector<int32_t>& prefix() const { return prefix_; }
  const std::vector<int32_t>& suffix() const { return suffix_; }

 private:
  void wrap(const std::vector<int32_t>& prefix, const std::vector<int32_t>& suffix);
  void append(const nlohmann::json& config);

  std::vector<int32_t> prefix_;
  std::vector<int32_t> suffix_;
};

}  // namespace fathom::tokenizer
