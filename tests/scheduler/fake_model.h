#pragma once
// Test doubles for the scheduler: a "model" whose next token is a function of the token sequence it reads back
// from its own KV store (so any KV slot mix-up changes the output), and a byte-level tokenizer (id = byte).
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "executor/logits_source.h"
#include "sampling/sampler.h"

namespace fathom::testing {

inline uint64_t mix64(uint64_t value) {
  value += 0x9E3779B97F4A7C15ull;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
  return value ^ (value >> 31);
}

inline uint64_t hash_tokens(const std::vector<int32_t>& tokens) {
  uint64_t hash = 0x1234;
  for (int32_t token : tokens) hash = mix64(hash ^ static_cast<uint64_t>(token));
  return hash;
}

// Picks the next token of a sequence (prompt + generated so far).
using NextTokenFn = std::function<int32_t(const std::vector<int32_t>& sequence)>;

// Default: a pseudo-random token in [2, vocab) (0 and 1 are never produced: 1 serves as EOS in the tests).
inline NextTokenFn hashed_next_token(int64_t vocab) {
  return [vocab](const std::vector<int32_t>& sequence) {
    return static_cast<int32_t>(2 + hash_tokens(sequence) % static_cast<uint64_t>(vocab - 2));
  };
}

class FakeModel : public executor::LogitsSource {
 public:
  FakeModel(int64_t vocab, int64_t num_slots, NextTokenFn next = {})
      : vocab_(vocab), kv_(static_cast<size_t>(num_slots), -1), next_(next ? std::move(next) : hashed_next_token(vocab)) {}

  int64_t vocab_size() const override { return vocab_; }

  // Logits of a sequence: a spread of pseudo-random values with the chosen next token clearly on top.
  std::vector<float> logits_for(const std::vector<int32_t>& sequence) const {
    std::vector<float> row(static_cast<size_t>(vocab_));
    const uint64_t base = hash_tokens(sequence);
    for (int64_t t = 0; t < vocab_; ++t) row[static_cast<size_t>(t)] = static_cast<float>(mix64(base + static_cast<uint64_t>(t)) % 1000) / 400.0f;
    row[static_cast<size_t>(next_(sequence))] = 4.0f;
    return row;
  }
  int32_t next_token(const std::vector<int32_t>& sequence) const { return next_(sequence); }

  std::vector<float> forward(const std::vector<executor::ForwardChunk>& chunks) override {
    for (const executor::ForwardChunk& chunk : chunks) {
      for (size_t i = 0; i < chunk.new_tokens.size(); ++i) {
        kv_.at(static_cast<size_t>(chunk.kv_slots[static_cast<size_t>(chunk.num_cached) + i])) = chunk.new_tokens[i];
      }
      tokens_computed_ += static_cast<int64_t>(chunk.new_tokens.size());
    }
    std::vector<float> logits;
    for (const executor::ForwardChunk& chunk : chunks) {
      if (!chunk.needs_logits) continue;
      std::vector<int32_t> sequence;  // read back through the slots: what the model "attends" to
      for (int64_t position = 0; position < chunk.num_cached + static_cast<int64_t>(chunk.new_tokens.size()); ++position) {
        sequence.push_back(kv_.at(static_cast<size_t>(chunk.kv_slots[static_cast<size_t>(position)])));
      }
      const std::vector<float> row = logits_for(sequence);
      logits.insert(logits.end(), row.begin(), row.end());
    }
    ++forward_calls_;
    return logits;
  }

  // forward, plus each chunk's scored rows (prompt logprobs) scored on their logits, read back through the slots as
  // well.
  executor::ForwardOutput forward_sampled(const std::vector<executor::ForwardChunk>& chunks) override {
    for (const executor::ForwardChunk& chunk : chunks) {
      if (chunk.device_sampling) throw std::logic_error("FakeModel samples on the host");
    }
    executor::ForwardOutput output;
    output.logits = forward(chunks);  // writes every chunk's tokens into its slots first
    for (const executor::ForwardChunk& chunk : chunks) {
      for (int64_t r = 0; r < chunk.num_scored_rows(); ++r) {
        std::vector<int32_t> sequence;
        for (int64_t position = 0; position <= chunk.num_cached + chunk.scored_row_begin + r; ++position) {
          sequence.push_back(kv_.at(static_cast<size_t>(chunk.kv_slots[static_cast<size_t>(position)])));
        }
        const std::vector<float> row = logits_for(sequence);
        output.scored.push_back(sampling::score_token(row.data(), vocab_, chunk.scored_targets[static_cast<size_t>(r)],
                                                      chunk.scored_top_n));
      }
    }
    return output;
  }

  int64_t tokens_computed() const { return tokens_computed_; }
  int64_t forward_calls() const { return forward_calls_; }

 private:
  int64_t vocab_;
  std::vector<int32_t> kv_;  // token id stored in each slot
  NextTokenFn next_;
  int64_t tokens_computed_ = 0;
  int64_t forward_calls_ = 0;
};

// Greedy continuation under `next` (what a correct engine must produce with temperature 0).
inline std::vector<int32_t> reference_greedy(const FakeModel& model, std::vector<int32_t> prompt, int64_t max_new,
                                             int32_t eos = -1) {
  std::vector<int32_t> output;
  while (static_cast<int64_t>(output.size()) < max_new) {
    const int32_t token = model.next_token(prompt);
    output.push_back(token);
    prompt.push_back(token);
    if (token == eos) break;
  }
  return output;
}

// GPT-2 byte <-> unicode table used by byte-level BPE.
inline std::string byte_level_char(int byte) {
  static const std::vector<int> code_points = [] {
    std::vector<int> table(256, -1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      table[static_cast<size_t>(b)] = printable ? b : 256 + extra++;
    }
    return table;
  }();
  const int cp = code_points[static_cast<size_t>(byte)];
  std::string utf8;
  if (cp < 0x80) utf8 += static_cast<char>(cp);
  else {
    utf8 += static_cast<char>(0xC0 | (cp >> 6));
    utf8 += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return utf8;
}

// tokenizer.json of a byte-level BPE without merges: token id b is byte b; 256 = "<eos>", 257 = "<bos>".
inline std::string byte_tokenizer_json() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_char(b)] = b;
  nlohmann::json tokenizer = {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array({
           {{"id", 256}, {"content", "<eos>"}, {"special", true}},
           {{"id", 257}, {"content", "<bos>"}, {"special", true}},
       })},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
  };
  return tokenizer.dump();
}

inline std::string byte_tokenizer_config_json() { return R"({"eos_token": "<eos>", "bos_token": "<bos>"})"; }

inline std::vector<int32_t> bytes_of(const std::string& text) {
  std::vector<int32_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

}  // namespace fathom::testing
