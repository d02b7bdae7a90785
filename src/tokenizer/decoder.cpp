#include "tokenizer/decoder.h"

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace fathom::tokenizer {

void Decoder::append_steps(const nlohmann::json& config) {
  const std::string type = config.value("type", "");
  if (type == "Sequence") {
    for (const auto& child : config.at("decoders")) append_steps(child);
  } else if (type == "ByteLevel") {
    steps_.push_back({Kind::kByteLevel, nullptr, ""});
  } else if (type == "Fuse") {
    steps_.push_back({Kind::kFuse, nullptr, ""});
  } else if (type == "Replace") {
    steps_.push_back({Kind::kReplace, std::make_shared<Regex>(Regex::from_pattern_json(config.at("pattern"), "Replace decoder")),
                      config.at("content").get<std::string>()});
  } else {
    FATHOM_FAIL("unsupported decoder type '" << type << "' (supported: ByteLevel, Sequence, Fuse, Replace)");
  }
}

Decoder Decoder::from_json(const nlohmann::json& config) {
  Decoder decoder;
  if (config.is_null()) return decoder;
  decoder.configured_ = true;
  decoder.append_steps(config);
  // Per-token means: only Replace steps before the first joining step (ByteLevel or Fuse), and
  // after it only steps that are no-ops on a single string (Fuse), or a ByteLevel directly after
  // Replace steps, which works on each token's bytes.
  bool joined = false;
  for (const Step& step : decoder.steps_) {
    if (step.kind == Kind::kReplace && joined) decoder.per_token_ = false;
    if (step.kind == Kind::kByteLevel) {
      if (joined) decoder.per_token_ = false;
      decoder.byte_output_ = true;
    }
    if (step.kind != Kind::kReplace) joined = true;
  }
  return decoder;
}

std::string Decoder::replace_all(const Step& step, std::string_view text, RegexScratch& scratch) {
  std::vector<std::pair<size_t, size_t>> matches;
  step.pattern->find_all(text, matches, scratch);
  std::string out;
  size_t copied = 0;
  for (const auto& [begin, end] : matches) {
    out.append(text.substr(copied, begin - copied));
    out.append(step.content);
    copied = end;
  }
  out.append(text.substr(copied));
  return out;
}

std::string Decoder::decode(const std::vector<std::string_view>& tokens, RegexScratch& scratch) const {
  if (!configured_) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) joined.push_back(' ');
      joined.append(tokens[i]);
    }
    return joined;
  }
  std::vector<std::string> current(tokens.begin(), tokens.end());
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kReplace:
        for (std::string& token : current) token = replace_all(step, token, scratch);
        break;
      case Kind::kFuse: {
        std::string fused;
        for (const std::string& token : current) fused.append(token);
        current.assign(1, std::move(fused));
        break;
      }
      case Kind::kByteLevel: {
        std::string bytes;
        for (const std::string& token : current) bytes.append(byte_level::token_to_bytes(token));
        current.assign(1, utf8::to_lossy(bytes));
        break;
      }
    }
  }
  std::string out;
  for (const std::string& token : current) out.append(token);
  return out;
}

std::string Decoder::token_piece(std::string_view token, RegexScratch& scratch) const {
  std::string piece(token);
  for (const Step& step : steps_) {
    if (step.kind == Kind::kReplace) piece = replace_all(step, piece, scratch);
    if (step.kind == Kind::kByteLevel) piece = byte_level::token_to_bytes(piece);
  }
  return piece;
}

}  // namespace fathom::tokenizer
