#include "scheduler/text_stream.h"

namespace fathom::scheduler {

TextStream::TextStream(const tokenizer::Tokenizer* tokenizer, bool skip_special_tokens, std::vector<std::string> stop_strings)
    : matcher_(tokenizer ? std::move(stop_strings) : std::vector<std::string>{}) {
  if (tokenizer) detokenizer_ = std::make_unique<tokenizer::IncrementalDetokenizer>(*tokenizer, skip_special_tokens);
}

TextStream::Piece TextStream::push(int32_t token_id, bool match_stop_strings) {
  Piece piece;
  if (!detokenizer_) return piece;
  const std::string text = detokenizer_->push(token_id);
  StopStringMatcher::Result result = match_stop_strings ? matcher_.push(text) : matcher_.push_unmatched(text);
  piece.text = std::move(result.text);
  piece.match = std::move(result.match);
  return piece;
}

std::string TextStream::finish() {
  if (!detokenizer_) return {};
  StopStringMatcher::Result result = matcher_.push(detokenizer_->flush());
  // A stop string completed by the final bytes still counts as matched text to drop, but the generation already
  // ended for another reason; report only what precedes it.
  return result.text + matcher_.flush();
}

}  // namespace fathom::scheduler
