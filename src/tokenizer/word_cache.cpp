#include "tokenizer/word_cache.h"

namespace fathom::tokenizer {

uint32_t WordCache::hash_of(std::string_view word) {
  uint64_t hash = 0x9E3779B97F4A7C15ull ^ word.size();
  size_t i = 0;
  for (; i + 8 <= word.size(); i += 8) {
    uint64_t chunk;
    std::memcpy(&chunk, word.data() + i, 8);
    hash = (hash ^ chunk) * 0xFF51AFD7ED558CCDull;
    hash ^= hash >> 32;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, word.data() + i, word.size() - i);
  hash = (hash ^ tail) * 0xC4CEB9FE1A85EC53ull;
  hash ^= hash >> 29;
  return static_cast<uint32_t>(hash);
}

const int32_t* WordCache::find(std::string_view word, size_t* count, Probe* probe) {
  if (entries_.empty()) entries_.resize(1024);
  const uint32_t hash = hash_of(word);
  const size_t mask = entries_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Entry& entry = entries_[i];
    if (entry.data == nullptr) {
      *probe = Probe{i, hash};
      return nullptr;
    }
    if (entry.hash == hash && entry.size == word.size() && std::memcmp(entry.data, word.data(), word.size()) == 0) {
      *count = entry.ids_count;
      return ids_.data() + entry.ids_offset;
    }
  }
}

void WordCache::insert(const Probe& probe, std::string_view word, const int32_t* ids, size_t count) {
  entries_[probe.slot] = Entry{word.data(), static_cast<uint32_t>(word.size()), static_cast<uint32_t>(ids_.size()),
                               static_cast<uint32_t>(count), probe.hash};
  ids_.insert(ids_.end(), ids, ids + count);
  if (++used_ * 2 > entries_.size()) grow();
}

void WordCache::grow() {
  std::vector<Entry> old(entries_.size() * 2);
  old.swap(entries_);
  const size_t mask = entries_.size() - 1;
  for (const Entry& entry : old) {
    if (entry.data == nullptr) continue;
    size_t i = entry.hash & mask;
    while (entries_[i].data != nullptr) i = (i + 1) & mask;
    entries_[i] = entry;
  }
}

}  // namespace fathom::tokenizer
