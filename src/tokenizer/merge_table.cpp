#include "tokenizer/merge_table.h"

namespace fathom::tokenizer {

MergeTable::MergeTable(size_t expected_count) {
  size_t capacity = 16;
  while (capacity < expected_count * 2) capacity *= 2;  // load factor <= 0.5 keeps probes short
  entries_.assign(capacity, Entry{kEmptyKey, 0, 0});
  mask_ = capacity - 1;
}

void MergeTable::insert(int32_t left, int32_t right, uint32_t rank, int32_t merged) {
  if ((size_ + 1) * 2 > entries_.size()) grow();
  const uint64_t key = pack(left, right);
  for (uint64_t slot = hash(key);; slot = (slot + 1) & mask_) {
    Entry& entry = entries_[slot];
    if (entry.key == key) {
      entry.rank = rank;
      entry.merged = merged;
      return;
    }
    if (entry.key == kEmptyKey) {
      entry = Entry{key, rank, merged};
      ++size_;
      return;
    }
  }
}

void MergeTable::grow() {
  std::vector<Entry> old = std::move(entries_);
  entries_.assign(old.size() * 2, Entry{kEmptyKey, 0, 0});
  mask_ = entries_.size() - 1;
  size_ = 0;
  for (const Entry& entry : old) {
    if (entry.key != kEmptyKey) insert(int32_t(entry.key >> 32), int32_t(entry.key & 0xffffffffu), entry.rank, entry.merged);
  }
}

}  // namespace fathom::tokenizer
