#pragma once
// tokenizer.json "model" of type BPE: vocabulary, ranked merges, and the merge loop for one word.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/merge_table.h"

namespace fathom::tokenizer {

// Reusable buffers of one encode call.
struct BpeScratch {
  std::vector<int32_t> symbols;
  std::vector<uint32_t> ranks;
  std::vector<int32_t> merged;
  std::vector<int32_t> previous;
  std::vector<int32_t> next;
  std::vector<uint64_t> heap;
  std::string text;
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
};
using TokenIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Vocab and string-form merges taken out of the JSON while parsing (much faster than a DOM).
struct StreamedBpeTables {
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::vector<std::string> merges;
};

class BpeModel {
 public:
  BpeModel() = default;
  // Rejects non-BPE models and options that change results in ways not implemented (dropout,
  // continuing_subword_prefix, end_of_word_suffix). Empty "vocab"/"merges" in `model` are taken
  // from `streamed` instead.
  static BpeModel from_json(const nlohmann::json& model, const StreamedBpeTables& streamed = {});

  // Appends the ids of one pre-token. With `byte_level` every byte is one initial symbol (its
  // ByteLevel character); otherwise every UTF-8 character is.
  void encode_word(std::string_view word, bool byte_level, std::vector<int32_t>& ids, BpeScratch& scratch) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // nullptr when the vocabulary has no such id.
  const std::string* id_to_token(int32_t id) const;
  // One past the largest id in the vocabulary.
  int32_t id_limit() const { return static_cast<int32_t>(tokens_.size()); }

  // Merge loops exposed for tests that check the small-word and large-word paths agree.
  void merge_small(std::vector<int32_t>& symbols, BpeScratch& scratch) const;
  void merge_large(std::vector<int32_t>& symbols, BpeScratch& scratch) const;

 private:
  void add_vocab_entry(const std::string& token, int64_t id);
  void add_merge(const std::string& left, const std::string& right, size_t rank);
  void add_initial_symbols(std::string_view word, bool byte_level, BpeScratch& scratch) const;
  void add_unknown(std::string_view character, std::vector<int32_t>& symbols, std::optional<int32_t>& pending_unknown) const;

  TokenIdMap vocab_;
  std::vector<std::string> tokens_;     // by id
  std::vector<uint8_t> has_token_;      // by id: ids may have gaps
  MergeTable merges_;
  std::array<int32_t, 256> byte_symbols_{};  // id of each byte's ByteLevel character, or -1
  std::optional<int32_t> unknown_id_;
  bool fuse_unknown_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
};

}  // namespace fathom::tokenizer
