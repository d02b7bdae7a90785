#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace fathom::tokenizer {

namespace {
// Words up to this many symbols merge with a simple scan; longer ones use a heap (n log n).
constexpr size_t kSmallWordSymbols = 48;

std::pair<std::string, std::string> split_merge(const std::string& text, size_t index) {
  size_t space = text.find(' ');
  FATHOM_CHECK(space != std::string::npos && text.find(' ', space + 1) == std::string::npos,
               "BPE merge #" << index << " '" << text << "' must be two tokens separated by one space");
  return {text.substr(0, space), text.substr(space + 1)};
}

std::pair<std::string, std::string> parse_merge(const nlohmann::json& merge, size_t index) {
  if (merge.is_string()) return split_merge(merge.get_ref<const std::string&>(), index);
  FATHOM_CHECK(merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string(),
               "BPE merge #" << index << " must be \"a b\" or [\"a\", \"b\"], got " << merge.dump());
  return {merge[0].get<std::string>(), merge[1].get<std::string>()};
}
}  // namespace

void BpeModel::add_vocab_entry(const std::string& token, int64_t id) {
  // Ids index dense per-id tables, so absurd ids are rejected instead of allocated.
  FATHOM_CHECK(id >= 0 && id < (1 << 24), "BPE vocab id " << id << " of token '" << token << "' is out of range");
  vocab_.emplace(token, static_cast<int32_t>(id));
}

void BpeModel::add_merge(const std::string& left, const std::string& right, size_t rank) {
  auto left_id = token_to_id(left);
  auto right_id = token_to_id(right);
  FATHOM_CHECK(left_id && right_id, "BPE merge #" << rank << " '" << left << " " << right << "' uses a token missing from the vocab");
  std::string merged_token;
  merged_token.reserve(left.size() + right.size());
  merged_token.append(left).append(right);
  auto merged_id = token_to_id(merged_token);
  FATHOM_CHECK(merged_id, "BPE merge #" << rank << " result '" << merged_token << "' is missing from the vocab");
  merges_.insert(*left_id, *right_id, static_cast<uint32_t>(rank), *merged_id);
}

BpeModel BpeModel::from_json(const nlohmann::json& model, const StreamedBpeTables& streamed) {
  const std::string type = model.value("type", "BPE");
  FATHOM_CHECK(type == "BPE", "unsupported model type '" << type << "' (only BPE is implemented)");
  const auto& dropout = model.value("dropout", nlohmann::json());
  FATHOM_CHECK(dropout.is_null() || (dropout.is_number() && dropout.get<double>() == 0.0),
               "BPE dropout " << dropout.dump() << " is not supported (encoding must be deterministic)");
  for (const char* option : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto& value = model.value(option, nlohmann::json());
    FATHOM_CHECK(value.is_null() || value.get<std::string>().empty(),
                 "BPE option " << option << "=" << value.dump() << " is not supported");
  }

  BpeModel bpe;
  const auto& vocab = model.value("vocab", nlohmann::json::object());
  FATHOM_CHECK(vocab.is_object(), "BPE vocab must be an object of token -> id");
  FATHOM_CHECK(vocab.empty() || streamed.vocab.empty(), "BPE vocab given twice");
  bpe.vocab_.reserve(vocab.size() + streamed.vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    FATHOM_CHECK(id.is_number_integer(), "BPE vocab id of token '" << token << "' must be an integer, got " << id.dump());
    bpe.add_vocab_entry(token, id.get<int64_t>());
  }
  for (const auto& [token, id] : streamed.vocab) bpe.add_vocab_entry(token, id);
  int32_t max_id = -1;
  for (const auto& [token, id] : bpe.vocab_) max_id = std::max(max_id, id);
  bpe.tokens_.assign(static_cast<size_t>(max_id + 1), std::string());
  bpe.has_token_.assign(static_cast<size_t>(max_id + 1), 0);
  for (const auto& [token, id] : bpe.vocab_) {
    bpe.tokens_[static_cast<size_t>(id)] = token;
    bpe.has_token_[static_cast<size_t>(id)] = 1;
  }

  const auto& merges = model.value("merges", nlohmann::json::array());
  FATHOM_CHECK(merges.is_array(), "BPE merges must be an array");
  FATHOM_CHECK(merges.empty() || streamed.merges.empty(), "BPE merges mix the \"a b\" and [\"a\", \"b\"] forms");
  bpe.merges_ = MergeTable(merges.size() + streamed.merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    auto [left, right] = parse_merge(merges[rank], rank);
    bpe.add_merge(left, right, rank);
  }
  for (size_t rank = 0; rank < streamed.merges.size(); ++rank) {
    auto [left, right] = split_merge(streamed.merges[rank], rank);
    bpe.add_merge(left, right, rank);
  }

  for (int byte = 0; byte < 256; ++byte) {
    std::string character;
    utf8::append_code_point(character, byte_level::byte_to_code_point(static_cast<uint8_t>(byte)));
    bpe.byte_symbols_[static_cast<size_t>(byte)] = bpe.token_to_id(character).value_or(-1);
  }
  const auto& unknown = model.value("unk_token", nlohmann::json());
  if (!unknown.is_null()) {
    bpe.unknown_id_ = bpe.token_to_id(unknown.get<std::string>());
    FATHOM_CHECK(bpe.unknown_id_, "BPE unk_token '" << unknown.get<std::string>() << "' is not in the vocab");
  }
  bpe.fuse_unknown_ = model.value("fuse_unk", false);
  bpe.byte_fallback_ = model.value("byte_fallback", false);
  bpe.ignore_merges_ = model.value("ignore_merges", false);
  return bpe;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= id_limit() || !has_token_[static_cast<size_t>(id)]) return nullptr;
  return &tokens_[static_cast<size_t>(id)];
}

void BpeModel::add_unknown(std::string_view character, std::vector<int32_t>& symbols,
                           std::optional<int32_t>& pending_unknown) const {
  if (byte_fallback_) {
    size_t first_new = symbols.size();
    bool all_found = true;
    for (char byte : character) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", static_cast<unsigned>(static_cast<uint8_t>(byte)));
      auto id = token_to_id(name);
      if (!id) {
        all_found = false;
        break;
      }
      symbols.push_back(*id);
    }
    if (all_found) return;  // like HF, a pending unknown is not flushed before byte-fallback tokens
    symbols.resize(first_new);
  }
  if (!unknown_id_) return;  // HF drops characters it cannot represent when there is no unk_token
  if (pending_unknown && !fuse_unknown_) symbols.push_back(*pending_unknown);
  pending_unknown = unknown_id_;
}

void BpeModel::add_initial_symbols(std::string_view word, bool byte_level, BpeScratch& scratch) const {
  std::vector<int32_t>& symbols = scratch.symbols;
  symbols.clear();
  std::optional<int32_t> pending_unknown;
  auto add_known = [&](int32_t id) {
    if (pending_unknown) {
      symbols.push_back(*pending_unknown);
      pending_unknown.reset();
    }
    symbols.push_back(id);
  };
  if (byte_level) {
    for (char c : word) {
      const int32_t id = byte_symbols_[static_cast<uint8_t>(c)];
      if (id >= 0) {
        add_known(id);
      } else {
        std::string character;
        utf8::append_code_point(character, byte_level::byte_to_code_point(static_cast<uint8_t>(c)));
        add_unknown(character, symbols, pending_unknown);
      }
    }
  } else {
    size_t pos = 0;
    while (pos < word.size()) {
      const size_t start = pos;
      utf8::decode_next(word, pos);
      std::string_view character = word.substr(start, pos - start);
      if (auto id = token_to_id(character)) {
        add_known(*id);
      } else {
        add_unknown(character, symbols, pending_unknown);
      }
    }
  }
  if (pending_unknown) symbols.push_back(*pending_unknown);
}

void BpeModel::encode_word(std::string_view word, bool byte_level, std::vector<int32_t>& ids, BpeScratch& scratch) const {
  if (word.empty()) return;
  if (byte_level && word.size() == 1 && byte_symbols_[static_cast<uint8_t>(word[0])] >= 0) {
    ids.push_back(byte_symbols_[static_cast<uint8_t>(word[0])]);
    return;
  }
  if (ignore_merges_) {
    std::string_view lookup = word;
    if (byte_level) {
      scratch.text = byte_level::bytes_to_token(word);
      lookup = scratch.text;
    }
    if (auto id = token_to_id(lookup)) {
      ids.push_back(*id);
      return;
    }
  }
  add_initial_symbols(word, byte_level, scratch);
  std::vector<int32_t>& symbols = scratch.symbols;
  if (symbols.size() <= kSmallWordSymbols) {
    merge_small(symbols, scratch);
  } else {
    merge_large(symbols, scratch);
  }
  ids.insert(ids.end(), symbols.begin(), symbols.end());
}

void BpeModel::merge_small(std::vector<int32_t>& symbols, BpeScratch& scratch) const {
  size_t count = symbols.size();
  if (count < 2) return;
  scratch.ranks.resize(count - 1);
  scratch.merged.resize(count - 1);
  int32_t* symbol = symbols.data();
  uint32_t* rank = scratch.ranks.data();  // rank[i]: rank of the pair (symbol[i], symbol[i + 1])
  int32_t* merged = scratch.merged.data();
  for (size_t i = 0; i + 1 < count; ++i) rank[i] = merges_.find(symbol[i], symbol[i + 1], &merged[i]);
  while (count > 1) {
    // Lowest rank first, leftmost among equal ranks: the same order as HF's heap.
    size_t best = 0;
    for (size_t i = 1; i + 1 < count; ++i) {
      if (rank[i] < rank[best]) best = i;
    }
    if (rank[best] == MergeTable::kNoMerge) break;
    symbol[best] = merged[best];
    // Plain loops instead of erase(): these arrays are tiny and memmove calls cost more.
    for (size_t i = best + 1; i + 1 < count; ++i) symbol[i] = symbol[i + 1];
    for (size_t i = best + 1; i + 2 < count; ++i) {
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --count;
    if (best > 0) rank[best - 1] = merges_.find(symbol[best - 1], symbol[best], &merged[best - 1]);
    if (best + 1 < count) rank[best] = merges_.find(symbol[best], symbol[best + 1], &merged[best]);
  }
  symbols.resize(count);
}

void BpeModel::merge_large(std::vector<int32_t>& symbols, BpeScratch& scratch) const {
  const size_t count = symbols.size();
  if (count < 2) return;
  std::vector<int32_t>& previous = scratch.previous;
  std::vector<int32_t>& next = scratch.next;
  previous.resize(count);
  next.resize(count);
  for (size_t i = 0; i < count; ++i) {
    previous[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < count ? static_cast<int32_t>(i + 1) : -1;
  }
  // Heap entries pack (rank, position) so the smallest value is the lowest rank, then leftmost.
  std::vector<uint64_t>& heap = scratch.heap;
  heap.clear();
  auto push_pair = [&](int32_t position) {
    int32_t merged = -1;
    uint32_t rank = merges_.find(symbols[static_cast<size_t>(position)], symbols[static_cast<size_t>(next[position])], &merged);
    if (rank == MergeTable::kNoMerge) return;
    heap.push_back((uint64_t(rank) << 32) | uint32_t(position));
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (size_t i = 0; i + 1 < count; ++i) push_pair(static_cast<int32_t>(i));
  constexpr int32_t kRemoved = -2;
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const uint64_t top = heap.back();
    heap.pop_back();
    const uint32_t rank = static_cast<uint32_t>(top >> 32);
    const int32_t position = static_cast<int32_t>(top & 0xffffffffu);
    if (previous[position] == kRemoved || next[position] < 0) continue;
    const int32_t right = next[position];
    int32_t merged = -1;
    // An entry is stale when either side changed since it was pushed: the pair's rank no longer matches.
    if (merges_.find(symbols[static_cast<size_t>(position)], symbols[static_cast<size_t>(right)], &merged) != rank) continue;
    symbols[static_cast<size_t>(position)] = merged;
    next[position] = next[right];
    if (next[right] >= 0) previous[next[right]] = position;
    previous[right] = kRemoved;
    if (previous[position] >= 0) push_pair(previous[position]);
    if (next[position] >= 0) push_pair(position);
  }
  size_t kept = 0;
  for (int32_t i = 0; i >= 0; i = next[i]) symbols[kept++] = symbols[static_cast<size_t>(i)];
  symbols.resize(kept);
}

}  // namespace fathom::tokenizer
