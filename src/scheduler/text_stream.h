#pragma once
// A request's streamed text: incremental detokenization (when a tokenizer is present) followed by stop-string
// matching with hold-back.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/stop_string_matcher.h"
#include "tokenizer/tokenizer.h"

namespace fathom::scheduler {

class TextStream {
 public:
  // tokenizer may be null: no text is produced and stop strings never match. Throws fathom::Error when the
  // tokenizer cannot decode token by token.
  TextStream(const tokenizer::Tokenizer* tokenizer, bool skip_special_tokens, std::vector<std::string> stop_strings);

  struct Piece {
    std::string text;                  // newly streamable text
    std::optional<std::string> match;  // a stop string ended the text (it and anything after are dropped)
  };
  // Decodes one generated token. !match_stop_strings: its text streams without being matched (nor held back).
  Piece push(int32_t token_id, bool match_stop_strings = true);
  // End of generation without a stop-string match: everything still held back.
  std::string finish();

 private:
  std::unique_ptr<tokenizer::IncrementalDetokenizer> detokenizer_;
  StopStringMatcher matcher_;
};

}  // namespace fathom::scheduler
