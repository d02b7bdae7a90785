#pragma once
// Per-encode-call memo of word -> ids: natural text repeats words, and a hit skips the merge loop
// (whose merge-table lookups miss the CPU cache). Keys are views into the text being encoded, so a
// cache lives no longer than one encode call.
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace fathom::tokenizer {

class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 64;  // longer words are rare and expensive to hash

  // Where a word lives or would be inserted.
  struct Probe {
    size_t slot;
    uint32_t hash;
  };
  // Returns the cached ids of `word` (their number in *count) or nullptr; *probe is for insert().
  const int32_t* find(std::string_view word, size_t* count, Probe* probe);
  // `word` must stay alive for the cache's lifetime; `probe` comes from the find() that missed.
  void insert(const Probe& probe, std::string_view word, const int32_t* ids, size_t count);

 private:
  struct Entry {
    const char* data = nullptr;
    uint32_t size = 0;
    uint32_t ids_offset = 0;
    uint32_t ids_count = 0;
    uint32_t hash = 0;
  };
  static uint32_t hash_of(std::string_view word);
  void grow();

  std::vector<Entry> entries_;
  std::vector<int32_t> ids_;
  size_t used_ = 0;
};

}  // namespace fathom::tokenizer
