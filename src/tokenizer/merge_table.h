#pragma once
// Open-addressing map (left id, right id) -> (rank, merged id): the hot lookup of BPE merging.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fathom::tokenizer {

class MergeTable {
 public:
  static constexpr uint32_t kNoMerge = UINT32_MAX;

  explicit MergeTable(size_t expected_count = 0);
  // A repeated pair overwrites the earlier entry (HF builds a HashMap, so the last rank wins).
  void insert(int32_t left, int32_t right, uint32_t rank, int32_t merged);
  // Rank of the pair, or kNoMerge; *merged is set when found.
  uint32_t find(int32_t left, int32_t right, int32_t* merged) const {
    const uint64_t key = pack(left, right);
    for (uint64_t slot = hash(key);; slot = (slot + 1) & mask_) {
      const Entry& entry = entries_[slot];
      if (entry.key == key) {
        *merged = entry.merged;
        return entry.rank;
      }
      if (entry.key == kEmptyKey) return kNoMerge;
    }
  }
  size_t size() const { return size_; }

 private:
  struct Entry {
    uint64_t key;
    uint32_t rank;
    int32_t merged;
  };
  static constexpr uint64_t kEmptyKey = ~0ull;  // ids are non-negative, so never a real pair
  static uint64_t pack(int32_t left, int32_t right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  }
  uint64_t hash(uint64_t key) const { return ((key * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }
  void grow();

  std::vector<Entry> entries_;
  uint64_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace fathom::tokenizer
